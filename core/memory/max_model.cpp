// Strategy placements (Table 2), shape families and the largest-model / largest-hidden searches.
#include "memory/max_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/suggest.h"
#include "base/units.h"
#include "graph/model_graph.h"

namespace memwall {

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::kDataParallel:
      return "data-parallel";
    case Strategy::kZero2:
      return "zero-2";
    case Strategy::kZeroOffload:
      return "zero-offload";
    case Strategy::k3D:
      return "3d-parallel";
    case Strategy::kZero3:
      return "zero-3";
    case Strategy::kZeroInfCpu:
      return "zero-infinity-cpu";
    case Strategy::kZeroInfNvme:
      return "zero-infinity-nvme";
  }
  return "unknown";
}

const char* strategy_label(Strategy s) {
  switch (s) {
    case Strategy::kDataParallel:
      return "Data parallel";
    case Strategy::kZero2:
      return "ZeRO-2";
    case Strategy::kZeroOffload:
      return "ZeRO-Offload";
    case Strategy::k3D:
      return "3D parallelism";
    case Strategy::kZero3:
      return "ZeRO-3";
    case Strategy::kZeroInfCpu:
      return "ZeRO-Infinity (CPU)";
    case Strategy::kZeroInfNvme:
      return "ZeRO-Infinity (NVMe)";
  }
  return "unknown";
}

const std::vector<Strategy>& all_strategies() {
  static const std::vector<Strategy> kAll = {
      Strategy::kDataParallel, Strategy::kZero2,      Strategy::kZeroOffload, Strategy::k3D,
      Strategy::kZero3,        Strategy::kZeroInfCpu, Strategy::kZeroInfNvme};
  return kAll;
}

Result<Strategy> parse_strategy(const std::string& name) {
  for (Strategy s : all_strategies()) {
    if (name == strategy_name(s)) return s;
  }
  std::string allowed;
  std::vector<std::string> names;
  for (Strategy s : all_strategies()) {
    names.emplace_back(strategy_name(s));
    allowed += (allowed.empty() ? "" : ", ") + names.back();
  }
  return Status::invalid_argument("strategy \"" + name + "\" is not known" + did_you_mean(name, names) +
                                  "; allowed: " + allowed);
}

RunConfig apply_strategy(const RunConfig& base, Strategy s, const HardwareSpec& hw) {
  RunConfig r = base;
  ZeroConfig& z = r.zero;
  z.offload_param.device = OffloadDevice::kNone;
  z.offload_optimizer.device = OffloadDevice::kNone;
  r.memwall.model_parallel = 1;
  r.memwall.pipeline_parallel = 1;
  r.memwall.data_parallel = 0;
  r.memwall.strategy = strategy_name(s);
  r.activation_checkpointing.enabled = true;
  r.activation_checkpointing.cpu_checkpointing = false;
  r.train_batch_size.is_auto = true;
  r.gradient_accumulation_steps = {
      false, base.gradient_accumulation_steps.is_auto ? 1 : base.gradient_accumulation_steps.value};
  switch (s) {
    case Strategy::kDataParallel:
      z.stage = 0;
      break;
    case Strategy::kZero2:
      z.stage = 2;
      break;
    case Strategy::kZeroOffload:
      z.stage = 2;
      z.offload_optimizer.device = OffloadDevice::kCpu;
      break;
    case Strategy::k3D:
      z.stage = 1;
      r.memwall.model_parallel = hw.gpu.count;
      r.memwall.pipeline_parallel = hw.nodes;
      r.activation_checkpointing.partition_activations = true;
      break;
    case Strategy::kZero3:
      z.stage = 3;
      break;
    case Strategy::kZeroInfCpu:
      z.stage = 3;
      z.offload_param.device = OffloadDevice::kCpu;
      z.offload_optimizer.device = OffloadDevice::kCpu;
      r.activation_checkpointing.cpu_checkpointing = true;
      break;
    case Strategy::kZeroInfNvme:
      z.stage = 3;
      z.offload_param.device = OffloadDevice::kNvme;
      z.offload_optimizer.device = OffloadDevice::kNvme;
      r.activation_checkpointing.cpu_checkpointing = true;
      break;
  }
  z.overlap_comm = z.stage == 3 || base.zero.overlap_comm;
  return r;
}

