"""A StableLM decoder in PyTorch, written from transformers' StableLmForCausalLM equations: the token embedding,
no position table; per layer input_layernorm (a LayerNorm with weight and bias, eps 1e-5), q_proj, k_proj and
v_proj (with biases where use_qkv_bias puts them, none otherwise), rotary positions on the first
int(head size x partial_rotary_factor) channels of each query and key head (rotate_half's convention, base
rope_theta), with qk_layernorm (StableLM 2 12B's) a LayerNorm without bias of each query and each key head, each
head its own weight (q_layernorm.norms.i, k_layernorm.norms.i), before the rotary turn; grouped-query attention
(each key/value head repeated for its group of query heads), causal softmax scaled by head size^-1/2, o_proj
without a bias, the residual; post_attention_layernorm, the SwiGLU MLP (down_proj(silu(gate_proj(h)) *
up_proj(h)), no biases), the residual; or with use_parallel_residual (config "parallel") the MLP on
input_layernorm's output too, both added to the block's input (no post_attention_layernorm); the final
model.norm LayerNorm; an untied lm_head without a bias (or the embedding, tied). It reads the tensors by the names of a StableLM
checkpoint (tests/engine/gpt_model_test.cpp).

usage: stablelm_reference.py DIR
DIR as tests/engine/reference_io.py describes; writes loss.json and grads.f32. Exits 77 without torch.
"""

import reference_io


def forward(cfg, t, tokens, torch):
    """The logits [B, T, vocab] of `tokens`."""
    B, T, C, H, KV = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"], cfg["kv_heads"]
    hs = C // H
    ln, linear = reference_io.layer_norm(t, torch, C), reference_io.linear(t, bias=False)
    rotate = reference_io.rotary(torch, T, int(hs * cfg["partial_rotary_factor"]), cfg["rope_theta"])

    def project(h, name):  # q_proj, k_proj, v_proj: a bias only where the checkpoint has one
        y = linear(h, name)
        return y + t[name + ".bias"] if name + ".bias" in t else y

    def heads(x, n):
        return x.view(B, T, n, hs).transpose(1, 2)

    def head_norms(x, name, n):  # x [B, n, T, hs]; unchanged without qk_layernorm's tensors
        if name + ".norms.0.weight" not in t:
            return x
        w = ["%s.norms.%d.weight" % (name, i) for i in range(n)]
        return torch.cat([torch.nn.functional.layer_norm(x[:, i:i + 1], (hs,), t[w[i]], None, 1e-5)
                          for i in range(n)], dim=1)

    def mlp(h, p):
        gated = torch.nn.functional.silu(linear(h, p + "mlp.gate_proj")) * linear(h, p + "mlp.up_proj")
        return linear(gated, p + "mlp.down_proj")

    x = t["model.embed_tokens.weight"][tokens]
    for layer in range(cfg["layers"]):
        p = "model.layers.%d." % layer
        h = ln(x, p + "input_layernorm")
        q = rotate(head_norms(heads(project(h, p + "self_attn.q_proj"), H), p + "self_attn.q_layernorm", H))
        k = rotate(head_norms(heads(project(h, p + "self_attn.k_proj"), KV), p + "self_attn.k_layernorm", KV))
        k = k.repeat_interleave(H // KV, dim=1)
        v = heads(project(h, p + "self_attn.v_proj"), KV).repeat_interleave(H // KV, dim=1)
        y = reference_io.causal_attention(q, k, v, torch).transpose(1, 2).reshape(B, T, C)
        if cfg.get("parallel"):
            x = x + linear(y, p + "self_attn.o_proj") + mlp(h, p)
        else:
            x = x + linear(y, p + "self_attn.o_proj")
            x = x + mlp(ln(x, p + "post_attention_layernorm"), p)
    x = ln(x, "model.norm")
    return x @ t.get("lm_head.weight", t["model.embed_tokens.weight"]).T


if __name__ == "__main__":
    reference_io.run(forward)
