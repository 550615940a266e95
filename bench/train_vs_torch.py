# PyTorch peer of `memwall train`: the same GPT-2 architecture (byte vocabulary, tied head, pre-LN, GELU tanh)
# and shapes, fp32, torch.optim.Adam, random byte batches; prints the median seconds per training step.
# Usage: /usr/bin/python3 bench/train_vs_torch.py LAYERS CHANNELS HEADS B T STEPS THREADS
import json, math, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

L, C, NH, B, T, steps, threads = map(int, sys.argv[1:8])
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
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(C // NH)).masked_fill(~self.mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(256, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.lnf = nn.LayerNorm(C)
    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, 256), tgt.view(-1))

model = GPT()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
times = []
for s in range(steps):
    idx = torch.randint(0, 256, (B, T))
    tgt = torch.randint(0, 256, (B, T))
    t0 = time.perf_counter()
    loss = model(idx, tgt)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t0)
times = sorted(times[3:])
print(json.dumps({"torch": torch.__version__, "params": sum(p.numel() for p in model.parameters()),
                  "s_per_step": times[len(times) // 2]}))
