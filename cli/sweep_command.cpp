// `memwall sweep FILE`: runs a list of simulate experiments and tabulates them (human, --csv, --json).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/suggest.h"
#include "base/units.h"
#include "cli_common.h"
#include "commands.h"
#include "simulate_experiment.h"
#include "spec/json_text.h"

namespace memwall::cli {

namespace {

using nlohmann::json;

struct SweepOptions {
  std::string file;
  std::string csv_path;
  bool json = false;
  bool fast = false;
};

struct Experiment {
  std::string name;
  SimulateCliOptions sim;
};

// Reads a sweep file: {"format": "memwall-sweep", "version": 1, "name", "description",
// "defaults": {...}, "experiments": [{"name", "hardware", "model", "run", "nodes", "fast", "set",
// "model_set", "what_if"}]}. An experiment's keys override the defaults; its "set"/"model_set" objects are
// merged over theirs. "what_if": a list of simulate --what-if changes to the hardware ("nvme=2").
Result<std::vector<Experiment>> load_sweep(const std::string& path, std::string& title) {
  Result<std::string> text = read_text_file(path);
  if (!text.is_ok()) return text.status();
  json doc;
  try {
    doc = json::parse(*text);
  } catch (const json::exception& e) {  // (a syntax error, or a number out of a double's range)
    return Status::invalid_argument(path + ": not valid JSON: " + json_error_text(e));
  }
  auto bad = [&](const std::string& what) { return Status::invalid_argument(path + ": " + what); };
  if (!doc.is_object()) return bad("top level is not an object");
  if (doc.contains("format") && doc["format"] != "memwall-sweep")
    return bad("key 'format' is " + doc["format"].dump() + "; allowed: \"memwall-sweep\"");
  if (doc.contains("version") && doc["version"] != 1)
    return bad("key 'version' is " + doc["version"].dump() + "; this memwall reads version 1");
  if (!doc.contains("experiments") || !doc["experiments"].is_array() || doc["experiments"].empty()) {
    return bad("key 'experiments': a non-empty list of experiments is required");
  }
  if (doc.contains("name") && !doc["name"].is_string())
    return bad("key 'name' is " + doc["name"].dump() + "; allowed: a string");
  title = doc.value("name", path);
  const json defaults = doc.value("defaults", json::object());
  if (!defaults.is_object()) return bad("key 'defaults' is " + defaults.dump() + "; allowed: an object");
  // Each experiment key's type, checked before it is read (nlohmann's own type errors name no key).
  const auto type_ok = [](const std::string& key, const json& v) {
    if (key == "nodes") return v.is_number_integer();
    if (key == "fast") return v.is_boolean();
    if (key == "set" || key == "model_set") return v.is_object();
    if (key == "what_if") {
      return v.is_array() && std::all_of(v.begin(), v.end(), [](const json& w) { return w.is_string(); });
    }
    return key == "_comment" || v.is_string();
  };
  const auto type_name = [](const std::string& key) -> std::string {
    return key == "nodes"                       ? "an integer"
           : key == "fast"                      ? "true or false"
           : key == "set" || key == "model_set" ? "an object of overrides"
           : key == "what_if"                   ? "a list of strings (\"nvme=2\")"
                                                : "a string";
  };
  std::vector<Experiment> out;
  for (size_t i = 0; i < doc["experiments"].size(); ++i) {
    json e = defaults;
    const json& x = doc["experiments"][i];
    if (!x.is_object()) return bad("experiments[" + std::to_string(i) + "] is not an object");
    for (const json* from : {&defaults, &x}) {
      for (auto it = from->begin(); it != from->end(); ++it) {
        if (!type_ok(it.key(), it.value())) {
          return bad((from == &x ? "experiments[" + std::to_string(i) + "]" : std::string("defaults")) +
                     ": key '" + it.key() + "' is " + it.value().dump() +
                     "; allowed: " + type_name(it.key()));
        }
      }
    }
    for (auto it = x.begin(); it != x.end(); ++it) {
      if ((it.key() == "set" || it.key() == "model_set") && e.contains(it.key())) {
        e[it.key()].update(it.value());
      } else {
        e[it.key()] = it.value();
      }
    }
    for (auto it = e.begin(); it != e.end(); ++it) {
      static const std::vector<std::string> kKeys = {"name", "hardware", "model",     "run",     "nodes",
                                                     "fast", "set",      "model_set", "what_if", "_comment"};
      if (std::find(kKeys.begin(), kKeys.end(), it.key()) == kKeys.end()) {
        return bad("experiments[" + std::to_string(i) + "]: unknown key '" + it.key() + "'" +
                   did_you_mean(it.key(), kKeys) +
                   "; allowed: name, hardware, model, run, nodes, fast, set, model_set, what_if");
      }
    }
    Experiment ex;
    try {
      ex.name = e.value("name", "experiment " + std::to_string(i + 1));
      InputOptions& in = ex.sim.inputs;
      in.hardware = e.value("hardware", in.hardware);
      in.model = e.value("model", in.model);
      in.run = e.value("run", in.run);
      in.nodes = e.value("nodes", 0);
      ex.sim.fast = e.value("fast", false);
      if (e.contains("set")) in.run_set = e["set"].dump();
      if (e.contains("model_set")) in.model_set = e["model_set"].dump();
      if (e.contains("what_if")) ex.sim.what_ifs = e["what_if"].get<std::vector<std::string>>();
    } catch (const json::exception& err) {
      return bad("experiments[" + std::to_string(i) + "]: " + json_error_text(err));
    }
    out.push_back(std::move(ex));
  }
  return out;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

int run_sweep(const SweepOptions& opt) {
  std::string title;
  Result<std::vector<Experiment>> experiments = load_sweep(opt.file, title);
  if (!experiments.is_ok()) return report_error(experiments.status());
  json rows = json::array();
  int failed = 0;
  const size_t n = experiments->size();
  int w = 26;  // the experiment column: as wide as the longest name
  for (const Experiment& ex : *experiments) w = std::max(w, static_cast<int>(ex.name.size()));
  if (!opt.json) {
    std::printf("sweep %s: %zu experiment(s)\n", title.c_str(), n);
    std::printf("%-*s %9s %5s %5s %6s %3s %-10s %11s %9s %9s  %s\n", w, "experiment", "params", "nodes",
                "GPUs", "batch", "mp", "params/opt", "iteration", "TFLOP/s", "PFLOP/s", "largest share");
  }
  for (size_t i = 0; i < n; ++i) {
    Experiment& ex = (*experiments)[i];
    if (opt.fast) ex.sim.fast = true;
    std::fprintf(stderr, "[%zu/%zu] %s\n", i + 1, n, ex.name.c_str());
    json r;
    Status s = simulate_experiment(ex.sim, r, false);
    json row = {{"experiment", ex.name}};
    if (!s.is_ok()) {
      // A configuration that does not fit the hardware is a result of the sweep; anything else is a failure.
      const bool fits = s.code() != StatusCode::kOutOfMemory;
      if (fits) ++failed;
      row[fits ? "error" : "does_not_fit"] = s.message();
      rows.push_back(row);
      if (!opt.json) {
        std::printf("%-*s %s\n", w, ex.name.c_str(),
                    ((fits ? "error: " : "does not fit: ") + s.message()).c_str());
      }
      continue;
    }
    const auto& run = r["inputs"]["run"];
    const auto& z = run["zero_optimization"];
    const std::string placement =
        std::string(z["offload_param"]["device"] == "none" ? "gpu" : z["offload_param"]["device"]) + "/" +
        std::string(z["offload_optimizer"]["device"] == "none" ? "gpu" : z["offload_optimizer"]["device"]);
    std::string largest;
    double largest_s = -1;
    for (auto it = r["breakdown_s"].begin(); it != r["breakdown_s"].end(); ++it) {
      if (it.value().get<double>() > largest_s) {
        largest_s = it.value().get<double>();
        largest = it.key();
      }
    }
    row.update({{"hardware", r["inputs"]["hardware"]["name"]},
                {"model", r["inputs"]["model"]["name"]},
                {"params", r["params"]},
                {"nodes", r["inputs"]["hardware"]["nodes"]},
                {"gpus", r["gpus"]},
                {"micro_batch", run["train_micro_batch_size_per_gpu"]},
                {"model_parallel", run["memwall"]["model_parallel"]},
                {"placement", placement},
                {"executor", r["simulation"]["executor"]},
                {"iteration_s", r["iteration_s"]},
                {"tflops_per_gpu", r["tflops_per_gpu"]},
                {"pflops_total", r["pflops_total"]},
                {"breakdown_s", r["breakdown_s"]},
                {"largest_share", largest},
                {"peak_bytes", r["peak_bytes"]}});
    if (!ex.sim.what_ifs.empty()) row["what_if"] = ex.sim.what_ifs;
    rows.push_back(row);
    if (!opt.json) {
      std::printf("%-*s %9s %5d %5d %6.0f %3d %-10s %10.2fs %9.1f %9.3f  %s %.0f%%\n", w, ex.name.c_str(),
                  format_count(r["params"]).c_str(), r["inputs"]["hardware"]["nodes"].get<int>(),
                  r["gpus"].get<int>(), run["train_micro_batch_size_per_gpu"].get<double>(),
                  run["memwall"]["model_parallel"].get<int>(), placement.c_str(),
                  r["iteration_s"].get<double>(), r["tflops_per_gpu"].get<double>(),
                  r["pflops_total"].get<double>(), largest.c_str(),
                  100 * largest_s / r["iteration_s"].get<double>());
    }
  }
  if (!opt.csv_path.empty()) {
    std::ofstream csv(opt.csv_path);
    if (!csv) return report_error(Status::io_error(opt.csv_path + ": cannot open for writing"));
    csv << "experiment,hardware,model,params,nodes,gpus,micro_batch,model_parallel,placement,executor,"
           "iteration_s,"
           "tflops_per_gpu,pflops_total,compute_s,exposed_communication_s,io_stall_s,idle_s,optimizer_step_s,"
           "does_not_fit,"
           "error\n";
    for (const auto& row : rows) {
      auto field = [&](const char* k) {
        if (!row.contains(k)) return std::string();
        return row[k].is_string() ? csv_field(row[k].get<std::string>()) : row[k].dump();
      };
      auto part = [&](const char* k) {
        return row.contains("breakdown_s") ? row["breakdown_s"][k].dump() : "";
      };
      csv << field("experiment") << "," << field("hardware") << "," << field("model") << ","
          << field("params") << "," << field("nodes") << "," << field("gpus") << "," << field("micro_batch")
          << "," << field("model_parallel") << "," << field("placement") << "," << field("executor") << ","
          << field("iteration_s") << "," << field("tflops_per_gpu") << "," << field("pflops_total") << ","
          << part("compute") << "," << part("exposed_communication") << "," << part("io_stall") << ","
          << part("idle") << "," << part("optimizer_step") << "," << field("does_not_fit") << ","
          << field("error") << "\n";
    }
    if (!csv) return report_error(Status::io_error(opt.csv_path + ": write failed"));
  }
  if (opt.json) {
    std::printf(
        "%s\n",
        json(
            {{"memwall_version", MEMWALL_VERSION}, {"command", "sweep"}, {"sweep", title}, {"results", rows}})
            .dump(2)
            .c_str());
  } else if (failed > 0) {
    std::printf("%d of %zu experiment(s) failed (see above)\n", failed, n);
  }
  return failed > 0 ? kExitFailure : kExitOk;
}

}  // namespace

void register_sweep(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<SweepOptions>();
  auto* cmd = app.add_subcommand("sweep", "Run a list of simulate experiments and tabulate them");
  cmd->add_option("file", opt->file, "Sweep file (scenarios/paper/*.json; format in docs/cli.md)")
      ->required();
  cmd->add_option("--csv", opt->csv_path, "Also write the table as CSV");
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->add_flag("--fast", opt->fast, "Use the reference executor for every experiment");
  cmd->callback([opt, &exit_code] { exit_code = run_sweep(*opt); });
}

}  // namespace memwall::cli
