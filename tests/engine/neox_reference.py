"""A GPT-NeoX decoder (Pythia's) in PyTorch, written from transformers' GPTNeoXForCausalLM equations: the
token embedding (embed_in), no position table; per layer input_layernorm, one query_key_value linear whose
output viewed as [heads, 3 x head size] holds each head's query, key and value side by side, rotary positions
on the first int(head size x rotary_pct) channels of each query and key (rotate_half's convention, base
rotary_emb_base), causal softmax attention scaled by head size^-1/2, attention.dense; the MLP (dense_h_to_4h,
GELU exact or tanh, dense_4h_to_h) through post_attention_layernorm, on the block's input beside the attention
with use_parallel_residual, else after it; final_layer_norm; the head embed_out (embed_in when tied); every
linear with a bias, LayerNorm eps 1e-5. It reads the tensors by the names of a GPT-NeoX checkpoint, in its
order (memwall's test hands them over as its export writes them), so names and the query_key_value layout are
checked too (tests/engine/gpt_model_test.cpp).

usage: neox_reference.py DIR
DIR as tests/engine/reference_io.py describes; writes loss.json and grads.f32. Exits 77 without torch.
"""

import reference_io

def forward(cfg, t, tokens, torch):
    """The logits [B, T, vocab] of `tokens`."""
    B, T, C, H = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"]
    hs = C // H
    ln, linear = reference_io.layer_norm(t, torch, C), reference_io.linear(t)
    rotate = reference_io.rotary(torch, T, int(hs * cfg["rotary_pct"]), cfg["rope_theta"])

    def mlp(h, p):
        gelu = reference_io.gelu(linear(h, p + "mlp.dense_h_to_4h"), torch, cfg["exact_gelu"])
        return linear(gelu, p + "mlp.dense_4h_to_h")

    x = t["gpt_neox.embed_in.weight"][tokens]
    for layer in range(cfg["layers"]):
        p = "gpt_neox.layers.%d." % layer
        qkv = linear(ln(x, p + "input_layernorm"), p + "attention.query_key_value").view(B, T, H, 3 * hs)
        q, k, v = (qkv[..., i * hs:(i + 1) * hs].permute(0, 2, 1, 3) for i in range(3))
        y = reference_io.causal_attention(rotate(q), rotate(k), v, torch).permute(0, 2, 1, 3).reshape(B, T, C)
        attn = linear(y, p + "attention.dense")
        if cfg["parallel_residual"]:
            x = x + attn + mlp(ln(x, p + "post_attention_layernorm"), p)
        else:
            x = x + attn
            x = x + mlp(ln(x, p + "post_attention_layernorm"), p)
    x = ln(x, "gpt_neox.final_layer_norm")
    head = t["gpt_neox.embed_in.weight"] if cfg["tied"] else t["embed_out.weight"]
    logits = x @ head.T
    return logits


if __name__ == "__main__":
    reference_io.run(forward)
