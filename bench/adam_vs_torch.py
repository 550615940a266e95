# torch.optim.Adam on one flat tensor of N fp32 parameters with T threads: median ms/step (the PyTorch peer of
# memwall-adam-bench). Usage: /usr/bin/python3 bench/adam_vs_torch.py N T STEPS FOREACH(0|1)
import json, sys, time
import torch

n, threads, steps, foreach = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
torch.set_num_threads(threads)
p = torch.nn.Parameter(torch.full((n,), 0.5))
p.grad = torch.full((n,), 1e-3)
opt = torch.optim.Adam([p], lr=1e-3, foreach=foreach)
times = []
for s in range(steps + 1):
    t0 = time.perf_counter()
    opt.step()
    dt = (time.perf_counter() - t0) * 1e3
    if s > 0:
        times.append(dt)
times.sort()
med = times[len(times) // 2]
print(json.dumps({"torch": torch.__version__, "foreach": foreach, "params": n, "threads": threads,
                  "ms_per_step": med, "params_per_s": n / (med / 1e3)}))
