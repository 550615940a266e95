"""A mixture-of-experts decoder in PyTorch, written from transformers' MixtralForCausalLM,
Qwen3MoeForCausalLM and OlmoeForCausalLM equations: the token embedding, no position table; per layer the
input RMSNorm, q_proj, k_proj, v_proj (no biases), Qwen3-MoE's RMSNorm of each query and key head
("qk_norm": "head") or OLMoE's of all the queries and all the keys before they split ("qk_norm": "full"),
rotary positions on every channel of each head (rotate_half's convention, base rope_theta), each key/value
head serving heads / kv_heads consecutive query heads, causal softmax attention scaled by head size^-1/2,
o_proj and the residual add; then the post-attention RMSNorm and the sparse MoE block: router logits
(mlp.gate, or Mixtral's block_sparse_moe.gate), their softmax in float, the experts_per_token largest
probabilities (torch.topk), renormalised to sum to 1 when "norm_topk"; each expert's SwiGLU
down(silu(gate(h)) * up(h)) computed here on every token and weighted by the token's weight for that expert
(0 where the expert was not chosen), and with "shared_ffn" Qwen2-MoE's shared expert (mlp.shared_expert) on
every token times the sigmoid of mlp.shared_expert_gate; the sum added to the residual. With "qkv_bias"
(Qwen2-MoE's) biases on q_proj, k_proj and v_proj. Qwen-MoE's dense layers: the first "dense_layers" and
those not in every "moe_every"-th (decoder_sparse_step) have a SwiGLU mlp.gate_proj, up_proj, down_proj
instead of the experts, and no router logits for the load-balancing loss. GLM-4.5's ("sigmoid", as
Glm4MoeTopkRouter): sigmoid scores; the experts chosen by score plus mlp.gate.e_score_correction_bias among the
"groups_per_token" best of "expert_groups" groups (a group scored by its two best; the other groups' experts
never: DeepSeek-V3's gate's -inf, where transformers fills 0), weighted by their scores (over their sum + 1e-20 with "norm_topk") times "routed_scale"; its shared
experts (mlp.shared_experts, "shared_gate" false) without a gate; rotary on the first "partial_rotary" of
each head. Granite MoE's ("granite", GraniteMoeForCausalLM): the embedding times "embed_multiplier", the
scores scaled by "query_scale"^-1/2 (its attention_multiplier), each sublayer's output times
"residual_multiplier", the logits times "logit_scale"; its router (block_sparse_moe.router.layer) takes the
top-k logits and their softmax (GraniteMoeTopKGating), its experts' gates and ups one
block_sparse_moe.input_linear [experts, 2F, C], their downs one output_linear [experts, C, F]. Then the final RMSNorm and the untied
lm_head (or the embedding, tied). gpt-oss's ("gpt_oss", GptOssForCausalLM): biases on q, k, v and o, each
head's self_attn.sinks logit as one more column of its softmax (dropped after it), layer l's attention over
the window "windows"[l] (0: all keys); its router mlp.router (with a bias) takes the top-k logits and their
softmax; every expert's gate and up one mlp.experts.gate_up_proj [experts, C, 2F] applied as h @ W + bias
(gate_up_proj_bias), gate the even columns and up the odd ones, gate clamped to at most "swiglu_limit" and
up to +-it, (up + 1) x gate x sigmoid(1.702 gate) @ down_proj [experts, F, C] + down_proj_bias. With
"router_aux" > 0 the loss adds router_aux times transformers'
load_balancing_loss_func over every layer's router logits concatenated (gpt-oss's: what GptOssForCausalLM
records as them, its router's first output, the top-k softmax scattered among zeros): experts x sum over
(choice, expert) of (the share of tokens whose choice it was) x (the expert's mean probability). It reads the tensors by the
checkpoints' names (tests/engine/gpt_model_test.cpp). DeepSeek's ("mla": its latent attention; "group_by_best":
V2's group_limited_greedy; "seq_aux_alpha" > 0: its MoEGate's balance loss of every layer, per sequence with
"seq_aux", scores the softmax's or the sigmoid scores over their sum; "mtp": its next-token-prediction
module, whose cross-entropy for the token after each target, over every position but each sequence's last,
times "mtp_weight" joins the loss) too.

usage: moe_reference.py DIR
DIR as tests/engine/reference_io.py describes; writes loss.json and grads.f32. Exits 77 without torch.
"""
import sys

