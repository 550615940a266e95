// PyTorch checkpoints (torch.save's zip format since PyTorch 1.6: `pytorch_model.bin`) as a tensor index,
// read without running their pickle. The zip's entries are stored uncompressed (as torch.save writes them,
// Zip64 for files over 4 GiB); its `data.pkl` is interpreted by a small pickle machine that knows only the
// opcodes and the few globals a state dict needs (OrderedDict, torch._utils._rebuild_tensor_v2 and
// _rebuild_parameter, the torch.*Storage types), so a file that asks for anything else is refused naming it
// rather than executed. Each tensor becomes a safetensors-style header entry whose data_offsets are absolute
// byte offsets in the .bin file: its storage's entry, plus its storage offset.
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "base/status.h"

namespace memwall::model {

// Whether the file's first bytes are a zip archive's ("PK\3\4").
bool is_zip_magic(const unsigned char* first4);

// {name: {"dtype": "F32" | "F16" | "BF16" | "F64" | "I64" | ..., "shape": [...], "data_offsets": [begin,
// end]}} for every tensor of the state dict in `path` (open as `fd`, `size` bytes). Errors name the file and
// what is wrong: not a zip, a compressed entry, no data.pkl, a pickle opcode or global outside the state
// dict's, a tensor that is not contiguous or does not fit its storage, a top level that is not a dict of
// tensors.
Status torch_checkpoint_index(const std::string& path, int fd, std::size_t size, nlohmann::json& header);

}  // namespace memwall::model