namespace {

// (hidden, layers) of the paper's Figure 2a models and of GPT-3's family (Brown et al. 2020, Table 2.1).
const std::vector<std::pair<double, double>> kPaperShapes = {
    {10240, 80}, {20480, 100}, {25600, 128}, {65536, 195}, {163840, 315}};
const std::vector<std::pair<double, double>> kGpt3Shapes = {{768, 12},  {1024, 24}, {2048, 24}, {2560, 32},
                                                            {4096, 32}, {5120, 40}, {12288, 96}};
// Llama 2 7B, 13B, 70B (Touvron et al. 2023) and Llama 3 405B (Llama Team 2024): hidden, layers.
const std::vector<std::pair<double, double>> kLlamaShapes = {
    {4096, 32}, {5120, 40}, {8192, 80}, {16384, 126}};

// Piecewise linear in log-log space through `pts`; extrapolates with the end segments' slopes.
double interpolate_layers(const std::vector<std::pair<double, double>>& pts, double hd) {
  size_t i = 1;
  while (i + 1 < pts.size() && hd > pts[i].first) ++i;
  const auto& [x0, y0] = pts[i - 1];
  const auto& [x1, y1] = pts[i];
  const double slope = std::log(y1 / y0) / std::log(x1 / x0);
  return y0 * std::pow(hd / x0, slope);
}

}  // namespace

std::string ShapeFamily::name() const {
  switch (kind) {
    case Kind::kPaper:
      return "paper";
    case Kind::kGpt3:
      return "gpt3";
    case Kind::kLlama:
      return "llama";
    case Kind::kFixedLayers:
      return "layers=" + std::to_string(fixed);
    case Kind::kFixedHidden:
      return "hidden=" + std::to_string(fixed);
  }
  return "paper";
}

ModelSpec ShapeFamily::member(const ModelSpec& templ, int size, int heads_multiple) const {
  ModelSpec m = templ;
  int hd = size;
  int nl = 0;
  switch (kind) {
    case Kind::kPaper:
      nl = static_cast<int>(std::lround(interpolate_layers(kPaperShapes, hd)));
      break;
    case Kind::kGpt3:
      nl = static_cast<int>(std::lround(interpolate_layers(kGpt3Shapes, hd)));
      break;
    case Kind::kLlama:
      nl = static_cast<int>(std::lround(interpolate_layers(kLlamaShapes, hd)));
      break;
    case Kind::kFixedLayers:
      nl = fixed;
      break;
    case Kind::kFixedHidden:
      hd = fixed;
      nl = size;
      break;
  }
  const double ffn_ratio = templ.hidden > 0 ? static_cast<double>(templ.ffn_hidden) / templ.hidden : 4.0;
  const int kv_ratio = templ.kv_heads > 0 ? std::max(1, templ.heads / templ.kv_heads) : 1;
  m.hidden = hd;
  m.layers = std::max(1, nl);
  // A member's heads are hidden / heads (the template's own head_dim does not scale); latent attention's
  // heads keep their sizes.
  if (!templ.mla()) m.head_size = 0;
  const int mult = std::max(1, heads_multiple);
  const int target = std::max(1, hd / head_dim);
  m.heads = 0;
  for (int d = 0; d <= target && m.heads == 0; ++d) {  // nearest multiple of `mult` dividing hd
    for (int h : {target - d, target + d}) {
      if (h >= mult && h % mult == 0 && hd % h == 0) {
        m.heads = h;
        break;
      }
    }
  }
  m.kv_heads = m.heads > 0 && m.heads % kv_ratio == 0 ? m.heads / kv_ratio : m.heads;
  m.ffn_hidden = static_cast<int>(std::lround(ffn_ratio * hd));
  if (templ.expert_ffn > 0 && templ.hidden > 0)  // a mixture of experts' own width, in proportion too
    m.expert_ffn = static_cast<int>(std::lround(static_cast<double>(templ.expert_ffn) / templ.hidden * hd));
  m.name = strprintf("%s-h%d-l%d", name().c_str(), m.hidden, m.layers);
  return m;
}

