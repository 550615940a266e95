"""A StarCoder2 decoder in PyTorch, written from transformers' Starcoder2ForCausalLM equations: the token
embedding, no position table; per layer input_layernorm (LayerNorm with a bias, eps 1e-5), q_proj, k_proj,
v_proj (num_key_value_heads key/value heads, each serving heads / kv_heads consecutive query heads: repeat_kv),
rotary positions on every channel of each query and key (rotate_half's convention, base rope_theta), causal
softmax attention scaled by head size^-1/2 over a window where the config has one (query t sees keys u with
t - window < u <= t, on every layer), o_proj, the residual add; post_attention_layernorm, mlp.c_fc, GELU's
tanh approximation (gelu_pytorch_tanh), mlp.c_proj, the residual add; model.norm; lm_head, or the token
embedding when tied. Every linear has a bias with use_bias, none without (the LayerNorms keep theirs). It reads
the tensors by the names of a StarCoder2 checkpoint (tests/engine/gpt_model_test.cpp).

usage: starcoder2_reference.py DIR
DIR as tests/engine/reference_io.py describes; writes loss.json and grads.f32. Exits 77 without torch.
"""

import reference_io


def forward(cfg, t, tokens, torch):
    """The logits [B, T, vocab] of `tokens`."""
    B, T, C, H, KV = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"], cfg["kv_heads"]
    hs = C // H
    ln, linear = reference_io.layer_norm(t, torch, C), reference_io.linear(t, cfg["use_bias"])
    rotate = reference_io.rotary(torch, T, hs, cfg["rope_theta"])

    def heads(x, n):
        return x.view(B, T, n, hs).transpose(1, 2)

    x = t["model.embed_tokens.weight"][tokens]
    for layer in range(cfg["layers"]):
        p = "model.layers.%d." % layer
        h = ln(x, p + "input_layernorm")
        q = rotate(heads(linear(h, p + "self_attn.q_proj"), H))
        k = rotate(heads(linear(h, p + "self_attn.k_proj"), KV)).repeat_interleave(H // KV, dim=1)
        v = heads(linear(h, p + "self_attn.v_proj"), KV).repeat_interleave(H // KV, dim=1)
        y = reference_io.causal_attention(q, k, v, torch, window=cfg["sliding_window"])
        x = x + linear(y.transpose(1, 2).reshape(B, T, C), p + "self_attn.o_proj")
        h = ln(x, p + "post_attention_layernorm")
        x = x + linear(reference_io.gelu(linear(h, p + "mlp.c_fc"), torch, False), p + "mlp.c_proj")
    x = ln(x, "model.norm")
    return x @ t.get("lm_head.weight", t["model.embed_tokens.weight"]).T


if __name__ == "__main__":
    reference_io.run(forward)
