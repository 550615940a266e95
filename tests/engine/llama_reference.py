"""A Llama-shaped decoder in PyTorch, written from transformers' LlamaForCausalLM equations (RMSNorm in
fp32, rotate_half rotary embeddings with inv_freq = theta^(-2i/d) and rope_scaling "linear", "llama3", "yarn"
(with its attention factor on the cosines and sines) or "dynamic" (within max_position_embeddings: none) as
transformers' rope initialisation functions define them, repeat_kv for grouped-query attention,
SiLU-gated MLP, causal softmax attention (over a sliding window where the config has one: query t sees keys
u with t - window < u <= t, transformers' sliding_window_overlay, in the layers from first_window_layer on),
untied or tied head; Qwen2's q, k, v biases where the layout has them; heads of head_dim channels, and
Qwen3's RMSNorm of each query and key head before the rotary turn where the layout has q_norm and k_norm;
with "gemma" Gemma's RMSNorm by 1 + weight, embedding times sqrt(hidden) and gelu_pytorch_tanh MLP; Gemma 2's
norms of the attention's and the MLP's outputs where the layout has pre_feedforward_layernorm, its
soft-capped scores and logits (attn_softcap, final_softcap), scores scaled by query_scale^-1/2, and windows on
all layers but every global_every-th as Gemma2Config's layer_types lists them; Gemma 3's q/k norms by
1 + weight and its windowed layers' own rotary base, rope_local_theta, without rope_scaling, as
Gemma3TextModel's rotary_emb_local; Phi-3's rotary on the first int(head_dim x partial_rotary) channels of
each head, the rest passed through, and its "longrope" rope_scaling: each pair's frequency divided by
short_factor's or, for sequences longer than original_max_position_embeddings, long_factor's, cosines and
sines times the attention factor, as Phi3RotaryEmbedding with _compute_longrope_parameters; SmolLM3's layers
without rotary positions, no_rope_layers as SmolLM3Config derives it from an interval ("nope_every": layer i
turns when (i + 1) % nope_every != 0); Granite's multipliers as GraniteForCausalLM applies them: the embedding
times "embed_multiplier", each sublayer's output times "residual_multiplier" before its residual add, the
logits times "logit_scale" (1 / logits_scaling; its attention_multiplier is the scores' scale, "query_scale"
^-1/2); GLM's rotary on neighbouring pairs ("rope_pairs": GlmForCausalLM's apply_rotary_pos_emb, the cosines'
and sines' first halves repeat_interleave'd, channels 2i and 2i + 1 of the turned part rotated together) and
GLM-4's four norms where the layout has pre_feedforward_layernorm (Gemma 2's, under memwall's names), as the
reference memwall's CPU model is checked against
(tests/engine/gpt_model_test.cpp).

usage: llama_reference.py DIR
DIR holds config.json, layout.json ([name, offset, shape] per tensor), params.f32, tokens.i32, targets.i32;
writes loss.json and grads.f32 (the flat gradient of the mean cross-entropy). Exits 77 without torch.
"""
import math

import reference_io

