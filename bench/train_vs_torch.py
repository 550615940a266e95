# PyTorch peer of `memwall train`: the same GPT-2 architecture (bench/torch_gpt.py) and shapes, or with
# ARCH llama the Llama shape (bench/torch_llama.py: KV_HEADS key/value heads, an MLP of FFN; ARCH mixtral
# EXPERTS experts of FFN, TOPK a token; ARCH gpt_oss those as gpt-oss's, with sinks, biases and a WINDOW on
# every other layer), fp32 (or with
# PRECISION bf16 its forward under torch.autocast("cpu", bfloat16)), torch.optim.Adam, random byte batches;
# prints the median seconds per training step.
# Usage: /usr/bin/python3 bench/train_vs_torch.py LAYERS CHANNELS HEADS B T STEPS THREADS [PRECISION=fp32]
#        [ARCH=gpt2 [KV_HEADS FFN [EXPERTS TOPK [WINDOW]]]]
#        or deepseek FFN Q_LORA KV_LORA NOPE ROPE V EXPERTS TOPK GROUPS TOPK_GROUPS [MTP] (bench/torch_llama.py
#        DeepSeek; MTP 1: with its next-token-prediction module)
#        or llama4 KV_HEADS FFN FFN_MLP EXPERTS TOPK MOE_EVERY (bench/torch_llama.py Llama4)
import json, sys, time
import torch
from torch_gpt import GPT
from torch_llama import DeepSeek, Llama, Llama4

L, C, NH, B, T, steps, threads = map(int, sys.argv[1:8])
bf16 = len(sys.argv) > 8 and sys.argv[8] == "bf16"
arch = sys.argv[9] if len(sys.argv) > 9 else "gpt2"
llama, oss = arch in ("llama", "mixtral", "gpt_oss"), arch == "gpt_oss"
experts, topk = (int(sys.argv[12]), int(sys.argv[13])) if arch in ("mixtral", "gpt_oss") else (0, 0)
window = int(sys.argv[14]) if oss else 0
torch.set_num_threads(threads)
torch.manual_seed(0)

if arch == "deepseek":  # FFN Q_LORA KV_LORA NOPE ROPE V EXPERTS TOPK GROUPS TOPK_GROUPS
    d = list(map(int, sys.argv[10:21]))
    model = DeepSeek(L, C, NH, d[0], T, mla=tuple(d[1:6]), moe=tuple(d[6:10]), mtp=len(d) > 10 and d[10] == 1)
elif arch == "llama4":  # KV_HEADS FFN FFN_MLP EXPERTS TOPK MOE_EVERY
    d = list(map(int, sys.argv[10:16]))
    model = Llama4(L, C, NH, d[0], d[1], d[2], T, experts=d[3], topk=d[4], moe_every=d[5])
else:
    model = (Llama(L, C, NH, int(sys.argv[10]), int(sys.argv[11]), T, experts=experts, topk=topk, oss=oss,
                   window=window) if llama
             else GPT(L, C, NH, T))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
times = []
for s in range(steps):
    idx = torch.randint(0, 256, (B, T))
    tgt = torch.randint(0, 256, (B, T))
    t0 = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = model(idx, tgt)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t0)
times = sorted(times[3:])
print(json.dumps({"torch": torch.__version__, "params": sum(p.numel() for p in model.parameters()),
                  "s_per_step": times[len(times) // 2]}))
