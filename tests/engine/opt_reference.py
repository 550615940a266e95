"""An OPT decoder in PyTorch, written from transformers' OPTForCausalLM equations for the pre-LN models
(do_layer_norm_before true: every OPT but 350m): token embedding plus a learned position embedding whose row
for position t is t + 2 (OPTLearnedPositionalEmbedding's offset; positions from the attention mask's cumulative
sum, 0 to T-1 without padding); per layer self_attn_layer_norm, q_proj scaled by head_dim^-1/2, k_proj,
v_proj, causal softmax attention, out_proj, residual; final_layer_norm, fc1, ReLU, fc2, residual; the decoder's
final_layer_norm; the LM head tied to embed_tokens; every linear with a bias, LayerNorm eps 1e-5. It reads
the tensors by the names of an OPT checkpoint, so the names memwall exports are checked too
(tests/engine/gpt_model_test.cpp).

usage: opt_reference.py DIR
DIR as tests/engine/reference_io.py describes (the layout under Hugging Face names); writes loss.json and
grads.f32 (the flat gradient of the mean cross-entropy). Exits 77 without torch.
"""

import reference_io

def forward(cfg, t, tokens, torch):
    """The logits [B, T, vocab] of `tokens`."""
    B, T, C, H = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"]
    hs = C // H

    ln, linear = reference_io.layer_norm(t, torch, C), reference_io.linear(t)

    positions = torch.cumsum(torch.ones(B, T, dtype=torch.long), dim=1) - 1
    x = t["model.decoder.embed_tokens.weight"][tokens] + t["model.decoder.embed_positions.weight"][positions + 2]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for layer in range(cfg["layers"]):
        p = "model.decoder.layers.%d." % layer
        h = ln(x, p + "self_attn_layer_norm")
        q = (linear(h, p + "self_attn.q_proj") * hs ** -0.5).view(B, T, H, hs).transpose(1, 2)
        k = linear(h, p + "self_attn.k_proj").view(B, T, H, hs).transpose(1, 2)
        v = linear(h, p + "self_attn.v_proj").view(B, T, H, hs).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)).masked_fill(~causal, float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + linear(y, p + "self_attn.out_proj")
        h = ln(x, p + "final_layer_norm")
        x = x + linear(torch.relu(linear(h, p + "fc1")), p + "fc2")
    x = ln(x, "model.decoder.final_layer_norm")
    logits = x @ t["model.decoder.embed_tokens.weight"].T
    return logits


if __name__ == "__main__":
    reference_io.run(forward)
