// `memwall completion bash`: a bash completion script for memwall, written from the command line's own
// definition (every subcommand, its options, which take a value, the choices CLI11 checks), so it cannot
// drift from the binary that wrote it. Scenario names for --hardware, --model and --run are listed when
// completing, from the scenario directory, so a spec written by `memwall calibrate` later completes too.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "engine/io/async_io.h"
#include "memory/max_model.h"

namespace memwall::cli {

namespace {

// A word list for bash's `compgen -W "..."`; memwall's names need no quoting (checked in the tests).
std::string words(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : " ") + n;
  return out;
}

// The choices of an option checked with CLI::IsMember, whose description CLI11 writes as "{a,b,c}".
std::vector<std::string> choices(CLI::Option& opt) {
  std::vector<std::string> out;
  for (int i = 0;; ++i) {
    CLI::Validator* v = nullptr;
    try {
      v = opt.get_validator(i);
    } catch (const CLI::OptionNotFound&) {
      break;
    }
    const std::string d = v->get_description();
    if (d.size() < 2 || d.front() != '{' || d.back() != '}') continue;
    std::size_t start = 1;
    for (std::size_t i_comma = d.find(',', start);; i_comma = d.find(',', start)) {
      const std::size_t end = i_comma == std::string::npos ? d.size() - 1 : i_comma;
      if (end > start) out.push_back(d.substr(start, end - start));
      if (i_comma == std::string::npos) break;
      start = i_comma + 1;
    }
  }
  return out;
}

// How a value of the option completes: "scenario:KIND", "dir", "words:a b c" or "file". Choices checked
// in the commands' own code rather than by CLI11 (strategies, I/O backends) come from the same lists.
std::string value_kind(const std::string& long_name, const std::vector<std::string>& choice_list) {
  if (!choice_list.empty()) return "words:" + words({choice_list.begin(), choice_list.end()});
  if (long_name == "strategy") {
    std::set<std::string> names;
    for (Strategy s : all_strategies()) names.insert(strategy_name(s));
    return "words:" + words(names);
  }
  if (long_name == "backend") {
    std::set<std::string> names;
    for (auto b : {io::Backend::kAuto, io::Backend::kIoUring, io::Backend::kLibaio, io::Backend::kPsync}) {
      names.insert(io::backend_name(b));
    }
    return "words:" + words(names);
  }
  if (long_name == "hardware") return "scenario:hardware";
  if (long_name == "model") return "scenario:models";
  if (long_name == "run") return "scenario:runs";
  if (long_name == "path" || long_name == "tokenizer" || long_name.find("dir") != std::string::npos)
    return "dir";
  return "file";
}

std::string bash_script(CLI::App& app) {
  std::string subcommands;
  std::string cases;
  for (CLI::App* sub : app.get_subcommands({})) {
    subcommands += sub->get_name() + " ";
    std::set<std::string> options = {"--help", "-h"};
    std::set<std::string> positional_words;
    std::map<std::string, std::set<std::string>> by_kind;  // value kind -> the option names taking it
    for (CLI::Option* opt : sub->get_options()) {
      const std::vector<std::string> choice_list = choices(*opt);
      if (opt->get_positional() && opt->get_lnames().empty() && opt->get_snames().empty()) {
        positional_words.insert(choice_list.begin(), choice_list.end());
        continue;
      }
      const bool takes_value = opt->get_expected_max() > 0;  // flags expect 0 values
      const std::string long_name = opt->get_lnames().empty() ? "" : opt->get_lnames().front();
      for (const std::string& n : opt->get_lnames()) {
        options.insert("--" + n);
        if (takes_value) by_kind[value_kind(long_name, choice_list)].insert("--" + n);
      }
      for (const std::string& n : opt->get_snames()) {
        options.insert("-" + n);
        if (takes_value) by_kind[value_kind(long_name, choice_list)].insert("-" + n);
      }
    }
    cases += "    " + sub->get_name() + ")\n";
    cases += "      opts=\"" + words(options) + "\"\n";
    cases += "      positional=\"" + words(positional_words) + "\"\n";
    cases += "      case $prev in\n";
    for (const auto& [kind, names] : by_kind) {
      std::string pattern;
      for (const std::string& n : names) pattern += (pattern.empty() ? "" : "|") + n;
      std::string action;
      if (kind.rfind("scenario:", 0) == 0) {
        action = "_memwall_scenarios " + kind.substr(9);
      } else if (kind == "dir") {
        action = "COMPREPLY=($(compgen -d -- \"$cur\"))";
      } else if (kind.rfind("words:", 0) == 0) {
        action = "COMPREPLY=($(compgen -W \"" + kind.substr(6) + "\" -- \"$cur\"))";
      } else {
        action = "COMPREPLY=($(compgen -f -- \"$cur\"))";
      }
      cases += "        " + pattern + ") " + action + "; return ;;\n";
    }
    cases += "      esac ;;\n";
  }
  std::string s;
  s += "# bash completion for memwall " MEMWALL_VERSION ", written by `memwall completion bash`.\n";
  s += "# Load it with: source <(memwall completion bash)   (zsh: autoload -U bashcompinit && bashcompinit "
       "first)\n";
  s += "_memwall_scenarios() {\n";
  s += "  local dir=${MEMWALL_SCENARIOS:-" + scenarios_dir() + "}/$1 f names=()\n";
  s += "  for f in \"$dir\"/*.json; do [ -e \"$f\" ] && f=${f##*/} && names+=(\"${f%.json}\"); done\n";
  s += "  COMPREPLY=($(compgen -W \"${names[*]}\" -- \"$cur\") $(compgen -f -- \"$cur\"))\n";
  s += "}\n";
  s += "_memwall() {\n";
  s += "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} opts=\"\" positional=\"\"\n";
  s += "  COMPREPLY=()\n";
  s += "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n";
  s += "    COMPREPLY=($(compgen -W \"" + subcommands + "--help --version\" -- \"$cur\"))\n";
  s += "    return\n";
  s += "  fi\n";
  s += "  case ${COMP_WORDS[1]} in\n";
  s += cases;
  s += "    *) return ;;\n";
  s += "  esac\n";
  s += "  if [[ $cur == -* ]]; then\n";
  s += "    COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n";
  s += "  else\n";
  s += "    COMPREPLY=($(compgen -W \"$positional\" -- \"$cur\") $(compgen -f -- \"$cur\"))\n";
  s += "  fi\n";
  s += "}\n";
  s += "complete -o filenames -F _memwall memwall\n";
  return s;
}

}  // namespace

void register_completion(CLI::App& app, int& exit_code) {
  auto* cmd =
      app.add_subcommand("completion", "Print a shell completion script: source <(memwall completion bash)");
  auto shell = std::make_shared<std::string>();
  cmd->add_option("shell", *shell, "The shell (bash; zsh loads it through bashcompinit)")
      ->required()
      ->check(CLI::IsMember({"bash"}));
  // The callback owns `shell`, which CLI11 writes into while parsing (found by AddressSanitizer).
  cmd->callback([cmd, shell, &exit_code] {
    std::fputs(bash_script(*cmd->get_parent()).c_str(), stdout);
    exit_code = kExitOk;
  });
}

}  // namespace memwall::cli
