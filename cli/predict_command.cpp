// `memwall predict`: does a model fit, where does the memory go, what bandwidth does it need; and the
// largest trainable model per strategy (--max-model) or hidden size per tiling factor (--max-hidden).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/units.h"
#include "cli_common.h"
#include "commands.h"
#include "deepspeed_report.h"
#include "input_options.h"
#include "memory/bandwidth_model.h"
#include "memory/deepspeed_estimate.h"
#include "memory/max_model.h"
#include "memory/memory_model.h"

namespace memwall::cli {

namespace {

using nlohmann::json;

struct PredictOptions {
  InputOptions inputs;
  bool json = false;
  bool max_model = false;
  int max_tiling = 64;
  std::string family = "paper";
  std::vector<std::string> strategies;
  bool max_hidden = false;
  std::string chunk = "2GiB";
  std::vector<int> tiling_factors = {1, 2, 4, 8, 16, 32, 64};
  double target_efficiency = 0.9;
};

const char* tier_title(Tier t) {
  return t == Tier::kGpu ? "GPU" : (t == Tier::kCpu ? "CPU" : "NVMe");
}

json tiers_json(const MemoryEstimate& e) {
  json tiers = json::object();
  for (const TierUsage& u : e.tiers) {
    tiers[tier_name(u.tier)] = {{"scope", u.scope},
                                {"capacity_bytes", u.capacity_bytes},
                                {"used_bytes", u.used_bytes},
                                {"headroom_bytes", u.headroom_bytes()},
                                {"utilization", u.utilization()},
                                {"fits", u.fits()}};
  }
  return tiers;
}

json estimate_json(const MemoryEstimate& e) {
  json items = json::array();
  for (const auto& it : e.items) {
    items.push_back(
        {{"tier", tier_name(it.tier)},
         {"category", category_name(it.category)},
         {"bytes_per_rank", it.per_node ? json(nullptr) : json(it.bytes_per_rank)},
         {"bytes_per_node", it.per_node ? it.bytes_per_rank : it.bytes_per_rank * e.ranks_per_node},
         {"pinned", it.pinned},
         {"rule", it.rule}});
  }
  return {{"fits", e.fits},
          {"limiting_tier", tier_name(e.limiting_tier)},
          {"summary", e.shortfall()},
          {"ranks", e.ranks},
          {"ranks_per_node", e.ranks_per_node},
          {"nodes_used", e.nodes_used},
          {"shard_elements", e.shard_elements},
          {"pinned_bytes_per_node", e.pinned_bytes_per_node},
          {"tiers", tiers_json(e)},
          {"items", items},
          {"notes", e.notes}};
}

void print_deepspeed_estimate(const DeepSpeedEstimate& d, const MemoryEstimate& e, const RunConfig& run) {
  if (!d.available) {
    std::printf("\nDeepSpeed's estimator: none for this run (%s)\n", d.why.c_str());
    return;
  }
  const auto py = [](bool b) { return b ? "True" : "False"; };  // as the Python call would be written
  const bool nvme = run.zero.offload_optimizer.device == OffloadDevice::kNvme ||
                    run.zero.offload_param.device == OffloadDevice::kNvme;
  std::printf("\nDeepSpeed's estimator (%s: %s; model states only%s):\n", d.function.c_str(),
              d.stage3 ? strprintf("cpu_offload=%s, cpu_offload_params=%s, zero_init=%s", py(d.cpu_offload),
                                   py(d.cpu_offload_params), py(d.zero_init))
                             .c_str()
                       : strprintf("cpu_offload=%s", py(d.cpu_offload)).c_str(),
              nvme ? "; it has no NVMe case, so what lives on NVMe counts as CPU memory" : "");
  std::printf("  %s per GPU (%s), %s CPU per node (%s)\n", format_bytes(d.per_gpu_bytes).c_str(),
              d.gpu_rule.c_str(), format_bytes(d.per_cpu_bytes).c_str(), d.cpu_rule.c_str());
  std::string left;
  for (const LeftOut& l : left_out_of_deepspeed_estimate(e)) {
    left += (left.empty() ? "" : "; ") + std::string(l.what) + " " +
            (l.gpu_bytes > 0 ? format_bytes(l.gpu_bytes) + " per GPU" : "") +
            (l.gpu_bytes > 0 && l.cpu_bytes > 0 ? " + " : "") +
            (l.cpu_bytes > 0 ? format_bytes(l.cpu_bytes) + " CPU per node" : "");
  }
  std::printf("  memwall: %s per GPU, %s CPU and %s NVMe per node, counting besides model states:\n    %s\n",
              format_bytes(e.tier(Tier::kGpu).used_bytes).c_str(),
              format_bytes(e.tier(Tier::kCpu).used_bytes).c_str(),
              format_bytes(e.tier(Tier::kNvme).used_bytes).c_str(), left.empty() ? "nothing" : left.c_str());
}

json bandwidth_json(const BandwidthReport& b) {
  json rows = json::array();
  for (const auto& r : b.rows) {
    rows.push_back({{"data_type", data_type_name(r.data_type)},
                    {"location", tier_name(r.location)},
                    {"moves", r.moves},
                    {"overlappable", r.overlappable},
                    {"ait_flops_per_byte", r.ait},
                    {"available_Bps", r.available_Bps},
                    {"full_overlap_Bps", r.overlap_Bps},
                    {"target_Bps", r.target_Bps},
                    {"efficiency", r.efficiency},
                    {"rule", r.rule}});
  }
  return {{"achievable_flops_per_gpu", b.peak_flops},
          {"target_efficiency", b.target_efficiency},
          {"flops_per_iteration_per_gpu", b.flops_per_iteration},
          {"combined_efficiency_no_overlap", b.combined_efficiency},
          {"data_types", rows}};
}

void print_model_line(const ModelSpec& m, const RunConfig& run) {
  std::printf("model    %s: %s, %d layers, hidden %d, %d heads", m.name.c_str(), m.model_type.c_str(),
              m.layers, m.hidden, m.heads);
  if (m.kv_heads != m.heads) std::printf(" (%d kv)", m.kv_heads);
  if (m.mla()) {  // DeepSeek's latent attention
    std::printf(" of head_dim %d (%d rotary, values %d), latent attention (kv_lora_rank %d", m.head_dim(),
                m.rope_head_size, m.v_head_dim(), m.kv_lora_rank);
    if (m.q_lora_rank > 0) std::printf(", q_lora_rank %d", m.q_lora_rank);
    std::printf(")");
  } else if (m.head_size > 0) {
    std::printf(" of head_dim %d", m.head_size);
  }
  if (m.full_attn_every > 1) {  // Qwen3-Next's
    std::printf(
        ", linear attention (Gated DeltaNet: %d key heads of %d, %d value heads of %d) but in one layer "
        "of %d",
        m.la_key_heads, m.la_key_dim, m.la_value_heads, m.la_value_dim, m.full_attn_every);
  }
  if (m.attn_output_gate) std::printf(", gated attention output");
  if (m.mtp_modules > 0) {
    std::printf(", %d multi-token-prediction module%s (memwall.mtp: the last block%s)", m.mtp_modules,
                m.mtp_modules == 1 ? "" : "s", m.mtp_modules == 1 ? "" : "s");
  }
  if (m.moe()) {
    std::printf(", %d experts of ffn %d (%d per token)", m.experts, m.mlp_ffn(), m.experts_per_token);
    if (m.shared_expert_ffn > 0) std::printf(" and a shared expert of ffn %d", m.shared_expert_ffn);
    if (m.dense_layers > 0) std::printf(", the first %d dense (ffn %d)", m.dense_layers, m.ffn_hidden);
    if (m.moe_every > 1)
      std::printf(", in one block of %d (the others dense, ffn %d)", m.moe_every, m.ffn_hidden);
  } else {
    std::printf(", ffn %d", m.ffn_hidden);
  }
  std::printf(", vocab %d, seq %d", m.vocab, run.memwall.sequence_length);
  if (run.memwall.sequence_length == m.pretraining_positions() &&
      m.pretraining_positions() < m.max_positions) {
    std::printf(" (its pre-training context; rope_scaling %s stretches it to %d positions)",
                m.rope_scaling.type.c_str(), m.max_positions);
  }
  if (m.sliding_window > 0 && m.sliding_window < run.memwall.sequence_length) {
    std::printf(", attention window %d", m.sliding_window);
    if (m.first_window_layer > 0) std::printf(" from layer %d", m.first_window_layer);
    if (m.global_every > 0) std::printf(" (one layer in %d global)", m.global_every);
  }
  // Layers attending without positions (nothing to count): Cohere2's and EXAONE 4's global ones, SmolLM3's
  // every n-th.
  if (m.rope_windowed_only) std::printf(", rotary on the windowed layers only");
  if (m.nope_every > 0) std::printf(", no rotary on one layer in %d", m.nope_every);
  std::printf("\n");
  std::printf("params   %s (%.0f) derived from the config; Eq.1 12*nl*hd^2 gives %s",
              format_count(m.total_params()).c_str(), m.total_params(),
              format_count(m.paper_params()).c_str());
  if (m.moe()) std::printf("; %s active per token", format_count(m.active_params()).c_str());
  std::printf("\n");
}

void print_run_line(const RunConfig& run) {
  const ZeroConfig& z = run.zero;
  const auto& ac = run.activation_checkpointing;
  std::printf(
      "run      %s: ZeRO stage %d, params on %s, optimizer on %s, %s, micro-batch %.0f, dp %d x mp %d",
      run.name.c_str(), z.stage,
      z.stage == 3 && z.offload_param.device != OffloadDevice::kNone
          ? offload_device_name(z.offload_param.device)
          : "gpu",
      z.offload_optimizer.device != OffloadDevice::kNone ? offload_device_name(z.offload_optimizer.device)
                                                         : "gpu",
      precision_name(run.precision), run.micro_batch_per_gpu.value, run.memwall.data_parallel,
      run.memwall.model_parallel);
  if (run.memwall.pipeline_parallel > 1) std::printf(" x pp %d", run.memwall.pipeline_parallel);
  if (ac.enabled) {
    std::printf(", checkpoint every %d block(s)%s", ac.interval, ac.cpu_checkpointing ? " on CPU" : "");
  } else {
    std::printf(", no activation checkpointing");
  }
  if (run.memwall.tiling_factor > 1) std::printf(", tiling %d", run.memwall.tiling_factor);
  if (run.memwall.attention == AttentionKernel::kFlash) std::printf(", flash attention");
  std::printf("\n");
}

void print_prediction(const HardwareSpec& hw, const ModelSpec& m, const RunConfig& run,
                      const MemoryEstimate& e, const DeepSpeedEstimate& ds, const BandwidthReport& b) {
  std::printf("hardware %s: %d node(s) x %d %s (%s each), %s CPU memory and %s NVMe per node\n",
              hw.name.c_str(), hw.nodes, hw.gpu.count, hw.gpu.model.c_str(),
              format_bytes(hw.gpu.memory_bytes).c_str(), format_bytes(hw.cpu.memory_bytes).c_str(),
              format_bytes(hw.nvme.capacity_bytes()).c_str());
  print_model_line(m, run);
  print_run_line(run);
  std::printf("\n%s  limiting tier %s\n\n", e.fits ? "FITS" : "DOES NOT FIT", e.shortfall().c_str());

  std::printf("%-5s %-9s %12s %12s %12s %6s\n", "tier", "scope", "used", "capacity", "free", "use");
  for (const TierUsage& u : e.tiers) {
    std::printf("%-5s %-9s %12s %12s %12s %5.0f%%%s\n", tier_title(u.tier), u.scope,
                format_bytes(u.used_bytes).c_str(), format_bytes(u.capacity_bytes).c_str(),
                u.fits() ? format_bytes(u.headroom_bytes()).c_str() : "-", 100 * u.utilization(),
                u.fits() ? "" : "  <- over");
  }
  std::printf("\nmemory by tier and category (%d ranks, %d per node; node = rank x %d)\n", e.ranks,
              e.ranks_per_node, e.ranks_per_node);
  std::printf("%-5s %-25s %12s %12s  %s\n", "tier", "category", "per rank", "per node", "rule");
  for (Tier t : {Tier::kGpu, Tier::kCpu, Tier::kNvme}) {
    for (const auto& it : e.items) {
      if (it.tier != t) continue;
      const double node = it.per_node ? it.bytes_per_rank : it.bytes_per_rank * e.ranks_per_node;
      std::printf("%-5s %-25s %12s %12s  %s%s\n", tier_title(t), category_label(it.category),
                  it.per_node ? "-" : format_bytes(it.bytes_per_rank).c_str(), format_bytes(node).c_str(),
                  it.rule.c_str(), it.pinned ? " [pinned]" : "");
    }
  }
  std::printf("pinned host memory per node: %s\n", format_bytes(e.pinned_bytes_per_node).c_str());
  print_deepspeed_estimate(ds, e, run);

  std::printf("\nbandwidth per GPU (achievable %s per GPU; Eq.6 efficiency without overlap)\n",
              format_flops(b.peak_flops).c_str());
  std::printf("%-17s %-5s %9s %12s %13s %12s %7s  %s\n", "data type", "on", "ait F/B", "available",
              "full overlap", strprintf("for %.0f%%", 100 * b.target_efficiency).c_str(), "eff",
              "available from");
  for (const auto& r : b.rows) {
    const char* label =
        r.data_type == DataType::kParamsGrads
            ? "params + grads"
            : (r.data_type == DataType::kOptimizerStates ? "optimizer states" : "act. checkpoints");
    std::printf("%-17s %-5s %9.0f %12s %13s %12s %6.1f%%  %s%s\n", label, tier_title(r.location), r.ait,
                format_bandwidth(r.available_Bps).c_str(),
                r.overlappable ? format_bandwidth(r.overlap_Bps).c_str() : "-",
                format_bandwidth(r.target_Bps).c_str(), 100 * r.efficiency, r.rule.c_str(),
                r.moves ? "" : " (no traffic)");
  }
  std::printf("combined efficiency if nothing overlaps: %.1f%%; %.3g FLOP per GPU per micro-batch (Eq.7)\n",
              100 * b.combined_efficiency, b.flops_per_iteration);
  for (const auto& n : e.notes) std::printf("note: %s\n", n.c_str());
}

int run_predict(const PredictOptions& opt) {
  Result<Inputs> in = load_inputs(opt.inputs);
  if (!in.is_ok()) return report_error(in.status());
  Diagnostics& diag = in->diag;
  HardwareSpec* hw = &in->hw;
  ModelSpec* model = &in->model;
  RunConfig* run = &in->run;
  if (!(opt.target_efficiency > 0 && opt.target_efficiency < 1)) {
    return report_error(Status::invalid_argument(
        strprintf("--target-efficiency %g is not allowed; allowed: 0 < x < 1", opt.target_efficiency)));
  }
  const ParsedBytes chunk = parse_bytes(opt.chunk);
  if (!chunk.ok || chunk.bytes <= 0) {
    return report_error(Status::invalid_argument(
        "--chunk \"" + opt.chunk + "\" is not allowed; allowed: a size such as 2GiB, 512MiB, 1e9"));
  }
  Result<ShapeFamily> family = parse_family(opt.family);
  if (!family.is_ok()) return report_error(family.status());
  std::vector<Strategy> strategies;
  for (const auto& s : opt.strategies) {
    Result<Strategy> st = parse_strategy(s);
    if (!st.is_ok()) return report_error(Status::invalid_argument("--strategy: " + st.status().message()));
    strategies.push_back(*st);
  }
  if (strategies.empty()) strategies = all_strategies();
  for (int t : opt.tiling_factors) {
    if (t < 1)
      return report_error(
          Status::invalid_argument(strprintf("--tiling %d is not allowed; allowed: >= 1", t)));
  }
  print_warnings(diag);

  json out;
  out["memwall_version"] = MEMWALL_VERSION;
  out["command"] = "predict";
  out["inputs"] = {{"hardware", json::parse(to_json_text(*hw))},
                   {"model", json::parse(to_json_text(*model))},
                   {"target_efficiency", opt.target_efficiency}};
  out["warnings"] = diag.warnings;

  const bool single = !opt.max_model && !opt.max_hidden;
  if (single) {
    RunConfig resolved = *run;
    Status s = resolve_run_config(resolved, *model, *hw);
    if (!s.is_ok()) return report_error(s);
    const MemoryEstimate e = estimate_memory(*model, resolved, *hw);
    const BandwidthReport b = analyze_bandwidth(*model, resolved, *hw, opt.target_efficiency);
    // When only GPU working memory is short, say which tiling factor would make it fit.
    std::vector<std::string> suggestions;
    if (!e.fits && e.limiting_tier == Tier::kGpu && resolved.zero.stage == 3) {
      for (int t = resolved.memwall.tiling_factor * 2; t <= 1024; t *= 2) {
        RunConfig tiled = resolved;
        tiled.memwall.tiling_factor = t;
        if (estimate_memory(*model, tiled, *hw).fits) {
          suggestions.push_back(
              strprintf("fits with memory-centric tiling: set \"memwall\": {\"tiling_factor\": %d}", t));
          break;
        }
      }
    }
    // When the GPU is short and the attention's probabilities are what overflows it, say that fused attention
    // fits (with the run's tiling).
    if (!e.fits && e.limiting_tier == Tier::kGpu && resolved.memwall.attention == AttentionKernel::kUnfused) {
      RunConfig flash = resolved;
      flash.memwall.attention = AttentionKernel::kFlash;
      const MemoryEstimate f = estimate_memory(*model, flash, *hw);
      if (f.fits) {
        suggestions.push_back(strprintf(
            "fits with fused attention, which keeps no T x T probabilities: set \"memwall\": {\"attention\": "
            "\"flash\"} (activations %s -> %s per GPU)",
            format_bytes(e.bytes(Tier::kGpu, MemCategory::kActivationWorking) +
                         e.bytes(Tier::kGpu, MemCategory::kActivations))
                .c_str(),
            format_bytes(f.bytes(Tier::kGpu, MemCategory::kActivationWorking) +
                         f.bytes(Tier::kGpu, MemCategory::kActivations))
                .c_str()));
      }
    }
    out["inputs"]["run"] = json::parse(to_json_text(resolved));
    out["memory"] = estimate_json(e);
    if (!e.fits && suggestions.empty()) {  // not a matter of tiling alone
      suggestions.push_back("memwall tune --model " + opt.inputs.model + " --hardware " +
                            opt.inputs.hardware +
                            " searches the offload placements, batch and tiling that fit, fastest first");
    }
    out["memory"]["suggestions"] = suggestions;
    const DeepSpeedEstimate ds = deepspeed_estimate(*model, resolved, e.ranks_per_node, e.nodes_used);
    out["memory"]["deepspeed_estimate"] = deepspeed_estimate_json(ds, e);
    if (json twin = twin_flow_json(resolved, e); !twin.is_null()) out["memory"]["twin_flow"] = twin;
    out["bandwidth"] = bandwidth_json(b);
    if (!opt.json) {
      print_prediction(*hw, *model, resolved, e, ds, b);
      for (const auto& line : suggestions) std::printf("suggestion: %s\n", line.c_str());
    }
  } else {
    out["inputs"]["run"] = json::parse(to_json_text(*run));
  }

  if (opt.max_model) {
    json results = json::array();
    if (!opt.json) {
      std::printf(
          "largest trainable model on %s (%d node(s) x %d GPUs), family %s, shaped like %s, run %s "
          "(micro-batch %.0f)\n",
          hw->name.c_str(), hw->nodes, hw->gpu.count, family->name().c_str(), model->name.c_str(),
          run->name.c_str(), run->micro_batch_per_gpu.is_auto ? 1.0 : run->micro_batch_per_gpu.value);
      std::printf("%-21s %9s %7s %7s %6s %6s  %-5s %s\n", "strategy", "params", "hidden", "layers", "heads",
                  "tiling", "limit", "why the next size up does not fit");
    }
    for (Strategy s : strategies) {
      const MaxModelResult r = find_max_model(s, *family, *model, *run, *hw, opt.max_tiling);
      json row = {{"strategy", strategy_name(s)}, {"label", strategy_label(s)}, {"found", r.found}};
      if (r.found) {
        row["params"] = r.model.total_params();
        row["params_eq1"] = r.model.paper_params();
        row["hidden"] = r.model.hidden;
        row["layers"] = r.model.layers;
        row["heads"] = r.model.heads;
        row["tiling_factor"] = r.tiling_factor;
        row["tiers"] = tiers_json(r.estimate);
      }
      row["limiting_tier"] = tier_name(r.limiting_tier);
      row["next_failure"] = r.next_failure;
      if (!r.error.empty()) row["error"] = r.error;
      results.push_back(row);
      if (!opt.json) {
        if (r.found) {
          std::printf("%-21s %9s %7d %7d %6d %6d  %-5s %s\n", strategy_label(s),
                      format_count(r.model.total_params()).c_str(), r.model.hidden, r.model.layers,
                      r.model.heads, r.tiling_factor, tier_title(r.limiting_tier), r.next_failure.c_str());
        } else {
          std::printf("%-21s %9s %7s %7s %6s %6s  %-5s %s\n", strategy_label(s), "none", "-", "-", "-", "-",
                      tier_title(r.limiting_tier),
                      r.error.empty() ? r.next_failure.c_str() : r.error.c_str());
        }
      }
    }
    out["max_model"] = {{"family", family->name()}, {"template", model->name}, {"results", results}};
  }

  if (opt.max_hidden) {
    RunConfig base = *run;
    if (base.memwall.sequence_length == 0) base.memwall.sequence_length = model->max_positions;
    const auto results = find_max_hidden(base, *hw, chunk.bytes, opt.tiling_factors);
    json rows = json::array();
    if (!opt.json) {
      std::printf(
          "%slargest hidden size of one transformer layer on %s, run %s, GPU memory in %s contiguous "
          "chunks\n",
          opt.max_model ? "\n" : "", hw->name.c_str(), run->name.c_str(), format_bytes(chunk.bytes).c_str());
      std::printf("%-7s %10s  %s\n", "tiling", "max hidden", "what stops the next size (+1024)");
    }
    for (const auto& r : results) {
      rows.push_back({{"tiling_factor", r.tiling_factor}, {"max_hidden", r.max_hidden}, {"limit", r.limit}});
      if (!opt.json) std::printf("%-7d %10d  %s\n", r.tiling_factor, r.max_hidden, r.limit.c_str());
    }
    out["max_hidden"] = {{"chunk_bytes", chunk.bytes}, {"results", rows}};
  }

  if (opt.json) std::printf("%s\n", out.dump(2).c_str());
  return kExitOk;
}

}  // namespace

void register_predict(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<PredictOptions>();
  auto* cmd =
      app.add_subcommand("predict", "Memory per tier and bandwidth needs; the largest trainable model");
  add_input_options(cmd, opt->inputs);
  cmd->add_flag("--json", opt->json, "Print one JSON object (schema: docs/cli.md)");
  cmd->add_option("--target-efficiency", opt->target_efficiency,
                  "Efficiency the 'for X%' bandwidth column is computed for (Eq. 6)")
      ->capture_default_str();
  cmd->add_flag("--max-model", opt->max_model,
                "Largest trainable model for each strategy of the paper's Table 2");
  cmd->add_option("--family", opt->family,
                  "Shape family for --max-model: paper, gpt3, llama, layers=N, hidden=H")
      ->capture_default_str();
  cmd->add_option("--strategy", opt->strategies, "Limit --max-model to these strategies (repeatable)");
  cmd->add_option("--max-tiling", opt->max_tiling,
                  "Largest memory-centric tiling factor --max-model tries for ZeRO-Infinity (1: the run's)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_flag("--max-hidden", opt->max_hidden, "Largest hidden size of one layer per tiling factor");
  cmd->add_option("--chunk", opt->chunk, "Largest contiguous GPU allocation for --max-hidden")
      ->capture_default_str();
  cmd->add_option("--tiling", opt->tiling_factors, "Tiling factors for --max-hidden")->delimiter(',');
  cmd->callback([opt, &exit_code] { exit_code = run_predict(*opt); });
}

}  // namespace memwall::cli
