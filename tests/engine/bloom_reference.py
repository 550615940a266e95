"""A BLOOM decoder in PyTorch, written from transformers' BloomForCausalLM equations: the token embedding
(word_embeddings) through word_embeddings_layernorm, no positions; per layer input_layernorm, one
query_key_value linear whose output viewed as [heads, 3, head size] holds each head's query, key and value,
scores q k^T / sqrt(head size) plus ALiBi's bias slope_h x key position (build_alibi_tensor's slopes: the
powers of 2^(-8 / n) for n, the largest power of two up to the heads, then the odd powers of 2^(-4 / n)), causal
softmax, self_attention.dense, the residual; post_attention_layernorm, the MLP (dense_h_to_4h, bloom_gelu:
GELU's tanh approximation, dense_4h_to_h), the residual; ln_f; the head tied to word_embeddings; every linear
with a bias, LayerNorm eps 1e-5. It reads the tensors by the names of a BLOOM checkpoint (memwall's test hands
them over as its export writes them), so names and the query_key_value layout are checked too
(tests/engine/gpt_model_test.cpp).

usage: bloom_reference.py DIR
DIR as tests/engine/reference_io.py describes; writes loss.json and grads.f32. Exits 77 without torch.
"""
import reference_io


def forward(cfg, t, tokens, torch):
    """The logits [B, T, vocab] of `tokens`."""
    B, T, C, H = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"]
    hs = C // H
    ln, linear = reference_io.layer_norm(t, torch, C), reference_io.linear(t)
    alibi = reference_io.alibi(torch, H, T)

    x = ln(t["transformer.word_embeddings.weight"][tokens], "transformer.word_embeddings_layernorm")
    for layer in range(cfg["layers"]):
        p = "transformer.h.%d." % layer
        qkv = linear(ln(x, p + "input_layernorm"), p + "self_attention.query_key_value").view(B, T, H, 3, hs)
        q, k, v = (qkv[..., i, :].permute(0, 2, 1, 3) for i in range(3))
        y = reference_io.causal_attention(q, k, v, torch, alibi).permute(0, 2, 1, 3).reshape(B, T, C)
        x = x + linear(y, p + "self_attention.dense")
        h = reference_io.gelu(linear(ln(x, p + "post_attention_layernorm"), p + "mlp.dense_h_to_4h"), torch,
                              False)
        x = x + linear(h, p + "mlp.dense_4h_to_h")
    x = ln(x, "transformer.ln_f")
    return x @ t["transformer.word_embeddings.weight"].T


if __name__ == "__main__":
    reference_io.run(forward)
