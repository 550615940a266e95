// `memwall tune`: which ZeRO configuration trains this model fastest on this hardware? Searches ZeRO-2,
// ZeRO-Offload and the ZeRO-3 placements of parameters and optimizer states (GPU, CPU, NVMe), the
// micro-batch, checkpoint offload and memory-centric tiling, simulates every configuration that fits
// (SimGrid, or the closed-form reference executor with --fast) and ranks them by tokens per second per GPU.
// DeepSpeed leaves this search to its users (docs/cli.md).
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/units.h"
#include "cli_common.h"
#include "commands.h"
#include "engine/io/atomic_file.h"
#include "input_options.h"
#include "memory/memory_model.h"
#include "simulate_experiment.h"

namespace memwall::cli {

namespace {

using nlohmann::json;

struct TuneOptions {
  InputOptions inputs;
  int top = 5;
  int max_micro_batch = 64;
  int max_tiling = 64;
  long global_batch = 0;            // 0: no target (gradient accumulation 1)
  std::vector<int> model_parallel;  // tensor-parallel degrees to try (empty: the run's own)
  std::vector<int>
      expert_parallel;  // expert-parallel degrees to try (a mixture of experts; empty: the run's)
  int jobs = 0;         // searches at once (0: one per core)
  // The reference executor instead of SimGrid. It does not share a PCIe switch between GPUs nor CPU memory
  // between ranks, so it overrates overlap somewhat (pipelined optimizer swapping, docs/performance.md).
  bool fast = false;
  // With gradient accumulation, every micro-batch of a step simulated; else kSimulatedMicroBatches of them
  // and, where those settle into a period, the rest extrapolated from it.
  bool all_micro_batches = false;
  bool dpu = false;  // also try ZeRO-Offload with the delayed parameter update (changes the training math)
  // ZeRO-Offload++'s Twin-Flow ratios to try with the optimizer on the CPU (offload_optimizer.ratio < 1).
  std::vector<double> offload_ratio;
  bool json = false;
  std::string write_run;
};

struct Placement {
  const char* name;   // "params/optimizer", prefixed "z0", "z1", "z2" below stage 3
  int stage;          // zero_optimization.stage
  const char* param;  // offload_param.device
  const char* opt;    // offload_optimizer.device
  bool nvme;
};
// Below stage 3 the parameters are whole on every GPU (no all-gathers in forward and backward): plain data
// parallelism (stage 0: the optimizer states whole on every GPU too), ZeRO-1 (gradients reduced once per
// step, at the accumulation boundary) on the GPU and with its optimizer on the CPU, ZeRO-2 and ZeRO-Offload
// (stage 2, optimizer on the CPU); then the ZeRO-3 / ZeRO-Infinity placements.
constexpr Placement kPlacements[] = {
    {"z0 gpu/gpu", 0, "none", "none", false}, {"z1 gpu/gpu", 1, "none", "none", false},
    {"z1 gpu/cpu", 1, "none", "cpu", false},  {"z2 gpu/gpu", 2, "none", "none", false},
    {"z2 gpu/cpu", 2, "none", "cpu", false},  {"gpu/gpu", 3, "none", "none", false},
    {"gpu/cpu", 3, "none", "cpu", false},     {"cpu/cpu", 3, "cpu", "cpu", false},
    {"gpu/nvme", 3, "none", "nvme", true},    {"cpu/nvme", 3, "cpu", "nvme", true},
    {"nvme/nvme", 3, "nvme", "nvme", true}};

// The next tiling factor above `tiling` (doubling, up to `max_tiling`) at which the closed-form memory model
// has the GPU tier fit, or 0 when none does. Planning a huge model with a large tiling factor takes seconds,
// so the factors the memory model already rules out are not planned.
int next_tiling(const InputOptions& inputs, int tiling, int max_tiling) {
  Result<Inputs> in = load_inputs(inputs);
  if (!in.is_ok()) return 2 * tiling <= max_tiling ? 2 * tiling : 0;
  for (int t = 2 * tiling; t <= max_tiling; t *= 2) {
    RunConfig run = in->run;
    run.memwall.tiling_factor = t;
    if (!resolve_run_config(run, in->model, in->hw).is_ok()) return t;  // let the planner say why
    if (estimate_memory(in->model, run, in->hw).tier(Tier::kGpu).fits()) return t;
  }
  return 0;
}

// One configuration simulated, with tiling raised while GPU memory is what does not fit: `set` gets the
// tiling factor that fitted and `result` simulate's JSON. kOutOfMemory when even the largest does not fit.
Status simulate_config(const TuneOptions& opt, json& set, json& result) {
  for (int tiling = 1;;) {
    set["memwall.tiling_factor"] = tiling;
    SimulateCliOptions sim;
    sim.inputs = opt.inputs;
    sim.inputs.run_set = set.dump();
    sim.fast = opt.fast;
    const Status s = simulate_experiment(sim, result, false);
    if (s.is_ok()) return s;
    const bool gpu_short = s.code() == StatusCode::kOutOfMemory && s.message().rfind("GPU", 0) == 0;
    if (!gpu_short) return s;
    tiling = next_tiling(sim.inputs, tiling, opt.max_tiling);
    if (tiling == 0) return s;
  }
}

// An accumulated step simulates this many micro-batches first unless --all-micro-batches: the first (the
// step's prefetch ramp-up), two steady ones, the last (with the optimizer).
constexpr int kSimulatedMicroBatches = 4;

// One line of the search: a tensor-parallel degree, a placement and where the checkpoints go, tried with
// micro-batches 1, 2, 4, ... until one does not fit.
struct Chain {
  int mp = 1, dp = 1, ep = 1;
  const Placement* placement = nullptr;
  bool cpu_checkpointing = false;
  // Optimizer states on NVMe: reads and writes overlap the sub-groups' steps (pipeline_read/write).
  bool optimizer_pipeline = false;
  bool delayed_update = false;  // ZeRO-Offload's delayed parameter update (--dpu)
  // Twin-Flow: offload_optimizer.ratio (1: off), with sub_group_size at most a tenth of a rank's shard so
  // that DeepSpeed's int((1 - ratio) x sub-groups) puts that share on the GPU.
  double ratio = 1;
  double sub_group_size = 0;
};

// {"tried": n, "fit": [result rows as --json lists them], "error": the first error or ""}. `tick` is
// called after each configuration tried.
json run_chain(const TuneOptions& opt, const json& user_set, const Chain& c, double seq,
               const std::function<void()>& tick) {
  json out = {{"tried", 0}, {"fit", json::array()}, {"error", ""}};
  const Placement& p = *c.placement;
  // Whether this chain's steps settled into a period so far; once not, larger micro-batches (the same
  // traffic, more of it) are simulated whole without trying. Not with the delayed parameter update: its
  // optimizer step runs beside the first micro-batches, for as many of them as it takes, so four of them
  // say nothing of forty.
  bool periodic = !opt.all_micro_batches && !c.delayed_update;
  for (int micro = 1; micro <= opt.max_micro_batch; micro *= 2) {
    int accumulation = 1;
    if (opt.global_batch > 0) {
      const long per_step = static_cast<long>(micro) * c.dp;
      if (opt.global_batch % per_step != 0) continue;
      accumulation = static_cast<int>(opt.global_batch / per_step);
    }
    int simulated = periodic ? std::min(accumulation, kSimulatedMicroBatches) : accumulation;
    json set = user_set;
    set.update({{"zero_optimization.stage", p.stage},
                {"zero_optimization.offload_param.device", p.param},
                {"zero_optimization.offload_optimizer.device", p.opt},
                {"train_micro_batch_size_per_gpu", micro},
                {"gradient_accumulation_steps", accumulation},
                {"train_batch_size", "auto"},
                {"activation_checkpointing.cpu_checkpointing", c.cpu_checkpointing}});
    if (c.delayed_update) set["memwall.delayed_parameter_update"] = true;
    if (c.ratio < 1) {
      set["zero_optimization.offload_optimizer.ratio"] = c.ratio;
      set["zero_optimization.sub_group_size"] = c.sub_group_size;
    }
    if (std::string(p.opt) == "nvme") {
      set["zero_optimization.offload_optimizer.pipeline_read"] = c.optimizer_pipeline;
      set["zero_optimization.offload_optimizer.pipeline_write"] = c.optimizer_pipeline;
    }
    if (!opt.model_parallel.empty()) {
      set["memwall.model_parallel"] = c.mp;
      set["memwall.data_parallel"] = "auto";
    }
    if (!opt.expert_parallel.empty()) set["memwall.expert_parallel"] = c.ep;
    out["tried"] = out["tried"].get<int>() + 1;
    json r, simulated_set = set;
    simulated_set["gradient_accumulation_steps"] = simulated;
    Status s = simulate_config(opt, simulated_set, r);
    // Where the steady micro-batches took exactly as long as each other the step has settled into a period
    // (the same tasks from the same state, as with parameters and optimizer in GPU or CPU memory), and the
    // micro-batches not simulated take that long too. Where they did not (NVMe traffic that carries over
    // from one micro-batch into the next, say) every micro-batch is simulated. A test compares both ways.
    std::vector<double> each;
    if (s.is_ok() && simulated < accumulation) {
      each = r["micro_steps_s"].get<std::vector<double>>();
      if (std::fabs(each[1] - each[2]) > 1e-9 * each[2]) {
        periodic = false;
        simulated = accumulation;
        simulated_set["gradient_accumulation_steps"] = simulated;
        s = simulate_config(opt, simulated_set, r);
      }
    }
    set["memwall.tiling_factor"] = simulated_set["memwall.tiling_factor"];
    tick();
    if (s.code() == StatusCode::kOutOfMemory) break;  // larger micro-batches do not fit either
    if (!s.is_ok()) {
      out["error"] = std::string(p.name) + ": " + s.message();
      break;
    }
    double it = r["iteration_s"].get<double>();
    double tflops = r["tflops_per_gpu"].get<double>();
    if (simulated < accumulation) {
      const double simulated_s = it;
      it += (accumulation - simulated) * each[1];
      tflops *= accumulation * simulated_s / (simulated * it);
    }
    // A tensor-parallel group of mp GPUs works on one micro-batch.
    const std::string twin = c.ratio < 1 ? strprintf(" r%g", c.ratio) : "";
    out["fit"].push_back({{"placement", std::string(p.name) + (c.delayed_update ? " dpu" : "") + twin},
                          {"micro_batch", micro},
                          {"model_parallel", c.mp},
                          {"expert_parallel", c.ep},
                          {"gradient_accumulation_steps", accumulation},
                          {"simulated_micro_batches", simulated},
                          {"cpu_checkpointing", c.cpu_checkpointing},
                          {"optimizer_pipeline", c.optimizer_pipeline},
                          {"delayed_parameter_update", c.delayed_update},
                          {"tiling_factor", set["memwall.tiling_factor"]},
                          {"tokens_per_s_per_gpu", it > 0 ? micro * accumulation * seq / (it * c.mp) : 0.0},
                          {"tflops_per_gpu", tflops},
                          {"iteration_s", it},
                          {"peak_bytes", r["peak_bytes"]},
                          {"breakdown_s", r["breakdown_s"]},
                          {"set", set}});
  }
  return out;
}

// Runs the chains in up to `jobs` child processes at once (each writes its result to a file of its own, and
// a byte down a pipe for each configuration it has tried, for the progress line on stderr: a huge model's
// searches take minutes each); the results come back in chain order. A child that fails is a chain with
// that error.
std::vector<json> run_chains(const TuneOptions& opt, const json& user_set, const std::vector<Chain>& chains,
                             double seq, int jobs) {
  std::vector<json> results(chains.size());
  std::vector<std::string> files(chains.size());
  std::vector<std::pair<pid_t, std::size_t>> running;
  std::size_t next = 0, done = 0, fitting = 0;
  long configurations = 0, shown = -1;
  ProgressLine progress;
  auto line = [&] {
    return strprintf("tune: %zu of %zu searches done, %ld configurations tried, %zu fit, %s", done,
                     chains.size(), configurations, fitting, progress.clock().c_str());
  };
  int ticks[2] = {-1, -1};
  if (::pipe(ticks) == 0) ::fcntl(ticks[0], F_SETFL, O_NONBLOCK);
  long announced = 0, reaped = 0;  // children that said they end; children reaped
  auto drain_ticks = [&] {
    char buf[256];
    for (ssize_t n; ticks[0] >= 0 && (n = ::read(ticks[0], buf, sizeof buf)) > 0;) {
      configurations += std::count(buf, buf + n, '+');
      announced += std::count(buf, buf + n, '=');
    }
  };
  auto collect = [&](pid_t pid, int status) {
    ++reaped;
    for (auto it = running.begin(); it != running.end(); ++it) {
      if (it->first != pid) continue;
      const std::size_t k = it->second;
      running.erase(it);
      auto text = read_text_file(files[k]);
      json r = text.is_ok() ? json::parse(*text, nullptr, false) : json();
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !r.is_object()) {
        r = {
            {"tried", 1}, {"fit", json::array()}, {"error", "the search process for a configuration failed"}};
      }
      fitting += r["fit"].size();
      results[k] = std::move(r);
      std::remove(files[k].c_str());
      ++done;
      return;
    }
  };
  while (done < chains.size()) {
    while (next < chains.size() && static_cast<int>(running.size()) < jobs) {
      char name[] = "/tmp/memwall-tune-XXXXXX";
      const int fd = ::mkstemp(name);
      files[next] = name;
      std::fflush(nullptr);
      const pid_t pid = fd < 0 ? -1 : ::fork();
      if (pid == 0) {
        if (ticks[0] >= 0) ::close(ticks[0]);
        const std::string text = run_chain(opt, user_set, chains[next], seq, [&] {
                                   if (ticks[1] >= 0 && ::write(ticks[1], "+", 1) != 1) {
                                     // (only the progress line misses it)
                                   }
                                 }).dump();
        const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
        ::close(fd);
        if (ticks[1] >= 0 && ::write(ticks[1], "=", 1) != 1) {
          // (the parent notices the exit at its next look instead)
        }
        ::_exit(ok ? 0 : 1);
      }
      if (fd >= 0) ::close(fd);
      if (pid < 0) {  // no process: run it here
        results[next] = run_chain(opt, user_set, chains[next], seq, [&] { ++configurations; });
        fitting += results[next]["fit"].size();
        std::remove(files[next].c_str());
        ++done;
      } else {
        running.emplace_back(pid, next);
      }
      ++next;
    }
    if (running.empty()) continue;
    // Up to 0.1 s for a child's next configuration ('+') or its end ('=', written just before it exits),
    // then the children that said they end, and any other that has (one that crashed says nothing). While
    // fewer have been reaped than said they end, one that did is still to exit: waiting for it is short.
    pollfd ready{ticks[0], POLLIN, 0};
    ::poll(&ready, 1, 100);
    drain_ticks();
    for (int status = 0; reaped < announced;) {
      const pid_t pid = ::waitpid(-1, &status, 0);
      if (pid <= 0) break;
      collect(pid, status);
    }
    for (int status = 0;;) {
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      collect(pid, status);
    }
    progress.show(line(), configurations != shown);
    shown = configurations;
  }
  drain_ticks();
  for (const int fd : ticks) {
    if (fd >= 0) ::close(fd);
  }
  progress.finish(line());
  return results;
}

int run_tune(const TuneOptions& options) {
  TuneOptions opt = options;
#if !MEMWALL_WITH_SIMGRID
  if (!opt.fast) {
    std::fprintf(stderr, "memwall: note: built without SimGrid: tune uses the reference executor (--fast)\n");
    opt.fast = true;
  }
#endif
  if (!opt.write_run.empty()) {  // checked before the search, not after it
    if (Status s = prepare_output("--write-run", opt.write_run, false); !s.is_ok()) return report_error(s);
  }
  Result<Inputs> in = load_inputs(opt.inputs);
  if (!in.is_ok()) return report_error(in.status());
  RunConfig base = in->run;
  if (Status s = resolve_run_config(base, in->model, in->hw); !s.is_ok()) return report_error(s);
  const int gpus = base.memwall.data_parallel * base.memwall.model_parallel;
  const double seq = base.memwall.sequence_length;
  json user_set = json::object();
  if (!opt.inputs.run_set.empty()) user_set = json::parse(opt.inputs.run_set, nullptr, false);
  if (!user_set.is_object()) return report_error(Status::invalid_argument("--set: not a JSON object"));

  std::vector<int> mps = opt.model_parallel;
  if (mps.empty()) mps.push_back(base.memwall.model_parallel);
  std::vector<int> eps = opt.expert_parallel;
  if (eps.empty()) eps.push_back(base.memwall.expert_parallel);
  for (const int ep : eps) {
    const int per_node = in->hw.gpu.count;
    if (ep > 1 &&
        (!in->model.moe() || in->model.experts % ep != 0 || (per_node % ep != 0 && ep % per_node != 0))) {
      return report_error(Status::invalid_argument(
          "--expert-parallel " + std::to_string(ep) + ": allowed: " +
          (in->model.moe() ? "a divisor of the experts per layer (" + std::to_string(in->model.experts) +
                                 ") that divides the GPUs per node (" + std::to_string(per_node) +
                                 ") or is a multiple of them"
                           : "1 (model '" + in->model.name + "' has no experts)")));
    }
  }
  std::vector<Chain> chains;
  for (const int mp : mps) {
    if (in->model.heads % mp != 0 || in->hw.gpu.count % mp != 0) {
      return report_error(Status::invalid_argument(
          "--model-parallel " + std::to_string(mp) + ": allowed: a divisor of both the model's heads (" +
          std::to_string(in->model.heads) + ") and the GPUs per node (" + std::to_string(in->hw.gpu.count) +
          ")"));
    }
    // With --model-parallel the data-parallel degree follows: all GPUs / mp.
    const int dp = opt.model_parallel.empty() ? base.memwall.data_parallel : in->hw.total_gpus() / mp;
    for (const int ep : eps) {
      // Expert parallelism needs its degree to divide the data-parallel ranks, and no tensor parallelism.
      if (ep > 1 && (dp % ep != 0 || mp > 1)) continue;
      for (const Placement& p : kPlacements) {
        if (p.nvme && !in->hw.has_nvme()) continue;
        for (const bool cpu_ckpt : {false, true}) {
          chains.push_back({mp, dp, ep, &p, cpu_ckpt, false, false});
          // Pipelined optimizer swapping needs a second (and third) set of swap buffers in CPU memory.
          if (std::string(p.opt) == "nvme") chains.push_back({mp, dp, ep, &p, cpu_ckpt, true, false});
          // ZeRO-Offload's delayed parameter update, only when asked: it trains on one-step-stale parameters.
          if (opt.dpu && p.stage < 3 && std::string(p.opt) == "cpu")
            chains.push_back({mp, dp, ep, &p, cpu_ckpt, false, true});
          // Twin-Flow: stage 3 with the optimizer on the CPU and the parameters on the GPU, as DeepSpeed and
          // memwall take it; sub-groups of at most a tenth of the rank's shard.
          if (p.stage == 3 && std::string(p.opt) == "cpu" && std::string(p.param) == "none") {
            const double shard = in->model.total_params() / (static_cast<double>(mp) * dp);
            const double sub = std::min(base.zero.sub_group_size, std::ceil(shard / 10));
            for (const double r : opt.offload_ratio) {
              if (r < 1) chains.push_back({mp, dp, ep, &p, cpu_ckpt, false, false, r, sub});
            }
          }
        }
      }
    }
  }
  if (opt.global_batch > 0) {
    // Some micro-batch must divide the global batch per data-parallel rank, or nothing can be tried.
    bool any = false;
    std::set<int> dps;
    for (const Chain& c : chains) {
      for (int micro = 1; micro <= opt.max_micro_batch; micro *= 2) {
        any = any || opt.global_batch % (static_cast<long>(micro) * c.dp) == 0;
      }
      dps.insert(c.dp);
    }
    if (!any) {
      std::string list;
      for (int d : dps) list += (list.empty() ? "" : ", ") + std::to_string(d);
      return report_error(Status::invalid_argument(
          "--global-batch " + std::to_string(opt.global_batch) +
          ": allowed: a multiple of the data-parallel degree (" + list + ") times a micro-batch of 1.." +
          std::to_string(opt.max_micro_batch) + " (a power of two)"));
    }
  }
  const int jobs =
      opt.jobs > 0 ? opt.jobs : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  json fit = json::array();
  int tried = 0, errors = 0;
  std::string first_error;
  for (const json& r : run_chains(opt, user_set, chains, seq, jobs)) {
    tried += r["tried"].get<int>();
    for (const json& row : r["fit"]) fit.push_back(row);
    if (!r["error"].get<std::string>().empty()) {
      ++errors;
      if (first_error.empty()) first_error = r["error"];
    }
  }
  if (fit.empty()) {
    return report_error(Status::out_of_memory(
        "no configuration of " + in->model.name + " fits " + in->hw.name +
        (opt.global_batch > 0 ? " with a global batch of " + std::to_string(opt.global_batch)
                              : std::string()) +
        " (" + std::to_string(tried) + " tried" + (first_error.empty() ? "" : "; " + first_error) +
        "); allowed: a smaller model, more nodes, or hardware with more memory"));
  }
  std::stable_sort(fit.begin(), fit.end(), [](const json& a, const json& b) {
    return a["tokens_per_s_per_gpu"].get<double>() > b["tokens_per_s_per_gpu"].get<double>();
  });
  json rows = json::array();
  for (std::size_t i = 0; i < fit.size() && static_cast<int>(i) < opt.top; ++i) rows.push_back(fit[i]);
  if (!opt.write_run.empty()) {
    auto text = run_file_with_overrides(opt.inputs.run, fit.front()["set"].dump());
    if (!text.is_ok()) return report_error(text.status());
    if (Status s = io::write_file_atomic(opt.write_run, {*text}); !s.is_ok()) return report_error(s);
  }
  if (opt.json) {
    json out = {{"memwall_version", MEMWALL_VERSION},
                {"command", "tune"},
                {"hardware", in->hw.name},
                {"model", in->model.name},
                {"gpus", gpus},
                {"executor", opt.fast ? "reference" : "simgrid"},
                {"tried", tried},
                {"fit", fit.size()},
                {"results", rows}};
    if (opt.global_batch > 0) out["global_batch"] = opt.global_batch;
    if (!opt.write_run.empty()) out["run_file"] = opt.write_run;
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  std::printf("tune %s on %s (%d GPUs, sequence %.0f%s), %s executor: %d configurations tried, %zu fit\n",
              in->model.name.c_str(), in->hw.name.c_str(), gpus, seq,
              opt.global_batch > 0 ? (", global batch " + std::to_string(opt.global_batch)).c_str() : "",
              opt.fast ? "reference" : "SimGrid", tried, fit.size());
  std::printf("%4s  %-14s %-4s %3s %3s %5s %4s %-5s %6s %13s %8s %11s %10s %10s %10s\n", "rank", "params/opt",
              "pipe", "mp", "ep", "micro", "G", "ckpt", "tiling", "tokens/s/GPU", "TFLOP/s", "iteration",
              "GPU peak", "CPU/node", "NVMe/node");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const json& r = rows[i];
    const bool nvme_opt = r["set"]["zero_optimization.offload_optimizer.device"] == "nvme";
    std::printf("%4zu  %-14s %-4s %3d %3d %5d %4d %-5s %6d %13.1f %8.1f %10.3fs %10s %10s %10s\n", i + 1,
                r["placement"].get<std::string>().c_str(),
                !nvme_opt ? "-" : (r["optimizer_pipeline"].get<bool>() ? "yes" : "no"),
                r["model_parallel"].get<int>(), r["expert_parallel"].get<int>(), r["micro_batch"].get<int>(),
                r["gradient_accumulation_steps"].get<int>(),
                r["cpu_checkpointing"].get<bool>() ? "CPU" : "GPU", r["tiling_factor"].get<int>(),
                r["tokens_per_s_per_gpu"].get<double>(), r["tflops_per_gpu"].get<double>(),
                r["iteration_s"].get<double>(), format_bytes(r["peak_bytes"]["gpu"]).c_str(),
                format_bytes(r["peak_bytes"]["cpu"]).c_str(), format_bytes(r["peak_bytes"]["nvme"]).c_str());
  }
  std::printf("best: --set '%s'\n", rows[0]["set"].dump().c_str());
  if (std::any_of(rows.begin(), rows.end(), [](const json& r) {
        return r["simulated_micro_batches"] != r["gradient_accumulation_steps"];
      })) {
    std::printf(
        "note: where a step's steady micro-batches took exactly as long as each other, %d of them were "
        "simulated (the first, two steady ones, the last) and the others extrapolated; "
        "--all-micro-batches simulates every one\n",
        kSimulatedMicroBatches);
  }
  if (!opt.write_run.empty()) std::printf("written: %s (use it with --run)\n", opt.write_run.c_str());
  if (errors > 0)
    std::printf("note: %d placement(s) could not be planned: %s\n", errors, first_error.c_str());
  return kExitOk;
}

}  // namespace