def forward(cfg, t, tokens, torch):
    """The logits [B, T, vocab] of `tokens`."""
    B, T = cfg["batch"], cfg["seq"]
    C, H, KV = cfg["channels"], cfg["heads"], cfg["kv_heads"]
    hs, eps, theta = cfg.get("head_dim") or C // H, cfg["norm_eps"], cfg["rope_theta"]

    gemma = cfg.get("gemma", False)

    def rmsnorm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w if gemma else w)

    def act(x):
        return torch.nn.functional.gelu(x, approximate="tanh") if gemma else torch.nn.functional.silu(x)

    rot = int(hs * cfg.get("partial_rotary", 1.0))  # the channels rotary turns

    pairs = cfg.get("rope_pairs", False)

    def rotate_half(x):
        if pairs:  # GLM's: each neighbouring pair (a, b) to (-b, a)
            return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
        return torch.cat((-x[..., rot // 2:], x[..., : rot // 2]), dim=-1)

    def rotary(x, c, s):  # the first rot channels turned, the others passed through
        turned = x[..., :rot]
        return torch.cat((turned * c + rotate_half(turned) * s, x[..., rot:]), dim=-1)

    inv_freq = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    attention = 1.0  # what the cosines and sines are multiplied by
    scaling = cfg.get("rope_scaling")
    if scaling and scaling["rope_type"] == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif scaling and scaling["rope_type"] == "llama3":
        factor, old = scaling["factor"], scaling["original_max_position_embeddings"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) * ~(wavelen > old / low)
        inv_freq = torch.where(medium, blended, scaled)
    elif scaling and scaling["rope_type"] == "yarn":
        factor, old = scaling["factor"], scaling["original_max_position_embeddings"]

        def pair_turning(rotations):  # the pair that turns `rotations` times within the original context
            return rot * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(theta))

        low, high = pair_turning(scaling.get("beta_fast") or 32), pair_turning(scaling.get("beta_slow") or 1)
        if scaling.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, rot - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(rot // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        kept = 1 - ramp
        inv_freq = inv_freq / factor * (1 - kept) + inv_freq * kept
        attention = scaling.get("attention_factor") or (0.1 * math.log(factor) + 1 if factor > 1 else 1.0)
    elif scaling and scaling["rope_type"] == "longrope":
        old = scaling["original_max_position_embeddings"]
        ext = scaling["long_factor"] if T > old else scaling["short_factor"]
        inv_freq = inv_freq / torch.tensor(ext, dtype=torch.float64)
        factor = scaling.get("factor", 1.0)
        attention = scaling.get("attention_factor") or (
            math.sqrt(1 + math.log(factor) / math.log(old)) if factor > 1 else 1.0)
    elif scaling and scaling["rope_type"] == "dynamic":
        pass  # the base grows only past max_position_embeddings
    elif scaling:
        raise SystemExit("unknown rope_scaling " + str(scaling))
    def angles(freq, factor):
        freqs = torch.outer(torch.arange(T, dtype=torch.float64), freq)
        emb = freqs.repeat_interleave(2, dim=-1) if pairs else torch.cat((freqs, freqs), dim=-1)
        return emb.cos() * factor, emb.sin() * factor

    cos, sin = angles(inv_freq, attention)
    local_theta = cfg.get("rope_local_theta", 0)
    local = angles(1.0 / (local_theta ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot)), 1.0) if local_theta else None

    x = t["model.embed_tokens.weight"][tokens]
    if gemma:
        x = x * torch.tensor(C**0.5, dtype=torch.float32).to(torch.float64)  # as a float32 model scales
    x = x * cfg.get("embed_multiplier", 1.0)
    branch = cfg.get("residual_multiplier", 1.0)
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    window = cfg.get("sliding_window", 0)
    rows, cols = torch.arange(T).view(T, 1), torch.arange(T).view(1, T)
    window_mask = mask.masked_fill(cols <= rows - window, float("-inf")) if window else mask
    every = cfg.get("global_every", 0)  # Gemma2Config's layer_types: full every `every`-th layer
    scaling = (cfg.get("query_scale") or hs) ** -0.5
    attn_cap, final_cap = cfg.get("attn_softcap", 0), cfg.get("final_softcap", 0)
    nope = cfg.get("nope_every", 0)
    no_rope_layers = [int(not nope or (i + 1) % nope != 0) for i in range(cfg["layers"])]
    for layer in range(cfg["layers"]):
        sliding = layer >= cfg.get("first_window_layer", 0) and not (every and (layer + 1) % every == 0)
        layer_mask = window_mask if sliding else mask
        lcos, lsin = local if (local and sliding and window) else (cos, sin)
        p = "model.layers.%d." % layer
        h = rmsnorm(x, t[p + "input_layernorm.weight"])
        q, k, v = (h @ t[p + "self_attn.%s_proj.weight" % x].T for x in "qkv")
        if p + "self_attn.q_proj.bias" in t:  # Qwen2's q, k and v biases
            q, k, v = (y + t[p + "self_attn.%s_proj.bias" % x] for y, x in zip((q, k, v), "qkv"))
        q, k = q.view(B, T, H, hs), k.view(B, T, KV, hs)
        if p + "self_attn.q_norm.weight" in t:  # Qwen3: each head normed over its head_dim
            q, k = rmsnorm(q, t[p + "self_attn.q_norm.weight"]), rmsnorm(k, t[p + "self_attn.k_norm.weight"])
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(B, T, KV, hs).transpose(1, 2)
        if no_rope_layers[layer]:
            q, k = rotary(q, lcos, lsin), rotary(k, lcos, lsin)
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        scores = q @ k.transpose(-1, -2) * scaling
        if attn_cap:
            scores = torch.tanh(scores / attn_cap) * attn_cap
        att = torch.softmax(scores + layer_mask, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, H * hs)
        y = y @ t[p + "self_attn.o_proj.weight"].T
        sandwich = p + "pre_feedforward_layernorm.weight" in t
        if sandwich:  # Gemma 2: post_attention_layernorm is the attention output's
            x = x + rmsnorm(y, t[p + "post_attention_layernorm.weight"])
            h = rmsnorm(x, t[p + "pre_feedforward_layernorm.weight"])
        else:
            x = x + y * branch
            h = rmsnorm(x, t[p + "post_attention_layernorm.weight"])
        gate = h @ t[p + "mlp.gate_proj.weight"].T
        up = h @ t[p + "mlp.up_proj.weight"].T
        y = (act(gate) * up) @ t[p + "mlp.down_proj.weight"].T
        x = x + (rmsnorm(y, t[p + "post_feedforward_layernorm.weight"]) if sandwich else y * branch)
    x = rmsnorm(x, t["model.norm.weight"])
    head = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    logits = x @ head.T * cfg.get("logit_scale", 1.0)
    if final_cap:
        logits = torch.tanh(logits / final_cap) * final_cap
    return logits


if __name__ == "__main__":
    reference_io.run(forward)
