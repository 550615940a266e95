// `memwall generate`: sample text from a checkpoint of `memwall train`, or from Hugging Face GPT-2 weights
// with the byte vocabulary (`memwall export`'s output), on the CPU.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "engine/model/gpt.h"
#include "engine/model/gpt_decode.h"
#include "engine/model/import.h"
#include "engine/train/checkpoint.h"

namespace memwall::cli {

namespace {

struct GenerateOptions {
  std::string checkpoint_dir;
  std::string weights;  // or a directory with model.safetensors and config.json
  std::string prompt = "\n";
  int tokens = 200;
  double temperature = 0.8;
  int top_k = 40;
  std::uint64_t seed = 1;
  bool json = false;
};

// The next byte from the logits at one position: greedy at temperature 0, else softmax(logits / temperature)
// over the top_k most likely (all with top_k 0).
int sample(const float* logits, int vocab, const GenerateOptions& opt, std::mt19937_64& rng) {
  std::vector<int> order(static_cast<std::size_t>(vocab));
  for (int v = 0; v < vocab; ++v) order[static_cast<std::size_t>(v)] = v;
  std::stable_sort(order.begin(), order.end(), [logits](int a, int b) { return logits[a] > logits[b]; });
  if (opt.temperature == 0) return order[0];
  const int k = opt.top_k > 0 ? std::min(opt.top_k, vocab) : vocab;
  std::vector<double> weight(static_cast<std::size_t>(k));
  const double top = static_cast<double>(logits[order[0]]);
  for (int i = 0; i < k; ++i) {
    weight[static_cast<std::size_t>(i)] =
        std::exp((static_cast<double>(logits[order[static_cast<std::size_t>(i)]]) - top) / opt.temperature);
  }
  std::discrete_distribution<int> pick(weight.begin(), weight.end());
  return order[static_cast<std::size_t>(pick(rng))];
}

int run_generate(const GenerateOptions& opt) {
  if (opt.tokens < 1 || !(opt.temperature >= 0) || opt.top_k < 0) {
    return report_error(Status::invalid_argument(
        "--tokens must be >= 1, --temperature >= 0 and --top-k >= 0 (0: every byte)"));
  }
  if (opt.prompt.empty())
    return report_error(Status::invalid_argument("--prompt: empty (allowed: any text)"));
  if (opt.checkpoint_dir.empty() == opt.weights.empty()) {
    return report_error(Status::invalid_argument(
        "generate: give one of --checkpoint-dir (memwall train's checkpoint) and --weights (a directory with "
        "model.safetensors and config.json)"));
  }
  model::GptConfig c;
  std::vector<float> params;
  long step = -1;  // of the checkpoint; -1 for weights
  if (!opt.checkpoint_dir.empty()) {
    auto cp = train::ckpt::CheckpointParams::open(opt.checkpoint_dir, c);
    if (!cp.is_ok()) return report_error(cp.status());
    params.resize(cp->size());
    if (Status s = cp->read(0, params.size(), params.data()); !s.is_ok()) return report_error(s);
    step = cp->step();
  } else {
    Diagnostics diag;
    auto spec = load_model_arg(opt.weights + "/config.json", diag);
    if (!spec.is_ok()) return report_error(spec.status());
    c = model::gpt_config_of(*spec);
    if (c.vocab != 256) {
      return report_error(Status::invalid_argument(
          opt.weights + "/config.json: vocab_size " + std::to_string(c.vocab) +
          ": generate samples bytes; allowed: 256 (a model trained by memwall train)"));
    }
    auto w = model::HfWeights::open(opt.weights, c);
    if (!w.is_ok()) return report_error(w.status());
    params.resize(model::gpt_num_params(c));
    if (Status s = w->read(0, params.size(), params.data()); !s.is_ok()) return report_error(s);
  }
  // The prompt runs through the model in one pass; then, while the text fits the model's context, each byte
  // runs one position through the key/value cache. Once the text outgrows the context the window slides and
  // every position moves, so each byte then runs the whole window of the last T bytes (causal attention: the
  // text sits at the start of the sequence, the rest is padding that position i never sees).
  const int T = c.max_seq;
  model::GptDecoder decoder(c, params.data());
  std::unique_ptr<model::GptModel> window;
  std::vector<int> context(static_cast<std::size_t>(T), 0), targets(context.size(), 0);
  std::string text = opt.prompt;
  const float* logits = nullptr;
  const auto tokens = [&](std::size_t from, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) context[i] = static_cast<unsigned char>(text[from + i]) % c.vocab;
  };
  const auto add = [&](char byte) -> Status {
    text += byte;
    if (!window && decoder.positions() < T) {
      auto l = decoder.append(static_cast<unsigned char>(byte) % c.vocab);
      if (!l.is_ok()) return l.status();
      logits = *l;
      return Status::ok();
    }
    if (!window) window = std::make_unique<model::GptModel>(c, 1, T, 1);
    tokens(text.size() - context.size(), context.size());
    window->forward(params.data(), context.data(), targets.data());
    logits = window->logits() + (context.size() - 1) * static_cast<std::size_t>(c.vocab);
    return Status::ok();
  };
  // The prompt (its last T bytes when it is longer than the context) in one pass.
  const std::size_t first = std::min(text.size(), context.size());
  tokens(text.size() - first, first);
  if (auto l = decoder.append(context.data(), static_cast<int>(first)); l.is_ok()) {
    logits = *l;
  } else {
    return report_error(l.status());
  }
  std::mt19937_64 rng(opt.seed);
  std::string out;
  const auto started = std::chrono::steady_clock::now();
  if (!opt.json) {
    std::fwrite(opt.prompt.data(), 1, opt.prompt.size(), stdout);
    std::fflush(stdout);
  }
  for (int n = 0; n < opt.tokens; ++n) {
    const char next = static_cast<char>(sample(logits, c.vocab, opt, rng));
    out += next;
    if (!opt.json) {
      std::fputc(next, stdout);
      std::fflush(stdout);
    }
    if (n + 1 < opt.tokens) {
      if (Status s = add(next); !s.is_ok()) return report_error(s);
    }
  }
  if (opt.json) {
    // Bytes that are not valid UTF-8 become U+FFFD in the JSON.
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const nlohmann::json j = {{"seconds", seconds},
                              {"tokens_per_s", seconds > 0 ? opt.tokens / seconds : 0.0},
                              {"checkpoint_step", step >= 0 ? nlohmann::json(step) : nlohmann::json(nullptr)},
                              {"prompt", opt.prompt},
                              {"text", out},
                              {"tokens", opt.tokens},
                              {"temperature", opt.temperature},
                              {"top_k", opt.top_k},
                              {"seed", opt.seed}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
  }
  return kExitOk;
}

}  // namespace

void register_generate(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<GenerateOptions>();
  auto* cmd = app.add_subcommand(
      "generate", "Sample text from a checkpoint of memwall train (byte-level GPT, on the CPU)");
  cmd->add_option("--checkpoint-dir", opt->checkpoint_dir, "Checkpoint written by memwall train");
  cmd->add_option(
      "--weights", opt->weights,
      "Instead of a checkpoint: a directory with Hugging Face GPT-2 model.safetensors and config.json "
      "of the byte vocabulary (memwall export's output)");
  cmd->add_option("--prompt", opt->prompt, "Text to continue (bytes are tokens; default: a newline)");
  cmd->add_option("--tokens", opt->tokens, "Bytes to generate")->capture_default_str();
  cmd->add_option("--temperature", opt->temperature, "Softmax temperature; 0 picks the most likely byte")
      ->capture_default_str();
  cmd->add_option("--top-k", opt->top_k, "Sample among the k most likely bytes (0: all)")
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Seed of the sampling")->capture_default_str();
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of streaming the text");
  cmd->callback([opt, &exit_code] { exit_code = run_generate(*opt); });
}

}  // namespace memwall::cli
