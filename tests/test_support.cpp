// Scenario loading for tests (the tests, not core, touch the filesystem).
#include "test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

namespace memwall::testing {

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::not_found(path + ": no such file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string scenario_path(const std::string& kind, const std::string& name) {
  return std::string(MEMWALL_TEST_SCENARIOS_DIR) + "/" + kind + "/" + name + ".json";
}

namespace {
template <typename T, typename F>
T load_or_die(const std::string& path, F load) {
  Diagnostics diag;
  Result<T> r = load(path, ReadFileFn(read_file), diag);
  if (!r.is_ok()) ADD_FAILURE() << r.status().message();
  EXPECT_TRUE(diag.warnings.empty()) << path << ": " << (diag.warnings.empty() ? "" : diag.warnings[0]);
  return r.is_ok() ? *r : T{};
}
}  // namespace

HardwareSpec load_hardware_scenario(const std::string& name) {
  return load_or_die<HardwareSpec>(scenario_path("hardware", name), load_hardware);
}
ModelSpec load_model_scenario(const std::string& name) {
  return load_or_die<ModelSpec>(scenario_path("models", name), load_model);
}
RunConfig load_run_scenario(const std::string& name) {
  return load_or_die<RunConfig>(scenario_path("runs", name), load_run);
}

RunConfig twin_flow_ready_run(const ModelSpec& model, const HardwareSpec& hw) {
  RunConfig run = load_run_scenario("zero-infinity-cpu");
  run.zero.offload_param.device = OffloadDevice::kNone;
  const Status s = resolve_run_config(run, model, hw);
  EXPECT_TRUE(s.is_ok()) << s.message();
  run.zero.sub_group_size = std::ceil(model.total_params() / run.memwall.data_parallel / 10);
  return run;
}

HardwareSpec simple_hardware(int gpus, double gpu_bytes) {
  HardwareSpec hw;
  hw.name = "test";
  hw.gpu.count = gpus;
  hw.gpu.memory_bytes = gpu_bytes;
  hw.gpu.peak_flops = 100e12;
  hw.gpu.achievable_flops = 70e12;
  hw.gpu.hbm_Bps = 900e9;
  hw.cpu.memory_bytes = 1e15;
  hw.cpu.memory_Bps = 100e9;
  hw.pcie.gpu_link_Bps = 12e9;
  hw.nvlink.gpu_Bps = 150e9;
  return hw;
}

}  // namespace memwall::testing
