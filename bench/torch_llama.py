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


class Llama(nn.Module):
    def __init__(self, L, C, NH, KV, FF, T, vocab=256, theta=10000.0, experts=0, topk=0, oss=False, window=0):
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, C)
        self.blocks = nn.ModuleList(Block(C, NH, KV, FF, experts, topk, oss, window if l % 2 == 0 else 0)
                                    for l in range(L))
        self.norm = RMSNorm(C)
        self.head = nn.Linear(C, vocab, bias=False)
        hs = C // NH
        inv_freq = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.float32) / hs))
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
