// File reading, scenario lookup and error reporting for the memwall CLI.
#include "cli_common.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/suggest.h"
#include "base/units.h"
#include "exec/trace_export.h"
#include "replay/replay.h"
#include "spec/json_text.h"
#include "trace/trace.h"

namespace memwall::cli {

namespace fs = std::filesystem;

Result<std::string> read_text_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::not_found(path + ": no such file");
  if (fs::is_directory(path, ec)) return Status::invalid_argument(path + ": is a directory, not a file");
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
  std::error_code ec;
  // A Hugging Face model's directory (a download, memwall export's output) stands for its config.json.
  const auto model_directory = [&]() -> Result<std::string> {
    const fs::path config = fs::path(name_or_path) / "config.json";
    if (fs::is_regular_file(config, ec)) return config.string();
    return Status::not_found("model directory " + name_or_path +
                             " has no config.json; allowed: a model file, a Hugging Face model's directory "
                             "(its config.json) or a built-in scenario");
  };
  const bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                               (name_or_path.size() > 5 && name_or_path.ends_with(".json"));
  if (kind == "models" && looks_like_path && fs::is_directory(name_or_path, ec)) return model_directory();
  if (looks_like_path) return name_or_path;
  const fs::path dir = fs::path(scenarios_dir()) / kind;
  const fs::path file = dir / (name_or_path + ".json");
  if (fs::exists(file, ec)) return file.string();
  // (a directory here by a name no built-in model has)
  if (kind == "models" && fs::is_directory(name_or_path, ec)) return model_directory();
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return Status::not_found(kind + " '" + name_or_path + "' is neither a file nor a built-in scenario in " +
                           dir.string() + did_you_mean(name_or_path, names) +
                           "; available: " + (list.empty() ? "(none)" : list));
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

namespace {

// Applies {"a.b": v, ...} to the JSON text of a file, creating sections as needed.
Result<std::string> apply_overrides(const std::string& text, const std::string& path, const char* flag,
                                    const std::string& set) {
  if (set.empty()) return text;
  auto doc_or = parse_json_object(text, path);
  if (!doc_or.is_ok()) return doc_or.status();
  auto patch_or = parse_json_object(set, std::string(flag) + " '" + set + "'");
  if (!patch_or.is_ok()) return patch_or.status();
  nlohmann::json doc = std::move(*doc_or);
  const nlohmann::json patch = std::move(*patch_or);
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    nlohmann::json* node = &doc;
    std::string key = it.key();
    for (size_t dot; (dot = key.find('.')) != std::string::npos; key = key.substr(dot + 1)) {
      node = &(*node)[key.substr(0, dot)];
      if (!node->is_object()) *node = nlohmann::json::object();
    }
    (*node)[key] = it.value();
  }
  return doc.dump();
}

// A scenario (or file) of `kind` read, with the overrides (`flag`'s JSON object) applied; `path` is where it
// was found.
Result<std::string> read_with_overrides(const std::string& kind, const std::string& arg, const char* flag,
                                        const std::string& set, std::string& path) {
  Result<std::string> found = resolve_scenario(kind, arg);
  if (!found.is_ok()) return found.status();
  path = *found;
  Result<std::string> text = read_text_file(path);
  if (!text.is_ok()) return text.status();
  return apply_overrides(*text, path, flag, set);
}

// An error in a file the user patched with `flag`: says so, as the value may be the flag's, not the file's.
Status with_overrides_named(const Status& s, const char* flag, const std::string& set) {
  if (set.empty()) return s;
  return {s.code(), s.message() + " (the file with " + flag + " '" + set + "' applied)"};
}

}  // namespace

Result<WhatIfs> parse_what_ifs(const std::vector<std::string>& texts) {
  WhatIfs out;
  for (const std::string& text : texts) {
    auto w = parse_what_if(text);
    if (!w.is_ok()) return w.status();
    if (w->key == "gpu") {
      Diagnostics diag;
      auto g = load_hardware_arg(w->value, diag);
      if (!g.is_ok()) return g.status();
      out.gpu = std::make_shared<const HardwareSpec>(std::move(*g));
    }
    out.changes.push_back(*w);
  }
  return out;
}

Result<Inputs> load_inputs(const InputOptions& opt) {
  const std::string& hardware = opt.hardware;
  const std::string& model = opt.model;
  const std::string& run = opt.run;
  const int nodes = opt.nodes;
  const std::string& model_set = opt.model_set;
  const std::string& run_set = opt.run_set;
  Inputs in;
  Result<HardwareSpec> hw = load_hardware_arg(hardware, in.diag);
  if (!hw.is_ok()) return hw.status();
  in.hw = std::move(*hw);
  if (nodes > 0) in.hw.nodes = nodes;
  if (in.hw.nodes > 1 && in.hw.network.node_Bps() <= 0) {
    return Status::invalid_argument("--nodes " + std::to_string(in.hw.nodes) + ": hardware '" + in.hw.name +
                                    "' has no network section; allowed: --nodes 1");
  }
  std::string path;
  Result<std::string> model_json = read_with_overrides("models", model, "--model-set", model_set, path);
  if (!model_json.is_ok()) return model_json.status();
  Result<ModelSpec> m = parse_model(*model_json, path, in.diag);
  if (!m.is_ok()) return with_overrides_named(m.status(), "--model-set", model_set);
  in.model = std::move(*m);
  Result<std::string> run_json = read_with_overrides("runs", run, "--set", run_set, path);
  if (!run_json.is_ok()) return run_json.status();
  Result<RunConfig> r = parse_run(*run_json, path, in.diag);
  if (!r.is_ok()) return with_overrides_named(r.status(), "--set", run_set);
  in.run = std::move(*r);
  if (in.run.memwall.mtp) {  // the model file's multi-token-prediction modules, counted as trained
    if (in.model.mtp_in_file == 0) {
      in.diag.warnings.push_back(path + ": memwall.mtp: model " + in.model.name +
                                 " has no multi-token-prediction modules (num_nextn_predict_layers 0 or "
                                 "absent); nothing added");
    }
    in.model = with_mtp(in.model);
  }
  return in;
}

