// Helpers for core tests: load built-in scenarios from the source tree, build small specs.
#pragma once

#include <string>

#include "spec/spec_loader.h"

namespace memwall::testing {

Result<std::string> read_file(const std::string& path);
std::string scenario_path(const std::string& kind, const std::string& name);
HardwareSpec load_hardware_scenario(const std::string& name);
ModelSpec load_model_scenario(const std::string& name);
RunConfig load_run_scenario(const std::string& name);
// One node of `gpus` GPUs with `gpu_bytes` each and effectively unlimited host memory, no NVMe.
HardwareSpec simple_hardware(int gpus, double gpu_bytes);

}  // namespace memwall::testing
