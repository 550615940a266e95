// `memwall info`: version, built-in scenario directory, and which optional backends work here.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "engine/capabilities.h"
#include "sim/simgrid_backend.h"

namespace memwall::cli {

void register_info(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("info", "Show the version, scenario directory and available backends");
  auto json_out = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json_out, "Print one JSON object");
  cmd->callback([json_out, &exit_code] {
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
