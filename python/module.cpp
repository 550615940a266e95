// The Python module memwall._memwall (pybind11): the core's answers as plain Python structures, and traces as
// numpy arrays. Inputs are resolved like the CLI's (scenario names or file paths, JSON overrides), through
// the same code (cli/cli_common.cpp). docs/python.md.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "cli_common.h"
#include "deepspeed_report.h"
#include "exec/executor.h"
#include "memory/bandwidth_model.h"
#include "memory/max_model.h"
#include "memory/memory_model.h"
#include "plan/planner.h"
#include "ranks_together.h"
#include "replay_traces.h"
#include "sim/simulate.h"
#include "spec/spec_loader.h"
#include "trace/trace.h"

namespace py = pybind11;
using namespace memwall;

namespace {

[[noreturn]] void raise(const Status& s) {
  if (s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound)
    throw py::value_error(s.message());
  throw std::runtime_error(s.message());
}

template <typename T>
T value_or_raise(Result<T> r) {
  if (!r.is_ok()) raise(r.status());
  return std::move(r).value();
}

py::object from_json(const nlohmann::json& j) {
  return py::module_::import("json").attr("loads")(j.dump());
}

std::string overrides(const py::object& o) {
  if (o.is_none()) return {};
  if (py::isinstance<py::str>(o)) return o.cast<std::string>();
  return py::module_::import("json").attr("dumps")(o).cast<std::string>();
}

cli::Inputs inputs(const std::string& hardware, const std::string& model, const std::string& run, int nodes,
                   const py::object& set, const py::object& model_set, bool resolve = true,
                   const std::vector<std::string>& what_ifs = {}) {
  cli::InputOptions opt;
  opt.hardware = hardware;
  opt.model = model;
  opt.run = run;
  opt.nodes = nodes;
  opt.run_set = overrides(set);
  opt.model_set = overrides(model_set);
  cli::Inputs in = value_or_raise(cli::load_inputs(opt));
  // Hardware what-ifs ("nvme=2", "gpu=dgx-h100", ...), as memwall simulate --what-if applies them.
  const cli::WhatIfs changes = value_or_raise(cli::parse_what_ifs(what_ifs));
  if (const Status st = changes.apply(in.hw); !st.is_ok()) raise(st);
  if (resolve) {
    const Status st = resolve_run_config(in.run, in.model, in.hw);
    if (!st.is_ok()) raise(st);
  }
  return in;
}

py::dict estimate_dict(const MemoryEstimate& e) {
  py::dict out;
  out["fits"] = e.fits;
  out["params"] = e.params;
  out["ranks"] = e.ranks;
  out["ranks_per_node"] = e.ranks_per_node;
  out["limiting_tier"] = tier_name(e.limiting_tier);
  py::dict tiers;
  for (int t = 0; t < kTierCount; ++t) {
    const TierUsage& u = e.tiers[t];
    py::dict d;
    d["scope"] = u.scope;
    d["capacity_bytes"] = u.capacity_bytes;
    d["used_bytes"] = u.used_bytes;
    d["utilization"] = u.utilization();
    py::dict cats;
    for (const MemoryItem& it : e.items) {
      if (static_cast<int>(it.tier) != t) continue;
      const char* c = category_name(it.category);
      const double prev = cats.contains(c) ? cats[c].cast<double>() : 0.0;
      cats[c] = prev + it.bytes_per_rank;
    }
    d["bytes_per_rank_by_category"] = cats;
    tiers[tier_name(static_cast<Tier>(t))] = d;
  }
  out["tiers"] = tiers;
  py::list items;
  for (const MemoryItem& it : e.items) {
    py::dict d;
    d["tier"] = tier_name(it.tier);
    d["category"] = category_name(it.category);
    d["bytes_per_rank"] = it.bytes_per_rank;
    d["per_node"] = it.per_node;
    d["rule"] = it.rule;
    items.append(d);
  }
  out["items"] = items;
  out["notes"] = e.notes;
  return out;
}

py::dict predict(const std::string& hardware, const std::string& model, const std::string& run, int nodes,
                 const py::object& set, const py::object& model_set) {
  const cli::Inputs in = inputs(hardware, model, run, nodes, set, model_set);
  const MemoryEstimate e = estimate_memory(in.model, in.run, in.hw);
  py::dict out = estimate_dict(e);
  out["deepspeed_estimate"] = from_json(
      cli::deepspeed_estimate_json(deepspeed_estimate(in.model, in.run, e.ranks_per_node, e.nodes_used), e));
  out["twin_flow"] = from_json(cli::twin_flow_json(in.run, e));
  out["hardware"] = in.hw.name;
  out["model"] = in.model.name;
  out["run"] = in.run.name;
  return out;
}

py::dict efficiency(const std::string& hardware, const std::string& model, const std::string& run, int nodes,
                    const py::object& set, const py::object& model_set, double target) {
  if (!(target > 0 && target < 1)) throw py::value_error("target efficiency must be in (0, 1)");
  const cli::Inputs in = inputs(hardware, model, run, nodes, set, model_set);
  const BandwidthReport r = analyze_bandwidth(in.model, in.run, in.hw, target);
  py::dict out;
  out["peak_flops_per_gpu"] = r.peak_flops;
  out["target_efficiency"] = r.target_efficiency;
  out["combined_efficiency_no_overlap"] = r.combined_efficiency;
  out["flops_per_iteration_per_gpu"] = r.flops_per_iteration;
  py::list rows;
  for (const DataTypeBandwidth& d : r.rows) {
    py::dict row;
    row["data_type"] = data_type_name(d.data_type);
    row["location"] = tier_name(d.location);
    row["moves"] = d.moves;
    row["overlappable"] = d.overlappable;
    row["ait_flops_per_byte"] = d.ait;
    row["available_Bps"] = d.available_Bps;
    row["full_overlap_Bps"] = d.overlap_Bps;
    row["target_Bps"] = d.target_Bps;
    row["efficiency"] = d.efficiency;
    row["rule"] = d.rule;
    rows.append(row);
  }
  out["data_types"] = rows;
  return out;
}

py::list max_model(const std::string& hardware, const std::string& model, const std::string& run, int nodes,
                   const std::string& family, const py::object& set) {
  const cli::Inputs in = inputs(hardware, model, run, nodes, set, py::none());
  const ShapeFamily fam = value_or_raise(parse_family(family));
  py::list out;
  for (Strategy s : all_strategies()) {
    const MaxModelResult r = find_max_model(s, fam, in.model, in.run, in.hw);
    py::dict d;
    d["strategy"] = strategy_name(s);
    d["label"] = strategy_label(s);
    d["found"] = r.found;
    d["params"] = r.found ? r.model.total_params() : 0.0;
    d["layers"] = r.found ? r.model.layers : 0;
    d["hidden"] = r.found ? r.model.hidden : 0;
    d["tiling_factor"] = r.tiling_factor;
    d["limiting_tier"] = tier_name(r.limiting_tier);
    d["next_failure"] = r.next_failure;
    d["error"] = r.error;
    out.append(d);
  }
  return out;
}

// `s`: the iteration as run (with gradient accumulation G > 1, accumulated_schedule's `acc.schedule`).
py::dict run_dict(const Schedule& s, const RunResult& r, double iteration_s, const std::string& executor,
                  int G, const AccumulatedSchedule& acc) {
  py::dict out;
  out["executor"] = executor;
  out["iteration_s"] = iteration_s;
  out["tasks"] = s.tasks.size();
  out["gradient_accumulation_steps"] = G;
  if (G > 1) {
    const std::vector<double> each = micro_batch_seconds(acc, r);
    out["micro_step_s"] = std::accumulate(each.begin(), each.end() - 1, 0.0) / (G - 1);
  }
  out["flops_per_iteration"] = s.flops();
  out["tflops_per_gpu"] = iteration_s > 0 ? s.flops() / iteration_s / 1e12 : 0.0;
  py::dict busy;
  for (int k = 0; k < kResourceCount; ++k) {
    if (static_cast<Resource>(k) != Resource::kNone)
      busy[resource_name(static_cast<Resource>(k))] = r.busy_s[k];
  }
  out["busy_s"] = busy;
  const MemoryTimeline tl = value_or_raise(replay_memory(s));
  py::dict peaks;
  for (int t = 0; t < kTierCount; ++t) peaks[tier_name(static_cast<Tier>(t))] = tl.peak_bytes[t];
  out["peak_bytes_per_rank"] = peaks;
  py::dict by_phase;  // per rank, like the peaks
  for (int ph = 0; ph < kPhaseCount; ++ph) {
    py::dict row;
    for (int t = 0; t < kTierCount; ++t) row[tier_name(static_cast<Tier>(t))] = tl.phase_peak_bytes[ph][t];
    by_phase[phase_name(static_cast<Phase>(ph))] = row;
  }
  out["peak_bytes_per_rank_by_phase"] = by_phase;
  out["notes"] = s.notes;
  return out;
}

py::dict plan_or_simulate(const std::string& hardware, const std::string& model, const std::string& run,
                          int nodes, const py::object& set, const py::object& model_set, bool simulate,
                          const std::string& trace, const std::vector<std::string>& what_ifs,
                          const std::string& straggler) {
  const cli::Inputs in = inputs(hardware, model, run, nodes, set, model_set, true, what_ifs);
  const Schedule s = value_or_raise(plan_iteration(in.model, in.run, in.hw));
  // Gradient accumulation: the G micro-steps back to back, the optimizer after the last.
  const int G = in.run.accumulation_steps();
  const AccumulatedSchedule acc = G > 1 ? accumulated_schedule(s, G) : AccumulatedSchedule{};
  const Schedule& iteration = G > 1 ? acc.schedule : s;
  cli::Straggler who;
  if (!straggler.empty()) who = value_or_raise(cli::parse_straggler(straggler, s.ranks_per_node));
  RunResult result;
  double iteration_s = 0;
  std::string executor = "reference";
  if (simulate) {
#if MEMWALL_WITH_SIMGRID
    sim::SimulationResult r = value_or_raise(sim::simulate_schedule(iteration, in.hw, {}));
    result = std::move(r.rank0);
    iteration_s = r.iteration_s;
    executor = "simgrid";
#else
    throw std::runtime_error("memwall was built without SimGrid");
#endif
  } else {
    ReferenceExecutor exec(in.hw, s.ranks_per_node);
    result = value_or_raise(run_schedule(iteration, exec));
    iteration_s = result.makespan_s;
  }
  if (!trace.empty()) {
    const Status st = cli::write_run_trace(trace, executor, simulate ? "simulate" : "plan", in, in.run,
                                           iteration, result, "{}");
    if (!st.is_ok()) raise(st);
  }
  py::dict out = run_dict(iteration, result, iteration_s, executor, G, acc);
  if (!straggler.empty())
    out["straggler"] = from_json(value_or_raise(cli::run_straggler(iteration, in.hw, who, !simulate)));
  return out;
}

py::dict read_trace_file(const std::string& path) {
  const std::string text = value_or_raise(cli::read_text_file(path));
  auto d = trace::read_trace(text);
  if (!d.is_ok()) throw py::value_error(path + ": " + d.status().message());
  const std::size_t n = d->spans.size();
  py::array_t<int> pid(n), tid(n), task(n);
  py::array_t<double> ts(n), dur(n), bytes(n), flops(n);
  py::list names, cats, phases;
  auto p = pid.mutable_unchecked<1>();
  auto t = tid.mutable_unchecked<1>();
  auto k = task.mutable_unchecked<1>();
  auto a = ts.mutable_unchecked<1>();
  auto b = dur.mutable_unchecked<1>();
  auto c = bytes.mutable_unchecked<1>();
  auto f = flops.mutable_unchecked<1>();
  for (std::size_t i = 0; i < n; ++i) {
    const auto& s = d->spans[i];
    const auto j = static_cast<py::ssize_t>(i);
    p(j) = s.pid;
    t(j) = s.tid;
    k(j) = s.task;
    a(j) = s.ts_us;
    b(j) = s.dur_us;
    c(j) = s.bytes;
    f(j) = s.flops;
    names.append(s.name);
    cats.append(s.category);
    phases.append(s.phase);
  }
  py::dict spans;
  spans["pid"] = pid;
  spans["tid"] = tid;
  spans["task"] = task;
  spans["ts_us"] = ts;
  spans["dur_us"] = dur;
  spans["bytes"] = bytes;
  spans["flops"] = flops;
  spans["name"] = names;
  spans["category"] = cats;
  spans["phase"] = phases;
  py::list counters;
  for (const auto& cs : d->counters) {
    py::dict e;
    e["pid"] = cs.pid;
    e["name"] = cs.name;
    e["ts_us"] = cs.ts_us;
    py::dict values;
    for (const auto& [key, v] : cs.values) values[key.c_str()] = v;
    e["values"] = values;
    counters.append(e);
  }
  py::dict threads;
  for (const auto& [key, name] : d->threads) threads[py::make_tuple(key.first, key.second)] = name;
  py::dict header;
  header["format"] = d->format;
  header["version"] = d->version;
  header["executor"] = d->header.executor;
  header["command"] = d->header.command;
  header["ranks"] = d->header.ranks;
  header["memwall_version"] = d->header.memwall_version;
  for (const auto& [key, text] :
       {std::pair{"hardware", &d->header.hardware_json}, std::pair{"model", &d->header.model_json},
        std::pair{"run", &d->header.run_json}, std::pair{"summary", &d->header.summary_json}}) {
    const auto j = nlohmann::json::parse(*text, nullptr, false);
    header[key] = j.is_discarded() ? py::object(py::none()) : from_json(j);
  }
  py::dict out;
  out["header"] = header;
  out["spans"] = spans;
  out["counters"] = counters;
  out["threads"] = threads;
  out["unknown_events"] = d->unknown_events;
  return out;
}

}  // namespace

