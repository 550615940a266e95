// Loading specs from JSON text: the one place hardware, model and run files are parsed.
//
// core never touches the filesystem: callers pass the text and a ReadFileFn (used only to follow a
// hardware file's "inherits" key). Errors are one line: "<file>: key '<a.b>': <value> <what is wrong>;
// allowed: <what is>" (StatusCode::kInvalidArgument), or kNotFound for a missing file. Unknown keys are
// not errors: each one adds a warning naming it to `diag`.
//
//   Diagnostics diag;
//   Result<HardwareSpec> hw = parse_hardware(text, "scenarios/hardware/dgx2.json", diag, read_file);
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "spec/hardware_spec.h"
#include "spec/model_spec.h"
#include "spec/run_config.h"

namespace memwall {

struct Diagnostics {
  std::vector<std::string> warnings;  // "<file>: unknown key 'x.y' ignored"
};

// Reads a whole file; returns kNotFound/kIoError with the path in the message.
using ReadFileFn = std::function<Result<std::string>(const std::string& path)>;

Result<HardwareSpec> parse_hardware(std::string_view text, const std::string& source, Diagnostics& diag,
                                    const ReadFileFn& read_file);
// A Hugging Face config.json (GPT-2 or Llama key names; model_type selects which).
Result<ModelSpec> parse_model(std::string_view text, const std::string& source, Diagnostics& diag);
// A model file's rope_scaling object alone (JSON text; null: none), as parse_model reads it (memwall's
// checkpoints keep the same object).
Result<RopeScaling> parse_rope_scaling(std::string_view text, const std::string& source);
// A DeepSpeed ds_config.json with an optional "memwall" section.
Result<RunConfig> parse_run(std::string_view text, const std::string& source, Diagnostics& diag);

// Read through `read_file`, then parse. `path` names the file in every message.
Result<HardwareSpec> load_hardware(const std::string& path, const ReadFileFn& read_file, Diagnostics& diag);
Result<ModelSpec> load_model(const std::string& path, const ReadFileFn& read_file, Diagnostics& diag);
Result<RunConfig> load_run(const std::string& path, const ReadFileFn& read_file, Diagnostics& diag);

// The resolved spec as JSON text (every field, documented key names), for --json output and traces.
std::string to_json_text(const HardwareSpec& hw);
std::string to_json_text(const ModelSpec& model);
std::string to_json_text(const RunConfig& run);

}  // namespace memwall
