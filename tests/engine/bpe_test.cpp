// Byte-level BPE: the pre-tokenizers' pieces, merge order, lossless round trips of any bytes, clear errors,
// and agreement with a Python reference encoder (tests/engine/bpe_reference.py, the `regex` module running
// GPT-2's, Llama 3's and Qwen2's patterns, unicodedata's NFC) on Unicode text.
#include "engine/train/bpe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/train/dataset.h"
#include "engine/train/nfc.h"
#include "gpt2_bytes.h"
#include "test_support.h"

namespace memwall::train {
namespace {

const std::string kTiny = std::string(MEMWALL_TEST_SOURCE_DIR) + "/data/tiny-bpe";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void spit(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::vector<std::string> pieces(std::string_view text, PreTokenizer pre = PreTokenizer::kGpt2) {
  std::vector<std::string> out;
  for (std::string_view p : pretokenize(text, pre)) out.emplace_back(p);
  return out;
}

// Where two lists first differ, and a few entries from there, as JSON.
template <typename T>
std::string first_difference(const std::vector<T>& got, const std::vector<T>& want) {
  std::size_t k = 0;
  while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
  const auto window = [&](const std::vector<T>& v) {
    return nlohmann::json(std::vector<T>(v.begin() + static_cast<std::ptrdiff_t>(std::min(k, v.size())),
                                         v.begin() + static_cast<std::ptrdiff_t>(std::min(k + 4, v.size()))))
        .dump();
  };
  return "first difference at " + std::to_string(k) + ": got " + window(got) + ", want " + window(want);
}

// tests/data/tiny-bpe's merges as tokenizer.json's model.merges ("a b" strings).
nlohmann::json tiny_merges() {
  nlohmann::json merges = nlohmann::json::array();
  std::istringstream lines(slurp(kTiny + "/merges.txt"));
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] != '#') merges.push_back(line);
  }
  return merges;
}

// A reference's pieces, each a list of its bytes.
std::vector<std::string> byte_strings(const nlohmann::json& lists) {
  std::vector<std::string> out;
  for (const nlohmann::json& bytes : lists) {
    std::string& piece = out.emplace_back();
    for (const nlohmann::json& b : bytes) piece += static_cast<char>(b.get<int>());
  }
  return out;
}

bool have_python_regex() {
  return std::system("/usr/bin/python3 -c 'import regex' >/dev/null 2>&1") == 0;
}

// vocab.json of the 256 byte tokens (GPT-2's printable stand-ins) plus `extra` tokens, ids in that order.
std::string byte_vocab(const std::vector<std::string>& extra) {
  nlohmann::json j = nlohmann::json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) j[test_files::gpt2_byte_key(b)] = id++;
  for (const std::string& t : extra) j[t] = id++;
  return j.dump();
}

