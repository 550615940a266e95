// Helpers for core tests: load built-in scenarios from the source tree, build small specs.
#pragma once

#include <algorithm>
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
// zero-infinity-cpu with the parameters on the GPU (where Twin-Flow applies), resolved for `model` on `hw`,
// its sub_group_size a tenth of a rank's shard (10 sub-groups per rank).
RunConfig twin_flow_ready_run(const ModelSpec& model, const HardwareSpec& hw);
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
// One to three damages to `bytes` within its first `span` bytes: a byte flipped, a run of up to `max_run`
// bytes cut out or repeated, the rest cut off, or (given `inserts`) one of those characters put in.
inline void damage_bytes(std::string& bytes, XorShift& next, std::size_t span, std::size_t max_run,
                         const std::string& inserts = "") {
  for (int e = 0, edits = 1 + static_cast<int>(next() % 3); e < edits && !bytes.empty(); ++e) {
    const std::size_t at = next() % std::min(span, bytes.size()), len = 1 + next() % max_run;
    switch (next() % (inserts.empty() ? 4 : 5)) {
      case 0:
        bytes[at] = static_cast<char>(next());
        break;
      case 1:
        bytes.erase(at, len);
        break;
      case 2:
        bytes.insert(at, bytes.substr(at, len));
        break;
      case 3:
        bytes.resize(at);
        break;
      default:
        bytes.insert(at, 1, inserts[next() % inserts.size()]);
        break;
    }
  }
}
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
