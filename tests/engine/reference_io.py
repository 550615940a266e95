"""The files tests/engine/gpt_model_test.cpp hands its PyTorch references (llama_reference.py,
opt_reference.py, neox_reference.py, phi_reference.py, falcon_reference.py) and reads back: DIR holds
config.json (the shape, with batch and seq), layout.json ([name, offset, shape] per tensor), params.f32 (the
flat fp32 parameters), tokens.i32 and targets.i32 ([batch, seq] each); a reference writes loss.json and
grads.f32 (the flat gradient, fp32). Also the pieces the LayerNorm families' references share, each written
from transformers' definitions.
"""
import json
import math
import sys


def load(d, torch):
    """(config, {name: tensor view of the flat float64 parameters}, flat, tokens, targets). PyTorch runs on one
    thread: these tensors are tiny, and its thread pool would otherwise spin against memwall's OpenMP threads
    in the tests ctest runs beside it."""
    torch.set_num_threads(1)
    cfg = json.load(open(d + "/config.json"))
    layout = json.load(open(d + "/layout.json"))
    flat = torch.tensor(
        list(memoryview(open(d + "/params.f32", "rb").read()).cast("f")), dtype=torch.float64
    )
    flat.requires_grad_(True)
    t = {name: flat[off:off + torch.Size(shape).numel()].view(*shape) for name, off, shape in layout}
    B, T = cfg["batch"], cfg["seq"]

    def ids(name):
        return torch.tensor(list(memoryview(open(d + "/" + name, "rb").read()).cast("i"))).view(B, T)

    return cfg, t, flat, ids("tokens.i32"), ids("targets.i32")


def run(forward):
    """A reference's main: DIR from the command line, forward(cfg, tensors, tokens, torch) -> logits, their
    mean cross-entropy against the targets and its gradient written back. Exits 77 without torch."""
    try:
        import torch
    except ImportError:
        sys.exit(77)
    d = sys.argv[1]
    cfg, t, flat, tokens, targets = load(d, torch)
    logits = forward(cfg, t, tokens, torch)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.view(-1))
    save(d, loss, flat, torch)


def save(d, loss, flat, torch):
    """Back-propagates `loss` and writes it with the flat gradient."""
    loss.backward()
    json.dump({"loss": loss.item()}, open(d + "/loss.json", "w"))
    open(d + "/grads.f32", "wb").write(flat.grad.to(torch.float32).numpy().tobytes())


def layer_norm(t, torch, C, bias=True):
    """ln(x, name): LayerNorm over C with name.weight and (unless not bias) name.bias, eps 1e-5."""
    def ln(x, name):
        return torch.nn.functional.layer_norm(x, (C,), t[name + ".weight"], t[name + ".bias"] if bias else None,
                                              1e-5)
    return ln


def linear(t, bias=True):
    """linear(x, name): x @ name.weight^T (+ name.bias)."""
    def apply(x, name):
        y = x @ t[name + ".weight"].T
        return y + t[name + ".bias"] if bias else y
    return apply


def gelu(x, torch, exact):
    """GELU: exact (0.5 x (1 + erf(x / sqrt 2))) or its tanh approximation (gelu_new)."""
    if exact:
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def rotary(torch, T, rot, theta):
    """rotate(x): rotary positions 0..T-1 on the first rot channels of x [B, H, T, head size] in rotate_half's
    convention (each rotated part's two halves paired), base theta, in float64; the rest passed through."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat([angles, angles], dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def rotate(x):
        turned, passed = x[..., :rot], x[..., rot:]
        half = rot // 2
        rotated = torch.cat([-turned[..., half:], turned[..., :half]], dim=-1)
        return torch.cat([turned * cos + rotated * sin, passed], dim=-1)
    return rotate


def causal_attention(q, k, v, torch, bias=None, bias_scaled=False, window=0, sinks=None):
    """softmax(q k^T / sqrt(head size), causal) v for [B, H, T, head size]; `bias` [H, 1, T] added to the
    scores after the scale (BLOOM's ALiBi), or before it with bias_scaled (Falcon's); with a window, query t
    sees keys u with t - window < u <= t only. `sinks` [H] (gpt-oss's): each head's logit joins every row's
    softmax as one more column, dropped after it."""
    T, hs = q.shape[-2], q.shape[-1]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    if window:
        causal = causal & ~torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-window)
    scores = q @ k.transpose(-1, -2)
    if bias is not None and bias_scaled:
        scores = scores + bias
    scores = scores / math.sqrt(hs)
    if bias is not None and not bias_scaled:
        scores = scores + bias
    scores = scores.masked_fill(~causal, float("-inf"))
    if sinks is None:
        return torch.softmax(scores, dim=-1) @ v
    column = sinks.view(1, -1, 1, 1).expand(scores.shape[0], -1, T, 1)
    return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1] @ v


def alibi(torch, heads, T):
    """ALiBi's biases [heads, 1, T]: each head's slope (build_alibi_tensor's: the powers of 2^(-8 / n) for n,
    the largest power of two up to the heads, then the odd powers of 2^(-4 / n)) times the key's position (the
    same for every query: a row's constant does not move its softmax), in float64."""
    closest = 2 ** math.floor(math.log2(heads))
    base = 2 ** (-(2 ** -(math.log2(closest) - 3)))
    slopes = [base ** i for i in range(1, closest + 1)]
    if closest != heads:
        extra = 2 ** (-(2 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** i for i in range(1, 2 * (heads - closest), 2)]
    return torch.tensor(slopes, dtype=torch.float64).view(heads, 1, 1) * torch.arange(
        T, dtype=torch.float64).view(1, 1, T)
