# PyTorch peer of memwall-block-bench: one GPT-2 block (bench/torch_gpt.py), forward + backward, median ms.
# Usage: /usr/bin/python3 bench/block_vs_torch.py fp32|bf16 B T C NH ITERS THREADS
import json, sys, time
import torch
from torch_gpt import Block

mode, B, T, C, NH, iters, threads = sys.argv[1], *map(int, sys.argv[2:8])
torch.set_num_threads(threads)
torch.manual_seed(0)

block = Block(C, NH, T)
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
