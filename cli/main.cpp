// The memwall command: parses argv (the only place it is parsed) and dispatches to one subcommand.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli_common.h"
#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "memwall: break the GPU memory wall (ZeRO-Infinity as a research toolkit).\n"
      "Docs: docs/cli.md. Exit codes: 0 ok, 1 failure, 2 bad input."};
  app.set_version_flag("--version", std::string("memwall ") + MEMWALL_VERSION);
  app.require_subcommand(1);
  int exit_code = memwall::cli::kExitOk;
  memwall::cli::register_predict(app, exit_code);
  memwall::cli::register_plan(app, exit_code);
  memwall::cli::register_simulate(app, exit_code);
  memwall::cli::register_sweep(app, exit_code);
  memwall::cli::register_tune(app, exit_code);
  memwall::cli::register_io_bench(app, exit_code);
  memwall::cli::register_store(app, exit_code);
  memwall::cli::register_train(app, exit_code);
  memwall::cli::register_export(app, exit_code);
  memwall::cli::register_generate(app, exit_code);
  memwall::cli::register_tokenize(app, exit_code);
  memwall::cli::register_replay(app, exit_code);
  memwall::cli::register_calibrate(app, exit_code);
  memwall::cli::register_info(app, exit_code);
  // Name an unknown subcommand (CLI11 would only say that one is required).
  std::string known;
  bool is_known = false;
  for (const CLI::App* sub : app.get_subcommands({})) {
    known += (known.empty() ? "" : ", ") + sub->get_name();
    is_known = is_known || (argc > 1 && sub->get_name() == argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !is_known) {
    std::fprintf(stderr, "memwall: error: unknown command '%s'; allowed: %s\n", argv[1], known.c_str());
    return memwall::cli::kExitBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "memwall: error: %s (see memwall --help)\n", e.what());
    return memwall::cli::kExitBadInput;
  }
  return exit_code;
}