Result<ShapeFamily> parse_family(const std::string& text) {
  ShapeFamily f;
  auto number_after = [&](const std::string& prefix, int& out) {
    try {
      size_t used = 0;
      const int v = std::stoi(text.substr(prefix.size()), &used);
      if (used != text.size() - prefix.size() || v < 1) return false;
      out = v;
      return true;
    } catch (...) {
      return false;
    }
  };
  if (text == "paper") return f;
  if (text == "gpt3") {
    f.kind = ShapeFamily::Kind::kGpt3;
    return f;
  }
  if (text == "llama") {
    f.kind = ShapeFamily::Kind::kLlama;
    return f;
  }
  if (text.rfind("layers=", 0) == 0 && number_after("layers=", f.fixed)) {
    f.kind = ShapeFamily::Kind::kFixedLayers;
    return f;
  }
  if (text.rfind("hidden=", 0) == 0 && number_after("hidden=", f.fixed) && f.fixed % f.head_dim == 0) {
    f.kind = ShapeFamily::Kind::kFixedHidden;
    return f;
  }
  return Status::invalid_argument(
      "--family \"" + text +
      "\" is not allowed; allowed: paper, gpt3, llama, layers=N, hidden=H (H a multiple of 128)");
}

namespace {

struct Evaluation {
  bool valid = false;
  std::string error;
  MemoryEstimate estimate;
};

Evaluation evaluate(const ModelSpec& m, const RunConfig& run_in, const HardwareSpec& hw) {
  Evaluation ev;
  RunConfig run = run_in;
  run.activation_checkpointing.interval = std::min(run.activation_checkpointing.interval, m.layers);
  Status s = resolve_run_config(run, m, hw);
  if (!s.is_ok()) {
    ev.error = s.message();
    return ev;
  }
  ev.valid = true;
  ev.estimate = estimate_memory(m, run, hw);
  return ev;
}

// The most bytes any configuration could place: every tier of every node.
double total_capacity(const HardwareSpec& hw) {
  return hw.nodes * (hw.gpu.count * hw.gpu.memory_bytes + hw.cpu.memory_bytes + hw.nvme.capacity_bytes());
}

}  // namespace

MaxModelResult find_max_model(Strategy s, const ShapeFamily& family, const ModelSpec& templ,
                              const RunConfig& base, const HardwareSpec& hw, int max_tiling) {
  MaxModelResult result;
  result.strategy = s;
  const RunConfig run = apply_strategy(base, s, hw);
  const bool tiles = s == Strategy::kZeroInfCpu || s == Strategy::kZeroInfNvme;
  const double capacity = total_capacity(hw);
  const int step = family.step();
  bool any_valid = false;
  for (int size = step;; size += step) {
    const ModelSpec m = family.member(templ, size, run.memwall.model_parallel);
    if (m.heads == 0) continue;
    // Even 2 bytes per parameter over every tier of the cluster would not fit: stop searching.
    if (2.0 * m.total_params() > capacity || size > (1 << 22)) break;
    Evaluation ev = evaluate(m, run, hw);
    int tiling = run.memwall.tiling_factor;
    // Memory-centric tiling while GPU memory is what does not fit.
    for (int t = 2 * tiling;
         tiles && ev.valid && !ev.estimate.fits && ev.estimate.limiting_tier == Tier::kGpu &&
         t <= max_tiling && m.hidden % t == 0 && m.ffn_hidden % t == 0;
         t *= 2) {
      RunConfig tiled = run;
      tiled.memwall.tiling_factor = t;
      Evaluation e = evaluate(m, tiled, hw);
      if (!e.valid) break;
      ev = std::move(e);
      tiling = t;
    }
    if (!ev.valid) {
      if (result.error.empty()) result.error = ev.error;
      continue;  // e.g. heads not divisible by the model-parallel degree at this size
    }
    any_valid = true;
    if (ev.estimate.fits) {
      if (!result.found || m.total_params() > result.model.total_params()) {
        result.found = true;
        result.model = m;
        result.estimate = ev.estimate;
        result.tiling_factor = tiling;
        result.next_failure.clear();
      }
    } else if (result.found && result.next_failure.empty()) {
      result.next_failure =
          strprintf("%s (h %d, %d layers%s): ", format_count(m.total_params()).c_str(), m.hidden, m.layers,
                    tiling > 1 ? strprintf(", tiling %d", tiling).c_str() : "") +
          ev.estimate.shortfall();
      result.limiting_tier = ev.estimate.limiting_tier;
    } else if (!result.found && result.next_failure.empty()) {
      result.next_failure =
          strprintf("smallest member %s (h %d, %d layers): ", format_count(m.total_params()).c_str(),
                    m.hidden, m.layers) +
          ev.estimate.shortfall();
      result.limiting_tier = ev.estimate.limiting_tier;
    }
  }
  if (any_valid) result.error.clear();
  return result;
}

