"""A Phi (1, 1.5, 2) decoder in PyTorch, written from transformers' PhiForCausalLM equations: the token
embedding, no position table; per layer one input_layernorm whose output feeds both the attention and the MLP,
side by side: q_proj, k_proj, v_proj, rotary positions on the first int(head size x partial_rotary_factor)
channels of each query and key (rotate_half's convention, base rope_theta), causal softmax attention scaled
by head size^-1/2, self_attn.dense; mlp.fc1, GELU (tanh, gelu_new; or exact), mlp.fc2; the block's output
the input plus both; final_layernorm; an untied lm_head with a bias; every linear with a bias, LayerNorm eps
1e-5. It reads the tensors by the names of a Phi checkpoint (tests/engine/gpt_model_test.cpp).

usage: phi_reference.py DIR
DIR as tests/engine/reference_io.py describes; writes loss.json and grads.f32. Exits 77 without torch.
"""

import reference_io

def forward(cfg, t, tokens, torch):
    """The logits [B, T, vocab] of `tokens`."""
    B, T, C, H = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"]
    hs = C // H
    ln, linear = reference_io.layer_norm(t, torch, C), reference_io.linear(t)
    rotate = reference_io.rotary(torch, T, int(hs * cfg["partial_rotary_factor"]), cfg["rope_theta"])

    def heads(x):
        return x.view(B, T, H, hs).transpose(1, 2)

    x = t["model.embed_tokens.weight"][tokens]
    for layer in range(cfg["layers"]):
        p = "model.layers.%d." % layer
        h = ln(x, p + "input_layernorm")
        q = rotate(heads(linear(h, p + "self_attn.q_proj")))
        k = rotate(heads(linear(h, p + "self_attn.k_proj")))
        v = heads(linear(h, p + "self_attn.v_proj"))
        y = reference_io.causal_attention(q, k, v, torch).transpose(1, 2).reshape(B, T, C)
        attn = linear(y, p + "self_attn.dense")
        gelu = reference_io.gelu(linear(h, p + "mlp.fc1"), torch, cfg["exact_gelu"])
        x = x + attn + linear(gelu, p + "mlp.fc2")
    x = ln(x, "model.final_layernorm")
    logits = linear(x, "lm_head")
    return logits


if __name__ == "__main__":
    reference_io.run(forward)
