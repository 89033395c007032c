#!/usr/bin/env python3
# torch_check.py — recomputes every module saved by t/torch-check.lua with PyTorch autograd (float64) and compares output, dgrad, wgrads.
# usage: python3 t/torch_check.py DIR   (prints TAP; "1..0 # SKIP" when torch is not importable)
import json, math, os, sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except Exception as e:  # no torch here: nothing to compare against
    print("1..0 # SKIP torch is not importable (%s)" % type(e).__name__)
    sys.exit(0)

TOL = {"f32": 1e-4, "bf16": 2e-2}  # relative L2 against float64 on the same (bf16-representable) weights and inputs

d = sys.argv[1]
man = json.load(open(os.path.join(d, "manifest.json")))
dev = "cuda" if torch.cuda.is_available() else "cpu"
n = 0
failed = 0


def load(name, shape=None):
    a = np.fromfile(os.path.join(d, name), dtype="<f4").astype(np.float64)
    t = torch.from_numpy(a).to(dev)
    return t.reshape(shape) if shape is not None else t


def ok(cond, what):
    global n, failed
    n += 1
    if not cond:
        failed += 1
    print(("ok" if cond else "not ok") + " %d - %s" % (n, what), flush=True)


def rel(a, b):
    a = a.detach().reshape(-1).to(torch.float64)
    b = b.detach().reshape(-1).to(torch.float64)
    den = b.norm().item()
    num = (a - b).norm().item()
    return num / den if den > 0 else num


for e in man["modules"]:
    kind, dt, B, T, C, NH, V, eps = e["kind"], e["dtype"], e["B"], e["T"], e["C"], e["NH"], e["V"], e["eps"]
    label = "%s(%s,%s) %s" % (kind, e["norm"], e["activation"], dt) if kind in ("LayerNormMLP", "TransformerLayer") else "%s %s" % (kind, dt)
    if kind == "CausalSelfAttention":
        label += " (head dim %d, T %d)" % (C // NH, T)
    P = {}
    for p in e["params"]:
        P[p["name"]] = load(p["data"], p["shape"]).requires_grad_(True)

    def norm(x, prefix, kind_):
        w = P[prefix + ".weight"]
        if kind_ == "rmsnorm":
            return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w
        return F.layer_norm(x, (x.shape[-1],), w, P.get(prefix + ".bias"), eps)

    def linear(x, prefix):
        return F.linear(x, P[prefix + ".weight"], P.get(prefix + ".bias"))

    def mlp(x, prefix):
        h = linear(norm(x, prefix + ".norm", e["norm"]), prefix + ".fc1")
        if e["activation"] == "swiglu":
            a, b = h.chunk(2, dim=-1)
            h = F.silu(a) * b
        else:
            h = F.gelu(h, approximate="tanh")
        return linear(h, prefix + ".fc2")

    def attention(x, prefix):
        qkv = linear(x, prefix + ".qkv")
        q, k, v = qkv.split(C, dim=-1)
        D = C // NH
        q, k, v = (t.reshape(B, T, NH, D).transpose(1, 2) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        return linear(o, prefix + ".proj")

    if kind == "Embedding":
        idx = load(e["x"], (B, T)).long()
        y = P["m.wte"][idx] + P["m.wpe"][:T]
        x = None
    else:
        x = load(e["x"], (B * T, C) if kind == "LMHead" else (B, T, C)).requires_grad_(True)
        if kind == "Linear":
            y = linear(x, "m")
        elif kind in ("LayerNorm", "RMSNorm"):
            y = norm(x, "m", "rmsnorm" if kind == "RMSNorm" else "layernorm")
        elif kind == "LayerNormLinear":
            y = linear(norm(x, "m.norm", e["norm"]), "m")
        elif kind == "LayerNormMLP":
            y = mlp(x, "m")
        elif kind == "CausalSelfAttention":
            y = attention(x, "m")
        elif kind == "TransformerLayer":
            h = x + attention(norm(x, "m.attn_norm", e["norm"]), "m.attn")
            y = h + mlp(h, "m.mlp")
        elif kind == "LMHead":
            logits = linear(norm(x, "m.norm", e["norm"]), "m")
            tgt = load(e["targets"]).long()
            y = F.cross_entropy(logits, tgt, ignore_index=-1, reduction="mean")
        else:
            raise SystemExit("unknown module kind " + kind)
    tol = TOL[dt]
    if kind == "LMHead":
        y_tg = load(e["y"])
        r = abs(y_tg[0].item() - y.item()) / abs(y.item())
        ok(r <= tol, "%s: loss %.6g vs torch %.6g (relative %.2e <= %g)" % (label, y_tg[0].item(), y.item(), r, tol))
        y.backward()
    else:
        r = rel(load(e["y"]), y)
        ok(r <= tol, "%s: forward (relative L2 %.2e <= %g)" % (label, r, tol))
        y.backward(load(e["dy"], tuple(y.shape)))
    if x is not None and "dx" in e:
        r = rel(load(e["dx"]), x.grad)
        ok(r <= tol, "%s: dgrad (relative L2 %.2e <= %g)" % (label, r, tol))
    for p in e["params"]:
        g = P[p["name"]].grad
        r = rel(load(p["grad"]), g if g is not None else torch.zeros_like(P[p["name"]]))
        ok(r <= tol, "%s: wgrad of %s (relative L2 %.2e <= %g)" % (label, p["name"], r, tol))

print("1..%d" % n)
print("# tegraph device %s, torch %s on %s" % (man["device"], torch.__version__, dev))
sys.exit(1 if failed else 0)
