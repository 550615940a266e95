"""A Falcon decoder in PyTorch, written from transformers' FalconForCausalLM equations: the token embedding
(word_embeddings), no position table; per layer one query_key_value linear whose output is split as Falcon
splits it (the new decoder architecture: viewed as [kv heads, heads / kv heads + 2, head size], each group's
queries then its key then its value; multi-query: [heads + 2, head size], the queries then one key and one
value; else [heads, 3, head size]), rotary positions on every channel of each query and key (rotate_half's
convention, base rope_theta), causal softmax attention scaled by head size^-1/2, self_attention.dense; the
MLP (dense_h_to_4h, GELU, dense_4h_to_h) side by side with the attention after one norm (input_layernorm,
Falcon-7B's) or two (ln_attn, ln_mlp: the new architecture's), or after it (input_layernorm, then
post_attention_layernorm); ln_f; lm_head (word_embeddings when tied); biases on the linears only with bias;
LayerNorm eps 1e-5. With alibi (Falcon-RW's), no rotary positions but ALiBi's biases added to the scores
before the scale (in float64: transformers rounds slope x position to bfloat16). It reads the tensors by the names of a Falcon checkpoint (tests/engine/gpt_model_test.cpp).

usage: falcon_reference.py DIR
DIR as tests/engine/reference_io.py describes; writes loss.json and grads.f32. Exits 77 without torch.
"""

import reference_io

def forward(cfg, t, tokens, torch):
    """The logits [B, T, vocab] of `tokens`."""
    B, T, C, H, KV = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"], cfg["kv_heads"]
    hs = C // H
    ln, linear = reference_io.layer_norm(t, torch, C), reference_io.linear(t, cfg["bias"])
    rotate = reference_io.rotary(torch, T, hs, cfg["rope_theta"])
    bias = reference_io.alibi(torch, H, T) if cfg.get("alibi") else None
    if bias is not None:
        def rotate(x):
            return x

    def split(fused):  # -> q, k, v as [B, T, H, hs]
        if cfg["new_decoder_architecture"]:
            qkv = fused.view(B, T, KV, H // KV + 2, hs)
            q = qkv[:, :, :, :-2]
            k = qkv[:, :, :, [-2]].expand(q.shape)
            v = qkv[:, :, :, [-1]].expand(q.shape)
            return [x.reshape(B, T, H, hs) for x in (q, k, v)]
        if cfg["multi_query"]:
            qkv = fused.view(B, T, H + 2, hs)
            q = qkv[:, :, :-2]
            return q, qkv[:, :, [-2]].expand(q.shape), qkv[:, :, [-1]].expand(q.shape)
        qkv = fused.view(B, T, H, 3, hs)
        return qkv[..., 0, :], qkv[..., 1, :], qkv[..., 2, :]

    def mlp(z, p):
        gelu = reference_io.gelu(linear(z, p + "mlp.dense_h_to_4h"), torch, cfg["exact_gelu"])
        return linear(gelu, p + "mlp.dense_4h_to_h")

    x = t["transformer.word_embeddings.weight"][tokens]
    two_side_by_side = cfg["parallel"] and not cfg["one_norm"]
    for layer in range(cfg["layers"]):
        p = "transformer.h.%d." % layer
        h = ln(x, p + ("ln_attn" if two_side_by_side else "input_layernorm"))
        q, k, v = (y.transpose(1, 2) for y in split(linear(h, p + "self_attention.query_key_value")))
        y = reference_io.causal_attention(rotate(q), rotate(k), v, torch, bias, True)
        y = y.transpose(1, 2).reshape(B, T, C)
        attn = linear(y, p + "self_attention.dense")
        if not cfg["parallel"]:
            x = x + attn
            x = x + mlp(ln(x, p + "post_attention_layernorm"), p)
        else:
            x = x + attn + mlp(ln(x, p + "ln_mlp") if two_side_by_side else h, p)
    x = ln(x, "transformer.ln_f")
    head = t["transformer.word_embeddings.weight"] if cfg["tied"] else t["lm_head.weight"]
    logits = x @ head.T
    return logits


if __name__ == "__main__":
    reference_io.run(forward)
