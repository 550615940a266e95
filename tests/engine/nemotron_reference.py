"""A Nemotron decoder in PyTorch, written from transformers' NemotronForCausalLM equations: the token
embedding, no position table; per layer input_layernorm (LayerNorm1P: a LayerNorm with a bias whose scale is
1 + weight, eps 1e-5), q_proj, k_proj, v_proj (num_key_value_heads key/value heads, each serving
heads / kv_heads consecutive query heads: repeat_kv; heads of head_dim), rotary positions on the first partial_rotary_factor of
each query and key head (rotate_half's convention within that part, base rope_theta), causal softmax
attention scaled by head size^-1/2, o_proj, the residual add; post_attention_layernorm (LayerNorm1P),
mlp.up_proj, the squared ReLU (relu2), mlp.down_proj, the residual add; model.norm (LayerNorm1P); lm_head, or
the token embedding when tied. Every linear has a bias with attention_bias (and mlp_bias), none without. It
reads the tensors by the names of a Nemotron checkpoint (tests/engine/gpt_model_test.cpp).

usage: nemotron_reference.py DIR
DIR as tests/engine/reference_io.py describes; writes loss.json and grads.f32. Exits 77 without torch.
"""

import reference_io


def forward(cfg, t, tokens, torch):
    """The logits [B, T, vocab] of `tokens`."""
    B, T, C, H, KV = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"], cfg["kv_heads"]
    hs = cfg["head_dim"]
    linear = reference_io.linear(t, cfg["bias"])
    rotate = reference_io.rotary(torch, T, int(hs * cfg["partial_rotary"]), cfg["rope_theta"])

    def ln(x, name):  # LayerNorm1P
        return torch.nn.functional.layer_norm(x, (C,), t[name + ".weight"] + 1, t[name + ".bias"], 1e-5)

    def heads(x, n):
        return x.view(B, T, n, hs).transpose(1, 2)

    x = t["model.embed_tokens.weight"][tokens]
    for layer in range(cfg["layers"]):
        p = "model.layers.%d." % layer
        h = ln(x, p + "input_layernorm")
        q = rotate(heads(linear(h, p + "self_attn.q_proj"), H))
        k = rotate(heads(linear(h, p + "self_attn.k_proj"), KV)).repeat_interleave(H // KV, dim=1)
        v = heads(linear(h, p + "self_attn.v_proj"), KV).repeat_interleave(H // KV, dim=1)
        y = reference_io.causal_attention(q, k, v, torch)
        x = x + linear(y.transpose(1, 2).reshape(B, T, H * hs), p + "self_attn.o_proj")
        h = ln(x, p + "post_attention_layernorm")
        x = x + linear(torch.relu(linear(h, p + "mlp.up_proj")) ** 2, p + "mlp.down_proj")
    x = ln(x, "model.norm")
    return x @ t.get("lm_head.weight", t["model.embed_tokens.weight"]).T


if __name__ == "__main__":
    reference_io.run(forward)
