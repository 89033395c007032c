"""PyTorch peer of examples/bench/allreduce.lua: all-reduce bus bandwidth of one f32 tensor through
torch.distributed's NCCL backend, same size, iterations and bandwidth formula.

  torchrun --nproc_per_node=2 examples/bench/peers/allreduce.py [--numel 124439808] [--iters 20]
  tegraph run -n 2 examples/bench/allreduce.lua                  # the tegraph side

One warm-up all-reduce (it also sets up NCCL's connections) and a barrier, then --iters all-reduces back to back
and one synchronisation. Bus bandwidth is NCCL's convention: algorithm bandwidth x 2 (n - 1) / n.
"""
import argparse
import sys
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--numel", type=int, default=124439808, help="f32 elements (GPT-2 124M's parameter count)")
    ap.add_argument("--iters", type=int, default=20, help="timed all-reduces after one warm-up")
    args = ap.parse_args()
    if args.numel < 1 or args.iters < 1:
        ap.error("--numel and --iters must be positive")
    if not torch.cuda.is_available():
        raise SystemExit("allreduce.py needs CUDA devices (one per rank)")
    dist.init_process_group("nccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    x = torch.ones(args.numel, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / args.iters
    nbytes = args.numel * 4
    if rank == 0:
        algbw = nbytes / dt / 1e9
        print(f"torch all_reduce f32 x {args.numel} ({nbytes / 1e6:.1f} MB) over {n} ranks (nccl): {dt * 1e3:.3f} ms, "
              f"algbw {algbw:.1f} GB/s, busbw {algbw * 2 * (n - 1) / n:.1f} GB/s", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
