"""Shared parts of the PyTorch peer benchmarks: device timing and the GPT block both layers.py and gpt2.py use.

The block is the one tegraph's TransformerLayer computes: pre-norm LayerNorm, one fused QKV projection,
causal attention, output projection with the residual add, LayerNorm, GELU (tanh) MLP with the residual add.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def require_cuda():
    if not torch.cuda.is_available():
        raise SystemExit("these peer benchmarks need a CUDA device (torch.cuda.is_available() is False)")
    torch.backends.cuda.matmul.allow_tf32 = True


def median(values):
    s = sorted(values)
    return s[len(s) // 2]


def device_ms(fn, iters, warmup=3):
    """Median over `iters` calls of fn's time between two CUDA events, each call synchronised."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return median(times)


class Block(nn.Module):
    """x -> x + proj(attn(ln1(x))) -> h + fc2(gelu(fc1(ln2(h))))."""

    def __init__(self, hidden_size, num_attention_heads, ffn_hidden_size):
        super().__init__()
        self.heads = num_attention_heads
        self.ln1 = nn.LayerNorm(hidden_size)
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.proj = nn.Linear(hidden_size, hidden_size)
        self.ln2 = nn.LayerNorm(hidden_size)
        self.fc1 = nn.Linear(hidden_size, ffn_hidden_size)
        self.fc2 = nn.Linear(ffn_hidden_size, hidden_size)

    def forward(self, x):
        b, t, c = x.shape
        # (b, t, 3, heads, head_dim) -> three (b, heads, t, head_dim)
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h)), approximate="tanh"))


def layer_stack_flops(layers, batch, tokens, hidden, ffn):
    """FLOPs of a forward + backward of the stack, the count examples/bench/layers.lua uses:
    the linear layers' 2 b t (4 h^2 + 2 h ffn) plus causal attention's 2 b t^2 h (half of QK^T and AV),
    times 3 (backward = 2 x forward)."""
    linear = 2 * batch * tokens * (hidden * 3 * hidden + hidden * hidden + 2 * hidden * ffn)
    attention = 2 * batch * tokens * tokens * hidden
    return 3 * layers * (linear + attention)
