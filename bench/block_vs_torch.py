# PyTorch peer of memwall-block-bench: one GPT-2 block (pre-LN, causal attention written out as PyTorch 1.13
# users write it), forward + backward, median ms. Usage: /usr/bin/python3 bench/block_vs_torch.py fp32|bf16 B T C NH ITERS THREADS
import json, math, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

mode, B, T, C, NH, iters, threads = sys.argv[1], *map(int, sys.argv[2:8])
torch.set_num_threads(threads)
torch.manual_seed(0)

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc1, self.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))
    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        hs = C // NH
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

block = Block()
x = torch.randn(B, T, C, requires_grad=True)
dy = torch.randn(B, T, C)
times = []
for it in range(iters + 1):
    t0 = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=(mode == "bf16")):
        y = block(x)
    y.backward(dy.to(y.dtype))
    dt = (time.perf_counter() - t0) * 1e3
    if it > 0:
        times.append(dt)
times.sort()
print(json.dumps({"torch": torch.__version__, "mode": mode, "ms": times[len(times) // 2]}))
