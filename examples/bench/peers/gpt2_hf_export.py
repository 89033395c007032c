"""A small GPT-2 in Hugging Face GPT2LMHeadModel's layout, written here in PyTorch: random weights saved as
model.safetensors (HF names, Conv1D [in, out] weights) and its logits for a fixed input, for
examples/bench/gpt2_hf_check.lua, which loads the file into tegraph's nn.GPT and compares the logits.

  python3 examples/bench/peers/gpt2_hf_export.py --out /tmp/gpt2hf     # writes model.safetensors, logits.safetensors
  tegraph run examples/bench/gpt2_hf_check.lua --dir /tmp/gpt2hf [--dtype bf16]

The safetensors files are written by this script itself (8-byte header length, JSON header, raw data).
"""
import argparse
import json
import math
import os
import struct

import torch
import torch.nn.functional as F


def conv1d(x, w, b):  # HF Conv1D: y = x @ w + b with w [in, out]
    return x @ w + b


def gelu_new(x):  # GPT-2's tanh approximation
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def forward(p, idx, layers, heads):
    B, T = idx.shape
    x = p["wte.weight"][idx] + p["wpe.weight"][:T]
    C = x.shape[-1]
    for l in range(layers):
        h = f"h.{l}."
        a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], 1e-5)
        qkv = conv1d(a, p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"])
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (t.view(B, T, heads, C // heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + conv1d(y, p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"])
        m = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], 1e-5)
        m = gelu_new(conv1d(m, p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"]))
        x = x + conv1d(m, p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    return x @ p["wte.weight"].t()  # the head tied to the token table


def save_safetensors(path, tensors, metadata):
    names = sorted(tensors)
    header, off, blobs = {"__metadata__": metadata}, 0, []
    for n in names:
        t = tensors[n].contiguous().cpu()
        dtype = {torch.float32: "F32", torch.int32: "I32"}[t.dtype]
        data = t.numpy().tobytes() if hasattr(t, "numpy") else bytes(t.untyped_storage())
        header[n] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    C, V = a.width, a.vocab
    p = {"wte.weight": torch.randn(V, C) * 0.02, "wpe.weight": torch.randn(a.context, C) * 0.01,
         "ln_f.weight": 1 + 0.1 * torch.randn(C), "ln_f.bias": 0.1 * torch.randn(C)}
    for l in range(a.layers):
        h = f"h.{l}."
        for n, shape in [("ln_1.weight", (C,)), ("ln_1.bias", (C,)), ("ln_2.weight", (C,)), ("ln_2.bias", (C,)),
                         ("attn.c_attn.weight", (C, 3 * C)), ("attn.c_attn.bias", (3 * C,)),
                         ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)),
                         ("mlp.c_fc.weight", (C, 4 * C)), ("mlp.c_fc.bias", (4 * C,)),
                         ("mlp.c_proj.weight", (4 * C, C)), ("mlp.c_proj.bias", (C,))]:
            base = 1.0 if n.endswith("weight") and n.startswith("ln") else 0.0
            p[h + n] = base + (0.1 if n.startswith("ln") else 0.02) * torch.randn(*shape)
    idx = torch.randint(0, V, (a.batch, a.context))
    with torch.no_grad():
        logits = forward(p, idx, a.layers, a.heads)
    os.makedirs(a.out, exist_ok=True)
    meta = {"vocab": str(V), "context": str(a.context), "width": str(C), "layers": str(a.layers), "heads": str(a.heads)}
    save_safetensors(os.path.join(a.out, "model.safetensors"), {"transformer." + k: v for k, v in p.items()}, meta)
    save_safetensors(os.path.join(a.out, "logits.safetensors"), {"idx": idx.to(torch.int32), "logits": logits}, meta)
    print(f"wrote {a.out}/model.safetensors and logits.safetensors (max |logit| {logits.abs().max().item():.4f})")


if __name__ == "__main__":
    main()
