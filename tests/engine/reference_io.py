"""The files tests/engine/gpt_model_test.cpp hands its PyTorch references (llama_reference.py,
opt_reference.py) and reads back: DIR holds config.json (the shape, with batch and seq), layout.json
([name, offset, shape] per tensor), params.f32 (the flat fp32 parameters), tokens.i32 and targets.i32
([batch, seq] each); a reference writes loss.json and grads.f32 (the flat gradient, fp32).
"""
import json


def load(d, torch):
    """(config, {name: tensor view of the flat float64 parameters}, flat, tokens, targets)."""
    cfg = json.load(open(d + "/config.json"))
    layout = json.load(open(d + "/layout.json"))
    flat = torch.tensor(
        list(memoryview(open(d + "/params.f32", "rb").read()).cast("f")), dtype=torch.float64
    )
    flat.requires_grad_(True)
    t = {name: flat[off:off + torch.Size(shape).numel()].view(*shape) for name, off, shape in layout}
    B, T = cfg["batch"], cfg["seq"]

    def ids(name):
        return torch.tensor(list(memoryview(open(d + "/" + name, "rb").read()).cast("i"))).view(B, T)

    return cfg, t, flat, ids("tokens.i32"), ids("targets.i32")


def save(d, loss, flat, torch):
    """Back-propagates `loss` and writes it with the flat gradient."""
    loss.backward()
    json.dump({"loss": loss.item()}, open(d + "/loss.json", "w"))
    open(d + "/grads.f32", "wb").write(flat.grad.to(torch.float32).numpy().tobytes())
