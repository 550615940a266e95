// `memwall io-bench`: sequential O_DIRECT throughput of the async I/O engine on a directory's filesystem,
// comparable to fio (same block size, queue depth and jobs); --sweep recommends DeepSpeed `aio` settings.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/units.h"
#include "cli_common.h"
#include "commands.h"
#include "engine/io/async_io.h"
#include "io_measure.h"

namespace memwall::cli {

namespace {

using nlohmann::json;

struct IoBenchOptions {
  std::string path;
  std::string size = "4G";
  std::string block_size = "1M";
  int queue_depth = 32;
  int parallelism = 2;
  std::string backend = "auto";
  bool read_only = false;
  bool write_only = false;
  bool json = false;
  bool sweep = false;
  bool keep = false;
};

int run_io_bench(const IoBenchOptions& opt) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(opt.path, ec)) {
    return report_error(Status::invalid_argument("--path " + opt.path + ": not a directory"));
  }
  const ParsedBytes size = parse_bytes(opt.size);
  const ParsedBytes block = parse_bytes(opt.block_size);
  if (!size.ok || size.bytes < 4096) {
    return report_error(Status::invalid_argument("--size \"" + opt.size +
                                                 "\" is not allowed; allowed: 4KiB or more, e.g. 4G"));
  }
  if (!block.ok || block.bytes < 4096 || static_cast<std::uint64_t>(block.bytes) % 4096 != 0) {
    return report_error(Status::invalid_argument("--block-size \"" + opt.block_size +
                                                 "\" is not allowed; allowed: a multiple of 4KiB, e.g. 1M"));
  }
  Result<io::Backend> backend = io::parse_backend(opt.backend);
  if (!backend.is_ok())
    return report_error(Status::invalid_argument("--backend: " + backend.status().message()));
  const std::string file = (fs::path(opt.path) / "memwall-io-bench.dat").string();
  const bool do_write = !opt.read_only;
  const bool do_read = !opt.write_only;
  std::vector<std::string> warnings;
  json out = {{"memwall_version", MEMWALL_VERSION}, {"command", "io-bench"}, {"file", file}};

  io::IoSettings base;
  base.backend = *backend;
  base.block_size = static_cast<std::size_t>(block.bytes);
  base.queue_depth = opt.queue_depth;
  base.parallelism = opt.parallelism;
  const auto total = static_cast<std::uint64_t>(size.bytes);
  int rc = kExitOk;
  if (!opt.sweep) {
    io::Backend used = base.backend;
    Result<Measurement> m = measure_disk(file, total, base, do_write, do_read, warnings, used);
    if (!m.is_ok()) {
      rc = report_error(m.status());
    } else {
      out["settings"] = {{"backend", io::backend_name(used)}, {"size_bytes", total},
                         {"block_size", base.block_size},     {"queue_depth", base.queue_depth},
                         {"parallelism", base.parallelism},   {"direct", m->direct}};
      if (do_write) out["write_Bps"] = m->write_Bps;
      if (do_read) out["read_Bps"] = m->read_Bps;
      if (!opt.json) {
        std::printf(
            "io-bench %s: %s, %s blocks, queue depth %d, %d queue(s), backend %s, %s\n", file.c_str(),
            format_bytes(static_cast<double>(total)).c_str(),
            format_bytes(static_cast<double>(base.block_size)).c_str(), base.queue_depth, base.parallelism,
            io::backend_name(used),
            m->direct ? "O_DIRECT" : "buffered (the filesystem refuses O_DIRECT: the page cache measured)");
        if (do_write) std::printf("write %8.3f GB/s\n", m->write_Bps / 1e9);
        if (do_read) std::printf("read  %8.3f GB/s\n", m->read_Bps / 1e9);
      }
    }
  } else {
    json grid = json::array();
    double best = -1;
    json best_row;
    if (!opt.json) std::printf("%10s %6s %12s %12s\n", "block", "depth", "write GB/s", "read GB/s");
    for (double bs : {256.0 * 1024, 512.0 * 1024, 1024.0 * 1024, 2048.0 * 1024, 4096.0 * 1024}) {
      for (int qd : {4, 8, 16, 32, 64}) {
        io::IoSettings s = base;
        s.block_size = static_cast<std::size_t>(bs);
        s.queue_depth = qd;
        io::Backend used = s.backend;
        Result<Measurement> m = measure_disk(file, total, s, true, true, warnings, used);
        if (!m.is_ok()) return report_error(m.status());
        const double score = 2.0 / (1.0 / m->write_Bps + 1.0 / m->read_Bps);  // harmonic mean
        json row = {{"block_size", s.block_size},
                    {"queue_depth", qd},
                    {"write_Bps", m->write_Bps},
                    {"read_Bps", m->read_Bps},
                    {"backend", io::backend_name(used)}};
        grid.push_back(row);
        if (score > best) {
          best = score;
          best_row = row;
        }
        if (!opt.json) {
          std::printf("%10s %6d %12.3f %12.3f\n", format_bytes(bs).c_str(), qd, m->write_Bps / 1e9,
                      m->read_Bps / 1e9);
        }
      }
    }
    const json snippet = {{"aio",
                           {{"block_size", best_row["block_size"]},
                            {"queue_depth", best_row["queue_depth"]},
                            {"intra_op_parallelism", base.parallelism},
                            {"single_submit", false},
                            {"overlap_events", true}}}};
    out["sweep"] = grid;
    out["recommended"] = snippet;
    if (!opt.json) {
      std::printf("\nbest read/write balance (harmonic mean): paste into ds_config.json:\n%s\n",
                  snippet.dump(2).c_str());
    }
  }
  out["warnings"] = warnings;
  for (const auto& w : warnings) std::fprintf(stderr, "memwall: warning: %s\n", w.c_str());
  if (!opt.keep) fs::remove(file, ec);
  if (opt.json && rc == kExitOk) std::printf("%s\n", out.dump(2).c_str());
  return rc;
}

}  // namespace

void register_io_bench(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<IoBenchOptions>();
  auto* cmd = app.add_subcommand("io-bench",
                                 "Sequential O_DIRECT throughput of the async I/O engine (fio-comparable)");
  cmd->add_option("--path", opt->path, "Directory on the filesystem to measure")->required();
  cmd->add_option("--size", opt->size, "Bytes to move per pass")->capture_default_str();
  cmd->add_option("--block-size", opt->block_size, "Bytes per request chunk (aio.block_size)")
      ->capture_default_str();
  cmd->add_option("--queue-depth", opt->queue_depth, "Chunks in flight per queue (aio.queue_depth)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--parallelism", opt->parallelism, "Submission queues (aio.intra_op_parallelism)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--backend", opt->backend, "auto, io_uring, libaio or psync")->capture_default_str();
  auto* r = cmd->add_flag("--read", opt->read_only, "Measure reads only");
  auto* w = cmd->add_flag("--write", opt->write_only, "Measure writes only");
  r->excludes(w);
  cmd->add_flag(
      "--both", [](std::int64_t) {}, "Measure writes then reads (default)");
  cmd->add_flag("--sweep", opt->sweep, "Try block sizes x queue depths and recommend aio settings");
  cmd->add_flag("--keep", opt->keep, "Keep the test file");
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->callback([opt, &exit_code] { exit_code = run_io_bench(*opt); });
}

}  // namespace memwall::cli