Result<std::string> run_file_with_overrides(const std::string& run, const std::string& run_set) {
  std::string path;
  Result<std::string> patched = read_with_overrides("runs", run, "--set", run_set, path);
  if (!patched.is_ok()) return patched.status();
  return nlohmann::json::parse(*patched).dump(2) + "\n";
}

Status prepare_output(const std::string& option, const std::string& path, bool is_dir) {
  namespace fs = std::filesystem;
  const std::string shown = (option.empty() ? "" : option + " ") + path;
  std::error_code ec;
  if (!is_dir && fs::is_directory(path, ec)) return Status::io_error(shown + ": is a directory, not a file");
  // A directory output is made (with its parents); a file's directory must exist.
  const fs::path dir = is_dir ? fs::path(path) : fs::path(path).parent_path();
  const std::string d = dir.empty() ? "." : dir.string();
  if (is_dir) {
    fs::create_directories(dir, ec);
    if (ec) return Status::io_error(shown + ": cannot create it: " + ec.message());
  } else if (!fs::exists(d, ec)) {
    return Status::io_error(shown + ": cannot open for writing: " + d + " does not exist");
  } else if (!fs::is_directory(d, ec)) {
    return Status::io_error(shown + ": cannot open for writing: " + d + " is not a directory");
  }
  if (::access(d.c_str(), W_OK) != 0) {
    return Status::io_error(shown + ": cannot open for writing: " + d + " is not writable (" +
                            std::strerror(errno) + ")");
  }
  return Status::ok();
}

Status write_trace_file(const std::string& path, const std::string& executor, const std::string& command,
                        int ranks, const Inputs& in, const RunConfig& run, const std::string& summary_json,
                        const std::function<void(trace::TraceWriter&)>& body) {
  MW_RETURN_IF_ERROR(prepare_output("", path, false));
  std::ofstream file(path, std::ios::binary);
  if (!file) return Status::io_error(path + ": cannot open for writing");
  trace::TraceHeader h;
  h.memwall_version = MEMWALL_VERSION;
  h.executor = executor;
  h.command = command;
  h.ranks = ranks;
  h.hardware_json = to_json_text(in.hw);
  h.model_json = to_json_text(in.model);
  h.run_json = to_json_text(run);
  h.summary_json = summary_json;
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  std::unique_ptr<trace::GzipOstream> gzip;
  std::ostream* out = &file;
  if (gz) {
    gzip = std::make_unique<trace::GzipOstream>(file);
    out = gzip.get();
  }
  trace::TraceWriter w(*out);
  w.begin(h);
  body(w);
  MW_RETURN_IF_ERROR(w.finish());
  if (gzip) MW_RETURN_IF_ERROR(gzip->close());
  file.close();
  if (!file) return Status::io_error(path + ": write failed");
  return Status::ok();
}

Status write_run_trace(const std::string& path, const std::string& executor, const std::string& command,
                       const Inputs& in, const RunConfig& run, const Schedule& s, const RunResult& result,
                       const std::string& summary_json) {
  return write_trace_file(path, executor, command, s.ranks, in, run, summary_json,
                          [&](trace::TraceWriter& w) { export_run_trace(s, result, 0, w); });
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

namespace {
double monotonic_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

ProgressLine::ProgressLine() : terminal_(isatty(STDERR_FILENO) != 0), start_(monotonic_s()) {}

double ProgressLine::elapsed_s() const {
  return monotonic_s() - start_;
}

std::string ProgressLine::clock() const {
  const long s = std::lround(elapsed_s());
  return strprintf("%ld:%02ld", s / 60, s % 60);
}

void ProgressLine::show(const std::string& text, bool force) {
  const double now = elapsed_s();
  if (terminal_) {
    if (!force && written_ && now - last_ < 1) return;
    std::fprintf(stderr, "\r%s   ", text.c_str());
    width_ = std::max(width_, text.size() + 3);
  } else if (now >= 10 && (!written_ || now - last_ >= 30)) {
    std::fprintf(stderr, "%s\n", text.c_str());
  } else {
    return;
  }
  last_ = now;
  written_ = true;
}

void ProgressLine::finish(const std::string& text) {
  if (!written_) return;
  if (terminal_) {
    std::fprintf(stderr, "\r%*s\r", static_cast<int>(width_), "");
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  written_ = false;
}

void print_warnings(const Diagnostics& diag) {
  for (const auto& w : diag.warnings) std::fprintf(stderr, "memwall: warning: %s\n", w.c_str());
}

}  // namespace memwall::cli
