"""An OLMo decoder in PyTorch, written from transformers' OlmoForCausalLM equations: the token embedding, no
position table; per layer a LayerNorm with no weight and no bias (eps 1e-5) before the attention, q_proj,
k_proj, v_proj (no biases), each clamped to [-clip_qkv, clip_qkv] when the config has one (OLMo 1.7's),
rotary positions on every channel of each query and key head (rotate_half's
convention, base rope_theta), causal softmax attention scaled by head size^-1/2, o_proj, the residual; the same
parameter-free LayerNorm before the SwiGLU MLP (down_proj(silu(gate_proj(h)) * up_proj(h))), the residual; a
final parameter-free LayerNorm; an untied lm_head (or the embedding, tied). It reads the tensors by the names
of an OLMo checkpoint (tests/engine/gpt_model_test.cpp): there are no norm tensors to read.

usage: olmo_reference.py DIR
DIR as tests/engine/reference_io.py describes; writes loss.json and grads.f32. Exits 77 without torch.
"""

import reference_io


def forward(cfg, t, tokens, torch):
    """The logits [B, T, vocab] of `tokens`."""
    B, T, C, H = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"]
    hs = C // H
    rotate = reference_io.rotary(torch, T, hs, cfg["rope_theta"])
    linear = reference_io.linear(t, bias=False)
    clip = cfg.get("clip_qkv")

    def project(h, name):
        y = linear(h, name)
        return y.clamp(min=-clip, max=clip) if clip else y

    def norm(x):
        return torch.nn.functional.layer_norm(x, (C,), None, None, 1e-5)

    def heads(x):
        return x.view(B, T, H, hs).transpose(1, 2)

    x = t["model.embed_tokens.weight"][tokens]
    for layer in range(cfg["layers"]):
        p = "model.layers.%d." % layer
        h = norm(x)
        q = rotate(heads(project(h, p + "self_attn.q_proj")))
        k = rotate(heads(project(h, p + "self_attn.k_proj")))
        v = heads(project(h, p + "self_attn.v_proj"))
        y = reference_io.causal_attention(q, k, v, torch).transpose(1, 2).reshape(B, T, C)
        x = x + linear(y, p + "self_attn.o_proj")
        h = norm(x)
        x = x + linear(torch.nn.functional.silu(linear(h, p + "mlp.gate_proj")) * linear(h, p + "mlp.up_proj"),
                       p + "mlp.down_proj")
    return norm(x) @ t.get("lm_head.weight", t["model.embed_tokens.weight"]).T


if __name__ == "__main__":
    reference_io.run(forward)
