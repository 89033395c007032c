# PyTorch/NCCL peer figure for examples/bench/allreduce.lua (same size, same bus-bandwidth formula).
import os, time, torch, torch.distributed as dist
dist.init_process_group("nccl")
r, n = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(r)
x = torch.ones(124439808, device="cuda")
dist.all_reduce(x); torch.cuda.synchronize(); dist.barrier()
t0 = time.time()
for _ in range(20): dist.all_reduce(x)
torch.cuda.synchronize(); dt = (time.time() - t0) / 20
b = x.numel() * 4
if r == 0: print(f"torch all_reduce f32 x {x.numel()} over {n} ranks: {dt*1e3:.3f} ms, algbw {b/dt/1e9:.1f} GB/s, busbw {b/dt/1e9*2*(n-1)/n:.1f} GB/s")
dist.destroy_process_group()
