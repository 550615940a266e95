// Helpers shared by the memwall subcommands: file reading, scenario lookup, spec loading with warnings,
// and the mapping from Status to one-line errors and exit codes. CLI-only (reads files and environment).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "exec/executor.h"
#include "plan/schedule.h"
#include "replay/replay.h"
#include "spec/spec_loader.h"
#include "trace/trace.h"

namespace memwall::cli {

// Exit codes: 0 success, 1 runtime failure, 2 bad input (flags, files, values, a plan that cannot fit).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;

// Reads a whole file; kNotFound / kIoError with the path and errno text.
Result<std::string> read_text_file(const std::string& path);

// Where built-in scenarios live: $MEMWALL_SCENARIOS, then next to the executable
// (../share/memwall/scenarios), then the source tree this binary was built from.
std::string scenarios_dir();

// `name_or_path` is a file path (contains '/' or ends in .json) or a scenario name looked up in
// scenarios_dir()/<kind>/<name>.json; for models also a Hugging Face model's directory, its config.json (a
// name with a '/' first, else only when no built-in model has that name). Not found -> kNotFound listing the
// available names.
Result<std::string> resolve_scenario(const std::string& kind, const std::string& name_or_path);

// Resolve, read and parse; warnings go to `diag`.
Result<HardwareSpec> load_hardware_arg(const std::string& arg, Diagnostics& diag);
Result<ModelSpec> load_model_arg(const std::string& arg, Diagnostics& diag);
Result<RunConfig> load_run_arg(const std::string& arg, Diagnostics& diag);

// The three input files every planning command takes, loaded, with --nodes applied (0 = keep the file's).
struct Inputs {
  HardwareSpec hw;
  ModelSpec model;
  RunConfig run;  // as read: not yet resolved
  Diagnostics diag;
};
// The input flags every planning command takes; registered by add_input_options (input_options.h).
struct InputOptions {
  std::string hardware = "dgx2";
  std::string model = "paper-1t";
  std::string run = "zero-infinity-nvme";
  int nodes = 0;          // 0: the hardware file's node count
  std::string model_set;  // JSON object text of model keys to override
  std::string run_set;    // JSON object text of run keys to override (dotted: "zero_optimization.stage")
};

// Loads the three files, applying the overrides before parsing and --nodes after.
Result<Inputs> load_inputs(const InputOptions& opt);
// The run file `run` (scenario name or path) with the dotted overrides `run_set` applied, as JSON text that
// --run reads (memwall tune --write-run).
Result<std::string> run_file_with_overrides(const std::string& run, const std::string& run_set);

// `--what-if key=value` texts (memwall simulate and replay, sweep files, the Python module) parsed, with
// gpu=HARDWARE's spec loaded. Errors name the text.
struct WhatIfs {
  std::vector<WhatIf> changes;
  std::shared_ptr<const HardwareSpec> gpu;  // gpu=HARDWARE's spec, or none
  // The changes on loaded hardware alone (apply_hardware_what_ifs), for a run planned on it.
  Status apply(HardwareSpec& hw) const { return apply_hardware_what_ifs(changes, gpu.get(), hw); }
};
Result<WhatIfs> parse_what_ifs(const std::vector<std::string>& texts);

// Checks before a command's work, not after it, that an output can be written: a directory output
// (`is_dir`) is made with its parents; a file's directory must exist and be writable. Errors read
// "OPTION PATH: why" ("PATH: why" without an option).
Status prepare_output(const std::string& option, const std::string& path, bool is_dir);

// Writes a trace file (.gz compresses) with the resolved inputs in its header; `body` adds the events.
Status write_trace_file(const std::string& path, const std::string& executor, const std::string& command,
                        int ranks, const Inputs& in, const RunConfig& run, const std::string& summary_json,
                        const std::function<void(trace::TraceWriter&)>& body);
// Writes rank 0's run of `s` as a trace file (.gz compresses), with the resolved inputs in its header.
Status write_run_trace(const std::string& path, const std::string& executor, const std::string& command,
                       const Inputs& in, const RunConfig& run, const Schedule& s, const RunResult& result,
                       const std::string& summary_json);

// Prints "memwall: error: <message>" and returns the exit code for the status.
int report_error(const Status& status);

// Progress of long work on stderr: on a terminal one line rewritten at most once a second (or when `force`);
// otherwise (a log) a line every 30 s from 10 s on, so short work writes nothing. finish() clears the
// terminal's line, or writes a log's last one (`text`) if any was written.
class ProgressLine {
 public:
  ProgressLine();
  void show(const std::string& text, bool force = false);
  void finish(const std::string& text);
  bool terminal() const { return terminal_; }
  // "1:05": minutes and seconds since it was made.
  std::string clock() const;

 private:
  double elapsed_s() const;
  bool terminal_;
  double start_, last_ = 0;
  bool written_ = false;
  std::size_t width_ = 0;  // the widest line shown on the terminal
};
// Prints each warning as "memwall: warning: <text>" to stderr.
void print_warnings(const Diagnostics& diag);

}  // namespace memwall::cli
