# The PyTorch Llama-shaped model that `memwall train --model llama-mini` runs against in bench/train_vs_torch.sh
# (ARCH=llama): RMSNorm, rotary positions (transformers' rotate_half), grouped-query attention (key/value
# heads repeated over their groups), SwiGLU MLP, no biases, an untied head, written out as PyTorch 1.13 users
# write it. The same equations as tests/engine/llama_reference.py, as an nn.Module. With `experts` the MLP is
# Mixtral's sparse mixture of experts as transformers' MixtralSparseMoeBlock runs it (ARCH=mixtral): router
# softmax, top-k renormalised, each expert on the tokens routed to it (index_select, index_add_).
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


class Block(nn.Module):
    def __init__(self, C, NH, KV, FF, experts=0, topk=0):
        super().__init__()
        self.C, self.NH, self.KV, self.hs = C, NH, KV, C // NH
        self.ln1, self.ln2 = RMSNorm(C), RMSNorm(C)
        self.q = nn.Linear(C, C, bias=False)
        self.k = nn.Linear(C, KV * self.hs, bias=False)
        self.v = nn.Linear(C, KV * self.hs, bias=False)
        self.o = nn.Linear(C, C, bias=False)
        self.mlp = SparseMoE(C, FF, experts, topk) if experts else SwiGLU(C, FF)

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
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.o((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class Llama(nn.Module):
    def __init__(self, L, C, NH, KV, FF, T, vocab=256, theta=10000.0, experts=0, topk=0):
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, C)
        self.blocks = nn.ModuleList(Block(C, NH, KV, FF, experts, topk) for _ in range(L))
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
