// Helpers for core tests: load built-in scenarios from the source tree, build small specs.
#pragma once

#include <cstdint>
#include <string>

#include "plan/schedule.h"
#include "spec/spec_loader.h"

namespace memwall::testing {

Result<std::string> read_file(const std::string& path);
std::string scenario_path(const std::string& kind, const std::string& name);
HardwareSpec load_hardware_scenario(const std::string& name);
ModelSpec load_model_scenario(const std::string& name);
RunConfig load_run_scenario(const std::string& name);
// xorshift64: a pseudo-random sequence for tests that damage inputs, the same cases on every run.
struct XorShift {
  std::uint64_t x;
  std::uint64_t operator()() {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  }
};
// Compute task `id`, named "kernel <id>", on lane `lane` of the compute resource (no FLOPs or duration yet).
inline Task compute_task(int id, int lane) {
  Task t;
  t.id = id;
  t.name = "kernel " + std::to_string(id);
  t.kind = TaskKind::kCompute;
  t.resource = Resource::kCompute;
  t.lane = lane;
  return t;
}
// One node of `gpus` GPUs with `gpu_bytes` each and effectively unlimited host memory, no NVMe.
HardwareSpec simple_hardware(int gpus, double gpu_bytes);

}  // namespace memwall::testing
