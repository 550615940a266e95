// `memwall store`: exercise and inspect a rank's tensor store. `fill` commits new versions of N tensors in a
// loop (kill it at any moment), `verify` reopens the store and checks that every tensor is one whole version,
// `list` prints what it holds.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/units.h"
#include "cli_common.h"
#include "commands.h"
#include "engine/io/tensor_store.h"

namespace memwall::cli {

namespace {

struct StoreCliOptions {
  std::string action;
  std::string path;
  int rank = 0;
  int tensors = 8;
  std::string tensor_size = "4M";
  std::string capacity = "256M";
  std::uint64_t versions = 0;  // 0: until killed
  bool json = false;
};

// Tensor `name` at version `v`: the version in its first 8 bytes, the rest derived from name and version.
void fill_pattern(const std::string& name, std::uint64_t v, std::vector<char>& out) {
  std::mt19937_64 rng(std::hash<std::string>{}(name) ^ (v * 0x9e3779b97f4a7c15ull));
  for (auto& c : out) c = static_cast<char>(rng());
  if (out.size() >= 8) std::memcpy(out.data(), &v, 8);
}

int run_store(const StoreCliOptions& opt) {
  Result<std::unique_ptr<io::AsyncIo>> io = io::AsyncIo::create(io::IoSettings{});
  if (!io.is_ok()) return report_error(io.status());
  if (opt.action == "fill") {
    const ParsedBytes size = parse_bytes(opt.tensor_size);
    const ParsedBytes cap = parse_bytes(opt.capacity);
    if (!size.ok || size.bytes < 8)
      return report_error(Status::invalid_argument("--tensor-size " + opt.tensor_size +
                                                   ": allowed: a size of 8 bytes or more, e.g. 4M"));
    if (!cap.ok) return report_error(Status::invalid_argument("--capacity: a size such as 256M"));
    Result<std::unique_ptr<io::TensorStore>> store = io::TensorStore::open(opt.path, opt.rank, **io);
    if (!store.is_ok() && store.status().code() == StatusCode::kNotFound) {
      io::StoreOptions so;
      so.dir = opt.path;
      so.rank = opt.rank;
      so.capacity_bytes = static_cast<std::uint64_t>(cap.bytes);
      so.extent_bytes = std::min<std::uint64_t>(so.capacity_bytes, 1ull << 30) / 4096 * 4096;
      store = io::TensorStore::create(so, **io);
    }
    if (!store.is_ok()) return report_error(store.status());
    std::vector<char> buf(static_cast<std::size_t>(size.bytes));
    for (std::uint64_t v = 1; opt.versions == 0 || v <= opt.versions; ++v) {
      for (int t = 0; t < opt.tensors; ++t) {
        const std::string name = "tensor" + std::to_string(t);
        fill_pattern(name, v, buf);
        Status s = (*store)->write(name, buf.data(), buf.size());
        if (!s.is_ok()) return report_error(s);
      }
      Status s = (*store)->commit();
      if (!s.is_ok()) return report_error(s);
      std::printf("committed version %llu of %d tensors\n", static_cast<unsigned long long>(v), opt.tensors);
      std::fflush(stdout);
    }
    return kExitOk;
  }
  Result<std::unique_ptr<io::TensorStore>> store = io::TensorStore::open(opt.path, opt.rank, **io);
  if (!store.is_ok()) return report_error(store.status());
  nlohmann::json out = {{"store", (*store)->path()},
                        {"capacity_bytes", (*store)->capacity_bytes()},
                        {"free_bytes", (*store)->free_bytes()}};
  nlohmann::json tensors = nlohmann::json::array();
  int torn = 0;
  for (const std::string& name : (*store)->names()) {
    const std::uint64_t bytes = (*store)->size_of(name).value();
    nlohmann::json t = {{"name", name}, {"bytes", bytes}};
    if (opt.action == "verify") {
      std::vector<char> got(static_cast<std::size_t>(bytes)), want(got.size());
      Status s = (*store)->get(name, got.data(), bytes);
      std::uint64_t v = 0;
      if (s.is_ok() && bytes >= 8) {
        std::memcpy(&v, got.data(), 8);
        fill_pattern(name, v, want);
      }
      const bool whole = s.is_ok() && got == want;
      torn += whole ? 0 : 1;
      t["version"] = v;
      t["whole"] = whole;
      if (!s.is_ok()) t["error"] = s.message();
    }
    tensors.push_back(t);
  }
  out["tensors"] = tensors;
  if (opt.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("%s: %zu tensor(s), %s free of %s\n", (*store)->path().c_str(), tensors.size(),
                format_bytes(static_cast<double>((*store)->free_bytes())).c_str(),
                format_bytes(static_cast<double>((*store)->capacity_bytes())).c_str());
    for (const auto& t : tensors) {
      std::printf("  %-12s %12s", t["name"].get<std::string>().c_str(),
                  format_bytes(t["bytes"].get<double>()).c_str());
      if (t.contains("whole")) {
        std::printf("  version %llu  %s", static_cast<unsigned long long>(t["version"].get<std::uint64_t>()),
                    t["whole"].get<bool>() ? "whole" : "TORN");
      }
      std::printf("\n");
    }
  }
  if (opt.action == "verify" && torn > 0) {
    std::fprintf(stderr, "memwall: error: %d tensor(s) of %s are not whole versions\n", torn,
                 (*store)->path().c_str());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

void register_store(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<StoreCliOptions>();
  auto* cmd = app.add_subcommand("store",
                                 "Fill, verify or list a rank's NVMe tensor store (crash-consistency check)");
  cmd->add_option("action", opt->action, "fill, verify or list")
      ->required()
      ->check(CLI::IsMember({"fill", "verify", "list"}));
  cmd->add_option("--path", opt->path, "Store directory (e.g. offload_param.nvme_path)")->required();
  cmd->add_option("--rank", opt->rank, "Rank whose store to use")->capture_default_str();
  cmd->add_option("--tensors", opt->tensors, "fill: tensors per version")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--tensor-size", opt->tensor_size, "fill: bytes per tensor")->capture_default_str();
  cmd->add_option("--capacity", opt->capacity, "fill: capacity when creating the store")
      ->capture_default_str();
  cmd->add_option("--versions", opt->versions, "fill: versions to commit (0: until killed)")
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "Print one JSON object (list, verify)");
  cmd->callback([opt, &exit_code] { exit_code = run_store(*opt); });
}

}  // namespace memwall::cli
