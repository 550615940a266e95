// `memwall tokenize`: BPE tokens of a text or a file, token files (nanoGPT's train.bin layout) that
// `memwall train --data` reads without encoding again, and such files turned back into text (--decode).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "base/units.h"
#include "cli_common.h"
#include "commands.h"
#include "engine/io/atomic_file.h"
#include "engine/train/bpe.h"
#include "engine/train/dataset.h"

namespace memwall::cli {

namespace {

struct TokenizeOptions {
  std::string tokenizer;
  std::string data;
  std::string text;
  std::string decode;
  std::string out;
  std::string dtype = "u16";
  int threads = 0;  // 0: every core
  bool json = false;
};

// A token's bytes for a terminal: control characters escaped, the rest as they are.
std::string shown(const std::string& bytes) {
  std::string s;
  for (char ch : bytes) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '\n') {
      s += "\\n";
    } else if (ch == '\t') {
      s += "\\t";
    } else if (u < 0x20 || u == 0x7F) {
      s += strprintf("\\x%02X", u);
    } else {
      s += ch;
    }
  }
  return s;
}

// --decode: a token file's ids back to text, on stdout (or --out); the summary on stderr.
int run_decode(const TokenizeOptions& opt, const train::BpeTokenizer& t) {
  const int width = opt.dtype == "u32" ? 4 : 2;
  auto ids = train::read_token_ids(opt.decode, width, t.vocab_size());
  if (!ids.is_ok()) return report_error(ids.status());
  const std::vector<int> as_int(ids->begin(), ids->end());
  const std::string text = t.decode(as_int.data(), as_int.size());
  if (!opt.out.empty()) {
    auto file = io::AtomicFile::create(opt.out);
    if (!file.is_ok()) return report_error(file.status());
    if (Status s = file->append(text.data(), text.size()); !s.is_ok()) return report_error(s);
    if (Status s = file->commit(); !s.is_ok()) return report_error(s);
  }
  if (opt.json) {
    const nlohmann::json j = {{"tokenizer", t.source()},
                              {"decoded", opt.decode},
                              {"dtype", opt.dtype},
                              {"tokens", as_int.size()},
                              {"bytes", text.size()},
                              {"out", opt.out.empty() ? nlohmann::json(nullptr) : nlohmann::json(opt.out)},
                              {"text", opt.out.empty() ? nlohmann::json(text) : nlohmann::json(nullptr)}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  if (opt.out.empty()) std::fwrite(text.data(), 1, text.size(), stdout);
  std::fprintf(stderr, "%s: %s tokens (%s) -> %s bytes%s\n", opt.decode.c_str(),
               format_count(static_cast<double>(as_int.size())).c_str(), opt.dtype.c_str(),
               format_count(static_cast<double>(text.size())).c_str(),
               opt.out.empty() ? "" : strprintf("; written to %s", opt.out.c_str()).c_str());
  return kExitOk;
}

int run_tokenize(const TokenizeOptions& opt) {
  if ((opt.data.empty() ? 0 : 1) + (opt.text.empty() ? 0 : 1) + (opt.decode.empty() ? 0 : 1) != 1) {
    return report_error(
        Status::invalid_argument("tokenize: give one of --data FILE, --text TEXT and --decode IDS_FILE"));
  }
  if (opt.tokenizer == "bytes") {
    return report_error(Status::invalid_argument(
        "--tokenizer bytes: nothing to do (each byte is its token); allowed: a directory with vocab.json and "
        "merges.txt, or tokenizer.json"));
  }
  // The output is checked before the work (a directory there was found only at the rename, after it).
  if (!opt.out.empty()) {
    if (Status s = prepare_output("--out", opt.out, false); !s.is_ok()) return report_error(s);
  }
  auto chosen = train::choose_tokenizer(opt.tokenizer, "", 0, "--tokenizer");
  if (!chosen.is_ok()) return report_error(chosen.status());
  train::BpeTokenizer& t = **chosen;
  if (!opt.decode.empty()) return run_decode(opt, t);
  t.set_threads(opt.threads > 0 ? opt.threads : static_cast<int>(std::thread::hardware_concurrency()));
  // A file, or a directory's files as documents, read as memwall train reads them.
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int> ids;
  std::size_t text_bytes = opt.text.size();
  if (opt.data.empty()) {
    ids = t.encode(opt.text);
  } else {
    text_bytes = 0;
    auto read = train::text_tokens(opt.data, &t, &text_bytes);
    if (!read.is_ok()) return report_error(read.status());
    ids = std::move(read).value();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int width = opt.dtype == "u32" ? 4 : 2;
  if (!opt.out.empty()) {
    if (Status s = train::write_token_file(opt.out, ids, width); !s.is_ok()) return report_error(s);
  }
  const double per_token =
      ids.empty() ? 0.0 : static_cast<double>(text_bytes) / static_cast<double>(ids.size());
  if (opt.json) {
    nlohmann::json j = {
        {"tokenizer", t.source()},
        {"pre_tokenizer", train::pre_tokenizer_name(t.pre_tokenizer())},
        {"normalizer", t.normalizes() ? nlohmann::json("NFC") : nlohmann::json(nullptr)},
        {"bos", t.bos() >= 0 ? nlohmann::json(t.bos()) : nlohmann::json(nullptr)},
        {"vocab", t.vocab_size()},
        {"bytes", text_bytes},
        {"tokens", ids.size()},
        {"bytes_per_token", per_token},
        {"seconds", secs},
        {"threads", opt.threads > 0 ? opt.threads : static_cast<int>(std::thread::hardware_concurrency())},
        {"out", opt.out.empty() ? nlohmann::json(nullptr) : nlohmann::json(opt.out)},
        {"dtype", opt.dtype}};
    if (!opt.text.empty()) {
      std::vector<std::string> pieces;
      for (int id : ids) pieces.push_back(t.bytes(id));
      j["ids"] = ids;
      j["pieces"] = pieces;
    }
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  if (!opt.text.empty()) {
    for (std::size_t i = 0; i < ids.size(); ++i)
      std::printf("%s%d '%s'", i == 0 ? "" : " | ", ids[i], shown(t.bytes(ids[i])).c_str());
    std::printf("\n");
  }
  std::printf(
      "%s: %s bytes -> %s tokens (%.2f bytes per token) in %.2f s (%s)%s\n",
      opt.data.empty() ? "text" : opt.data.c_str(), format_count(static_cast<double>(text_bytes)).c_str(),
      format_count(static_cast<double>(ids.size())).c_str(), per_token, secs,
      format_bandwidth(static_cast<double>(text_bytes) / std::max(secs, 1e-9)).c_str(),
      opt.out.empty() ? "" : strprintf("; written to %s (%s)", opt.out.c_str(), opt.dtype.c_str()).c_str());
  return kExitOk;
}

}  // namespace

void register_tokenize(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<TokenizeOptions>();
  auto* cmd = app.add_subcommand("tokenize",
                                 "BPE tokens (GPT-2's, Llama 3's, Qwen2's, Falcon's, StarCoder's, BLOOM's, "
                                 "Llama 2's, Mistral's tokenizer) "
                                 "of a text or file; --out writes token ids that memwall train --data reads; "
                                 "--decode turns such a file back into text");
  cmd->add_option("--tokenizer", opt->tokenizer,
                  "Directory with GPT-2's vocab.json and merges.txt, or tokenizer.json")
      ->required();
  cmd->add_option("--data", opt->data, "File to encode");
  cmd->add_option("--text", opt->text, "Text to encode (its tokens are listed)");
  cmd->add_option("--decode", opt->decode,
                  "Token id file (--dtype wide; a directory: its files one after another) to turn back into "
                  "text, on stdout or in --out");
  cmd->add_option("--out", opt->out,
                  "Write the token ids here as little-endian unsigned integers (nanoGPT's train.bin layout)");
  cmd->add_option("--dtype", opt->dtype,
                  "Token id width in --out and --decode: u16 (vocabularies up to 65536) or u32")
      ->check(CLI::IsMember({"u16", "u32"}))
      ->capture_default_str();
  cmd->add_option(
         "--threads", opt->threads,
         "Threads for a long text (cut into pieces of at least 1 MiB where lines start; 0: every core)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "One JSON object (with --text, the ids and their pieces)");
  cmd->callback([opt, &exit_code] { exit_code = run_tokenize(*opt); });
}

}  // namespace memwall::cli