import reference_io


def deepseek_balance(scores, chosen, E, K, per_sequence, torch):
    """DeepSeek's balance loss of one layer (its MoEGate's aux_loss without alpha): per sequence (seq_aux) or
    over the batch, the sum over experts of (its choices over their even share) x (its mean score), averaged
    over the sequences. scores [B, T, E], chosen [B, T, K]."""
    if not per_sequence:
        scores, chosen = scores.reshape(1, -1, E), chosen.reshape(1, -1, K)
    n = scores.shape[1]
    ce = torch.nn.functional.one_hot(chosen, E).to(scores.dtype).sum(dim=(1, 2)) / (n * K / E)
    return (ce * scores.mean(dim=1)).sum(dim=1).mean()


def forward(cfg, t, tokens, torch, router_logits, balance=None, targets=None):
    """The logits [B, T, vocab] of `tokens`, and (with "mtp") the next-token-prediction module's, for the
    token after each target (None without); each layer's router logits appended to router_logits."""
    B, T, C, H, KV = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"], cfg["kv_heads"]
    hs, eps, E, K = cfg["head_dim"], cfg["norm_eps"], cfg["experts"], cfg["experts_per_token"]
    rotate = reference_io.rotary(torch, T, int(hs * cfg.get("partial_rotary", 1.0)), cfg["rope_theta"])
    moe = "block_sparse_moe." if cfg["mixtral"] else "mlp."
    up_names = ("w1", "w3", "w2") if cfg["mixtral"] else ("gate_proj", "up_proj", "down_proj")

    def rmsnorm(x, name, epsilon=eps):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon) * t[name + ".weight"]

    def linear(x, name):
        y = x @ t[name + ".weight"].T
        return y + t[name + ".bias"] if name + ".bias" in t else y

    def swiglu(x, name):
        return linear(torch.nn.functional.silu(linear(x, name + ".gate_proj")) * linear(x, name + ".up_proj"),
                      name + ".down_proj")

    def heads(x, n, name):
        if cfg["qk_norm"] == "full":
            x = rmsnorm(x, name)
        x = x.view(B, T, n, hs)
        if cfg["qk_norm"] == "head":
            x = rmsnorm(x, name)
        return x.transpose(1, 2)

    def latent_attention(h, a):
        """DeepSeek's: queries from q_proj or the query latent, keys and values from the key/value latent, the
        rotary parts (the queries' own, the keys' one shared by every head) reordered from neighbouring pairs
        to halves and turned (apply_rotary_pos_emb_interleave), each head's [nope | rotary] query and key."""
        R, V, L = cfg["rope_dim"], cfg["v_dim"], cfg["kv_lora"]
        P = hs - R
        if cfg["q_lora"]:
            q = linear(rmsnorm(linear(h, a + "q_a_proj"), a + "q_a_layernorm", 1e-6), a + "q_b_proj")
        else:
            q = linear(h, a + "q_proj")
        q_nope, q_pe = q.view(B, T, H, hs).transpose(1, 2).split([P, R], dim=-1)
        latent, k_pe = linear(h, a + "kv_a_proj_with_mqa").split([L, R], dim=-1)
        kv = linear(rmsnorm(latent, a + "kv_a_layernorm", 1e-6), a + "kv_b_proj")
        k_nope, v = kv.view(B, T, H, P + V).transpose(1, 2).split([P, V], dim=-1)
        k_pe = k_pe.view(B, 1, T, R)

        def halves(x):  # (with rope_interleave false, rotate_half on the rotary parts as they are)
            if not cfg.get("rope_interleave", True):
                return x
            return x.reshape(*x.shape[:-1], R // 2, 2).transpose(-1, -2).reshape(*x.shape)
        turn = reference_io.rotary(torch, T, R, cfg["rope_theta"])
        q = torch.cat([q_nope, turn(halves(q_pe))], dim=-1) * q_scale
        k = torch.cat([k_nope, turn(halves(k_pe)).expand(B, H, T, R)], dim=-1)
        return reference_io.causal_attention(q, k, v, torch).transpose(1, 2).reshape(B, T, H * V)

    granite = cfg.get("granite", False)
    branch = cfg.get("residual_multiplier", 1.0)
    q_scale = (cfg.get("query_scale") or hs) ** -0.5 * hs ** 0.5  # (causal_attention divides by hs^1/2)
    x = t["model.embed_tokens.weight"][tokens] * cfg.get("embed_multiplier", 1.0)
    def block(x, layer):
        p = "model.layers.%d." % layer
        h = rmsnorm(x, p + "input_layernorm")
        oss = cfg.get("gpt_oss", False)
        if cfg.get("mla"):
            y = latent_attention(h, p + "self_attn.")
        else:
            q = rotate(heads(linear(h, p + "self_attn.q_proj"), H, p + "self_attn.q_norm")) * q_scale
            k = rotate(heads(linear(h, p + "self_attn.k_proj"), KV, p + "self_attn.k_norm"))
            k = k.repeat_interleave(H // KV, dim=1)
            v = linear(h, p + "self_attn.v_proj").view(B, T, KV, hs).transpose(1, 2)
            v = v.repeat_interleave(H // KV, dim=1)
            y = reference_io.causal_attention(q, k, v, torch, window=cfg["windows"][layer] if oss else 0,
                                              sinks=t[p + "self_attn.sinks"] if oss else None)
            y = y.transpose(1, 2).reshape(B, T, H * hs)
        x = x + branch * linear(y, p + "self_attn.o_proj")
        h = rmsnorm(x, p + "post_attention_layernorm")
        every = cfg.get("moe_every", 1)
        if E == 0 or layer < cfg.get("dense_layers", 0) or (every > 1 and (layer + 1) % every != 0):
            x = x + branch * swiglu(h, p + "mlp")
            return x
        z = linear(h, p + ("block_sparse_moe.router.layer" if granite else "mlp.router" if oss else moe + "gate"))
        if not oss:
            router_logits.append(z.reshape(B * T, E))
        if granite or oss:  # the top-k logits, then their softmax
            top_logits, chosen = torch.topk(z, K, dim=-1)
            top = torch.softmax(top_logits, dim=-1)
            if oss:  # (GptOssForCausalLM records its router's router_scores: that softmax among zeros)
                router_logits.append(torch.zeros_like(z).scatter(-1, chosen, top).reshape(B * T, E))
        elif cfg.get("sigmoid"):
            scores = torch.sigmoid(z)
            choice = scores + t[p + "mlp.gate.e_score_correction_bias"]
            G, TG = cfg["expert_groups"], cfg["groups_per_token"]
            grouped = choice.view(B, T, G, E // G)
            group_scores = grouped.topk(min(2, E // G), dim=-1)[0].sum(dim=-1)
            keep = torch.zeros_like(group_scores).scatter_(-1, torch.topk(group_scores, TG, dim=-1)[1], 1)
            keep = keep.unsqueeze(-1).expand(B, T, G, E // G).reshape(B, T, E)
            chosen = torch.topk(choice.masked_fill(keep == 0, float("-inf")), K, dim=-1)[1]
            top = scores.gather(-1, chosen)
            if cfg["norm_topk"]:
                top = top / (top.sum(dim=-1, keepdim=True) + 1e-20)
            top = top * cfg["routed_scale"]
            aux_scores = scores / scores.sum(dim=-1, keepdim=True)  # (DeepSeek-V3's: normalised)
        else:
            prob = torch.softmax(z, dim=-1)
            choice = prob
            if cfg.get("group_by_best"):  # DeepSeek-V2's group_limited_greedy: groups by their best expert
                G, TG = cfg["expert_groups"], cfg["groups_per_token"]
                group_scores = prob.view(B, T, G, E // G).max(dim=-1).values
                keep = torch.zeros_like(group_scores).scatter_(-1, torch.topk(group_scores, TG, dim=-1)[1], 1)
                keep = keep.unsqueeze(-1).expand(B, T, G, E // G).reshape(B, T, E)
                choice = prob.masked_fill(keep == 0, float("-inf"))
            top, chosen = torch.topk(choice, K, dim=-1)
            if cfg["norm_topk"]:
                top = top / top.sum(dim=-1, keepdim=True)
            top = top * cfg["routed_scale"]
            aux_scores = prob
        if cfg.get("seq_aux_alpha", 0) > 0:
            balance.append(deepseek_balance(aux_scores, chosen, E, K, cfg["seq_aux"], torch))
        out = torch.zeros_like(x)
        for e in range(E):
            weight = (top * (chosen == e)).sum(dim=-1, keepdim=True)  # [B, T, 1]: 0 where not chosen
            if oss:
                x_ = p + "mlp.experts."
                gate_up = h @ t[x_ + "gate_up_proj"][e] + t[x_ + "gate_up_proj_bias"][e]
                limit = cfg["swiglu_limit"]
                gate = gate_up[..., ::2].clamp(max=limit)
                up = gate_up[..., 1::2].clamp(min=-limit, max=limit)
                glu = (up + 1) * gate * torch.sigmoid(1.702 * gate)
                out = out + weight * (glu @ t[x_ + "down_proj"][e] + t[x_ + "down_proj_bias"][e])
                continue
            if granite:
                w1 = t[p + "block_sparse_moe.input_linear.weight"][e]
                w2 = t[p + "block_sparse_moe.output_linear.weight"][e]
                F = w1.shape[0] // 2
                out = out + weight * ((torch.nn.functional.silu(h @ w1[:F].T) * (h @ w1[F:].T)) @ w2.T)
                continue
            g, u, d = (p + moe + "experts.%d.%s" % (e, n) for n in up_names)
            out = out + weight * linear(torch.nn.functional.silu(linear(h, g)) * linear(h, u), d)
        if cfg.get("shared_ffn", 0) > 0 and not cfg.get("shared_gate", True):
            out = out + swiglu(h, p + "mlp.shared_experts")
        elif cfg.get("shared_ffn", 0) > 0:
            gate = torch.sigmoid(linear(h, p + "mlp.shared_expert_gate"))
            out = out + gate * swiglu(h, p + "mlp.shared_expert")
        x = x + branch * out
        return x

    main_layers = cfg["layers"] - cfg.get("mtp", 0)
    for layer in range(main_layers):
        x = block(x, layer)
    head = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    logits = rmsnorm(x, "model.norm") @ head.T * cfg.get("logit_scale", 1.0)
    if not cfg.get("mtp", 0):
        return logits, None
    # DeepSeek-V3's next-token-prediction module (its MTP module 1; GLM-4.5's alike): the next token's
    # embedding and the main model's last hidden state, each RMS-normed, side by side through eh_proj, one
    # more block, its own norm (shared_head.norm) and the shared head.
    p = "model.layers.%d." % main_layers
    e = t["model.embed_tokens.weight"][targets] * cfg.get("embed_multiplier", 1.0)
    h = torch.cat([rmsnorm(e, p + "enorm"), rmsnorm(x, p + "hnorm")], dim=-1) @ t[p + "eh_proj.weight"].T
    h = block(h, main_layers)
    return logits, rmsnorm(h, p + "shared_head.norm") @ head.T * cfg.get("logit_scale", 1.0)


def load_balancing_loss(router_logits, E, K, torch):
    z = torch.cat(router_logits, dim=0)
    prob = torch.softmax(z, dim=-1)
    _, chosen = torch.topk(prob, K, dim=-1)
    tokens_per_expert = torch.nn.functional.one_hot(chosen, E).to(prob.dtype).mean(dim=0)  # [K, E]
    return E * (tokens_per_expert * prob.mean(dim=0).unsqueeze(0)).sum()


def main():
    try:
        import torch
    except ImportError:
        sys.exit(77)
    d = sys.argv[1]
    cfg, t, flat, tokens, targets = reference_io.load(d, torch)
    router_logits, balance = [], []
    logits, mtp_logits = forward(cfg, t, tokens, torch, router_logits, balance, targets)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.view(-1))
    if mtp_logits is not None:  # position t predicts target t + 1: the last position predicts nothing
        V = mtp_logits.shape[-1]
        loss = loss + cfg["mtp_weight"] * torch.nn.functional.cross_entropy(
            mtp_logits[:, :-1].reshape(-1, V), targets[:, 1:].reshape(-1))
    if cfg["router_aux"] > 0:
        loss = loss + cfg["router_aux"] * load_balancing_loss(router_logits, cfg["experts"],
                                                              cfg["experts_per_token"], torch)
    if balance:  # DeepSeek's: every layer's
        loss = loss + cfg["seq_aux_alpha"] * sum(balance)
    reference_io.save(d, loss, flat, torch)


if __name__ == "__main__":
    main()
