# PyTorch peer of memwall-cuda-gpt-bench: the same GPT-2 (bench/torch_gpt.py: pre-LN, attention written out
# with the T x T probabilities materialised as memwall's kernels do, GELU-tanh MLP, tied LM head) and shapes on
# one GPU without offload, model + fused AdamW, the device synchronised around each step. fp32 runs with TF32
# off (memwall's fp32 GEMMs use none); bf16 runs under autocast (bf16 GEMM operands with fp32 accumulation, as
# `--gpu-matmul bf16`; autocast also keeps some activations in bf16, which memwall does not). Prints one JSON
# line: step time (mean after a warm-up step, like the memwall benchmark), achieved TFLOP/s with the same
# FLOP count (6 x params x tokens + 12 x L x B x T^2 x C) and peak memory. Used by scripts/gpu-check.sh.
# Usage: python3 bench/cuda_gpt_vs_torch.py LAYERS CHANNELS HEADS B T STEPS fp32|bf16 [VOCAB=50304] [DEVICE=cuda]
import json, sys, time
import torch
from torch_gpt import GPT

L, C, NH, B, T, steps = map(int, sys.argv[1:7])
mode = sys.argv[7]
vocab = int(sys.argv[8]) if len(sys.argv) > 8 else 50304
dev = sys.argv[9] if len(sys.argv) > 9 else "cuda"
if mode not in ("fp32", "bf16"):
    sys.exit(f"cuda_gpt_vs_torch.py: mode '{mode}': expected fp32 or bf16")
if dev == "cuda" and not torch.cuda.is_available():
    sys.exit("cuda_gpt_vs_torch.py: PyTorch sees no GPU")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.manual_seed(0)


def sync():
    if dev == "cuda":
        torch.cuda.synchronize()


model = GPT(L, C, NH, T, vocab)
for w in model.parameters():  # GPT-2's initialisation, as memwall's gpt_init (N(0, 0.02) weights)
    if w.dim() == 2:
        torch.nn.init.normal_(w, 0.0, 0.02)
model = model.to(dev)
params = sum(p.numel() for p in model.parameters())
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, **({"fused": True} if dev == "cuda" else {}))
# The memwall benchmark's fixed token pattern.
i = torch.arange(B * T, dtype=torch.int64)
idx = ((i * 7919) % vocab).view(B, T).to(dev)
tgt = ((i * 104729 + 1) % vocab).view(B, T).to(dev)
flops = 6.0 * params * B * T + 12.0 * L * B * T * T * C
times, loss = [], float("nan")
for s in range(steps + 1):
    sync()
    t0 = time.perf_counter()
    with torch.autocast(dev, dtype=torch.bfloat16, enabled=(mode == "bf16")):
        out = model(idx, tgt)
    opt.zero_grad(set_to_none=False)
    out.backward()
    opt.step()
    sync()
    if s > 0:  # step 0 warms cuBLAS and the allocator up
        times.append(time.perf_counter() - t0)
    loss = out.item()
mean = sum(times) / len(times)
peak = round(torch.cuda.max_memory_allocated() / 2**30, 2) if dev == "cuda" else None
print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name() if dev == "cuda" else dev,
                  "mode": mode, "params": params, "ms_per_step": round(mean * 1e3, 2),
                  "tflops": round(flops / mean / 1e12, 2), "loss": round(loss, 4),
                  "peak_memory_gib": peak}))
