// File reading, scenario lookup and error reporting for the memwall CLI.
#include "cli_common.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace memwall::cli {

namespace fs = std::filesystem;

Result<std::string> read_text_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::not_found(path + ": no such file");
  if (fs::is_directory(path, ec)) return Status::invalid_argument(path + ": is a directory, not a JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return Status::io_error(path + ": read failed: " + std::strerror(errno));
  return out.str();
}

std::string scenarios_dir() {
  if (const char* env = std::getenv("MEMWALL_SCENARIOS"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "memwall" / "scenarios";
    if (fs::is_directory(installed, ec)) return installed.string();
  }
  return MEMWALL_SOURCE_SCENARIOS_DIR;
}

Result<std::string> resolve_scenario(const std::string& kind, const std::string& name_or_path) {
  const bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                               (name_or_path.size() > 5 && name_or_path.ends_with(".json"));
  if (looks_like_path) return name_or_path;
  const fs::path dir = fs::path(scenarios_dir()) / kind;
  const fs::path file = dir / (name_or_path + ".json");
  std::error_code ec;
  if (fs::exists(file, ec)) return file.string();
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return Status::not_found(kind + " '" + name_or_path + "' is neither a file nor a built-in scenario in " +
                           dir.string() + "; available: " + (list.empty() ? "(none)" : list));
}

namespace {
const ReadFileFn kReader = [](const std::string& p) { return read_text_file(p); };

template <typename T, typename Load>
Result<T> load_arg(const std::string& kind, const std::string& arg, Diagnostics& diag, Load load) {
  Result<std::string> path = resolve_scenario(kind, arg);
  if (!path.is_ok()) return path.status();
  return load(*path, kReader, diag);
}
}  // namespace

Result<HardwareSpec> load_hardware_arg(const std::string& arg, Diagnostics& diag) {
  return load_arg<HardwareSpec>("hardware", arg, diag, load_hardware);
}
Result<ModelSpec> load_model_arg(const std::string& arg, Diagnostics& diag) {
  return load_arg<ModelSpec>("models", arg, diag, load_model);
}
Result<RunConfig> load_run_arg(const std::string& arg, Diagnostics& diag) {
  return load_arg<RunConfig>("runs", arg, diag, load_run);
}

Result<Inputs> load_inputs(const std::string& hardware, const std::string& model, const std::string& run,
                           int nodes) {
  Inputs in;
  Result<HardwareSpec> hw = load_hardware_arg(hardware, in.diag);
  if (!hw.is_ok()) return hw.status();
  in.hw = std::move(*hw);
  if (nodes > 0) in.hw.nodes = nodes;
  if (in.hw.nodes > 1 && in.hw.network.node_Bps() <= 0) {
    return Status::invalid_argument("--nodes " + std::to_string(in.hw.nodes) + ": hardware '" + in.hw.name +
                                    "' has no network section; allowed: --nodes 1");
  }
  Result<ModelSpec> m = load_model_arg(model, in.diag);
  if (!m.is_ok()) return m.status();
  in.model = std::move(*m);
  Result<RunConfig> r = load_run_arg(run, in.diag);
  if (!r.is_ok()) return r.status();
  in.run = std::move(*r);
  return in;
}

int report_error(const Status& status) {
  std::fprintf(stderr, "memwall: error: %s\n", status.message().c_str());
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kOutOfMemory:  // the configuration does not fit the hardware
      return kExitBadInput;
    default:
      return kExitFailure;
  }
}

void print_warnings(const Diagnostics& diag) {
  for (const auto& w : diag.warnings) std::fprintf(stderr, "memwall: warning: %s\n", w.c_str());
}

}  // namespace memwall::cli
