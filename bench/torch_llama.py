# The PyTorch Llama-shaped model that `memwall train --model llama-mini` runs against in bench/train_vs_torch.sh
# (ARCH=llama): RMSNorm, rotary positions (transformers' rotate_half), grouped-query attention (key/value
# heads repeated over their groups), SwiGLU MLP, no biases, an untied head, written out as PyTorch 1.13 users
# write it. The same equations as tests/engine/llama_reference.py, as an nn.Module. With `experts` the MLP is
# Mixtral's sparse mixture of experts as transformers' MixtralSparseMoeBlock runs it (ARCH=mixtral): router
# softmax, top-k renormalised, each expert on the tokens routed to it (index_select, index_add_). With `oss`
# gpt-oss's as transformers' GptOssForCausalLM trains it (ARCH=gpt_oss): biases on q, k, v and o, a sink logit
# per head as one more softmax column, a window on every other layer from the first, a router with a bias
# whose top-k logits' softmax weights the experts, and GptOssExperts' loop over the experts hit: one
# gate_up_proj [experts, C, 2F] (gate and up interleaved), the clamped SwiGLU, down_proj with its bias.
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(C)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class SwiGLU(nn.Module):
    def __init__(self, C, FF):
        super().__init__()
        self.gate, self.up = nn.Linear(C, FF, bias=False), nn.Linear(C, FF, bias=False)
        self.down = nn.Linear(FF, C, bias=False)

    def forward(self, h):
        return self.down(F.silu(self.gate(h)) * self.up(h))


class SparseMoE(nn.Module):
    def __init__(self, C, FF, experts, topk):
        super().__init__()
        self.router = nn.Linear(C, experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(C, FF) for _ in range(experts))
        self.topk = topk

    def forward(self, h):
        B, T, C = h.shape
        x = h.reshape(-1, C)
        prob = self.router(x).softmax(dim=-1, dtype=torch.float)
        weight, chosen = torch.topk(prob, self.topk, dim=-1)
        weight = (weight / weight.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(x)
        mask = F.one_hot(chosen, len(self.experts)).permute(2, 1, 0)  # [experts, topk, tokens]
        for e, expert in enumerate(self.experts):
            slot, token = torch.where(mask[e])
            if token.numel() == 0:
                continue
            y = expert(x[token]) * weight[token, slot, None]
            out.index_add_(0, token, y.to(x.dtype))
        return out.view(B, T, C)


class GptOssMoE(nn.Module):
    def __init__(self, C, FF, experts, topk, limit=7.0):
        super().__init__()
        self.router = nn.Linear(C, experts, bias=True)
        self.gate_up = nn.Parameter(torch.randn(experts, C, 2 * FF) * 0.02)
        self.gate_up_bias = nn.Parameter(torch.zeros(experts, 2 * FF))
        self.down = nn.Parameter(torch.randn(experts, FF, C) * 0.02)
        self.down_bias = nn.Parameter(torch.zeros(experts, C))
        self.topk, self.limit = topk, limit

    def forward(self, h):
        B, T, C = h.shape
        x = h.reshape(-1, C)
        top, chosen = torch.topk(self.router(x), self.topk, dim=-1)
        weight = top.softmax(dim=-1, dtype=torch.float).to(x.dtype)
        out = torch.zeros_like(x)
        mask = F.one_hot(chosen, self.gate_up.shape[0]).permute(2, 1, 0)  # [experts, topk, tokens]
        for e in torch.nonzero(mask.sum(dim=(-1, -2)) > 0).flatten().tolist():
            slot, token = torch.where(mask[e])
            gate_up = x[token] @ self.gate_up[e] + self.gate_up_bias[e]
            gate = gate_up[..., ::2].clamp(max=self.limit)
            up = gate_up[..., 1::2].clamp(min=-self.limit, max=self.limit)
            y = ((up + 1) * gate * torch.sigmoid(1.702 * gate)) @ self.down[e] + self.down_bias[e]
            out.index_add_(0, token, (y * weight[token, slot, None]).to(x.dtype))
        return out.view(B, T, C)


class Block(nn.Module):
    def __init__(self, C, NH, KV, FF, experts=0, topk=0, oss=False, window=0):
        super().__init__()
        self.C, self.NH, self.KV, self.hs = C, NH, KV, C // NH
        self.ln1, self.ln2 = RMSNorm(C), RMSNorm(C)
        self.q = nn.Linear(C, C, bias=oss)
        self.k = nn.Linear(C, KV * self.hs, bias=oss)
        self.v = nn.Linear(C, KV * self.hs, bias=oss)
        self.o = nn.Linear(C, C, bias=oss)
        self.sinks = nn.Parameter(torch.zeros(NH)) if oss else None
        self.window = window
        self.mlp = (GptOssMoE(C, FF, experts, topk) if oss else SparseMoE(C, FF, experts, topk) if experts
                    else SwiGLU(C, FF))

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        h = self.ln1(x)
        q = self.q(h).view(B, T, self.NH, self.hs).transpose(1, 2)
        k = self.k(h).view(B, T, self.KV, self.hs).transpose(1, 2)
        v = self.v(h).view(B, T, self.KV, self.hs).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(self.NH // self.KV, dim=1)
        v = v.repeat_interleave(self.NH // self.KV, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs))
        if self.window:
            mask = mask & ~torch.tril(torch.ones_like(mask), diagonal=-self.window)
        att = att.masked_fill(~mask, float("-inf"))
        if self.sinks is None:
            att = att.softmax(dim=-1)
        else:  # the sink logit as one more column, dropped after the softmax
            sink = self.sinks.view(1, -1, 1, 1).expand(B, -1, T, 1).to(att.dtype)
            att = torch.cat([att, sink], dim=-1).softmax(dim=-1)[..., :-1]
        x = x + self.o((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    """The token embedding, `blocks`, the final RMSNorm and an untied head; rotary tables of `rot` channels
    for T positions, the causal mask; the mean cross-entropy."""

    def __init__(self, C, T, rot, blocks, vocab=256, theta=10000.0):
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, C)
        self.blocks = blocks
        self.norm = RMSNorm(C)
        self.head = nn.Linear(C, vocab, bias=False)
        inv_freq = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
        emb = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq).repeat(1, 2)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, idx, tgt):
        T = idx.shape[1]
        x = self.embed(idx)
        for b in self.blocks:
            x = b(x, self.cos[:T], self.sin[:T], self.mask[:T, :T])
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, self.vocab), tgt.view(-1))