TEST(Bpe, PretokenizerFollowsGpt2Pattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces("don't stop!'s"), (V{"don", "'t", " stop", "!'", "s"}));
  EXPECT_EQ(pieces("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(pieces("a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(pieces("x   "), (V{"x", "   "}));
  EXPECT_EQ(pieces(" 42 apples"), (V{" 42", " apples"}));
  EXPECT_EQ(pieces("na\xC3\xAFve \xC2\xBD"), (V{"na\xC3\xAFve", " \xC2\xBD"}));  // letter, number (1/2)
  EXPECT_EQ(pieces("\xC2\xA0\xC2\xA0x"), (V{"\xC2\xA0", "\xC2\xA0", "x"}));      // no-break spaces
  EXPECT_EQ(pieces("\x1C\x1Dx"), (V{"\x1C\x1D", "x"}));                          // not White_Space
  EXPECT_EQ(pieces("ab\xFF\xFE"
                   "cd"),
            (V{"ab", "\xFF\xFE", "cd"}));  // invalid UTF-8: other
  EXPECT_TRUE(pieces("").empty());
}

// Llama 3's pattern (Qwen2's the same but for numbers, one digit a piece): contractions in any case, one
// leading non-letter joins a run of letters, numbers in threes, newlines end the other characters' piece.
TEST(Bpe, PretokenizerFollowsLlama3Pattern) {
  using V = std::vector<std::string>;
  const auto l3 = [](std::string_view t) { return pieces(t, PreTokenizer::kLlama3); };
  EXPECT_EQ(l3("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(l3("DON'T stop!'S"), (V{"DON", "'T", " stop", "!'", "S"}));  // !' then S: "'S" starts at '
  EXPECT_EQ(l3("(abc ((x"), (V{"(abc", " ((", "x"}));
  EXPECT_EQ(l3("\tx"), (V{"\tx"}));
  EXPECT_EQ(l3(" 1234567"), (V{" ", "123", "456", "7"}));
  EXPECT_EQ(pieces(" 1234567", PreTokenizer::kQwen2), (V{" ", "1", "2", "3", "4", "5", "6", "7"}));
  EXPECT_EQ(l3("a.\n\nb"), (V{"a", ".\n\n", "b"}));
  EXPECT_EQ(l3("a \n \n  b"), (V{"a", " \n \n", " ", " b"}));
  EXPECT_EQ(l3("x   "), (V{"x", "   "}));
  EXPECT_EQ(l3("it\xC5\xBF'\xC5\xBF"), (V{"it\xC5\xBF", "'\xC5\xBF"}));  // long s folds to s
  EXPECT_TRUE(l3("").empty());
}

// gpt-oss's o200k pattern (as the `regex` module splits by it): letter runs follow case (an upper-case run then
// lower-case letters, "camelCase" in two, "HTTPServer" whole), take a contraction after them in any case, one
// leading non-letter; numbers in threes; newlines and slashes end the other characters' piece. Mistral's
// Tekken: no contractions, each number alone.
TEST(Bpe, PretokenizerFollowsO200kPattern) {
  using V = std::vector<std::string>;
  const auto o = [](std::string_view t) { return pieces(t, PreTokenizer::kO200k); };
  const auto tk = [](std::string_view t) { return pieces(t, PreTokenizer::kTekken); };
  EXPECT_EQ(o("Hello World"), (V{"Hello", " World"}));
  EXPECT_EQ(o("HTTPServer isn't"), (V{"HTTPServer", " isn't"}));
  EXPECT_EQ(tk("HTTPServer isn't"), (V{"HTTPServer", " isn", "'t"}));
  EXPECT_EQ(o("DON'T stop!'S"), (V{"DON'T", " stop", "!'", "S"}));
  EXPECT_EQ(tk("DON'T stop!'S"), (V{"DON", "'T", " stop", "!'", "S"}));
  EXPECT_EQ(o("camelCaseWORDS"), (V{"camel", "Case", "WORDS"}));
  EXPECT_EQ(o("a.\n/b"), (V{"a", ".\n/", "b"}));
  EXPECT_EQ(o(" 1234567"), (V{" ", "123", "456", "7"}));
  EXPECT_EQ(tk(" 1234567"), (V{" ", "1", "2", "3", "4", "5", "6", "7"}));
  EXPECT_EQ(o("\xE4\xB8\xAD\xE6\x96\x87OK"), (V{"\xE4\xB8\xAD\xE6\x96\x87", "OK"}));  // Lo is both
  EXPECT_EQ(o("na\xC3\xAFve \xC7\x85ungla"), (V{"na\xC3\xAFve", " \xC7\x85ungla"}));  // Lt: upper-like
  EXPECT_EQ(o("x   "), (V{"x", "   "}));
  EXPECT_EQ(o("path/to/file\n\n"), (V{"path", "/to", "/file", "\n\n"}));
  EXPECT_TRUE(o("").empty());
}

// NFC: compositions (also of a composite's decomposition and Hangul), marks put in canonical order, a
// singleton replaced, composition exclusions left decomposed, bytes that are not UTF-8 kept.
TEST(Bpe, NfcComposesAndOrdersMarks) {
  EXPECT_EQ(nfc("cafe\xCC\x81"), "caf\xC3\xA9");                // e + acute -> é
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");                   // Angstrom sign -> Å
  EXPECT_EQ(nfc("a\xCC\x81\xCC\xA3"), "\xE1\xBA\xA1\xCC\x81");  // a + acute + dot below -> ạ + acute
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // jamo -> 각
  EXPECT_EQ(nfc("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");              // excluded: stays apart
  EXPECT_EQ(nfc("x\xFF\xCC\x81"), "x\xFF\xCC\x81");                        // not UTF-8: composes nothing
  EXPECT_EQ(nfc("plain ASCII"), "plain ASCII");
  EXPECT_FALSE(nfc_may_change("na\xC3\xAFve"));
  EXPECT_TRUE(nfc_may_change("\xE4\xB8\xAD"));
}

// Random strings of letters, marks, numbers, spaces and symbols from many scripts: each pre-tokenizer's
// pieces are the `regex` module's for the same pattern (Falcon's and StarCoder's: for the same Sequence of
// steps, tests/engine/bpe_reference.py's split_text), and nfc() is unicodedata's.
TEST(Bpe, PatternsAndNfcMatchPythonOnRandomText) {
  if (!have_python_regex()) {
    GTEST_SKIP() << "/usr/bin/python3 with the regex module (Debian's python3-regex) is not installed";
  }
  const std::vector<std::string> pool = {"a",
                                         "Z",
                                         "q",
                                         "0",
                                         "9",
                                         " ",
                                         " ",
                                         "\t",
                                         "\n",
                                         "\r",
                                         "'",
                                         "s",
                                         "S",
                                         "t",
                                         "re",
                                         "LL",
                                         "ve",
                                         "M",
                                         "d",
                                         "\xC5\xBF",
                                         "\xC3\xA9",
                                         "e\xCC\x81",
                                         "\xCC\x81",
                                         "\xCC\xA7",
                                         "\xCC\xA3",
                                         "\xE2\x84\xAB",
                                         "\xE1\x84\x80",
                                         "\xE1\x85\xA1",
                                         "\xE1\x86\xA8",
                                         "\xEA\xB0\x80",
                                         "\xCD\x84",
                                         "\xE2\x85\xAB",
                                         "\xD9\xA3",
                                         "\xC2\xBD",
                                         "\xE3\x80\x80",
                                         "\xC2\xA0",
                                         "\xC2\x85",
                                         "\x1C",
                                         "!",
                                         "?",
                                         ".",
                                         "-",
                                         "$",
                                         "(",
                                         "_",
                                         "\xC2\xA7",
                                         "\xC2\xB2",
                                         "\xD0\xBC",
                                         "\xE2\x80\x94",
                                         ",",
                                         "|",
                                         "\xE3\x80\x82",
                                         "\xD8\x8C",
                                         "\xF0\x9F\x98\x80",
                                         "\xE4\xB8\xAD",
                                         "\xE0\xA4\x95",
                                         "\xE0\xA4\xBC",
                                         "\xC3\x87",
                                         "\xEF\xBD\x91",
                                         "\xE2\x80\xA8",
                                         "\xE0\xA5\x98",
                                         "\xE1\xBA\xA1",
                                         // (for o200k's case classes: Lu, Lt, Lm, Mc, and its slash)
                                         "A",
                                         "HE",
                                         "\xC3\x80",
                                         "\xC7\x85",
                                         "\xCA\xB0",
                                         "\xE0\xA4\x83",
                                         "/"};
  std::mt19937 rng(11);
  nlohmann::json texts = nlohmann::json::array();
  for (int k = 0; k < 400; ++k) {
    std::string t;
    const int n = static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) t += pool[rng() % pool.size()];
    texts.push_back(t);
  }
  const std::string dir = ::testing::TempDir() + "bpe-pieces-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  spit(dir + "/texts.json", texts.dump());
  for (const auto& [name, pre] :
       {std::pair{"gpt2", PreTokenizer::kGpt2}, std::pair{"llama3", PreTokenizer::kLlama3},
        std::pair{"qwen2", PreTokenizer::kQwen2}, std::pair{"falcon", PreTokenizer::kFalcon},
        std::pair{"starcoder", PreTokenizer::kStarCoder}, std::pair{"bloom", PreTokenizer::kBloom},
        std::pair{"o200k", PreTokenizer::kO200k}, std::pair{"tekken", PreTokenizer::kTekken}}) {
    SCOPED_TRACE(name);
    const std::string cmd = "/usr/bin/python3 " + std::string(MEMWALL_TEST_SOURCE_DIR) +
                            "/engine/bpe_reference.py --pieces " + name + " " + dir + "/texts.json " + dir +
                            "/out.json";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const auto want = nlohmann::json::parse(slurp(dir + "/out.json"));
    ASSERT_EQ(want.size(), texts.size());
    for (std::size_t k = 0; k < texts.size(); ++k) {
      const std::string t = texts[k].get<std::string>();
      EXPECT_EQ(pieces(t, pre), byte_strings(want[k]["pieces"])) << nlohmann::json(t).dump();
      EXPECT_EQ(nfc(t), want[k]["nfc"].get<std::string>()) << nlohmann::json(t).dump();
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(Bpe, MergesLowestRankFirstEverywhere) {
  // "e l" outranks "h e": "hell" becomes h + el + l, not he + ll.
  auto t = BpeTokenizer::parse(byte_vocab({"el", "he", "ll"}), "#version: 0.2\ne l\nh e\nl l\n", "mem");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->vocab_size(), 259);
  std::vector<int> ids = t->encode("hell");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(t->bytes(ids[0]), "h");
  EXPECT_EQ(t->bytes(ids[1]), "el");
  EXPECT_EQ(t->bytes(ids[2]), "l");
  // Every occurrence in a piece merges in the same pass; pieces never merge across each other.
  auto u = BpeTokenizer::parse(byte_vocab({"ll", "Ġl"}), "l l\n\xC4\xA0 l\n", "mem");
  ASSERT_TRUE(u.is_ok()) << u.status().to_string();
  ids = u->encode("llll ll");
  std::vector<std::string> got;
  for (int id : ids) got.push_back(u->bytes(id));
  EXPECT_EQ(got, (std::vector<std::string>{"ll", "ll", " ", "ll"}));  // "l l" outranks "Ġ l"
}

TEST(Bpe, AnyBytesRoundTrip) {
  auto t = BpeTokenizer::load(kTiny);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_GT(t->merges(), 300u);
  std::string text =
      "In the beginning God created the heaven and the earth.\n\tIt's 1611; caf\xC3\xA9 \xE2\x80\x94 ";
  std::uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 4000; ++i) {  // arbitrary bytes, most of them not UTF-8
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    text += static_cast<char>(x & 0xFF);
  }
  const std::vector<int> ids = t->encode(text);
  EXPECT_EQ(t->decode(ids.data(), ids.size()), text);
  const std::vector<int> english = t->encode("And God said, Let there be light: and there was light.");
  EXPECT_LT(english.size(), 30u) << "the merges learnt on Genesis should shorten Genesis-like text";
}

TEST(Bpe, SpecialTokensAreRecognisedInTheText) {
  auto t = BpeTokenizer::load(kTiny);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  const std::vector<int> specials = t->special_tokens();
  ASSERT_EQ(specials.size(), 1u);
  const int eot = specials[0];
  EXPECT_EQ(t->bytes(eot), "<|endoftext|>");
  const std::vector<int> a = t->encode("the end"), b = t->encode("In the"),
                         joined = t->encode("the end<|endoftext|>In the");
  std::vector<int> want = a;
  want.push_back(eot);
  want.insert(want.end(), b.begin(), b.end());
  EXPECT_EQ(joined, want);
  // Not quite the token: ordinary text.
  const std::vector<int> partial = t->encode("<|endoftext|");
  EXPECT_EQ(std::count(partial.begin(), partial.end(), eot), 0);
  EXPECT_EQ(t->decode(partial.data(), partial.size()), "<|endoftext|");
  EXPECT_EQ(t->encode("<|endoftext|><|endoftext|>"), (std::vector<int>{eot, eot}));
}

// Hugging Face's tokenizer.json of the same tokenizer (merges as "a b" strings or as pairs) encodes alike; a
// special token appended after the vocabulary is recognised; other kinds of tokenizer are refused by name.
TEST(Bpe, TokenizerJsonOfTheSameBpe) {
  auto files = BpeTokenizer::load(kTiny);
  ASSERT_TRUE(files.is_ok());
  EXPECT_EQ(files->files(), (std::vector<std::string>{"vocab.json", "merges.txt"}));
  nlohmann::json merges = nlohmann::json::array();
  std::istringstream lines(slurp(kTiny + "/merges.txt"));
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t sp = line.find(' ');
    if (merges.size() % 2 == 0) {
      merges.push_back(line);
    } else {
      merges.push_back({line.substr(0, sp), line.substr(sp + 1)});
    }
  }
  const nlohmann::json vocab = nlohmann::json::parse(slurp(kTiny + "/vocab.json"));
  nlohmann::json tj = {
      {"version", "1.0"},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"added_tokens",
       {{{"id", 656}, {"content", "<|endoftext|>"}, {"special", true}},
        {{"id", 657}, {"content", "[SEP]"}, {"special", true}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  auto t = BpeTokenizer::parse_tokenizer_json(tj.dump(), "hf");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->files(), (std::vector<std::string>{"tokenizer.json"}));
  EXPECT_EQ(t->vocab_size(), files->vocab_size() + 1);
  EXPECT_EQ(t->merges(), files->merges());
  const std::string text =
      "In the beginning God created the heaven and the earth.\n<|endoftext|>And it's 42.";
  EXPECT_EQ(t->encode(text), files->encode(text));
  const std::vector<int> sep = t->encode("light[SEP]dark");
  EXPECT_EQ(std::count(sep.begin(), sep.end(), 657), 1);
  EXPECT_EQ(t->decode(sep.data(), sep.size()), "light[SEP]dark");
  EXPECT_EQ(t->special_tokens(), (std::vector<int>{656, 657}));

  const auto refused = [&](nlohmann::json bad, const std::string& needle) {
    auto r = BpeTokenizer::parse_tokenizer_json(bad.dump(), "hf");
    ASSERT_FALSE(r.is_ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  nlohmann::json wordpiece = tj;
  wordpiece["model"]["type"] = "WordPiece";
  refused(wordpiece, "hf/tokenizer.json: model.type \"WordPiece\"; allowed: BPE");
  nlohmann::json metaspace = tj;
  metaspace["pre_tokenizer"] = {{"type", "Metaspace"}};
  refused(metaspace,
          "hf/tokenizer.json: pre_tokenizer {\"type\":\"Metaspace\"}; allowed: Metaspace with "
          "replacement \"\xE2\x96\x81\", split false");
  nlohmann::json whitespace = tj;
  whitespace["pre_tokenizer"] = {{"type", "Whitespace"}};
  refused(whitespace, "is not one memwall implements; allowed: GPT-2's (ByteLevel, add_prefix_space false)");
  nlohmann::json other_split = tj;  // a Split by a pattern memwall does not implement
  other_split["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  refused(other_split, "hf/tokenizer.json: pre_tokenizer {\"pretokenizers\"");
  nlohmann::json dropout = tj;
  dropout["model"]["dropout"] = 0.1;
  refused(dropout, "hf/tokenizer.json: model.dropout 0.1; allowed: null");
  nlohmann::json prefix = tj;
  prefix["pre_tokenizer"]["add_prefix_space"] = true;
  refused(prefix, "pre_tokenizer");
  nlohmann::json normalized = tj;
  normalized["normalizer"] = {{"type", "NFKC"}};
  refused(normalized,
          "hf/tokenizer.json: normalizer {\"type\":\"NFKC\"}; allowed: none (GPT-2's, Llama 3's), NFC");
  nlohmann::json gap = tj;
  gap["added_tokens"][1]["id"] = 700;
  refused(gap, "is neither its vocabulary entry nor the next id (657)");
  nlohmann::json bad_merge = tj;
  bad_merge["model"]["merges"].push_back("q u");
  refused(bad_merge, "hf/tokenizer.json model.merges line 401 \"q u\": the vocabulary lacks \"qu\"");
  refused(nlohmann::json::array(), "hf/tokenizer.json: top level is not a JSON object");
  refused(nlohmann::json::object(), "not a Hugging Face tokenizer (no \"model\" object)");
  // Falcon's Sequence with its punctuation isolated (not Falcon's) is not taken for Falcon's.
  nlohmann::json falcon = tj;
  falcon["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Punctuation"}, {"behavior", "Isolated"}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}},
        {{"type", "Digits"}, {"individual_digits", false}},
        {{"type", "Split"}, {"pattern", {{"Regex", "[0-9][0-9][0-9]"}}}, {"behavior", "Isolated"}}}}};
  refused(falcon, "Falcon's (Punctuation Contiguous, GPT-2's, Digits, a Split by [0-9][0-9][0-9])");
  falcon["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Contiguous";
  auto falcon_ok = BpeTokenizer::parse_tokenizer_json(falcon.dump(), "hf");
  ASSERT_TRUE(falcon_ok.is_ok()) << falcon_ok.status().to_string();
  EXPECT_EQ(falcon_ok->pre_tokenizer(), PreTokenizer::kFalcon);
  EXPECT_STREQ(pre_tokenizer_name(falcon_ok->pre_tokenizer()), "Falcon");
}

// Falcon's and StarCoder's pieces, worked out by hand from Hugging Face's steps.
TEST(Bpe, FalconAndStarCoderPieces) {
  using V = std::vector<std::string>;
  const auto falcon = [](std::string_view t) { return pieces(t, PreTokenizer::kFalcon); };
  const auto starcoder = [](std::string_view t) { return pieces(t, PreTokenizer::kStarCoder); };
  // Runs of punctuation apart from the rest, before GPT-2's pattern: " ..." is " " then "...".
  EXPECT_EQ(falcon("hello, world!! ...ok"), (V{"hello", ",", " world", "!!", " ", "...", "ok"}));
  EXPECT_EQ(starcoder("hello, world!! ...ok"), (V{"hello", ",", " world", "!!", " ...", "ok"}));
  // Falcon: digits in runs cut in threes from the left; StarCoder: each alone.
  EXPECT_EQ(falcon("(555) 123-4567"), (V{"(", "555", ")", " ", "123", "-", "456", "7"}));
  EXPECT_EQ(falcon("a  12"), (V{"a", " ", " ", "12"}));
  EXPECT_EQ(starcoder("a  12"), (V{"a", "  ", "1", "2"}));
  EXPECT_EQ(starcoder("x=1234;"), (V{"x", "=", "1", "2", "3", "4", ";"}));
  // Falcon splits digits after the byte mapping: the byte BD of U+00BD (1/2) is a number there, its C2 not;
  // the Cyrillic m is D0 BC, and BC's GPT-2 character is 1/4.
  EXPECT_EQ(falcon("12\xC2\xBD"
                   "3456"),
            (V{"12", "\xC2", "\xBD", "345", "6"}));
  EXPECT_EQ(falcon("\xD0\xBC"
                   "a"),
            (V{"\xD0", "\xBC", "a"}));
  EXPECT_EQ(starcoder("12\xC2\xBD"
                      "3"),
            (V{"1", "2", "\xC2\xBD", "3"}));
  EXPECT_EQ(starcoder("\xD9\xA3\xD9\xA4"), (V{"\xD9\xA3", "\xD9\xA4"}));  // Arabic-Indic 3 4
  EXPECT_TRUE(falcon("").empty());
  // BLOOM's: an optional space and a run of word characters, the text between (spaces, marks, parens) kept.
  const auto bloom = [](std::string_view t) { return pieces(t, PreTokenizer::kBloom); };
  EXPECT_EQ(bloom("Hello, world!"), (V{"Hello", ",", " world", "!"}));
  EXPECT_EQ(bloom("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(bloom("a ,  (b"), (V{"a", " ,  (", "b"}));
  EXPECT_EQ(bloom("x|y[1]=2"), (V{"x", "|", "y[1]=2"}));  // '[' and '=' are word characters
  EXPECT_EQ(bloom("\xE6\x97\xA5\xE3\x80\x82\xE6\x9C\xAC"),
            (V{"\xE6\x97\xA5", "\xE3\x80\x82", "\xE6\x9C\xAC"}));  // the ideographic full stop
  EXPECT_EQ(bloom("tab\tit\n\nnew"), (V{"tab", "\t", "it", "\n\n", "new"}));
}

// Added tokens that are not special (CodeGen's and Phi's runs of spaces, from tokenizer.json or
// added_tokens.json) are matched in the text as themselves, leftmost and longest first, but are not special
// tokens: generation does not stop at them and a dataset counts their bytes as text.
TEST(Bpe, AddedTokensThatAreNotSpecialStandForText) {
  const nlohmann::json vocab = nlohmann::json::parse(slurp(kTiny + "/vocab.json"));
  const nlohmann::json merges = tiny_merges();
  const nlohmann::json tj = {{"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                             {"added_tokens",
                              {{{"id", 656}, {"content", "<|endoftext|>"}, {"special", true}},
                               {{"id", 657}, {"content", "    "}, {"special", false}},
                               {{"id", 658}, {"content", "  "}, {"special", false}}}},
                             {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  auto json_tok = BpeTokenizer::parse_tokenizer_json(tj.dump(), "hf");
  ASSERT_TRUE(json_tok.is_ok()) << json_tok.status().to_string();
  const std::string dir = ::testing::TempDir() + "bpe-added-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kTiny + "/vocab.json", dir + "/vocab.json");
  std::filesystem::copy_file(kTiny + "/merges.txt", dir + "/merges.txt");
  spit(dir + "/added_tokens.json", R"({"  ": 658, "    ": 657})");
  auto files_tok = BpeTokenizer::load(dir);
  ASSERT_TRUE(files_tok.is_ok()) << files_tok.status().to_string();
  EXPECT_EQ(files_tok->files(), (std::vector<std::string>{"vocab.json", "merges.txt", "added_tokens.json"}));
  const std::string code = "def f():\n" + std::string(10, ' ') + "return 1<|endoftext|>x   y";
  for (const BpeTokenizer* t : {&*json_tok, &*files_tok}) {
    EXPECT_EQ(t->vocab_size(), 659);
    EXPECT_EQ(t->special_tokens(), (std::vector<int>{656}));
    const std::vector<int> ids = t->encode(code);
    EXPECT_EQ(t->decode(ids.data(), ids.size()), code);
    // Ten spaces: four, four, two; three: two, then " y" by GPT-2's pattern.
    const std::vector<int> indent(std::find(ids.begin(), ids.end(), 657), ids.end());
    ASSERT_GE(indent.size(), 3U);
    EXPECT_EQ((std::vector<int>(indent.begin(), indent.begin() + 3)), (std::vector<int>{657, 657, 658}));
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 658), 2);
    EXPECT_EQ(ids.back(), t->encode(" y").back());
  }
  spit(dir + "/added_tokens.json", R"({"    ": 700})");
  auto gap = BpeTokenizer::load(dir);
  ASSERT_FALSE(gap.is_ok());
  EXPECT_NE(
      gap.status().message().find("added_tokens.json: \"    \": 700 is neither its vocabulary entry nor the "
                                  "next id (657)"),
      std::string::npos)
      << gap.status().message();
  spit(dir + "/added_tokens.json", R"({"    ": "657"})");
  EXPECT_FALSE(BpeTokenizer::load(dir).is_ok());
  std::filesystem::remove_all(dir);
}

// A text is cut only where a line that ends with a non-space character is followed by one that starts with
// one: GPT-2's pattern leaves the last newline of "  \n" and "\n\n" to the next piece when a letter follows,
// so with merges for "\n\n" and "  \n" a cut after them would change the tokens.
TEST(Bpe, CutsKeepGpt2sWhitespaceBeforeALine) {
  auto t =
      BpeTokenizer::parse(byte_vocab({"\xC4\x8A\xC4\x8A", "\xC4\xA0\xC4\xA0", "\xC4\xA0\xC4\xA0\xC4\x8A"}),
                          "\xC4\x8A \xC4\x8A\n\xC4\xA0 \xC4\xA0\n\xC4\xA0\xC4\xA0 \xC4\x8A\n", "mem");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->encode("a\n\nb"), (std::vector<int>{'a', '\n', '\n', 'b'}));  // byte tokens: id = byte
  EXPECT_EQ(t->encode("a\n\n"), (std::vector<int>{'a', 256}));               // "\n\n" ends the text
  std::string text;
  for (int k = 0; text.size() < 60000; ++k)
    text += k % 3 == 0 ? "word  \n" : k % 3 == 1 ? "next\n\n" : "third " + std::to_string(k) + "\n";
  const std::vector<int> one = t->encode(text);
  const std::vector<std::size_t> at = t->cuts(text, 16, 1000);
  ASSERT_GT(at.size(), 8U);
  std::vector<int> joined;
  for (std::size_t k = 0; k + 1 < at.size(); ++k) {
    if (k > 0) {
      EXPECT_EQ(text[at[k] - 1], '\n');
      EXPECT_NE(text[at[k] - 2], ' ');
      EXPECT_NE(text[at[k] - 2], '\n');
    }
    const std::vector<int> part = t->encode(std::string_view(text).substr(at[k], at[k + 1] - at[k]), k > 0);
    joined.insert(joined.end(), part.begin(), part.end());
  }
  EXPECT_EQ(joined, one) << first_difference(joined, one);
  // BLOOM's pattern keeps the text between its matches together: "\n(" is one piece (a merge makes it one
  // token), so a line starting with "(" is no place to cut.
  nlohmann::json merges = nlohmann::json::array({"\xC4\x8A ("});
  const nlohmann::json bloom_json = {
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", " ?[^(\\s|[.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C])]+"}}},
           {"behavior", "Isolated"}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"model",
       {{"type", "BPE"}, {"vocab", nlohmann::json::parse(byte_vocab({"\xC4\x8A("}))}, {"merges", merges}}}};
  auto bloom = BpeTokenizer::parse_tokenizer_json(bloom_json.dump(), "bloom");
  ASSERT_TRUE(bloom.is_ok()) << bloom.status().to_string();
  EXPECT_EQ(bloom->pre_tokenizer(), PreTokenizer::kBloom);
  EXPECT_EQ(bloom->encode("a\n(b"), (std::vector<int>{'a', 256, 'b'}));
  std::string code;
  for (int k = 0; code.size() < 60000; ++k) code += k % 2 == 0 ? "call\n(arg)\n" : "x = y\n";
  const std::vector<std::size_t> cut = bloom->cuts(code, 16, 1000);
  ASSERT_GT(cut.size(), 8U);
  std::vector<int> parts;
  for (std::size_t k = 0; k + 1 < cut.size(); ++k) {
    if (k > 0) {
      EXPECT_NE(code[cut[k]], '(');
    }
    const std::vector<int> part =
        bloom->encode(std::string_view(code).substr(cut[k], cut[k + 1] - cut[k]), k > 0);
    parts.insert(parts.end(), part.begin(), part.end());
  }
  const std::vector<int> whole = bloom->encode(code);
  EXPECT_EQ(parts, whole) << first_difference(parts, whole);
}

// Documents a and b as `t` encodes and marks them: <|endoftext|> (its first special token) between.
std::vector<int> two_documents(const BpeTokenizer& t, const std::string& a, const std::string& b) {
  std::vector<int> want = t.encode(a);
  want.push_back(t.special_tokens()[0]);
  const std::vector<int> tail = t.encode(b);
  want.insert(want.end(), tail.begin(), tail.end());
  return want;
}

// That the training split of `ds` is exactly `want` (read as one window of the held-out split, the same
// tokens when a dataset validates on its training file).
void expect_tokens(const TextDataset& ds, const std::vector<int>& want) {
  ASSERT_EQ(ds.train_tokens(), want.size());
  std::vector<int> got(want.size()), targets(want.size());
  ds.val_batch(0, 1, static_cast<int>(want.size()) - 1, got.data(), targets.data());
  got.back() = targets[targets.size() - 2];
  EXPECT_EQ(got, want);
}

// A directory of texts is its files by name, documents separated by <|endoftext|> with BPE (joined as they
// are with bytes); a directory of token files is their ids one after another. Hidden files are skipped.
TEST(Bpe, DirectoriesOfDocuments) {
  auto t = BpeTokenizer::load(kTiny);
  ASSERT_TRUE(t.is_ok());
  const std::string dir = ::testing::TempDir() + "bpe-docs-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir + "/texts");
  std::filesystem::create_directories(dir + "/ids");
  std::string a, b;
  for (int i = 0; i < 40; ++i) a += "And God called the light Day. ";
  for (int i = 0; i < 40; ++i) b += "And the darkness he called Night. ";
  spit(dir + "/texts/2-b.txt", b);
  spit(dir + "/texts/1-a.txt", a);
  spit(dir + "/texts/.hidden", "never read");
  auto docs = TextDataset::from_files(dir + "/texts", dir + "/texts", 0, 0, 16, &*t);
  ASSERT_TRUE(docs.is_ok()) << docs.status().to_string();
  const std::vector<int> want = two_documents(*t, a, b);
  expect_tokens(*docs, want);
  // Bits per byte count the documents' bytes, not the separator's.
  EXPECT_NEAR(docs->val_bytes_per_token(),
              static_cast<double>(a.size() + b.size()) / static_cast<double>(want.size()), 1e-12);
  auto bytes = TextDataset::from_files(dir + "/texts", dir + "/texts", 0, 0, 16);
  ASSERT_TRUE(bytes.is_ok());
  EXPECT_EQ(bytes->train_tokens(), a.size() + b.size());
  ASSERT_TRUE(write_token_file(dir + "/ids/0.bin", t->encode(a), 2).is_ok());
  ASSERT_TRUE(write_token_file(dir + "/ids/1.bin", t->encode(b), 2).is_ok());
  auto ids = TextDataset::from_token_file(dir + "/ids", 2, t->vocab_size(), 0.1, 16, &*t);
  ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
  EXPECT_EQ(ids->train_tokens() + ids->val_tokens(), want.size() - 1);
  // A tokenizer without <|endoftext|> (Llama 3's added tokens instead) and no post-processor: its first
  // special token, here <|begin_of_text|>, separates the documents.
  nlohmann::json vocab = nlohmann::json::parse(slurp(kTiny + "/vocab.json"));
  ASSERT_EQ(vocab["<|endoftext|>"], 656);
  vocab.erase("<|endoftext|>");
  const nlohmann::json merges = tiny_merges();
  const nlohmann::json llama3 = {{"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                                 {"added_tokens",
                                  {{{"id", 656}, {"content", "<|begin_of_text|>"}, {"special", true}},
                                   {{"id", 657}, {"content", "<|end_of_text|>"}, {"special", true}}}},
                                 {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  auto l3 = BpeTokenizer::parse_tokenizer_json(llama3.dump(), "llama3");
  ASSERT_TRUE(l3.is_ok()) << l3.status().to_string();
  auto l3_docs = TextDataset::from_files(dir + "/texts", dir + "/texts", 0, 0, 16, &*l3);
  ASSERT_TRUE(l3_docs.is_ok()) << l3_docs.status().to_string();
  std::vector<int> l3_got(want.size()), l3_targets(want.size());
  ASSERT_EQ(l3_docs->train_tokens(), want.size());
  l3_docs->val_batch(0, 1, static_cast<int>(want.size()) - 1, l3_got.data(), l3_targets.data());
  EXPECT_EQ(l3_got[t->encode(a).size()], 656);  // <|begin_of_text|> between the two documents
  std::filesystem::create_directories(dir + "/empty");
  auto empty = TextDataset::from_file(dir + "/empty", 0.1, 16, &*t);
  ASSERT_FALSE(empty.is_ok());
  EXPECT_NE(empty.status().message().find("a directory without files"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// A JSON Lines file (Hugging Face datasets' to_json) is a document per line, its "text" decoded from JSON
// (escapes, \u sequences); blank lines are skipped, other keys ignored. With BPE the documents are separated
// by
// <|endoftext|>, with bytes each ends in a newline. A line that is not an object with a string "text" is
// refused naming the file and line.
TEST(Bpe, JsonLinesFilesAreADocumentPerLine) {
  auto t = BpeTokenizer::load(kTiny);
  ASSERT_TRUE(t.is_ok());
  const std::string dir = ::testing::TempDir() + "bpe-jsonl-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::string a, b;
  for (int i = 0; i < 40; ++i) a += "And God called the light Day. ";
  for (int i = 0; i < 40; ++i) b += "And the \"darkness\" he called Night.\n";
  const std::string jsonl = dir + "/corpus.jsonl";
  spit(jsonl, nlohmann::json({{"id", 1}, {"text", a}}).dump() + "\n\n   \r\n" +
                  nlohmann::json({{"text", b}, {"meta", {{"source", "kjv"}}}}).dump() + "\r\n");
  auto docs = TextDataset::from_files(jsonl, jsonl, 0, 0, 16, &*t);
  ASSERT_TRUE(docs.is_ok()) << docs.status().to_string();
  expect_tokens(*docs, two_documents(*t, a, b));
  auto bytes = TextDataset::from_files(jsonl, jsonl, 0, 0, 16);
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().to_string();
  EXPECT_EQ(bytes->train_tokens(), a.size() + 1 + b.size());  // a newline after a, b has its own
  // A \u escape decodes to UTF-8 bytes.
  spit(dir + "/cafe.jsonl", R"({"text": "caf\u00e9 )" + std::string(40, 'x') + "\"}\n");
  auto cafe = TextDataset::from_files(dir + "/cafe.jsonl", dir + "/cafe.jsonl", 0, 0, 16);
  ASSERT_TRUE(cafe.is_ok()) << cafe.status().to_string();
  EXPECT_EQ(cafe->train_tokens(), 6u + 40u + 1u);  // "caf", 2 bytes of é, " ", the x's, a newline
  for (const auto& [line, needle] :
       {std::pair{std::string(R"({"text": "ok"})") + "\n{\"text\": 3}",
                  "bad.jsonl:2: no string \"text\" field"},
        std::pair{std::string("[1, 2]"), "bad.jsonl:1: not a JSON object"},
        std::pair{std::string(R"({"text": "unterminated)"), "bad.jsonl:1: not JSON"},
        std::pair{std::string("\n  \n"), "bad.jsonl: no documents"}}) {
    spit(dir + "/bad.jsonl", line);
    auto bad = TextDataset::from_file(dir + "/bad.jsonl", 0.1, 4, &*t);
    ASSERT_FALSE(bad.is_ok()) << line;
    EXPECT_NE(bad.status().message().find(needle), std::string::npos) << bad.status().message();
  }
  std::filesystem::remove_all(dir);
}

// A long text on several threads, cut where lines start: the tokens of one pass (lines that start with
// spaces, blank lines, special tokens and multi-byte letters around the cuts included).
TEST(Bpe, ThreadsGiveTheTokensOfOnePass) {
  auto one = BpeTokenizer::load(kTiny), three = BpeTokenizer::load(kTiny);
  ASSERT_TRUE(one.is_ok() && three.is_ok());
  three->set_threads(3);
  std::string text;
  for (int i = 0; text.size() < (7u << 20) / 2; ++i) {
    text += i % 5 == 0 ? "  indented line " : i % 7 == 0 ? "\n" : "And God said, Let there be light";
    text += std::to_string(i) + (i % 11 == 0 ? "<|endoftext|>" : "") + (i % 3 == 0 ? " caf\xC3\xA9\n" : "\n");
  }
  const std::vector<int> serial = one->encode(text), threaded = three->encode(text);
  EXPECT_EQ(threaded.size(), serial.size());
  EXPECT_TRUE(threaded == serial);
  EXPECT_EQ(three->decode(threaded.data(), threaded.size()), text);
}

// Ranks sharing a directory's encoding (text_tokens with a communicator): the shares of 1 to 5 parts,
// concatenated in order, are the tokens of one pass, separators and an empty document included, and each
// part gets some of a text that can be cut.
TEST(Bpe, SharesOfTheEncodingJoinIntoOnePass) {
  auto t = BpeTokenizer::load(kTiny);
  ASSERT_TRUE(t.is_ok());
  std::vector<std::string> docs(4);
  for (int i = 0; i < 3000; ++i) {
    docs[static_cast<std::size_t>(i % 7 == 0   ? 0
                                  : i % 3 == 0 ? 1
                                               : 3)] +=
        (i % 5 == 0 ? "  indented " : "And God said, Let there be light ") + std::to_string(i) +
        (i % 4 == 0 ? "\n\n" : "\n");
  }
  const int eot = t->special_tokens().at(0);
  for (const DocumentMarks marks : {DocumentMarks{eot, -1}, DocumentMarks{-1, eot}}) {
    std::vector<std::int32_t> serial;  // the token between the documents, or before each
    for (std::size_t k = 0; k < docs.size(); ++k) {
      if (k > 0 && marks.between >= 0) serial.push_back(eot);
      if (marks.before >= 0) serial.push_back(eot);
      const std::vector<int> ids = t->encode(docs[k]);
      serial.insert(serial.end(), ids.begin(), ids.end());
    }
    for (int parts = 1; parts <= 5; ++parts) {
      std::vector<std::int32_t> joined;
      for (int part = 0; part < parts; ++part) {
        const std::vector<std::int32_t> share = encode_share(docs, *t, marks, part, parts, 256);
        EXPECT_GT(share.size(), serial.size() / static_cast<std::size_t>(4 * parts))
            << part << " of " << parts;
        joined.insert(joined.end(), share.begin(), share.end());
      }
      EXPECT_TRUE(joined == serial) << parts << " parts: " << joined.size() << " tokens, one pass "
                                    << serial.size() << (marks.before >= 0 ? " (before each)" : "");
    }
  }
}

// Tokenizer files with bytes flipped, ranges cut, repeated or dropped, loads as a tokenizer or fails with
// one line, never a crash (run under the sanitizers by scripts/sanitize.sh); a tokenizer that loads still
// round-trips any bytes.
TEST(Bpe, DamagedTokenizerFilesNeverCrash) {
  const std::string vocab = slurp(kTiny + "/vocab.json"), merges = slurp(kTiny + "/merges.txt");
  nlohmann::json merge_lines = nlohmann::json::array();
  std::istringstream lines(merges);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] != '#') merge_lines.push_back(line);
  }
  const std::string tj =
      nlohmann::json{
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
          {"added_tokens", {{{"id", 656}, {"content", "<|endoftext|>"}}}},
          {"model", {{"type", "BPE"}, {"vocab", nlohmann::json::parse(vocab)}, {"merges", merge_lines}}}}
          .dump();
  const std::string text =
      "In the beginning\n\n  God said 42 caf\xC3\xA9 \xFF\xC3<|endoftext|>!!! \xE2\x80\xA8 x";
  testing::XorShift next{0x243F6A8885A308D3ull};  // the same cases on every run
  // Valid JSON with odd values: ids negative, huge, repeated, fractional or strings; entries dropped.
  const nlohmann::json vocab_json = nlohmann::json::parse(vocab);
  std::vector<std::string> keys;
  for (const auto& item : vocab_json.items()) keys.push_back(item.key());
  const nlohmann::json odd[] = {-1, 1000000000, 0, 655, 3.5, "7", nullptr, 657};
  int loaded = 0, refused = 0;
  for (int c = 0; c < 600; ++c) {
    std::string v = vocab, m = merges, j = tj;
    if (c >= 300) {
      nlohmann::json changed = vocab_json;
      for (int k = 0, edits = 1 + static_cast<int>(next() % 3); k < edits; ++k) {
        const std::string& key = keys[next() % keys.size()];
        if (next() % 4 == 0) {
          changed.erase(key);
        } else {
          changed[key] = odd[next() % std::size(odd)];
        }
      }
      v = changed.dump();
      m = "#version: 0.2\n" + keys[next() % keys.size()] + " " + keys[next() % keys.size()] + "\n" + merges;
    }
    std::string& target = c % 3 == 0 ? v : c % 3 == 1 ? m : j;
    if (c < 300) testing::damage_bytes(target, next, std::string::npos, 40, "{}[]\",:0 \n\\");
    auto t = c % 3 == 2 && c < 300 ? BpeTokenizer::parse_tokenizer_json(j, "hf")
                                   : BpeTokenizer::parse(v, m, "mem");
    if (!t.is_ok()) {
      ++refused;
      EXPECT_EQ(t.status().message().find('\n'), std::string::npos) << t.status().message();
      continue;
    }
    ++loaded;
    const std::vector<int> ids = t->encode(text);
    EXPECT_EQ(t->decode(ids.data(), ids.size()), text) << "case " << c;
  }
  EXPECT_GT(loaded, 0);
  EXPECT_GT(refused, 0);
  std::printf("%d damaged tokenizers loaded, %d refused\n", loaded, refused);
  // Values of the wrong JSON type where tokenizer.json's keys are read: read or refused, never thrown on.
  const nlohmann::json base = nlohmann::json::parse(tj);
  const std::vector<std::pair<const char*, nlohmann::json>> confused = {
      {"/pre_tokenizer/add_prefix_space", "yes"},
      {"/pre_tokenizer/type", 5},
      {"/pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {"x", 3}}}},
      {"/pre_tokenizer",
       {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Split"}, {"pattern", "\\s+"}}, {{"type", 7}}}}}},
      {"/normalizer", "NFC"},
      {"/model/ignore_merges", "true"},
      {"/model/dropout", {{"p", 1}}},
      {"/added_tokens", {{{"id", "656"}, {"content", 3}}}},
      {"/added_tokens", "none"}};
  for (const auto& [where, value] : confused) {
    nlohmann::json doc = base;
    doc[nlohmann::json::json_pointer(where)] = value;
    auto t = BpeTokenizer::parse_tokenizer_json(doc.dump(), "hf");
    if (!t.is_ok()) {
      EXPECT_EQ(t.status().message().find('\n'), std::string::npos) << where;
    }
  }
}

// The heap that merges long pieces gives GPT-2's loop's tokens: every piece of a mixed text (long runs of
// letters, digits, punctuation and spaces among ordinary words) through each path alone.
TEST(Bpe, LongPiecesMergeFromAHeapAsTheLoopDoes) {
  auto loop = BpeTokenizer::load(kTiny), heap = BpeTokenizer::load(kTiny);
  ASSERT_TRUE(loop.is_ok() && heap.is_ok());
  loop->set_long_piece_bytes(std::numeric_limits<std::size_t>::max());
  heap->set_long_piece_bytes(0);
  std::string text = slurp(kTiny + "/merges.txt");  // words and pieces of words, one per line
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  const char* words[] = {"the", "and", "God", "beginning", "waters", "light", "day", "earth", "--", "..."};
  for (int run = 0; run < 50; ++run) {
    std::string piece;
    const int parts = 5 + run * 7;
    for (int k = 0; k < parts; ++k) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      piece += words[x % (run % 2 == 0 ? 8 : 10)];
    }
    text += " " + piece + std::string(static_cast<std::size_t>(run % 5), ' ') + std::to_string(x) + "\n";
  }
  const std::vector<int> a = loop->encode(text), b = heap->encode(text);
  EXPECT_EQ(a, b);
  EXPECT_EQ(heap->decode(b.data(), b.size()), text);
  EXPECT_LT(b.size(), text.size() * 3 / 4);
}

TEST(Bpe, ErrorsNameTheFileAndEntry) {
  auto no_byte = BpeTokenizer::parse(R"({"a": 0})", "", "dir");
  ASSERT_FALSE(no_byte.is_ok());
  EXPECT_NE(no_byte.status().message().find("dir/vocab.json: no token for byte 0"), std::string::npos)
      << no_byte.status().message();
  auto bad_merge = BpeTokenizer::parse(byte_vocab({}), "#version: 0.2\nq u\n", "dir");
  ASSERT_FALSE(bad_merge.is_ok());
  EXPECT_NE(bad_merge.status().message().find("dir/merges.txt line 2 \"q u\": the vocabulary lacks \"qu\""),
            std::string::npos)
      << bad_merge.status().message();
  auto bad_line = BpeTokenizer::parse(byte_vocab({}), "abc\n", "dir");
  ASSERT_FALSE(bad_line.is_ok());
  EXPECT_NE(bad_line.status().message().find("line 1"), std::string::npos);
  auto bad_id = BpeTokenizer::parse(R"({"a": 5})", "", "dir");
  ASSERT_FALSE(bad_id.is_ok());
  EXPECT_NE(bad_id.status().message().find("allowed: an integer in [0, 1)"), std::string::npos);
  EXPECT_FALSE(BpeTokenizer::parse("[1, 2]", "", "dir").is_ok());
  auto none = choose_tokenizer("/nonexistent/tok", "", 0, "--tokenizer");
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("--tokenizer /nonexistent/tok: no vocab.json and merges.txt"),
            std::string::npos);
  auto too_big = choose_tokenizer(kTiny, "", 300, "--tokenizer");
  ASSERT_FALSE(too_big.is_ok());
  EXPECT_NE(too_big.status().message().find("more than the model's vocabulary of 300"), std::string::npos);
  auto bytes = choose_tokenizer("bytes", kTiny, 0, "--tokenizer");
  ASSERT_TRUE(bytes.is_ok());
  EXPECT_FALSE(bytes->has_value());
  auto beside = choose_tokenizer("", kTiny, 0, "--tokenizer");
  ASSERT_TRUE(beside.is_ok());
  EXPECT_TRUE(beside->has_value());
}

TEST(Bpe, DatasetOfTokens) {
  auto t = BpeTokenizer::load(kTiny);
  ASSERT_TRUE(t.is_ok());
  const std::string path = ::testing::TempDir() + "bpe-data-" + std::to_string(::getpid()) + ".txt";
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "And the evening and the morning were the day " + std::to_string(i) + ".\n";
  spit(path, text);
  auto ds = TextDataset::from_file(path, 0.1, 16, &*t);
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_EQ(ds->vocab(), t->vocab_size());
  EXPECT_GT(ds->val_bytes_per_token(), 1.5) << "Genesis merges on Genesis-like text";
  EXPECT_LT(ds->val_bytes_per_token(), 8.0);
  EXPECT_EQ(ds->train_tokens() + ds->val_tokens(), t->encode(text).size());
  std::vector<int> tok(2 * 16), tgt(tok.size());
  ds->train_batch(1, 0, 2, 16, tok.data(), tgt.data());
  for (int i = 0; i < 2 * 16; ++i) {
    EXPECT_GE(tok[static_cast<std::size_t>(i)], 0);
    EXPECT_LT(tok[static_cast<std::size_t>(i)], t->vocab_size());
    if (i % 16 != 15) {
      EXPECT_EQ(tgt[static_cast<std::size_t>(i)], tok[static_cast<std::size_t>(i) + 1]);
    }
  }
  auto few = TextDataset::from_file(path, 0.1, 100000, &*t);
  ASSERT_FALSE(few.is_ok());
  EXPECT_NE(few.status().message().find("tokens are too few"), std::string::npos) << few.status().message();
  std::remove(path.c_str());
}

TEST(Bpe, TokenFilesRoundTrip) {
  auto t = BpeTokenizer::load(kTiny);
  ASSERT_TRUE(t.is_ok());
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "And God saw the light, that it was good " + std::to_string(i) + ".\n";
  const std::vector<int> ids = t->encode(text);
  const std::string dir = ::testing::TempDir() + "bpe-tokens-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  spit(dir + "/text.txt", text);
  auto from_text = TextDataset::from_file(dir + "/text.txt", 0.1, 16, &*t);
  ASSERT_TRUE(from_text.is_ok());
  for (int width : {2, 4}) {
    const std::string path = dir + "/tokens" + std::to_string(width) + ".bin";
    ASSERT_TRUE(write_token_file(path, ids, width).is_ok());
    EXPECT_EQ(std::filesystem::file_size(path), ids.size() * static_cast<std::size_t>(width));
    auto ds = TextDataset::from_token_file(path, width, t->vocab_size(), 0.1, 16, &*t);
    ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
    EXPECT_EQ(ds->train_tokens(), from_text->train_tokens());
    EXPECT_DOUBLE_EQ(ds->val_bytes_per_token(), from_text->val_bytes_per_token());
    std::vector<int> a(4 * 16), b(a.size()), ta(a.size()), tb(a.size());
    ds->train_batch(5, 3, 4, 16, a.data(), ta.data());
    from_text->train_batch(5, 3, 4, 16, b.data(), tb.data());
    EXPECT_EQ(a, b);
    EXPECT_EQ(ta, tb);
    auto unknown = TextDataset::from_token_file(path, width, t->vocab_size(), 0.1, 16);
    ASSERT_TRUE(unknown.is_ok());
    EXPECT_EQ(unknown->val_bytes_per_token(), 0.0);
  }
  // A separate held-out file (nanoGPT's val.bin): all of one file trains, all of the other validates.
  for (int width : {0, 2}) {
    const std::string train_path = width == 0 ? dir + "/text.txt" : dir + "/tokens2.bin";
    auto split = TextDataset::from_files(train_path, train_path, width, t->vocab_size(), 16, &*t);
    ASSERT_TRUE(split.is_ok()) << split.status().to_string();
    EXPECT_EQ(split->train_tokens(), ids.size());
    EXPECT_EQ(split->val_tokens(), ids.size());
    EXPECT_NEAR(split->val_bytes_per_token(),
                static_cast<double>(text.size()) / static_cast<double>(ids.size()), 1e-12);
    std::vector<int> v(2 * 16), vt(v.size());
    split->val_batch(0, 2, 16, v.data(), vt.data());
    EXPECT_EQ(std::vector<int>(v.begin(), v.end()), std::vector<int>(ids.begin(), ids.begin() + 32));
  }
  auto short_val = TextDataset::from_files(dir + "/tokens2.bin", dir + "/tokens2.bin", 2, t->vocab_size(),
                                           static_cast<int>(ids.size()), &*t);
  ASSERT_FALSE(short_val.is_ok());
  EXPECT_NE(short_val.status().message().find("tokens are too few"), std::string::npos);
  // Ids past the vocabulary, a torn file, and ids too wide for 2 bytes are refused, naming what is wrong.
  auto small = TextDataset::from_token_file(dir + "/tokens2.bin", 2, 300, 0.1, 16);
  ASSERT_FALSE(small.is_ok());
  EXPECT_NE(small.status().message().find("outside the vocabulary of 300"), std::string::npos)
      << small.status().message();
  spit(dir + "/odd.bin", "abc");
  auto odd = TextDataset::from_token_file(dir + "/odd.bin", 2, 1000, 0.1, 16);
  ASSERT_FALSE(odd.is_ok());
  EXPECT_NE(odd.status().message().find("3 bytes are not a whole number of 2-byte token ids"),
            std::string::npos);
  const Status wide = write_token_file(dir + "/wide.bin", {1, 70000}, 2);
  ASSERT_FALSE(wide.is_ok());
  EXPECT_NE(wide.message().find("70000 does not fit 2 bytes"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir + "/wide.bin"));
  std::filesystem::remove_all(dir);
}

// The reference learns its own merges on a multilingual corpus, so both sides see the same files; the text
// mixes scripts, digits of other scripts, letter-numbers, no-break and ideographic spaces, contractions.

// A BPE learnt by the reference on a corpus with `name`'s pattern, then the same text encoded by both.
// The reference's corpus: six scripts, contractions, numbers.
std::string reference_corpus() {
  std::string corpus;
  const char* lines[] = {
      "In the beginning God created the heaven and the earth. ",
      "Und Gott sprach: Es werde Licht! Und es ward Licht. ",
      "Au commencement, Dieu cr\xC3\xA9"
      "a les cieux et la terre. ",
      "\xD0\x92 \xD0\xBD\xD0\xB0\xD1\x87\xD0\xB0\xD0\xBB\xD0\xB5 "
      "\xD1\x81\xD0\xBE\xD1\x82\xD0\xB2\xD0\xBE\xD1\x80\xD0\xB8\xD0\xBB "
      "\xD0\x91\xD0\xBE\xD0\xB3 \xD0\xBD\xD0\xB5\xD0\xB1\xD0\xBE \xD0\xB8 "
      "\xD0\xB7\xD0\xB5\xD0\xBC\xD0\xBB\xD1\x8E. ",
      "\xE8\xB5\xB7\xE5\x88\x9D\xE7\xA5\x9E\xE5\x88\x9B\xE9\x80\xA0\xE5\xA4\xA9\xE5\x9C\xB0\xE3\x80\x82 ",
      "it's we'll they're I've you'd I'm 123 4567 \xD9\xA3\xD9\xA4 \xE2\x85\xAB\n\n  ",
  };
  for (int rep = 0; rep < 40; ++rep) {
    for (const char* l : lines) corpus += l;
    corpus += std::to_string(rep * 37) + "\n";
  }
  return corpus;
}

// The text it encodes: spacing, scripts, marks, an emoji, `end` / `end2` as document separators.
std::string reference_text(const std::string& end, const std::string& end2) {
  return "And God said,  Let there be light:\tand there was light.\n\n   It's 2024 \xE2\x80\x94 caf\xC3\xA9 "
         "na\xC3\xAFve \xC2\xBD \xE2\x85\xAB\xE2\x85\xA0 \xD9\xA3\xD9\xA4\xD9\xA5 "
         "\xE8\xB5\xB7\xE5\x88\x9D\xE3\x80\x80\xE7\xA5\x9E \xC2\xA0x  'quoted' we'LL ?!'s ... "
         "\xF0\x9F\x98\x80 "
         "cafe\xCC\x81 \xE2\x84\xAB quux 1234567 IT'S\r\n(x) "
         "end" +
         end + " Next  document" + end + end2 + "   " +
         [] {  // one piece long enough to be merged from the heap
           std::string w;
           for (int k = 0; k < 40; ++k) w += k % 3 == 0 ? "Gott" : k % 3 == 1 ? "beginning" : "Licht";
           return w;
         }();
}

// A fresh directory holding corpus.txt and text.txt, after `tests/engine/SCRIPT DIR DIR/corpus.txt
// DIR/text.txt ARGS` ran there; empty (and a test failure) when the script failed.
std::string run_reference(const std::string& script, const std::string& tag, const std::string& corpus,
                          const std::string& text, const std::string& args) {
  const std::string dir = ::testing::TempDir() + tag + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  spit(dir + "/corpus.txt", corpus);
  spit(dir + "/text.txt", text);
  const std::string cmd = "/usr/bin/python3 " + std::string(MEMWALL_TEST_SOURCE_DIR) + "/engine/" + script +
                          " " + dir + " " + dir + "/corpus.txt " + dir + "/text.txt " + args;
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << cmd;
    return "";
  }
  return dir;
}

void expect_reference_encoding(const std::string& name, PreTokenizer pre) {
  SCOPED_TRACE(name);
  const std::string text = reference_text("<|endoftext|>", "<|endoftext|>");
  const std::string dir =
      run_reference("bpe_reference.py", "bpe-ref-" + name, reference_corpus(), text, "300 " + name);
  ASSERT_FALSE(dir.empty());
  auto t = BpeTokenizer::load(dir);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->pre_tokenizer(), pre);
  EXPECT_EQ(t->normalizes(), pre == PreTokenizer::kQwen2);
  // The pieces of the text between its special tokens (of its NFC for Qwen2).
  std::vector<std::string> got_pieces;
  for (std::size_t from = 0;;) {
    const std::size_t at = text.find("<|endoftext|>", from);
    std::string part = text.substr(from, at == std::string::npos ? at : at - from);
    if (t->normalizes()) part = nfc(part);
    for (std::string& p : pieces(part, pre)) got_pieces.push_back(std::move(p));
    if (at == std::string::npos) break;
    from = at + 13;
  }
  const auto want_pieces = byte_strings(nlohmann::json::parse(slurp(dir + "/pieces.json")));
  EXPECT_EQ(got_pieces, want_pieces) << first_difference(got_pieces, want_pieces);
  const auto want_ids = nlohmann::json::parse(slurp(dir + "/ids.json")).get<std::vector<int>>();
  const std::vector<int> ids = t->encode(text);
  EXPECT_EQ(ids, want_ids) << first_difference(ids, want_ids);
  EXPECT_LT(ids.size(), text.size() * 3 / 4) << "the learnt merges should apply";
  EXPECT_EQ(t->decode(ids.data(), ids.size()), t->normalizes() ? nfc(text) : text);
  if (t->normalizes()) {
    EXPECT_NE(nfc(text), text);
  }
  // Llama 3's and o200k's ignore_merges: " quux", a token no merge makes, is one token as a whole piece.
  const std::vector<int> quux = t->encode(" quux");
  EXPECT_EQ(quux.size() == 1, pre == PreTokenizer::kLlama3 || pre == PreTokenizer::kO200k) << quux.size();
  std::filesystem::remove_all(dir);
}

TEST(Bpe, MatchesPythonReferenceEncoder) {
  if (!have_python_regex()) {
    GTEST_SKIP() << "/usr/bin/python3 with the regex module (Debian's python3-regex) is not installed";
  }
  expect_reference_encoding("gpt2", PreTokenizer::kGpt2);
}

// Llama 3's, Qwen2's, gpt-oss's (o200k) and Mistral's Tekken tokenizer.json (their pre-tokenizer pattern,
// ignore_merges, NFC, added tokens).
TEST(Bpe, Llama3AndQwen2MatchPythonReferenceEncoder) {
  if (!have_python_regex()) {
    GTEST_SKIP() << "/usr/bin/python3 with the regex module (Debian's python3-regex) is not installed";
  }
  expect_reference_encoding("llama3", PreTokenizer::kLlama3);
  expect_reference_encoding("qwen2", PreTokenizer::kQwen2);
  expect_reference_encoding("o200k", PreTokenizer::kO200k);
  expect_reference_encoding("tekken", PreTokenizer::kTekken);
}

// Falcon's, StarCoder's and BLOOM's tokenizer.json (their pre-tokenizer Sequences: runs of punctuation,
// numbers alone or in runs cut in threes, digits split after the byte mapping; BLOOM's Split and the text
// between its matches).
TEST(Bpe, FalconStarCoderAndBloomMatchPythonReferenceEncoder) {
  if (!have_python_regex()) {
    GTEST_SKIP() << "/usr/bin/python3 with the regex module (Debian's python3-regex) is not installed";
  }
  expect_reference_encoding("falcon", PreTokenizer::kFalcon);
  expect_reference_encoding("starcoder", PreTokenizer::kStarCoder);
  expect_reference_encoding("bloom", PreTokenizer::kBloom);
}

// Llama 2's and Mistral's SentencePiece-style tokenizer.json (spaces as U+2581 put before the text, one piece
// of characters, byte fallback, merges lowest rank then leftmost first).
void expect_sentencepiece_encoding(const std::string& name) {
  SCOPED_TRACE(name);
  const std::string meta = "\xE2\x96\x81";
  // A literal U+2581 (encoded as a space is) and an emoji the corpus lacks (its four byte tokens).
  const std::string text = reference_text("</s>", "<s>") + " a" + meta + "b \xF0\x9F\x90\x8D\n";
  const std::string dir =
      run_reference("bpe_reference.py", "bpe-ref-" + name, reference_corpus(), text, "300 " + name);
  ASSERT_FALSE(dir.empty());
  auto t = BpeTokenizer::load(dir);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->pre_tokenizer(), PreTokenizer::kSentencePiece);
  EXPECT_EQ(t->bos(), 1);
  EXPECT_EQ(t->special_tokens(), (std::vector<int>{0, 1, 2}));
  const auto want_ids = nlohmann::json::parse(slurp(dir + "/ids.json")).get<std::vector<int>>();
  const std::vector<int> ids = t->encode(text);
  EXPECT_EQ(ids, want_ids) << first_difference(ids, want_ids);
  EXPECT_LT(ids.size(), text.size() * 4 / 5) << "the learnt merges should apply";
  // Byte tokens: the emoji's four (<0xF0> is id 3 + 0xF0), a byte that is not UTF-8 alone.
  const std::vector<int> emoji = t->encode("\xF0\x9F\x90\x8D");
  ASSERT_GE(emoji.size(), 4U);
  EXPECT_EQ(std::vector<int>(emoji.end() - 4, emoji.end()),
            (std::vector<int>{3 + 0xF0, 3 + 0x9F, 3 + 0x90, 3 + 0x8D}));
  const std::vector<int> stray = t->encode("x\xFFy");
  EXPECT_NE(std::find(stray.begin(), stray.end(), 3 + 0xFF), stray.end());
  EXPECT_EQ(t->bytes(3 + 0x41), "A");
  // A space at the start: Llama 2's normalizer puts U+2581 before it all the same, Mistral's Metaspace not;
  // Gemma's adds none (the space is the U+2581 of the first word, kept by its decoder).
  const std::string hello = t->decode(t->encode(" God said").data(), t->encode(" God said").size());
  if (name != "gemma") {
    EXPECT_EQ(t->encode(" God said").size(), t->encode("God said").size() + (name == "llama2" ? 1 : 0));
  } else {
    EXPECT_EQ(t->decode(t->encode("God said").data(), t->encode("God said").size()), "God said");
  }
  EXPECT_EQ(hello, name == "mistral" ? "God said" : " God said");
  // Text without special tokens round-trips (decode drops the one space the encoder put first), stray bytes
  // and all; a literal U+2581 comes back as a space.
  for (const std::string& x :
       {std::string("In the beginning\n\n  God \xFF\xC3 created\t"), std::string("\n")}) {
    const std::vector<int> v = t->encode(x);
    EXPECT_EQ(t->decode(v.data(), v.size()), x);
  }
  const std::vector<int> lit = t->encode("a" + meta + "b");
  EXPECT_EQ(lit, t->encode("a b"));
  // After a cut at a newline the text continues without a U+2581 of its own: the tokens of one pass, on
  // several threads as in the dataset's shares.
  std::string book;
  for (int k = 0; book.size() < (5U << 20); ++k) {
    book += (k % 7 == 0   ? "\n  "
             : k % 5 == 0 ? "\n"
                          : " ") +
            std::string(k % 3 == 0 ? "Und Gott" : "the earth");
    book += k % 11 == 0 ? "\xF0\x9F\x98\x80," : ".";
  }
  const std::vector<int> one = t->encode(book);
  const std::vector<std::size_t> at = t->cuts(book, 4, 1 << 20);
  ASSERT_EQ(at.size(), 5U);
  std::vector<int> joined;
  for (std::size_t k = 0; k + 1 < at.size(); ++k) {
    EXPECT_EQ(book[at[k + 1] - 1], k + 2 < at.size() ? '\n' : book.back());
    const std::vector<int> part = t->encode(std::string_view(book).substr(at[k], at[k + 1] - at[k]), k > 0);
    joined.insert(joined.end(), part.begin(), part.end());
  }
  EXPECT_EQ(joined, one) << first_difference(joined, one);
  t->set_threads(4);
  EXPECT_EQ(t->encode(book), one);
  // Ranks sharing two documents, each after the beginning-of-text token <s> (Llama's marks).
  const DocumentMarks marks = document_marks(&*t);
  EXPECT_EQ(marks.before, 1);
  EXPECT_EQ(marks.between, -1);
  const std::vector<std::string> docs = {book.substr(0, 300000), "  " + book.substr(300000, 400000)};
  std::vector<std::int32_t> serial;
  for (const std::string& d : docs) {
    serial.push_back(1);
    const std::vector<int> doc_ids = t->encode(d);
    serial.insert(serial.end(), doc_ids.begin(), doc_ids.end());
  }
  std::vector<std::int32_t> shared;
  for (int part = 0; part < 3; ++part) {
    const std::vector<std::int32_t> share = encode_share(docs, *t, marks, part, 3, 4096);
    shared.insert(shared.end(), share.begin(), share.end());
  }
  EXPECT_TRUE(shared == serial) << shared.size() << " tokens shared, one pass " << serial.size();
  // What memwall does not implement, or a damaged file: one line each.
  const nlohmann::json tj = nlohmann::json::parse(slurp(dir + "/tokenizer.json"));
  const auto refused = [&](const std::function<void(nlohmann::json&)>& damage, const std::string& needle) {
    nlohmann::json bad = tj;
    damage(bad);
    auto r = BpeTokenizer::parse_tokenizer_json(bad.dump(), "hf");
    ASSERT_FALSE(r.is_ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  refused([](nlohmann::json& j) { j["model"]["byte_fallback"] = false; },
          "hf/tokenizer.json: model.byte_fallback is not true");
  refused(
      [](nlohmann::json& j) {
        j["model"]["vocab"]["<0x7f>"] = j["model"]["vocab"]["<0x7F>"];
        j["model"]["vocab"].erase("<0x7F>");
      },
      "hf/tokenizer.json model.vocab: no byte token <0x7F>");
  refused(
      [](nlohmann::json& j) {
        j["model"]["merges"].push_back(nlohmann::json::array({"q", "\xE2\x96\x81q"}));
      },
      "hf/tokenizer.json: model.merges entry [\"q\",\"\xE2\x96\x81q\"]: the vocabulary lacks \"q\"");
  refused([](nlohmann::json& j) { j["model"]["ignore_merges"] = true; }, "model.ignore_merges true");
  refused(
      [](nlohmann::json& j) {
        j["post_processor"]["special_tokens"]["<s>"]["ids"] = {1, 2};
      },
      "post_processor's special token \"<s>\" has ids [1,2]; allowed: one id");
  // A token with U+2581 after another character ("s▁", merged first): the text is then one piece, so that
  // merge applies across what would otherwise be a word's end.
  nlohmann::json mid = tj;
  const int s_meta = static_cast<int>(mid["model"]["vocab"].size());
  mid["model"]["vocab"]["s" + meta] = s_meta;
  mid["model"]["merges"].insert(mid["model"]["merges"].begin(), nlohmann::json::array({"s", meta}));
  auto across = BpeTokenizer::parse_tokenizer_json(mid.dump(), "mid");
  ASSERT_TRUE(across.is_ok()) << across.status().to_string();
  const std::vector<int> is_good = across->encode("it is good");
  EXPECT_NE(std::find(is_good.begin(), is_good.end(), s_meta), is_good.end());
  EXPECT_EQ(across->decode(is_good.data(), is_good.size()), "it is good");
  // Values of the wrong type anywhere it looks: read or refused, never thrown on.
  const nlohmann::json odd[] = {nullptr, 5, -1, "x", nlohmann::json::array(), nlohmann::json::object(), true};
  for (const nlohmann::json& v : odd) {
    for (const char* path :
         {"/normalizer", "/normalizer/normalizers", "/normalizer/normalizers/0",
          "/normalizer/normalizers/1/pattern", "/pre_tokenizer", "/pre_tokenizer/prepend_scheme",
          "/pre_tokenizer/split", "/post_processor", "/post_processor/single", "/post_processor/single/0",
          "/post_processor/special_tokens/<s>/ids", "/model/byte_fallback", "/model/vocab/<0x41>",
          "/model/merges/3", "/added_tokens/1"}) {
      nlohmann::json bad = tj;
      const nlohmann::json::json_pointer where(path);
      if (!bad.contains(where.parent_pointer())) continue;
      bad[where] = v;
      EXPECT_NO_THROW((void)BpeTokenizer::parse_tokenizer_json(bad.dump(), "hf"))
          << path << " = " << v.dump();
    }
  }
  if (name == "mistral") {
    refused([](nlohmann::json& j) { j["pre_tokenizer"]["split"] = true; }, "split false");
    refused([](nlohmann::json& j) { j["pre_tokenizer"]["prepend_scheme"] = "sometimes"; },
            "prepend_scheme first, always or never");
  }
  std::filesystem::remove_all(dir);
}

// The SentencePiece library itself (Debian's python3-sentencepiece) trains a BPE model with Llama 2's
// settings; written as the tokenizer.json Hugging Face converts it to, memwall encodes a text of six scripts,
// digits, runs of spaces, newlines and characters the model lacks (byte fallback) to SentencePiece's ids.
TEST(Bpe, MatchesTheSentencePieceLibrary) {
  if (std::system("/usr/bin/python3 -c 'import sentencepiece' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 with the sentencepiece module (Debian's python3-sentencepiece) is not "
                    "installed";
  }
  const std::string corpus = reference_corpus();
  const std::string text = corpus.substr(0, corpus.find('\n', 2000) + 1) + reference_text("", "") +
                           "\n\n  x \xF0\x9F\x90\x8D 12345\n";
  const std::string dir = run_reference("spm_reference.py", "spm-ref", corpus, text, "600");
  ASSERT_FALSE(dir.empty());
  auto t = BpeTokenizer::load(dir);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->pre_tokenizer(), PreTokenizer::kSentencePiece);
  const auto want = nlohmann::json::parse(slurp(dir + "/ids.json")).get<std::vector<int>>();
  const std::vector<int> ids = t->encode(text);
  EXPECT_EQ(ids, want) << first_difference(ids, want);
  EXPECT_LT(ids.size(), text.size() / 2) << "the model's merges should apply";
  EXPECT_EQ(t->decode(ids.data(), ids.size()), text);
  std::filesystem::remove_all(dir);
}

TEST(Bpe, SentencePieceStyleMatchesPythonReferenceEncoder) {
  if (!have_python_regex()) {
    GTEST_SKIP() << "/usr/bin/python3 with the regex module (Debian's python3-regex) is not installed";
  }
  expect_sentencepiece_encoding("llama2");
  expect_sentencepiece_encoding("mistral");
  expect_sentencepiece_encoding("gemma");
}

}  // namespace
}  // namespace memwall::train
