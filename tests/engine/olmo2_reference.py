"""An OLMo 2 decoder in PyTorch, written from transformers' Olmo2ForCausalLM equations: the token embedding, no
position table; per layer q_proj, k_proj, v_proj (no biases), an RMSNorm of all the queries (q_norm, over
heads x head size channels) and of all the keys (k_norm, over key/value heads x head size: narrower with
grouped-query attention) before they split into heads, rotary positions on every channel of each head
(rotate_half's convention, base rope_theta), each key/value head serving heads / kv_heads consecutive query
heads (repeat_kv), causal softmax attention scaled by head size^-1/2, o_proj; then the residual stream plus the RMSNorm of the attention's output
(post_attention_layernorm); the SwiGLU MLP (down_proj(silu(gate_proj(h)) * up_proj(h))) of that, and the
residual stream plus the RMSNorm of the MLP's output (post_feedforward_layernorm): no norm before either; the
final model.norm RMSNorm; an untied lm_head (or the embedding, tied). RMSNorm: x / sqrt(mean(x^2) + eps) times
its weight. EXAONE 4's (config "per_head"): q_norm and k_norm over each head's head size channels instead,
after the heads split (Qwen3's); with "sliding_window" a window (query t sees keys u with
t - window < u <= t) on every layer but each "global_every"-th, and with "rope_windowed_only" rotary positions
on the windowed layers only. It reads the tensors by the names of an OLMo 2 checkpoint
(tests/engine/gpt_model_test.cpp).

usage: olmo2_reference.py DIR
DIR as tests/engine/reference_io.py describes; writes loss.json and grads.f32. Exits 77 without torch.
"""

import reference_io


def forward(cfg, t, tokens, torch):
    """The logits [B, T, vocab] of `tokens`."""
    B, T, C, H, KV = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"], cfg["kv_heads"]
    hs, eps = C // H, cfg["norm_eps"]
    rotate = reference_io.rotary(torch, T, hs, cfg["rope_theta"])

    def rmsnorm(x, name):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * t[name + ".weight"]

    def linear(x, name):
        return x @ t[name + ".weight"].T

    def heads(x, n):
        return x.view(B, T, n, hs).transpose(1, 2)

    def normed_heads(x, n, name):  # OLMo 2: one norm over all the heads; EXAONE 4: each head's own
        if cfg.get("per_head"):
            return rmsnorm(x.view(B, T, n, hs), name).transpose(1, 2)
        return heads(rmsnorm(x, name), n)

    window, every = cfg.get("sliding_window", 0), cfg.get("global_every", 0)
    x = t["model.embed_tokens.weight"][tokens]
    for layer in range(cfg["layers"]):
        p = "model.layers.%d." % layer
        sliding = window and not (every and (layer + 1) % every == 0)
        turn = rotate if sliding or not cfg.get("rope_windowed_only") else (lambda z: z)
        q = turn(normed_heads(linear(x, p + "self_attn.q_proj"), H, p + "self_attn.q_norm"))
        k = turn(normed_heads(linear(x, p + "self_attn.k_proj"), KV, p + "self_attn.k_norm"))
        k = k.repeat_interleave(H // KV, dim=1)
        v = heads(linear(x, p + "self_attn.v_proj"), KV).repeat_interleave(H // KV, dim=1)
        y = reference_io.causal_attention(q, k, v, torch, window=window if sliding else 0)
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + rmsnorm(linear(y, p + "self_attn.o_proj"), p + "post_attention_layernorm")
        gated = torch.nn.functional.silu(linear(x, p + "mlp.gate_proj")) * linear(x, p + "mlp.up_proj")
        x = x + rmsnorm(linear(gated, p + "mlp.down_proj"), p + "post_feedforward_layernorm")
    x = rmsnorm(x, "model.norm")
    return x @ t.get("lm_head.weight", t["model.embed_tokens.weight"]).T


if __name__ == "__main__":
    reference_io.run(forward)
