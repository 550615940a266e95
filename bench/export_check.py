# Independent PyTorch GPT-2 (written from the GPT-2 architecture, Hugging Face weight names and Conv1D
# layout) that loads memwall's exported model.safetensors + config.json and recomputes the loss that
# memwall-export-check recorded. Usage: /usr/bin/python3 bench/export_check.py DIR
import json, math, struct, sys
import torch
import torch.nn.functional as F

d = sys.argv[1]
cfg = json.load(open(f"{d}/config.json"))
chk = json.load(open(f"{d}/check.json"))
raw = open(f"{d}/model.safetensors", "rb").read()
(hlen,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + hlen])
body = raw[8 + hlen:]
W = {}
for name, t in header.items():
    if name == "__metadata__":
        continue
    assert t["dtype"] == "F32", name
    b, e = t["data_offsets"]
    W[name] = torch.frombuffer(bytearray(body[b:e]), dtype=torch.float32).reshape(t["shape"])

C, NH, L, eps = cfg["n_embd"], cfg["n_head"], cfg["n_layer"], cfg["layer_norm_epsilon"]
B, T = chk["B"], chk["T"]
tok = torch.tensor(chk["tokens"]).view(B, T)
tgt = torch.tensor(chk["targets"]).view(B, T)

def ln(x, p):
    return F.layer_norm(x, (C,), W[p + ".weight"], W[p + ".bias"], eps)

def conv1d(x, p):  # Hugging Face Conv1D: x @ W[in, out] + b
    return x @ W[p + ".weight"] + W[p + ".bias"]

x = W["wte.weight"][tok] + W["wpe.weight"][:T]
mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
for l in range(L):
    h = f"h.{l}."
    q, k, v = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(C, dim=2)
    q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
    att = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
    att = att.masked_fill(~mask, float("-inf")).softmax(-1)
    x = x + conv1d((att @ v).transpose(1, 2).reshape(B, T, C), h + "attn.c_proj")
    x = x + conv1d(F.gelu(conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc"), approximate="tanh"), h + "mlp.c_proj")
logits = ln(x, "ln_f") @ W["wte.weight"].T
loss = F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1)).item()
rel = abs(loss - chk["loss"]) / chk["loss"]
print(json.dumps({"memwall_loss": chk["loss"], "torch_loss": loss, "rel_diff": rel}))
sys.exit(0 if rel < 1e-4 else 1)