class Llama(Decoder):
    def __init__(self, L, C, NH, KV, FF, T, vocab=256, theta=10000.0, experts=0, topk=0, oss=False, window=0):
        super().__init__(C, T, C // NH,
                         nn.ModuleList(Block(C, NH, KV, FF, experts, topk, oss, window if l % 2 == 0 else 0)
                                       for l in range(L)), vocab, theta)


class LatentAttention(nn.Module):
    """DeepSeek's multi-head latent attention as transformers' DeepseekV3Attention computes it: queries from a
    normed latent (q_a_proj, q_a_layernorm, q_b_proj), keys and values from another (kv_a_proj_with_mqa,
    kv_a_layernorm, kv_b_proj) with one rotary key part for every head, the rotary parts' neighbouring pairs
    reordered to halves before rotate_half (apply_rotary_pos_emb_interleave), scores over nope + rope."""

    def __init__(self, C, NH, q_lora, kv_lora, nope, rope, v):
        super().__init__()
        self.NH, self.kv_lora, self.nope, self.rope, self.v = NH, kv_lora, nope, rope, v
        self.q_a, self.q_norm = nn.Linear(C, q_lora, bias=False), RMSNorm(q_lora, 1e-6)
        self.q_b = nn.Linear(q_lora, NH * (nope + rope), bias=False)
        self.kv_a, self.kv_norm = nn.Linear(C, kv_lora + rope, bias=False), RMSNorm(kv_lora, 1e-6)
        self.kv_b = nn.Linear(kv_lora, NH * (nope + v), bias=False)
        self.o = nn.Linear(NH * v, C, bias=False)

    def forward(self, h, cos, sin, mask):
        B, T, _ = h.shape
        q = self.q_b(self.q_norm(self.q_a(h))).view(B, T, self.NH, -1).transpose(1, 2)
        q_nope, q_pe = q.split([self.nope, self.rope], dim=-1)
        latent, k_pe = self.kv_a(h).split([self.kv_lora, self.rope], dim=-1)
        kv = self.kv_b(self.kv_norm(latent)).view(B, T, self.NH, -1).transpose(1, 2)
        k_nope, v = kv.split([self.nope, self.v], dim=-1)
        k_pe = k_pe.view(B, 1, T, self.rope)

        def turn(x):
            x = x.reshape(*x.shape[:-1], self.rope // 2, 2).transpose(-1, -2).reshape(*x.shape)
            return x * cos + rotate_half(x) * sin
        q = torch.cat([q_nope, turn(q_pe)], dim=-1)
        k = torch.cat([k_nope, turn(k_pe).expand(B, self.NH, T, self.rope)], dim=-1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.nope + self.rope))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return self.o((att @ v).transpose(1, 2).reshape(B, T, -1))


