"""Writes DIR/pytorch_model.bin for tests/engine/export_test.cpp from DIR/model.safetensors (an F32 export), as
transformers' save_pretrained would with torch.save, or a file memwall must refuse.

usage: torch_bin_writer.py DIR MODE
MODE: f32, f16 or bf16 (every tensor in that dtype); views (f32, each matrix a slice of a larger storage, one
an nn.Parameter, one saved twice under another name); evil (a pickle that would run os.system: no torch
needed); deflated (a compressed data.pkl: no torch needed). Exits 77 where it needs torch and has none.
"""
import io
import json
import os
import pickle
import struct
import sys
import zipfile


class Evil:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (os.system, ("touch " + self.target,))


def write_zip(path, pkl, method):
    with zipfile.ZipFile(path, "w", compression=method) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/version", "3\n")


def main(d, mode):
    out = d + "/pytorch_model.bin"
    if mode == "evil":
        write_zip(out, pickle.dumps({"w": Evil(d + "/pwned")}, protocol=2), zipfile.ZIP_STORED)
        return
    if mode == "deflated":
        write_zip(out, pickle.dumps({}, protocol=2), zipfile.ZIP_DEFLATED)
        return
    try:
        import torch
    except ImportError:
        sys.exit(77)
    torch.set_num_threads(1)  # (see reference_io.load)
    raw = open(d + "/model.safetensors", "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    dtype = {"f32": torch.float32, "views": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[mode]
    state = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        t = torch.frombuffer(bytearray(raw[8 + n + a:8 + n + b]), dtype=torch.float32).view(*e["shape"]).to(dtype)
        if mode == "views" and t.dim() == 2:
            t = torch.cat([torch.zeros(1, t.shape[1]), t])[1:]  # storage offset: one row in
        state[name] = t
    if mode == "views":
        first = next(iter(state))
        state[first] = torch.nn.Parameter(state[first], requires_grad=False)
        state["extra.alias"] = state[first]
    buf = io.BytesIO()
    torch.save(state, buf)
    open(out, "wb").write(buf.getvalue())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
