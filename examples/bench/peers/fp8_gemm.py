"""PyTorch peer of examples/bench/fp8_gemm: FP8 GEMM (torch._scaled_mm, E4M3 x E4M3 -> bf16) and bf16 matmul TFLOP/s.

  python3 examples/bench/peers/fp8_gemm.py [--n 8192] [--iters 20]

The operands are tegraph's: A (N, N) and B (N, N) row-major E4M3 from standard normal values, D = A @ B^T in
bf16, per-tensor scales of 1 as f32 device tensors, no fast accumulation (tegraph's cuBLASLt call does not ask
for it either). Each figure is the median over --iters calls, each between two CUDA events, after 3 warm-up
calls (common.device_ms).
"""
import argparse
import sys

import torch

from common import device_ms, require_cuda


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=8192, help="GEMM size N (N x N x N, a multiple of 16)")
    ap.add_argument("--iters", type=int, default=20, help="timed calls (median)")
    args = ap.parse_args()
    if args.n < 16 or args.n % 16 or args.iters < 1:
        ap.error("--n must be a positive multiple of 16 and --iters positive")
    require_cuda()
    n = args.n
    flops = 2 * n ** 3
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)  # (n, k) row-major: b.t() is column-major
    sa = torch.tensor(1.0, device="cuda")
    sb = torch.tensor(1.0, device="cuda")
    ms = device_ms(lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16), args.iters)
    print(f"fp8 e4m3 scaled_mm {n}^3 (bf16 out): {ms:.3f} ms {flops / ms / 1e9:.0f} TFLOP/s", flush=True)
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms16 = device_ms(lambda: x @ y.t(), args.iters)
    print(f"bf16 matmul {n}^3: {ms16:.3f} ms {flops / ms16 / 1e9:.0f} TFLOP/s", flush=True)
    print(f"fp8 / bf16: {ms16 / ms:.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
