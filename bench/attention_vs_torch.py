# PyTorch peer of memwall-kernels-gbench's BM_Attention: causal multi-head attention over a packed qkv
# [B, T, 3C] (B 2, C 256, 4 heads of 64), scores, mask (causal, or a sliding window of W keys), softmax,
# weighted values, forward + backward through autograd; fp32; prints the median ms as JSON.
# (PyTorch 1.13, Debian's, has no scaled_dot_product_attention: this is its attention written out, as
# transformers' eager attention is.)
# Usage: /usr/bin/python3 bench/attention_vs_torch.py T WINDOW ITERS THREADS
import json, math, sys, time
import torch

T, W, iters, threads = map(int, sys.argv[1:5])
B, C, NH = 2, 256, 4
hs = C // NH
torch.set_num_threads(threads)
torch.manual_seed(0)
qkv = torch.randn(B, T, 3 * C, requires_grad=True)
dout = torch.randn(B, T, C)
t = torch.arange(T)
seen = t[None, :] <= t[:, None]
if W > 0:
    seen &= t[None, :] > t[:, None] - W


def step():
    q, k, v = (x.view(B, T, NH, hs).transpose(1, 2) for x in qkv.split(C, dim=2))
    s = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
    p = torch.softmax(s.masked_fill(~seen, float("-inf")), dim=-1)
    o = (p @ v).transpose(1, 2).reshape(B, T, C)
    o.backward(dout)


times = []
for it in range(iters + 1):
    t0 = time.perf_counter()
    step()
    if it > 0:
        times.append((time.perf_counter() - t0) * 1e3)
times.sort()
print(json.dumps({"torch": torch.__version__, "ms": times[len(times) // 2]}))
