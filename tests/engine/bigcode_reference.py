"""A GPT-BigCode decoder (SantaCoder's, StarCoder's) in PyTorch, written from transformers'
GPTBigCodeForCausalLM equations: token plus learned position embedding; per layer ln_1, one c_attn linear
(nn.Linear, [out, in]) whose output is the queries then one key and one value with multi_query (each key and
value shared by every query head), else viewed as [heads, 3 x head size] (each head's q, k, v side by side);
causal softmax attention scaled by head size^-1/2, c_proj, residual; ln_2, c_fc, GELU (tanh,
gelu_pytorch_tanh; or exact), c_proj, residual; ln_f; the head tied to wte; every linear with a bias,
LayerNorm eps 1e-5. It reads the tensors by the names of a GPT-BigCode checkpoint, in its order
(tests/engine/gpt_model_test.cpp).

usage: bigcode_reference.py DIR
DIR as tests/engine/reference_io.py describes; writes loss.json and grads.f32. Exits 77 without torch.
"""

import reference_io

def forward(cfg, t, tokens, torch):
    """The logits [B, T, vocab] of `tokens`."""
    B, T, C, H = cfg["batch"], cfg["seq"], cfg["channels"], cfg["heads"]
    hs = C // H
    ln, linear = reference_io.layer_norm(t, torch, C), reference_io.linear(t)

    x = t["wte.weight"][tokens] + t["wpe.weight"][torch.arange(T)]
    for layer in range(cfg["layers"]):
        p = "h.%d." % layer
        fused = linear(ln(x, p + "ln_1"), p + "attn.c_attn")
        if cfg["multi_query"]:
            q = fused[..., :C].view(B, T, H, hs).transpose(1, 2)
            k = fused[..., C:C + hs].view(B, 1, T, hs).expand(B, H, T, hs)
            v = fused[..., C + hs:].view(B, 1, T, hs).expand(B, H, T, hs)
        else:
            qkv = fused.view(B, T, H, 3 * hs).transpose(1, 2)
            q, k, v = qkv[..., :hs], qkv[..., hs:2 * hs], qkv[..., 2 * hs:]
        y = reference_io.causal_attention(q, k, v, torch).transpose(1, 2).reshape(B, T, C)
        x = x + linear(y, p + "attn.c_proj")
        h = reference_io.gelu(linear(ln(x, p + "ln_2"), p + "mlp.c_fc"), torch, cfg["exact_gelu"])
        x = x + linear(h, p + "mlp.c_proj")
    x = ln(x, "ln_f")
    logits = x @ t["wte.weight"].T
    return logits


if __name__ == "__main__":
    reference_io.run(forward)
