"""Llama 4's decoder in PyTorch, written from transformers' Llama4ForCausalLM equations (float64): the token
embedding; per layer the input RMSNorm, q_proj, k_proj, v_proj (no biases); on the rotary layers (all but
every "nope_every"-th) the queries and keys turned as complex numbers, each neighbouring pair of channels
(2i, 2i + 1) times exp(i t theta^(-2i / head size)), then with "qk_l2_norm" each query and key head
RMS-normed without weights; on the other layers the queries at position t times
1 + "attn_temperature" x log(1 + floor((t + 1) / "floor_scale")); each key/value head serving heads /
kv_heads consecutive query heads, causal softmax attention scaled by head size^-1/2 (on the rotary layers
within chunks of "attention_chunk" positions, if > 0: query t sees keys u <= t with u // chunk == t // chunk,
transformers' chunked causal mask), o_proj and the residual add; then the post-attention RMSNorm and, in every "moe_every"-th layer, the mixture of experts: the router
(feed_forward.router) logits' experts_per_token largest kept (torch.topk), the others -inf, their sigmoids
scaling the token's input to every expert (0 for the others), each expert's gate and up one batched product
with feed_forward.experts.gate_up_proj [experts, C, 2F] (gates the first F columns), silu(gate) x up times
down_proj [experts, F, C], summed over the experts, plus the shared expert (feed_forward.shared_expert, a
SwiGLU without a gate) on every token; in the other layers a SwiGLU feed_forward.gate_proj, up_proj,
down_proj. Then the final RMSNorm and the untied lm_head. No balance loss (Llama4ForCausalLM adds none).

usage: llama4_reference.py DIR
DIR as tests/engine/reference_io.py describes; writes loss.json and grads.f32. Exits 77 without torch.
"""
import math

import reference_io


def forward(cfg, t, tokens, torch):
    B, T, C, H, KV = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"], cfg["kv_heads"]
    hs, eps, E, K = cfg["head_dim"], cfg["norm_eps"], cfg["experts"], cfg["experts_per_token"]
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)  # [T, hs / 2]
    freqs_cis = torch.polar(torch.ones_like(angles), angles)

    def rmsnorm(x, weight=None):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return y if weight is None else y * weight

    def turn(x):  # [B, T, n, hs]: each channel pair a complex number
        pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
        return torch.view_as_real(pairs * freqs_cis[None, :, None, :]).flatten(3)

    def swiglu(h, stem):
        gate = h @ t[stem + ".gate_proj.weight"].T
        up = h @ t[stem + ".up_proj.weight"].T
        return (torch.nn.functional.silu(gate) * up) @ t[stem + ".down_proj.weight"].T

    x = t["model.embed_tokens.weight"][tokens]
    for layer in range(cfg["layers"]):
        p = "model.layers.%d." % layer
        a = p + "self_attn."
        h = rmsnorm(x, t[p + "input_layernorm.weight"])
        q = (h @ t[a + "q_proj.weight"].T).view(B, T, H, hs)
        k = (h @ t[a + "k_proj.weight"].T).view(B, T, KV, hs)
        v = (h @ t[a + "v_proj.weight"].T).view(B, T, KV, hs)
        every = cfg["nope_every"]
        rotary = every == 0 or (layer + 1) % every != 0
        if rotary:
            q, k = turn(q), turn(k)
            if cfg["qk_l2_norm"]:
                q, k = rmsnorm(q), rmsnorm(k)
        elif cfg["attn_temperature"] > 0:
            pos = torch.arange(T, dtype=torch.float64)
            scale = torch.log1p(torch.floor((pos + 1.0) / cfg["floor_scale"])) * cfg["attn_temperature"] + 1.0
            q = q * scale.view(1, T, 1, 1)
        q = q.transpose(1, 2)
        k = k.transpose(1, 2).repeat_interleave(H // KV, dim=1)
        v = v.transpose(1, 2).repeat_interleave(H // KV, dim=1)
        pos = torch.arange(T)
        seen = pos.view(1, T) <= pos.view(T, 1)  # [query, key]
        chunk = cfg["attention_chunk"]
        if rotary and chunk > 0:
            seen = seen & (pos.view(1, T) // chunk == pos.view(T, 1) // chunk)
        scores = (q @ k.transpose(-1, -2) / math.sqrt(hs)).masked_fill(~seen, float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, H * hs)
        x = x + y @ t[a + "o_proj.weight"].T
        h = rmsnorm(x, t[p + "post_attention_layernorm.weight"])
        f = p + "feed_forward."
        if (layer + 1) % cfg["moe_every"] != 0:
            x = x + swiglu(h, f[:-1])
            continue
        rows = h.reshape(-1, C)
        logits = rows @ t[f + "router.weight"].T  # [tokens, E]
        top, chosen = torch.topk(logits, K, dim=1)
        scores = torch.sigmoid(torch.full_like(logits, float("-inf")).scatter(1, chosen, top))
        routed_in = rows.repeat(E, 1) * scores.transpose(0, 1).reshape(-1, 1)  # [E x tokens, C]
        gate_up = torch.bmm(routed_in.view(E, -1, C), t[f + "experts.gate_up_proj"])
        gate, up = gate_up.chunk(2, dim=-1)
        routed = torch.bmm(up * torch.nn.functional.silu(gate), t[f + "experts.down_proj"]).sum(dim=0)
        out = routed + swiglu(rows, f + "shared_expert")
        x = x + out.view(B, T, C)
    x = rmsnorm(x, t["model.norm.weight"])
    return x @ t["lm_head.weight"].T


if __name__ == "__main__":
    reference_io.run(forward)
