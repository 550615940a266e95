// Integration tests of the memwall binary: outputs, --json schema, exit codes and one-line errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "chakra_writer.h"
#include "gpt2_bytes.h"
#include "safetensors_files.h"

namespace {

struct CmdResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// A shell command line's exit code and output.
CmdResult run_shell(const std::string& cmd) {
  CmdResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

CmdResult memwall(const std::string& args, bool merge_stderr = true) {
  return run_shell(std::string(MEMWALL_BINARY) + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null"));
}

// `name` under the tests' scratch directory (cli_test_files/ in the working directory, made when needed).
std::filesystem::path test_path(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::current_path() / "cli_test_files";
  std::filesystem::create_directories(dir);
  return dir / name;
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = test_path(name).string();
  std::ofstream(path) << text;
  return path;
}

nlohmann::json parse_json(const std::string& text) {
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON: " << e.what() << "\n" << text.substr(0, 500);
    return {};
  }
}

size_t line_count(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(CliPredict, DefaultScenarioFitsAndExplainsEveryRow) {
  const CmdResult r = memwall("predict");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("FITS"), std::string::npos);
  EXPECT_NE(r.output.find("limiting tier NVMe"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Eq.4"), std::string::npos);
  EXPECT_NE(r.output.find("fp32 momentum"), std::string::npos);
  EXPECT_NE(r.output.find("pinned swap buffers"), std::string::npos);
  EXPECT_NE(r.output.find("bandwidth-centric"), std::string::npos);
}

TEST(CliPredict, JsonIsOneDocumentWithResolvedInputs) {
  const CmdResult r = memwall("predict --json", /*merge_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0);
  const nlohmann::json j = parse_json(r.output);
  EXPECT_EQ(j["command"], "predict");
  EXPECT_EQ(j["inputs"]["hardware"]["name"], "dgx2");
  EXPECT_EQ(j["inputs"]["model"]["name"], "paper-1t");
  EXPECT_EQ(j["inputs"]["run"]["memwall"]["data_parallel"], 16);  // resolved, not "auto"
  EXPECT_TRUE(j["memory"]["fits"].get<bool>());
  EXPECT_EQ(j["memory"]["limiting_tier"], "nvme");
  for (const char* tier : {"gpu", "cpu", "nvme"}) {
    const auto& t = j["memory"]["tiers"][tier];
    EXPECT_LE(t["used_bytes"].get<double>(), t["capacity_bytes"].get<double>()) << tier;
  }
  double gpu_sum = 0;
  for (const auto& item : j["memory"]["items"]) {
    EXPECT_FALSE(item["rule"].get<std::string>().empty());
    if (item["tier"] == "gpu") gpu_sum += item["bytes_per_rank"].get<double>();
  }
  EXPECT_NEAR(gpu_sum, j["memory"]["tiers"]["gpu"]["used_bytes"].get<double>(), 1.0);
  ASSERT_EQ(j["bandwidth"]["data_types"].size(), 3u);
  EXPECT_EQ(j["bandwidth"]["data_types"][0]["data_type"], "params_grads");
}

// memwall.mtp counts DeepSeek-V3's multi-token-prediction module (a block more, a second head's logits); on
// a model without one it warns and adds nothing.
TEST(CliPredict, MtpCountsTheModelsMultiTokenPredictionModules) {
  const CmdResult plain = memwall("predict --json --model deepseek-v3", false);
  const CmdResult mtp = memwall("predict --json --model deepseek-v3 --set '{\"memwall.mtp\": true}'", false);
  ASSERT_EQ(plain.exit_code, 0);
  ASSERT_EQ(mtp.exit_code, 0);
  const nlohmann::json a = parse_json(plain.output), b = parse_json(mtp.output);
  EXPECT_EQ(a["inputs"]["model"]["params"], 671026404352.0);
  EXPECT_EQ(b["inputs"]["model"]["params"], 682636472320.0);
  EXPECT_EQ(b["inputs"]["model"]["mtp_modules"], 1);
  EXPECT_EQ(b["inputs"]["run"]["memwall"]["mtp"], true);
  const auto logits = [](const nlohmann::json& j) {
    for (const auto& item : j["memory"]["items"])
      if (item["category"] == "logits") return item["bytes_per_rank"].get<double>();
    return 0.0;
  };
  EXPECT_NEAR(logits(b) / logits(a), (2 * 2 + 4.0) / (2 + 4), 1e-9);  // fp16 logits twice, one fp32 gradient
  const CmdResult none = memwall("predict --model gpt2 --set '{\"memwall.mtp\": true}'");
  EXPECT_EQ(none.exit_code, 0);
  EXPECT_NE(none.output.find("memwall.mtp: model gpt2 has no multi-token-prediction modules"),
            std::string::npos)
      << none.output;
}

TEST(CliPredict, EveryShippedScenarioRuns) {
  for (const char* hw : {"dgx2", "dgx2-4n", "dgx2-16n", "dgx2-32n", "dgx2-64n", "dgx2-96n", "dgx1-v100",
                         "dgx-a100-80gb", "dgx-h100", "dgx-h200"}) {
    const CmdResult r =
        memwall(std::string("predict --hardware ") + hw + " --model paper-100b --json", false);
    EXPECT_EQ(r.exit_code, 0) << hw;
    EXPECT_EQ(parse_json(r.output)["inputs"]["hardware"]["name"], hw);
  }
  for (const char* m :
       {"gpt2",        "gpt2-medium",  "gpt2-large",   "gpt2-xl",       "gpt3-175b",        "llama-2-7b",
        "llama-2-70b", "llama-3.1-8b", "llama-3.2-1b", "qwen2-0.5b",    "mistral-7b",       "qwen3-0.6b",
        "qwen3-8b",    "gemma-2b",     "gemma-7b",     "phi-3-mini",    "fig2a-0.1t",       "fig2a-100t",
        "paper-10b",   "paper-20t",    "mixtral-8x7b", "qwen3-30b-a3b", "qwen1.5-moe-a2.7b"}) {
    const CmdResult r = memwall(std::string("predict --model ") + m);
    EXPECT_EQ(r.exit_code, 0) << m << "\n" << r.output;
    EXPECT_EQ(r.output.find("warning"), std::string::npos) << m << "\n" << r.output;  // every key known
  }
  // Llama 3.1's 131072 positions are its rope_scaling's stretch of the 8192 it was pre-trained at: runs
  // default to 8192 tokens and say so (memwall.sequence_length sets any other).
  const CmdResult l31 = memwall("predict --model llama-3.1-8b --json", false);
  EXPECT_EQ(parse_json(l31.output)["inputs"]["run"]["memwall"]["sequence_length"], 8192);
  EXPECT_NE(memwall("predict --model llama-3.1-8b")
                .output.find("seq 8192 (its pre-training context; rope_scaling llama3 stretches it to 131072 "
                             "positions)"),
            std::string::npos);
  // A mixture of experts says its experts and the parameters a token uses; the JSON has both counts.
  const CmdResult moe =
      memwall("predict --model mixtral-8x7b --set '{\"memwall\": {\"sequence_length\": 4096}}'");
  EXPECT_NE(moe.output.find("8 experts of ffn 14336 (2 per token)"), std::string::npos) << moe.output;
  EXPECT_NE(moe.output.find("12.88B active per token"), std::string::npos) << moe.output;
  const nlohmann::json moe_json = parse_json(memwall("predict --model qwen3-30b-a3b --json", false).output);
  EXPECT_EQ(moe_json["inputs"]["model"]["active_params"], 3353032704.0);
  EXPECT_EQ(moe_json["inputs"]["model"]["experts"], 128);
  // Mistral 7B's window, shorter than its 32768 positions, is said.
  EXPECT_NE(memwall("predict --model mistral-7b").output.find("seq 32768, attention window 4096\n"),
            std::string::npos);
  for (const char* run : {"data-parallel", "zero-2", "zero-offload", "3d-parallel", "zero-3",
                          "zero-infinity-cpu", "zero-infinity-nvme"}) {
    const CmdResult r = memwall(std::string("predict --model gpt3-175b --run ") + run);
    EXPECT_EQ(r.exit_code, 0) << run << "\n" << r.output;
  }
}

TEST(CliPredict, ModelThatDoesNotFitIsAResultNotAnError) {
  const CmdResult r = memwall("predict --run data-parallel");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("DOES NOT FIT"), std::string::npos);
  EXPECT_NE(r.output.find("short by"), std::string::npos);
}

TEST(CliPredict, SuggestsTheTilingFactorThatMakesItFit) {
  // The paper's 20T model on 32 DGX-2 nodes needs ~121 GiB of gathered fc1 weights + grads untiled.
  const CmdResult r = memwall("predict --hardware dgx2-32n --model paper-20t --json", false);
  ASSERT_EQ(r.exit_code, 0);
  const nlohmann::json j = parse_json(r.output);
  EXPECT_FALSE(j["memory"]["fits"].get<bool>());
  EXPECT_EQ(j["memory"]["limiting_tier"], "gpu");
  ASSERT_EQ(j["memory"]["suggestions"].size(), 1u);
  const std::string s = j["memory"]["suggestions"][0];
  const int t = std::stoi(s.substr(s.rfind(':') + 2));
  // The suggested factor really fits, and half of it does not.
  auto fits_with = [](int tiling) {
    const std::string run = write_file("tiled" + std::to_string(tiling) + ".json",
                                       R"({"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": true},
        "zero_optimization": {"stage": 3, "reduce_bucket_size": 90000000, "stage3_prefetch_bucket_size": 5e7,
        "offload_param": {"device": "nvme", "max_in_cpu": 1}, "offload_optimizer": {"device": "nvme"},
        "sub_group_size": 1e8}, "activation_checkpointing": {"cpu_checkpointing": true},
        "memwall": {"tiling_factor": )" + std::to_string(tiling) +
                                           "}}");
    const CmdResult tr = memwall("predict --hardware dgx2-32n --model paper-20t --json --run " + run, false);
    return parse_json(tr.output)["memory"]["fits"].get<bool>();
  };
  EXPECT_TRUE(fits_with(t));
  EXPECT_FALSE(fits_with(t / 2));
}

TEST(CliPredict, MaxModelCoversEveryStrategy) {
  const CmdResult r = memwall("predict --max-model --json", false);
  ASSERT_EQ(r.exit_code, 0);
  const nlohmann::json j = parse_json(r.output);
  const auto& results = j["max_model"]["results"];
  ASSERT_EQ(results.size(), 7u);
  double previous = 0;
  for (const auto& row : results) {
    ASSERT_TRUE(row["found"].get<bool>()) << row.dump();
    EXPECT_FALSE(row["next_failure"].get<std::string>().empty());
    if (row["strategy"] == "zero-3" || row["strategy"] == "zero-infinity-cpu" ||
        row["strategy"] == "zero-infinity-nvme") {
      EXPECT_GT(row["params"].get<double>(), previous) << row["strategy"];
      previous = row["params"].get<double>();
    }
  }
  EXPECT_EQ(results[6]["limiting_tier"], "nvme");
  const CmdResult human = memwall("predict --max-model --strategy zero-2 --strategy zero-3 --family gpt3");
  EXPECT_EQ(human.exit_code, 0);
  EXPECT_NE(human.output.find("ZeRO-3"), std::string::npos);
  EXPECT_EQ(human.output.find("ZeRO-Offload"), std::string::npos);
}

TEST(CliPredict, MaxHiddenPerTilingFactor) {
  const CmdResult r = memwall("predict --max-hidden --tiling 1,4,16 --chunk 2GiB --json", false);
  ASSERT_EQ(r.exit_code, 0);
  const nlohmann::json j = parse_json(r.output);
  ASSERT_EQ(j["max_hidden"]["results"].size(), 3u);
  EXPECT_LT(j["max_hidden"]["results"][0]["max_hidden"].get<int>(),
            j["max_hidden"]["results"][2]["max_hidden"].get<int>());
}

// ---- bad input: exit code 2 and one line naming the file/key/value ----

void expect_bad_input(const std::string& args, const std::string& needle) {
  const CmdResult r = memwall(args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << args << "\n" << r.output;
  EXPECT_EQ(r.output.rfind("memwall: error: ", 0), 0u) << r.output;
  EXPECT_EQ(line_count(r.output), 1u) << r.output;
}

TEST(CliErrors, MissingFilesAndUnknownScenarios) {
  expect_bad_input("predict --model /nonexistent/config.json", "/nonexistent/config.json: no such file");
  expect_bad_input("predict --hardware dgx3", "available: dgx-a100-80gb");
  expect_bad_input("predict --run zero-9", "zero-infinity-nvme");
  expect_bad_input("predict --model gtp2", "models 'gtp2' is neither a file nor a built-in scenario in");
  expect_bad_input("predict --model gtp2", "(did you mean 'gpt2'?); available: ");
}

TEST(CliPredict, ShowsDeepSpeedsEstimatorBesideItsOwnCount) {
  // GPT-2 XL (1.56B) on a DGX-2, ZeRO-Infinity on CPU: the stage-3 estimator with both offloads.
  CmdResult r = memwall("predict --model gpt2-xl --run zero-infinity-cpu --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json ds = parse_json(r.output)["memory"]["deepspeed_estimate"];
  ASSERT_TRUE(ds["available"].get<bool>()) << ds.dump();
  EXPECT_EQ(ds["function"], "estimate_zero3_model_states_mem_needs");
  EXPECT_TRUE(ds["cpu_offload"].get<bool>() && ds["cpu_offload_params"].get<bool>());
  EXPECT_EQ(ds["num_gpus_per_node"], 16);
  const double params = ds["total_params"].get<double>();
  EXPECT_NEAR(params, 1.5577e9, 0.001e9);
  EXPECT_DOUBLE_EQ(ds["largest_layer_params"].get<double>(), 50257.0 * 1600);  // the token embedding
  EXPECT_DOUBLE_EQ(ds["gpu_bytes"].get<double>(), 4 * 50257.0 * 1600);
  EXPECT_DOUBLE_EQ(ds["cpu_bytes_per_node"].get<double>(), 18 * params * 1.5);
  // memwall counts more on the GPU (activations, buckets, the runtime) and says what.
  EXPECT_GT(ds["memwall_gpu_bytes"].get<double>(), ds["gpu_bytes"].get<double>());
  std::set<std::string> left;
  for (const auto& l : ds["left_out"]) left.insert(l["what"].get<std::string>());
  EXPECT_TRUE(left.count("activations") && left.count("buckets and prefetch") &&
              left.count("runtime reserve"))
      << ds.dump();
  r = memwall("predict --model gpt2-xl --run zero-infinity-cpu");
  EXPECT_NE(r.output.find("DeepSpeed's estimator (estimate_zero3_model_states_mem_needs: cpu_offload=True, "
                          "cpu_offload_params=True, zero_init=True; model states only)"),
            std::string::npos)
      << r.output;
  // ZeRO-Offload: the stage-2 estimator; plain data parallelism: none, and why.
  r = memwall("predict --model gpt2-xl --run zero-offload --json", false);
  ds = parse_json(r.output)["memory"]["deepspeed_estimate"];
  EXPECT_EQ(ds["function"], "estimate_zero2_model_states_mem_needs");
  EXPECT_DOUBLE_EQ(ds["gpu_bytes"].get<double>(), 2 * ds["total_params"].get<double>());
  r = memwall("predict --model gpt2-xl --run data-parallel --json", false);
  ds = parse_json(r.output)["memory"]["deepspeed_estimate"];
  EXPECT_FALSE(ds["available"].get<bool>());
  EXPECT_NE(ds["why"].get<std::string>().find("stage 0"), std::string::npos);
}

// Expert parallelism (memwall.expert_parallel): a rank holds 1/ep of the routed experts whole in ZeRO-1/2;
// a dense model, or a degree that divides neither the experts nor the data-parallel ranks, is refused.
TEST(CliPredict, ExpertParallelismHoldsAShareOfTheExperts) {
  const std::string args = "predict --hardware dgx-h200 --model mixtral-8x7b --run zero-2 --json --set ";
  const auto params16 = [&](int ep) {
    const CmdResult r = memwall(args + "'{\"memwall.expert_parallel\": " + std::to_string(ep) + "}'", false);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json j = parse_json(r.output);
    for (const auto& it : j["memory"]["items"]) {
      if (it["tier"] == "gpu" && it["category"] == "params16") return it["bytes_per_rank"].get<double>();
    }
    ADD_FAILURE() << "no params16 item";
    return 0.0;
  };
  const double routed = 32.0 * 8 * 3 * 4096 * 14336;  // Mixtral's experts: 32 layers x 8 x (gate, up, down)
  EXPECT_NEAR(params16(1) - params16(4), 2 * 0.75 * routed, 1e3);
  expect_bad_input("predict --model gpt2 --set '{\"memwall.expert_parallel\": 2}'", "which has no experts");
  expect_bad_input(
      "predict --hardware dgx-h200 --model mixtral-8x7b --set '{\"memwall.expert_parallel\": 3}'",
      "allowed: a divisor of the experts per layer (8) and of data_parallel (8)");
  expect_bad_input("predict --hardware dgx-h200 --model mixtral-8x7b --set '{\"memwall.expert_load\": 1.5}'",
                   "'memwall.expert_load': 1.5 has no effect without expert parallelism");
  expect_bad_input(
      "predict --hardware dgx-h200 --model mixtral-8x7b --set '{\"memwall.expert_parallel\": 2, "
      "\"memwall.expert_load\": 3}'",
      "allowed: 1 to 2");
}

TEST(CliErrors, TyposGetTheNearestName) {
  // A mistyped command, option, strategy, choice or key: the error (or warning) names the likely one.
  expect_bad_input("simulat", "unknown command 'simulat' (did you mean 'simulate'?); allowed: predict");
  expect_bad_input("simulate --hardwre dgx2",
                   "unknown option '--hardwre' (did you mean '--hardware'?) (see memwall simulate --help)");
  expect_bad_input("predict --modle=gpt2", "unknown option '--modle' (did you mean '--model'?)");
  expect_bad_input("predict --nodes 2 --frobnicate -3",
                   "unknown option '--frobnicate' (see memwall predict --help)");
  expect_bad_input("predict --max-model --strategy zero-infinty-cpu", "(did you mean 'zero-infinity-cpu'?)");
  expect_bad_input("predict --set '{\"zero_optimization.offload_param.device\": \"nvm\"}'",
                   "\"nvm\" is not allowed (did you mean 'nvme'?); allowed: none, cpu, nvme");
  const CmdResult r = memwall("predict --model gpt2 --set '{\"zero_optimizaton\": {\"stage\": 2}}'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("unknown key 'zero_optimizaton' ignored (did you mean 'zero_optimization'?)"),
            std::string::npos)
      << r.output;
}

TEST(CliErrors, BadValuesInFiles) {
  expect_bad_input(
      "predict --run " + write_file("stage.json", R"({"zero_optimization": {"stage": "three"}})"),
      "key 'zero_optimization.stage'");
  expect_bad_input("predict --run " + write_file("neg.json", R"({"train_micro_batch_size_per_gpu": -4})"),
                   "train_micro_batch_size_per_gpu");
  expect_bad_input("predict --run " + write_file("broken.json", R"({"zero_optimization": )"),
                   "not valid JSON");
  // A number past a double's range is the JSON library's other parse error (it used to abort memwall).
  expect_bad_input("predict --model " + write_file("huge.json", R"({"n_layer": 1e400})"),
                   "huge.json: not valid JSON: number overflow parsing '1e400'");
  expect_bad_input("simulate --fast --set '{\"memwall.sequence_length\": 1e400}'",
                   "--set '{\"memwall.sequence_length\": 1e400}': not valid JSON: number overflow");
  expect_bad_input("predict --model-set '[2]'", "--model-set '[2]': top level is not a JSON object");
  expect_bad_input("predict --model " + write_file("heads.json", R"({"model_type": "gpt2", "n_layer": 2,
      "n_embd": 100, "n_head": 3, "vocab_size": 10, "n_positions": 64})"),
                   "heads.json");
  const std::string no_nvme = write_file("no_nvme.json", R"({"format": "memwall-hardware", "version": 1,
      "gpu": {"count": 8, "memory_bytes": 8e10, "peak_flops": 1e15, "achievable_flops": 5e14, "hbm_Bps": 3e12},
      "cpu": {"memory_bytes": 1e12, "memory_Bps": 3e11}, "pcie": {"gpu_link_Bps": 5e10}})");
  expect_bad_input("predict --hardware " + no_nvme, "has no NVMe");
  expect_bad_input("predict --model paper-1t --run 3d-parallel", "memwall.model_parallel");
}

TEST(CliErrors, BadFlags) {
  expect_bad_input("predict --nodes 0", "--nodes");
  expect_bad_input("predict --max-hidden --chunk lots", "--chunk");
  expect_bad_input("predict --max-model --family tall", "--family");
  expect_bad_input("predict --max-model --strategy zero-4", "zero-infinity-nvme");
  expect_bad_input("predict --target-efficiency 1.5", "--target-efficiency");
  expect_bad_input("frobnicate", "frobnicate");
}

TEST(CliErrors, TrainFlagsNameTheValue) {
  expect_bad_input("train --steps 0", "--steps 0: allowed: 1 or more");
  expect_bad_input("train --log-every -2", "--log-every -2");
  expect_bad_input("train --lr -0.5", "--lr -0.5: allowed: a finite number > 0");
  expect_bad_input("train --lr inf", "--lr inf: allowed: a finite number > 0");
  expect_bad_input("train --steps 1 --set '{\"memwall.sequence_length\": 300}'",
                   "memwall.sequence_length 300: more than model gpt-mini's 256 positions "
                   "(max_position_embeddings, n_positions); allowed: 1 to 256");
  // Twin-Flow needs the optimizer on the CPU: one line before any work.
  expect_bad_input(
      "train --steps 1 --set '{\"zero_optimization.offload_optimizer.ratio\": 0.5}'",
      "key 'zero_optimization.offload_optimizer.ratio': 0.5 (a share of the sub-groups stepped on "
      "the GPU) needs device \"cpu\"");
}

TEST(CliErrors, UnwritableOutputsFailBeforeTheWork) {
  // A regular file where a directory must go: nothing is trained or measured, one line names the option.
  const std::string file = write_file("not-a-dir", "x");
  for (const std::string& args :
       {"train --steps 1 --checkpoint-dir " + file + "/ckpt", "train --steps 1 --trace " + file + "/t.json",
        "calibrate --out " + file + "/hw.json", "tune --model gpt2 --write-run " + file + "/best.json",
        "tokenize --tokenizer " + std::string(MEMWALL_TEST_SOURCE_DIR) + "/data/tiny-bpe --text a --out " +
            file + "/ids.bin"}) {
    const CmdResult r = memwall(args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
    EXPECT_EQ(r.output.rfind("memwall: error: --", 0), 0u) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(file), std::string::npos) << r.output;
    EXPECT_EQ(line_count(r.output), 1u) << args << "\n" << r.output;
  }
}

TEST(CliErrors, UnknownKeysWarnAndContinue) {
  const std::string path =
      write_file("extra.json", R"({"zero_optimization": {"stage": 3, "stage3_prefetch": 1},
      "train_micro_batch_size_per_gpu": 1})");
  const CmdResult r = memwall("predict --run " + path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: " + path + ": unknown key 'zero_optimization.stage3_prefetch' ignored"),
            std::string::npos)
      << r.output;
}

TEST(CliPlan, SummarisesTheScheduleAndComparesWithPredict) {
  const CmdResult r = memwall("plan --model paper-100b");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("schedule peak"), std::string::npos);
  EXPECT_NE(r.output.find("collective"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("reference executor"), std::string::npos);
  const CmdResult j = memwall("plan --model paper-100b --json", false);
  ASSERT_EQ(j.exit_code, 0);
  const nlohmann::json d = parse_json(j.output);
  EXPECT_GT(d["schedule"]["tasks"].get<int>(), 1000);
  for (const char* tier : {"gpu", "cpu", "nvme"}) {
    EXPECT_LE(d["schedule"]["peak_bytes"][tier].get<double>(),
              1.02 * d["schedule"]["predict_bytes"][tier].get<double>())
        << tier;
  }
  EXPECT_GT(d["reference"]["iteration_s"].get<double>(), 0);
  EXPECT_GT(d["schedule"]["bytes_per_link"]["nvme_read"].get<double>(), 0);
  // Peaks per phase: the iteration's peak is the largest of them; backward holds more of the GPU than the
  // persistent setup (gathered parameters, gradients, checkpoints).
  const auto& phases = d["schedule"]["peak_bytes_by_phase"];
  ASSERT_EQ(phases.size(), 5u) << phases;
  for (const char* tier : {"gpu", "cpu", "nvme"}) {
    double most = 0;
    for (const auto& [phase, row] : phases.items()) most = std::max(most, row[tier].get<double>());
    EXPECT_NEAR(most, d["schedule"]["peak_bytes"][tier].get<double>(), 1.0) << tier;
  }
  EXPECT_GT(phases["backward"]["gpu"].get<double>(), phases["setup"]["gpu"].get<double>());
  EXPECT_NE(r.output.find("peak while the phase runs"), std::string::npos) << r.output;
}

TEST(CliPlan, WritesAChromeTraceThatReadsBack) {
  const std::string path = test_path("plan.json").string();
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  ASSERT_EQ(memwall("plan --model gpt2 --trace " + path).exit_code, 0);
  std::ifstream in(path);
  const nlohmann::json t = nlohmann::json::parse(in);
  EXPECT_EQ(t["otherData"]["format"], "memwall-trace");
  EXPECT_EQ(t["otherData"]["hardware"]["name"], "dgx2");
  int spans = 0, counters = 0, names = 0;
  for (const auto& e : t["traceEvents"]) {
    const std::string ph = e["ph"];
    spans += ph == "X";
    counters += ph == "C";
    names += ph == "M";
    if (ph == "X") {
      EXPECT_GE(e["dur"].get<double>(), 0);
    }
  }
  EXPECT_GT(spans, 500);
  EXPECT_GT(counters, 500);
  EXPECT_EQ(names, 8);  // one process and seven resource tracks
  // gzip when the name ends in .gz
  const std::string gz = path + ".gz";
  ASSERT_EQ(memwall("plan --model gpt2 --trace " + gz).exit_code, 0);
  std::ifstream zin(gz, std::ios::binary);
  unsigned char magic[2] = {0, 0};
  zin.read(reinterpret_cast<char*>(magic), 2);
  EXPECT_EQ(magic[0], 0x1f);
  EXPECT_EQ(magic[1], 0x8b);
}

TEST(CliPlan, APlanThatCannotFitIsRejectedNamingTheTier) {
  expect_bad_input("plan --model gpt3-175b --run zero-3", "GPU: the schedule needs");
  const CmdResult io = memwall("plan --trace /nonexistent-dir/x.json --model gpt2");
  EXPECT_EQ(io.exit_code, 1);  // an I/O failure, not bad input
  EXPECT_NE(io.output.find("memwall: error: /nonexistent-dir/x.json: cannot open"), std::string::npos)
      << io.output;
}

TEST(CliSimulate, ReportsThroughputBreakdownAndLinks) {
  const CmdResult r = memwall("simulate --model gpt2-xl --run zero-infinity-nvme --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json d = parse_json(r.output);
  EXPECT_EQ(d["simulation"]["executor"], "simgrid");
  EXPECT_EQ(d["simulation"]["simulated_ranks"], 16);
  EXPECT_GT(d["iteration_s"].get<double>(), 0);
  EXPECT_GT(d["tflops_per_gpu"].get<double>(), 0);
  EXPECT_LE(d["tflops_per_gpu"].get<double>(), 70.0);  // never above the achievable rate
  EXPECT_NEAR(d["pflops_total"].get<double>(), d["tflops_per_gpu"].get<double>() * 16 / 1e3, 1e-9);
  double parts = 0;
  for (auto it = d["breakdown_s"].begin(); it != d["breakdown_s"].end(); ++it)
    parts += it.value().get<double>();
  EXPECT_NEAR(parts, d["iteration_s"].get<double>(), 0.02 * d["iteration_s"].get<double>());
  EXPECT_GT(d["links"]["nvme_read"]["bytes_per_gpu"].get<double>(), 0);
  // --fast uses the contention-free reference executor: never slower than SimGrid on the same schedule.
  const CmdResult f = memwall("simulate --model gpt2-xl --run zero-infinity-nvme --json --fast", false);
  ASSERT_EQ(f.exit_code, 0);
  const nlohmann::json fd = parse_json(f.output);
  EXPECT_EQ(fd["simulation"]["executor"], "reference");
  const CmdResult human = memwall("simulate --model gpt2 --run zero-infinity-cpu");
  EXPECT_EQ(human.exit_code, 0);
  EXPECT_NE(human.output.find("exposed_communication"), std::string::npos) << human.output;
  EXPECT_NE(human.output.find("activities"), std::string::npos);
}

// A SimGrid run that runs out of memory (here under a 2 GB address-space limit, which the forked simulation
// of DeepSeek-V2-Lite's 1.4 million activities passes) is one line naming the likely cause and the way out,
// and a non-zero exit.
TEST(CliSimulate, RunningOutOfMemoryNamesTheCauseAndTheWayOut) {
  const CmdResult r =
      run_shell("ulimit -v 2000000; " + std::string(MEMWALL_BINARY) +
                " simulate --hardware dgx2 --model deepseek-v2-lite --run zero-infinity-nvme 2>&1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("memwall: error: simulation process ended without a result: ended by signal"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("most likely out of memory"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--fast runs the closed form"), std::string::npos) << r.output;
}

TEST(CliSimulate, GradientAccumulationRunsMicroStepsThenOneOptimizerStep) {
  // The CPU optimizer of ZeRO-Infinity is a large share of one micro-batch's iteration; with 8 micro-batches
  // per optimizer step it is paid once for 8 micro-batches' FLOPs.
  const std::string base = "simulate --model gpt2-xl --run zero-infinity-cpu --json";
  for (const char* executor : {" --fast", ""}) {
    const CmdResult one = memwall(base + executor, false);
    const CmdResult eight = memwall(base + executor + " --set '{\"gradient_accumulation_steps\": 8}'", false);
    ASSERT_EQ(one.exit_code, 0) << one.output;
    ASSERT_EQ(eight.exit_code, 0) << eight.output;
    const nlohmann::json a = parse_json(one.output), b = parse_json(eight.output);
    EXPECT_EQ(a["gradient_accumulation_steps"], 1);
    EXPECT_FALSE(a.contains("micro_step_s"));
    EXPECT_EQ(b["gradient_accumulation_steps"], 8);
    EXPECT_NEAR(b["flops_per_gpu_per_iteration"].get<double>(),
                8 * a["flops_per_gpu_per_iteration"].get<double>(),
                1e-6 * b["flops_per_gpu_per_iteration"].get<double>());
    const double micro = b["micro_step_s"].get<double>(), last = b["last_micro_step_s"].get<double>();
    EXPECT_NEAR(last, a["iteration_s"].get<double>(), 1e-3 * last) << executor;
    EXPECT_LT(micro, 0.8 * last) << executor;  // no optimizer step in the micro-steps
    EXPECT_NEAR(b["iteration_s"].get<double>(), 7 * micro + last, 1e-3 * last) << executor;
    EXPECT_GT(b["tflops_per_gpu"].get<double>(), 1.3 * a["tflops_per_gpu"].get<double>()) << executor;
    // The breakdown covers the whole iteration; the optimizer's time is one step's.
    double parts = 0;
    for (auto it = b["breakdown_s"].begin(); it != b["breakdown_s"].end(); ++it)
      parts += it.value().get<double>();
    EXPECT_NEAR(parts, b["iteration_s"].get<double>(), 0.02 * b["iteration_s"].get<double>()) << executor;
    EXPECT_NEAR(b["breakdown_s"]["optimizer_step"].get<double>(),
                a["breakdown_s"]["optimizer_step"].get<double>(),
                0.01 * a["breakdown_s"]["optimizer_step"].get<double>() + 1e-9)
        << executor;
    // The trace is the whole iteration: replayed, its measured iteration is the simulated one, and the
    // replay takes as long.
    const std::string trace =
        test_path(std::string("sim-gas") + (executor[0] != 0 ? "-fast" : "") + ".json").string();
    const CmdResult traced =
        memwall(base + executor + " --set '{\"gradient_accumulation_steps\": 3}' --trace " + trace, false);
    ASSERT_EQ(traced.exit_code, 0) << traced.output;
    const CmdResult replayed = memwall("replay " + trace + " --fast --json", false);
    ASSERT_EQ(replayed.exit_code, 0) << replayed.output;
    const double it = parse_json(traced.output)["iteration_s"].get<double>();
    const nlohmann::json r = parse_json(replayed.output)["replay"][0];
    EXPECT_NEAR(r["measured_iteration_s"].get<double>(), it, 1e-6 * it) << executor;
    EXPECT_NEAR(r["replayed_iteration_s"].get<double>(), it, 0.01 * it) << executor;
  }
  // memwall plan times the same accumulated iteration as simulate --fast.
  const std::string gas =
      " --model gpt2-xl --run zero-infinity-cpu --json --set '{\"gradient_accumulation_steps\": 3}'";
  const nlohmann::json plan = parse_json(memwall("plan" + gas, false).output);
  const nlohmann::json fast = parse_json(memwall("simulate --fast" + gas, false).output);
  EXPECT_EQ(plan["schedule"]["gradient_accumulation_steps"], 3);
  EXPECT_NEAR(plan["reference"]["iteration_s"].get<double>(), fast["iteration_s"].get<double>(),
              1e-9 * fast["iteration_s"].get<double>());
}

// "What if NVMe were 2x faster?": the run planned and simulated again on the changed hardware, beside it.
TEST(CliSimulate, WhatIfsSimulateTheChangedHardwareBesideIt) {
  for (const char* executor : {" --fast", ""}) {
    const CmdResult r = memwall(std::string("simulate --json --what-if nvme=2") + executor, false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json j = parse_json(r.output);
    const nlohmann::json& w = j["what_if"];
    EXPECT_EQ(w["changes"], nlohmann::json::array({"nvme=2"}));
    // The default run (1T, everything on NVMe) waits on the drives: twice their rate is much faster.
    EXPECT_GT(w["speedup"].get<double>(), 1.3) << executor;
    EXPECT_NEAR(w["speedup"].get<double>(), j["iteration_s"].get<double>() / w["iteration_s"].get<double>(),
                1e-9);
    EXPECT_LT(w["breakdown_s"]["optimizer_step"].get<double>(),
              j["breakdown_s"]["optimizer_step"].get<double>());
    EXPECT_NEAR(w["breakdown_s"]["compute"].get<double>(), j["breakdown_s"]["compute"].get<double>(),
                1e-9 * j["breakdown_s"]["compute"].get<double>());
  }
  // Nothing changed: the same time.
  const nlohmann::json same = parse_json(memwall("simulate --fast --json --what-if pcie=1", false).output);
  EXPECT_NEAR(same["what_if"]["speedup"].get<double>(), 1.0, 1e-9);
  const CmdResult text = memwall("simulate --fast --model gpt2 --run zero-3 --what-if compute=2");
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.output.find("what if compute=2:"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("of it memory-bound"), std::string::npos) << text.output;
  // The roofline: GPT-2 small's norms, GELU, attention scores and loss are bound by GPU memory. Twice its
  // bandwidth halves them (or less, where an operator turns FLOP-bound); twice the FLOP/s leaves them.
  for (const char* change : {"gpu_memory=2", "compute=2"}) {
    const nlohmann::json g = parse_json(
        memwall(std::string("simulate --fast --model gpt2 --run zero-3 --json --what-if ") + change, false)
            .output);
    const double mb = g["compute_memory_bound_s"].get<double>(),
                 compute = g["breakdown_s"]["compute"].get<double>();
    EXPECT_GT(mb, 0.1 * compute) << change;
    EXPECT_LT(mb, compute) << change;
    const double w_mb = g["what_if"]["compute_memory_bound_s"].get<double>();
    if (std::string(change) == "gpu_memory=2") {
      EXPECT_LE(w_mb, 0.5 * mb * (1 + 1e-9));
    } else {
      EXPECT_GE(w_mb, mb * (1 - 1e-9));
    }
    EXPECT_LT(g["what_if"]["breakdown_s"]["compute"].get<double>(), compute) << change;
    // By operator kind, adding up to the compute lane's time (the closed form has no contention): GEMMs
    // first, then attention, whose T x T scores and probabilities outweigh the norms.
    double by_op = 0;
    for (auto kv = g["compute_by_op_s"].begin(); kv != g["compute_by_op_s"].end(); ++kv)
      by_op += kv.value().get<double>();
    EXPECT_NEAR(by_op, compute, 1e-6 * compute) << change;
    EXPECT_GT(g["compute_by_op_s"]["linear"].get<double>(), g["compute_by_op_s"]["attention"].get<double>());
    EXPECT_GT(g["compute_by_op_s"]["attention"].get<double>(),
              g["compute_by_op_s"]["layernorm"].get<double>());
  }
  expect_bad_input("simulate --fast --what-if disk=2", "allowed: pcie");
  expect_bad_input("simulate --fast --what-if gpu=no-such-gpu", "no-such-gpu");
  // Infinite or vanishing factors (compute=inf aborted SimGrid) are refused with the range.
  for (const char* factor : {"compute=inf", "nvme=0", "pcie=-2", "network=1e-9", "cpu_memory=nan"}) {
    expect_bad_input(std::string("simulate --what-if ") + factor,
                     std::string(factor) + ": expected a positive number from 1e-6 to 1e6");
  }
}

// memwall.attention "flash": predict's activation working memory loses the T x T probabilities (Llama-2-7B at
// 4096 tokens: 2.5 GiB -> 0.5 GiB per GPU), the largest model grows, and the simulated attention moves no
// scores through GPU memory, so GPT-2's attention time falls and its iteration is faster.
TEST(CliPredict, FlashAttentionShrinksActivationsAndTheAttentionsTime) {
  auto working = [](const nlohmann::json& j) {
    for (const auto& item : j["memory"]["items"]) {
      if (item["category"] == "activation_working") return item["bytes_per_rank"].get<double>();
    }
    ADD_FAILURE() << "no activation working memory";
    return 0.0;
  };
  const std::string llama = "predict --model llama-2-7b --run zero-3 --json --set ";
  const nlohmann::json u = parse_json(memwall(llama + "'{\"memwall.sequence_length\": 4096}'", false).output);
  const nlohmann::json f = parse_json(
      memwall(llama + "'{\"memwall.sequence_length\": 4096, \"memwall.attention\": \"flash\"}'", false)
          .output);
  EXPECT_EQ(f["inputs"]["run"]["memwall"]["attention"], "flash");
  // Eq. 5 with ci = 1, bsz 2, 4096 tokens, hidden 4096, 32 heads, a gated MLP of 11008: 2 x (2 hd + 2 kv +
  // 2 ffn) + 2 heads seq bytes per token, and the same + 4 heads.
  const double tokens = 2 * 4096.0, block = 2 * (2 * 4096.0 + 2 * 4096.0 + 2 * 11008.0);
  EXPECT_DOUBLE_EQ(working(u), tokens * (block + 2 * 32 * 4096.0));
  EXPECT_DOUBLE_EQ(working(f), tokens * (block + 4 * 32.0));
  const CmdResult text =
      memwall("predict --model llama-2-7b --run zero-3 --set '{\"memwall.attention\": \"flash\"}'");
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.output.find(", flash attention"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("4 B x heads 32 (flash attention)"), std::string::npos) << text.output;

  const std::string sim = "simulate --fast --model gpt2 --run zero-3 --json";
  const nlohmann::json su = parse_json(memwall(sim, false).output);
  const nlohmann::json sf =
      parse_json(memwall(sim + " --set '{\"memwall.attention\": \"flash\"}'", false).output);
  EXPECT_LT(sf["compute_by_op_s"]["attention"].get<double>(),
            su["compute_by_op_s"]["attention"].get<double>());
  EXPECT_LT(sf["compute_memory_bound_s"].get<double>(), su["compute_memory_bound_s"].get<double>());
  EXPECT_LT(sf["iteration_s"].get<double>(), su["iteration_s"].get<double>());
  EXPECT_NEAR(sf["compute_by_op_s"]["linear"].get<double>(), su["compute_by_op_s"]["linear"].get<double>(),
              1e-9 * su["compute_by_op_s"]["linear"].get<double>());
  // plan's compute FLOPs are what the kernels execute: the causal flash kernel skips tiles, and says so.
  const std::string plan = "plan --model gpt2 --run zero-3";
  const double pu =
      parse_json(memwall(plan + " --json", false).output)["schedule"]["by_kind"]["compute"]["flops"]
          .get<double>();
  const double pf = parse_json(memwall(plan + " --json --set '{\"memwall.attention\": \"flash\"}'", false)
                                   .output)["schedule"]["by_kind"]["compute"]["flops"]
                        .get<double>();
  EXPECT_LT(pf, pu);
  EXPECT_NE(
      memwall(plan + " --set '{\"memwall.attention\": \"flash\"}'").output.find("(flash attention: FLOPs"),
      std::string::npos);
  expect_bad_input("predict --set '{\"memwall.attention\": \"fused\"}'", "allowed: unfused, flash");
  // The value came from --set, not the run file the error names: it says so.
  expect_bad_input("predict --set '{\"memwall.attention\": \"fused\"}'",
                   "(the file with --set '{\"memwall.attention\": \"fused\"}' applied)");
  // 8 sequences of 4096 tokens overflow a V100 by the probabilities (8 x 1.29 GiB of Eq. 5 against 0.29 GiB
  // fused): predict says fused attention fits, with the activations before and after.
  const nlohmann::json big = parse_json(
      memwall(
          llama +
              "'{\"memwall.sequence_length\": 4096, \"train_micro_batch_size_per_gpu\": 8}' --hardware dgx2",
          false)
          .output);
  EXPECT_FALSE(big["memory"]["fits"].get<bool>());
  ASSERT_EQ(big["memory"]["suggestions"].size(), 1u) << big["memory"]["suggestions"];
  EXPECT_NE(big["memory"]["suggestions"][0].get<std::string>().find(
                "\"attention\": \"flash\"} (activations 10.34 GiB -> 2.35 GiB per GPU)"),
            std::string::npos)
      << big["memory"]["suggestions"];
}

// --straggler: the node's ranks run together, each collective waiting for its group's ranks, first all alike
// and then with one rank's compute slower. GPT-2 small under ZeRO-3 on a DGX-2 is bound by compute: a rank
// 1.5x as slow makes the iteration nearly 1.5x as long, and every other rank waits at its collectives while
// the straggler itself waits least. Twice faster NVMe hardly matters to it.
TEST(CliSimulate, AStragglerHoldsEveryRankBackAtTheCollectives) {
  for (const char* executor : {" --fast", ""}) {
    const CmdResult r =
        memwall(std::string("simulate --model gpt2 --run zero-3 --json --straggler 5:1.5") + executor, false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json j = parse_json(r.output);
    const nlohmann::json& g = j["straggler"];
    EXPECT_EQ(g["rank"].get<int>(), 5);
    EXPECT_DOUBLE_EQ(g["factor"].get<double>(), 1.5);
    const double even = g["even_iteration_s"].get<double>(), slow = g["iteration_s"].get<double>();
    EXPECT_NEAR(g["slowdown"].get<double>(), slow / even, 1e-9);
    EXPECT_GT(slow, 1.3 * even) << executor;
    EXPECT_LT(slow, 1.5 * 1.02 * even) << executor;
    ASSERT_EQ(g["collective_wait_s"].size(), 16u);
    const double own = g["collective_wait_s"][5].get<double>();
    for (int rank = 0; rank < 16; ++rank) {
      if (rank == 5) continue;
      EXPECT_GT(g["collective_wait_s"][rank].get<double>(), own + 0.2 * (slow - even)) << rank << executor;
    }
    EXPECT_NEAR(g["rank_iteration_s"][5].get<double>(), slow, 1e-9 * slow);
  }
  const CmdResult text = memwall("simulate --fast --model gpt2 --run zero-3 --straggler 0:2");
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.output.find("straggler: rank 0 (on every node) computing 2x as long"), std::string::npos)
      << text.output;
  expect_bad_input("simulate --fast --model gpt2 --run zero-3 --straggler 16:2",
                   "rank 16 is not on the node");
  expect_bad_input("simulate --fast --model gpt2 --run zero-3 --straggler 3:0.9",
                   "factor 0.9 is out of range");
  expect_bad_input("simulate --fast --model gpt2 --run zero-3 --straggler 3", "RANK:FACTOR");
  expect_bad_input("simulate --fast --model gpt2 --run zero-3 --straggler 3:2 -k 2", "--iterations 1");
}

TEST(CliSimulate, InconsistentInputsAreRejectedBeforeSimulating) {
  const std::string no_nvme = write_file("sim_no_nvme.json", R"({"format": "memwall-hardware", "version": 1,
      "gpu": {"count": 8, "memory_bytes": 8e10, "peak_flops": 1e15, "achievable_flops": 5e14, "hbm_Bps": 3e12},
      "cpu": {"memory_bytes": 1e12, "memory_Bps": 3e11}, "pcie": {"gpu_link_Bps": 5e10}})");
  expect_bad_input("simulate --hardware " + no_nvme + " --model gpt2", "has no NVMe");
  expect_bad_input("simulate --model gpt2 --set '{\"memwall.data_parallel\": 64}'", "more than the 16 GPUs");
  expect_bad_input("simulate --model gpt2 --set '{\"memwall.model_parallel\": 5}'", "memwall.model_parallel");
  expect_bad_input("simulate --model gpt3-175b --run zero-3", "GPU: the schedule needs");
  expect_bad_input("simulate --model gpt2 --set 'not json'", "--set 'not json': not valid JSON");
}

TEST(CliSweep, EveryPaperSweepRunsWithTheReferenceExecutor) {
  for (const char* f : {"table1-1node", "table1-32node", "fig5b-weak-scaling-1t", "fig6c-gradient-offload",
                        "fig6d-prefetch", "fig6e-checkpoint-offload"}) {
    const std::string path = std::string(MEMWALL_SOURCE_SCENARIOS) + "/paper/" + f + ".json";
    const CmdResult r = memwall("sweep --fast --json " + path, false);
    ASSERT_EQ(r.exit_code, 0) << f << "\n" << r.output;
    const nlohmann::json d = parse_json(r.output);
    ASSERT_FALSE(d["results"].empty());
    for (const auto& row : d["results"]) EXPECT_FALSE(row.contains("error")) << f << ": " << row.dump();
  }
}

TEST(CliSweep, SingleNodeTableOneOnSimGridWithCsv) {
  const std::string csv = test_path("table1.csv").string();
  std::filesystem::create_directories(std::filesystem::path(csv).parent_path());
  const CmdResult r =
      memwall("sweep " + std::string(MEMWALL_SOURCE_SCENARIOS) + "/paper/table1-1node.json --csv " + csv);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(csv);
  std::string header, line;
  std::getline(in, header);
  EXPECT_EQ(header.rfind("experiment,hardware,model,params", 0), 0u);
  int rows = 0;
  double previous_params = 0;
  while (std::getline(in, line)) {
    ++rows;
    EXPECT_NE(line.find("simgrid"), std::string::npos) << line;
    const double params = std::stod(line.substr(line.find(',', line.find(',', line.find(',') + 1) + 1) + 1));
    if (rows <= 5) {
      EXPECT_GT(params, previous_params);  // the sweep grows the model, 10B to 1T
    } else {
      EXPECT_EQ(line.rfind(rows == 6 ? "0.5T" : "1T", 0), 0u) << line;  // again, pipelined
      EXPECT_NE(line.find("pipelined"), std::string::npos) << line;
    }
    previous_params = params;
  }
  EXPECT_EQ(rows, 7);
}

// 1T parameters on one DGX-2: the optimizer step streams 28 bytes per parameter through NVMe. Pipelined
// swapping (pipeline_read/write) overlaps a sub-group's reads and writes with the neighbours' steps. Both the
// closed-form executor (--fast) and SimGrid share the drives between reads and writes, so the gain is at most
// what the CPU step hid: under a fifth, never a slowdown beyond noise (when the closed form gave each
// direction a drive of its own it rated the overlap 1.46x). On SimGrid the ranks also share CPU memory and
// PCIe, their phases drift apart and one rank's step hides behind the others' drive traffic even without
// pipelining, so it gains no more there than in the closed form, whose ranks run in step (measured: SimGrid
// 1.00-1.02x, the closed form 1.14-1.2x).
TEST(CliTune, PipelinedSwappingGainsLittleOnDrivesSharedByReadsAndWrites) {
  auto pairs = [](const std::string& extra) {
    // (stderr kept apart: a search of 10 s or more writes progress lines there)
    const std::string progress = test_path("tune-progress.txt").string();
    const CmdResult r =
        run_shell(std::string(MEMWALL_BINARY) +
                  " tune --model paper-1t --max-micro-batch 8 --top 1000 --json" + extra + " 2>" + progress);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::map<std::string, double> plain, piped, ratio;
    const nlohmann::json j = parse_json(r.output);  // kept: the loop below reads into it
    // The last progress line counts every configuration the searches tried, as the summary does.
    std::ifstream in(progress);
    std::string line, last;
    while (std::getline(in, line)) last = line;
    if (!last.empty()) {
      EXPECT_NE(last.find(" searches done, " + j["tried"].dump() + " configurations tried, " +
                          j["fit"].dump() + " fit"),
                std::string::npos)
          << last;
    }
    for (const auto& row : j["results"]) {
      const std::string key = row["placement"].get<std::string>() + " " + row["micro_batch"].dump() + " " +
                              row["cpu_checkpointing"].dump() + " " + row["tiling_factor"].dump();
      (row["optimizer_pipeline"].get<bool>() ? piped : plain)[key] = row["iteration_s"].get<double>();
    }
    for (const auto& [key, seconds] : piped) {
      if (plain.count(key)) ratio[key] = seconds / plain[key];  // a third set of buffers may not fit
    }
    return ratio;
  };
  const auto closed_form = pairs(" --fast"), simgrid = pairs("");
  EXPECT_GE(simgrid.size(), 3u);
  for (const auto& [key, r] : simgrid) {
    ASSERT_TRUE(closed_form.count(key)) << key;
    for (double ratio : {r, closed_form.at(key)}) {
      EXPECT_GT(ratio, 0.8) << key;
      EXPECT_LT(ratio, 1.03) << key;
    }
    EXPECT_GE(r, closed_form.at(key) - 0.02) << key;
  }
}

// A step of 8 micro-batches: 4 simulated and the rest extrapolated where the steady ones repeat exactly
// (parameters and optimizer in GPU or CPU memory), all 8 where they do not (NVMe traffic carrying over from
// one micro-batch into the next). Either way the iteration time is the one of simulating all of them.
TEST(CliTune, AccumulatedStepsExtrapolateOnlyWhereTheMicroBatchesRepeat) {
  auto rows = [](const std::string& extra) {
    const CmdResult r =
        memwall("tune --model gpt2 --global-batch 128 --max-micro-batch 1 --top 1000 --json" + extra, false);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::map<std::string, nlohmann::json> by_key;
    const nlohmann::json j = parse_json(r.output);  // kept: the loop below reads into it
    for (const auto& row : j["results"]) {
      by_key[row["placement"].get<std::string>() + " " + row["cpu_checkpointing"].dump() + " " +
             row["optimizer_pipeline"].dump()] = row;
    }
    return by_key;
  };
  const auto quick = rows(""), all = rows(" --all-micro-batches");
  ASSERT_EQ(quick.size(), all.size());
  int extrapolated = 0;
  for (const auto& [key, row] : quick) {
    ASSERT_TRUE(all.count(key)) << key;
    EXPECT_EQ(row["gradient_accumulation_steps"], 8) << key;
    EXPECT_EQ(all.at(key)["simulated_micro_batches"], 8) << key;
    const int simulated = row["simulated_micro_batches"].get<int>();
    EXPECT_TRUE(simulated == 4 || simulated == 8) << key;
    extrapolated += simulated == 4 ? 1 : 0;
    if (row["placement"].get<std::string>().find("nvme") == std::string::npos) {
      EXPECT_EQ(simulated, 4) << key;
    }
    const double want = all.at(key)["iteration_s"].get<double>();
    EXPECT_NEAR(row["iteration_s"].get<double>(), want, 1e-6 * want) << key;
    EXPECT_NEAR(row["tflops_per_gpu"].get<double>(), all.at(key)["tflops_per_gpu"].get<double>(), 1e-4)
        << key;
    EXPECT_EQ(row["set"]["gradient_accumulation_steps"], 8) << key;  // what --write-run writes
  }
  EXPECT_GE(extrapolated, 8);
}

TEST(CliTune, DelayedParameterUpdateOnlyWhenAskedAndOnlyForZeroOffload) {
  const CmdResult r = memwall("tune --model gpt2 --dpu --max-micro-batch 2 --top 1000 --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = parse_json(r.output);
  // 28 searches as without --dpu, plus z1 and z2 gpu/cpu dpu x 2 checkpoint places; micro-batches 1 and 2.
  EXPECT_EQ(j["tried"], 64);
  int delayed = 0;
  for (const auto& row : j["results"]) {
    const bool dpu = row["delayed_parameter_update"].get<bool>();
    delayed += dpu;
    EXPECT_EQ(row["set"].contains("memwall.delayed_parameter_update"), dpu) << row["set"];
    if (dpu) {
      EXPECT_TRUE(row["placement"] == "z2 gpu/cpu dpu" || row["placement"] == "z1 gpu/cpu dpu") << row;
    }
  }
  EXPECT_EQ(delayed, 8);
  const CmdResult without = memwall("tune --model gpt2 --max-micro-batch 2 --top 1000 --json", false);
  const nlohmann::json plain = parse_json(without.output);
  for (const auto& row : plain["results"]) {
    EXPECT_FALSE(row["delayed_parameter_update"].get<bool>());
  }
}

// memwall tune: every placement, micro-batch and checkpoint placement that fits, ranked by tokens/s; the
// best written as a run file that simulates to the same time.
// A mixture of experts: --expert-parallel tries each degree on every placement; the rows say which, and the
// best's keys carry it. A dense model has nothing to split.
TEST(CliTune, TriesExpertParallelDegreesForAMixtureOfExperts) {
  const CmdResult r = memwall(
      "tune --hardware dgx-h200 --model qwen1.5-moe-a2.7b --model-set '{\"num_hidden_layers\": 2}' --fast "
      "--max-micro-batch 1 --expert-parallel 1,4 --top 100 --json",
      false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = parse_json(r.output);
  std::map<int, int> rows_of;
  for (const auto& row : j["results"]) {
    const int ep = row["expert_parallel"].get<int>();
    ++rows_of[ep];
    EXPECT_EQ(row["set"]["memwall.expert_parallel"], ep) << row["set"];
  }
  EXPECT_EQ(rows_of.size(), 2u);
  EXPECT_EQ(rows_of[1], rows_of[4]);  // the same placements fit either way here
  expect_bad_input("tune --model gpt2 --expert-parallel 2",
                   "--expert-parallel 2: allowed: 1 (model 'gpt2' has no experts)");
}

// --offload-ratio adds ZeRO-Offload++'s Twin-Flow to the ZeRO-3 placement with the optimizer on the CPU:
// its rows carry the ratio and a sub_group_size of at most a tenth of a rank's shard, and stepping half of
// the sub-groups on the GPU takes less time and more GPU memory than all of them on the CPU.
// predict --json says how Twin-Flow split a rank's optimizer sub-groups, and when the ratio moves none (one
// sub-group at the default sub_group_size) a note says how to change that.
TEST(CliPredict, TwinFlowSplitIsReported) {
  const std::string base =
      "predict --model gpt2-xl --run zero-infinity-cpu --json --set "
      "'{\"zero_optimization.offload_param.device\": "
      "\"none\", \"zero_optimization.offload_optimizer.ratio\": 0.5";
  const nlohmann::json split =
      parse_json(memwall(base + ", \"zero_optimization.sub_group_size\": 1e7}'", false).output);
  const auto& t = split["memory"]["twin_flow"];
  EXPECT_EQ(t["sub_groups"], 10);
  EXPECT_EQ(t["gpu_sub_groups"], 5);
  EXPECT_DOUBLE_EQ(t["gpu_elements_per_rank"].get<double>(), 5e7);
  bool gpu_momentum = false;
  for (const auto& it : split["memory"]["items"]) {
    gpu_momentum = gpu_momentum || (it["tier"] == "gpu" && it["category"] == "momentum32");
  }
  EXPECT_TRUE(gpu_momentum);
  const nlohmann::json none = parse_json(memwall(base + "}'", false).output);
  EXPECT_EQ(none["memory"]["twin_flow"]["gpu_sub_groups"], 0);
  bool noted = false;
  for (const auto& n : none["memory"]["notes"])
    noted = noted || n.get<std::string>().find("puts none") != std::string::npos;
  EXPECT_TRUE(noted) << none["memory"]["notes"];
}

TEST(CliTune, TriesTwinFlowRatiosWithTheOptimizerOnTheCpu) {
  const CmdResult r =
      memwall("tune --model gpt2-xl --fast --max-micro-batch 1 --offload-ratio 0.5 --top 100 --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = parse_json(r.output);
  const nlohmann::json* twin = nullptr;
  const nlohmann::json* cpu = nullptr;
  for (const auto& row : j["results"]) {
    if (row["cpu_checkpointing"].get<bool>()) continue;
    if (row["placement"] == "gpu/cpu r0.5") twin = &row;
    if (row["placement"] == "gpu/cpu") cpu = &row;
  }
  ASSERT_NE(twin, nullptr) << r.output;
  ASSERT_NE(cpu, nullptr) << r.output;
  const auto& set = (*twin)["set"];
  EXPECT_EQ(set["zero_optimization.offload_optimizer.ratio"], 0.5);
  EXPECT_LE(set["zero_optimization.sub_group_size"].get<double>(), std::ceil(1557611200.0 / 16 / 10));
  EXPECT_FALSE((*cpu)["set"].contains("zero_optimization.offload_optimizer.ratio"));
  EXPECT_LT((*twin)["iteration_s"].get<double>(), (*cpu)["iteration_s"].get<double>());
  EXPECT_GT((*twin)["peak_bytes"]["gpu"].get<double>(), (*cpu)["peak_bytes"]["gpu"].get<double>());
  expect_bad_input("tune --model gpt2 --offload-ratio 1.5", "--offload-ratio");
}

TEST(CliTune, RanksConfigurationsAndWritesTheBest) {
  const std::string best = test_path("tuned.json").string();
  const CmdResult r = memwall(
      "tune --model gpt2 --max-micro-batch 4 --global-batch 64 --top 100 --json --write-run " + best, false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = parse_json(r.output);
  const auto& rows = j["results"];
  // (8 placements + 3 with the optimizer on NVMe, pipelined or not) x 2 checkpoint places x micro-batch 1, 2,
  // 4
  EXPECT_EQ(j["tried"], 84);
  ASSERT_EQ(rows.size(), j["fit"].get<std::size_t>());
  std::set<std::string> placements;
  int pipelined = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& set = rows[i]["set"];
    const bool nvme_opt = set["zero_optimization.offload_optimizer.device"] == "nvme";
    EXPECT_EQ(set.contains("zero_optimization.offload_optimizer.pipeline_read"), nvme_opt) << set;
    if (nvme_opt) {
      EXPECT_EQ(set["zero_optimization.offload_optimizer.pipeline_read"], rows[i]["optimizer_pipeline"]);
      pipelined += rows[i]["optimizer_pipeline"].get<bool>();
    }
    EXPECT_EQ(rows[i]["micro_batch"].get<int>() * rows[i]["gradient_accumulation_steps"].get<int>() * 16, 64);
    if (i > 0) {
      EXPECT_LE(rows[i]["tokens_per_s_per_gpu"].get<double>(),
                rows[i - 1]["tokens_per_s_per_gpu"].get<double>());
    }
    placements.insert(rows[i]["placement"].get<std::string>());
  }
  EXPECT_EQ(placements.size(), 11u);
  EXPECT_GT(pipelined, 0);
  EXPECT_TRUE(placements.count("z2 gpu/cpu"));  // ZeRO-Offload
  EXPECT_TRUE(placements.count("z0 gpu/gpu"));  // plain data parallelism
  EXPECT_TRUE(placements.count("z1 gpu/cpu"));
  const CmdResult again = memwall("simulate --json --model gpt2 --run " + best, false);  // SimGrid, as tune
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NEAR(parse_json(again.output)["iteration_s"].get<double>(), rows[0]["iteration_s"].get<double>(),
              1e-9 * rows[0]["iteration_s"].get<double>());
  expect_bad_input("tune --model gpt2 --global-batch 7",
                   "--global-batch 7: allowed: a multiple of the data-parallel degree (16)");
  // Tensor parallelism: a group of mp GPUs shares a micro-batch, data parallelism takes the other GPUs.
  const nlohmann::json mp = parse_json(
      memwall(
          "tune --model gpt2 --model-parallel 1,2 --max-micro-batch 2 --global-batch 32 --top 1000 --json",
          false)
          .output);
  int with_two = 0;
  for (const auto& row : mp["results"]) {
    const int m = row["model_parallel"].get<int>();
    with_two += m == 2;
    EXPECT_EQ(row["micro_batch"].get<int>() * row["gradient_accumulation_steps"].get<int>() * (16 / m), 32);
    EXPECT_NEAR(row["tokens_per_s_per_gpu"].get<double>(),
                row["micro_batch"].get<double>() * row["gradient_accumulation_steps"].get<double>() * 1024 /
                    (row["iteration_s"].get<double>() * m),
                1e-6 * row["tokens_per_s_per_gpu"].get<double>());
  }
  EXPECT_GT(with_two, 0);
  expect_bad_input("tune --model gpt2 --model-parallel 5", "--model-parallel 5: allowed: a divisor");
}

// A sweep over hardware changes: each experiment's what_if list changes its hardware, as simulate --what-if.
TEST(CliSweep, ExperimentsTakeHardwareWhatIfs) {
  const std::string file = write_file("sweep_what_if.json", R"({"name": "NVMe speed",
      "defaults": {"model": "paper-1t", "run": "zero-infinity-nvme", "fast": true},
      "experiments": [{"name": "as is"}, {"name": "x2", "what_if": ["nvme=2"]}]})");
  const CmdResult r = memwall("sweep " + file + " --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = parse_json(r.output)["results"];
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1]["what_if"], nlohmann::json::array({"nvme=2"}));
  const nlohmann::json beside =
      parse_json(memwall("simulate --fast --json --what-if nvme=2", false).output)["what_if"];
  EXPECT_NEAR(rows[1]["iteration_s"].get<double>(), beside["iteration_s"].get<double>(),
              1e-9 * beside["iteration_s"].get<double>());
  EXPECT_GT(rows[0]["iteration_s"].get<double>(), rows[1]["iteration_s"].get<double>());
  const CmdResult bad = memwall(
      "sweep " + write_file("sweep_bad_what_if.json", R"({"experiments": [{"what_if": ["disk=2"]}]})"));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("unknown key 'disk'"), std::string::npos) << bad.output;
}

TEST(CliSweep, BadSweepFilesAreNamed) {
  expect_bad_input("sweep " + write_file("sweep_empty.json", R"({"experiments": []})"), "experiments");
  expect_bad_input("sweep " + write_file("sweep_key.json", R"({"experiments": [{"modle": "gpt2"}]})"),
                   "unknown key 'modle'");
  expect_bad_input("sweep /nonexistent/sweep.json", "/nonexistent/sweep.json");
  // Values of the wrong type, at the top or in an experiment, name their key (they used to abort memwall).
  expect_bad_input("sweep " + write_file("sweep_format.json", R"({"format": 5, "experiments": [{}]})"),
                   "sweep_format.json: key 'format' is 5; allowed: \"memwall-sweep\"");
  expect_bad_input(
      "sweep " + write_file("sweep_set.json", R"({"defaults": {"set": 5}, "experiments": [{}]})"),
      "sweep_set.json: defaults: key 'set' is 5; allowed: an object of overrides");
  expect_bad_input("sweep " + write_file("sweep_nodes.json", R"({"experiments": [{}, {"nodes": 1.5}]})"),
                   "sweep_nodes.json: experiments[1]: key 'nodes' is 1.5; allowed: an integer");
}

// ramfs refuses O_DIRECT: io-bench says it measured buffered I/O (the page cache), not O_DIRECT, and
// calibrate refuses a filesystem without a size rather than writing a spec its own check rejects.
TEST(CliIoBench, AFilesystemThatRefusesODirectIsNamed) {
  const std::string dir = test_path("ramfs").string();
  std::filesystem::create_directories(dir);
  if (::mount("ramfs", dir.c_str(), "ramfs", 0, nullptr) != 0) {
    GTEST_SKIP() << "cannot mount a ramfs here (" << std::strerror(errno) << ")";
  }
  const CmdResult text = memwall("io-bench --path " + dir + " --size 4M");
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("the filesystem refuses O_DIRECT; using buffered I/O"), std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find(", buffered (the filesystem refuses O_DIRECT"), std::string::npos)
      << text.output;
  const CmdResult js = memwall("io-bench --path " + dir + " --size 4M --json", false);
  ASSERT_EQ(js.exit_code, 0) << js.output;
  EXPECT_EQ(parse_json(js.output)["settings"]["direct"], false) << js.output;
  expect_bad_input("calibrate --path " + dir + " --size 4M --out " + test_path("ramfs-hw.json").string(),
                   "--path " + dir + ": its filesystem reports no size (a ramfs?)");
  ::umount(dir.c_str());
}

TEST(CliIoBench, MeasuresAndSweeps) {
  const std::string dir = test_path("io").string();
  std::filesystem::create_directories(dir);
  const CmdResult r =
      memwall("io-bench --path " + dir + " --size 16M --block-size 256K --queue-depth 8 --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json d = parse_json(r.output);
  EXPECT_GT(d["write_Bps"].get<double>(), 0);
  EXPECT_GT(d["read_Bps"].get<double>(), 0);
  EXPECT_EQ(d["settings"]["block_size"], 256 * 1024);
  EXPECT_FALSE(std::filesystem::exists(dir + "/memwall-io-bench.dat"));  // removed unless --keep
  const CmdResult sweep =
      memwall("io-bench --path " + dir + " --size 4M --sweep --backend psync --json", false);
  ASSERT_EQ(sweep.exit_code, 0) << sweep.output;
  const nlohmann::json sd = parse_json(sweep.output);
  EXPECT_EQ(sd["sweep"].size(), 25u);
  EXPECT_TRUE(sd["recommended"]["aio"].contains("queue_depth"));
  expect_bad_input("io-bench --path /nonexistent-dir", "--path /nonexistent-dir: not a directory");
  expect_bad_input("io-bench --path " + dir + " --block-size 1000", "--block-size");
  expect_bad_input("io-bench --path " + dir + " --backend spdk", "allowed: auto, io_uring, libaio, psync");
}

TEST(CliStore, FillVerifyAndDetectCorruption) {
  const std::string dir = test_path("store").string();
  std::filesystem::remove_all(dir);
  const CmdResult fill =
      memwall("store fill --path " + dir + " --tensors 3 --tensor-size 100K --capacity 4M --versions 4");
  ASSERT_EQ(fill.exit_code, 0) << fill.output;
  EXPECT_NE(fill.output.find("committed version 4 of 3 tensors"), std::string::npos);
  expect_bad_input("store fill --path " + dir + " --tensor-size 1E",
                   "--tensor-size 1E: allowed: a size of 8 bytes or more, e.g. 4M");
  const CmdResult ok = memwall("store verify --path " + dir + " --json", false);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  const nlohmann::json d = parse_json(ok.output);
  ASSERT_EQ(d["tensors"].size(), 3u);
  for (const auto& t : d["tensors"]) {
    EXPECT_TRUE(t["whole"].get<bool>());
    EXPECT_EQ(t["version"], 4);
  }
  {  // flip a byte inside tensor1's committed region
    std::ifstream idx(dir + "/rank0/index.json");
    const nlohmann::json index = nlohmann::json::parse(idx);
    const auto& t = index["tensors"]["tensor1"];
    const std::string extent = dir + "/rank0/extent-" + std::to_string(t["extent"].get<int>()) + ".dat";
    const std::streamoff at = t["offset"].get<std::streamoff>() + 5000;
    std::fstream f(extent, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    const char c = static_cast<char>(f.get());
    f.seekp(at);
    f.put(static_cast<char>(c ^ 0x40));
  }
  const CmdResult bad = memwall("store verify --path " + dir);
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("TORN"), std::string::npos) << bad.output;
  expect_bad_input("store verify --path " + dir + "-missing", "no tensor store here");
}

TEST(CliInfo, ReportsBackendsAsJson) {
  const CmdResult r = memwall("info --json", false);
  ASSERT_EQ(r.exit_code, 0);
  const nlohmann::json j = parse_json(r.output);
  EXPECT_TRUE(j.contains("backends"));
  EXPECT_TRUE(j["backends"].contains("io_uring"));
  EXPECT_TRUE(j["backends"].contains("cuda"));
}

// `info --models` lists every shipped model file with its parameters and whether memwall train takes it:
// the Llama shape's and GPT-2's variants train (their family named), as do the mixtures of experts of the
// families memwall train runs (gpt-oss's, DeepSeek-V3's and Kimi K2's latent attention among them),
// Qwen3-Next's linear attention does not (why: one line), and the table says the same.
TEST(CliInfo, ListsTheShippedModelsAndWhichTrain) {
  const CmdResult r = memwall("info --models --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = parse_json(r.output);
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& m : j["models"]) by_name[m["name"]] = m;
  std::size_t files = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(MEMWALL_TEST_SCENARIOS_DIR) + "/models"))
    files += e.path().extension() == ".json" ? 1 : 0;
  EXPECT_EQ(by_name.size(), files);
  ASSERT_TRUE(by_name.count("glm-4-9b-0414") && by_name.count("gpt-oss-120b") &&
              by_name.count("starcoder2-3b"));
  EXPECT_EQ(by_name["glm-4-9b-0414"]["trains"], true);
  EXPECT_EQ(by_name["glm-4-9b-0414"]["family"], "GLM-4");
  EXPECT_EQ(by_name["glm-4-9b-0414"]["params"], 9400279040.0);
  EXPECT_EQ(by_name["starcoder2-3b"]["family"], "StarCoder2");
  EXPECT_EQ(by_name["gpt-oss-120b"]["trains"], true);
  EXPECT_EQ(by_name["gpt-oss-120b"]["family"], "gpt-oss");
  EXPECT_EQ(by_name["gpt-oss-120b"]["params"], 116829156672.0);
  EXPECT_LT(static_cast<double>(by_name["gpt-oss-120b"]["active_params"]), 6e9);
  EXPECT_EQ(by_name["olmoe-1b-7b"]["trains"], true);
  EXPECT_EQ(by_name["olmoe-1b-7b"]["family"], "OLMoE");
  ASSERT_TRUE(by_name.count("nemotron-mini-4b"));
  EXPECT_EQ(by_name["nemotron-mini-4b"]["trains"], true);
  EXPECT_EQ(by_name["nemotron-mini-4b"]["family"], "Nemotron");
  ASSERT_TRUE(by_name.count("deepseek-v3"));
  EXPECT_EQ(by_name["deepseek-v3"]["params"], 671026404352.0);
  EXPECT_EQ(by_name["deepseek-v3"]["trains"], true);
  EXPECT_EQ(by_name["deepseek-v3"]["family"], "DeepSeek-V3");
  EXPECT_EQ(by_name["kimi-k2"]["family"], "DeepSeek-V3");
  EXPECT_EQ(by_name["deepseek-v2-lite"]["family"], "DeepSeek-V2");
  ASSERT_TRUE(by_name.count("qwen3-next-80b-a3b"));
  EXPECT_EQ(by_name["qwen3-next-80b-a3b"]["trains"], false);
  EXPECT_NE(by_name["qwen3-next-80b-a3b"]["why_not"].get<std::string>().find(
                "linear-attention (Gated DeltaNet) layers and gated attention output are not supported by "
                "memwall train"),
            std::string::npos);
  for (const auto& m : j["models"]) EXPECT_FALSE(m.contains("error")) << m.dump();
  const CmdResult table = memwall("info --models", false);
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_NE(table.output.find("gpt-oss-120b"), std::string::npos);
  EXPECT_NE(table.output.find("no: predict and simulate"), std::string::npos);
  EXPECT_NE(table.output.find("yes (GLM-4-shaped)"), std::string::npos);
}

// What bash offers for the words of a command line, the last one being completed, with the script of
// `memwall completion bash` loaded, in an empty directory (so no file names join in).
std::vector<std::string> bash_completions(const std::string& script, const std::vector<std::string>& line,
                                          const std::string& env = "") {
  const std::filesystem::path dir = test_path("completion-cwd");
  std::filesystem::create_directories(dir);
  std::string words;
  for (const std::string& w : line) words += " '" + w + "'";
  const std::string driver =
      write_file("complete.sh", "source '" + script + "'\ncd '" + dir.string() + "'\nCOMP_WORDS=(memwall" +
                                    words + ")\nCOMP_CWORD=" + std::to_string(line.size()) +
                                    "\n_memwall\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n");
  FILE* p = popen((env + " bash " + driver).c_str(), "r");
  std::string out;
  char buf[4096];
  for (std::size_t n = 0; p != nullptr && (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  if (p != nullptr) pclose(p);
  std::vector<std::string> got;
  std::istringstream in(out);
  for (std::string w; std::getline(in, w);) {
    if (!w.empty()) got.push_back(w);
  }
  std::sort(got.begin(), got.end());
  return got;
}

TEST(CliCompletion, BashCompletesCommandsOptionsScenariosAndChoices) {
  const CmdResult r = memwall("completion bash", false);
  ASSERT_EQ(r.exit_code, 0);
  const std::string script = write_file("memwall-completion.bash", r.output);
  using V = std::vector<std::string>;
  EXPECT_EQ(bash_completions(script, {"sim"}), V({"simulate"}));
  EXPECT_EQ(bash_completions(script, {""}).size(), 17u);  // 15 commands, --help, --version
  EXPECT_EQ(bash_completions(script, {"simulate", "--hard"}), V({"--hardware"}));
  EXPECT_EQ(bash_completions(script, {"predict", "--json", "--model", "gpt2-"}),
            V({"gpt2-large", "gpt2-medium", "gpt2-xl"}));
  EXPECT_EQ(bash_completions(script, {"train", "--device", "c"}), V({"cpu", "cuda"}));
  EXPECT_EQ(bash_completions(script, {"store", "f"}), V({"fill"}));
  EXPECT_EQ(bash_completions(script, {"predict", "--max-model", "--strategy", "zero-inf"}),
            V({"zero-infinity-cpu", "zero-infinity-nvme"}));
  EXPECT_EQ(bash_completions(script, {"io-bench", "--backend", "l"}), V({"libaio"}));
  // Scenario names are listed when completing: a spec written later (memwall calibrate) completes too.
  const std::filesystem::path scenarios = test_path("completion-scenarios");
  std::filesystem::create_directories(scenarios / "hardware");
  std::ofstream((scenarios / "hardware" / "local.json").string()) << "{}";
  EXPECT_EQ(bash_completions(script, {"simulate", "-H", "lo"}, "MEMWALL_SCENARIOS=" + scenarios.string()),
            V({"local"}));
  expect_bad_input("completion zsh", "zsh");
}

TEST(CliMain, VersionAndHelp) {
  EXPECT_EQ(memwall("--version").exit_code, 0);
  const CmdResult help = memwall("predict --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--max-model"), std::string::npos);
}

}  // namespace

namespace {

std::string training_text() {
  // Deterministic pseudo-English: a tiny vocabulary of words in a fixed pseudo-random order.
  const char* words[] = {"the",  "quick", "brown", "fox", "jumps", "over",
                         "lazy", "dog",   "and",   "cat", "sat",   "on"};
  std::string s;
  unsigned x = 1;
  while (s.size() < 120000) {
    x = x * 1103515245u + 12345u;
    s += words[(x >> 16) % 12];
    s += ' ';
  }
  return s;
}

// A GPT-2-style BPE tokenizer of 657 tokens whose 400 merges were learnt on Genesis.
const std::string kTinyBpe = std::string(MEMWALL_TEST_SOURCE_DIR) + "/data/tiny-bpe";
const char* kTinyModel = "--model-set '{\"n_layer\":1,\"n_embd\":64,\"n_head\":2,\"n_positions\":64}'";

// A directory `name` with tests/data/tiny-bpe's vocabulary and merges as a tokenizer.json behind
// `pre_tokenizer` (and Llama 3's ignore_merges when asked).
std::string tiny_bpe_tokenizer_json(const std::string& name, const nlohmann::json& pre_tokenizer,
                                    bool ignore_merges) {
  const std::string dir = test_path(name).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  nlohmann::json merges = nlohmann::json::array();
  std::ifstream lines(kTinyBpe + "/merges.txt");
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] != '#') merges.push_back(line);
  }
  std::ifstream vocab(kTinyBpe + "/vocab.json");
  const nlohmann::json doc = {{"pre_tokenizer", pre_tokenizer},
                              {"normalizer", nullptr},
                              {"model",
                               {{"type", "BPE"},
                                {"ignore_merges", ignore_merges},
                                {"vocab", nlohmann::json::parse(vocab)},
                                {"merges", merges}}}};
  std::ofstream(dir + "/tokenizer.json") << doc.dump();
  return dir;
}

// The same as a Llama 3 tokenizer.json (a Split by Llama 3's pattern, then ByteLevel without its own).
std::string llama3_tokenizer(const std::string& name) {
  const nlohmann::json pre = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern",
          {{"Regex",
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
            "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  return tiny_bpe_tokenizer_json(name, pre, true);
}

// tiny-bpe's merges as Llama 2's SentencePiece-style tokenizer.json: <unk>, <s>, </s>, the byte tokens
// <0x00>..<0xFF>, printable ASCII and U+2581 (a space) as characters, then tiny-bpe's merged tokens with
// spaces as U+2581; Llama 2's normalizer (U+2581 before the text, spaces to U+2581) and its post-processor
// (<s> first).
std::string llama2_tokenizer(const std::string& name) {
  const std::string dir = test_path(name).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string meta = "\xE2\x96\x81";
  // GPT-2's byte -> character map, inverted: tiny-bpe's keys back to bytes, spaces then to U+2581.
  std::map<std::string, char> byte_of;
  for (int b = 0; b < 256; ++b) byte_of[test_files::gpt2_byte_key(b)] = static_cast<char>(b);
  const auto sentencepiece = [&](const std::string& key) {
    std::string out;
    for (std::size_t i = 0; i < key.size();) {
      const std::size_t len = static_cast<unsigned char>(key[i]) < 0x80 ? 1 : 2;
      const char b = byte_of.at(key.substr(i, len));
      const auto u = static_cast<unsigned char>(b);
      if (u >= 0x80 || (u < 0x20 && u != ' ')) return std::string();  // not printable ASCII: left out
      out += b == ' ' ? meta : std::string(1, b);
      i += len;
    }
    return out;
  };
  nlohmann::json vocab = nlohmann::json::object();
  for (const char* special : {"<unk>", "<s>", "</s>"}) vocab[special] = vocab.size();
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    vocab[hex] = vocab.size();
  }
  vocab[meta] = vocab.size();
  for (char c = 33; c < 127; ++c) vocab[std::string(1, c)] = vocab.size();
  std::ifstream tiny_file(kTinyBpe + "/vocab.json");
  const nlohmann::json tiny = nlohmann::json::parse(tiny_file);
  std::vector<std::pair<int, std::string>> merged;
  for (const auto& [key, id] : tiny.items()) {
    if (id.get<int>() >= 256 && key.rfind("<|", 0) != 0)
      merged.emplace_back(id.get<int>(), sentencepiece(key));
  }
  std::sort(merged.begin(), merged.end());
  for (const auto& m : merged) {
    if (!m.second.empty() && !vocab.contains(m.second)) vocab[m.second] = vocab.size();
  }
  nlohmann::json merges = nlohmann::json::array();
  std::ifstream lines(kTinyBpe + "/merges.txt");
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const std::string a = sentencepiece(line.substr(0, line.find(' '))),
                      b = sentencepiece(line.substr(line.find(' ') + 1));
    if (!a.empty() && !b.empty() && vocab.contains(a + b)) merges.push_back(a + " " + b);
  }
  const nlohmann::json bos = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}};
  const nlohmann::json doc = {
      {"added_tokens",
       {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
        {{"id", 1}, {"content", "<s>"}, {"special", true}},
        {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", meta}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", meta}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {bos, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"model",
       {{"type", "BPE"},
        {"byte_fallback", true},
        {"unk_token", "<unk>"},
        {"vocab", vocab},
        {"merges", merges}}}};
  std::ofstream(dir + "/tokenizer.json") << doc.dump();
  return dir;
}

// The summary line of a `memwall train --json` output.
nlohmann::json train_json_summary(const std::string& output) {
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    const auto j = parse_json(line);
    if (j.contains("summary")) return j["summary"];
  }
  return {};
}

// The losses and the summary of `memwall train --json --run RUN --set SET` for 3 steps of the tiny model on
// `data` (none when it failed: the failure is reported).
struct TrainJson {
  std::vector<double> losses;
  nlohmann::json summary;
};
TrainJson train_json(const std::string& run, const std::string& set, const std::string& data,
                     const std::string& extra = "") {
  TrainJson t;
  const CmdResult r = memwall("train --run " + run + " --steps 3 --eval-batches 1 --json --set '" + set +
                                  "' --data " + data + " " + kTinyModel + extra,
                              false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (r.exit_code != 0) return t;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    const auto j = parse_json(line);
    if (j.contains("summary")) t.summary = j["summary"];
    if (j.contains("loss")) t.losses.push_back(j["loss"].get<double>());
  }
  return t;
}

}  // namespace

TEST(CliTrain, LowersTheLossAndReportsEachStepAsJson) {
  const std::string data = write_file("train.txt", training_text());
  const CmdResult r = memwall("train --steps 80 --json --data " + data + " " + kTinyModel, false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(line_count(r.output), 81u) << r.output;  // one line per step, then the summary
  const auto last_line = r.output.substr(r.output.rfind('\n', r.output.size() - 2) + 1);
  const auto summary = parse_json(last_line)["summary"];
  const double first = summary["first_loss"], last = summary["last_loss"], val = summary["val_loss"];
  // From the uniform ln(256) = 5.55 to below 2.95 nats, the entropy of this text's byte frequencies.
  EXPECT_NEAR(first, std::log(256.0), 0.2);
  EXPECT_LT(last, 2.6) << r.output;
  EXPECT_LT(val, 2.6) << r.output;
  EXPECT_GT(static_cast<double>(summary["flops_per_s"]), 0.0);
  // Where a step's time went: the longest task kinds, layers and sub-groups folded, longest first.
  const auto& longest = summary["longest_tasks_s_per_step"];
  ASSERT_EQ(longest.size(), 5u) << summary.dump();
  for (std::size_t i = 0; i < longest.size(); ++i) {
    const std::string kind = longest[i]["task"];
    EXPECT_EQ(kind.find("L0."), std::string::npos) << kind;
    EXPECT_EQ(kind.find('/'), std::string::npos) << kind;
    EXPECT_GT(static_cast<double>(longest[i]["s"]), 0.0) << kind;
    if (i > 0) {
      EXPECT_LE(longest[i]["s"].get<double>(), longest[i - 1]["s"].get<double>());
    }
  }
  // The default run's optimizer (train-gpt): AdamW at 3e-3, clipping at norm 1.
  EXPECT_EQ(summary["optimizer"]["type"], "AdamW");
  EXPECT_EQ(summary["optimizer"]["lr"], 0.003);
  EXPECT_EQ(summary["optimizer"]["gradient_clipping"], 1.0);
  // A run file's optimizer.params are used; --lr overrides its rate.
  const std::string adam =
      R"( --set '{"optimizer": {"type": "Adam", "params": {"lr": 0.0005, "weight_decay": 0.1, "adam_w_mode": false}}}')";
  for (const char* lr : {"", " --lr 0.01"}) {
    const CmdResult o = memwall(
        "train --steps 1 --eval-batches 1 --json --data " + data + " " + kTinyModel + adam + lr, false);
    ASSERT_EQ(o.exit_code, 0) << o.output;
    const auto opt =
        parse_json(o.output.substr(o.output.rfind('\n', o.output.size() - 2) + 1))["summary"]["optimizer"];
    EXPECT_EQ(opt["type"], "Adam");  // adam_w_mode false: L2 weight decay
    EXPECT_EQ(opt["weight_decay"], 0.1);
    EXPECT_EQ(opt["weight_decay_params"], "all");  // DeepSpeed's one group: every parameter
    EXPECT_EQ(opt["lr"], std::string(lr).empty() ? 0.0005 : 0.01) << lr;
  }
  // memwall.weight_decay_params "matrices" (Hugging Face's Trainer's groups) says so; another value is
  // refused.
  const CmdResult m = memwall(
      "train --steps 1 --eval-batches 1 --data " + data + " " + kTinyModel +
          R"( --set '{"memwall.weight_decay_params": "matrices", "optimizer.params.weight_decay": 0.1}')",
      false);
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_NE(m.output.find("weight decay 0.1 (decoupled, matrices only: not biases or norms)"),
            std::string::npos)
      << m.output;
  expect_bad_input(
      "train --steps 1 --data " + data + R"( --set '{"memwall.weight_decay_params": "vectors"}')",
      "key 'memwall.weight_decay_params': \"vectors\" is not allowed; allowed: all, matrices");
}

// With the optimizer on NVMe the summary says where its gradients waited, and the bytes it moved show it:
// kept in CPU memory ("auto" here), 4 B per parameter less read and written per step than through NVMe.
// Host-emulated, the device and CPU tiers are this machine's memory: a run whose plan peaks beyond it (Llama
// 2 70B's model states in CPU memory, 1.1 TiB) is refused in one line before anything is allocated, instead
// of meeting the kernel's OOM killer; the message says what would fit.
TEST(CliTrain, ARunLargerThanThisMachinesMemoryIsRefused) {
  const std::string data = write_file("train-70b.txt", training_text());
  const CmdResult r = memwall(
      "train --steps 1 --eval-batches 1 --data " + data +
      R"( --model llama-2-70b --set '{"memwall": {"sequence_length": 8}, "train_micro_batch_size_per_gpu": 1, )"
      R"("zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": )"
      R"({"device": "cpu"}}}')");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(
      r.output.find("the run does not fit this machine: its host-emulated device and CPU tiers peak at "),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(" TiB per rank, more than its "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("or the parameters and optimizer states on NVMe"), std::string::npos) << r.output;
}

// A model far too large for the hardware (BLOOM-176B on one DGX-2 node's 32 GiB GPUs) is refused by the plan
// before the CPU model allocates its activations (which for it are tens of GB: the process once met the OOM
// killer first): here in under 3 GB of address space.
TEST(CliTrain, APlanThatDoesNotFitIsRefusedBeforeTheModelAllocates) {
  const std::string data = write_file("train-176b.txt", training_text());
  const CmdResult r = run_shell("ulimit -v 3000000; " + std::string(MEMWALL_BINARY) +
                                " train --steps 1 --data " + data + " --model bloom-176b 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("memwall: error: the run does not fit dgx2: GPU: the schedule needs "),
            std::string::npos)
      << r.output;
  EXPECT_EQ(line_count(r.output), 1u) << r.output;
}

TEST(CliTrain, NvmeOptimizerGradientsInCpuMemoryMoveLessThroughNvme) {
  const std::string data = write_file("train-grads.txt", training_text());
  const std::string nvme = test_path("nvme-grads").string();
  std::filesystem::create_directories(nvme);
  std::map<std::string, nlohmann::json> summary;
  for (const char* grads : {"auto", "nvme"}) {
    const CmdResult r =
        memwall("train --run zero-infinity-nvme --nvme-path " + nvme +
                    " --steps 1 --eval-batches 1 --json --set '{\"memwall.optimizer_gradients\": \"" + grads +
                    "\"}' --data " + data + " " + kTinyModel,
                false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto last_line = r.output.substr(r.output.rfind('\n', r.output.size() - 2) + 1);
    summary[grads] = parse_json(last_line)["summary"];
  }
  EXPECT_EQ(summary["auto"]["optimizer_gradients"], "cpu");
  EXPECT_EQ(summary["nvme"]["optimizer_gradients"], "nvme");
  const double grads = 4.0 * summary["auto"]["params"].get<double>();
  for (const char* link : {"nvme_read", "nvme_write"}) {
    EXPECT_DOUBLE_EQ(summary["nvme"]["bytes_per_step"][link].get<double>() -
                         summary["auto"]["bytes_per_step"][link].get<double>(),
                     grads)
        << link;
  }
  std::filesystem::remove_all(nvme);
}

// The shipped ZeRO-Offload run (stage 2, optimizer on the CPU) trains: the whole bf16 parameters stay on the
// device, each step sends the fp32 gradients down (4 B per parameter) and the updated bf16 parameters up
// (2 B); on one rank its losses are stage 3's with the same optimizer placement, bitwise; with its delayed
// parameter update they part after the first step.
TEST(CliTrain, TrainsTheZeroOffloadRunAsStage3Does) {
  const std::string data = write_file("train-offload.txt", training_text());
  std::map<int, nlohmann::json> summary;
  std::map<int, std::vector<double>> losses;
  // Stage 2, stage 3, and stage 2 with the delayed parameter update (key 1 here).
  for (const int stage : {2, 3, 1}) {
    TrainJson t = train_json("zero-offload",
                             stage == 1 ? "{\"memwall.delayed_parameter_update\": true}"
                                        : "{\"zero_optimization.stage\": " + std::to_string(stage) + "}",
                             data);
    summary[stage] = std::move(t.summary);
    losses[stage] = std::move(t.losses);
  }
  ASSERT_EQ(losses[2].size(), 3u);
  EXPECT_EQ(losses[2], losses[3]);
  // The delayed update: the second step still has the first one's parameters (its optimizer steps on the
  // first step's gradients beside it), so from then on the losses are not stage 2's.
  ASSERT_EQ(losses[1].size(), 3u);
  EXPECT_EQ(losses[1][0], losses[2][0]);
  EXPECT_NE(losses[1][1], losses[2][1]);
  EXPECT_NE(losses[1][2], losses[2][2]);
  EXPECT_TRUE(summary[1]["delayed_parameter_update"].get<bool>());
  EXPECT_FALSE(summary[2]["delayed_parameter_update"].get<bool>());
  EXPECT_EQ(summary[2]["zero_stage"], 2);
  EXPECT_EQ(summary[2]["offload_param"], "gpu");
  EXPECT_EQ(summary[2]["offload_optimizer"], "cpu");
  const double params = summary[2]["params"].get<double>();
  const auto& bytes = summary[2]["bytes_per_step"];
  EXPECT_GE(bytes["d2h"].get<double>(), 4 * params);
  EXPECT_LT(bytes["d2h"].get<double>(), 4.2 * params);
  EXPECT_GE(bytes["h2d"].get<double>(), 2 * params);
  EXPECT_LT(bytes["h2d"].get<double>(), 2.1 * params);
}

// ZeRO-Offload++'s Twin-Flow trains: the device steps the first int((1 - ratio) x sub-groups) sub-groups, and
// the losses are bitwise those of every sub-group on the CPU (the same Adam on the same gradients). The
// device's part of the gradients (fp32) stays there and its updated bf16 parameters need no copy back: 4
// bytes fewer to the host and 2 fewer from it per element it steps; its fp32 master weights, moments and
// gradients move from host memory to the device's.
TEST(CliTrain, TrainsTwinFlowAsTheCpuOptimizerDoes) {
  const std::string data = write_file("train-twin.txt", training_text());
  const std::string base = "\"zero_optimization.stage\": 3, \"zero_optimization.sub_group_size\": 10000";
  const TrainJson cpu = train_json("zero-offload", "{" + base + "}", data);
  const TrainJson twin =
      train_json("zero-offload", "{" + base + ", \"zero_optimization.offload_optimizer.ratio\": 0.5}", data);
  ASSERT_EQ(cpu.losses.size(), 3u);
  EXPECT_EQ(twin.losses, cpu.losses);
  EXPECT_TRUE(cpu.summary["twin_flow"].is_null());
  const auto& t = twin.summary["twin_flow"];
  ASSERT_TRUE(t.is_object()) << twin.summary.dump();
  EXPECT_EQ(t["ratio"].get<double>(), 0.5);
  const int groups = t["sub_groups"].get<int>(), gpu = t["gpu_sub_groups"].get<int>();
  EXPECT_GE(groups, 4);
  EXPECT_EQ(gpu, groups / 2);
  const double elems = t["gpu_elements_per_rank"].get<double>();
  EXPECT_GE(elems, 10000.0 * gpu);  // whole parameters: up to the end of the last one starting among them
  EXPECT_LT(elems, twin.summary["params"].get<double>());
  const auto moved = [&](const TrainJson& j, const char* lane) {
    return j.summary["bytes_per_step"][lane].get<double>();
  };
  EXPECT_EQ(moved(cpu, "d2h") - moved(twin, "d2h"), 4 * elems);
  EXPECT_EQ(moved(cpu, "h2d") - moved(twin, "h2d"), 2 * elems);
  const auto peak = [&](const TrainJson& j, const char* tier) {
    return j.summary["peak_bytes"][tier].get<double>();
  };
  EXPECT_GE(peak(twin, "gpu") - peak(cpu, "gpu"), 12 * elems);
  EXPECT_GE(peak(cpu, "cpu") - peak(twin, "cpu"), 12 * elems);
}

// The shipped data-parallel run (ZeRO stage 0) trains: every rank keeps all of the model states on its device
// (2 B bf16 parameters, 4 B fp32 gradients and 12 B of fp32 master weights and moments per parameter), no
// bytes cross PCIe, and on one rank its losses are stage 3's, bitwise.
TEST(CliTrain, TrainsTheDataParallelRunAsStage3Does) {
  const std::string data = write_file("train-dp.txt", training_text());
  const TrainJson dp = train_json("data-parallel", "{}", data);
  const TrainJson z3 = train_json("data-parallel", "{\"zero_optimization.stage\": 3}", data);
  ASSERT_EQ(dp.losses.size(), 3u);
  EXPECT_EQ(dp.losses, z3.losses);
  const nlohmann::json& summary = dp.summary;
  EXPECT_EQ(summary["zero_stage"], 0);
  EXPECT_EQ(summary["offload_optimizer"], "gpu");
  const double params = summary["params"].get<double>();
  EXPECT_EQ(summary["bytes_per_step"]["d2h"].get<double>(), 0.0);
  EXPECT_EQ(summary["bytes_per_step"]["h2d"].get<double>(), 0.0);
  EXPECT_GE(summary["peak_bytes"]["gpu"].get<double>(), 18 * params);
}

// --eval-every N: a held-out loss every N steps over the same --eval-batches windows; training goes on
// bitwise as without it, the loss at step 2 is the final held-out loss of a 2-step run (the same parameters
// and windows), and the summary lists every held-out loss with the final one last.
TEST(CliTrain, EvalEveryReportsHeldOutLossesWithoutChangingTraining) {
  const std::string data = write_file("train-eval.txt", training_text());
  const std::string common = " --eval-batches 2 --json --data " + data + " " + kTinyModel;
  const CmdResult with = memwall("train --steps 5 --eval-every 2" + common, false);
  const CmdResult without = memwall("train --steps 5" + common, false);
  const CmdResult two = memwall("train --steps 2" + common, false);
  ASSERT_EQ(with.exit_code, 0) << with.output;
  ASSERT_EQ(without.exit_code, 0) << without.output;
  ASSERT_EQ(two.exit_code, 0) << two.output;
  std::vector<double> losses[2];
  std::map<int, double> evals;
  nlohmann::json summary;
  for (int k = 0; k < 2; ++k) {
    std::istringstream lines(k == 0 ? with.output : without.output);
    for (std::string line; std::getline(lines, line);) {
      const auto j = parse_json(line);
      if (j.contains("step")) losses[k].push_back(j["loss"].get<double>());
      if (j.contains("eval_step")) evals[j["eval_step"].get<int>()] = j["val_loss"].get<double>();
      if (k == 0 && j.contains("summary")) summary = j["summary"];
    }
  }
  ASSERT_EQ(losses[0].size(), 5u);
  EXPECT_EQ(losses[0], losses[1]);
  ASSERT_EQ(evals.size(), 2u);  // steps 2 and 4; step 5's is the summary's
  EXPECT_TRUE(evals.count(2) && evals.count(4));
  EXPECT_EQ(evals[2], train_json_summary(two.output)["val_loss"].get<double>());
  EXPECT_NE(evals[2], evals[4]);
  const auto& listed = summary["val_losses"];
  ASSERT_EQ(listed.size(), 3u) << summary;
  EXPECT_EQ(listed[0]["steps_done"], 2);
  EXPECT_EQ(listed[0]["val_loss"].get<double>(), evals[2]);
  EXPECT_EQ(listed[2]["steps_done"], 5);
  EXPECT_EQ(listed[2]["val_loss"].get<double>(), summary["val_loss"].get<double>());
  // The step lines stay the only lines with a "step" key, for scripts that look for it in the text.
  EXPECT_EQ(with.output.find("\"step\"", with.output.find("\"summary\"")), std::string::npos);
  expect_bad_input("train --steps 2 --eval-every -1 --data " + data, "--eval-every");
}

// --cpu-matmul bf16: the GEMMs on bf16 operands; the losses stay within 3e-2 of fp32's (and are not bitwise
// them: the option took effect), and the summary says which ran.
TEST(CliTrain, CpuBf16MatmulsTrainCloseToFp32) {
  const std::string data = write_file("train-bf16.txt", training_text());
  const TrainJson fp32 = train_json("train-gpt", "{}", data);
  const TrainJson bf16 = train_json("train-gpt", "{}", data, " --cpu-matmul bf16");
  ASSERT_EQ(fp32.losses.size(), 3u);
  ASSERT_EQ(bf16.losses.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(bf16.losses[i], fp32.losses[i], 3e-2 * fp32.losses[i]);
  EXPECT_NE(bf16.losses, fp32.losses);
  EXPECT_EQ(fp32.summary["matmul"], "fp32");
  EXPECT_EQ(bf16.summary["matmul"], "bf16");
  expect_bad_input("train --steps 1 --cpu-matmul fp16 --data " + data, "--cpu-matmul");
}

TEST(CliTrain, RefusesWhatItCannotTrainWithOneLine) {
  const std::string data = write_file("train2.txt", training_text());
  // The scenario's nvme_path (/local_nvme) is not on this machine.
  CmdResult r = memwall("train --run zero-infinity-nvme --steps 1 --data " + data + " " + kTinyModel);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(line_count(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find("/local_nvme: the NVMe path does not exist"), std::string::npos) << r.output;
  // Tensor parallelism is predicted and simulated, not trained.
  r = memwall("train --run data-parallel --set '{\"memwall.model_parallel\": 2}' --steps 1 --data " + data +
              " " + kTinyModel);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find("memwall.model_parallel = 2: memwall train is data parallel only (allowed: 1)"),
            std::string::npos)
      << r.output;
  // train_batch_size is checked against the ranks, not the hardware file's 16 GPUs.
  r = memwall(
      "train --set '{\"train_batch_size\": 2, \"train_micro_batch_size_per_gpu\": 2}' --steps 1 "
      "--eval-batches 1 --data " +
      data + " " + kTinyModel);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = memwall("train --set '{\"memwall.data_parallel\": 16}' --steps 1 --data " + data + " " + kTinyModel);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("memwall.data_parallel = 16: memwall train is data parallel over its 1 rank(s)"),
            std::string::npos)
      << r.output;
  // A device too small for the plan: the shortfall, before any work.
  const std::filesystem::path files = std::filesystem::current_path() / "cli_test_files";
  const std::string base =
      std::filesystem::relative(std::filesystem::path(MEMWALL_SOURCE_SCENARIOS) / "hardware" / "dgx2.json",
                                files)
          .string();
  const std::string tiny = write_file("tiny-device.json", "{\"inherits\": \"" + base +
                                                              "\", \"gpu\": {\"memory_bytes\": 1000000, "
                                                              "\"reserved_bytes\": 0}}");
  r = memwall("train --steps 1 --hardware " + tiny + " --data " + data + " " + kTinyModel);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(line_count(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find("GPU: the schedule needs"), std::string::npos) << r.output;
  r = memwall("train --model llama-mini --model-set '{\"attention_bias\": true}' --steps 1 --data " + data);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("attention_bias"), std::string::npos) << r.output;
  r = memwall("train --model-set '{\"n_inner\": 100}' --steps 1 --data " + data);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("n_inner"), std::string::npos) << r.output;
  r = memwall("train --steps 1 --data /nonexistent/text.txt " + std::string(kTinyModel));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("/nonexistent/text.txt"), std::string::npos) << r.output;
}

// DeepSpeed's WarmupCosineLR: the optimizer's rate (0.004) times a ratio that rises linearly from 0.25 over 3
// steps, then falls along a half cosine to 0.1 at step 8; the header says so, and flash attention trains too.
TEST(CliTrain, WarmupCosineScheduleFollowsItsRatios) {
  const std::string data = write_file("train_cosine.txt", training_text());
  const CmdResult r = memwall(
      "train --steps 8 --eval-batches 1 --json --data " + data + " " + kTinyModel +
          R"( --set '{"optimizer": {"type": "AdamW", "params": {"lr": 0.004}}, "memwall.attention": "flash", )" +
          R"("scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 3, "warmup_type": "linear", )" +
          R"("warmup_min_ratio": 0.25, "cos_min_ratio": 0.1, "total_num_steps": 8}}}')",
      false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream in(r.output);
  int steps = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"step\"") == std::string::npos) continue;
    const nlohmann::json j = parse_json(line);
    const int s = j["step"].get<int>() - 1;
    const double pi = std::acos(-1.0);
    const double ratio =
        s < 3 ? 0.25 + 0.75 * s / 3.0 : 0.1 + 0.9 * (1 + std::cos(pi * (s - 3 + 1) / 5.0)) / 2;
    EXPECT_NEAR(j["lr"].get<double>(), 0.004 * ratio, 1e-7 * 0.004)
        << line;  // the optimizer's rate is a float
    EXPECT_TRUE(std::isfinite(j["loss"].get<double>())) << line;
    ++steps;
  }
  EXPECT_EQ(steps, 8);
  EXPECT_EQ(parse_json(r.output.substr(r.output.rfind("{\"summary\"")))["summary"]["attention"], "flash");
  const CmdResult text = memwall("train --steps 1 --eval-batches 1 --data " + data + " " + kTinyModel +
                                 R"( --set '{"scheduler": {"type": "WarmupCosineLR", "params": )" +
                                 R"({"total_num_steps": 100, "warmup_num_steps": 10}}}')");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("then a half cosine to"), std::string::npos) << text.output;
  EXPECT_EQ(text.output.find("not implemented"), std::string::npos) << text.output;
}

// DeepSpeed's OneCycle: the rate up over 2 steps and down over 2 (from b = step + 1), then divided by 1 +
// steps after the cycle; beta1 inversely between 0.9 and 0.8, beta2 0.99; each step's JSON line says so.
TEST(CliTrain, OneCycleCyclesTheRateAndMomentum) {
  const std::string data = write_file("train_cycle.txt", training_text());
  const CmdResult r = memwall(
      "train --steps 6 --eval-batches 1 --json --data " + data + " " + kTinyModel +
          R"( --set '{"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.003, )" +
          R"("cycle_first_step_size": 2, "decay_step_size": 1, "decay_lr_rate": 1}}}')",
      false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double want_lr[] = {0.002, 0.003, 0.002, 0.001, 0.0005, 0.001 / 3};
  const double want_b1[] = {0.85, 0.8, 0.85, 0.9, 0.9, 0.9};
  std::istringstream in(r.output);
  int steps = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"step\"") == std::string::npos) continue;
    const nlohmann::json j = parse_json(line);
    const auto s = static_cast<std::size_t>(j["step"].get<int>() - 1);
    EXPECT_NEAR(j["lr"].get<double>(), want_lr[s], 1e-12) << line;
    EXPECT_NEAR(j["betas"][0].get<double>(), want_b1[s], 1e-12) << line;
    EXPECT_EQ(j["betas"][1].get<double>(), 0.99) << line;
    ++steps;
  }
  EXPECT_EQ(steps, 6);
}

// With a learning-rate schedule (DeepSpeed's WarmupDecayLR: linear warm-up over 4 steps, then linear decay to
// 0 at step 12), which the resumed run continues from its step.
TEST(CliTrain, ResumeContinuesWithBitwiseTheSameLosses) {
  const std::string data = write_file("train3.txt", training_text());
  const std::string dir = test_path("ckpt").string();
  std::filesystem::remove_all(dir);
  const std::string common =
      " --json --data " + data + " " + kTinyModel +
      R"( --set '{"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_max_lr": 0.003, )" +
      R"("warmup_num_steps": 4, "warmup_type": "linear", "total_num_steps": 12}}}')";
  const CmdResult straight = memwall("train --steps 12" + common, false);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const CmdResult first = memwall("train --steps 6 --checkpoint-dir " + dir + common, false);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const CmdResult second = memwall("train --steps 12 --resume --checkpoint-dir " + dir + common, false);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  auto losses = [](const std::string& out) {
    std::vector<std::string> v;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"step\"") != std::string::npos) v.push_back(parse_json(line)["loss"].dump());
    }
    return v;
  };
  const auto a = losses(straight.output), b = losses(second.output);
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i)
    EXPECT_EQ(a[6 + i], b[i]) << "step " << 7 + i;  // printed in full precision
  std::istringstream in(straight.output);
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"step\"") == std::string::npos) continue;
    const nlohmann::json j = parse_json(line);
    const int s = j["step"].get<int>() - 1;  // DeepSpeed's last_batch_iteration
    const double want = s < 4 ? 0.003 * s / 4 : 0.003 * (12 - s) / 8;
    EXPECT_NEAR(j["lr"].get<double>(), want, 1e-12) << line;
  }
  const CmdResult again = memwall("train --steps 12 --resume --checkpoint-dir " + dir + common);
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.output.find("already at step 12"), std::string::npos) << again.output;
}

TEST(CliTrain, GradientAccumulationTrainsAndResumesBitwise) {
  const std::string data = write_file("train-gas.txt", training_text());
  const std::string dir = test_path("ckpt-gas").string();
  std::filesystem::remove_all(dir);
  // Two micro-batches per optimizer step, given, or derived from train_batch_size over micro-batch x ranks.
  const std::string common = " --json --eval-batches 1 --data " + data + " " + kTinyModel;
  const std::string gas = " --set '{\"gradient_accumulation_steps\": 2}'";
  const CmdResult straight = memwall("train --steps 4" + gas + common, false);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const CmdResult derived = memwall(
      "train --steps 4 --set '{\"train_batch_size\": 4, \"gradient_accumulation_steps\": \"auto\"}'" + common,
      false);
  ASSERT_EQ(derived.exit_code, 0) << derived.output;
  const CmdResult plain = memwall("train --steps 4" + common, false);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  auto steps = [](const std::string& out) {
    std::vector<nlohmann::json> v;
    nlohmann::json summary;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = parse_json(line);
      if (j.contains("step")) v.push_back(j);
      if (j.contains("summary")) summary = j["summary"];
    }
    v.push_back(summary);
    return v;
  };
  const auto a = steps(straight.output), d = steps(derived.output), p = steps(plain.output);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(a[4]["gradient_accumulation_steps"], 2);
  EXPECT_EQ(a[4]["micro_batch"], 2);
  EXPECT_EQ(p[4]["gradient_accumulation_steps"], 1);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a[i]["loss"].dump(), d[i]["loss"].dump()) << "step " << i + 1;
    // Twice the tokens and FLOPs per optimizer step; the second micro-batch changes the loss.
    EXPECT_NEAR(a[i]["tokens_per_s"].get<double>() * a[i]["seconds"].get<double>(),
                2 * p[i]["tokens_per_s"].get<double>() * p[i]["seconds"].get<double>(), 1e-6 * 1024);
  }
  EXPECT_NE(a[0]["loss"].dump(), p[0]["loss"].dump());
  const CmdResult first = memwall("train --steps 2 --checkpoint-dir " + dir + gas + common, false);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const CmdResult second = memwall("train --steps 4 --resume --checkpoint-dir " + dir + gas + common, false);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const auto b = steps(second.output);
  ASSERT_EQ(b.size(), 3u);
  for (std::size_t i = 0; i < 2; ++i)
    EXPECT_EQ(a[2 + i]["loss"].dump(), b[i]["loss"].dump()) << "step " << 3 + i;
}

// A checkpoint resumes under another tiling (or rank count): the states are partitioned anew, with a note.
TEST(CliTrain, ResumesACheckpointOfAnotherLayout) {
  const std::string data = write_file("train-relayout.txt", training_text());
  const std::string dir = test_path("ckpt-relayout").string();
  std::filesystem::remove_all(dir);
  const std::string common =
      " --eval-batches 1 --data " + data + " --checkpoint-dir " + dir + " " + kTinyModel;
  const CmdResult first = memwall("train --steps 2" + common);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const CmdResult second =
      memwall("train --steps 3 --resume --json --set '{\"memwall.tiling_factor\": 2}'" + common);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("written by 1 rank(s) with tiling 1, this run has 1 with tiling 2"),
            std::string::npos)
      << second.output;
  EXPECT_NE(second.output.find("\"steps_done\":2"), std::string::npos) << second.output;
}

// The Llama shape (RMSNorm, rotary positions, 4 query heads on 2 key/value heads, a SwiGLU MLP, an untied
// head) trains on the repeated sentence as GPT-2 does and continues it, past its 64 positions too; its
// checkpoint resumes only as itself; its export is Llama's (transformers' LlamaForCausalLM config and names)
// and generates the same text.
// `memwall generate SOURCE --prompt 'the c' --tokens N --temperature 0`: the greedy text (a failure is
// reported).
std::string greedy_text(const std::string& source, int tokens) {
  const CmdResult r = memwall(
      "generate " + source + " --prompt 'the c' --tokens " + std::to_string(tokens) + " --temperature 0",
      false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

TEST(CliGenerate, ALlamaShapedModelTrainsGeneratesAndExports) {
  // With Llama 3's rope_scaling (head size 16: of 8 rotary pairs 1 kept, 2 blended, 5 slowed 8 times).
  const char* tiny_llama =
      " --model llama-mini --model-set '{\"num_hidden_layers\": 1, \"hidden_size\": 64, "
      "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 176, "
      "\"max_position_embeddings\": 64, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
      "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}}'";
  std::string text;
  for (int i = 0; i < 4000; ++i) text += "the cat sat. ";
  const std::string data = write_file("cat-llama.txt", text);
  const std::string dir = test_path("ckpt-llama").string(), hf = test_path("llama-hf").string();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(hf);
  const CmdResult t = memwall("train --steps 300 --log-every 300 --eval-batches 1 --json --checkpoint-dir " +
                                  dir + " --data " + data + tiny_llama,
                              false);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const nlohmann::json summary = train_json_summary(t.output);
  EXPECT_NEAR(static_cast<double>(summary["first_loss"]), std::log(256.0), 0.3) << t.output;
  EXPECT_LT(static_cast<double>(summary["val_loss"]), 0.2) << t.output;
  const std::string greedy = greedy_text("--checkpoint-dir " + dir, 20);
  EXPECT_EQ(greedy, "the cat sat. the cat sat.\n");
  EXPECT_EQ(greedy_text("--checkpoint-dir " + dir, 100), text.substr(0, 105) + "\n");
  // Export, and generation from the exported weights.
  const CmdResult ex = memwall("export --checkpoint-dir " + dir + " --out " + hf, false);
  ASSERT_EQ(ex.exit_code, 0) << ex.output;
  std::ifstream cf(hf + "/config.json");
  const nlohmann::json config = nlohmann::json::parse(cf);
  EXPECT_EQ(config["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(config["num_key_value_heads"], 2);
  EXPECT_EQ(config["intermediate_size"], 176);
  EXPECT_EQ(config["tie_word_embeddings"], false);
  EXPECT_EQ(config["rms_norm_eps"], 1e-5);
  EXPECT_EQ(config["rope_scaling"], (nlohmann::json{{"rope_type", "llama3"},
                                                    {"factor", 8.0},
                                                    {"low_freq_factor", 1.0},
                                                    {"high_freq_factor", 4.0},
                                                    {"original_max_position_embeddings", 64}}));
  std::ifstream lf(dir + "/latest.json");
  EXPECT_EQ(nlohmann::json::parse(lf)["rope_scaling"], config["rope_scaling"]);
  EXPECT_EQ(greedy_text("--weights " + hf, 20), greedy);
  // YaRN's rope_scaling (Qwen2.5's long-context setting) trains, exports and generates alike; dynamic NTK's
  // trains within max_position_embeddings and is refused past it.
  const std::string yarn_dir = test_path("ckpt-yarn").string(), yarn_hf = test_path("yarn-hf").string();
  std::filesystem::remove_all(yarn_dir);
  std::filesystem::remove_all(yarn_hf);
  const std::string small =
      "\"num_hidden_layers\": 1, \"hidden_size\": 64, \"num_attention_heads\": 4, \"intermediate_size\": "
      "176, "
      "\"max_position_embeddings\": 64, ";
  const CmdResult yarn =
      memwall("train --steps 40 --eval-batches 1 --checkpoint-dir " + yarn_dir + " --data " + data +
                  " --model llama-mini --model-set '{\"model_type\": \"qwen2\", " + small +
                  "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0, "
                  "\"original_max_position_embeddings\": 16}}'",
              false);
  ASSERT_EQ(yarn.exit_code, 0) << yarn.output;
  ASSERT_EQ(memwall("export --checkpoint-dir " + yarn_dir + " --out " + yarn_hf).exit_code, 0);
  std::ifstream ycf(yarn_hf + "/config.json");
  const nlohmann::json yarn_config = nlohmann::json::parse(ycf);
  EXPECT_EQ(yarn_config["rope_scaling"]["rope_type"], "yarn");
  EXPECT_EQ(yarn_config["rope_scaling"]["original_max_position_embeddings"], 16);
  EXPECT_EQ(greedy_text("--weights " + yarn_hf, 20), greedy_text("--checkpoint-dir " + yarn_dir, 20));
  const std::string dynamic = "train --steps 1 --eval-batches 1 --data " + data +
                              " --model llama-mini --model-set '{" + small +
                              "\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}}'";
  EXPECT_EQ(memwall(dynamic).exit_code, 0);
  const CmdResult past = memwall(dynamic + " --set '{\"memwall\": {\"sequence_length\": 128}}'");
  EXPECT_EQ(past.exit_code, 2) << past.output;
  EXPECT_NE(past.output.find("rope_scaling dynamic raises the rotary base with a sequence past "
                             "max_position_embeddings (64)"),
            std::string::npos)
      << past.output;
  std::filesystem::remove_all(yarn_dir);
  std::filesystem::remove_all(yarn_hf);
  // A Mistral window shorter than the sequence (16 of 64 positions) trains over that window, is kept by the
  // checkpoint, exported as Mistral's config.json, and generates the same text from either (20 new tokens:
  // the decoder's window slides too).
  const std::string window_dir = test_path("ckpt-window").string(),
                    window_hf = test_path("window-hf").string();
  std::filesystem::remove_all(window_dir);
  std::filesystem::remove_all(window_hf);
  const CmdResult windowed =
      memwall("train --steps 40 --eval-batches 1 --checkpoint-dir " + window_dir + " --data " + data +
                  " --model llama-mini --model-set '{\"model_type\": \"mistral\", \"sliding_window\": 16, " +
                  small.substr(0, small.size() - 2) + "}'",
              false);
  ASSERT_EQ(windowed.exit_code, 0) << windowed.output;
  EXPECT_EQ(windowed.output.find("sliding window"), std::string::npos) << windowed.output;
  std::ifstream wlf(window_dir + "/latest.json");
  EXPECT_EQ(nlohmann::json::parse(wlf)["sliding_window"], 16);
  ASSERT_EQ(memwall("export --checkpoint-dir " + window_dir + " --out " + window_hf).exit_code, 0);
  std::ifstream wcf(window_hf + "/config.json");
  const nlohmann::json window_config = nlohmann::json::parse(wcf);
  EXPECT_EQ(window_config["model_type"], "mistral");
  EXPECT_EQ(window_config["architectures"][0], "MistralForCausalLM");
  EXPECT_EQ(window_config["sliding_window"], 16);
  EXPECT_EQ(greedy_text("--weights " + window_hf, 20), greedy_text("--checkpoint-dir " + window_dir, 20));
  std::filesystem::remove_all(window_dir);
  std::filesystem::remove_all(window_hf);
  // Its checkpoint is not a GPT-2's.
  const CmdResult r =
      memwall("train --steps 301 --resume --checkpoint-dir " + dir + " --data " + data + " " + kTinyModel);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("checkpoint has arch = \"llama\", this run has \"gpt2\""), std::string::npos)
      << r.output;
  // A rope_scaling memwall's kernels do not implement: one line naming it.
  const CmdResult su = memwall(
      "train --steps 1 --data " + data +
      " --model llama-mini --model-set '{\"rope_scaling\": {\"rope_type\": \"su\", \"factor\": 4.0}}'");
  EXPECT_EQ(su.exit_code, 2) << su.output;
  EXPECT_NE(su.output.find("rope_scaling type \"su\" is not supported by memwall train; allowed: "
                           "linear, llama3, yarn, dynamic, longrope, or none"),
            std::string::npos)
      << su.output;
}

// A Llama-shaped family trained on the repeated sentence, exported, and read back: what each check needs.
struct ShapeRoundTrip {
  std::string data, dir, hf;               // the text, the checkpoint, the export
  nlohmann::json latest, config, tensors;  // latest.json, config.json, the safetensors header
};

// Trains a model of `model_set` (--model-set keys on `base`) on "the cat sat. " repeated, `steps` steps,
// checks it learned it (held-out loss under 0.2, the sentence greedily from the checkpoint and from the
// export alike), and exports it to `name`-hf.
ShapeRoundTrip train_export_generate(const std::string& name, const std::string& model_set,
                                     const std::string& base = "llama-mini", int steps = 150,
                                     const std::string& run_set = "") {
  ShapeRoundTrip r;
  std::string text;
  for (int i = 0; i < 4000; ++i) text += "the cat sat. ";
  r.data = write_file("cat-" + name + ".txt", text);
  r.dir = test_path("ckpt-" + name).string();
  r.hf = test_path(name + "-hf").string();
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
  const CmdResult t = memwall(
      "train --steps " + std::to_string(steps) + " --log-every " + std::to_string(steps) +
          " --eval-batches 1 --json --checkpoint-dir " + r.dir + " --data " + r.data + " --model " + base +
          " --model-set '" + model_set + "'" + (run_set.empty() ? std::string() : " --set '" + run_set + "'"),
      false);
  EXPECT_EQ(t.exit_code, 0) << t.output;
  if (t.exit_code != 0) return r;
  EXPECT_LT(static_cast<double>(train_json_summary(t.output)["val_loss"]), 0.2) << t.output;
  std::ifstream lf(r.dir + "/latest.json");
  r.latest = nlohmann::json::parse(lf);
  EXPECT_EQ(memwall("export --checkpoint-dir " + r.dir + " --out " + r.hf).exit_code, 0);
  std::ifstream cf(r.hf + "/config.json");
  r.config = nlohmann::json::parse(cf);
  std::ifstream st(r.hf + "/model.safetensors", std::ios::binary);
  std::uint64_t header_bytes = 0;
  st.read(reinterpret_cast<char*>(&header_bytes), 8);
  std::string header(header_bytes, '\0');
  st.read(header.data(), static_cast<std::streamsize>(header_bytes));
  r.tensors = nlohmann::json::parse(header);
  const std::string greedy = greedy_text("--checkpoint-dir " + r.dir, 20);
  EXPECT_EQ(greedy, "the cat sat. the cat sat.\n");
  EXPECT_EQ(greedy_text("--weights " + r.hf, 20), greedy);
  return r;
}

// memwall train refuses llama-mini with `model_set` in one line containing `needle` (exit code 2).
void expect_train_refuses(const std::string& data, const std::string& model_set, const std::string& needle) {
  const CmdResult r =
      memwall("train --steps 1 --data " + data + " --model llama-mini --model-set '" + model_set + "'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
}

// OPT's shape (ReLU, a position table read from row 2, OPT's tensor names) cut to one layer of 64 trains on
// opt-175b's file, is kept by the checkpoint, exports as OPTForCausalLM and generates the same text from
// either.
TEST(CliGenerate, AnOptShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r =
      train_export_generate("opt",
                            R"({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4,
                                "ffn_dim": 256, "word_embed_proj_dim": 64, "max_position_embeddings": 64})",
                            "opt-175b", 200);  // (0.22 after 150 steps, 0.03 after 200)
  EXPECT_EQ(r.latest["arch"], "opt");
  EXPECT_EQ(r.config["architectures"][0], "OPTForCausalLM");
  EXPECT_EQ(r.config["activation_function"], "relu");
  EXPECT_EQ(r.config["ffn_dim"], 256);
  EXPECT_EQ(r.tensors["model.decoder.embed_positions.weight"]["shape"], (nlohmann::json{64 + 2, 64}));
  EXPECT_EQ(r.tensors["model.decoder.layers.0.self_attn.q_proj.weight"]["shape"], (nlohmann::json{64, 64}));
  EXPECT_EQ(r.tensors["model.decoder.layers.0.fc2.weight"]["shape"], (nlohmann::json{64, 256}));
  // OPT with another activation is refused rather than trained with ReLU, by train and by generate.
  const CmdResult gelu = memwall("train --steps 1 --data " + r.data +
                                 R"( --model opt-175b --model-set '{"activation_function": "gelu"}')");
  EXPECT_EQ(gelu.exit_code, 2) << gelu.output;
  EXPECT_NE(gelu.output.find("activation_function \"gelu\" is not supported by memwall train for OPT; "
                             "allowed: relu"),
            std::string::npos)
      << gelu.output;
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// GPT-NeoX's shape (Pythia's: rotary on a quarter of each head, attention and MLP side by side, an untied
// head) cut to one layer of 64 trains on pythia-160m's file, is kept by the checkpoint, exports as
// GPTNeoXForCausalLM (query_key_value head by head, read back by generate --weights) and generates the same
// text from either; NeoX with an activation it does not have is refused.
TEST(CliGenerate, AGptNeoxShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "neox",
      R"({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 256,
          "max_position_embeddings": 64})",
      "pythia-160m", 200);
  EXPECT_EQ(r.latest["arch"], "neox");
  EXPECT_EQ(r.latest["parallel_residual"], true);
  EXPECT_EQ(r.latest["tied"], false);
  EXPECT_EQ(r.config["architectures"][0], "GPTNeoXForCausalLM");
  EXPECT_EQ(r.config["rotary_pct"], 0.25);
  EXPECT_EQ(r.config["use_parallel_residual"], true);
  EXPECT_EQ(r.config["hidden_act"], "gelu");
  EXPECT_EQ(r.tensors["gpt_neox.layers.0.attention.query_key_value.weight"]["shape"],
            (nlohmann::json{192, 64}));
  EXPECT_EQ(r.tensors["embed_out.weight"]["shape"], (nlohmann::json{256, 64}));
  EXPECT_FALSE(r.tensors.contains("gpt_neox.embed_positions.weight"));
  // The same weights as PyTorch's pytorch_model.bin (torch.save, when python3-torch is installed) generate
  // the same text.
  const std::string writer = std::string(MEMWALL_TEST_SOURCE_DIR) + "/engine/torch_bin_writer.py";
  const int rc = std::system(("/usr/bin/python3 " + writer + " " + r.hf + " f32").c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 0) {
    const std::string greedy = greedy_text("--weights " + r.hf, 20);
    std::filesystem::remove(r.hf + "/model.safetensors");
    EXPECT_EQ(greedy_text("--weights " + r.hf, 20), greedy);
  }
  const CmdResult relu = memwall("train --steps 1 --data " + r.data +
                                 R"( --model pythia-160m --model-set '{"hidden_act": "relu"}')");
  EXPECT_EQ(relu.exit_code, 2) << relu.output;
  EXPECT_NE(relu.output.find("hidden_act \"relu\" is not supported by memwall train for GPT-NeoX"),
            std::string::npos)
      << relu.output;
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// Phi-2's shape (one norm before the attention and the MLP side by side, rotary on 40% of each head, a bias
// on the untied head) cut to one layer of 64 trains on phi-2's file, is kept by the checkpoint, exports as
// PhiForCausalLM and generates the same text from either; grouped-query Phi is refused.
TEST(CliGenerate, APhiShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "phi",
      R"({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
          "intermediate_size": 256, "max_position_embeddings": 64})",
      "phi-2", 200);
  EXPECT_EQ(r.latest["arch"], "phi");
  EXPECT_EQ(r.config["architectures"][0], "PhiForCausalLM");
  EXPECT_EQ(r.config["partial_rotary_factor"], 0.4);
  EXPECT_EQ(r.config["hidden_act"], "gelu_new");
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.v_proj.weight"]["shape"], (nlohmann::json{64, 64}));
  EXPECT_EQ(r.tensors["lm_head.bias"]["shape"], (nlohmann::json{256}));
  EXPECT_FALSE(r.tensors.contains("model.layers.0.post_attention_layernorm.weight"));
  const CmdResult gqa = memwall("train --steps 1 --data " + r.data +
                                R"( --model phi-2 --model-set '{"num_key_value_heads": 8}')");
  EXPECT_EQ(gqa.exit_code, 2) << gqa.output;
  EXPECT_NE(gqa.output.find("num_key_value_heads 8 (grouped-query attention) is not supported by memwall "
                            "train for Phi"),
            std::string::npos)
      << gqa.output;
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// Falcon-7B's shape (one key/value head, one norm before the attention and the MLP side by side, no biases,
// a tied head) cut to one layer of 64 trains on falcon-7b's file, is kept by the checkpoint, exports as
// FalconForCausalLM and generates the same text from either; so does the new decoder architecture's (two
// key/value heads, two norms) and Falcon-RW's (ALiBi, in sequence, biases).
TEST(CliGenerate, AFalconShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "falcon",
      R"({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 64})",
      "falcon-7b", 200);
  EXPECT_EQ(r.latest["arch"], "falcon");
  EXPECT_EQ(r.latest["one_norm"], true);
  EXPECT_EQ(r.latest["no_bias"], true);
  EXPECT_EQ(r.config["architectures"][0], "FalconForCausalLM");
  EXPECT_EQ(r.config["multi_query"], true);
  EXPECT_EQ(r.config["new_decoder_architecture"], false);
  EXPECT_EQ(r.tensors["transformer.h.0.self_attention.query_key_value.weight"]["shape"],
            (nlohmann::json{96, 64}));
  EXPECT_FALSE(r.tensors.contains("transformer.h.0.self_attention.dense.bias"));
  const ShapeRoundTrip n = train_export_generate(
      "falcon-new",
      R"({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "new_decoder_architecture": true,
          "num_kv_heads": 2, "max_position_embeddings": 64})",
      "falcon-7b", 200);
  EXPECT_EQ(n.config["new_decoder_architecture"], true);
  EXPECT_EQ(n.config["num_kv_heads"], 2);
  EXPECT_EQ(n.tensors["transformer.h.0.ln_mlp.weight"]["shape"], (nlohmann::json{64}));
  const ShapeRoundTrip rw = train_export_generate(
      "falcon-rw",
      R"({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 64,
          "alibi": true, "parallel_attn": false, "multi_query": false, "bias": true})",
      "falcon-7b", 200);
  EXPECT_EQ(rw.latest["alibi"], true);
  EXPECT_EQ(rw.config["alibi"], true);
  EXPECT_EQ(rw.tensors["transformer.h.0.self_attention.dense.bias"]["shape"], (nlohmann::json{64}));
  for (const ShapeRoundTrip* t : {&r, &n, &rw}) {
    std::filesystem::remove_all(t->dir);
    std::filesystem::remove_all(t->hf);
  }
}

// BLOOM's shape (ALiBi instead of positions, a LayerNorm of the embedding) cut to one layer of 64 trains on
// bloom-560m's file (its seq_length the run's sequence), is kept by the checkpoint, exports as
// BloomForCausalLM (query_key_value head by head, the embedding's norm) and generates the same text from
// either.
TEST(CliGenerate, ABloomShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "bloom", R"({"n_layer": 1, "hidden_size": 64, "n_head": 4, "seq_length": 64})", "bloom-560m", 200);
  EXPECT_EQ(r.latest["arch"], "bloom");
  EXPECT_EQ(r.config["architectures"][0], "BloomForCausalLM");
  EXPECT_EQ(r.config["n_layer"], 1);
  EXPECT_EQ(r.tensors["transformer.h.0.self_attention.query_key_value.weight"]["shape"],
            (nlohmann::json{192, 64}));
  EXPECT_EQ(r.tensors["transformer.word_embeddings_layernorm.bias"]["shape"], (nlohmann::json{64}));
  EXPECT_FALSE(r.tensors.contains("lm_head.weight"));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// MPT's shape (ALiBi, no biases at all, an MLP of expansion_ratio x d_model) cut to one layer of 64 trains on
// mpt-7b's file, is kept by the checkpoint, exports as MptForCausalLM (Wqkv, norms without biases) and
// generates the same text from either; learned positions (alibi false) are refused in one line.
TEST(CliGenerate, AnMptShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "mpt", R"({"n_layers": 1, "d_model": 64, "n_heads": 4, "max_seq_len": 64, "expansion_ratio": 2})",
      "mpt-7b", 200);
  EXPECT_EQ(r.latest["arch"], "mpt");
  EXPECT_EQ(r.latest["ffn"], 128);
  EXPECT_EQ(r.config["architectures"][0], "MptForCausalLM");
  EXPECT_EQ(r.config["expansion_ratio"], 2);
  EXPECT_EQ(r.tensors["transformer.blocks.0.attn.Wqkv.weight"]["shape"], (nlohmann::json{192, 64}));
  EXPECT_EQ(r.tensors["transformer.blocks.0.ffn.up_proj.weight"]["shape"], (nlohmann::json{128, 64}));
  EXPECT_FALSE(r.tensors.contains("transformer.blocks.0.norm_1.bias"));
  EXPECT_FALSE(r.tensors.contains("lm_head.weight"));
  expect_bad_input("train --steps 1 --data " + r.data +
                       R"( --model mpt-7b --model-set '{"attn_config": {"alibi": false}}')",
                   "attn_config.alibi false (learned positions) is not supported by memwall train");
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// StableLM's shape (the Llama shape with LayerNorms that have biases, rotary on a quarter of each head, q, k
// and v biases as StableLM 2's) cut to one layer of 64 trains on stablelm-3b-4e1t's file, is kept by the
// checkpoint, exports as StableLmForCausalLM and generates the same text from either.
TEST(CliGenerate, AStablelmShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "stablelm",
      R"({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 128, "max_position_embeddings": 64, "use_qkv_bias": true})",
      "stablelm-3b-4e1t", 200);
  EXPECT_EQ(r.latest["arch"], "stablelm");
  EXPECT_EQ(r.config["architectures"][0], "StableLmForCausalLM");
  EXPECT_EQ(r.config["partial_rotary_factor"], 0.25);
  EXPECT_EQ(r.config["use_qkv_bias"], true);
  EXPECT_EQ(r.tensors["model.layers.0.input_layernorm.bias"]["shape"], (nlohmann::json{64}));
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.k_proj.bias"]["shape"], (nlohmann::json{32}));
  EXPECT_EQ(r.tensors["model.norm.bias"]["shape"], (nlohmann::json{64}));
  EXPECT_FALSE(r.tensors.contains("model.layers.0.self_attn.o_proj.bias"));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// StableLM 2 12B's shape (the attention and the MLP side by side after one LayerNorm, a LayerNorm of each
// query and key head with its own weight) cut to one layer of 64 (4 query heads on 2 key/value heads) trains
// on stablelm-2-12b's file, is kept by the checkpoint, exports as StableLmForCausalLM and generates the same
// text from either.
TEST(CliGenerate, AStablelm2_12bShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "stablelm-12b",
      R"({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 128, "max_position_embeddings": 64})",
      "stablelm-2-12b", 200);
  EXPECT_EQ(r.latest["arch"], "stablelm");
  EXPECT_EQ(r.latest["qk_layernorm"], true);
  EXPECT_EQ(r.latest["parallel_residual"], true);
  EXPECT_EQ(r.config["use_parallel_residual"], true);
  EXPECT_EQ(r.config["qk_layernorm"], true);
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.q_layernorm.norms.3.weight"]["shape"], (nlohmann::json{16}));
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.k_layernorm.norms.1.weight"]["shape"], (nlohmann::json{16}));
  EXPECT_FALSE(r.tensors.contains("model.layers.0.self_attn.k_layernorm.norms.2.weight"));
  EXPECT_FALSE(r.tensors.contains("model.layers.0.post_attention_layernorm.weight"));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// Command R's shape (one LayerNorm without bias before the attention and the MLP side by side, rotary on
// neighbouring pairs, a tied head, logits scaled; here with Command R+'s per-head q/k LayerNorms, and a
// logit_scale of 0.25 for 0.0625, whose 16-fold smaller logits the 200 steps do not outgrow) cut to one layer
// of 64 trains on command-r-35b's file, is kept by the checkpoint, exports as CohereForCausalLM and generates
// the same text from either.
TEST(CliGenerate, ACohereShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "cohere",
      R"({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 128, "max_position_embeddings": 64, "use_qk_norm": true, "logit_scale": 0.25})",
      "command-r-35b", 200);
  EXPECT_EQ(r.latest["arch"], "cohere");
  EXPECT_EQ(r.latest["logit_scale"], 0.25);
  EXPECT_EQ(r.config["architectures"][0], "CohereForCausalLM");
  EXPECT_EQ(r.config["logit_scale"], 0.25);
  EXPECT_EQ(r.config["use_qk_norm"], true);
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.q_norm.weight"]["shape"], (nlohmann::json{4, 16}));
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.k_norm.weight"]["shape"], (nlohmann::json{2, 16}));
  EXPECT_FALSE(r.tensors.contains("model.layers.0.input_layernorm.bias"));
  EXPECT_FALSE(r.tensors.contains("model.layers.0.post_attention_layernorm.weight"));
  EXPECT_FALSE(r.tensors.contains("lm_head.weight"));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// SmolLM3's shape (the Llama shape, tied, every fourth layer without rotary positions) cut to four layers of
// 64 trains on smollm3-3b's file, is kept by the checkpoint, exports as SmolLM3ForCausalLM (no_rope_layers
// [1, 1, 1, 0]) and generates the same text from either.
TEST(CliGenerate, ASmolLM3ShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "smollm3",
      R"({"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 128, "max_position_embeddings": 64})",
      "smollm3-3b", 200);
  EXPECT_EQ(r.latest["arch"], "llama");
  EXPECT_EQ(r.latest["nope_every"], 4);
  EXPECT_EQ(r.config["architectures"][0], "SmolLM3ForCausalLM");
  EXPECT_EQ(r.config["no_rope_layers"], (nlohmann::json{1, 1, 1, 0}));
  EXPECT_EQ(r.config["no_rope_layer_interval"], 4);
  EXPECT_EQ(r.config["tie_word_embeddings"], true);
  EXPECT_FALSE(r.tensors.contains("lm_head.weight"));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// StarCoder2's shape (GPT-2's block with grouped-query attention, rotary positions and a window on every
// layer) cut to two layers of 64 with an 8-token window trains on starcoder2-3b's file, is kept by the
// checkpoint, exports as Starcoder2ForCausalLM (q_proj, k_proj, v_proj, mlp.c_fc) and generates the same text
// from either (past the window).
TEST(CliGenerate, AStarCoder2ShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "starcoder2",
      R"({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 128, "max_position_embeddings": 64, "sliding_window": 8})",
      "starcoder2-3b", 200);
  EXPECT_EQ(r.latest["arch"], "starcoder2");
  EXPECT_EQ(r.latest["sliding_window"], 8);
  EXPECT_EQ(r.latest["kv_heads"], 2);
  EXPECT_EQ(r.config["architectures"][0], "Starcoder2ForCausalLM");
  EXPECT_EQ(r.config["sliding_window"], 8);
  EXPECT_EQ(r.config["use_bias"], true);
  EXPECT_EQ(r.tensors["model.layers.1.self_attn.k_proj.weight"]["shape"], (nlohmann::json{32, 64}));
  EXPECT_EQ(r.tensors["model.layers.1.mlp.c_fc.bias"]["shape"], (nlohmann::json{128}));
  EXPECT_TRUE(r.tensors.contains("model.norm.bias"));
  EXPECT_FALSE(r.tensors.contains("lm_head.weight"));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// Nemotron's shape (GPT-2's block with grouped-query attention, rotary positions on half of each head,
// LayerNorm1P and the squared ReLU) cut to two layers of 64 in heads of 32 (Minitron-8B's wider heads) trains
// on nemotron-mini-4b's file, is kept by the checkpoint, exports as NemotronForCausalLM (q_proj, k_proj,
// v_proj, mlp.up_proj, mlp.down_proj, no biases on the linears, the LayerNorms' weights as stored: 1 + weight
// scales) and generates the same text.
TEST(CliGenerate, ANemotronShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "nemotron",
      R"({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 32, "intermediate_size": 128, "max_position_embeddings": 64})",
      "nemotron-mini-4b", 200);
  EXPECT_EQ(r.latest["arch"], "nemotron");
  EXPECT_EQ(r.latest["head_dim"], 32);  // (Minitron-8B's heads of their own size: 128 query channels)
  EXPECT_EQ(r.config["head_dim"], 32);
  EXPECT_EQ(r.tensors["model.layers.1.self_attn.q_proj.weight"]["shape"], (nlohmann::json{128, 64}));
  EXPECT_EQ(r.tensors["model.layers.1.self_attn.o_proj.weight"]["shape"], (nlohmann::json{64, 128}));
  EXPECT_EQ(r.latest["kv_heads"], 2);
  EXPECT_EQ(r.latest["norm_unit_offset"], true);
  EXPECT_EQ(r.config["architectures"][0], "NemotronForCausalLM");
  EXPECT_EQ(r.config["hidden_act"], "relu2");
  EXPECT_EQ(r.config["partial_rotary_factor"], 0.5);
  EXPECT_EQ(r.config["attention_bias"], false);
  EXPECT_EQ(r.tensors["model.layers.1.self_attn.k_proj.weight"]["shape"], (nlohmann::json{64, 64}));
  EXPECT_EQ(r.tensors["model.layers.1.mlp.up_proj.weight"]["shape"], (nlohmann::json{128, 64}));
  EXPECT_EQ(r.tensors["model.layers.1.mlp.down_proj.weight"]["shape"], (nlohmann::json{64, 128}));
  EXPECT_FALSE(r.tensors.contains("model.layers.1.mlp.up_proj.bias"));
  EXPECT_TRUE(r.tensors.contains("model.layers.0.input_layernorm.bias"));
  EXPECT_TRUE(r.tensors.contains("lm_head.weight"));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// Seed-OSS's shape (q/k/v biases, heads of head_dim) cut to two layers of 64 in heads of 32 trains on
// seed-oss-36b's file, and exports as Qwen2ForCausalLM (the same equations: no bias on o_proj) that
// generates the same text.
TEST(CliGenerate, ASeedOssShapedModelTrainsAndExportsAsQwen2) {
  const ShapeRoundTrip r = train_export_generate(
      "seed_oss",
      R"({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 32, "intermediate_size": 128, "max_position_embeddings": 64})",
      "seed-oss-36b", 150);
  EXPECT_EQ(r.latest["qkv_bias"], true);
  EXPECT_EQ(r.config["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_EQ(r.tensors["model.layers.1.self_attn.q_proj.bias"]["shape"], (nlohmann::json{128}));
  EXPECT_FALSE(r.tensors.contains("model.layers.1.self_attn.o_proj.bias"));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// GLM-4's shape (q/k/v biases, rotary on neighbouring pairs of the first half of each head, RMSNorms before
// and after the attention and the MLP) cut to two layers of 64 in heads of 16 trains on glm-4-9b-0414's file,
// is kept by the checkpoint, exports as Glm4ForCausalLM (gate_up_proj, GLM-4's norm names) and generates the
// same text from either; GLM's (glm-4-9b-chat-hf) exports as GlmForCausalLM with two norms a layer.
TEST(CliGenerate, GlmShapedModelsTrainGenerateAndExport) {
  const std::string shape =
      R"({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "intermediate_size": 128, "max_position_embeddings": 64})";
  const ShapeRoundTrip r = train_export_generate("glm4", shape, "glm-4-9b-0414", 200);
  EXPECT_EQ(r.latest["arch"], "llama");
  EXPECT_EQ(r.latest["glm"], true);
  EXPECT_EQ(r.latest["sandwich_norm"], true);
  EXPECT_EQ(r.config["architectures"][0], "Glm4ForCausalLM");
  EXPECT_EQ(r.config["partial_rotary_factor"], 0.5);
  EXPECT_EQ(r.config["attention_bias"], true);
  EXPECT_EQ(r.tensors["model.layers.0.mlp.gate_up_proj.weight"]["shape"], (nlohmann::json{256, 64}));
  EXPECT_EQ(r.tensors["model.layers.1.self_attn.k_proj.bias"]["shape"], (nlohmann::json{32}));
  EXPECT_TRUE(r.tensors.contains("model.layers.1.post_self_attn_layernorm.weight"));
  EXPECT_TRUE(r.tensors.contains("model.layers.1.post_mlp_layernorm.weight"));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
  const ShapeRoundTrip v1 = train_export_generate("glm", shape, "glm-4-9b-chat-hf", 200);
  EXPECT_EQ(v1.latest["sandwich_norm"], false);
  EXPECT_EQ(v1.config["architectures"][0], "GlmForCausalLM");
  EXPECT_EQ(v1.config["rms_norm_eps"], 1.5625e-07);
  EXPECT_FALSE(v1.tensors.contains("model.layers.1.post_mlp_layernorm.weight"));
  EXPECT_TRUE(v1.tensors.contains("model.layers.1.post_attention_layernorm.weight"));
  std::filesystem::remove_all(v1.dir);
  std::filesystem::remove_all(v1.hf);
}

// OLMo 3's shape (OLMo 2's norms after the sublayers and q/k norms over all the heads, a window on all layers
// but every fourth, which turn without the global layers' YaRN) cut to four layers of 64 with an 8-token
// window trains on olmo-3-7b's file, is kept by the checkpoint, exports as Olmo3ForCausalLM and generates the
// same text from either (past the window).
TEST(CliGenerate, AnOlmo3ShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "olmo3",
      R"({"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 128, "max_position_embeddings": 64, "sliding_window": 8,
          "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}})",
      "olmo-3-7b", 200);
  EXPECT_EQ(r.latest["arch"], "llama");
  EXPECT_EQ(r.latest["sliding_window"], 8);
  EXPECT_EQ(r.latest["global_every"], 4);
  EXPECT_EQ(r.config["architectures"][0], "Olmo3ForCausalLM");
  EXPECT_EQ(r.config["sliding_window"], 8);
  EXPECT_EQ(r.config["layer_types"], (nlohmann::json{"sliding_attention", "sliding_attention",
                                                     "sliding_attention", "full_attention"}));
  EXPECT_EQ(r.config["rope_scaling"]["rope_type"], "yarn");
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.k_norm.weight"]["shape"], (nlohmann::json{32}));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// EXAONE 4's shape (OLMo 2's norms after the sublayers, a norm of each query and key head, a window on every
// layer but each sliding_window_pattern-th, rotary on the windowed layers only) cut to two layers of 64, an
// 8-token window on the first, trains on exaone-4.0-32b's file, is kept by the checkpoint, exports as
// Exaone4ForCausalLM and generates the same text from either (past the window).
TEST(CliGenerate, AnExaone4ShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "exaone4",
      R"({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "intermediate_size": 128, "max_position_embeddings": 64, "rope_scaling": null,
          "sliding_window": 8, "sliding_window_pattern": "LG"})",
      "exaone-4.0-32b", 200);
  EXPECT_EQ(r.latest["arch"], "llama");
  EXPECT_EQ(r.latest["post_norm"], true);
  EXPECT_EQ(r.latest["rope_windowed_only"], true);
  EXPECT_EQ(r.config["architectures"][0], "Exaone4ForCausalLM");
  EXPECT_EQ(r.config["sliding_window"], 8);
  EXPECT_EQ(r.config["layer_types"], (nlohmann::json{"sliding_attention", "full_attention"}));
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.q_norm.weight"]["shape"], (nlohmann::json{16}));
  EXPECT_TRUE(r.tensors.contains("model.layers.1.post_feedforward_layernorm.weight"));
  EXPECT_FALSE(r.tensors.contains("model.layers.0.input_layernorm.weight"));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// Granite's shape (the Llama shape with its multipliers: embedding x 12, scores x 1/16 for a head of 16,
// sublayer outputs x 0.22, logits / 4) cut to one layer of 64 trains on granite-3.3-8b's file, is kept by the
// checkpoint, exports as GraniteForCausalLM and generates the same text from either.
TEST(CliGenerate, AGraniteShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "granite",
      R"({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 128, "max_position_embeddings": 64, "attention_multiplier": 0.0625,
          "logits_scaling": 4.0})",
      "granite-3.3-8b", 200);
  EXPECT_EQ(r.latest["arch"], "llama");
  EXPECT_EQ(r.latest["granite"], true);
  EXPECT_EQ(r.latest["residual_multiplier"], 0.22);
  EXPECT_EQ(r.config["architectures"][0], "GraniteForCausalLM");
  EXPECT_EQ(r.config["embedding_multiplier"], 12.0);
  EXPECT_EQ(r.config["attention_multiplier"], 0.0625);
  EXPECT_EQ(r.config["residual_multiplier"], 0.22);
  EXPECT_EQ(r.config["logits_scaling"], 4.0);
  EXPECT_FALSE(r.tensors.contains("lm_head.weight"));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// Command R7B's shape (Cohere2: Cohere's block without q/k norms, a window on every layer but each
// sliding_window_pattern-th, rotary positions on the windowed layers only) cut to two layers of 64, an
// 8-token window on the first, the second global without positions, trains on command-r7b's file, is kept by
// the checkpoint, exports as Cohere2ForCausalLM and generates the same text from either (past the window: the
// decoder's ring of keys).
TEST(CliGenerate, ACohere2ShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "cohere2",
      R"({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "intermediate_size": 128, "max_position_embeddings": 64, "sliding_window": 8,
          "sliding_window_pattern": 2})",
      "command-r7b", 200);
  EXPECT_EQ(r.latest["arch"], "cohere");
  EXPECT_EQ(r.latest["rope_windowed_only"], true);
  EXPECT_EQ(r.latest["sliding_window"], 8);
  EXPECT_EQ(r.config["architectures"][0], "Cohere2ForCausalLM");
  EXPECT_EQ(r.config["sliding_window"], 8);
  EXPECT_EQ(r.config["sliding_window_pattern"], 2);
  EXPECT_EQ(r.config["layer_types"], (nlohmann::json{"sliding_attention", "full_attention"}));
  EXPECT_EQ(r.config["logit_scale"], 0.25);
  EXPECT_FALSE(r.tensors.contains("model.layers.0.self_attn.q_norm.weight"));
  EXPECT_FALSE(r.tensors.contains("lm_head.weight"));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// OLMo 1.7's shape (the Llama shape with LayerNorms that have no weight or bias, q, k and v clamped: here at
// 0.5, which changes the losses) cut to one layer of 64 trains on olmo-1.7-7b's file, is kept by the
// checkpoint, exports as OlmoForCausalLM (no norm tensors, clip_qkv kept) and generates the same text from
// either; a negative clip_qkv is refused in one line.
TEST(CliGenerate, AnOlmoShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "olmo",
      R"({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
          "intermediate_size": 128, "max_position_embeddings": 64, "clip_qkv": 0.5})",
      "olmo-1.7-7b", 200);
  EXPECT_EQ(r.latest["arch"], "olmo");
  EXPECT_EQ(r.latest["clip_qkv"], 0.5);
  EXPECT_EQ(r.config["architectures"][0], "OlmoForCausalLM");
  EXPECT_EQ(r.config["clip_qkv"], 0.5);
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.q_proj.weight"]["shape"], (nlohmann::json{64, 64}));
  for (const auto& [name, tensor] : r.tensors.items())
    EXPECT_EQ(name.find("norm"), std::string::npos) << name;
  expect_bad_input("train --steps 1 --data " + r.data + R"( --model olmo-7b --model-set '{"clip_qkv": -1}')",
                   "clip_qkv");
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// OLMo 2's shape (RMSNorms after the attention and the MLP, none before; q/k norms over all heads) cut to one
// layer of 64 trains on olmo-2-32b's file (grouped-query attention: 4 query heads on 2 key/value heads, so
// k_norm is half q_norm's width), is kept by the checkpoint, exports as Olmo2ForCausalLM and generates the
// same text from either.
TEST(CliGenerate, AnOlmo2ShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "olmo2",
      R"({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 128, "max_position_embeddings": 64})",
      "olmo-2-32b", 200);
  EXPECT_EQ(r.latest["arch"], "llama");
  EXPECT_EQ(r.latest["post_norm"], true);
  EXPECT_EQ(r.latest["qk_norm_full"], true);
  EXPECT_EQ(r.config["architectures"][0], "Olmo2ForCausalLM");
  EXPECT_EQ(r.config["rms_norm_eps"], 1e-6);
  EXPECT_EQ(r.config["num_key_value_heads"], 2);
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.q_norm.weight"]["shape"], (nlohmann::json{64}));
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.k_norm.weight"]["shape"], (nlohmann::json{32}));
  EXPECT_EQ(r.tensors["model.layers.0.post_feedforward_layernorm.weight"]["shape"], (nlohmann::json{64}));
  EXPECT_FALSE(r.tensors.contains("model.layers.0.input_layernorm.weight"));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// GPT-J's shape (rotary on part of each head in neighbouring pairs, attention and MLP side by side after one
// norm, biases on the MLP only, an untied head with a bias) cut to one layer of 64 trains on gpt-j-6b's file,
// is kept by the checkpoint, exports as GPTJForCausalLM and generates the same text from either.
TEST(CliGenerate, AGptjShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "gptj", R"({"n_layer": 1, "n_embd": 64, "n_head": 4, "rotary_dim": 8, "n_positions": 64})", "gpt-j-6b",
      200);
  EXPECT_EQ(r.latest["arch"], "gptj");
  EXPECT_EQ(r.config["architectures"][0], "GPTJForCausalLM");
  EXPECT_EQ(r.config["rotary_dim"], 8);
  EXPECT_EQ(r.tensors["transformer.h.0.attn.k_proj.weight"]["shape"], (nlohmann::json{64, 64}));
  EXPECT_FALSE(r.tensors.contains("transformer.h.0.attn.out_proj.bias"));
  EXPECT_EQ(r.tensors["lm_head.bias"]["shape"], (nlohmann::json{256}));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// CodeGen's (GPT-J's block, q, k and v in one grouped qkv_proj) from codegen-350m-mono's file, the same round
// trip; a head count its 4 groups do not divide is refused in one line.
TEST(CliGenerate, ACodegenShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "codegen", R"({"n_layer": 1, "n_embd": 64, "n_head": 8, "rotary_dim": 4, "n_positions": 64})",
      "codegen-350m-mono", 200);
  EXPECT_EQ(r.latest["arch"], "codegen");
  EXPECT_EQ(r.config["architectures"][0], "CodeGenForCausalLM");
  EXPECT_EQ(r.tensors["transformer.h.0.attn.qkv_proj.weight"]["shape"], (nlohmann::json{192, 64}));
  expect_bad_input(
      "train --steps 1 --data " + r.data +
          R"( --model codegen-350m-mono --model-set '{"n_head": 2, "n_embd": 64, "rotary_dim": 4}')",
      "n_head 2 is not supported by memwall train for CodeGen; allowed: a multiple of 4");
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// GPT-BigCode's shape (SantaCoder's, StarCoder's: GPT-2's with multi-query attention) from a config.json of
// model_type gpt_bigcode trains, is kept by the checkpoint, exports as GPTBigCodeForCausalLM (c_attn as
// nn.Linear: [out, in]) and generates the same text from either.
TEST(CliGenerate, AGptBigcodeShapedModelTrainsGeneratesAndExports) {
  const std::string config =
      write_file("bigcode-config.json",
                 R"({"model_type": "gpt_bigcode", "n_layer": 1, "n_embd": 64, "n_head": 4, "n_positions": 64,
                     "vocab_size": 49152, "multi_query": true, "activation_function": "gelu_pytorch_tanh"})");
  const ShapeRoundTrip r = train_export_generate("bigcode", "{}", config, 200);
  EXPECT_EQ(r.latest["arch"], "bigcode");
  EXPECT_EQ(r.latest["kv_heads"], 1);
  EXPECT_EQ(r.config["architectures"][0], "GPTBigCodeForCausalLM");
  EXPECT_EQ(r.config["multi_query"], true);
  EXPECT_EQ(r.tensors["h.0.attn.c_attn.weight"]["shape"], (nlohmann::json{64 + 2 * 16, 64}));
  EXPECT_EQ(r.tensors["h.0.mlp.c_fc.weight"]["shape"], (nlohmann::json{256, 64}));  // [out, in]
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// GPT-2's shape with the exact GELU (activation_function "gelu", Cerebras-GPT's) trains, is kept by the
// checkpoint, exports with its activation and generates the same text from either.
TEST(CliGenerate, AGpt2ShapeWithTheExactGeluTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "exact-gelu",
      R"({"n_layer": 1, "n_embd": 64, "n_head": 4, "n_positions": 64, "activation_function": "gelu"})",
      "gpt-mini", 200);
  EXPECT_EQ(r.latest["exact_gelu"], true);
  EXPECT_EQ(r.config["architectures"][0], "GPT2LMHeadModel");
  EXPECT_EQ(r.config["activation_function"], "gelu");
  EXPECT_EQ(r.tensors["h.0.mlp.c_fc.weight"]["shape"], (nlohmann::json{64, 256}));  // Conv1D's [in, out]
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// BLOOM-176B is predicted as its checkpoints count; BLOOM weights of a variant memwall does not implement
// (the residual taken after the norm) are refused by train and generate in one line, before reading any
// tensor.
TEST(CliTrain, EarlierOpenModelsArePredictedAndVariantsRefused) {
  const std::string data = write_file("earlier.txt", "the cat sat. the cat sat. the cat sat.");
  expect_bad_input(
      "train --steps 1 --data " + data +
          R"( --model bloom-176b --model-set '{"apply_residual_connection_post_layernorm": true}')",
      "key 'apply_residual_connection_post_layernorm': true (the residual taken after the norm) is "
      "not supported; allowed: false");
  const std::string bloom = test_path("bloom-weights").string();
  std::filesystem::create_directories(bloom);
  std::ifstream in(std::string(MEMWALL_TEST_SOURCE_DIR) + "/../scenarios/models/bloom-176b.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["apply_residual_connection_post_layernorm"] = true;
  std::ofstream(bloom + "/config.json") << config.dump();
  expect_bad_input("generate --weights " + bloom + " --tokens 2", "apply_residual_connection_post_layernorm");
  std::filesystem::remove_all(bloom);
  CmdResult r = memwall("predict --model bloom-176b --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("176247271424"), std::string::npos) << r.output.substr(0, 2000);
  // GPT-2's shape with another activation: refused rather than trained with GELU.
  r = memwall("train --steps 1 --data " + data +
              R"( --model gpt-mini --model-set '{"activation_function": "relu"}')");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(
      r.output.find("activation_function \"relu\" is not supported by memwall train; allowed: gelu_new (tanh "
                    "approximation) or gelu (exact)"),
      std::string::npos)
      << r.output;
}

// A mixture of experts (Mixtral's cut to one layer of 64 with 4 experts of 96, 2 a token, the load-balancing
// loss on) trains on mixtral-8x7b's file, is kept by the checkpoint, exports as MixtralForCausalLM
// (block_sparse_moe.gate, experts.e.w1, w3, w2) and generates the same text from either, as do Qwen2-MoE's
// with its gated shared expert (Qwen2MoeForCausalLM), GLM-4.5's (Glm4MoeForCausalLM) and Granite MoE's
// (GraniteMoeForCausalLM) and gpt-oss's (GptOssForCausalLM: sink logits, biases, clamped SwiGLU experts
// joined in gate_up_proj); resumed with one expert a token it is refused naming the key. What memwall train
// does not run (OLMoE's clip_qkv) is refused in one line.
TEST(CliGenerate, AMixtureOfExpertsTrainsGeneratesAndExports) {
  const std::string shape =
      R"("num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 96, "num_local_experts": 4, "max_position_embeddings": 64, "vocab_size": 256,
         "output_router_logits": true, "router_aux_loss_coef": 0.02)";
  const ShapeRoundTrip r = train_export_generate("mixtral", "{" + shape + "}", "mixtral-8x7b", 200);
  EXPECT_EQ(r.latest["experts"], 4);
  EXPECT_EQ(r.latest["experts_per_token"], 2);
  EXPECT_EQ(r.latest["norm_topk"], true);
  EXPECT_EQ(r.latest["router_aux"], 0.02);
  EXPECT_EQ(r.config["architectures"][0], "MixtralForCausalLM");
  EXPECT_EQ(r.config["num_local_experts"], 4);
  EXPECT_EQ(r.config["num_experts_per_tok"], 2);
  EXPECT_EQ(r.config["intermediate_size"], 96);
  EXPECT_EQ(r.config["output_router_logits"], true);
  EXPECT_EQ(r.tensors["model.layers.0.block_sparse_moe.gate.weight"]["shape"], (nlohmann::json{4, 64}));
  EXPECT_EQ(r.tensors["model.layers.0.block_sparse_moe.experts.3.w1.weight"]["shape"],
            (nlohmann::json{96, 64}));
  EXPECT_EQ(r.tensors["model.layers.0.block_sparse_moe.experts.3.w2.weight"]["shape"],
            (nlohmann::json{64, 96}));
  const CmdResult one =
      memwall("train --steps 201 --resume --eval-batches 1 --checkpoint-dir " + r.dir + " --data " + r.data +
              " --model mixtral-8x7b --model-set '{" + shape + ", \"num_experts_per_tok\": 1}'");
  EXPECT_EQ(one.exit_code, 2) << one.output;
  EXPECT_NE(one.output.find("checkpoint has experts_per_token = 2, this run has 1"), std::string::npos)
      << one.output;
  // Each step's JSON says how busy the busiest expert was against its even share: 1 to 4 / 2; so does the
  // trace's "expert load" counter.
  const std::string trace = test_path("moe-trace.json").string();
  const CmdResult step = memwall("train --steps 1 --json --eval-batches 1 --trace " + trace + " --data " +
                                     r.data + " --model mixtral-8x7b --model-set '{" + shape + "}'",
                                 false);
  ASSERT_EQ(step.exit_code, 0) << step.output;
  const nlohmann::json first = parse_json(step.output.substr(0, step.output.find('\n')));
  ASSERT_TRUE(first.contains("expert_load")) << step.output;
  EXPECT_GE(first["expert_load"].get<double>(), 1.0);
  EXPECT_LE(first["expert_load"].get<double>(), 2.0);
  std::ifstream trace_in(trace);
  std::stringstream trace_text;
  trace_text << trace_in.rdbuf();
  int loads = 0;
  const nlohmann::json traced = parse_json(trace_text.str());
  for (const auto& e : traced.at("traceEvents")) {
    if (e.at("ph") != "C" || e.at("name") != "expert load") continue;
    ++loads;
    EXPECT_EQ(e.at("args").at("busiest expert"), first["expert_load"]);
  }
  EXPECT_EQ(loads, 1);
  expect_train_refuses(
      r.data, R"({"model_type": "olmoe", "num_experts": 4, "num_experts_per_tok": 2, "clip_qkv": 8})",
      "clip_qkv 8 is not supported by memwall train for OLMoE; allowed: null");
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
  // Qwen2-MoE's (qwen1.5-moe-a2.7b's file: q/k/v biases, a shared expert behind its sigmoid gate) too, as
  // Qwen2MoeForCausalLM.
  const ShapeRoundTrip q = train_export_generate(
      "qwen2-moe",
      R"({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
          "moe_intermediate_size": 64, "shared_expert_intermediate_size": 128, "num_experts": 4,
          "num_experts_per_tok": 2, "max_position_embeddings": 64, "vocab_size": 256})",
      "qwen1.5-moe-a2.7b", 200);
  EXPECT_EQ(q.latest["shared_ffn"], 128);
  EXPECT_EQ(q.config["architectures"][0], "Qwen2MoeForCausalLM");
  EXPECT_EQ(q.config["shared_expert_intermediate_size"], 128);
  EXPECT_EQ(q.config["moe_intermediate_size"], 64);
  EXPECT_EQ(q.tensors["model.layers.0.mlp.shared_expert_gate.weight"]["shape"], (nlohmann::json{1, 64}));
  EXPECT_EQ(q.tensors["model.layers.0.mlp.shared_expert.down_proj.weight"]["shape"],
            (nlohmann::json{64, 128}));
  EXPECT_EQ(q.tensors["model.layers.0.self_attn.k_proj.bias"]["shape"], (nlohmann::json{64}));
  std::filesystem::remove_all(q.dir);
  std::filesystem::remove_all(q.hf);
  // GLM-4.5's (glm-4.5's file: sigmoid routing in groups with its correction bias, an ungated shared expert,
  // a dense first layer, q/k/v biases, per-head q/k norms, rotary on half of each head), as
  // Glm4MoeForCausalLM.
  const ShapeRoundTrip g = train_export_generate(
      "glm45",
      R"({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "intermediate_size": 128, "moe_intermediate_size": 64, "n_routed_experts": 4,
          "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 2,
          "topk_group": 1, "routed_scaling_factor": 1.5, "max_position_embeddings": 64, "vocab_size": 256})",
      "glm-4.5", 200);
  EXPECT_EQ(g.latest["sigmoid_routing"], true);
  EXPECT_EQ(g.config["architectures"][0], "Glm4MoeForCausalLM");
  EXPECT_EQ(g.config["n_group"], 2);
  EXPECT_EQ(g.config["routed_scaling_factor"], 1.5);
  EXPECT_EQ(g.config["first_k_dense_replace"], 1);
  EXPECT_EQ(g.tensors["model.layers.1.mlp.gate.e_score_correction_bias"]["shape"], (nlohmann::json{4}));
  EXPECT_EQ(g.tensors["model.layers.1.mlp.shared_experts.down_proj.weight"]["shape"],
            (nlohmann::json{64, 64}));
  EXPECT_EQ(g.tensors["model.layers.0.mlp.down_proj.weight"]["shape"], (nlohmann::json{64, 128}));
  std::filesystem::remove_all(g.dir);
  std::filesystem::remove_all(g.hf);
  // Granite MoE's (granite-3.0-1b-a400m's file: Granite's multipliers, its experts' gates and ups as one
  // input_linear tensor), as GraniteMoeForCausalLM; its multipliers slow the learning: 400 steps.
  const ShapeRoundTrip gm = train_export_generate(
      "granite-moe",
      R"({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 64, "num_local_experts": 4, "num_experts_per_tok": 2,
          "max_position_embeddings": 64, "vocab_size": 256})",
      "granite-3.0-1b-a400m", 400);
  EXPECT_EQ(gm.latest["granite"], true);
  EXPECT_EQ(gm.config["architectures"][0], "GraniteMoeForCausalLM");
  EXPECT_EQ(gm.tensors["model.layers.0.block_sparse_moe.input_linear.weight"]["shape"],
            (nlohmann::json{4, 128, 64}));
  EXPECT_EQ(gm.tensors["model.layers.0.block_sparse_moe.output_linear.weight"]["shape"],
            (nlohmann::json{4, 64, 64}));
  std::filesystem::remove_all(gm.dir);
  std::filesystem::remove_all(gm.hf);
  // gpt-oss's (gpt-oss-20b's file: sink logits, biases on q, k, v, o, the router and the experts, a window on
  // every other layer, YaRN, clamped SwiGLU experts), as GptOssForCausalLM with its joined, interleaved
  // gate_up_proj: the generation from the exported file reads them back into memwall's order. (A window of
  // 16: with 8, shorter than "the cat sat. ", 200 steps leave a held-out loss of 0.12 and another greedy
  // text.)
  const ShapeRoundTrip oss = train_export_generate(
      "gpt-oss",
      R"({"num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"], "hidden_size": 64,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 64,
          "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 16,
          "max_position_embeddings": 64, "vocab_size": 256, "output_router_logits": true,
          "router_aux_loss_coef": 0.01})",
      "gpt-oss-20b", 200);
  EXPECT_EQ(oss.latest["gpt_oss"], true);
  EXPECT_EQ(oss.latest["swiglu_limit"], 7.0);
  EXPECT_EQ(oss.config["architectures"][0], "GptOssForCausalLM");
  EXPECT_EQ(oss.config["layer_types"], (nlohmann::json{"sliding_attention", "full_attention"}));
  EXPECT_EQ(oss.config["router_aux_loss_coef"], 0.01);
  EXPECT_EQ(oss.tensors["model.layers.1.self_attn.sinks"]["shape"], (nlohmann::json{4}));
  EXPECT_EQ(oss.tensors["model.layers.1.self_attn.o_proj.bias"]["shape"], (nlohmann::json{64}));
  EXPECT_EQ(oss.tensors["model.layers.1.mlp.router.bias"]["shape"], (nlohmann::json{4}));
  EXPECT_EQ(oss.tensors["model.layers.1.mlp.experts.gate_up_proj"]["shape"], (nlohmann::json{4, 64, 128}));
  EXPECT_EQ(oss.tensors["model.layers.1.mlp.experts.gate_up_proj_bias"]["shape"], (nlohmann::json{4, 128}));
  EXPECT_EQ(oss.tensors["model.layers.1.mlp.experts.down_proj"]["shape"], (nlohmann::json{4, 64, 64}));
  EXPECT_EQ(oss.tensors["model.layers.1.mlp.experts.down_proj_bias"]["shape"], (nlohmann::json{4, 64}));
  // The export's directory is a --model as a download's would be (its config.json), and its weights the
  // start: the first step's loss is the trained model's, low; a directory without config.json is one line.
  const CmdResult again = memwall("train --steps 1 --json --eval-batches 1 --data " + oss.data + " --model " +
                                      oss.hf + " --init-from " + oss.hf,
                                  false);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_LT(parse_json(again.output.substr(0, again.output.find('\n')))["loss"].get<double>(), 0.3);
  const CmdResult bare = memwall("predict --model " + oss.dir);
  EXPECT_EQ(bare.exit_code, 2) << bare.output;
  EXPECT_NE(bare.output.find("model directory " + oss.dir + " has no config.json"), std::string::npos)
      << bare.output;
  std::filesystem::remove_all(oss.dir);
  std::filesystem::remove_all(oss.hf);
}

// deepseek-v3's file cut to two layers of 64 (4 heads of 16 + 8 rotary, latents of 32, 4 experts of 64 in 2
// groups, the first layer dense).
const char* const kDeepSeekV3Tiny =
    R"({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "q_lora_rank": 32,
        "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
        "intermediate_size": 128, "moe_intermediate_size": 64, "n_routed_experts": 4, "num_experts_per_tok": 2,
        "n_group": 2, "topk_group": 1, "first_k_dense_replace": 1, "max_position_embeddings": 64,
        "vocab_size": 256})";

// DeepSeek-V3's (deepseek-v3's file: the latent attention with a query latent and YaRN's score scale, sigmoid
// routing in groups with the correction bias, an ungated shared expert, a dense first layer) trains on the
// CPU, generates from its checkpoint and from its export as DeepseekV3ForCausalLM; DeepSeek-V2-Lite's
// (q_proj, softmax routing, two shared experts) too, as DeepseekV2ForCausalLM.
TEST(CliGenerate, DeepSeekLatentAttentionTrainsGeneratesAndExports) {
  const ShapeRoundTrip v3 = train_export_generate("deepseek-v3", kDeepSeekV3Tiny, "deepseek-v3", 200);
  EXPECT_EQ(v3.latest["kv_lora"], 32);
  EXPECT_EQ(v3.latest["q_lora"], 32);
  EXPECT_EQ(v3.latest["deepseek"], 3);
  EXPECT_EQ(v3.latest["seq_aux_alpha"], 0.001);  // (DeepseekV3Config's aux_loss_alpha)
  EXPECT_EQ(v3.config["aux_loss_alpha"], 0.001);
  EXPECT_EQ(v3.config["architectures"][0], "DeepseekV3ForCausalLM");
  EXPECT_EQ(v3.config["rope_scaling"]["mscale_all_dim"], 1.0);
  EXPECT_EQ(v3.config["q_lora_rank"], 32);
  EXPECT_EQ(v3.tensors["model.layers.1.self_attn.kv_a_proj_with_mqa.weight"]["shape"],
            (nlohmann::json{40, 64}));
  EXPECT_EQ(v3.tensors["model.layers.1.self_attn.kv_b_proj.weight"]["shape"], (nlohmann::json{128, 32}));
  EXPECT_EQ(v3.tensors["model.layers.1.self_attn.o_proj.weight"]["shape"], (nlohmann::json{64, 64}));
  EXPECT_EQ(v3.tensors["model.layers.1.mlp.gate.e_score_correction_bias"]["shape"], (nlohmann::json{4}));
  // DeepSeek-V3's balancing: said in the summary; refused for a model without a correction bias.
  const CmdResult balanced =
      memwall("train --steps 2 --data " + v3.data +
              " --model deepseek-v3 --model-set '{\"num_hidden_layers\": 2, \"hidden_size\": 64, "
              "\"num_attention_heads\": 4, \"n_routed_experts\": 8, \"n_group\": 2, \"topk_group\": 1, "
              "\"first_k_dense_replace\": 1, \"max_position_embeddings\": 64, \"vocab_size\": 256}' --set "
              "'{\"memwall.router_bias_update_speed\": 0.001}'");
  EXPECT_EQ(balanced.exit_code, 0) << balanced.output;
  EXPECT_NE(balanced.output.find("routing correction biases stepped 0.001 against each expert's load error"),
            std::string::npos)
      << balanced.output;
  const CmdResult unbalanced =
      memwall("train --steps 1 --data " + v3.data +
              " --model llama-mini --set '{\"memwall.router_bias_update_speed\": 0.001}'");
  EXPECT_EQ(unbalanced.exit_code, 2) << unbalanced.output;
  EXPECT_NE(unbalanced.output.find("memwall.router_bias_update_speed 0.001: model llama-mini has no routing "
                                   "correction bias to step"),
            std::string::npos)
      << unbalanced.output;
  std::filesystem::remove_all(v3.dir);
  std::filesystem::remove_all(v3.hf);
  const ShapeRoundTrip v2 = train_export_generate(
      "deepseek-v2",
      R"({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "kv_lora_rank": 32,
          "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 24, "intermediate_size": 128,
          "moe_intermediate_size": 32, "n_routed_experts": 4, "num_experts_per_tok": 2,
          "max_position_embeddings": 64, "vocab_size": 256})",
      "deepseek-v2-lite", 200);
  EXPECT_EQ(v2.latest["q_lora"], 0);
  EXPECT_EQ(v2.latest["deepseek"], 2);
  EXPECT_EQ(v2.config["architectures"][0], "DeepseekV2ForCausalLM");
  EXPECT_EQ(v2.config["n_shared_experts"], 2);
  EXPECT_EQ(v2.tensors["model.layers.0.self_attn.q_proj.weight"]["shape"], (nlohmann::json{96, 64}));
  EXPECT_EQ(v2.tensors["model.layers.1.mlp.shared_experts.down_proj.weight"]["shape"],
            (nlohmann::json{64, 64}));
  std::filesystem::remove_all(v2.dir);
  std::filesystem::remove_all(v2.hf);
}

// Llama 4's blocks (Scout's file cut down to 4 layers, the last without positions and its queries tempered
// from position 15; experts in layers 1 and 3, one a token, beside a shared expert) train, are kept by the
// checkpoint, export as Llama4ForCausalLM with feed_forward's joined experts, and generate the same text from
// either; a run longer than the attention chunk trains (its rotary layers attending within the chunks).
TEST(CliGenerate, Llama4TrainsGeneratesAndExports) {
  // (--model-set's dotted keys patch the file's text_config; the rest of it, Scout's llama3 rope_scaling
  // among them, stays)
  const std::string shape = R"("text_config.num_hidden_layers": 4, "text_config.hidden_size": 64,
      "text_config.num_attention_heads": 4, "text_config.num_key_value_heads": 2, "text_config.head_dim": 16,
      "text_config.intermediate_size": 64, "text_config.intermediate_size_mlp": 128,
      "text_config.num_local_experts": 4, "text_config.interleave_moe_layer_step": 2,
      "text_config.floor_scale": 16, "text_config.vocab_size": 256,
      "text_config.max_position_embeddings": 64)";
  const ShapeRoundTrip r = train_export_generate("llama4", "{" + shape + "}", "llama-4-scout", 200);
  EXPECT_EQ(r.latest["llama4"], true);
  EXPECT_EQ(r.latest["qk_l2_norm"], true);
  EXPECT_EQ(r.latest["floor_scale"], 16);
  EXPECT_EQ(r.latest["attention_chunk"], 8192);
  EXPECT_EQ(r.config["architectures"][0], "Llama4ForCausalLM");
  EXPECT_EQ(r.config["model_type"], "llama4_text");
  EXPECT_EQ(r.config["no_rope_layers"], (nlohmann::json{1, 1, 1, 0}));
  EXPECT_EQ(r.config["interleave_moe_layer_step"], 2);
  EXPECT_EQ(r.config["intermediate_size_mlp"], 128);
  EXPECT_EQ(r.config["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(r.tensors["model.layers.1.feed_forward.router.weight"]["shape"], (nlohmann::json{4, 64}));
  EXPECT_EQ(r.tensors["model.layers.1.feed_forward.experts.gate_up_proj"]["shape"],
            (nlohmann::json{4, 64, 128}));
  EXPECT_EQ(r.tensors["model.layers.3.feed_forward.experts.down_proj"]["shape"], (nlohmann::json{4, 64, 64}));
  EXPECT_EQ(r.tensors["model.layers.3.feed_forward.shared_expert.up_proj.weight"]["shape"],
            (nlohmann::json{64, 64}));
  EXPECT_EQ(r.tensors["model.layers.2.feed_forward.gate_proj.weight"]["shape"], (nlohmann::json{128, 64}));
  const CmdResult chunked = memwall(
      "train --steps 1 --data " + r.data + " --model llama-4-scout --model-set '{" + shape +
      R"(, "text_config.attention_chunk_size": 32}')" + R"( --set '{"memwall.sequence_length": 48}')");
  EXPECT_EQ(chunked.exit_code, 0) << chunked.output;
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// DeepSeek-V3's next-token-prediction module (memwall.mtp) trains beside the model (the step's loss adds 0.3
// of its cross-entropy, the held-out loss is the model's), is kept by the checkpoint, exports as DeepSeek's
// files keep it (model.layers.2: enorm, hnorm, eh_proj, shared_head.norm and its block, with copies of the
// embedding and the head; num_nextn_predict_layers 1 beside num_hidden_layers 2) and is read back by
// --init-from; generate runs the model without it, the same text from the checkpoint and the export.
TEST(CliGenerate, DeepSeekNextTokenPredictionTrainsAndExports) {
  const ShapeRoundTrip r =
      train_export_generate("deepseek-mtp", kDeepSeekV3Tiny, "deepseek-v3", 200, R"({"memwall.mtp": true})");
  EXPECT_EQ(r.latest["mtp"], 1);
  EXPECT_EQ(r.latest["layers"], 3);
  EXPECT_EQ(r.config["num_hidden_layers"], 2);
  EXPECT_EQ(r.config["num_nextn_predict_layers"], 1);
  EXPECT_EQ(r.tensors["model.layers.2.eh_proj.weight"]["shape"], (nlohmann::json{64, 128}));
  EXPECT_EQ(r.tensors["model.layers.2.enorm.weight"]["shape"], (nlohmann::json{64}));
  EXPECT_EQ(r.tensors["model.layers.2.shared_head.norm.weight"]["shape"], (nlohmann::json{64}));
  EXPECT_EQ(r.tensors["model.layers.2.shared_head.head.weight"]["shape"], (nlohmann::json{256, 64}));
  EXPECT_EQ(r.tensors["model.layers.2.embed_tokens.weight"]["shape"], (nlohmann::json{256, 64}));
  EXPECT_EQ(r.tensors["model.layers.2.mlp.gate.weight"]["shape"], (nlohmann::json{4, 64}));
  const CmdResult more = memwall("train --steps 1 --data " + r.data + " --init-from " + r.hf +
                                 R"( --set '{"memwall.mtp": true}')");
  EXPECT_EQ(more.exit_code, 0) << more.output;
  EXPECT_NE(more.output.find("a next-token-prediction module after the 2 blocks (its loss x 0.3)"),
            std::string::npos)
      << more.output;
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// Qwen3's shape (heads of their own width, 4 x 24 = 96 query channels over 64, each query and key head
// RMS-normed) trains, is kept by the checkpoint, exports as Qwen3's config.json and safetensors names, and
// generates the same text from either.
TEST(CliGenerate, AQwen3ShapedModelTrainsGeneratesAndExports) {
  const std::string shape =
      "\"num_hidden_layers\": 1, \"hidden_size\": 64, \"num_attention_heads\": 4, \"num_key_value_heads\": "
      "2, \"head_dim\": 24, \"intermediate_size\": 176, \"max_position_embeddings\": 64";
  const ShapeRoundTrip r = train_export_generate("qwen3", "{\"model_type\": \"qwen3\", " + shape + "}");
  EXPECT_EQ(r.latest["head_dim"], 24);
  EXPECT_EQ(r.latest["qk_norm"], true);
  // Resumed as the same shape without the norms: refused naming them (not the parameter count).
  const CmdResult llama = memwall("train --steps 151 --resume --eval-batches 1 --checkpoint-dir " + r.dir +
                                  " --data " + r.data + " --model llama-mini --model-set '{" + shape + "}'");
  EXPECT_EQ(llama.exit_code, 2) << llama.output;
  EXPECT_NE(llama.output.find("checkpoint has qk_norm = true, this run has false"), std::string::npos)
      << llama.output;
  EXPECT_EQ(r.config["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(r.config["model_type"], "qwen3");
  EXPECT_EQ(r.config["head_dim"], 24);
  EXPECT_EQ(r.config["hidden_size"], 64);
  // Its tensors under transformers' names and shapes: q_proj [96, 64], o_proj [64, 96], q_norm [24].
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.q_proj.weight"]["shape"], (nlohmann::json{96, 64}));
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.o_proj.weight"]["shape"], (nlohmann::json{64, 96}));
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.q_norm.weight"]["shape"], (nlohmann::json{24}));
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.k_norm.weight"]["shape"], (nlohmann::json{24}));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// Gemma's shape (GeGLU, RMSNorm by 1 + weight, the embedding times sqrt(64), one key/value head of 24)
// trains, is kept by the checkpoint, exports as GemmaForCausalLM and generates the same text from either; a
// model file whose activation memwall does not compute is refused in one line.
TEST(CliGenerate, AGemmaShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "gemma", R"({"model_type": "gemma", "num_hidden_layers": 1, "hidden_size": 64, )"
               R"("num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 24, )"
               R"("intermediate_size": 176, "max_position_embeddings": 64, "tie_word_embeddings": true})");
  EXPECT_EQ(r.latest["gelu_mlp"], true);
  EXPECT_EQ(r.latest["norm_unit_offset"], true);
  EXPECT_EQ(r.latest["embed_scale"], true);
  EXPECT_EQ(r.config["architectures"][0], "GemmaForCausalLM");
  EXPECT_EQ(r.config["hidden_activation"], "gelu_pytorch_tanh");
  EXPECT_EQ(r.config["head_dim"], 24);
  EXPECT_EQ(r.config["tie_word_embeddings"], true);
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.k_proj.weight"]["shape"], (nlohmann::json{24, 64}));
  EXPECT_FALSE(r.tensors.contains("lm_head.weight"));
  expect_train_refuses(r.data, R"({"model_type": "gemma", "hidden_activation": "gelu"})",
                       "hidden_act \"gelu\" is not supported by memwall train; allowed: silu (SwiGLU) or "
                       "gelu_pytorch_tanh (GeGLU)");
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// Gemma 2's shape (Gemma's parts, norms on the attention's and the MLP's outputs, soft-capped scores and
// logits, query_pre_attn_scalar, a window of 16 on the first of two layers) trains, exports as
// Gemma2ForCausalLM with its four norms a layer and layer_types, and generates the same text from either.
TEST(CliGenerate, AGemma2ShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "gemma2",
      R"({"model_type": "gemma2", "num_hidden_layers": 2, "hidden_size": 64, )"
      R"("num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "sliding_window": 16, )"
      R"("attn_logit_softcapping": 20.0, "final_logit_softcapping": 15.0, )"
      R"("query_pre_attn_scalar": 32, "intermediate_size": 176, "max_position_embeddings": 64})");
  EXPECT_EQ(r.latest["sandwich_norm"], true);
  EXPECT_EQ(r.latest["global_every"], 2);
  EXPECT_EQ(r.latest["attn_softcap"], 20.0);
  EXPECT_EQ(r.config["architectures"][0], "Gemma2ForCausalLM");
  EXPECT_EQ(r.config["final_logit_softcapping"], 15.0);
  EXPECT_EQ(r.config["query_pre_attn_scalar"], 32.0);
  EXPECT_EQ(r.config["sliding_window"], 16);
  EXPECT_EQ(r.config["layer_types"], (nlohmann::json{"sliding_attention", "full_attention"}));
  for (const char* norm : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                           "post_feedforward_layernorm"}) {
    EXPECT_EQ(r.tensors[std::string("model.layers.1.") + norm + ".weight"]["shape"], (nlohmann::json{64}))
        << norm;
  }
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// Gemma 3's shape (Gemma 2's norms, q/k norms by 1 + weight, no soft-capping, a window of 16 on two layers of
// three turning by rope_local_base_freq) trains, exports as Gemma3ForCausalLM (model_type gemma3_text) and
// generates the same text from either.
TEST(CliGenerate, AGemma3ShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "gemma3",
      R"({"model_type": "gemma3_text", "num_hidden_layers": 3, "hidden_size": 64, )"
      R"("num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "sliding_window": 16, )"
      R"("sliding_window_pattern": 3, "rope_local_base_freq": 100, "rope_theta": 10000, )"
      R"("query_pre_attn_scalar": 16, "intermediate_size": 176, "max_position_embeddings": 64, )"
      R"("vocab_size": 256})");
  EXPECT_EQ(r.latest["qk_norm"], true);
  EXPECT_EQ(r.latest["rope_local_theta"], 100.0);
  EXPECT_EQ(r.config["architectures"][0], "Gemma3ForCausalLM");
  EXPECT_EQ(r.config["model_type"], "gemma3_text");
  EXPECT_EQ(r.config["rope_local_base_freq"], 100.0);
  EXPECT_EQ(r.config["sliding_window_pattern"], 3);
  EXPECT_TRUE(r.config["attn_logit_softcapping"].is_null());
  EXPECT_EQ(r.config["layer_types"],
            (nlohmann::json{"sliding_attention", "sliding_attention", "full_attention"}));
  EXPECT_EQ(r.tensors["model.layers.2.self_attn.q_norm.weight"]["shape"], (nlohmann::json{16}));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// Phi-3's shape (the Llama shape with its window in every layer, here 16 of 64 positions) trains, exports
// with its fused qkv_proj and gate_up_proj tensors as Phi3ForCausalLM, and generates the same text from
// either.
TEST(CliGenerate, APhi3ShapedModelTrainsGeneratesAndExports) {
  const ShapeRoundTrip r = train_export_generate(
      "phi3", R"({"model_type": "phi3", "num_hidden_layers": 1, "hidden_size": 64, )"
              R"("num_attention_heads": 4, "num_key_value_heads": 2, "sliding_window": 16, )"
              R"("intermediate_size": 176, "max_position_embeddings": 64})");
  EXPECT_EQ(r.latest["fused_names"], true);
  EXPECT_EQ(r.latest["sliding_window"], 16);
  EXPECT_EQ(r.config["architectures"][0], "Phi3ForCausalLM");
  EXPECT_EQ(r.config["sliding_window"], 16);
  EXPECT_EQ(r.tensors["model.layers.0.self_attn.qkv_proj.weight"]["shape"], (nlohmann::json{128, 64}));
  EXPECT_EQ(r.tensors["model.layers.0.mlp.gate_up_proj.weight"]["shape"], (nlohmann::json{352, 64}));
  EXPECT_FALSE(r.tensors.contains("model.layers.0.self_attn.q_proj.weight"));
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

// Phi-4-mini's shape (rotary on 12 of each head's 16 channels, longrope over an original context of 32 of its
// 64 positions, the run's default sequence length) trains, is kept by the checkpoint, exports as Phi-3's
// config.json with partial_rotary_factor, the model-level original context and the attention factor
// computed (sqrt(1 + ln 2 / ln 32)), and generates the same text from either. Factors that are not one per
// rotary pair are refused in one line.
TEST(CliGenerate, APhi4MiniShapedModelTrainsGeneratesAndExports) {
  const std::string shape =
      R"("model_type": "phi3", "num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, )"
      R"("num_key_value_heads": 2, "intermediate_size": 176, "max_position_embeddings": 64, )"
      R"("original_max_position_embeddings": 32, "partial_rotary_factor": 0.75, "sliding_window": null, )";
  const ShapeRoundTrip r = train_export_generate(
      "phi4", "{" + shape +
                  R"("rope_scaling": {"rope_type": "longrope", "short_factor": [1, 1, 1.5, 2, 2, 3], )"
                  R"("long_factor": [1, 2, 4, 8, 16, 24]}})");
  EXPECT_EQ(r.latest["partial_rotary"], 0.75);
  EXPECT_EQ(r.latest["rope_scaling"]["rope_type"], "longrope");
  EXPECT_EQ(r.config["architectures"][0], "Phi3ForCausalLM");
  EXPECT_EQ(r.config["partial_rotary_factor"], 0.75);
  EXPECT_EQ(r.config["original_max_position_embeddings"], 32);
  EXPECT_EQ(r.config["rope_scaling"]["long_factor"], (nlohmann::json{1, 2, 4, 8, 16, 24}));
  EXPECT_NEAR(r.config["rope_scaling"]["attention_factor"].get<double>(),
              std::sqrt(1 + std::log(2.0) / std::log(32.0)), 1e-12);
  expect_train_refuses(r.data,
                       "{" + shape + R"("rope_scaling": {"rope_type": "longrope", "short_factor": [1, 1], )" +
                           R"("long_factor": [1, 2]}})",
                       "rope_scaling longrope has 2 short_factor and 2 long_factor values; allowed: one per "
                       "rotary pair, 6");
  std::filesystem::remove_all(r.dir);
  std::filesystem::remove_all(r.hf);
}

TEST(CliGenerate, AModelTrainedOnARepeatedSentenceContinuesIt) {
  std::string text;
  for (int i = 0; i < 4000; ++i) text += "the cat sat. ";
  const std::string data = write_file("cat.txt", text);
  const std::string dir = test_path("ckpt-generate").string();
  std::filesystem::remove_all(dir);
  const CmdResult t = memwall("train --steps 300 --log-every 300 --eval-batches 1 --checkpoint-dir " + dir +
                              " --data " + data + " " + kTinyModel);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  // Greedy: the sentence, byte for byte (held-out loss about 0.03 nats per byte after 300 steps).
  EXPECT_EQ(greedy_text("--checkpoint-dir " + dir, 20), "the cat sat. the cat sat.\n");
  // Past the model's 64 positions the window slides (the key/value cache gives way to whole-window passes),
  // and a prompt longer than the window is cut to its last 64 bytes: the sentence goes on either way.
  EXPECT_EQ(greedy_text("--checkpoint-dir " + dir, 100), text.substr(0, 105) + "\n");
  const CmdResult long_prompt = memwall("generate --checkpoint-dir " + dir + " --prompt '" +
                                            text.substr(0, 78) + "' --tokens 26 --temperature 0",
                                        false);
  ASSERT_EQ(long_prompt.exit_code, 0) << long_prompt.output;
  EXPECT_EQ(long_prompt.output, text.substr(0, 104) + "\n");
  // Sampling is reproducible per seed; the JSON names the checkpoint's step.
  const std::string sampled =
      "generate --checkpoint-dir " + dir + " --prompt 'the' --tokens 30 --json --seed ";
  const CmdResult a = memwall(sampled + "7", false), b = memwall(sampled + "7", false);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const nlohmann::json j = parse_json(a.output);
  EXPECT_EQ(j["text"], parse_json(b.output)["text"]);
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  EXPECT_EQ(j["checkpoint_step"], 300);
  EXPECT_EQ(j["prompt"], "the");
  EXPECT_FALSE(j["text"].get<std::string>().empty());
  // Nucleus sampling with a mass the top byte alone reaches is greedy, whatever the temperature and seed.
  const CmdResult nucleus = memwall("generate --checkpoint-dir " + dir +
                                        " --prompt 'the c' --tokens 20 --temperature 2 --seed 5 --top-p 1e-6",
                                    false);
  EXPECT_EQ(nucleus.output, "the cat sat. the cat sat.\n");
  // Bad input: one line, exit code 2.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"generate --checkpoint-dir /nonexistent-ckpt", "/nonexistent-ckpt"},
      {"generate --checkpoint-dir " + dir + " --temperature -1",
       "--temperature -1: allowed: 0 (greedy) or more"},
      {"generate --checkpoint-dir " + dir + " --top-k -2", "--top-k -2: allowed: 0 (every token) or more"},
      {"generate --checkpoint-dir " + dir + " --top-p 0", "--top-p 0: allowed: 0 < p <= 1"}};
  for (const auto& [args, needle] : bad) expect_bad_input(args, needle);
}

// GPT-2's BPE end to end: a tiny model trained on BPE tokens (a small tokenizer whose merges were learnt on
// Genesis) continues its sentence token by token; the checkpoint, then the export, carry the tokenizer, so
// generate from either gives the same text; resuming takes the checkpoint's tokenizer, and mixing bytes with
// BPE is one line, exit 2.
// A Llama 3-shaped model as the Hub has one: a tied head, rope_scaling llama3, a Llama 3 tokenizer.json, bf16
// weights in shards. Trained here, exported in bf16 and split; then generated from and trained on from that
// directory alone (its config.json, tokenizer and shards), starting where the training left off.
TEST(CliGenerate, ALlama3ModelInShardsWithItsTokenizer) {
  const std::string tok = llama3_tokenizer("tokenizer-llama3-hub");
  std::string text;
  for (int i = 0; i < 4000; ++i) text += "And the evening and the morning were the first day. ";
  const std::string data = write_file("llama3.txt", text);
  const std::string dir = test_path("ckpt-llama3").string(), hub = test_path("llama3-hub").string();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(hub);
  const std::string model =
      " --model llama-mini --model-set '{\"num_hidden_layers\": 1, \"hidden_size\": 64, "
      "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 176, "
      "\"vocab_size\": 657, \"tie_word_embeddings\": true, \"max_position_embeddings\": 64, "
      "\"rope_theta\": 500000.0, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 32.0, "
      "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 32}}'";
  const CmdResult t =
      memwall("train --tokenizer " + tok + " --steps 150 --eval-batches 1 --json --checkpoint-dir " + dir +
                  " --data " + data + model,
              false);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const double trained = train_json_summary(t.output)["val_loss"].get<double>();
  EXPECT_LT(trained, 1.0) << t.output;
  const CmdResult ex = memwall("export --dtype bf16 --checkpoint-dir " + dir + " --out " + hub, false);
  ASSERT_EQ(ex.exit_code, 0) << ex.output;
  test_files::split_safetensors(hub + "/model.safetensors", hub, 2);
  std::filesystem::remove(hub + "/model.safetensors");
  ASSERT_TRUE(std::filesystem::exists(hub + "/tokenizer.json"));
  std::ifstream cf(hub + "/config.json");
  const nlohmann::json config = nlohmann::json::parse(cf);
  EXPECT_EQ(config["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(config["tie_word_embeddings"], true);
  const std::string prompt = " --prompt 'And the evening' --tokens 12 --temperature 0";
  const CmdResult from_ckpt = memwall("generate --checkpoint-dir " + dir + prompt, false);
  const CmdResult from_hub = memwall("generate --weights " + hub + prompt, false);
  ASSERT_EQ(from_hub.exit_code, 0) << from_hub.output;
  EXPECT_EQ(from_hub.output, from_ckpt.output);  // the bf16 rounding does not change the greedy text
  EXPECT_EQ(from_hub.output.rfind("And the evening and the", 0), 0u) << from_hub.output;  // the text's words
  EXPECT_NE(from_hub.output.find(" the first day."), std::string::npos) << from_hub.output;
  // Training on from the directory: its config.json is the model, its tokenizer the vocabulary, and the
  // first loss is the trained model's (in bf16), not a fresh one's ln 657 = 6.5.
  const CmdResult resumed =
      memwall("train --init-from " + hub + " --steps 1 --eval-batches 1 --data " + data, true);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("Llama 3 BPE vocabulary of 657"), std::string::npos) << resumed.output;
  const std::string json_run =
      "train --init-from " + hub + " --steps 1 --eval-batches 1 --json --data " + data;
  const CmdResult first = memwall(json_run, false);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const double loss = parse_json(first.output.substr(0, first.output.find('\n')))["loss"].get<double>();
  EXPECT_LT(loss, trained + 0.5) << first.output;
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(hub);
}

// A Llama 2-shaped model with Llama 2's kind of tokenizer.json (SentencePiece-style: spaces as U+2581, put
// before the text; <s> before each document and before the prompt): trained on a directory of two documents,
// it continues its sentence with the spaces where they belong, from the checkpoint and from its export.
TEST(CliGenerate, ALlama2ModelWithItsSentencePieceTokenizer) {
  const std::string tok = llama2_tokenizer("tokenizer-llama2");
  const CmdResult listed = memwall("tokenize --tokenizer " + tok + " --text 'And the evening' --json", false);
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  const nlohmann::json lj = parse_json(listed.output);
  EXPECT_EQ(lj["pre_tokenizer"], "SentencePiece");
  EXPECT_EQ(lj["bos"], 1);
  std::string joined;
  for (const auto& piece : lj["pieces"]) joined += piece.get<std::string>();
  EXPECT_EQ(joined, " And the evening");                   // the U+2581 put before the text is a space
  EXPECT_LT(lj["tokens"].get<int>(), 8) << listed.output;  // merged, not a token a character
  const std::string docs = test_path("llama2-docs").string();
  std::filesystem::remove_all(docs);
  std::filesystem::create_directories(docs);
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "And the evening and the morning were the first day. ";
  std::ofstream(docs + "/1.txt") << text;
  std::ofstream(docs + "/2.txt") << text;
  const std::string dir = test_path("ckpt-llama2").string(), hub = test_path("llama2-hub").string();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(hub);
  const std::string model =
      " --model llama-mini --model-set '{\"num_hidden_layers\": 1, \"hidden_size\": 64, "
      "\"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"intermediate_size\": 176, "
      "\"vocab_size\": 800, \"max_position_embeddings\": 64}'";
  const CmdResult t =
      memwall("train --tokenizer " + tok + " --steps 150 --eval-batches 1 --json --checkpoint-dir " + dir +
                  " --data " + docs + model,
              false);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_LT(train_json_summary(t.output)["val_loss"].get<double>(), 1.0) << t.output;
  const std::string prompt = " --prompt 'And the evening' --tokens 12 --temperature 0";
  const CmdResult greedy = memwall("generate --checkpoint-dir " + dir + prompt, false);
  ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
  EXPECT_EQ(greedy.output.rfind("And the evening and the morning", 0), 0u) << greedy.output;
  EXPECT_NE(greedy.output.find(" the first day."), std::string::npos) << greedy.output;
  const CmdResult as_json = memwall("generate --json --checkpoint-dir " + dir + prompt, false);
  ASSERT_EQ(as_json.exit_code, 0) << as_json.output;
  EXPECT_EQ(parse_json(as_json.output)["text"].get<std::string>().rfind(" and the", 0), 0u) << as_json.output;
  ASSERT_EQ(memwall("export --checkpoint-dir " + dir + " --out " + hub).exit_code, 0);
  EXPECT_TRUE(std::filesystem::exists(hub + "/tokenizer.json"));
  EXPECT_EQ(memwall("generate --weights " + hub + prompt, false).output, greedy.output);
  const CmdResult on =
      memwall("train --init-from " + hub + " --steps 1 --eval-batches 1 --data " + docs, true);
  ASSERT_EQ(on.exit_code, 0) << on.output;
  EXPECT_NE(on.output.find("SentencePiece BPE vocabulary of "), std::string::npos) << on.output;
  std::filesystem::remove_all(docs);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(hub);
}

// A JSON Lines corpus (Hugging Face datasets' to_json: one object a line, its "text" a document) trains with
// bytes and with BPE, and `memwall tokenize` encodes it; a line without a string "text" is refused in one
// line naming the file and line.
TEST(CliTrain, TrainsOnJsonLines) {
  std::string jsonl;
  for (int i = 0; i < 400; ++i)
    jsonl +=
        nlohmann::json({{"id", i}, {"text", "And the evening and the morning were day " + std::to_string(i)}})
            .dump() +
        "\n";
  const std::string data = write_file("corpus.jsonl", jsonl);
  for (const std::string& tokens : {std::string(), " --tokenizer " + kTinyBpe}) {
    const CmdResult t =
        memwall("train --steps 2 --eval-batches 1 --json --data " + data + tokens + " " + kTinyModel, false);
    ASSERT_EQ(t.exit_code, 0) << t.output;
    const nlohmann::json summary = parse_json(t.output.substr(t.output.rfind("{\"summary\"")))["summary"];
    EXPECT_LT(summary["last_loss"].get<double>(), summary["first_loss"].get<double>()) << tokens;
  }
  const CmdResult enc = memwall("tokenize --tokenizer " + kTinyBpe + " --data " + data + " --out " +
                                test_path("corpus-jsonl.bin").string());
  ASSERT_EQ(enc.exit_code, 0) << enc.output;
  // The documents' text only: 400 x 42 to 44 bytes, not the JSON around it.
  EXPECT_NE(enc.output.find("corpus.jsonl: 17.5K bytes"), std::string::npos) << enc.output;
  const std::string bad = write_file("bad.jsonl", "{\"text\": \"ok\"}\n{\"content\": \"no text\"}\n");
  const CmdResult r = memwall("train --steps 1 --data " + bad);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("bad.jsonl:2: no string \"text\" field"), std::string::npos) << r.output;
  EXPECT_EQ(line_count(r.output), 1u) << r.output;
}

TEST(CliTrain, TrainsAndGeneratesWithGpt2Bpe) {
  const std::string tok = kTinyBpe;
  std::string text;
  for (int i = 0; i < 4000; ++i) text += "And the evening and the morning were the first day. ";
  const std::string data = write_file("bpe.txt", text);
  const std::string dir = test_path("ckpt-bpe").string();
  const std::string out = test_path("hf-bpe").string();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(out);
  const CmdResult t =
      memwall("train --tokenizer " + tok + " --steps 200 --eval-batches 1 --json --checkpoint-dir " + dir +
                  " --data " + data + " " + kTinyModel,
              false);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const nlohmann::json summary = parse_json(t.output.substr(t.output.rfind("{\"summary\"")))["summary"];
  EXPECT_EQ(summary["tokenizer"], tok);
  EXPECT_EQ(summary["vocab"], 657);  // the tokenizer's, more than the model file's 256
  // Bits per byte count the bytes each token stands for: below the loss per token over ln 2.
  EXPECT_LT(summary["val_bits_per_byte"].get<double>(),
            summary["val_loss"].get<double>() / std::log(2.0) / 1.5);
  EXPECT_TRUE(std::filesystem::exists(dir + "/vocab.json") && std::filesystem::exists(dir + "/merges.txt"));
  const CmdResult greedy = memwall(
      "generate --checkpoint-dir " + dir + " --prompt 'And the evening' --tokens 12 --temperature 0", false);
  ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
  EXPECT_EQ(greedy.output.rfind("And the evening and the morning were the first day.", 0), 0u)
      << greedy.output;
  const CmdResult e = memwall("export --checkpoint-dir " + dir + " --out " + out);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("with the BPE tokenizer's vocab.json and merges.txt"), std::string::npos)
      << e.output;
  const CmdResult from_weights =
      memwall("generate --weights " + out + " --prompt 'And the evening' --tokens 12 --temperature 0", false);
  EXPECT_EQ(from_weights.output, greedy.output);
  const CmdResult j = memwall("generate --weights " + out + " --prompt 'And' --tokens 5 --json", false);
  ASSERT_EQ(j.exit_code, 0) << j.output;
  EXPECT_EQ(parse_json(j.output)["tokenizer"], out);
  // A vocabulary padded past the tokenizer's (as 50304 for GPT-2's 50257): the padding ids are never sampled,
  // even where sampling is nearly uniform.
  const std::string padded = test_path("ckpt-bpe-padded").string();
  std::filesystem::remove_all(padded);
  const CmdResult p =
      memwall("train --tokenizer " + tok + " --steps 2 --eval-batches 1 --checkpoint-dir " + padded +
              " --data " + data + " --model-set '{\"n_layer\":1,\"n_embd\":64,\"n_head\":2," +
              "\"n_positions\":64,\"vocab_size\":4096}'");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("GPT-2 BPE vocabulary of 4096"), std::string::npos) << p.output;
  const CmdResult hot = memwall("generate --checkpoint-dir " + padded +
                                    " --prompt 'And' --tokens 300 --temperature 50 --top-k 0 --json",
                                false);
  ASSERT_EQ(hot.exit_code, 0) << hot.output;
  EXPECT_GE(parse_json(hot.output)["text"].get<std::string>().size(), 300u);
  // memwall tokenize lists a text's tokens, and writes a file's ids that train reads as it reads the text:
  // the same batches, so the same first loss.
  const CmdResult listed =
      memwall("tokenize --tokenizer " + tok + " --text ' And God<|endoftext|>' --json", false);
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  const nlohmann::json lj = parse_json(listed.output);
  EXPECT_EQ(lj["pieces"], (nlohmann::json{" And", " God", "<|endoftext|>"})) << lj.dump();
  EXPECT_EQ(lj["ids"].back(), 656);
  const std::string bin = test_path("bpe.bin").string();
  const CmdResult written = memwall("tokenize --tokenizer " + tok + " --data " + data + " --out " + bin);
  ASSERT_EQ(written.exit_code, 0) << written.output;
  EXPECT_NE(written.output.find("written to " + bin + " (u16)"), std::string::npos) << written.output;
  // --decode turns the ids back into the text, on stdout or into --out; as u32 the same ids read otherwise.
  const CmdResult decoded = memwall("tokenize --tokenizer " + tok + " --decode " + bin, false);
  ASSERT_EQ(decoded.exit_code, 0);
  EXPECT_EQ(decoded.output, text);
  const std::string back = test_path("bpe-back.txt").string();
  const CmdResult to_file =
      memwall("tokenize --json --tokenizer " + tok + " --decode " + bin + " --out " + back, false);
  ASSERT_EQ(to_file.exit_code, 0) << to_file.output;
  EXPECT_EQ(parse_json(to_file.output)["bytes"], text.size());
  std::ifstream back_in(back, std::ios::binary);
  std::ostringstream back_text;
  back_text << back_in.rdbuf();
  EXPECT_EQ(back_text.str(), text);
  const CmdResult wide = memwall("tokenize --tokenizer " + tok + " --decode " + bin + " --dtype u32");
  EXPECT_EQ(wide.exit_code, 2) << wide.output;
  EXPECT_NE(wide.output.find(bin), std::string::npos) << wide.output;
  auto first_loss = [](const std::string& output) {
    return parse_json(output.substr(0, output.find('\n')))["loss"].get<double>();
  };
  const std::string one = " --steps 1 --eval-batches 1 --json " + std::string(kTinyModel);
  const CmdResult on_text = memwall("train --tokenizer " + tok + " --data " + data + one, false);
  const CmdResult on_ids = memwall("train --tokenizer " + tok + " --data " + bin + one, false);
  ASSERT_EQ(on_ids.exit_code, 0) << on_ids.output;
  EXPECT_EQ(first_loss(on_ids.output), first_loss(on_text.output));
  // A separate held-out file (nanoGPT's val.bin): named on the data line.
  const CmdResult with_val = memwall("train --tokenizer " + tok + " --data " + bin + " --val-data " + bin +
                                     " --steps 1 " + kTinyModel);
  ASSERT_EQ(with_val.exit_code, 0) << with_val.output;
  EXPECT_NE(with_val.output.find("(held out: " + bin + ")"), std::string::npos) << with_val.output;
  // The same tokenizer as Hugging Face's tokenizer.json alone: the checkpoint and the export carry that file.
  const std::string tj =
      tiny_bpe_tokenizer_json("tokenizer-json", {{"type", "ByteLevel"}, {"add_prefix_space", false}}, false);
  const std::string tj_ckpt = test_path("ckpt-bpe-tj").string();
  std::filesystem::remove_all(tj_ckpt);
  const CmdResult on_tj =
      memwall("train --tokenizer " + tj + " --checkpoint-dir " + tj_ckpt + " --data " + bin + one, false);
  ASSERT_EQ(on_tj.exit_code, 0) << on_tj.output;
  EXPECT_EQ(first_loss(on_tj.output), first_loss(on_text.output));
  EXPECT_TRUE(std::filesystem::exists(tj_ckpt + "/tokenizer.json"));
  EXPECT_FALSE(std::filesystem::exists(tj_ckpt + "/vocab.json"));
  const CmdResult tj_export = memwall("export --checkpoint-dir " + tj_ckpt + " --out " + tj_ckpt + "-hf");
  EXPECT_NE(tj_export.output.find("with the BPE tokenizer's tokenizer.json"), std::string::npos)
      << tj_export.output;
  EXPECT_EQ(memwall("generate --weights " + tj_ckpt + "-hf --prompt And --tokens 3").exit_code, 0);
  // Llama 3's pre-tokenizer over the same BPE (a Split by its pattern, then ByteLevel): numbers in threes,
  // never joined to the space before them; train and tokenize name it.
  const std::string l3 = llama3_tokenizer("tokenizer-llama3");
  const CmdResult l3_listed = memwall("tokenize --tokenizer " + l3 + " --text 'And 12345' --json", false);
  ASSERT_EQ(l3_listed.exit_code, 0) << l3_listed.output;
  const nlohmann::json l3j = parse_json(l3_listed.output);
  EXPECT_EQ(l3j["pre_tokenizer"], "Llama 3");
  std::string joined;
  for (const auto& piece : l3j["pieces"]) joined += "|" + piece.get<std::string>();
  EXPECT_NE(joined.find("| |1"), std::string::npos) << joined;  // " " alone, then "123"'s tokens
  EXPECT_NE(joined.find("3|4"), std::string::npos) << joined;
  // The tokenizer.json itself names the same tokenizer as its directory.
  const CmdResult l3_file =
      memwall("tokenize --tokenizer " + l3 + "/tokenizer.json --text 'And 12345' --json", false);
  ASSERT_EQ(l3_file.exit_code, 0) << l3_file.output;
  EXPECT_EQ(parse_json(l3_file.output)["pieces"], l3j["pieces"]);
  const CmdResult on_l3 =
      memwall("train --tokenizer " + l3 + " --data " + data + " --steps 1 --eval-batches 1 " + kTinyModel);
  ASSERT_EQ(on_l3.exit_code, 0) << on_l3.output;
  EXPECT_NE(on_l3.output.find("Llama 3 BPE vocabulary of 657"), std::string::npos) << on_l3.output;
  // Resuming without --tokenizer uses the checkpoint's.
  const CmdResult resumed = memwall("train --resume --steps 201 --eval-batches 1 --checkpoint-dir " + dir +
                                    " --data " + data + " " + kTinyModel);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("GPT-2 BPE vocabulary of 657"), std::string::npos) << resumed.output;
  // Bad input: one line, exit 2.
  std::filesystem::remove(out + "/vocab.json");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"train --resume --tokenizer bytes --steps 202 --checkpoint-dir " + dir + " --data " + data + " " +
           kTinyModel,
       "not on bytes"},
      {"train --tokenizer /nonexistent/tok --steps 1 --data " + data + " " + kTinyModel,
       "--tokenizer /nonexistent/tok: no vocab.json and merges.txt"},
      {"tokenize --tokenizer " + data + " --text a", data + ": a file that is not a tokenizer's"},
      {"generate --weights " + out + " --prompt x", "vocabulary of 657 tokens and no vocab.json/merges.txt"},
      {"train --data " + bin + " --steps 1 " + kTinyModel, "outside the vocabulary of 256"},
      {"tokenize --tokenizer " + tok + " --text a --data " + data,
       "give one of --data FILE, --text TEXT and --decode IDS_FILE"},
      {"tokenize --tokenizer " + tok + " --data /nonexistent.txt", "/nonexistent.txt: cannot open"},
  };
  for (const auto& [args, needle] : bad) {
    const CmdResult r = memwall(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
    EXPECT_EQ(line_count(r.output), 1u) << r.output;
  }
}

// Documents joined by <|endoftext|>: the model learns the separator as one token, and generation ends there
// unless --no-stop.
TEST(CliGenerate, EndsAtTheEndOfTextToken) {
  const std::string tok = kTinyBpe;
  std::string text;
  for (int i = 0; i < 3000; ++i) text += "And God saw the light.<|endoftext|>";
  const std::string data = write_file("eot.txt", text);
  const std::string dir = test_path("ckpt-eot").string();
  std::filesystem::remove_all(dir);
  const CmdResult t = memwall("train --tokenizer " + tok + " --steps 200 --eval-batches 1 --checkpoint-dir " +
                              dir + " --data " + data + " " + kTinyModel);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const std::string gen =
      "generate --checkpoint-dir " + dir + " --prompt 'And God' --tokens 40 --temperature 0";
  const CmdResult stopped = memwall(gen, false);
  ASSERT_EQ(stopped.exit_code, 0) << stopped.output;
  EXPECT_EQ(stopped.output, "And God saw the light.\n");
  const nlohmann::json j = parse_json(memwall(gen + " --json", false).output);
  EXPECT_EQ(j["stopped_at"], "<|endoftext|>");
  EXPECT_EQ(j["text"], " saw the light.");
  EXPECT_LT(j["tokens"].get<int>(), 40);
  const CmdResult on = memwall(gen + " --no-stop", false);
  EXPECT_EQ(on.output.rfind("And God saw the light.<|endoftext|>And God saw the light.", 0), 0u) << on.output;
}

TEST(CliExport, WritesTheCheckpointAsSafetensors) {
  const std::string data = write_file("train4.txt", training_text());
  const std::string dir = test_path("ckpt-export").string();
  const std::string out = test_path("hf").string();
  std::filesystem::remove_all(dir);
  const CmdResult t =
      memwall("train --steps 3 --json --checkpoint-dir " + dir + " --data " + data + " " + kTinyModel);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const CmdResult e = memwall("export --checkpoint-dir " + dir + " --out " + out);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  std::ifstream f(out + "/model.safetensors", std::ios::binary);
  unsigned char len[8];
  f.read(reinterpret_cast<char*>(len), 8);
  std::uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | len[i];
  // 1 layer, 64 channels, 64 positions, 256 byte tokens.
  const std::uint64_t params =
      256 * 64 + 64 * 64 +
      (2 * 64 + 3 * 64 * 64 + 3 * 64 + 64 * 64 + 64 + 2 * 64 + 4 * 64 * 64 + 4 * 64 + 4 * 64 * 64 + 64) +
      2 * 64;
  EXPECT_EQ(std::filesystem::file_size(out + "/model.safetensors"), 8 + hlen + 4 * params);
  std::ifstream cfg(out + "/config.json");
  std::stringstream cfg_text;
  cfg_text << cfg.rdbuf();
  EXPECT_EQ(parse_json(cfg_text.str())["n_layer"], 1);
  const CmdResult missing = memwall("export --checkpoint-dir /nonexistent-ckpt --out " + out);
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("/nonexistent-ckpt/latest.json"), std::string::npos) << missing.output;
}

// --init-from an export: the export's config.json is the model (no --model), the first step starts from the
// trained weights (its loss far below a fresh model's ln 256 = 5.55), and the JSON summary names the file. A
// model the file does not describe is one line naming the tensor, exit 2.
TEST(CliTrain, StartsFromExportedWeights) {
  const std::string data = write_file("train_init.txt", training_text());
  const std::string dir = test_path("ckpt-init").string();
  const std::string out = test_path("hf-init").string();
  std::filesystem::remove_all(dir);
  const CmdResult t = memwall(
      "train --steps 40 --json --checkpoint-dir " + dir + " --data " + data + " " + kTinyModel, false);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  ASSERT_EQ(memwall("export --checkpoint-dir " + dir + " --out " + out).exit_code, 0);
  auto first_loss = [](const std::string& output) {
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"step\":1,") != std::string::npos || line.find("\"step\": 1,") != std::string::npos)
        return parse_json(line)["loss"].get<double>();
    }
    return -1.0;
  };
  const CmdResult fresh =
      memwall("train --steps 1 --eval-batches 1 --json --data " + data + " " + kTinyModel, false);
  const CmdResult init =
      memwall("train --init-from " + out + " --steps 1 --eval-batches 1 --json --data " + data, false);
  ASSERT_EQ(init.exit_code, 0) << init.output;
  EXPECT_GT(first_loss(fresh.output), 5.0) << fresh.output;
  EXPECT_GT(first_loss(init.output), 0.0) << init.output;
  EXPECT_LT(first_loss(init.output), first_loss(fresh.output) - 1.0) << init.output;
  const std::string last = init.output.substr(init.output.rfind("{\"summary\""));
  EXPECT_EQ(parse_json(last)["summary"]["init_from"], out + "/model.safetensors");
  // Exported in bf16 (half the file): the same first loss, since the trainer computes on bf16 copies of its
  // fp32 master weights, which the bf16 file holds exactly.
  const std::string out16 = out + "-bf16";
  const CmdResult e16 = memwall("export --dtype bf16 --checkpoint-dir " + dir + " --out " + out16);
  ASSERT_EQ(e16.exit_code, 0) << e16.output;
  EXPECT_LT(std::filesystem::file_size(out16 + "/model.safetensors"),
            std::filesystem::file_size(out + "/model.safetensors") * 0.51);
  const CmdResult init16 =
      memwall("train --init-from " + out16 + " --steps 1 --eval-batches 1 --json --data " + data, false);
  ASSERT_EQ(init16.exit_code, 0) << init16.output;
  EXPECT_EQ(first_loss(init16.output), first_loss(init.output));
  EXPECT_EQ(memwall("export --dtype int8 --checkpoint-dir " + dir + " --out " + out16).exit_code, 2);
  const CmdResult text = memwall("train --init-from " + out + " --steps 1 --eval-batches 1 --data " + data);
  EXPECT_NE(text.output.find("initial weights: " + out + "/model.safetensors (F32)"), std::string::npos)
      << text.output;
  const CmdResult wrong =
      memwall("train --init-from " + out + " --steps 1 --data " + data + " --model-set '{\"n_layer\": 2}'");
  EXPECT_EQ(wrong.exit_code, 2) << wrong.output;
  EXPECT_NE(
      wrong.output.find("--init-from: " + out + "/model.safetensors: tensor 'h.1.ln_1.weight' is missing"),
      std::string::npos)
      << wrong.output;
  EXPECT_EQ(line_count(wrong.output), 1u) << wrong.output;
  // generate samples the same text from the export as from the checkpoint it came from (the same fp32
  // weights), and takes one source only.
  const std::string sample = " --tokens 24 --seed 3 --json --prompt 'And '";
  const CmdResult from_ckpt = memwall("generate --checkpoint-dir " + dir + sample, false);
  const CmdResult from_weights = memwall("generate --weights " + out + sample, false);
  ASSERT_EQ(from_weights.exit_code, 0) << from_weights.output;
  EXPECT_EQ(parse_json(from_weights.output)["text"], parse_json(from_ckpt.output)["text"]);
  EXPECT_TRUE(parse_json(from_weights.output)["checkpoint_step"].is_null());
  const CmdResult both = memwall("generate --checkpoint-dir " + dir + " --weights " + out);
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_NE(both.output.find("give one of --checkpoint-dir"), std::string::npos) << both.output;
}

TEST(CliTrain, KillNineMidRunThenResumeMatchesAnUninterruptedRun) {
  const std::string data = write_file("train5.txt", training_text());
  const std::string dir = test_path("ckpt-kill").string();
  std::filesystem::remove_all(dir);
  const std::string model = "{\"n_layer\":1,\"n_embd\":64,\"n_head\":2,\"n_positions\":64}";
  const pid_t pid = fork();
  if (pid == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    ::execl(MEMWALL_BINARY, MEMWALL_BINARY, "train", "--steps", "1000000", "--checkpoint-every", "3",
            "--checkpoint-dir", dir.c_str(), "--data", data.c_str(), "--model-set", model.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_GT(pid, 0);
  // Wait for a few checkpoints, then kill -9 wherever the run is (possibly mid-checkpoint).
  const std::string latest = dir + "/latest.json";
  for (int i = 0; i < 600; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (std::filesystem::exists(latest)) {
      std::ifstream in(latest);
      std::stringstream text;
      text << in.rdbuf();
      const auto j = nlohmann::json::parse(text.str(), nullptr, false);
      if (!j.is_discarded() && j.value("step", 0) >= 9) break;
    }
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(std::filesystem::exists(latest)) << "no checkpoint was written";
  std::ifstream in(latest);
  std::stringstream text;
  text << in.rdbuf();
  const int at = parse_json(text.str())["step"];
  ASSERT_GE(at, 9);
  ASSERT_EQ(at % 3, 0);

  const std::string common = " --json --data " + data + " --model-set '" + model + "'";
  const CmdResult resumed = memwall(
      "train --steps " + std::to_string(at + 3) + " --resume --checkpoint-dir " + dir + common, false);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const CmdResult straight = memwall("train --steps " + std::to_string(at + 3) + common, false);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  std::vector<std::string> a, b;
  for (const auto* out : {&straight.output, &resumed.output}) {
    std::istringstream lines(*out);
    for (std::string line; std::getline(lines, line);) {
      if (line.find("\"step\"") == std::string::npos) continue;
      const auto j = parse_json(line);
      if (j["step"].get<int>() > at) (out == &straight.output ? a : b).push_back(j["loss"].dump());
    }
  }
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a, b);
}

TEST(CliTrain, WritesATraceOfTheMeasuredRun) {
  const std::string data = write_file("train6.txt", training_text());
  const std::string trace = test_path("train-trace.json").string();
  const CmdResult r = memwall("train --steps 3 --trace " + trace + " --data " + data + " " + kTinyModel +
                              " --set '{\"zero_optimization.offload_optimizer.device\": \"cpu\"}'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(trace);
  std::stringstream text;
  text << in.rdbuf();
  const auto j = parse_json(text.str());
  EXPECT_EQ(j["otherData"]["command"], "train");
  EXPECT_EQ(j["otherData"]["executor"], "cpu");
  int adam = 0, norms = 0, fwd = 0, bwd = 0, copies = 0, memory = 0, losses = 0, grad_norms = 0, loads = 0;
  double moved = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "C" && e.at("name") == "memory gpu") ++memory;
    if (e.at("ph") == "C" && e.at("name") == "loss") {
      ++losses;
      EXPECT_GT(e.at("args").at("loss").get<double>(), 0.0);
    }
    if (e.at("ph") == "C" && e.at("name") == "gradient norm") ++grad_norms;
    if (e.at("ph") == "C" && e.at("name") == "expert load") ++loads;
    if (e.at("ph") != "X") continue;
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    const std::string phase = e.at("args").at("phase").get<std::string>();
    if (e["cat"] == "optimizer_step") ++(e["name"] == "gradient norm" ? norms : adam);
    if (e["cat"] == "compute" && phase == "forward") ++fwd;
    if (e["cat"] == "compute" && phase == "backward") ++bwd;
    if (e["cat"] == "copy") {
      ++copies;
      if (e.at("args").contains("bytes")) moved += e.at("args").at("bytes").get<double>();
    }
  }
  EXPECT_EQ(adam, 3);      // one sub-group per step
  EXPECT_EQ(norms, 3);     // and gradient clipping's norm before it (train-gpt clips)
  EXPECT_GT(fwd, 3 * 10);  // every op of every step
  EXPECT_EQ(bwd % 3, 0);
  EXPECT_GT(bwd, 0);
  EXPECT_GT(copies, 0);  // the optimizer is offloaded: gradients down, parameters up, with real bytes
  EXPECT_GT(moved, 0.0);
  EXPECT_GT(memory, 3);
  EXPECT_EQ(losses, 3);  // each step's loss, gradient norm (train-gpt clips), no expert load (no experts)
  EXPECT_EQ(grad_norms, 3);
  EXPECT_EQ(loads, 0);
}

TEST(CliTrain, DiskFullDuringACheckpointStopsWithAClearErrorAndKeepsTheLastOne) {
  const std::string data = write_file("train7.txt", training_text());
  const std::string dir = test_path("tiny-fs").string();
  std::filesystem::create_directories(dir);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1200k") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(errno) << ")";
  }
  // 1 layer, 64 channels: 70.6 K parameters, so a shard file is ~850 KB: the first checkpoint fits, the
  // second (written beside it before the first is removed) does not.
  const CmdResult r = memwall("train --steps 6 --checkpoint-every 3 --checkpoint-dir " + dir + " --data " +
                              data + " " + kTinyModel);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("previous file is intact"), std::string::npos) << r.output;
  std::stringstream text;
  {
    std::ifstream in(dir + "/latest.json");
    text << in.rdbuf();
  }
  EXPECT_EQ(parse_json(text.str())["step"], 3);  // the last complete checkpoint is still named
  const CmdResult export_ok = memwall("export --checkpoint-dir " + dir + " --out " + dir + "-hf");
  EXPECT_EQ(export_ok.exit_code, 0) << export_ok.output;  // and still readable
  EXPECT_EQ(::umount2(dir.c_str(), MNT_DETACH), 0) << std::strerror(errno);
}

TEST(CliTrain, ANvmeSwapDiskTooSmallFailsBeforeTrainingWithOneLine) {
  const std::string data = write_file("train8.txt", training_text());
  const std::string dir = test_path("tiny-swap").string();
  std::filesystem::create_directories(dir);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=600k") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(errno) << ")";
  }
  // The swap store preallocates what the run needs (both versions of every tensor), so a disk that cannot
  // hold it fails at the start, not in the middle of a step.
  const CmdResult r = memwall("train --run zero-infinity-nvme --steps 2 --nvme-path " + dir + " --data " +
                              data + " " + kTinyModel);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(line_count(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir), std::string::npos) << r.output;
  EXPECT_EQ(::umount2(dir.c_str(), MNT_DETACH), 0) << std::strerror(errno);
}

TEST(CliReplay, ReplaysATrainTraceWithWhatIfsAndNamesBadInput) {
  const std::string data = write_file("replay-train.txt", training_text());
  const std::string trace = test_path("replay-train.json").string();
  CmdResult r = memwall("train --steps 3 --eval-batches 1 --trace " + trace + " --data " + data + " " +
                        kTinyModel + " --set '{\"zero_optimization.offload_optimizer.device\": \"cpu\"}'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = memwall("replay " + trace + " --fast --json --steps 1: --what-if compute=2 --what-if pcie=2", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = parse_json(r.output).at("replay").at(0);
  EXPECT_EQ(j.at("steps").at(0), 1);
  EXPECT_EQ(j.at("steps").at(1), 3);
  EXPECT_GT(j.at("measured_iteration_s").get<double>(), 0.0);
  // Replaying on the trace's own hardware header (dgx2) re-simulates transfers on V100 links: not a
  // prediction of this machine, but the same order as measured.
  EXPECT_LT(std::fabs(j.at("error").get<double>()), 0.5) << r.output;
  EXPECT_GT(j.at("what_if_speedup").get<double>(), 1.05);  // compute twice as fast, faster links
  r = memwall("replay " + trace + " --what-if disk=2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find("allowed: pcie"), std::string::npos) << r.output;
  std::string text;
  {
    std::ifstream in(trace);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  const std::string cut = write_file("replay-truncated.json", text.substr(0, text.size() / 3));
  r = memwall("replay " + cut);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("replay-truncated.json: not valid JSON"), std::string::npos) << r.output;
  // Steps are whole numbers of 0 or more ("-1:" replayed from step 0, ":2x" to step 2).
  for (const char* steps : {"-1:", ":2x", "1", "a:b"}) {
    expect_bad_input("replay " + trace + " --steps " + steps,
                     "--steps '" + std::string(steps) + "': expected a:b (0-based, b exclusive");
  }
}

// With gradient accumulation a traced step is every micro-batch (forward and backward G times, the
// optimizer once), and replay reads it as one iteration.
TEST(CliReplay, ATrainTraceWithAccumulationHoldsWholeSteps) {
  const std::string data = write_file("replay-gas.txt", training_text());
  auto traced = [&](int G) {
    const std::string trace = test_path("replay-gas" + std::to_string(G) + ".json").string();
    CmdResult r = memwall("train --steps 2 --eval-batches 1 --trace " + trace + " --data " + data + " " +
                          kTinyModel + " --set '{\"gradient_accumulation_steps\": " + std::to_string(G) +
                          ", \"zero_optimization.offload_optimizer.device\": \"cpu\"}'");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(trace);
    std::stringstream text;
    text << in.rdbuf();
    r = memwall("replay " + trace + " --fast --json", false);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return std::make_pair(parse_json(r.output).at("replay").at(0), text.str());
  };
  const auto [one, one_text] = traced(1);
  const auto [two, two_text] = traced(2);
  EXPECT_EQ(one_text.find("micro-batch 1/"), std::string::npos);
  EXPECT_NE(two_text.find("\"micro-batch 1/2: "), std::string::npos);
  EXPECT_EQ(two.at("gradient_accumulation_steps"), 2);
  EXPECT_EQ(two.at("steps").at(1), 2);  // two steps, not four micro-batches
  // Forward and backward twice, the optimizer's tasks once.
  const auto n1 = one.at("tasks").get<std::size_t>(), n2 = two.at("tasks").get<std::size_t>();
  EXPECT_GT(n2, n1 + n1 / 2) << n1 << " vs " << n2;
  EXPECT_LT(n2, 2 * n1);
  // The summary's count edited to another type: read as 1 (no note), not thrown out of replay.
  std::string edited = two_text;
  const std::size_t key =
      edited.rfind("\"gradient_accumulation_steps\":");  // (the summary's, after the run's)
  ASSERT_NE(key, std::string::npos);
  const std::size_t digit = edited.find('2', key + 30);
  ASSERT_NE(digit, std::string::npos);
  edited.replace(digit, 1, "\"two\"");
  const CmdResult r =
      memwall("replay " + write_file("replay-gas-edited.json", edited) + " --fast --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(parse_json(r.output).at("replay").at(0).value("gradient_accumulation_steps", 1), 1);
}

TEST(CliCalibrate, WritesAHardwareSpecThatTheOtherCommandsLoad) {
  const std::filesystem::path dir = test_path("calibrate");
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "local.json").string();
  CmdResult r = memwall("calibrate --path " + dir.string() + " --size 4M --out " + out + " --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = parse_json(r.output);
  EXPECT_GT(j.at("hardware").at("gpu").at("achievable_flops").get<double>(), 1e8);
  EXPECT_GT(j.at("hardware").at("nvme").at("drive_read_Bps").get<double>(), 1e6);
  EXPECT_FALSE(std::filesystem::exists(dir / "memwall-calibrate.dat"));  // the test file is removed
  r = memwall("predict --hardware " + out + " --model gpt2 --run zero-3");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = memwall("calibrate --path /nonexistent/dir");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("/nonexistent/dir: not a directory"), std::string::npos) << r.output;
}

// Chakra execution traces as chakra_converter names them (PREFIX.RANK.et): ranks and world size from the
// names, a directory read in rank order, what-ifs, and a damaged file.
TEST(CliReplay, ReadsChakraExecutionTraces) {
  const std::filesystem::path dir = test_path("chakra");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (int rank = 0; rank < 12; ++rank) {  // llm.10.et and llm.11.et come after llm.9.et
    chakra_testing::ChakraWriter w;
    chakra_testing::ChakraWriter::Node gemm;
    gemm.id = 1;
    gemm.name = "gemm";
    gemm.start_us = 100;
    gemm.dur_us = 2000;
    w.add(gemm);
    chakra_testing::ChakraWriter::Node ar;
    ar.id = 2;
    ar.name = "ncclDevKernel_AllReduce";
    ar.type = chakra_testing::ChakraWriter::kColl;
    ar.data_deps = {1};
    ar.start_us = 2100;
    ar.dur_us = 3000;
    ar.int_attrs = {{"comm_type", chakra_testing::ChakraWriter::kAllReduce}, {"comm_size", 256 << 20}};
    w.add(ar);
    std::ofstream((dir / ("llm." + std::to_string(rank) + ".et")).string(), std::ios::binary) << w.bytes();
  }
  CmdResult r =
      memwall("replay " + dir.string() + " --hardware dgx2 --fast --json --what-if network=2", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = parse_json(r.output).at("replay");
  ASSERT_EQ(j.size(), 12u);
  for (int rank = 0; rank < 12; ++rank) {
    EXPECT_EQ(j.at(rank).at("rank"), rank);
    EXPECT_EQ(j.at(rank).at("tasks"), 2);
    EXPECT_NEAR(j.at(rank).at("measured_iteration_s").get<double>(), 5.0e-3, 1e-12);
    // The GEMM as measured, then the all-reduce of 256 MiB across the 3 ranks as a DGX-2 runs it.
    EXPECT_GT(j.at(rank).at("replayed_iteration_s").get<double>(), 2e-3);
    EXPECT_GT(j.at(rank).at("what_if_speedup").get<double>(), 1.05);
  }
  EXPECT_TRUE(parse_json(r.output).at("unmatched_collectives").empty());
  // On one GPU per node without a network (a calibrated single machine), the all-reduce has no way to go.
  std::ifstream dgx2(std::string(MEMWALL_TEST_SOURCE_DIR) + "/../scenarios/hardware/dgx2.json");
  nlohmann::json one_gpu = nlohmann::json::parse(dgx2);
  one_gpu["name"] = "one-gpu";
  one_gpu["gpu"]["count"] = 1;
  for (auto& level : one_gpu["pcie"]["switches"]) level["gpus_per_switch"] = 1;
  one_gpu.erase("network");
  const std::string one_gpu_path = write_file("one-gpu.json", one_gpu.dump());
  for (const char* executor : {" --fast", ""}) {
    r = memwall("replay " + (dir / "llm.1.et").string() + " --hardware " + one_gpu_path + executor);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("llm.1.et: its collectives span 12 ranks, more than the 1 GPU(s) per node of "
                            "hardware 'one-gpu', which has no network (network.nics, network.nic_Bps)"),
              std::string::npos)
        << r.output;
  }
  r = memwall("replay " + (dir / "llm.1.et").string() + " --hardware dgx2");  // SimGrid
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Chakra execution trace 0.0.4, rank 1 of 12: 2 nodes"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("measured 0.0050 s/iteration"), std::string::npos) << r.output;
  const std::string bad = write_file("chakra-bad.0.et", std::string("\x0a\x05\x0a\x03", 4));
  r = memwall("replay " + bad + " --hardware dgx2 --fast");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind("memwall: error: " + bad + ": truncated or not a Chakra trace", 0), 0u)
      << r.output;
  EXPECT_EQ(line_count(r.output), 1u) << r.output;
}

// Four ranks, tensor parallelism 2 beside data parallelism 2: each rank's all-reduces name their process
// groups (pg_name), whose ranks replay finds from the traces beside it: pairs inside the node, faster than
// the same all-reduces over all four ranks. With a rank's trace missing it says so and uses the world.
TEST(CliReplay, ChakraCollectivesSpanTheirProcessGroups) {
  const std::filesystem::path root = test_path("chakra-groups");
  std::filesystem::remove_all(root);
  for (const bool named : {true, false}) {
    const std::filesystem::path dir = root / (named ? "named" : "plain");
    std::filesystem::create_directories(dir);
    for (int rank = 0; rank < 4; ++rank) {
      chakra_testing::ChakraWriter w;
      const std::string tp = "tp" + std::to_string(rank / 2), dp = "dp" + std::to_string(rank % 2);
      std::uint64_t id = 1;
      for (const std::string& pg : {tp, dp}) {
        chakra_testing::ChakraWriter::Node ar;
        ar.id = id;
        ar.name = "ncclDevKernel_AllReduce " + pg;
        ar.type = chakra_testing::ChakraWriter::kColl;
        if (id > 1) ar.data_deps = {id - 1};
        ar.int_attrs = {{"comm_type", chakra_testing::ChakraWriter::kAllReduce}, {"comm_size", 256 << 20}};
        if (named) ar.string_attrs = {{"pg_name", pg}};
        w.add(ar);
        ++id;
      }
      std::ofstream((dir / ("job." + std::to_string(rank) + ".et")).string(), std::ios::binary) << w.bytes();
    }
  }
  auto replayed = [](const std::filesystem::path& trace) {
    const CmdResult r = memwall("replay " + trace.string() + " --hardware dgx2 --fast --json", false);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const auto row = parse_json(r.output).at("replay").at(0);
    EXPECT_EQ(row.value("collectives_in_process_groups", 0),
              trace.string().find("named") != std::string::npos ? 2 : 0);
    return row.at("replayed_iteration_s").get<double>();
  };
  const double grouped = replayed(root / "named" / "job.0.et"), world = replayed(root / "plain" / "job.0.et");
  EXPECT_LT(grouped, 0.9 * world);  // rings of 2 (link x 2) against rings of 4 (link x 4/3)
  CmdResult r = memwall("replay " + (root / "named" / "job.2.et").string() + " --hardware dgx2");  // SimGrid
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("job.2.et: 2 collectives in process groups smaller than the world"),
            std::string::npos)
      << r.output;
  std::filesystem::remove(root / "named" / "job.3.et");  // ranks 0-2 are complete: rename rank 2 away
  std::filesystem::rename(root / "named" / "job.2.et", root / "named" / "job.5.et");
  r = memwall("replay " + (root / "named" / "job.0.et").string() + " --hardware dgx2 --fast");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("whose ranks are not known"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0 of 6"), std::string::npos) << r.output;  // rank 5's trace: six ranks
}

// The ranks of one job replayed together: rank 2 computes 3 ms longer before the all-reduce every rank runs,
// so the others wait for it there (as NCCL makes them), and a second all-reduce inside the pairs {0, 1} and
// {2, 3} (process groups) holds back only rank 2's partner. A per-trace replay cannot show this: it runs the
// node's ranks all with one trace's graph.
TEST(CliReplay, RanksReplayedTogetherWaitForTheSlowestAtCollectives) {
  const std::filesystem::path dir = test_path("chakra-joint");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const double gemm_us[4] = {2000, 2000, 5000, 2000}, pair_gemm_us[4] = {1000, 1000, 1000, 3000};
  for (int rank = 0; rank < 4; ++rank) {
    chakra_testing::ChakraWriter w;
    std::uint64_t id = 1;
    auto node = [&](const std::string& name, double dur_us, const std::string& pg) {
      chakra_testing::ChakraWriter::Node n;
      n.id = id;
      n.name = name;
      if (id > 1) n.data_deps = {id - 1};
      if (dur_us > 0) {
        n.dur_us = static_cast<std::uint64_t>(dur_us);
      } else {
        n.type = chakra_testing::ChakraWriter::kColl;
        n.int_attrs = {{"comm_type", chakra_testing::ChakraWriter::kAllReduce}, {"comm_size", 64 << 20}};
        n.string_attrs = {{"pg_name", pg}};
      }
      w.add(n);
      ++id;
    };
    node("gemm", gemm_us[rank], "");
    node("ncclDevKernel_AllReduce world", 0, "world");
    node("gemm 2", pair_gemm_us[rank], "");
    node("ncclDevKernel_AllReduce pair", 0, "pair" + std::to_string(rank / 2));
    std::ofstream((dir / ("job." + std::to_string(rank) + ".et")).string(), std::ios::binary) << w.bytes();
  }
  for (const bool fast : {true, false}) {
    CmdResult r = memwall(
        "replay " + dir.string() + " --hardware dgx2 --json --what-if network=2" + (fast ? " --fast" : ""),
        false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto out = parse_json(r.output);
    const auto& joint = out.at("joint");
    ASSERT_TRUE(joint.is_object()) << r.output;
    EXPECT_EQ(joint.at("ranks"), 4);
    EXPECT_EQ(joint.at("slowest_rank"), 2) << joint.dump();
    const auto wait = joint.at("collective_wait_s").get<std::vector<double>>();
    const auto end = joint.at("rank_iteration_s").get<std::vector<double>>();
    ASSERT_EQ(wait.size(), 4u);
    // Ranks 0, 1 and 3 wait 3 ms for rank 2's longer GEMM at the world all-reduce; then rank 2 waits 2 ms for
    // rank 3's longer second GEMM at their pair's; ranks 0 and 1 do not.
    const double tol = fast ? 1e-9 : 2e-5;
    EXPECT_NEAR(wait[0], 3e-3, tol) << fast;
    EXPECT_NEAR(wait[1], 3e-3, tol) << fast;
    EXPECT_NEAR(wait[2], 2e-3, tol) << fast;
    EXPECT_NEAR(wait[3], 3e-3, tol) << fast;
    EXPECT_NEAR(end[2], end[3], tol) << fast;
    EXPECT_LT(end[0], end[2] - 1.5e-3) << fast;
    EXPECT_NEAR(joint.at("replayed_iteration_s").get<double>(), end[2], 1e-12);
    // Each trace alone: rank 2's the longest, still shorter than the ranks together.
    const auto rows = out.at("replay");
    ASSERT_EQ(rows.size(), 4u);
    EXPECT_LT(rows.at(2).at("replayed_iteration_s").get<double>(), end[2] - 1.5e-3) << fast;
    EXPECT_GT(joint.at("what_if_speedup").get<double>(), 1.0) << fast;
  }
  // The text output says it, and --trace has every rank's replay; a rank missing or one trace: no joint
  // replay (a note says why).
  const std::string trace = test_path("chakra-joint-replay.json").string();
  CmdResult r = memwall("replay " + dir.string() + " --hardware dgx2 --fast --trace " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("trace of the replay (every rank): " + trace), std::string::npos) << r.output;
  std::set<int> pids;
  std::ifstream trace_in(trace);
  const nlohmann::json written = nlohmann::json::parse(trace_in);
  for (const auto& e : written.at("traceEvents")) {
    if (e.contains("pid") && e.value("ph", "") == "X") pids.insert(e.at("pid").get<int>());
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2, 3}));
  EXPECT_NE(r.output.find("ranks 0 to 3 together on dgx2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("slowest rank 2"), std::string::npos) << r.output;
  r = memwall("replay " + (dir / "job.0.et").string() + " " + (dir / "job.1.et").string() +
                  " --hardware dgx2 --fast --json",
              false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto skipped = parse_json(r.output);
  EXPECT_TRUE(skipped.at("joint").is_null());
  EXPECT_EQ(skipped.at("joint_not_replayed").get<std::string>().rfind("rank 2's trace is missing", 0), 0u)
      << r.output;
  r = memwall("replay " + (dir / "job.0.et").string() + " " + (dir / "job.1.et").string() +
              " --hardware dgx2 --fast");
  EXPECT_NE(
      r.output.find("memwall: note: no joint replay of the ranks: rank 2's trace is missing (the 4 ranks "
                    "of a node on dgx2 are replayed together)"),
      std::string::npos)
      << r.output;
}

TEST(CliReplay, ReadsADirectoryOfPyTorchProfilerTraces) {
  const std::filesystem::path dir = test_path("kineto");
  std::filesystem::create_directories(dir);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string text =
        "{\"distributedInfo\": {\"rank\": " + std::to_string(rank) +
        ", \"world_size\": 2}, \"traceEvents\": ["
        "{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#3\", \"pid\": 1, \"tid\": 1, "
        "\"ts\": 1000, \"dur\": 5000},"
        "{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 1, \"tid\": 1, "
        "\"ts\": 1100, \"dur\": 5, \"args\": {\"correlation\": 7}},"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"gemm\", \"pid\": 0, \"tid\": 7, \"ts\": 1200, "
        "\"dur\": 4000, \"args\": {\"stream\": 7, \"correlation\": 7}}" +
        // Rank 0 alone runs an all-reduce: replay reports the collectives do not match across ranks. Rank 1
        // runs a kernel on a second stream during the GEMM: a lane of its own, overlapping as measured.
        std::string(
            rank == 1
                ? ",{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 1, "
                  "\"tid\": 1, \"ts\": 1150, \"dur\": 5, \"args\": {\"correlation\": 8}},"
                  "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"copy_in\", \"pid\": 0, \"tid\": 20, "
                  "\"ts\": 1250, \"dur\": 100, \"args\": {\"stream\": 20, \"correlation\": 8}}"
                : ",{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"record_param_comms\", \"pid\": 1, "
                  "\"tid\": 1, \"ts\": 1300, \"dur\": 5, \"args\": {\"Collective name\": \"allreduce\", "
                  "\"In msg nelems\": 1000, \"dtype\": \"Float\", \"Group size\": 2}},"
                  "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"ncclKernel_AllReduce\", \"pid\": 0, "
                  "\"tid\": 9, \"ts\": 1400, \"dur\": 50, \"args\": {\"stream\": 9}}") +
        "]}";
    write_file("kineto/rank" + std::to_string(rank) + ".json", text);
  }
  CmdResult r = memwall("replay " + dir.string() + " --hardware dgx2 --fast --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = parse_json(r.output).at("replay");
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j.at(1).at("rank"), 1);
  EXPECT_NEAR(j.at(1).at("measured_iteration_s").get<double>(), 5e-3, 1e-9);
  // The kernel's measured 4 ms, released at its launch 0.1 ms into the step; the side stream's kernel beside
  // it.
  EXPECT_NEAR(j.at(1).at("replayed_iteration_s").get<double>(), 4.1e-3, 1e-9);
  EXPECT_EQ(j.at(1).at("lanes"), nlohmann::json({{"compute", 2}}));
  EXPECT_FALSE(j.at(0).contains("lanes"));
  const auto unmatched = parse_json(r.output).at("unmatched_collectives");
  ASSERT_EQ(unmatched.size(), 1u);
  EXPECT_NE(unmatched.at(0).get<std::string>().find("collective #1 is none"), std::string::npos) << unmatched;
  r = memwall("replay " + (dir / "rank1.json").string() + " --hardware dgx2 --fast");
  EXPECT_NE(r.output.find("lanes side by side (the trace's streams or threads): compute 2"),
            std::string::npos)
      << r.output;
  r = memwall("replay " + dir.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("the trace names no hardware; pass --hardware"), std::string::npos) << r.output;
}