void register_tune(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<TuneOptions>();
  auto* cmd = app.add_subcommand(
      "tune", "Search offload placements, micro-batch, checkpoint offload and tiling for the fastest config");
  add_input_options(cmd, opt->inputs);
  cmd->add_option("--global-batch", opt->global_batch,
                  "Sequences per optimizer step to keep (micro-batch x accumulation x data-parallel ranks)")
      ->check(CLI::Range(1L, 1L << 40));
  cmd->add_option(
         "--model-parallel", opt->model_parallel,
         "Tensor-parallel degrees to try, e.g. 1,2,4 (default: the run's; data parallelism takes the rest)")
      ->delimiter(',');
  cmd->add_option(
         "--expert-parallel", opt->expert_parallel,
         "Expert-parallel degrees to try for a mixture of experts, e.g. 1,2,4,8 (default: the run's)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--max-micro-batch", opt->max_micro_batch, "Largest micro-batch tried (powers of two)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--max-tiling", opt->max_tiling, "Largest memory-centric tiling factor tried")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--jobs,-j", opt->jobs, "Searches run at once (default: one per core)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--top", opt->top, "Configurations listed")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option(
         "--offload-ratio", opt->offload_ratio,
         "Also try ZeRO-Offload++'s Twin-Flow with these offload_optimizer.ratio values, e.g. 0.3,0.5 "
         "(stage 3, optimizer on the CPU, parameters on the GPU; sub_group_size at most a tenth of a "
         "rank's shard)")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag(
      "--dpu", opt->dpu,
      "Also try ZeRO-Offload with the delayed parameter update (steps on one-step-stale parameters)");
  cmd->add_flag(
      "--fast", opt->fast,
      "The closed-form reference executor instead of SimGrid (faster; no contention for links, so it "
      "overrates overlap somewhat)");
  cmd->add_option("--write-run", opt->write_run, "Write the best configuration as a run file (JSON)");
  cmd->add_flag(
      "--all-micro-batches", opt->all_micro_batches,
      "With --global-batch, simulate every micro-batch of a step (default: 4 of them first; the others "
      "extrapolated where the steady ones repeat exactly)");
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->callback([opt, &exit_code] { exit_code = run_tune(*opt); });
}

}  // namespace memwall::cli
