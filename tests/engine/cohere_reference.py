"""A Cohere decoder in PyTorch, written from transformers' CohereForCausalLM equations: the token embedding, no
position table; per layer one input_layernorm (a LayerNorm with a weight and no bias, eps 1e-5) whose output
feeds both the attention and the MLP, side by side, both added to the block's input. The attention: q_proj,
k_proj, v_proj (no biases), with use_qk_norm (config "qk_norm") a LayerNorm without bias of each query and each
key head with that head's row of q_norm [heads, head size] / k_norm [kv heads, head size] as its weight; then
rotary positions on neighbouring pairs of channels (channel 2i turns with 2i + 1 by the angle of frequency i,
Cohere's rotate_half and repeat_interleave), each key/value head serving heads / kv_heads consecutive query
heads, causal softmax scaled by head size^-1/2, o_proj. The MLP: down_proj(silu(gate_proj(h)) * up_proj(h)).
The final model.norm (the same LayerNorm); the logits of the tied head (or lm_head) multiplied by
logit_scale. Cohere2's (config "sliding_window", "global_every"): a window (query t sees keys u with
t - window < u <= t) on every layer but each global_every-th, and rotary positions on the windowed layers only,
the others attending without positions. It reads the tensors by the names of a Cohere checkpoint
(tests/engine/gpt_model_test.cpp).

usage: cohere_reference.py DIR
DIR as tests/engine/reference_io.py describes; writes loss.json and grads.f32. Exits 77 without torch.
"""

import reference_io


def forward(cfg, t, tokens, torch):
    """The logits [B, T, vocab] of `tokens`."""
    B, T, C, H, KV = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"], cfg["kv_heads"]
    hs = C // H
    linear = reference_io.linear(t, bias=False)
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq).repeat_interleave(2, dim=-1)
    cos, sin = angles.cos(), angles.sin()

    def rotate(x):  # x [B, n, T, hs]: pairs (2i, 2i + 1)
        turned = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
        return x * cos + turned * sin

    def norm(x, weight):  # over the last dimension, no bias
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)
        return (x - mean) * torch.rsqrt(var + 1e-5) * weight

    def heads(x, n, norm_name):  # [B, T, n * hs] -> [B, n, T, hs], each head normed first with qk_norm
        x = x.view(B, T, n, hs)
        if cfg.get("qk_norm"):
            x = norm(x, t[norm_name + ".weight"])
        return x.transpose(1, 2)

    x = t["model.embed_tokens.weight"][tokens]
    window, every = cfg.get("sliding_window", 0), cfg.get("global_every", 0)
    for layer in range(cfg["layers"]):
        p = "model.layers.%d." % layer
        h = norm(x, t[p + "input_layernorm.weight"])
        sliding = window and not (every and (layer + 1) % every == 0)
        turn = rotate if sliding or not cfg.get("rope_windowed_only") else (lambda x: x)
        q = turn(heads(linear(h, p + "self_attn.q_proj"), H, p + "self_attn.q_norm"))
        k = turn(heads(linear(h, p + "self_attn.k_proj"), KV, p + "self_attn.k_norm"))
        k = k.repeat_interleave(H // KV, dim=1)
        v = linear(h, p + "self_attn.v_proj").view(B, T, KV, hs).transpose(1, 2).repeat_interleave(H // KV, dim=1)
        y = reference_io.causal_attention(q, k, v, torch, window=window if sliding else 0)
        y = y.transpose(1, 2).reshape(B, T, C)
        gated = torch.nn.functional.silu(linear(h, p + "mlp.gate_proj")) * linear(h, p + "mlp.up_proj")
        x = x + linear(y, p + "self_attn.o_proj") + linear(gated, p + "mlp.down_proj")
    x = norm(x, t["model.norm.weight"])
    return (x @ t.get("lm_head.weight", t["model.embed_tokens.weight"]).T) * cfg["logit_scale"]


if __name__ == "__main__":
    reference_io.run(forward)
