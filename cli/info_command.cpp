// `memwall info`: version, built-in scenario directory, and which optional backends work here; with
// --models, the model files that ship and what memwall does with each.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/units.h"
#include "cli_common.h"
#include "commands.h"
#include "engine/capabilities.h"
#include "engine/model/gpt.h"
#include "sim/simgrid_backend.h"

namespace memwall::cli {
namespace {

// The shipped model scenarios (scenarios_dir()/models), sorted by name: each one's shape, parameters
// (active ones for a mixture of experts) and whether memwall train takes it (else why not: predict and
// simulate take every one). A file that does not load is listed with its error.
int print_models(bool json) {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(scenarios_dir()) / "models", ec)) {
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  nlohmann::json list = nlohmann::json::array();
  if (!json) {
    std::printf("%-24s %-19s %7s %9s %9s  %s\n", "model", "model_type", "layers", "params", "active",
                "memwall train");
  }
  int failed = 0;
  for (const std::string& name : names) {
    Diagnostics diag;
    const Result<ModelSpec> m = load_model_arg(name, diag);
    if (!m.is_ok()) {
      ++failed;
      if (json) {
        list.push_back({{"name", name}, {"error", m.status().message()}});
      } else {
        std::printf("%-24s error: %s\n", name.c_str(), m.status().message().c_str());
      }
      continue;
    }
    const Status trains = model::check_model_file(*m, "memwall train");
    const std::string family = trains.is_ok() ? model::gpt_family(model::gpt_config_of(*m)) : "";
    if (json) {
      list.push_back(
          {{"name", name},
           {"model_type", m->model_type},
           {"layers", m->layers},
           {"hidden", m->hidden},
           {"params", m->total_params()},
           {"active_params", m->active_params()},
           {"trains", trains.is_ok()},
           {"family", trains.is_ok() ? nlohmann::json(family) : nlohmann::json(nullptr)},
           {"why_not", trains.is_ok() ? nlohmann::json(nullptr) : nlohmann::json(trains.message())}});
      continue;
    }
    std::printf("%-24s %-19s %7d %9s %9s  %s\n", name.c_str(), m->model_type.c_str(), m->layers,
                format_count(m->total_params()).c_str(),
                m->moe() ? format_count(m->active_params()).c_str() : "",
                trains.is_ok() ? ("yes (" + family + "-shaped)").c_str() : "no: predict and simulate");
  }
  if (json)
    std::printf("%s\n", nlohmann::json{{"scenarios_dir", scenarios_dir()}, {"models", list}}.dump(2).c_str());
  return failed > 0 ? kExitFailure : kExitOk;
}

}  // namespace

void register_info(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("info", "Show the version, scenario directory and available backends");
  auto json_out = std::make_shared<bool>(false), models = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json_out, "Print one JSON object");
  cmd->add_flag("--models", *models,
                "List the shipped model files (--model NAME): shape, parameters, and whether memwall train "
                "takes each (predict and simulate take all)");
  cmd->callback([json_out, models, &exit_code] {
    if (*models) {
      exit_code = print_models(*json_out);
      return;
    }
    const auto caps = engine::probe_capabilities();
    if (*json_out) {
      nlohmann::json j;
      j["memwall_version"] = MEMWALL_VERSION;
      j["scenarios_dir"] = scenarios_dir();
      j["simgrid"] =
          sim::simgrid_available() ? nlohmann::json(sim::simgrid_version()) : nlohmann::json(nullptr);
      for (const auto& c : caps) {
        j["backends"][c.name] = {{"compiled", c.compiled}, {"usable", c.usable}, {"detail", c.detail}};
      }
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("memwall %s\nscenarios: %s\n", MEMWALL_VERSION, scenarios_dir().c_str());
      std::printf("%-9s %-9s %-7s %s\n", "backend", "compiled", "usable", "detail");
      std::printf("%-9s %-9s %-7s %s\n", "simgrid", sim::simgrid_available() ? "yes" : "no",
                  sim::simgrid_available() ? "yes" : "no", sim::simgrid_version().c_str());
      for (const auto& c : caps) {
        std::printf("%-9s %-9s %-7s %s\n", c.name.c_str(), c.compiled ? "yes" : "no", c.usable ? "yes" : "no",
                    c.detail.c_str());
      }
    }
    exit_code = kExitOk;
  });
}

}  // namespace memwall::cli
