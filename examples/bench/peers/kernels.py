"""PyTorch peer of examples/bench/ops.lua's attention and GEMM rows: causal attention through each
scaled_dot_product_attention backend PyTorch has here (FlashAttention, cuDNN, memory-efficient), an FP8 (e4m3)
GEMM through torch._scaled_mm and the bf16 GEMM, on one GPU.

  python3 examples/bench/peers/kernels.py [--iters 20] [--gemm 8192]

Attention shapes are ops.lua's gpt2 (8 x 12 heads x 1024 tokens, head dim 64) and large (2 x 32 x 2048, head
dim 128), bf16. Forward is timed alone; backward alone too (autograd.grad on a kept graph, so no forward is in
it). TFLOP/s counts causal work as ops.lua does: forward 2 b t^2 C (C = heads x head dim), backward 2.5x that.
Each figure is the median over --iters calls, each between two CUDA events, after 3 warm-up calls.
"""
import argparse
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from common import device_ms, require_cuda

SHAPES = [  # name, batch, heads, tokens, head dim
    ("gpt2", 8, 12, 1024, 64),
    ("large", 2, 32, 2048, 128),
]
BACKENDS = [
    ("flash", SDPBackend.FLASH_ATTENTION),
    ("cudnn", SDPBackend.CUDNN_ATTENTION),
    ("efficient", SDPBackend.EFFICIENT_ATTENTION),
]


def attention(name, b, h, t, d, iters):
    q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16)
    fwd_flops = 2 * b * t * t * h * d
    for label, backend in BACKENDS:
        try:
            with sdpa_kernel(backend):
                fwd = device_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), iters)
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                bwd = device_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), iters)
            print(f"sdpa {label} {name} (b {b}, heads {h}, t {t}, head dim {d}): forward {fwd:.3f} ms "
                  f"{fwd_flops / fwd / 1e9:.0f} TFLOP/s, backward {bwd:.3f} ms {2.5 * fwd_flops / bwd / 1e9:.0f} TFLOP/s",
                  flush=True)
        except Exception as e:  # a backend this build or GPU lacks
            print(f"sdpa {label} {name}: not available ({type(e).__name__}: {str(e)[:120]})", flush=True)


def gemms(n, iters):
    flops = 2 * n ** 3
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # _scaled_mm wants B column-major
    one = torch.tensor(1.0, device="cuda")
    try:
        ms = device_ms(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), iters)
        print(f"fp8 e4m3 scaled_mm {n}^3 (bf16 out): {ms:.3f} ms {flops / ms / 1e9:.0f} TFLOP/s", flush=True)
    except Exception as e:  # FP8 needs sm_89 or later
        print(f"fp8 e4m3 scaled_mm {n}^3: not available ({type(e).__name__}: {str(e)[:120]})", flush=True)
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = device_ms(lambda: x @ y, iters)
    print(f"bf16 matmul {n}^3: {ms:.3f} ms {flops / ms / 1e9:.0f} TFLOP/s", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=20, help="timed calls per row (median)")
    ap.add_argument("--gemm", type=int, default=8192, help="GEMM size N (N x N x N; 0: skip the GEMMs)")
    args = ap.parse_args()
    if args.iters < 1 or args.gemm < 0:
        ap.error("--iters must be positive and --gemm not negative")
    require_cuda()
    for shape in SHAPES:
        attention(*shape, args.iters)
    if args.gemm:
        gemms(args.gemm, args.iters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