std::vector<MaxHiddenResult> find_max_hidden(const RunConfig& base, const HardwareSpec& hw,
                                             double chunk_bytes, const std::vector<int>& tiling_factors) {
  std::vector<MaxHiddenResult> out;
  ModelSpec templ;
  templ.model_type = "gpt2";
  templ.layers = 1;
  templ.vocab = 0;
  templ.max_positions = base.memwall.sequence_length > 0 ? base.memwall.sequence_length : 1024;
  templ.linear_bias = true;
  templ.tied_embeddings = true;
  ShapeFamily family;
  family.kind = ShapeFamily::Kind::kFixedLayers;
  family.fixed = 1;
  for (int t : tiling_factors) {
    MaxHiddenResult r;
    r.tiling_factor = t;
    RunConfig run = base;
    run.memwall.tiling_factor = t;
    for (int hd = 1024; hd <= (1 << 21); hd += 1024) {
      templ.hidden = hd;
      templ.ffn_hidden = 4 * hd;
      templ.heads = hd / family.head_dim;
      templ.kv_heads = templ.heads;
      const ModelSpec m = family.member(templ, hd);
      const Evaluation ev = evaluate(m, run, hw);
      std::string limit;
      if (!ev.valid) {
        limit = ev.error;
      } else if (!ev.estimate.fits) {
        limit = ev.estimate.shortfall();
      } else {
        // Contiguous allocations (per rank).
        RunConfig resolved = run;
        (void)resolve_run_config(resolved, m, hw);
        const double pb = resolved.param_bytes();
        const int mp = resolved.memwall.model_parallel;
        const double bsz = resolved.micro_batch_per_gpu.value;
        const double seq = resolved.memwall.sequence_length;
        const std::pair<double, const char*> tensors[] = {
            {pb * graph_param_stats(m, t, mp, 0).largest_param_elements,
             "a gathered 16-bit parameter tile (and its gradient)"},
            {pb * bsz * seq * std::max<double>(m.ffn_hidden, 3.0 * hd) / mp, "the largest activation tensor"},
            {resolved.memwall.attention == AttentionKernel::kFlash ? 0
                                                                   : pb * bsz * (m.heads / mp) * seq * seq,
             "the attention scores"},
            {resolved.zero.stage >= 2
                 ? pb * std::min(resolved.zero.reduce_bucket_size.value, m.total_params())
                 : 0,
             "the reduce bucket"}};
        for (const auto& [bytes, what] : tensors) {
          if (bytes > chunk_bytes) {
            limit = strprintf("%s needs %s contiguous, more than the %s chunks", what,
                              format_bytes(bytes).c_str(), format_bytes(chunk_bytes).c_str());
            break;
          }
        }
      }
      if (!limit.empty()) {
        r.limit = strprintf("hidden %d: ", hd) + limit;
        break;
      }
      r.max_hidden = hd;
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace memwall