PYBIND11_MODULE(_memwall, m) {
  m.doc() = "memwall: ZeRO-Infinity's memory, bandwidth and scheduling models, and memwall traces";
  m.attr("__version__") = MEMWALL_VERSION;
  m.def("scenarios_dir", &cli::scenarios_dir, "Where built-in scenarios are read from");
  m.def(
      "load",
      [](const std::string& hardware, const std::string& model, const std::string& run, int nodes,
         const py::object& set, const py::object& model_set) {
        const cli::Inputs in = inputs(hardware, model, run, nodes, set, model_set);
        py::dict out;
        out["hardware"] = from_json(nlohmann::json::parse(to_json_text(in.hw)));
        out["model"] = from_json(nlohmann::json::parse(to_json_text(in.model)));
        out["run"] = from_json(nlohmann::json::parse(to_json_text(in.run)));
        return out;
      },
      "The resolved hardware, model and run as dicts", py::arg("hardware") = "dgx2",
      py::arg("model") = "paper-1t", py::arg("run") = "zero-infinity-nvme", py::arg("nodes") = 0,
      py::arg("set") = py::none(), py::arg("model_set") = py::none());
  m.def("predict", &predict, "Memory per tier and category (memwall predict)", py::arg("hardware") = "dgx2",
        py::arg("model") = "paper-1t", py::arg("run") = "zero-infinity-nvme", py::arg("nodes") = 0,
        py::arg("set") = py::none(), py::arg("model_set") = py::none());
  m.def("efficiency", &efficiency,
        "Bandwidth needs and efficiency per data type, the paper's Eq. 6-11 (the bandwidth part of memwall "
        "predict)",
        py::arg("hardware") = "dgx2", py::arg("model") = "paper-1t", py::arg("run") = "zero-infinity-nvme",
        py::arg("nodes") = 0, py::arg("set") = py::none(), py::arg("model_set") = py::none(),
        py::arg("target") = 0.9);
  m.def("max_model", &max_model, "Largest trainable model per strategy of the paper's Table 2",
        py::arg("hardware") = "dgx2", py::arg("model") = "paper-1t", py::arg("run") = "zero-infinity-nvme",
        py::arg("nodes") = 0, py::arg("family") = "paper", py::arg("set") = py::none());
  m.def(
      "plan",
      [](const std::string& h, const std::string& mo, const std::string& r, int n, const py::object& set,
         const py::object& model_set, const std::string& trace, const std::vector<std::string>& what_if,
         const std::string& straggler) {
        return plan_or_simulate(h, mo, r, n, set, model_set, false, trace, what_if, straggler);
      },
      "Plan one iteration and time it with the reference executor (memwall plan / simulate --fast)",
      py::arg("hardware") = "dgx2", py::arg("model") = "paper-1t", py::arg("run") = "zero-infinity-nvme",
      py::arg("nodes") = 0, py::arg("set") = py::none(), py::arg("model_set") = py::none(),
      py::arg("trace") = "", py::arg("what_if") = std::vector<std::string>{}, py::arg("straggler") = "");
  m.def(
      "simulate",
      [](const std::string& h, const std::string& mo, const std::string& r, int n, const py::object& set,
         const py::object& model_set, const std::string& trace, const std::vector<std::string>& what_if,
         const std::string& straggler) {
        return plan_or_simulate(h, mo, r, n, set, model_set, true, trace, what_if, straggler);
      },
      "Simulate one iteration on the SimGrid model of the hardware (memwall simulate)",
      py::arg("hardware") = "dgx2", py::arg("model") = "paper-1t", py::arg("run") = "zero-infinity-nvme",
      py::arg("nodes") = 0, py::arg("set") = py::none(), py::arg("model_set") = py::none(),
      py::arg("trace") = "", py::arg("what_if") = std::vector<std::string>{}, py::arg("straggler") = "");
  m.def(
      "replay",
      [](const py::object& traces, const std::string& hardware, const std::vector<std::string>& what_if,
         const std::string& steps, const std::string& trace, bool fast) {
        cli::ReplayRequest req;
        if (py::isinstance<py::str>(traces)) {
          req.traces.push_back(traces.cast<std::string>());
        } else {
          req.traces = traces.cast<std::vector<std::string>>();
        }
        req.hardware = hardware;
        req.what_ifs = what_if;
        req.steps = steps;
        req.trace_out = trace;
        req.fast = fast;
        return from_json(value_or_raise(cli::replay_traces(req, nullptr)));
      },
      "Replay measured traces (memwall, PyTorch profiler, Chakra .et; files or directories) with what-ifs "
      "(memwall replay --json)",
      py::arg("traces"), py::arg("hardware") = "", py::arg("what_if") = std::vector<std::string>{},
      py::arg("steps") = "", py::arg("trace") = "", py::arg("fast") = false);
  m.def("read_trace", &read_trace_file, "A memwall trace (.json or .json.gz) as numpy arrays and dicts",
        py::arg("path"));
}
