// The memwall command: parses argv (the only place it is parsed) and dispatches to one subcommand.
#include <CLI/CLI.hpp>

#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "base/suggest.h"
#include "cli_common.h"
#include "commands.h"

namespace {

// The first word of argv after the subcommand that looks like an option (not a negative number) and is
// none of `sub`'s options, as "unknown option '--x' (did you mean '--y'?)"; "" when every one is known.
// CLI11 itself only lists the words it had left over, last first and mixed with their values.
std::string unknown_option(const CLI::App& sub, int argc, char** argv) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : sub.get_options()) {
    for (const std::string& n : opt->get_lnames()) names.push_back("--" + n);
    for (const std::string& n : opt->get_snames()) names.push_back("-" + n);
  }
  for (int i = 2; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;
    const bool number =
        word.size() > 1 && (std::isdigit(static_cast<unsigned char>(word[1])) || word[1] == '.');
    if (word.size() < 2 || word[0] != '-' || number) continue;
    const std::string name = word.substr(0, word.find('='));
    if (sub.get_option_no_throw(name) != nullptr) continue;
    return "unknown option '" + name + "'" + memwall::did_you_mean(name, names);
  }
  return "";
}

}  // namespace

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
  memwall::cli::register_completion(app, exit_code);
  // Name an unknown subcommand (CLI11 would only say that one is required).
  std::string known;
  bool is_known = false;
  for (const CLI::App* sub : app.get_subcommands({})) {
    known += (known.empty() ? "" : ", ") + sub->get_name();
    is_known = is_known || (argc > 1 && sub->get_name() == argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !is_known) {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    std::fprintf(stderr, "memwall: error: unknown command '%s'%s; allowed: %s\n", argv[1],
                 memwall::did_you_mean(argv[1], names).c_str(), known.c_str());
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
    // Point at the subcommand's help when one was named, and name an unknown option plainly.
    const CLI::App* sub = nullptr;
    for (const CLI::App* candidate : app.get_subcommands({})) {
      if (argc > 1 && candidate->get_name() == argv[1]) sub = candidate;
    }
    const std::string help = sub != nullptr ? "memwall " + sub->get_name() + " --help" : "memwall --help";
    const std::string unknown = sub != nullptr && dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr
                                    ? unknown_option(*sub, argc, argv)
                                    : "";
    std::fprintf(stderr, "memwall: error: %s (see %s)\n", unknown.empty() ? e.what() : unknown.c_str(),
                 help.c_str());
    return memwall::cli::kExitBadInput;
  }
  return exit_code;
}
