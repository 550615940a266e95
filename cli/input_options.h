// Registers the input flags every planning command takes (--hardware, --model, --run, --nodes, --set,
// --model-set) on a CLI11 subcommand. Include only from files that already include CLI11.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "cli_common.h"

namespace memwall::cli {

inline void add_input_options(CLI::App* cmd, InputOptions& in) {
  cmd->add_option("--hardware,-H", in.hardware, "Hardware: scenario name (scenarios/hardware) or file")
      ->capture_default_str();
  cmd->add_option("--model,-m", in.model, "Model: scenario name or Hugging Face config.json")
      ->capture_default_str();
  cmd->add_option("--run,-r", in.run, "Run: scenario name or DeepSpeed ds_config.json")
      ->capture_default_str();
  cmd->add_option("--nodes,-n", in.nodes, "Override the hardware file's node count")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--set", in.run_set,
                  "Override run keys: a JSON object, e.g. '{\"zero_optimization.stage\": 2}'");
  cmd->add_option("--model-set", in.model_set,
                  "Override model keys: a JSON object, e.g. '{\"n_layer\": 10}'");
}

}  // namespace memwall::cli
