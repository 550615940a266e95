"""A GPT-J decoder in PyTorch, written from transformers' GPTJForCausalLM equations: the token embedding
(transformer.wte), no position table; per block one LayerNorm (ln_1) whose output feeds both the attention and
the MLP, side by side: attn.q_proj, k_proj and v_proj without biases, rotary positions on the first rotary_dim
channels of each query and key head in GPT-J's own form (rotate_every_two: channels 2i and 2i + 1 turn together
by angle position x 10000^(-2i / rotary_dim)), scores q k^T / sqrt(head size), causal softmax, attn.out_proj
without bias; mlp.fc_in, GELU's tanh approximation, mlp.fc_out, both with biases; x + attention + MLP;
transformer.ln_f; an untied lm_head with a bias. It reads the tensors by the names of a GPT-J checkpoint, in
the file's channel order (memwall's test reorders q_proj's and k_proj's rotary rows as its export does), so the
names and that reordering are checked too (tests/engine/gpt_model_test.cpp). With "codegen" in the config it is
CodeGen's (CodeGenForCausalLM): the same block with q, k and v as one attn.qkv_proj whose output splits into 4
groups of heads (mp_num), each group's features its queries, then its values, then its keys.

usage: gptj_reference.py DIR
DIR as tests/engine/reference_io.py describes (config: layers, channels, heads, rotary_dim, codegen); writes
loss.json and grads.f32. Exits 77 without torch.
"""
import reference_io


def rotate_every_two(torch, T, rot):
    """rotate(x): GPT-J's rotary positions 0..T-1 on the first rot channels of x [B, H, T, head size], in
    float64."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    sin, cos = (f.repeat_interleave(2, dim=-1) for f in (angles.sin(), angles.cos()))

    def rotate(x):
        turned, passed = x[..., :rot], x[..., rot:]
        pairs = torch.stack((-turned[..., 1::2], turned[..., ::2]), dim=-1).flatten(-2)
        return torch.cat([turned * cos + pairs * sin, passed], dim=-1)
    return rotate


def forward(cfg, t, tokens, torch):
    """The logits [B, T, vocab] of `tokens`."""
    B, T, C, H = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"]
    hs = C // H
    ln = reference_io.layer_norm(t, torch, C)
    linear, plain = reference_io.linear(t), reference_io.linear(t, bias=False)
    rotate = rotate_every_two(torch, T, cfg["rotary_dim"])

    def heads(y):
        return y.view(B, T, H, hs).permute(0, 2, 1, 3)

    x = t["transformer.wte.weight"][tokens]
    for layer in range(cfg["layers"]):
        p = "transformer.h.%d." % layer
        h = ln(x, p + "ln_1")
        if cfg.get("codegen"):
            groups = plain(h, p + "attn.qkv_proj").reshape(B, T, 4, 3 * C // 4)
            q, v, k = (part.reshape(B, T, H, hs).permute(0, 2, 1, 3) for part in groups.split(C // 4, dim=-1))
            q, k = rotate(q), rotate(k)
        else:
            q, k = (rotate(heads(plain(h, p + "attn.%s_proj" % n))) for n in "qk")
            v = heads(plain(h, p + "attn.v_proj"))
        y = reference_io.causal_attention(q, k, v, torch).permute(0, 2, 1, 3).reshape(B, T, C)
        m = linear(reference_io.gelu(linear(h, p + "mlp.fc_in"), torch, False), p + "mlp.fc_out")
        x = x + plain(y, p + "attn.out_proj") + m
    return linear(ln(x, "transformer.ln_f"), "lm_head")


if __name__ == "__main__":
    reference_io.run(forward)