class DeepSeekMoE(nn.Module):
    """DeepseekV3MoE: sigmoid scores, the experts chosen by score plus the correction bias among the best
    topk_group of n_group groups (a group scored by its two best), weighted by their scores over their sum
    times routed_scaling_factor, each expert on the tokens routed to it, plus one ungated shared expert."""

    def __init__(self, C, FF, experts, topk, groups, topk_groups, scale=2.5):
        super().__init__()
        self.router = nn.Linear(C, experts, bias=False)
        self.register_buffer("bias", torch.zeros(experts))
        self.experts = nn.ModuleList(SwiGLU(C, FF) for _ in range(experts))
        self.shared = SwiGLU(C, FF)
        self.topk, self.groups, self.topk_groups, self.scale = topk, groups, topk_groups, scale

    def forward(self, h):
        B, T, C = h.shape
        x = h.reshape(-1, C)
        E, G = len(self.experts), self.groups
        scores = self.router(x).sigmoid()
        choice = scores + self.bias
        group = choice.view(-1, G, E // G).topk(2, dim=-1)[0].sum(dim=-1)
        keep = torch.zeros_like(group).scatter_(1, group.topk(self.topk_groups, dim=-1)[1], 1)
        keep = keep.unsqueeze(-1).expand(-1, G, E // G).reshape(-1, E)
        chosen = choice.masked_fill(keep == 0, float("-inf")).topk(self.topk, dim=-1)[1]
        weight = scores.gather(1, chosen)
        weight = weight / (weight.sum(dim=-1, keepdim=True) + 1e-20) * self.scale
        out = torch.zeros_like(x)
        mask = F.one_hot(chosen, E).permute(2, 1, 0)  # [experts, topk, tokens]
        for e, expert in enumerate(self.experts):
            slot, token = torch.where(mask[e])
            if token.numel() == 0:
                continue
            out.index_add_(0, token, (expert(x[token]) * weight[token, slot, None]).to(x.dtype))
        return (out + self.shared(x)).view(B, T, C)


class DeepSeekBlock(nn.Module):
    def __init__(self, C, NH, FF, mla, moe):
        super().__init__()
        self.ln1, self.ln2 = RMSNorm(C), RMSNorm(C)
        self.attn = LatentAttention(C, NH, *mla)
        self.mlp = DeepSeekMoE(C, FF, *moe) if moe else SwiGLU(C, FF)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.ln1(x), cos, sin, mask)
        return x + self.mlp(self.ln2(x))


class DeepSeek(Decoder):
    """DeepSeek-V3's shape (ARCH=deepseek): the latent attention in every layer (mla: q_lora, kv_lora, nope,
    rope, v), a dense SwiGLU MLP in the first, the mixture of experts in the others (moe: experts, topk,
    groups, topk_groups), an untied head; no balance loss (the benchmark sets aux_loss_alpha 0 on memwall's
    side too). With `mtp` its next-token-prediction module as vLLM's DeepSeekMultiTokenPredictorLayer reads
    the published weights: the next token's embedding and the last hidden state RMS-normed (enorm, hnorm),
    concatenated through eh_proj, one more expert block, its norm and the shared head; its cross-entropy for
    the token after each target, x 0.3 (memwall.mtp_loss_weight's default), added to the loss."""

    def __init__(self, L, C, NH, FF, T, mla, moe, vocab=256, theta=10000.0, mtp=False):
        super().__init__(C, T, mla[3],
                         nn.ModuleList(DeepSeekBlock(C, NH, FF, mla, moe if l > 0 else None) for l in range(L)),
                         vocab, theta)
        self.mtp_block = DeepSeekBlock(C, NH, FF, mla, moe) if mtp else None
        if mtp:
            self.enorm, self.hnorm, self.mtp_norm = RMSNorm(C), RMSNorm(C), RMSNorm(C)
            self.eh_proj = nn.Linear(2 * C, C, bias=False)

    def forward(self, idx, tgt):
        if self.mtp_block is None:
            return super().forward(idx, tgt)
        T = idx.shape[1]
        cos, sin, mask = self.cos[:T], self.sin[:T], self.mask[:T, :T]
        x = self.embed(idx)
        for b in self.blocks:
            x = b(x, cos, sin, mask)
        loss = F.cross_entropy(self.head(self.norm(x)).view(-1, self.vocab), tgt.view(-1))
        h = self.eh_proj(torch.cat([self.enorm(self.embed(tgt)), self.hnorm(x)], dim=-1))
        logits = self.head(self.mtp_norm(self.mtp_block(h, cos, sin, mask)))
        return loss + 0.3 * F.cross_entropy(logits[:, :-1].reshape(-1, self.vocab), tgt[:, 1:].reshape(-1))


class Llama4MoE(nn.Module):
    """Llama4TextMoe's equations (ARCH=llama4): the router's topk largest logits, their sigmoids scaling each
    chosen expert's input (not its output), plus one ungated shared expert on every token. Each expert runs
    on the tokens routed to it (index_select, index_add_), as the Mixtral loop above; transformers' own
    Llama4TextExperts instead multiplies every expert with every token (zeros where not chosen), experts /
    topk times these FLOPs, which would flatter memwall."""

    def __init__(self, C, FF, experts, topk):
        super().__init__()
        self.router = nn.Linear(C, experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(C, FF) for _ in range(experts))
        self.shared = SwiGLU(C, FF)
        self.topk = topk

    def forward(self, h):
        B, T, C = h.shape
        x = h.reshape(-1, C)
        top, chosen = torch.topk(self.router(x), self.topk, dim=-1)
        weight = torch.sigmoid(top.float()).to(x.dtype)
        out = self.shared(x)
        mask = F.one_hot(chosen, len(self.experts)).permute(2, 1, 0)  # [experts, topk, tokens]
        for e, expert in enumerate(self.experts):
            slot, token = torch.where(mask[e])
            if token.numel() == 0:
                continue
            out = out.index_add(0, token, expert(x[token] * weight[token, slot, None]).to(out.dtype))
        return out.view(B, T, C)


class Llama4Block(nn.Module):
    """Llama4TextDecoderLayer: grouped-query attention, the rotary layers' queries and keys turned as complex
    numbers (neighbouring pairs) then RMS-normed without weights (use_qk_norm), the others' queries tempered
    (attn_temperature_tuning: 1 at positions below floor_scale - 1); then the experts, or (not every
    moe_every-th layer) a dense SwiGLU of FFM."""

    def __init__(self, C, NH, KV, FF, FFM, experts, topk, rope, moe, floor_scale=8192, attn_scale=0.1):
        super().__init__()
        self.NH, self.KV, self.hs, self.rope = NH, KV, C // NH, rope
        self.ln1, self.ln2 = RMSNorm(C), RMSNorm(C)
        self.q, self.o = nn.Linear(C, C, bias=False), nn.Linear(C, C, bias=False)
        self.k, self.v = nn.Linear(C, KV * self.hs, bias=False), nn.Linear(C, KV * self.hs, bias=False)
        self.mlp = Llama4MoE(C, FF, experts, topk) if moe else SwiGLU(C, FFM)
        self.floor_scale, self.attn_scale = floor_scale, attn_scale

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        h = self.ln1(x)
        q = self.q(h).view(B, T, self.NH, self.hs)
        k = self.k(h).view(B, T, self.KV, self.hs)
        v = self.v(h).view(B, T, self.KV, self.hs).transpose(1, 2)
        if self.rope:
            freqs = torch.complex(cos[:, : self.hs // 2], sin[:, : self.hs // 2])[None, :, None, :]

            def turn(t):
                pairs = torch.view_as_complex(t.float().reshape(*t.shape[:-1], -1, 2).contiguous())
                return torch.view_as_real(pairs * freqs).flatten(3).to(t.dtype)
            q, k = turn(q), turn(k)
            q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-5)
            k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + 1e-5)
        else:
            pos = torch.arange(T, dtype=torch.float32)
            q = q * (torch.log1p(torch.floor((pos + 1) / self.floor_scale)) * self.attn_scale + 1).view(1, T, 1, 1)
        q, k = q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(self.NH // self.KV, dim=1)
        v = v.repeat_interleave(self.NH // self.KV, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.o((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class Llama4(Decoder):
    """Llama 4's shape (ARCH=llama4): every fourth layer without rotary positions, experts (of FF, topk a
    token) in every moe_every-th layer, dense MLPs of FFM between, an untied head."""

    def __init__(self, L, C, NH, KV, FF, FFM, T, experts, topk, moe_every=1, vocab=256, theta=10000.0):
        super().__init__(C, T, C // NH,
                         nn.ModuleList(Llama4Block(C, NH, KV, FF, FFM, experts, topk, (l + 1) % 4 != 0,
                                                   (l + 1) % moe_every == 0) for l in range(L)),
                         vocab, theta)
