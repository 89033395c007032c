"""PyTorch peer of examples/gpt.lua at GPT-2 124M size: tokens per second of whole training steps.

One step: forward of --batch sequences of --context tokens under bf16 autocast, cross-entropy over the vocabulary
(logits in f32), backward, fused AdamW, gradients set to None. The model: learned token and position
embeddings, --layers pre-norm blocks (see common.py) of width 64 x layers with layers heads (GPT-2 124M: 12, 768,
12), a final LayerNorm and an LM head tied to the token table.

  python3 examples/bench/peers/gpt2.py                       # vocab 50257, eager
  python3 examples/bench/peers/gpt2.py --vocab-pad 64        # table rounded up to 50304, as gpt.lua's default
  python3 examples/bench/peers/gpt2.py --modes eager,compile # also the model through torch.compile

--vocab-pad N rounds the token table (and the logits) up to a multiple of N while the tokens stay below --vocab,
as `examples/gpt.lua --vocab-pad N` does; PEER_VOCAB and PEER_VOCAB_PAD in the environment set the defaults.
Prints one line per mode: the median step time over --steps steps after 5 warm-up steps, tokens/s, TFLOP/s by
llm.c's count (6 N per token for N parameters, plus attention) and the last loss.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from common import Block, median, require_cuda


class GPT(nn.Module):
    def __init__(self, vocab_table, context, width, layers, heads):
        super().__init__()
        self.wte = nn.Embedding(vocab_table, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, 4 * width) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # LM head tied to the token table
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def run(args, mode, table):
    torch.manual_seed(0)
    width = 64 * args.layers
    model = GPT(table, args.context, width, args.layers, args.layers).cuda()
    nparams = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    fwd = torch.compile(model) if mode == "compile" else model
    idx = torch.randint(0, args.vocab, (args.batch, args.context), device="cuda")
    targets = torch.randint(0, args.vocab, (args.batch, args.context), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        loss = step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    ms = median(times)
    tokens = args.batch * args.context
    flops = 6 * nparams * tokens + 6 * args.layers * width * args.context * tokens
    print(f"torch gpt2 {mode}: layers {args.layers} width {width} vocab {args.vocab} (table {table}) "
          f"batch {args.batch} x {args.context}, {nparams / 1e6:.1f}M parameters: median {ms:.2f} ms/step, "
          f"{tokens / ms * 1e3:,.0f} tokens/s, {flops / ms / 1e9:.0f} TFLOP/s, loss {loss.item():.3f}, "
          f"peak memory {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB (max_memory_allocated over the timed steps)",
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=8, help="sequences per step")
    ap.add_argument("--context", type=int, default=1024, help="tokens per sequence")
    ap.add_argument("--layers", type=int, default=12, help="blocks (width 64 x layers, layers heads)")
    ap.add_argument("--vocab", type=int, default=int(os.environ.get("PEER_VOCAB", 50257)), help="token ids")
    ap.add_argument("--vocab-pad", type=int, default=int(os.environ.get("PEER_VOCAB_PAD", 1)),
                    help="round the token table up to a multiple of N (64: 50304 for GPT-2)")
    ap.add_argument("--steps", type=int, default=30, help="timed steps (median) after 5 warm-up steps")
    ap.add_argument("--modes", default="eager", help="comma-separated: eager, compile")
    args = ap.parse_args()
    if min(args.batch, args.context, args.layers, args.vocab, args.vocab_pad, args.steps) < 1:
        ap.error("--batch, --context, --layers, --vocab, --vocab-pad and --steps must be positive")
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in ("eager", "compile"):
            ap.error(f"unknown mode '{m}' (modes: eager, compile)")
    require_cuda()
    table = (args.vocab + args.vocab_pad - 1) // args.vocab_pad * args.vocab_pad
    for mode in modes:
        run(args, mode, table)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
