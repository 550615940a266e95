// `memwall generate`: sample text from a checkpoint of `memwall train`, or from Hugging Face GPT-2 or Llama
// weights (`memwall export`'s output, or GPT-2 itself with its BPE vocabulary), on the CPU.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/units.h"
#include "cli_common.h"
#include "commands.h"
#include "engine/model/gpt.h"
#include "engine/model/gpt_decode.h"
#include "engine/model/import.h"
#include "engine/train/bpe.h"
#include "engine/train/checkpoint.h"

namespace memwall::cli {

namespace {

struct GenerateOptions {
  std::string checkpoint_dir;
  std::string weights;    // or a directory with model.safetensors and config.json
  std::string tokenizer;  // byte-level BPE files (default: beside the model), or "bytes"
  std::string prompt = "\n";
  int tokens = 200;
  double temperature = 0.8;
  int top_k = 40;
  double top_p = 1.0;  // nucleus sampling's probability mass; 1: off
  std::uint64_t seed = 1;
  bool json = false;
  bool no_stop = false;  // keep going past a special token
};

// The next token from the logits at one position: greedy at temperature 0, else softmax(logits / temperature)
// over the top_k most likely (all with top_k 0), cut to the fewest most likely whose probability reaches
// top_p (nucleus sampling; 1: no cut). Ties go to the lower id.
int sample(const float* logits, int vocab, const GenerateOptions& opt, std::mt19937_64& rng) {
  std::vector<int> order(static_cast<std::size_t>(vocab));
  for (int v = 0; v < vocab; ++v) order[static_cast<std::size_t>(v)] = v;
  const int k = opt.temperature == 0 ? 1 : opt.top_k > 0 ? std::min(opt.top_k, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [logits](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  if (opt.temperature == 0) return order[0];
  std::vector<double> weight(static_cast<std::size_t>(k));
  const double top = static_cast<double>(logits[order[0]]);
  double total = 0;
  for (int i = 0; i < k; ++i) {
    weight[static_cast<std::size_t>(i)] =
        std::exp((static_cast<double>(logits[order[static_cast<std::size_t>(i)]]) - top) / opt.temperature);
    total += weight[static_cast<std::size_t>(i)];
  }
  if (opt.top_p < 1) {
    double mass = 0;
    std::size_t keep = 0;
    while (keep < weight.size() && mass < opt.top_p * total) mass += weight[keep++];
    weight.resize(std::max<std::size_t>(keep, 1));
  }
  std::discrete_distribution<int> pick(weight.begin(), weight.end());
  return order[static_cast<std::size_t>(pick(rng))];
}

int run_generate(const GenerateOptions& opt) {
  if (!(opt.top_p > 0 && opt.top_p <= 1)) {
    return report_error(
        Status::invalid_argument(strprintf("--top-p %g", opt.top_p) + ": allowed: 0 < p <= 1 (1: off)"));
  }
  if (opt.tokens < 1)
    return report_error(Status::invalid_argument(strprintf("--tokens %d: allowed: 1 or more", opt.tokens)));
  if (!(opt.temperature >= 0)) {
    return report_error(Status::invalid_argument(
        strprintf("--temperature %g: allowed: 0 (greedy) or more", opt.temperature)));
  }
  if (opt.top_k < 0) {
    return report_error(
        Status::invalid_argument(strprintf("--top-k %d: allowed: 0 (every token) or more", opt.top_k)));
  }
  if (opt.prompt.empty())
    return report_error(Status::invalid_argument("--prompt: empty (allowed: any text)"));
  if (opt.checkpoint_dir.empty() == opt.weights.empty()) {
    return report_error(Status::invalid_argument(
        "generate: give one of --checkpoint-dir (memwall train's checkpoint) and --weights (a directory with "
        "model.safetensors or pytorch_model.bin and config.json)"));
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
    if (Status s = model::check_model_file(*spec, "memwall generate"); !s.is_ok()) return report_error(s);
    c = model::gpt_config_of(*spec);
    auto w = model::HfWeights::open(opt.weights, c);
    if (!w.is_ok()) return report_error(w.status());
    params.resize(model::gpt_num_params(c));
    if (Status s = w->read(0, params.size(), params.data()); !s.is_ok()) return report_error(s);
  }
  // The vocabulary: byte-level BPE where the model's directory (or --tokenizer) holds vocab.json and
  // merges.txt or tokenizer.json, else bytes.
  const std::string model_dir = opt.checkpoint_dir.empty() ? opt.weights : opt.checkpoint_dir;
  auto tokenizer = train::choose_tokenizer(opt.tokenizer, model_dir, c.vocab, "--tokenizer");
  if (!tokenizer.is_ok()) return report_error(tokenizer.status());
  const train::BpeTokenizer* bpe = tokenizer->has_value() ? &**tokenizer : nullptr;
  if (bpe == nullptr && c.vocab != 256) {
    std::error_code ec;
    const bool sentencepiece_only = std::filesystem::exists(model_dir + "/tokenizer.model", ec);
    return report_error(Status::invalid_argument(
        model_dir + ": vocabulary of " + std::to_string(c.vocab) +
        " tokens and no vocab.json/merges.txt or tokenizer.json beside the model" +
        (sentencepiece_only
             ? " (its tokenizer.model is SentencePiece's own format, which memwall does not read; "
               "the tokenizer.json of the same model is read)"
             : "") +
        "; pass --tokenizer DIR, or use a model of the byte vocabulary (256)"));
  }
  // A model's vocabulary may be padded past the tokenizer's (50304 for 50257): those ids are never sampled.
  const int sampled_vocab = bpe != nullptr ? bpe->vocab_size() : c.vocab;
  std::vector<int> ids;  // the prompt's tokens, then the generated ones
  if (bpe != nullptr) {
    ids = bpe->encode(opt.prompt);
    // Llama's beginning-of-text token first, as its tokenizer's post-processor puts it.
    if (bpe->bos() >= 0 && (ids.empty() || ids[0] != bpe->bos())) ids.insert(ids.begin(), bpe->bos());
  } else {
    for (char ch : opt.prompt) ids.push_back(static_cast<unsigned char>(ch));
  }
  const auto text_of = [bpe](int id) {
    return bpe != nullptr ? bpe->bytes(id) : std::string(1, static_cast<char>(id));
  };
  // The prompt runs through the model in one pass; then, while the text fits the model's context, each token
  // runs one position through the key/value cache. Once the text outgrows the context the window slides and
  // every position moves, so each token then runs the whole window of the last T tokens (causal attention:
  // the text sits at the start of the sequence, the rest is padding that position i never sees).
  const auto T = static_cast<std::size_t>(c.max_seq);
  model::GptDecoder decoder(c, params.data());
  std::unique_ptr<model::GptModel> window;
  std::vector<int> context(T, 0), targets(T, 0);
  const float* logits = nullptr;
  const auto add = [&](int id) -> Status {
    ids.push_back(id);
    if (!window && decoder.positions() < c.max_seq) {
      auto l = decoder.append(id);
      if (!l.is_ok()) return l.status();
      logits = *l;
      return Status::ok();
    }
    if (!window) window = std::make_unique<model::GptModel>(c, 1, c.max_seq, 1);
    std::copy(ids.end() - static_cast<std::ptrdiff_t>(T), ids.end(), context.begin());
    window->forward(params.data(), context.data(), targets.data());
    logits = window->logits() + (T - 1) * static_cast<std::size_t>(c.vocab);
    return Status::ok();
  };
  // The prompt (its last T tokens when it is longer than the context) in one pass.
  const std::size_t first = std::min(ids.size(), T);
  std::copy(ids.end() - static_cast<std::ptrdiff_t>(first), ids.end(), context.begin());
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
  // A special token (GPT-2's <|endoftext|>) ends the text, as it ended the documents the model learnt from.
  const std::vector<int> stops = bpe != nullptr && !opt.no_stop ? bpe->special_tokens() : std::vector<int>();
  int made = 0;
  std::string stopped;
  for (int n = 0; n < opt.tokens; ++n) {
    const int next = sample(logits, sampled_vocab, opt, rng);
    if (std::find(stops.begin(), stops.end(), next) != stops.end()) {
      stopped = text_of(next);
      break;
    }
    ++made;
    const std::string piece = text_of(next);
    out += piece;
    if (!opt.json) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    if (n + 1 < opt.tokens) {
      if (Status s = add(next); !s.is_ok()) return report_error(s);
    }
  }
  if (opt.json) {
    // Bytes that are not valid UTF-8 become U+FFFD in the JSON.
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const nlohmann::json j = {
        {"seconds", seconds},
        {"tokens_per_s", seconds > 0 ? made / seconds : 0.0},
        {"checkpoint_step", step >= 0 ? nlohmann::json(step) : nlohmann::json(nullptr)},
        {"prompt", opt.prompt},
        {"text", out},
        {"tokens", made},
        {"kv_cache_bytes", decoder.cache_bytes()},
        {"stopped_at", stopped.empty() ? nlohmann::json(nullptr) : nlohmann::json(stopped)},
        {"tokenizer", bpe != nullptr ? nlohmann::json(bpe->source()) : nlohmann::json("bytes")},
        {"temperature", opt.temperature},
        {"top_k", opt.top_k},
        {"top_p", opt.top_p},
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
      "generate", "Sample text from a checkpoint of memwall train or Hugging Face weights (on the CPU)");
  cmd->add_option("--checkpoint-dir", opt->checkpoint_dir, "Checkpoint written by memwall train");
  cmd->add_option(
      "--weights", opt->weights,
      "Instead of a checkpoint: a directory with Hugging Face GPT-2, OPT, GPT-NeoX, Phi, Falcon, "
      "GPT-BigCode, "
      "BLOOM, MPT, GPT-J, CodeGen or Llama-family "
      "(Llama, Mistral, Qwen2, Qwen3, Gemma, Phi-3, StableLM, OLMo, Cohere, SmolLM3, Granite, EXAONE 4, GLM) "
      "weights (model.safetensors, pytorch_model.bin, or their "
      "shards' index) and config.json (memwall export's output, or a download with its tokenizer files)");
  cmd->add_option(
      "--tokenizer", opt->tokenizer,
      "BPE tokenizer: a directory with GPT-2's vocab.json and merges.txt, or a tokenizer.json (GPT-2's, "
      "Llama 3's, Qwen2's, Llama 2's, Mistral's or Gemma's) (default: "
      "the model's directory when it has them, else bytes are tokens), or bytes");
  cmd->add_option("--prompt", opt->prompt, "Text to continue (default: a newline)");
  cmd->add_option("--tokens", opt->tokens, "Tokens to generate (bytes with the byte vocabulary)")
      ->capture_default_str();
  cmd->add_option("--temperature", opt->temperature, "Softmax temperature; 0 picks the most likely token")
      ->capture_default_str();
  cmd->add_option("--top-k", opt->top_k, "Sample among the k most likely tokens (0: all)")
      ->capture_default_str();
  cmd->add_option(
         "--top-p", opt->top_p,
         "Then among the fewest most likely tokens whose probability reaches p (nucleus sampling; 1: off)")
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Seed of the sampling")->capture_default_str();
  cmd->add_flag("--no-stop", opt->no_stop,
                "Keep generating past a special token such as <|endoftext|> (by default it ends the text)");
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of streaming the text");
  cmd->callback([opt, &exit_code] { exit_code = run_generate(*opt); });
}

}  // namespace memwall::cli
