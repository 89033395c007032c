"""PyTorch peer of examples/bench/layers.lua: the same transformer layer stacks (bf16, forward + backward of one
microbatch), timed the same way, in PyTorch's modes:

  eager         the layers called one after the other, autograd backward
  eager+hooks   eager with a post-accumulate-grad hook on every parameter (the hook dispatch cost)
  compile       each layer through torch.compile
  graphed       torch.cuda.make_graphed_callables over the layers (CUDA graphs of forward and backward)

  python3 examples/bench/peers/layers.py [--modes eager,compile,graphed] [--only NAME] [--iters 30] [--gemm 8192]
      > torch_layers.out
  tegraph run examples/bench/layers.lua --torch torch_layers.out

Output: one JSON object per (configuration, mode) line, {"cfg", "mode", "ms", "wall_ms", "tflops", "tok_s",
"hooks_per_step"}, which layers.lua's --torch reads (it needs "cfg", "mode" and "ms" in that order, and "tflops");
then "bf16 gemm TFLOP/s X" (the GEMM peak through PyTorch) and the launch probes. "ms" is the median over --iters
steps of the device time of one step, each step synchronised, after 5 warm-up steps; "wall_ms" is the time per
step of --iters steps issued back to back.
"""
import argparse
import json
import sys
import time

import torch

from common import Block, device_ms, layer_stack_flops, median, require_cuda

CONFIGS = [  # as examples/bench/layers.lua
    dict(name="tiny-launchbound", L=8, b=1, t=128, h=512, nh=8),
    dict(name="small", L=4, b=2, t=1024, h=1024, nh=16),
    dict(name="gpt2-124M-like", L=12, b=8, t=1024, h=768, nh=12),
    dict(name="large", L=2, b=2, t=2048, h=4096, nh=32),
]
MODES = ("eager", "eager+hooks", "compile", "graphed")


def build(cfg, mode, x):
    """The stack's callables for mode and a counter of hook calls."""
    torch.manual_seed(0)
    h = cfg["h"]
    layers = [Block(h, cfg["nh"], 4 * h).to("cuda", torch.bfloat16) for _ in range(cfg["L"])]
    hook_calls = [0]
    if mode == "eager+hooks":
        def count(_param):
            hook_calls[0] += 1
        for layer in layers:
            for p in layer.parameters():
                p.register_post_accumulate_grad_hook(count)
    if mode == "compile":
        return [torch.compile(layer) for layer in layers], hook_calls
    if mode == "graphed":
        samples = tuple((torch.randn_like(x, requires_grad=True),) for _ in layers)
        return list(torch.cuda.make_graphed_callables(tuple(layers), samples)), hook_calls
    return layers, hook_calls


def bench(cfg, mode, iters):
    b, t, h = cfg["b"], cfg["t"], cfg["h"]
    x = torch.randn(b, t, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(b, t, h, device="cuda", dtype=torch.bfloat16)
    fns, hook_calls = build(cfg, mode, x)

    def step():
        y = x
        for f in fns:
            y = f(y)
        y.backward(dy)

    ms = device_ms(step, iters, warmup=5)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3 / iters
    steps_run = 5 + 2 * iters
    flops = layer_stack_flops(cfg["L"], b, t, h, 4 * h)
    return {
        "cfg": cfg["name"],
        "mode": mode,
        "ms": round(ms, 3),
        "wall_ms": round(wall_ms, 3),
        "tflops": round(flops / ms / 1e9, 1),
        "tok_s": int(b * t / ms * 1e3),
        "hooks_per_step": hook_calls[0] // steps_run,
    }


def gemm_peak(n):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = device_ms(lambda: a @ b, 10)
    return 2 * n ** 3 / ms / 1e9


def launch_probes(kernels=1000):
    """Host µs per kernel of a tiny in-place add: launched eagerly, and replayed from a CUDA graph."""
    z = torch.zeros(1, device="cuda")

    def adds():
        for _ in range(kernels):
            z.add_(1)

    def host_us(fn):
        fn()
        torch.cuda.synchronize()
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            runs.append((time.perf_counter() - t0) * 1e6 / kernels)
        return median(runs)

    eager = host_us(adds)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        adds()  # warm-up on a side stream, as capture wants
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        adds()
    return eager, host_us(graph.replay)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default="eager,compile,graphed", help="comma-separated: " + ", ".join(MODES))
    ap.add_argument("--only", default=None, help="only the configuration with this name")
    ap.add_argument("--iters", type=int, default=30, help="timed steps per configuration and mode (median)")
    ap.add_argument("--gemm", type=int, default=8192, help="also time an N x N x N bf16 GEMM (0: skip)")
    ap.add_argument("--probes", type=int, default=1, help="1: print the eager and graph launch cost per kernel")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode '{m}' (modes: {', '.join(MODES)})")
    cfgs = [c for c in CONFIGS if args.only in (None, c["name"])]
    if not cfgs:
        ap.error(f"no configuration named '{args.only}' ({', '.join(c['name'] for c in CONFIGS)})")
    require_cuda()

    for cfg in cfgs:
        for mode in modes:
            try:
                print(json.dumps(bench(cfg, mode, args.iters)), flush=True)
            except Exception as e:  # one failing mode (e.g. out of memory) must not hide the others
                print(f"FAIL {cfg['name']} {mode}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            torch.cuda.empty_cache()
    if args.gemm > 0:
        print(f"bf16 gemm TFLOP/s {gemm_peak(args.gemm):.1f}", flush=True)
    if args.probes:
        eager, graph = launch_probes()
        print(f"eager launch us/kernel {eager:.2f}")
        print(f"graph replay us/kernel {graph:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
