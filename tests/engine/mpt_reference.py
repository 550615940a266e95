"""An MPT decoder in PyTorch, written from transformers' MptForCausalLM equations: the token embedding
(transformer.wte), no positions; per block norm_1 (a LayerNorm without bias), attn.Wqkv whose output splits in
three along the features (every query, then every key, then every value), scores q k^T / sqrt(head size) plus
ALiBi's bias (build_mpt_alibi_tensor's: slopes 2^(-8 m / n) for m = 1..n with n the heads rounded up to a power
of two, the odd-indexed ones then the even-indexed ones, the first `heads` kept, times key position - (T - 1)),
causal softmax, attn.out_proj, the residual; norm_2, the MLP (ffn.up_proj, exact GELU, ffn.down_proj), the
residual; norm_f; the head tied to wte; no biases anywhere, LayerNorm eps 1e-5. It reads the tensors by the
names of an MPT checkpoint (memwall's test hands them over as its export writes them), so the names are
checked too (tests/engine/gpt_model_test.cpp).

usage: mpt_reference.py DIR
DIR as tests/engine/reference_io.py describes; writes loss.json and grads.f32. Exits 77 without torch.
"""
import math

import reference_io


def mpt_alibi(torch, heads, T):
    """The biases [heads, 1, T] as MPT builds them (alibi_bias_max 8), in float64."""
    n = 2 ** math.ceil(math.log2(heads))
    slopes = 1.0 / torch.pow(2.0, torch.arange(1, n + 1, dtype=torch.float64) * (8.0 / n))
    if n != heads:
        slopes = torch.cat([slopes[1::2], slopes[::2]])[:heads]
    return slopes.view(heads, 1, 1) * torch.arange(1 - T, 1, dtype=torch.float64).view(1, 1, T)


def forward(cfg, t, tokens, torch):
    """The logits [B, T, vocab] of `tokens`."""
    B, T, C, H = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"]
    hs = C // H
    ln, linear = reference_io.layer_norm(t, torch, C, bias=False), reference_io.linear(t, bias=False)
    alibi = mpt_alibi(torch, H, T)

    x = t["transformer.wte.weight"][tokens]
    for layer in range(cfg["layers"]):
        p = "transformer.blocks.%d." % layer
        q, k, v = (part.reshape(B, T, H, hs).permute(0, 2, 1, 3)
                   for part in linear(ln(x, p + "norm_1"), p + "attn.Wqkv").chunk(3, dim=2))
        y = reference_io.causal_attention(q, k, v, torch, alibi).permute(0, 2, 1, 3).reshape(B, T, C)
        x = x + linear(y, p + "attn.out_proj")
        h = reference_io.gelu(linear(ln(x, p + "norm_2"), p + "ffn.up_proj"), torch, True)
        x = x + linear(h, p + "ffn.down_proj")
    x = ln(x, "transformer.norm_f")
    return x @ t["transformer.wte.weight"].T


if __name__ == "__main__":
    reference_io.run(forward)
