"""PyTorch twin of tegraph's nn.GPT training recipe, for the bf16 quality study (examples/bench/bf16_study.lua).

The model is the one nn.GPT computes: learned token and position embeddings, pre-norm blocks (LayerNorm, one
fused QKV projection with [q | k | v] per token and head h at [h*D, (h+1)*D), causal softmax attention, output
projection added to the residual, LayerNorm, GELU (tanh) MLP added to the residual), a final LayerNorm and an LM
head tied to the token table; cross-entropy in f32. The training is bf16_study.lua's: AdamW (beta1 0.9, beta2
--beta2, eps 1e-8, weight decay on matrices only), global-norm clip, cosine schedule with linear warmup
(tegraph.optim.cosine_schedule), the gradient of the mean over M microbatches.

  # the same initial weights and the same windows as a tegraph run that wrote them:
  python3 examples/bench/peers/gpt_twin.py --text corpus.txt --init init.safetensors --windows windows.txt \
      --dtype bf16 --csv twin_bf16.csv
  # without --init: GPT-2's initialisation (std 0.02, residual projections 0.02 / sqrt(2 * layers))

--dtype bf16 runs the forward under torch.autocast(bfloat16) with f32 parameters, gradients and optimizer
(PyTorch's mixed precision); --dtype f32 runs in f32 with TF32 off. The windows file has one line per
microbatch, "step microbatch offset_1 ... offset_B" (0-based byte offsets; '#' lines are comments): microbatch
m of step s trains on x = bytes[o, o + T), y = bytes[o + 1, o + T + 1). Without --windows the offsets are drawn
from torch's generator (--seed). --init reads a safetensors file (F32 or BF16 tensors named as tegraph names
its parameters: embed.wte, embed.wpe, h.N.attn_norm.*, h.N.attn.qkv.*, h.N.attn.proj.*, h.N.mlp.norm.*,
h.N.mlp.fc1.*, h.N.mlp.fc2.*, lm_head.norm.*) with a few lines of json + torch.

Prints the loss every 50 steps, then the mean loss of the last --tail steps and the steady tokens/s (steps 3..);
--csv writes step,loss,lr,grad_norm,ms per step.
"""
import argparse
import json
import math
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def read_safetensors(path):
    """name -> f32 CPU tensor of a safetensors file: 8-byte little-endian header length, JSON header, data."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise SystemExit(f"{path}: truncated (shorter than the 8-byte header length)")
    (hlen,) = struct.unpack("<Q", blob[:8])
    if 8 + hlen > len(blob):
        raise SystemExit(f"{path}: header length {hlen} runs past the end of the file ({len(blob)} bytes)")
    header = json.loads(blob[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = DTYPES.get(info["dtype"])
        if dt is None:
            raise SystemExit(f"{path}: tensor {name}: dtype {info['dtype']} is not supported here")
        lo, hi = info["data_offsets"]
        raw = bytearray(blob[base + lo:base + hi])
        t = torch.frombuffer(raw, dtype=dt) if raw else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"]).float()
    return out


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, context, width, layers, heads):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        std_res = 0.02 / math.sqrt(2 * layers)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p) if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_f.weight" \
                    else nn.init.zeros_(p)
            else:
                nn.init.normal_(p, std=std_res if name.endswith("proj.weight") or name.endswith("fc2.weight") else 0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe.weight[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))

    def tegraph_names(self):
        """tegraph's parameter name -> this model's parameter."""
        m = {"embed.wte": self.wte.weight, "embed.wpe": self.wpe.weight, "lm_head.norm.weight": self.ln_f.weight,
             "lm_head.norm.bias": self.ln_f.bias}
        for i, blk in enumerate(self.blocks):
            for tg_name, mod in (("attn_norm", blk.ln1), ("attn.qkv", blk.qkv), ("attn.proj", blk.proj),
                                 ("mlp.norm", blk.ln2), ("mlp.fc1", blk.fc1), ("mlp.fc2", blk.fc2)):
                m[f"h.{i}.{tg_name}.weight"] = mod.weight
                m[f"h.{i}.{tg_name}.bias"] = mod.bias
        return m


def load_init(model, path):
    tensors = read_safetensors(path)
    want = model.tegraph_names()
    missing = sorted(set(want) - set(tensors))
    extra = sorted(set(tensors) - set(want))
    if missing or extra:
        raise SystemExit(f"{path}: tensors do not match the model (missing {missing[:5]}, extra {extra[:5]})")
    with torch.no_grad():
        for name, p in want.items():
            t = tensors[name]
            if tuple(t.shape) != tuple(p.shape):
                raise SystemExit(f"{path}: {name} is {list(t.shape)}, the model's is {list(p.shape)}")
            p.copy_(t)


def read_windows(path, batch, micro):
    """{step: [offsets of microbatch 1, ...]} from "step microbatch o_1 ... o_B" lines."""
    steps = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            v = [int(x) for x in line.split()]
            if len(v) != 2 + batch:
                raise SystemExit(f"{path}:{n}: expected step, microbatch and {batch} offsets, got {len(v)} numbers")
            steps.setdefault(v[0], {})[v[1]] = v[2:]
    out = {}
    for s, mbs in steps.items():
        if sorted(mbs) != list(range(1, micro + 1)):
            raise SystemExit(f"{path}: step {s} has microbatches {sorted(mbs)}, expected 1..{micro}")
        out[s] = [mbs[m] for m in range(1, micro + 1)]
    return out


def cosine(step, lr, min_lr, warmup, total):
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    span = max(1, total - warmup)
    progress = min(1.0, max(0.0, (step - warmup) / span))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--text", required=True)
    ap.add_argument("--init", help="initial weights (safetensors, tegraph's names)")
    ap.add_argument("--windows", help="window offsets per microbatch (bf16_study.lua --windows)")
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--width", type=int, default=384)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--microbatches", type=int, default=2)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--tail", type=int, default=50)
    ap.add_argument("--csv")
    args = ap.parse_args()

    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(args.seed)
    with open(args.text, "rb") as f:
        raw = f.read()
    T, B, M = args.context, args.batch, args.microbatches
    if len(raw) < T + 1:
        raise SystemExit(f"{args.text}: {len(raw)} bytes, too few for windows of {T} (+1)")
    tokens = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(dev).long()
    windows = read_windows(args.windows, B, M) if args.windows else None
    if windows is not None and any(s not in windows for s in range(1, args.steps + 1)):
        raise SystemExit(f"{args.windows}: has no windows for some of steps 1..{args.steps}")

    model = GPT(256, T, args.width, args.layers, args.heads)
    if args.init:
        load_init(model, args.init)
    model.to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, args.beta2), eps=1e-8)
    ar = torch.arange(T + 1, device=dev)
    last = len(raw) - T - 1
    gen = torch.Generator().manual_seed(args.seed)
    csv = open(args.csv, "w") if args.csv else None
    if csv:
        csv.write("step,loss,lr,grad_norm,ms\n")
    print(f"gpt_twin: {args.text} ({len(raw)} bytes) | {args.dtype}{' autocast' if args.dtype == 'bf16' else ''} on "
          f"{dev}, {args.layers} layers, width {args.width}, heads {args.heads}, context {T}, {B} x {M} sequences, "
          f"{args.steps} steps, init {'from ' + args.init if args.init else 'GPT-2 (seed %d)' % args.seed}")
    losses = []
    t_steady = None
    for step in range(1, args.steps + 1):
        lr = cosine(step, args.lr, args.min_lr, args.warmup, args.steps)
        for g in opt.param_groups:
            g["lr"] = lr
        t0 = time.perf_counter()
        total = torch.zeros((), device=dev)
        for m in range(M):
            offs = windows[step][m] if windows else torch.randint(0, last + 1, (B,), generator=gen).tolist()
            w = tokens[torch.tensor(offs, device=dev)[:, None] + ar]
            x, y = w[:, :T], w[:, 1:]
            if args.dtype == "bf16":
                with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                    loss = model(x, y)
            else:
                loss = model(x, y)
            (loss / M).backward()
            total += loss.detach()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip if args.clip > 0 else float("inf"))
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_v = total.item() / M
        norm_v = norm.item()
        ms = (time.perf_counter() - t0) * 1e3
        if not math.isfinite(loss_v):
            raise SystemExit(f"step {step}: non-finite loss {loss_v}")
        losses.append(loss_v)
        if csv:
            csv.write(f"{step},{loss_v:.6f},{lr:.6g},{norm_v:.6g},{ms:.3f}\n")
        if step == 2:
            t_steady = time.perf_counter()
        if step % 50 == 0 or step == 1:
            print(f"step {step:4d}  loss {loss_v:.4f}  lr {lr:.2e}  norm {norm_v:.3f}  {ms:.1f} ms")
    elapsed = time.perf_counter() - t_steady if t_steady else 0.0
    tok_s = (args.steps - 2) * M * B * T / elapsed if elapsed > 0 else 0.0
    n = min(args.tail, len(losses))
    print(f"last-{n}-step mean loss {sum(losses[-n:]) / n:.5f} | {tok_s:.0f} tokens/s (steps 3..{args.steps})")
    if csv:
        csv.close()


if __name__ == "__main__":
    sys.exit(main())
