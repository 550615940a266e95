// Hugging Face export: the safetensors header and bytes, transposed linear weights, the config. Import: the
// exported file (and hand-made ones in F16/BF16 with transformers' names, and in shards with an index) read
// back by range, and every way a file can fail to describe the model named.
#include "engine/model/export.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <vector>

#include "cpu/cast.h"
#include "engine/model/import.h"
#include "safetensors_files.h"
#include "spec/spec_loader.h"
#include "test_support.h"

namespace memwall::model {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using test_files::split_safetensors;
using test_files::write_safetensors;

// The header of safetensors file `file`, and the file rewritten with the header `rename` makes of it (the
// tensors' bytes unchanged).
nlohmann::json safetensors_header(const std::string& file) {
  const std::string bytes = slurp(file);
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  return nlohmann::json::parse(bytes.substr(8, header_bytes));
}
// Element i (an F32 file's) of the tensor named `name`.
float file_element(const std::string& file, const std::string& name, std::size_t i) {
  const std::string bytes = slurp(file);
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  const std::size_t begin = safetensors_header(file)[name]["data_offsets"][0].get<std::size_t>();
  float got = 0;
  std::memcpy(&got, bytes.data() + 8 + header_bytes + begin + i * sizeof(float), sizeof(float));
  return got;
}
void rewrite_header(const std::string& file,
                    const std::function<nlohmann::json(const nlohmann::json&)>& rename) {
  const std::string bytes = slurp(file);
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  const std::string text = rename(safetensors_header(file)).dump();
  const std::uint64_t n = text.size();
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << text << bytes.substr(8 + header_bytes);
}

// `path` opened for model c reads back whole as `want`, with `ignored` the tensors it did not use.
void expect_reads(const std::string& path, const GptConfig& c, const std::vector<float>& want,
                  const std::vector<std::string>& ignored = {}) {
  auto w = HfWeights::open(path, c);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  std::vector<float> got(want.size());
  ASSERT_TRUE(w->read(0, got.size(), got.data()).is_ok());
  EXPECT_EQ(got, want);
  EXPECT_EQ(w->ignored(), ignored);
}

GptConfig small_config() {
  GptConfig c;
  c.vocab = 13;
  c.max_seq = 6;
  c.layers = 2;
  c.heads = 2;
  c.channels = 8;
  return c;
}

// The same as a Llama shape: one key/value head, an MLP of 12, an untied head.
GptConfig small_llama_config() {
  GptConfig c = small_config();
  c.arch = GptArch::kLlama;
  c.kv_heads = 1;
  c.ffn = 12;
  c.tied = false;
  return c;
}

TEST(Export, WritesSafetensorsWithConv1dLayoutAndConfig) {
  GptConfig c = small_config();
  c.channels = 4;
  std::vector<float> p(gpt_num_params(c));
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(i) * 0.5f;
  const std::string dir = ::testing::TempDir() + "export-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(export_hf(c, p.data(), dir).is_ok());

  const std::string file = slurp(dir + "/model.safetensors");
  ASSERT_GE(file.size(), 8u);
  std::uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i)
    hlen = (hlen << 8) | static_cast<unsigned char>(file[static_cast<std::size_t>(i)]);
  EXPECT_EQ(hlen % 8, 0u);
  const auto header = nlohmann::json::parse(file.substr(8, hlen));
  const std::string body = file.substr(8 + hlen);
  EXPECT_EQ(body.size(), p.size() * sizeof(float));
  auto value = [&](const std::string& name, std::size_t k) {
    const std::size_t begin = header.at(name).at("data_offsets")[0].get<std::size_t>();
    float v;
    std::memcpy(&v, body.data() + begin + k * sizeof(float), sizeof v);
    return v;
  };
  std::size_t tensors = 0;
  for (const auto& t : gpt_param_layout(c)) {
    ASSERT_TRUE(header.contains(t.name)) << t.name;
    EXPECT_EQ(header[t.name]["dtype"], "F32");
    ++tensors;
  }
  EXPECT_EQ(header.size(), tensors + 1);  // + __metadata__
  // c_attn: memwall [3C, C] -> Conv1D [C, 3C]; element (i, o) of the export is memwall's (o, i).
  const auto layout = gpt_param_layout(c);
  const ParamTensor* attn = nullptr;
  for (const auto& t : layout) {
    if (t.name == "h.1.attn.c_attn.weight") attn = &t;
  }
  ASSERT_NE(attn, nullptr);
  EXPECT_EQ(header["h.1.attn.c_attn.weight"]["shape"], nlohmann::json::array({4, 12}));
  const int i = 3, o = 7;
  EXPECT_EQ(value("h.1.attn.c_attn.weight", static_cast<std::size_t>(i) * 12 + o),
            p[attn->offset + o * 4 + i]);
  EXPECT_EQ(value("wte.weight", 5), p[5]);
  EXPECT_EQ(header["wpe.weight"]["shape"], nlohmann::json::array({6, 4}));

  const auto config = nlohmann::json::parse(slurp(dir + "/config.json"));
  EXPECT_EQ(config["n_layer"], 2);
  EXPECT_EQ(config["n_embd"], 4);
  EXPECT_EQ(config["vocab_size"], 13);
  EXPECT_EQ(config["activation_function"], "gelu_new");
  std::filesystem::remove_all(dir);
}

TEST(Export, MissingDirectoryIsAClearError) {
  GptConfig c;
  std::vector<float> p(gpt_num_params(c), 0.0f);
  const Status s = export_hf(c, p.data(), "/nonexistent-dir/out");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/out/model.safetensors"), std::string::npos);
}

std::string temp_dir(const char* what) {
  const std::string dir = ::testing::TempDir() + what + "-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

// `c` with parameters `p` exported into `dir`, its config.json read back (without warnings) and taken by
// memwall train.
Result<ModelSpec> export_read_back(const GptConfig& c, const std::vector<float>& p, const std::string& dir) {
  MW_RETURN_IF_ERROR(export_hf(c, p.data(), dir));
  Diagnostics diag;
  auto spec = parse_model(slurp(dir + "/config.json"), dir + "/config.json", diag);
  if (!spec.is_ok()) return spec.status();
  EXPECT_TRUE(diag.warnings.empty()) << diag.warnings.front();
  MW_RETURN_IF_ERROR(check_model_file(*spec, "memwall train"));
  return spec;
}

// The weights in `dir` read as model `back`: `p`, every element.
void expect_weights(const std::string& dir, const GptConfig& back, const std::vector<float>& p) {
  ASSERT_EQ(gpt_num_params(back), p.size());
  auto w = HfWeights::open(dir, back);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  std::vector<float> got(p.size());
  ASSERT_TRUE(w->read(0, got.size(), got.data()).is_ok());
  EXPECT_EQ(got, p);
}

// Export, then read back in pieces that cross tensors (and the transposed Conv1D weights): every element as
// it was.
TEST(Import, ReadsAnExportBackByRange) {
  const GptConfig c = small_config();
  std::vector<float> p(gpt_num_params(c));
  gpt_init(c, p.data(), 3);
  const std::string dir = temp_dir("import");
  ASSERT_TRUE(export_hf(c, p.data(), dir).is_ok());
  auto w = HfWeights::open(dir, c);
  ASSERT_TRUE(w.is_ok()) << w.status().message();
  EXPECT_EQ(w->dtype(), "F32");
  EXPECT_TRUE(w->ignored().empty());
  for (const std::size_t piece : {p.size(), std::size_t{97}, std::size_t{1}}) {
    std::vector<float> got(p.size(), -1.0f);
    for (std::size_t at = 0; at < p.size(); at += piece) {
      const std::size_t n = std::min(piece, p.size() - at);
      ASSERT_TRUE(w->read(at, n, got.data() + at).is_ok());
    }
    EXPECT_EQ(got, p) << "pieces of " << piece;
  }
}

// Sliding windows survive an export and a read back: Mistral's (every layer) as MistralForCausalLM with
// its sliding_window, Qwen2's from a layer on as use_sliding_window and max_window_layers, and none as
// Llama's; so do Qwen3's heads of their own width and q/k norms, and Gemma's GeGLU, norms and embedding.
TEST(Export, SlidingWindowsAndFamiliesReadBackAsWritten) {
  GptConfig mistral = small_llama_config(), qwen2 = small_llama_config(), plain = small_llama_config();
  mistral.sliding_window = 4;
  qwen2.qkv_bias = true;
  qwen2.sliding_window = 3;
  qwen2.first_window_layer = 1;
  GptConfig qwen3 = small_llama_config(), gemma = small_llama_config();
  qwen3.head_dim = 6;
  qwen3.qk_norm = true;
  gemma.gelu_mlp = gemma.norm_unit_offset = gemma.embed_scale = true;
  GptConfig phi3 = mistral;  // Phi-3's fused qkv_proj and gate_up_proj
  phi3.fused_names = true;
  GptConfig gemma2 = gemma;  // Gemma 2's four norms a layer, soft-capping, a window on every other layer
  gemma2.sandwich_norm = true;
  gemma2.attn_softcap = 50;
  gemma2.final_softcap = 30;
  gemma2.query_scale = 12;
  gemma2.sliding_window = 3;
  gemma2.global_every = 2;
  GptConfig qwen2_interleaved = qwen2;  // Qwen2's window in layer_types: every second layer full
  qwen2_interleaved.first_window_layer = 0;
  qwen2_interleaved.global_every = 2;
  GptConfig gemma3 = gemma2;  // and Gemma 3's q/k norms, local rotary base, no soft-capping
  gemma3.qk_norm = true;
  gemma3.attn_softcap = gemma3.final_softcap = 0;
  gemma3.rope_local_theta = 10000;
  gemma3.rope_theta = 1e6;
  GptConfig stablelm = small_llama_config();  // LayerNorms (biases), rotary on half of each head
  stablelm.layer_norm = true;
  stablelm.partial_rotary = 0.5;
  GptConfig stablelm2 = stablelm;  // and q, k, v biases
  stablelm2.qkv_bias = true;
  GptConfig olmo2 = small_llama_config();  // norms after the sublayers, q/k norms over all heads
  olmo2.kv_heads = 2;
  olmo2.post_norm = olmo2.qk_norm = olmo2.qk_norm_full = true;
  GptConfig olmo = small_llama_config();  // LayerNorms without parameters
  olmo.layer_norm = true;
  olmo.norm_params = false;
  GptConfig olmo17 = olmo;  // and q, k, v clamped
  olmo17.clip_qkv = 8;
  GptConfig stablelm12 = stablelm;  // side by side after one norm, per-head q/k LayerNorms
  stablelm12.parallel_residual = stablelm12.one_norm = stablelm12.qk_norm = stablelm12.qk_layernorm = true;
  GptConfig cohere = small_llama_config();  // one LayerNorm without bias, side by side, scaled logits
  cohere.layer_norm = cohere.parallel_residual = cohere.one_norm = cohere.cohere = true;
  cohere.logit_scale = 0.5;
  GptConfig cohere_qk = cohere;  // and Command R+'s q/k LayerNorms
  cohere_qk.qk_norm = cohere_qk.qk_layernorm = true;
  GptConfig cohere2 = cohere;  // Cohere2's: a window on every layer but each second, rotary on those only
  cohere2.sliding_window = 3;
  cohere2.global_every = 2;
  cohere2.rope_windowed_only = true;
  GptConfig cohere2_all = cohere2;  // windows on every layer (layer_types only), heads of 6
  cohere2_all.global_every = 0;
  cohere2_all.head_dim = 6;
  GptConfig cohere2_none = cohere2;  // no window (sliding_window null): no layer turns
  cohere2_none.sliding_window = cohere2_none.global_every = 0;
  GptConfig smollm3 = small_llama_config();  // SmolLM3's: the second layer without rotary positions, tied
  smollm3.nope_every = 2;
  smollm3.tied = true;
  smollm3.norm_eps = 1e-6;
  GptConfig olmo3 = small_llama_config();  // OLMo 3's: OLMo 2's with a window on every second layer, YaRN on
                                           // the global layers only
  olmo3.kv_heads = 2;
  olmo3.post_norm = olmo3.qk_norm = olmo3.qk_norm_full = true;
  olmo3.sliding_window = 3;
  olmo3.global_every = 2;
  olmo3.rope_scaling = {.type = "yarn", .factor = 4, .original_max_positions = 6};
  olmo3.rope_local_theta = olmo3.rope_theta;
  GptConfig exaone4 = small_llama_config();  // EXAONE 4's: norms after the sublayers, per-head q/k norms, a
                                             // window on every second layer, rotary on the others only
  exaone4.kv_heads = 2;
  exaone4.post_norm = exaone4.qk_norm = true;
  exaone4.sliding_window = 3;
  exaone4.global_every = 2;
  exaone4.rope_windowed_only = true;
  GptConfig exaone4_all = exaone4;  // without a window every layer turns
  exaone4_all.sliding_window = exaone4_all.global_every = 0;
  exaone4_all.rope_windowed_only = false;
  GptConfig exaone4_none = exaone4;  // a window on no layer, none turning
  exaone4_none.sliding_window = exaone4_none.global_every = 0;
  GptConfig granite = small_llama_config();  // Granite's multipliers
  granite.granite = true;
  granite.embed_multiplier = 12;
  granite.query_scale = 16384;  // attention_multiplier 1/128
  granite.residual_multiplier = 0.22;
  granite.logit_scale = 0.0625;          // logits_scaling 16
  GptConfig glm = small_llama_config();  // GLM's: q/k/v biases, rotary on neighbouring pairs of half of
                                         // each head of 8 (head_dim)
  glm.glm = glm.qkv_bias = true;
  glm.head_dim = 8;
  glm.partial_rotary = 0.5;
  glm.norm_eps = 1.5625e-7;
  GptConfig glm4 = glm;  // GLM-4's: and norms after the sublayers too, without q/k/v biases
  glm4.sandwich_norm = true;
  glm4.qkv_bias = false;
  glm4.norm_eps = 1e-5;
  for (const GptConfig& c :
       {mistral,           qwen2,   plain,       qwen3,        gemma,       phi3,         gemma2,
        qwen2_interleaved, gemma3,  stablelm,    stablelm2,    olmo2,       olmo,         olmo17,
        stablelm12,        cohere,  cohere_qk,   cohere2,      cohere2_all, cohere2_none, smollm3,
        granite,           exaone4, exaone4_all, exaone4_none, olmo3,       glm,          glm4}) {
    SCOPED_TRACE(gpt_model_spec(c).model_type + (c.qkv_bias ? " with q/k/v biases" : ""));
    std::vector<float> p(gpt_num_params(c));
    gpt_init(c, p.data(), 3);
    for (std::size_t i = 0; i < p.size(); ++i) p[i] += 1e-3f * static_cast<float>(i % 97);  // (biases too)
    const std::string dir = temp_dir("export-window");
    ASSERT_TRUE(export_hf(c, p.data(), dir).is_ok());
    Diagnostics diag;
    auto spec = parse_model(slurp(dir + "/config.json"), dir + "/config.json", diag);
    ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
    EXPECT_TRUE(diag.warnings.empty()) << diag.warnings.front();
    const GptConfig back = gpt_config_of(*spec);
    EXPECT_EQ(back.sliding_window, c.sliding_window);
    EXPECT_EQ(back.first_window_layer, c.first_window_layer);
    EXPECT_EQ(spec->model_type, gpt_model_spec(c).model_type);
    EXPECT_EQ(back.head_size(), c.head_size());
    EXPECT_EQ(back.qk_norm, c.qk_norm);
    EXPECT_EQ(back.gemma(), c.gemma());
    EXPECT_EQ(back.fused_names, c.fused_names);
    EXPECT_EQ(back.global_every, c.global_every);
    EXPECT_EQ(back.sandwich_norm, c.sandwich_norm);
    EXPECT_EQ(back.attn_softcap, c.attn_softcap);
    EXPECT_EQ(back.final_softcap, c.final_softcap);
    EXPECT_EQ(back.score_scale(), c.score_scale());
    EXPECT_EQ(back.rope_local_theta, c.rope_local_theta);
    EXPECT_EQ(back.rope_scaling.type, c.rope_scaling.type);
    EXPECT_EQ(back.rope_scaling.factor, c.rope_scaling.factor);
    EXPECT_EQ(back.rope_theta, c.rope_theta);
    EXPECT_EQ(back.layer_norm, c.layer_norm);
    EXPECT_EQ(back.norm_params, c.norm_params);
    EXPECT_EQ(back.post_norm, c.post_norm);
    EXPECT_EQ(back.qk_norm_full, c.qk_norm_full);
    EXPECT_EQ(back.qkv_bias, c.qkv_bias);
    EXPECT_EQ(back.partial_rotary, c.partial_rotary);
    EXPECT_EQ(back.clip_qkv, c.clip_qkv);
    EXPECT_EQ(back.parallel_residual, c.parallel_residual);
    EXPECT_EQ(back.shared_norm(), c.shared_norm());
    EXPECT_EQ(back.qk_layernorm, c.qk_layernorm);
    EXPECT_EQ(back.cohere, c.cohere);
    EXPECT_EQ(back.logit_scale, c.logit_scale);
    EXPECT_EQ(back.rope_windowed_only, c.rope_windowed_only);
    EXPECT_EQ(back.nope_every, c.nope_every);
    EXPECT_EQ(back.granite, c.granite);
    EXPECT_EQ(back.glm, c.glm);
    EXPECT_EQ(back.embedding_scale(), c.embedding_scale());
    EXPECT_EQ(back.residual_multiplier, c.residual_multiplier);
    EXPECT_EQ(back.tied, c.tied);
    EXPECT_EQ(back.norm_eps, c.norm_eps);
    for (int l = 0; l < c.layers; ++l) EXPECT_EQ(back.rotary_at(l), c.rotary_at(l)) << l;
    for (int l = 0; l < c.layers; ++l) EXPECT_EQ(back.attention_window(l), c.attention_window(l)) << l;
    EXPECT_EQ(gpt_num_params(back), gpt_num_params(c));
    auto w = HfWeights::open(dir, back);  // every parameter back where it was
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    std::vector<float> got(p.size());
    ASSERT_TRUE(w->read(0, got.size(), got.data()).is_ok());
    EXPECT_EQ(got, p);
    if (c.fused_names) {  // Phi-3's names: q, k, v as one [Q + 2 kv, C] tensor, gate and up as one [2F, C]
      const nlohmann::json h = safetensors_header(dir + "/model.safetensors");
      EXPECT_EQ(h["model.layers.1.self_attn.qkv_proj.weight"]["shape"],
                (nlohmann::json{c.q_width() + 2 * c.kv_width(), c.channels}));
      EXPECT_EQ(h["model.layers.1.mlp.gate_up_proj.weight"]["shape"],
                (nlohmann::json{2 * c.ffn, c.channels}));
      EXPECT_FALSE(h.contains("model.layers.0.self_attn.q_proj.weight"));
    }
    if (c.glm) {  // GLM's names: gate and up as one [2F, C] tensor, q, k and v apart; GLM-4's four norms
      const nlohmann::json h = safetensors_header(dir + "/model.safetensors");
      EXPECT_EQ(h["model.layers.1.mlp.gate_up_proj.weight"]["shape"],
                (nlohmann::json{2 * c.ffn, c.channels}));
      EXPECT_EQ(h["model.layers.1.self_attn.k_proj.weight"]["shape"],
                (nlohmann::json{c.kv_width(), c.channels}));
      EXPECT_EQ(h.contains("model.layers.1.self_attn.q_proj.bias"), c.qkv_bias);
      EXPECT_FALSE(h.contains("model.layers.1.self_attn.o_proj.bias"));
      for (const char* norm : {"post_self_attn_layernorm", "post_mlp_layernorm"}) {
        EXPECT_EQ(h.contains("model.layers.0." + std::string(norm) + ".weight"), c.sandwich_norm) << norm;
      }
      EXPECT_TRUE(h.contains("model.layers.0.post_attention_layernorm.weight"));
      EXPECT_FALSE(h.contains("model.layers.0.pre_feedforward_layernorm.weight"));
    }
    if (c.norm_bias() && !c.shared_norm()) {  // StableLM's norm biases in the file, under their names
      const auto layout = gpt_param_layout(c);
      const auto bias = std::find_if(layout.begin(), layout.end(), [](const ParamTensor& t) {
        return t.name == "model.layers.1.post_attention_layernorm.bias";
      });
      ASSERT_NE(bias, layout.end());
      EXPECT_EQ(file_element(dir + "/model.safetensors", bias->name, 3), p[bias->offset + 3]);
    }
  }
  // A window from a later layer has no Mistral form: refused, naming it.
  GptConfig late = mistral;
  late.first_window_layer = 1;
  std::vector<float> p(gpt_num_params(late));
  const std::string late_dir = temp_dir("export-late-window");
  const Status s = export_hf(late, p.data(), late_dir);
  EXPECT_NE(s.message().find("a sliding window from layer 1 on has no Mistral config.json form"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(std::filesystem::exists(late_dir + "/model.safetensors"));  // refused before writing
  // Gemma's parts one at a time have no config.json form either.
  GptConfig geglu = small_llama_config();
  geglu.gelu_mlp = true;
  const Status g = export_hf(geglu, std::vector<float>(gpt_num_params(geglu)).data(), late_dir);
  EXPECT_NE(g.message().find("config.json form only together"), std::string::npos) << g.message();
  EXPECT_FALSE(std::filesystem::exists(late_dir + "/model.safetensors"));
  // Nor do Gemma 2's parts without Gemma's, or Mistral's window skipping every second layer.
  GptConfig capped = small_llama_config();
  capped.attn_softcap = 50;
  const Status cs = export_hf(capped, std::vector<float>(gpt_num_params(capped)).data(), late_dir);
  EXPECT_NE(cs.message().find("Gemma2ForCausalLM"), std::string::npos) << cs.message();
  GptConfig alternating = mistral;
  alternating.global_every = 2;
  const Status as = export_hf(alternating, std::vector<float>(gpt_num_params(alternating)).data(), late_dir);
  EXPECT_NE(as.message().find("a window on all layers but one in every 2 has"), std::string::npos)
      << as.message();
  EXPECT_FALSE(std::filesystem::exists(late_dir + "/model.safetensors"));
  // Nor do OLMo 2's norms with q, k and v biases (Olmo2Config has none; with a window it is OLMo 3's, whose
  // config has none either).
  for (const bool window : {false, true}) {
    GptConfig extra = olmo2;
    extra.qkv_bias = true;
    if (window) extra.sliding_window = 3;
    const Status os = export_hf(extra, std::vector<float>(gpt_num_params(extra)).data(), late_dir);
    EXPECT_NE(os.message().find(window ? "OLMo 3 with" : "OLMo 2 with a window"), std::string::npos)
        << os.message();
    EXPECT_NE(os.message().find(window ? "(Olmo3ForCausalLM has none of them)"
                                       : "(Olmo2ForCausalLM has none of them)"),
              std::string::npos)
        << os.message();
    EXPECT_FALSE(std::filesystem::exists(late_dir + "/model.safetensors"));
  }
}

// A mixture of experts exports as Mixtral (block_sparse_moe.experts.e.w1, w3, w2; a window on every layer;
// the load-balancing loss's coefficient), Qwen3-MoE (per-head q/k norms, heads of 6, moe_intermediate_size,
// renormalised weights), OLMoE (q/k norms over all heads) or Qwen2-MoE (q/k/v biases, the shared expert and
// its gate: shared_expert_intermediate_size) and reads back as the same model, every
// parameter where it was; a Mixtral with plain probabilities, and Qwen2-MoE's experts without its shared
// expert, are refused before anything is written.
TEST(Export, MixturesOfExpertsReadBackAsWritten) {
  GptConfig mixtral = small_llama_config();
  mixtral.experts = 4;
  mixtral.experts_per_token = 2;
  mixtral.expert_ffn = 12;
  mixtral.norm_topk = true;
  mixtral.router_aux = 0.02;
  mixtral.sliding_window = 4;
  GptConfig qwen3_moe = mixtral;
  qwen3_moe.sliding_window = 0;
  qwen3_moe.router_aux = 0;
  qwen3_moe.head_dim = 6;
  qwen3_moe.qk_norm = true;
  qwen3_moe.dense_layers = 1;  // mlp_only_layers [0]
  GptConfig olmoe = mixtral;
  olmoe.sliding_window = 0;
  olmoe.norm_topk = false;
  olmoe.router_aux = 0.01;
  olmoe.experts_per_token = 3;
  olmoe.kv_heads = olmoe.heads;
  olmoe.qk_norm = olmoe.qk_norm_full = true;
  GptConfig qwen2_moe = mixtral;  // Qwen2-MoE's: q/k/v biases, a shared expert of 20 behind its gate
  qwen2_moe.sliding_window = 0;
  qwen2_moe.norm_topk = false;
  qwen2_moe.qkv_bias = true;
  qwen2_moe.shared_ffn = 20;
  qwen2_moe.moe_every = 2;    // decoder_sparse_step
  GptConfig glm45 = mixtral;  // GLM-4.5's: sigmoid routing in groups, an ungated shared expert, a dense layer
  glm45.sliding_window = 0;
  glm45.router_aux = 0;
  glm45.qkv_bias = glm45.qk_norm = true;
  glm45.partial_rotary = 0.5;
  glm45.sigmoid_routing = true;
  glm45.expert_groups = 2;
  glm45.routed_scale = 2.5;
  glm45.shared_ffn = 2 * glm45.expert_ffn;
  glm45.shared_gate = false;
  glm45.dense_layers = 1;
  GptConfig granite_moe = mixtral;  // Granite MoE's multipliers; input_linear and output_linear
  granite_moe.sliding_window = 0;
  granite_moe.granite = true;
  granite_moe.embed_multiplier = 12;
  granite_moe.query_scale = 256;
  granite_moe.residual_multiplier = 0.22;
  granite_moe.logit_scale = 0.25;
  GptConfig oss = mixtral;  // gpt-oss's: biases, sinks, a window on every other layer, its clamped SwiGLU
  oss.gpt_oss = oss.qkv_bias = true;
  oss.global_every = 2;
  oss.swiglu_limit = 5.5;
  for (const GptConfig& c : {mixtral, qwen3_moe, olmoe, qwen2_moe, glm45, granite_moe, oss}) {
    SCOPED_TRACE(gpt_model_spec(c).model_type);
    std::vector<float> p(gpt_num_params(c));
    gpt_init(c, p.data(), 3);
    for (std::size_t i = 0; i < p.size(); ++i) p[i] += 1e-3f * static_cast<float>(i % 97);
    const std::string dir = temp_dir("export-moe");
    auto spec = export_read_back(c, p, dir);
    ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
    const GptConfig back = gpt_config_of(*spec);
    EXPECT_EQ(spec->model_type, gpt_model_spec(c).model_type);
    EXPECT_EQ(back.experts, c.experts);
    EXPECT_EQ(back.experts_per_token, c.experts_per_token);
    EXPECT_EQ(back.expert_width(), c.expert_width());
    EXPECT_EQ(back.norm_topk, c.norm_topk);
    EXPECT_EQ(back.router_aux, c.router_aux);
    EXPECT_EQ(back.shared_ffn, c.shared_ffn);
    EXPECT_EQ(back.dense_layers, c.dense_layers);
    EXPECT_EQ(back.moe_every, c.moe_every);
    EXPECT_EQ(back.sigmoid_routing, c.sigmoid_routing);
    EXPECT_EQ(back.expert_groups, c.expert_groups);
    EXPECT_EQ(back.groups_per_token, c.groups_per_token);
    EXPECT_EQ(back.routed_scale, c.routed_scale);
    EXPECT_EQ(back.shared_gate, c.shared_gate);
    EXPECT_EQ(back.partial_rotary, c.partial_rotary);
    EXPECT_EQ(back.qkv_bias, c.qkv_bias);
    EXPECT_EQ(back.sliding_window, c.sliding_window);
    EXPECT_EQ(back.head_size(), c.head_size());
    EXPECT_EQ(back.qk_norm, c.qk_norm);
    EXPECT_EQ(back.qk_norm_full, c.qk_norm_full);
    EXPECT_EQ(back.clip_qkv, c.clip_qkv);
    EXPECT_EQ(back.kv_head_count(), c.kv_head_count());
    EXPECT_EQ(back.tied, c.tied);
    expect_weights(dir, back, p);
    const nlohmann::json h = safetensors_header(dir + "/model.safetensors");
    EXPECT_EQ(back.granite, c.granite);
    EXPECT_EQ(back.residual_multiplier, c.residual_multiplier);
    EXPECT_EQ(back.embedding_scale(), c.embedding_scale());
    EXPECT_EQ(back.gpt_oss, c.gpt_oss);
    EXPECT_EQ(back.global_every, c.global_every);
    if (c.gpt_oss) {  // gpt-oss's: every expert's gate and up interleaved in gate_up_proj, [experts, C, 2F]
      EXPECT_EQ(back.swiglu_limit, c.swiglu_limit);
      const std::string b = "model.layers.1.mlp.";
      EXPECT_EQ(h[b + "experts.gate_up_proj"]["shape"],
                (nlohmann::json{c.experts, c.channels, 2 * c.expert_width()}));
      EXPECT_EQ(h[b + "experts.down_proj_bias"]["shape"], (nlohmann::json{c.experts, c.channels}));
      EXPECT_EQ(h[b + "router.bias"]["shape"], (nlohmann::json{c.experts}));
      EXPECT_EQ(h["model.layers.0.self_attn.sinks"]["shape"], (nlohmann::json{c.heads}));
      // Expert 1's gate row 2, column 3 is the file's [1][3][4], its up row 2 the file's [1][3][5].
      const auto at = [&](const std::string& name) {
        for (const auto& t : gpt_param_layout(c)) {
          if (t.name == name) return t.offset;
        }
        return std::size_t{0};
      };
      const auto C = static_cast<std::size_t>(c.channels),
                 F2 = 2 * static_cast<std::size_t>(c.expert_width());
      const std::string file = dir + "/model.safetensors", gate_up = b + "experts.gate_up_proj";
      EXPECT_EQ(file_element(file, gate_up, C * F2 + 3 * F2 + 4),
                p[at("model.layers.1.mlp.experts.1.gate_proj.weight") + 2 * C + 3]);
      EXPECT_EQ(file_element(file, gate_up, C * F2 + 3 * F2 + 5),
                p[at("model.layers.1.mlp.experts.1.up_proj.weight") + 2 * C + 3]);
      std::filesystem::remove_all(dir);
      continue;
    }
    if (c.granite) {  // Granite MoE's: every expert's gate and up in one tensor, their downs in another
      const std::string b = "model.layers.1.block_sparse_moe.";
      EXPECT_EQ(h[b + "input_linear.weight"]["shape"],
                (nlohmann::json{c.experts, 2 * c.expert_width(), c.channels}));
      EXPECT_EQ(h[b + "output_linear.weight"]["shape"],
                (nlohmann::json{c.experts, c.channels, c.expert_width()}));
      EXPECT_EQ(h[b + "router.layer.weight"]["shape"], (nlohmann::json{c.experts, c.channels}));
      std::filesystem::remove_all(dir);
      continue;
    }
    const bool mix = c.mixtral();
    EXPECT_EQ(h.contains("model.layers.1.block_sparse_moe.experts.3.w3.weight"), mix);
    EXPECT_EQ(h.contains("model.layers.1.mlp.experts.3.up_proj.weight"), !mix);
    EXPECT_EQ(
        h[mix ? "model.layers.1.block_sparse_moe.gate.weight" : "model.layers.1.mlp.gate.weight"]["shape"],
        (nlohmann::json{c.experts, c.channels}));
    // (a dense layer's MLP where there is one: layer 0)
    EXPECT_EQ(h.contains("model.layers.0.mlp.down_proj.weight"), !c.moe_layer(0));
    std::filesystem::remove_all(dir);
  }
  const std::string dir = temp_dir("export-moe-refused");
  GptConfig plain = mixtral;
  plain.norm_topk = false;
  const Status s = export_hf(plain, std::vector<float>(gpt_num_params(plain)).data(), dir);
  EXPECT_NE(s.message().find("MixtralForCausalLM renormalises them"), std::string::npos) << s.message();
  GptConfig dense = mixtral;
  dense.dense_layers = 1;
  const Status d = export_hf(dense, std::vector<float>(gpt_num_params(dense)).data(), dir);
  EXPECT_NE(d.message().find("no Mixtral config.json form (MixtralForCausalLM has experts in every layer)"),
            std::string::npos)
      << d.message();
  GptConfig unshared = mixtral;  // Qwen2-MoE's without its shared expert
  unshared.qkv_bias = true;
  const Status q = export_hf(unshared, std::vector<float>(gpt_num_params(unshared)).data(), dir);
  EXPECT_NE(q.message().find("Qwen2MoeForCausalLM always has one"), std::string::npos) << q.message();
  GptConfig unbiased = qwen2_moe;  // a shared expert without Qwen2-MoE's q/k/v biases
  unbiased.qkv_bias = false;
  const Status u = export_hf(unbiased, std::vector<float>(gpt_num_params(unbiased)).data(), dir);
  EXPECT_NE(u.message().find("a shared expert has a config.json form only with q, k and v biases"),
            std::string::npos)
      << u.message();
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));
}

// DeepSeek's latent attention exports as DeepseekV3ForCausalLM (a query latent, YaRN whose mscale_all_dim
// scales the scores, sigmoid routing in groups, an ungated shared expert, a dense first layer) or
// DeepseekV2ForCausalLM (q_proj, softmax routing by the groups' best experts, two shared experts) or without
// experts (n_routed_experts null), each reading back as the same model with every parameter where it was
// under DeepSeek's names; a score scale its config cannot say is refused before anything is written. The
// published DeepSeek-V3, V2-Lite and Kimi K2 files read as memwall train's model, their score scale yarn's.
TEST(Export, DeepSeekLatentAttentionReadsBackAsWritten) {
  GptConfig v3 = small_llama_config();
  v3.layers = 3;
  v3.heads = 2;
  v3.kv_heads = 0;
  v3.deepseek = 3;
  v3.kv_lora = 6;
  v3.q_lora = 4;
  v3.rope_dim = 2;
  v3.head_dim = 6;
  v3.v_dim = 4;
  v3.rope_scaling = {
      .type = "yarn", .factor = 4, .original_max_positions = 2, .mscale = 1, .mscale_all_dim = 1};
  v3.query_scale = latent_query_scale(v3.head_dim, v3.rope_scaling);
  v3.experts = 4;
  v3.experts_per_token = 2;
  v3.expert_ffn = 4;
  v3.shared_ffn = 4;
  v3.shared_gate = false;
  v3.dense_layers = 1;
  v3.sigmoid_routing = v3.norm_topk = true;
  v3.expert_groups = 2;
  v3.routed_scale = 2.5;
  v3.seq_aux_alpha = 0.002;
  GptConfig v2 = v3;
  v2.deepseek = 2;
  v2.q_lora = 0;
  v2.rope_scaling = {};
  v2.query_scale = 0;
  v2.sigmoid_routing = v2.norm_topk = false;
  v2.group_by_best = true;
  v2.shared_ffn = 8;
  v2.routed_scale = 16;
  v2.seq_aux = false;
  GptConfig dense = v3;
  dense.experts = dense.experts_per_token = dense.expert_ffn = dense.shared_ffn = dense.dense_layers = 0;
  dense.sigmoid_routing = dense.norm_topk = false;
  dense.shared_gate = true;
  dense.expert_groups = 1;
  dense.routed_scale = 1;
  dense.rope_interleave = false;  // (rotate_half on the rotary parts)
  for (const GptConfig& c : {v3, v2, dense}) {
    SCOPED_TRACE(std::string(gpt_family(c)) + (c.moe() ? "" : ", dense"));
    std::vector<float> p(gpt_num_params(c));
    gpt_init(c, p.data(), 5);
    for (std::size_t i = 0; i < p.size(); ++i) p[i] += 1e-3f * static_cast<float>(i % 89);
    const std::string dir = temp_dir("export-deepseek");
    auto spec = export_read_back(c, p, dir);
    ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
    EXPECT_EQ(spec->model_type, c.deepseek == 2 ? "deepseek_v2" : "deepseek_v3");
    // (the files' count leaves out V3's correction biases, a buffer)
    const int buffers = c.sigmoid_routing ? c.moe_layers() * c.experts : 0;
    EXPECT_EQ(spec->total_params(), static_cast<double>(p.size() - static_cast<std::size_t>(buffers)));
    const GptConfig back = gpt_config_of(*spec);
    EXPECT_EQ(back.deepseek, c.deepseek);
    EXPECT_EQ(back.kv_lora, c.kv_lora);
    EXPECT_EQ(back.q_lora, c.q_lora);
    EXPECT_EQ(back.rope_dim, c.rope_dim);
    EXPECT_EQ(back.v_dim, c.v_dim);
    EXPECT_EQ(back.head_size(), c.head_size());
    EXPECT_DOUBLE_EQ(back.query_scale, c.query_scale);
    EXPECT_EQ(back.experts, c.experts);
    EXPECT_EQ(back.shared_ffn, c.shared_ffn);
    EXPECT_EQ(back.shared_gate, c.shared_gate);
    EXPECT_EQ(back.dense_layers, c.dense_layers);
    EXPECT_EQ(back.sigmoid_routing, c.sigmoid_routing);
    EXPECT_EQ(back.group_by_best, c.group_by_best);
    EXPECT_EQ(back.expert_groups, c.expert_groups);
    EXPECT_EQ(back.routed_scale, c.routed_scale);
    EXPECT_EQ(back.norm_topk, c.norm_topk);
    if (c.moe()) {
      EXPECT_EQ(back.seq_aux_alpha, c.seq_aux_alpha);
      EXPECT_EQ(back.seq_aux, c.seq_aux);
    }
    EXPECT_EQ(back.rope_scaling.type, c.rope_scaling.type);
    EXPECT_EQ(back.rope_interleave, c.rope_interleave);
    expect_weights(dir, back, p);
    const nlohmann::json h = safetensors_header(dir + "/model.safetensors");
    const std::string a = "model.layers.1.self_attn.";
    EXPECT_EQ(h[a + "kv_a_proj_with_mqa.weight"]["shape"],
              (nlohmann::json{c.kv_lora + c.rope_dim, c.channels}));
    EXPECT_EQ(h[a + "kv_b_proj.weight"]["shape"],
              (nlohmann::json{c.heads * (c.head_size() - c.rope_dim + c.v_dim), c.kv_lora}));
    EXPECT_EQ(h[a + "o_proj.weight"]["shape"], (nlohmann::json{c.channels, c.heads * c.v_dim}));
    EXPECT_EQ(h.contains(a + "q_a_layernorm.weight"), c.q_lora > 0);
    EXPECT_EQ(h.contains(a + "q_proj.weight"), c.q_lora == 0);
    EXPECT_EQ(h.contains("model.layers.1.mlp.shared_experts.up_proj.weight"), c.moe());
    EXPECT_EQ(h.contains("model.layers.1.mlp.gate.e_score_correction_bias"), c.sigmoid_routing);
    std::filesystem::remove_all(dir);
  }
  const std::string dir = temp_dir("export-deepseek-refused");
  GptConfig odd = v3;
  odd.query_scale = 9;
  const Status s = export_hf(odd, std::vector<float>(gpt_num_params(odd)).data(), dir);
  EXPECT_NE(s.message().find("a score scale other than yarn's"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));

  // The published files: yarn's mscale(40, mscale_all_dim)^2 on head_dim^-1/2.
  struct Published {
    const char* file;
    double factor, all_dim;
  };
  for (const auto& [file, factor, all_dim] :
       {Published{"deepseek-v3.json", 40, 1.0}, Published{"deepseek-v2-lite.json", 40, 0.707},
        Published{"kimi-k2.json", 32, 1.0}}) {
    SCOPED_TRACE(file);
    const std::string path = std::string(MEMWALL_TEST_SOURCE_DIR) + "/../scenarios/models/" + file;
    Diagnostics d;
    auto m = parse_model(slurp(path), path, d);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    EXPECT_TRUE(check_model_file(*m, "memwall train").is_ok())
        << check_model_file(*m, "memwall train").to_string();
    const GptConfig c = gpt_config_of(*m);
    const double mscale = 0.1 * all_dim * std::log(factor) + 1.0;
    EXPECT_NEAR(1.0 / std::sqrt(c.query_scale), mscale * mscale / std::sqrt(192.0), 1e-12);
    EXPECT_EQ(c.head_size(), 192);
    EXPECT_EQ(c.attn_out_width(), c.heads * 128);
    EXPECT_EQ(c.rotary_dim(), 64);
    EXPECT_TRUE(c.rope_pairs());
  }
}

// OPT exports as OPTForCausalLM (model.decoder.* names, [out, in] weights, c_attn as q_proj, k_proj and
// v_proj, a position table of max_seq + 2 rows) with an OPT config.json that reads back as the same model;
// the facebook/opt-* checkpoints' names (decoder.*, OPTModel's) with a tied lm_head.weight read too.
TEST(Import, ReadsOptExportsAndOptModelNames) {
  GptConfig c = small_config();
  c.opt = true;
  std::vector<float> p(gpt_num_params(c));
  gpt_init(c, p.data(), 8);
  const std::string dir = temp_dir("export-opt");
  ASSERT_TRUE(export_hf(c, p.data(), dir).is_ok());
  Diagnostics diag;
  auto spec = parse_model(slurp(dir + "/config.json"), dir + "/config.json", diag);
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_TRUE(diag.warnings.empty()) << diag.warnings.front();
  EXPECT_EQ(spec->model_type, "opt");
  EXPECT_EQ(spec->mlp_act, "relu");
  EXPECT_EQ(spec->total_params(), static_cast<double>(p.size()));
  const GptConfig back = gpt_config_of(*spec);
  ASSERT_TRUE(back.opt);
  EXPECT_EQ(back.max_seq, c.max_seq);
  const std::string file = dir + "/model.safetensors";
  const nlohmann::json header = safetensors_header(file);
  EXPECT_EQ(header["model.decoder.embed_positions.weight"]["shape"], (nlohmann::json{6 + 2, 8}));
  EXPECT_EQ(header["model.decoder.layers.1.self_attn.v_proj.bias"]["shape"], (nlohmann::json{8}));
  EXPECT_EQ(header["model.decoder.layers.1.fc1.weight"]["shape"], (nlohmann::json{32, 8}));  // [out, in]
  auto w = HfWeights::open(dir, back);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  std::vector<float> got(p.size());
  ASSERT_TRUE(w->read(0, got.size(), got.data()).is_ok());
  EXPECT_EQ(got, p);
  EXPECT_TRUE(w->ignored().empty());

  // OPTModel's names, and the tied head saved beside them.
  rewrite_header(file, [](const nlohmann::json& h) {
    nlohmann::json renamed = nlohmann::json::object();
    for (auto it = h.begin(); it != h.end(); ++it)
      renamed[it.key().rfind("model.", 0) == 0 ? it.key().substr(6) : it.key()] = it.value();
    renamed["lm_head.weight"] = h["model.decoder.embed_tokens.weight"];
    return renamed;
  });
  auto facebook = HfWeights::open(dir, back);
  ASSERT_TRUE(facebook.is_ok()) << facebook.status().to_string();
  std::fill(got.begin(), got.end(), -1.0f);
  ASSERT_TRUE(facebook->read(0, got.size(), got.data()).is_ok());
  EXPECT_EQ(got, p);
}

// GPT-NeoX exports as GPTNeoXForCausalLM, query_key_value's rows head by head (head h's q, k, v), and reads
// back bitwise by any ranges (a config of other head counts than the defaults: the reader reorders by the
// model's own), also with the attention's buffers older files keep; Phi exports as PhiForCausalLM.
TEST(Import, ReadsNeoxAndPhiExportsBack) {
  GptConfig neox = small_config();
  neox.heads = 4;  // heads of 2 channels
  neox.neox = neox.parallel_residual = true;
  neox.tied = false;
  neox.ffn = 20;
  GptConfig phi = small_config();
  phi.phi = phi.parallel_residual = true;
  phi.partial_rotary = 0.5;
  phi.tied = false;
  GptConfig falcon = small_config();  // the new architecture: 2 key/value heads of 4 query heads
  falcon.heads = 4;
  falcon.kv_heads = 2;
  falcon.falcon = falcon.parallel_residual = falcon.no_bias = true;
  falcon.tied = false;
  GptConfig falcon7b = falcon;  // one key/value head, one norm
  falcon7b.kv_heads = 1;
  falcon7b.one_norm = true;
  GptConfig bigcode = small_config();  // multi-query, learned positions, nn.Linear weights
  bigcode.heads = 4;
  bigcode.kv_heads = 1;
  bigcode.bigcode = true;
  GptConfig bloom = small_config();  // ALiBi, the embedding's norm, query_key_value head by head
  bloom.heads = 4;
  bloom.bloom = true;
  GptConfig mpt = small_config();  // ALiBi, no biases (the norms' too), an MLP of 3C
  mpt.heads = 4;
  mpt.ffn = 3 * mpt.channels;
  mpt.mpt = mpt.no_bias = mpt.exact_gelu = true;
  GptConfig gptj = phi;  // biases on the MLP only, GPT-J's rotary pairs
  gptj.phi = false;
  gptj.gptj = true;
  gptj.partial_rotary = 1.0;  // (pairs of 2 in each head of 4: the reorder shows)
  GptConfig codegen = gptj;   // q, k and v in one qkv_proj of 4 groups of heads
  codegen.codegen = true;
  codegen.heads = 4;
  codegen.channels = 16;
  GptConfig starcoder2 = small_config();  // grouped-query attention with rotary positions, a window, untied
  starcoder2.heads = 4;
  starcoder2.kv_heads = 2;
  starcoder2.starcoder2 = true;
  starcoder2.tied = false;
  starcoder2.ffn = 20;
  starcoder2.sliding_window = 3;
  starcoder2.rope_theta = 1e5;
  GptConfig starcoder2_plain = starcoder2;  // without biases or a window, one key/value head a query head
  starcoder2_plain.no_bias = starcoder2_plain.tied = true;
  starcoder2_plain.kv_heads = starcoder2_plain.sliding_window = 0;
  GptConfig nemotron = starcoder2;  // rotary on half of each head, LayerNorm1P, the squared ReLU, no window
  nemotron.starcoder2 = false;
  nemotron.nemotron = nemotron.norm_unit_offset = true;
  nemotron.sliding_window = 0;
  nemotron.partial_rotary = 0.5;
  nemotron.heads = 2;  // (heads of 4: a rotary pair in each)
  nemotron.kv_heads = 1;
  GptConfig nemotron_plain = nemotron;  // without biases, tied, one key/value head a query head
  nemotron_plain.no_bias = nemotron_plain.tied = true;
  nemotron_plain.kv_heads = 0;
  GptConfig nemotron_wide = nemotron;  // Minitron-8B's heads of their own size
  nemotron_wide.head_dim = 8;
  for (const GptConfig& c : {neox, phi, falcon, falcon7b, bigcode, bloom, mpt, gptj, codegen, starcoder2,
                             starcoder2_plain, nemotron, nemotron_plain, nemotron_wide}) {
    SCOPED_TRACE(c.starcoder2 ? (c.no_bias ? "starcoder2 without biases" : "starcoder2")
                 : c.nemotron ? (c.no_bias ? "nemotron without biases" : "nemotron")
                 : c.neox     ? "neox"
                 : c.phi      ? "phi"
                 : c.codegen  ? "codegen"
                 : c.gptj     ? "gptj"
                 : c.bigcode  ? "bigcode"
                 : c.bloom    ? "bloom"
                 : c.mpt      ? "mpt"
                 : c.one_norm ? "falcon-7b"
                              : "falcon");
    std::vector<float> p(gpt_num_params(c));
    gpt_init(c, p.data(), 8);
    const std::string dir = temp_dir(c.neox         ? "export-neox"
                                     : c.phi        ? "export-phi"
                                     : c.bigcode    ? "export-bigcode"
                                     : c.bloom      ? "export-bloom"
                                     : c.mpt        ? "export-mpt"
                                     : c.codegen    ? "export-codegen"
                                     : c.gptj       ? "export-gptj"
                                     : c.starcoder2 ? "export-starcoder2"
                                     : c.nemotron   ? "export-nemotron"
                                                    : "export-falcon");
    const Status exported = export_hf(c, p.data(), dir);
    ASSERT_TRUE(exported.is_ok()) << exported.to_string();
    Diagnostics diag;
    auto spec = parse_model(slurp(dir + "/config.json"), dir + "/config.json", diag);
    ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
    EXPECT_TRUE(diag.warnings.empty()) << diag.warnings.front();
    EXPECT_EQ(spec->total_params(), static_cast<double>(p.size()));
    const GptConfig back = gpt_config_of(*spec);
    EXPECT_EQ(back.neox, c.neox);
    EXPECT_EQ(back.phi, c.phi);
    EXPECT_EQ(back.falcon, c.falcon);
    EXPECT_EQ(back.bigcode, c.bigcode);
    EXPECT_EQ(back.bloom, c.bloom);
    EXPECT_EQ(back.mpt, c.mpt);
    EXPECT_EQ(back.gptj, c.gptj);
    EXPECT_EQ(back.codegen, c.codegen);
    EXPECT_EQ(back.starcoder2, c.starcoder2);
    EXPECT_EQ(back.nemotron, c.nemotron);
    EXPECT_EQ(back.head_size(), c.head_size());
    EXPECT_EQ(back.norm_unit_offset, c.norm_unit_offset);
    EXPECT_EQ(back.sliding_window, c.sliding_window);
    EXPECT_EQ(back.tied, c.tied);
    EXPECT_EQ(back.rope_theta, c.rope_theta);
    EXPECT_EQ(back.exact_gelu, c.exact_gelu);
    EXPECT_EQ(back.one_norm, c.one_norm);
    EXPECT_EQ(back.no_bias, c.no_bias);
    EXPECT_EQ(back.kv_head_count(), c.kv_head_count());
    EXPECT_EQ(back.partial_rotary, c.partial_rotary);
    EXPECT_EQ(back.ffn_width(), c.ffn_width());
    const std::string file = dir + "/model.safetensors";
    if (c.gptj && !c.codegen) {
      // GPTJForCausalLM's names, no attention biases, q_proj's rotary rows in GPT-J's pairs.
      const nlohmann::json h = safetensors_header(file);
      EXPECT_TRUE(h.contains("transformer.h.0.attn.q_proj.weight"));
      EXPECT_FALSE(h.contains("transformer.h.0.attn.q_proj.bias"));
      EXPECT_TRUE(h.contains("transformer.h.0.mlp.fc_in.bias"));
      EXPECT_TRUE(h.contains("lm_head.bias"));
      const nlohmann::json config = nlohmann::json::parse(slurp(dir + "/config.json"));
      EXPECT_EQ(config["rotary_dim"], c.rotary_dim());
      // The file's row 1 of q_proj is memwall's row rotary_dim / 2 (its pair's second channel).
      const auto layout = gpt_param_layout(c);
      const auto qkv = std::find_if(layout.begin(), layout.end(),
                                    [](const ParamTensor& t) { return t.name == "h.0.attn.c_attn.weight"; });
      EXPECT_EQ(
          file_element(file, "transformer.h.0.attn.q_proj.weight", static_cast<std::size_t>(c.channels)),
          p[qkv->offset + static_cast<std::size_t>(c.rotary_dim() / 2 * c.channels)]);
    }
    if (c.nemotron) {  // NemotronForCausalLM's names: StarCoder2's with up_proj and down_proj
      const nlohmann::json h = safetensors_header(file);
      EXPECT_EQ(h["model.layers.1.self_attn.k_proj.weight"]["shape"],
                (nlohmann::json{c.kv_width(), c.channels}));
      EXPECT_EQ(h["model.layers.1.mlp.up_proj.weight"]["shape"], (nlohmann::json{c.ffn_width(), c.channels}));
      EXPECT_EQ(h.contains("model.layers.1.mlp.down_proj.bias"), !c.no_bias);
      EXPECT_TRUE(h.contains("model.layers.1.input_layernorm.bias"));
      EXPECT_EQ(h.contains("lm_head.weight"), !c.tied);
      const nlohmann::json config = nlohmann::json::parse(slurp(dir + "/config.json"));
      EXPECT_EQ(config["hidden_act"], "relu2");
      EXPECT_EQ(config["attention_bias"], !c.no_bias);
    }
    if (c.starcoder2) {  // Starcoder2ForCausalLM's names: the key/value rows as k_proj and v_proj
      const nlohmann::json h = safetensors_header(file);
      EXPECT_EQ(h["model.layers.1.self_attn.k_proj.weight"]["shape"],
                (nlohmann::json{c.kv_width(), c.channels}));
      EXPECT_EQ(h["model.layers.1.self_attn.v_proj.weight"]["shape"],
                (nlohmann::json{c.kv_width(), c.channels}));
      EXPECT_EQ(h.contains("model.layers.1.self_attn.o_proj.bias"), !c.no_bias);
      EXPECT_EQ(h.contains("model.layers.1.mlp.c_fc.bias"), !c.no_bias);
      EXPECT_TRUE(h.contains("model.layers.1.post_attention_layernorm.bias"));  // (LayerNorms keep theirs)
      EXPECT_EQ(h.contains("lm_head.weight"), !c.tied);
      const nlohmann::json config = nlohmann::json::parse(slurp(dir + "/config.json"));
      EXPECT_EQ(config["use_bias"], !c.no_bias);
      // v_proj's first row is memwall's first value row, after the key rows.
      const auto layout = gpt_param_layout(c);
      const auto kv = std::find_if(layout.begin(), layout.end(), [&](const ParamTensor& t) {
        return t.name ==
               (c.kv_head_count() == c.heads ? "h.0.attn.c_attn.weight" : "h.0.attn.c_attn_kv.weight");
      });
      ASSERT_NE(kv, layout.end());
      const std::size_t first_v = c.kv_head_count() == c.heads ? 2 * c.q_width() : c.kv_width();
      EXPECT_EQ(file_element(file, "model.layers.0.self_attn.v_proj.weight", 1),
                p[kv->offset + first_v * static_cast<std::size_t>(c.channels) + 1]);
    }
    if (c.mpt) {  // MptForCausalLM's names, its norms without biases
      const nlohmann::json h = safetensors_header(file);
      EXPECT_TRUE(h.contains("transformer.blocks.0.attn.Wqkv.weight"));
      EXPECT_TRUE(h.contains("transformer.norm_f.weight"));
      EXPECT_FALSE(h.contains("transformer.norm_f.bias"));
      const nlohmann::json config = nlohmann::json::parse(slurp(dir + "/config.json"));
      EXPECT_EQ(config["expansion_ratio"], 3);
      EXPECT_EQ(config["attn_config"]["alibi"], true);
    }
    if (c.neox || c.bloom) {
      // Row 1 x 2 + 1 of the file (head 1's key, its second channel) is memwall's row C + 1 x 2 + 1.
      const auto layout = gpt_param_layout(c);
      const auto qkv = std::find_if(layout.begin(), layout.end(),
                                    [](const ParamTensor& t) { return t.name == "h.0.attn.c_attn.weight"; });
      const std::string name = c.bloom ? "transformer.h.0.self_attention.query_key_value.weight"
                                       : "gpt_neox.layers.0.attention.query_key_value.weight";
      EXPECT_EQ(safetensors_header(file)[name]["shape"], (nlohmann::json{24, 8}));
      const std::size_t file_row = (1 * 3 + 1) * 2 + 1, mine = 8 + 1 * 2 + 1;
      EXPECT_EQ(file_element(file, name, file_row * 8), p[qkv->offset + mine * 8]);
    }
    for (const std::size_t piece : {p.size(), std::size_t{37}}) {
      auto w = HfWeights::open(dir, back);
      ASSERT_TRUE(w.is_ok()) << w.status().to_string();
      std::vector<float> got(p.size(), -1.0f);
      for (std::size_t at = 0; at < p.size(); at += piece)
        ASSERT_TRUE(w->read(at, std::min(piece, p.size() - at), got.data() + at).is_ok());
      EXPECT_EQ(got, p) << "pieces of " << piece;
      EXPECT_TRUE(w->ignored().empty());
    }
    if (c.mpt) {  // an MLP that is not a whole multiple of d_model has no MptConfig form: refused
      GptConfig odd = c;
      odd.ffn = 2 * c.channels + 4;
      const std::string odd_dir = temp_dir("export-mpt-odd");
      const Status s = export_hf(odd, std::vector<float>(gpt_num_params(odd)).data(), odd_dir);
      EXPECT_NE(s.message().find("is not a whole expansion_ratio of d_model"), std::string::npos)
          << s.message();
      EXPECT_FALSE(std::filesystem::exists(odd_dir + "/model.safetensors"));
    }
    if (!c.neox) continue;
    // An older GPT-NeoX file's buffers beside the tensors: ignored.
    rewrite_header(file, [](const nlohmann::json& h) {
      nlohmann::json more = h;
      more["gpt_neox.layers.0.attention.rotary_emb.inv_freq"] = h["gpt_neox.final_layer_norm.bias"];
      return more;
    });
    expect_reads(dir, back, p, {"gpt_neox.layers.0.attention.rotary_emb.inv_freq"});
  }
}

// A multimodal checkpoint's language model (Gemma 3's safetensors: language_model.model.layers..., or
// transformers' newer model.language_model.layers...) reads as the text model it wraps; other tensors (the
// vision tower) are listed as ignored.
TEST(Import, ReadsALanguageModelInsideAMultimodalCheckpoint) {
  GptConfig c = small_llama_config();
  c.gelu_mlp = c.norm_unit_offset = c.embed_scale = c.sandwich_norm = c.qk_norm = true;
  c.head_dim = 8;
  std::vector<float> p(gpt_num_params(c));
  gpt_init(c, p.data(), 6);
  for (const std::string style : {"language_model.", "model.language_model."}) {
    SCOPED_TRACE(style);
    const std::string dir = temp_dir("export-multimodal");
    ASSERT_TRUE(export_hf(c, p.data(), dir).is_ok());
    // Rename every tensor as the wrapper names it, and add one the text model does not have.
    rewrite_header(dir + "/model.safetensors", [&style](const nlohmann::json& header) {
      nlohmann::json renamed = nlohmann::json::object();
      for (auto it = header.begin(); it != header.end(); ++it) {
        // transformers' newer names keep lm_head at the top.
        const std::string& key = it.key();
        const bool keep =
            key == "__metadata__" || (style != "language_model." && key.rfind("model.", 0) != 0);
        renamed[keep ? key : style == "language_model." ? style + key : style + key.substr(6)] = it.value();
      }
      renamed["vision_tower.patch_embedding.weight"] = header["model.norm.weight"];
      return renamed;
    });
    expect_reads(dir, c, p, {"vision_tower.patch_embedding.weight"});
  }
}

// Exported in BF16 or F16: the header says so (and config.json's torch_dtype), and importing gives the
// rounded weights exactly.
TEST(Import, ReadsSixteenBitExports) {
  const GptConfig c = small_config();
  std::vector<float> p(gpt_num_params(c));
  gpt_init(c, p.data(), 5);
  for (const auto& [dtype, name, torch] : {std::tuple{ExportDtype::kBF16, "BF16", "bfloat16"},
                                           std::tuple{ExportDtype::kF16, "F16", "float16"}}) {
    SCOPED_TRACE(name);
    const std::string dir = temp_dir(name);
    ASSERT_TRUE(export_hf(c, p.data(), dir, dtype).is_ok());
    std::vector<std::uint16_t> half(p.size());
    std::vector<float> want(p.size());
    if (dtype == ExportDtype::kBF16) {
      kernels::cast_f32_to_bf16(p.data(), half.data(), p.size());
      kernels::cast_bf16_to_f32(half.data(), want.data(), p.size());
    } else {
      kernels::cast_f32_to_f16(p.data(), half.data(), p.size());
      kernels::cast_f16_to_f32(half.data(), want.data(), p.size());
    }
    auto w = HfWeights::open(dir, c);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    EXPECT_EQ(w->dtype(), name);
    std::vector<float> got(p.size());
    ASSERT_TRUE(w->read(0, got.size(), got.data()).is_ok());
    EXPECT_EQ(got, want);
    EXPECT_EQ(nlohmann::json::parse(slurp(dir + "/config.json"))["torch_dtype"], torch);
    EXPECT_LT(std::filesystem::file_size(dir + "/model.safetensors"), 2 * p.size() + 4096);
  }
}

// Runs tests/engine/torch_bin_writer.py on `dir` (holding an F32 export) in `mode`; false when that mode
// needs PyTorch and it is not installed.
bool write_torch_bin(const std::string& dir, const char* mode) {
  const std::string cmd = "/usr/bin/python3 " + std::string(MEMWALL_TEST_SOURCE_DIR) +
                          "/engine/torch_bin_writer.py " + dir + " " + mode;
  const int rc = std::system(cmd.c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) return false;
  EXPECT_EQ(rc, 0) << cmd;
  return true;
}

// A PyTorch checkpoint (pytorch_model.bin, torch.save's zip) reads as its safetensors twin does: F32, F16 and
// BF16, GPT-2's transposed Conv1D weights and GPT-NeoX's reordered query_key_value, tensors that are slices
// of larger storages, an nn.Parameter, a storage saved under two names (the second ignored); a directory's
// safetensors first, its .bin without them, and the .bin through an index. Skipped without torch.
TEST(Import, ReadsPyTorchCheckpoints) {
  GptConfig neox = small_config();
  neox.neox = neox.parallel_residual = true;
  neox.tied = false;
  for (const GptConfig& c : {small_config(), neox}) {
    std::vector<float> p(gpt_num_params(c));
    gpt_init(c, p.data(), 6);
    for (const char* mode : {"f32", "views", "f16", "bf16"}) {
      SCOPED_TRACE(std::string(c.neox ? "neox " : "gpt2 ") + mode);
      const std::string dir = temp_dir(mode);
      ASSERT_TRUE(export_hf(c, p.data(), dir).is_ok());
      if (!write_torch_bin(dir, mode)) GTEST_SKIP() << "PyTorch is not installed (python3-torch)";
      auto both = HfWeights::open(dir, c);
      ASSERT_TRUE(both.is_ok()) << both.status().to_string();
      EXPECT_EQ(both->file(), dir + "/model.safetensors");
      std::filesystem::remove(dir + "/model.safetensors");
      std::vector<float> want = p;
      std::vector<std::uint16_t> half(p.size());
      const std::string m = mode;
      if (m == "f16") {
        kernels::cast_f32_to_f16(p.data(), half.data(), p.size());
        kernels::cast_f16_to_f32(half.data(), want.data(), p.size());
      } else if (m == "bf16") {
        kernels::cast_f32_to_bf16(p.data(), half.data(), p.size());
        kernels::cast_bf16_to_f32(half.data(), want.data(), p.size());
      }
      for (const std::string& path : {dir, dir + "/pytorch_model.bin.index.json"}) {
        if (path != dir) {  // an index naming the one file for every tensor
          nlohmann::json map = nlohmann::json::object();
          for (const auto& t : hf_param_layout(c)) map[t.name] = "pytorch_model.bin";
          std::ofstream(path) << nlohmann::json{{"weight_map", map}}.dump();
        }
        auto w = HfWeights::open(path, c);
        ASSERT_TRUE(w.is_ok()) << w.status().to_string();
        EXPECT_EQ(w->files(), std::vector<std::string>{dir + "/pytorch_model.bin"});
        EXPECT_EQ(w->dtype(), m == "f16" ? "F16" : m == "bf16" ? "BF16" : "F32");
        std::vector<float> got(p.size(), -1.0f);
        for (std::size_t at = 0; at < p.size(); at += 41)
          ASSERT_TRUE(w->read(at, std::min<std::size_t>(41, p.size() - at), got.data() + at).is_ok());
        EXPECT_EQ(got, want);
        EXPECT_EQ(w->ignored(),
                  m == "views" ? std::vector<std::string>{"extra.alias"} : std::vector<std::string>{});
      }
      if (c.neox || m != "views") continue;
      // Damaged copies never crash (scripts/sanitize.sh runs this under ASan): cut short, or a byte changed
      // anywhere; opening fails or the reads stay inside the file.
      const std::string bin = dir + "/pytorch_model.bin", whole = slurp(bin);
      for (std::size_t k = 0; k < 300; ++k) {
        std::string bytes = whole;
        if (k < 20) {
          bytes.resize(whole.size() * k / 20);
        } else {
          bytes[(k * 7919) % bytes.size()] ^= static_cast<char>(0x5a);
        }
        std::ofstream(bin, std::ios::binary | std::ios::trunc) << bytes;
        auto damaged = HfWeights::open(dir, c);
        if (!damaged.is_ok()) continue;
        std::vector<float> got(p.size());
        (void)damaged->read(0, got.size(), got.data());
      }
    }
  }
}

// PyTorch checkpoints memwall cannot read safely are refused in one line, naming the file and why: a pickle
// that asks for os.system (not run: the file it would touch never appears), a compressed entry, a truncated
// archive, the legacy pre-1.6 format; a directory without weights names the files it looked for.
TEST(Import, RefusesPyTorchCheckpointsItCannotReadSafely) {
  const GptConfig c = small_config();
  const std::string dir = temp_dir("evil");
  ASSERT_TRUE(write_torch_bin(dir, "evil"));
  const std::string bin = dir + "/pytorch_model.bin";
  auto evil = HfWeights::open(dir, c);
  ASSERT_FALSE(evil.is_ok());
  EXPECT_NE(evil.status().message().find(bin + ": data.pkl asks for posix.system"), std::string::npos)
      << evil.status().message();
  EXPECT_NE(evil.status().message().find("refused without running it"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir + "/pwned"));
  const std::string whole = slurp(bin);
  std::ofstream(bin, std::ios::binary | std::ios::trunc) << whole.substr(0, whole.size() / 2);
  auto cut = HfWeights::open(dir, c);
  ASSERT_FALSE(cut.is_ok());
  EXPECT_NE(cut.status().message().find("truncated"), std::string::npos) << cut.status().message();
  ASSERT_TRUE(write_torch_bin(dir, "deflated"));
  auto packed = HfWeights::open(dir, c);
  ASSERT_FALSE(packed.is_ok());
  EXPECT_NE(packed.status().message().find("entry 'archive/data.pkl' is compressed"), std::string::npos)
      << packed.status().message();
  std::ofstream(bin, std::ios::binary | std::ios::trunc) << std::string("\x80\x02", 2) + "a legacy pickle";
  auto legacy = HfWeights::open(dir, c);
  ASSERT_FALSE(legacy.is_ok());
  EXPECT_NE(legacy.status().message().find("legacy format"), std::string::npos) << legacy.status().message();
  const std::string empty = temp_dir("no-weights");
  auto none = HfWeights::open(empty, c);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no model.safetensors, model.safetensors.index.json, "
                                         "pytorch_model.bin or pytorch_model.bin.index.json"),
            std::string::npos)
      << none.status().message();
}

// A file as transformers writes it: "transformer." names, 16-bit tensors, the tied head and the attention's
// mask buffers beside them (not used).
TEST(Import, ReadsSixteenBitTensorsWithTransformersNames) {
  const GptConfig c = small_config();
  for (const char* dtype : {"BF16", "F16"}) {
    SCOPED_TRACE(dtype);
    std::vector<float> p(gpt_num_params(c));
    gpt_init(c, p.data(), 4);
    std::vector<std::uint16_t> half(p.size());
    std::vector<float> want(p.size());
    if (std::string(dtype) == "BF16") {
      kernels::cast_f32_to_bf16(p.data(), half.data(), p.size());
      kernels::cast_bf16_to_f32(half.data(), want.data(), p.size());
    } else {
      kernels::cast_f32_to_f16(p.data(), half.data(), p.size());
      kernels::cast_f16_to_f32(half.data(), want.data(), p.size());
    }
    nlohmann::ordered_json header;
    std::string data;
    auto add = [&](const std::string& name, std::vector<int> shape, const std::uint16_t* v, std::size_t n) {
      header[name] = {
          {"dtype", dtype}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + 2 * n}}};
      data.append(reinterpret_cast<const char*>(v), 2 * n);
    };
    std::vector<std::uint16_t> mask(36, 0);
    add("transformer.h.0.attn.bias", {1, 1, 6, 6}, mask.data(), mask.size());
    for (const auto& t : gpt_param_layout(c)) {
      const bool linear = t.shape.size() == 2 && t.name.rfind("h.", 0) == 0;
      std::vector<std::uint16_t> v(half.begin() + static_cast<std::ptrdiff_t>(t.offset),
                                   half.begin() + static_cast<std::ptrdiff_t>(t.offset + t.numel));
      std::vector<int> shape = t.shape;
      if (linear) {  // Conv1D [in, out]
        const auto out = static_cast<std::size_t>(t.shape[0]), in = static_cast<std::size_t>(t.shape[1]);
        for (std::size_t o = 0; o < out; ++o) {
          for (std::size_t k = 0; k < in; ++k) v[k * out + o] = half[t.offset + o * in + k];
        }
        shape = {t.shape[1], t.shape[0]};
      }
      add("transformer." + t.name, shape, v.data(), v.size());
    }
    add("lm_head.weight", {c.vocab, c.channels}, half.data(), static_cast<std::size_t>(c.vocab) * c.channels);
    const std::string path = temp_dir("import16") + "/weights.safetensors";
    write_safetensors(path, header, data);
    const std::string file = slurp(path);
    auto w = HfWeights::open(path, c);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    EXPECT_EQ(w->dtype(), dtype);
    EXPECT_EQ(w->ignored(), (std::vector<std::string>{"lm_head.weight", "transformer.h.0.attn.bias"}));
    std::vector<float> got(p.size());
    ASSERT_TRUE(w->read(0, got.size(), got.data()).is_ok());
    EXPECT_EQ(got, want);
    // An LM head that is not wte's copy (the file's last tensor zeroed) is another model: refused.
    std::string untied = file;
    std::fill(untied.end() - 2 * static_cast<std::ptrdiff_t>(c.vocab) * c.channels, untied.end(), '\0');
    std::ofstream(path, std::ios::binary | std::ios::trunc) << untied;
    auto refused = HfWeights::open(path, c);
    ASSERT_FALSE(refused.is_ok());
    EXPECT_NE(refused.status().message().find("'lm_head.weight' differs from the token embedding"),
              std::string::npos)
        << refused.status().message();
  }
}

// A model in shards as transformers saves a large one: model.safetensors.index.json's weight_map naming
// model-0000k-of-00003.safetensors for each tensor (a Llama shape here, its tensors dealt round the shards).
// Reading by range crosses shards; the directory, or the index itself, opens it.
TEST(Import, ReadsAModelSavedInShards) {
  const GptConfig c = small_llama_config();
  std::vector<float> p(gpt_num_params(c));
  gpt_init(c, p.data(), 6);
  const std::string whole = temp_dir("import-whole"), dir = temp_dir("import-shards");
  ASSERT_TRUE(export_hf(c, p.data(), whole).is_ok());
  split_safetensors(whole + "/model.safetensors", dir, 3);
  for (const std::string& path : {dir, dir + "/model.safetensors.index.json"}) {
    auto w = HfWeights::open(path, c);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    EXPECT_EQ(w->file(), dir + "/model.safetensors.index.json");
    ASSERT_EQ(w->files().size(), 3u);
    EXPECT_EQ(w->files()[2], dir + "/model-00003-of-00003.safetensors");
    for (const std::size_t piece : {p.size(), std::size_t{61}}) {
      std::vector<float> got(p.size(), -1.0f);
      for (std::size_t at = 0; at < p.size(); at += piece) {
        const std::size_t n = std::min(piece, p.size() - at);
        ASSERT_TRUE(w->read(at, n, got.data() + at).is_ok());
      }
      EXPECT_EQ(got, p) << "pieces of " << piece;
    }
  }
  // A shard missing, a tensor in two shards, an index without a weight_map: one line naming the file.
  const auto expect_error = [&](const std::string& needle) {
    auto w = HfWeights::open(dir, c);
    ASSERT_FALSE(w.is_ok()) << needle;
    EXPECT_NE(w.status().message().find(needle), std::string::npos) << w.status().message();
  };
  std::filesystem::rename(dir + "/model-00002-of-00003.safetensors", dir + "/moved");
  expect_error(dir + "/model-00002-of-00003.safetensors: cannot open");
  std::filesystem::copy_file(dir + "/model-00001-of-00003.safetensors",
                             dir + "/model-00002-of-00003.safetensors");
  expect_error("' is in both " + dir + "/model-00001-of-00003.safetensors and " + dir +
               "/model-00002-of-00003.safetensors");
  std::ofstream(dir + "/model.safetensors.index.json", std::ios::trunc) << R"({"metadata": {}})";
  expect_error(dir + "/model.safetensors.index.json: no weight_map");
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(whole);
}

// gpt-oss's experts as OpenAI publishes them, MXFP4: for gate_up_proj and down_proj, name_blocks [experts,
// rows, in / 32, 16] (two FP4 E2M1 values a byte, the low nibble first) and name_scales [experts, rows,
// in / 32] (each block's E8M0 exponent, 2^(s - 127)). An fp32 export whose experts' weights are FP4 values
// times a power of two per row, rewritten with its experts in MXFP4, reads back exactly; one byte set by hand
// (0x71 under exponent 128: 0.5 x 2 then 6 x 2) lands as those two values in the gate's first row; a scale of
// the wrong dtype or blocks of the wrong shape are one line naming the tensor.
// Block-quantized FP8 weights as DeepSeek-V3, Kimi K2 and the Qwen3 FP8 releases publish them: each linear
// weight F8_E4M3 (OCP's E4M3FN: 0x38 is 1, 0x7E 448, 0x01 the smallest subnormal 2^-9, 0xB4 -0.75) with a
// weight_scale_inv of one scale per 128 x 128 block (F32, or BF16), the rest BF16/F32: read as value x its
// block's scale, whole or by ranges that cross blocks; an FP8 weight without its scales, or scales of another
// shape, is one line naming the tensor.
TEST(Import, ReadsBlockFp8Weights) {
  GptConfig c = small_llama_config();
  c.channels = 16;
  c.heads = 2;
  c.ffn = 200;  // (the MLP's matrices: 2 blocks of rows or of columns)
  const std::uint8_t codes[] = {0x38, 0x40, 0xC0, 0x01, 0x7E, 0x3C, 0x00, 0xB4};
  const float values[] = {1.0f, 2.0f, -2.0f, 0x1p-9f, 448.0f, 1.5f, 0.0f, -0.75f};
  std::vector<float> p(gpt_num_params(c)), want(p.size());
  gpt_init(c, p.data(), 6);
  nlohmann::ordered_json header;
  std::string data;
  const auto append = [&](const std::string& name, const char* dtype, const std::vector<std::size_t>& shape,
                          const void* bytes, std::size_t n) {
    header[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + n}}};
    data.append(static_cast<const char*>(bytes), n);
  };
  int fp8 = 0;
  for (const auto& t : hf_param_layout(c)) {
    const bool linear = t.shape.size() == 2 && t.name.find(".layers.") != std::string::npos;
    if (!linear) {
      append(t.name, "F32", {t.numel}, p.data() + t.offset, 4 * t.numel);
      if (t.shape.size() == 2) header[t.name]["shape"] = t.shape;
      std::copy_n(p.data() + t.offset, t.numel, want.data() + t.offset);
      continue;
    }
    const auto rows = static_cast<std::size_t>(t.shape[0]), cols = static_cast<std::size_t>(t.shape[1]);
    const std::size_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
    std::vector<std::uint8_t> q(t.numel);
    std::vector<float> scale(br * bc);
    for (std::size_t i = 0; i < scale.size(); ++i)
      scale[i] = 0.5f + static_cast<float>(i / bc + 2 * (i % bc));
    for (std::size_t i = 0; i < t.numel; ++i) {
      const std::size_t k = (i * 7 + static_cast<std::size_t>(fp8)) % 8;
      q[i] = codes[k];
      want[t.offset + i] = values[k] * scale[(i / cols) / 128 * bc + (i % cols) / 128];
    }
    append(t.name, "F8_E4M3", {rows, cols}, q.data(), q.size());
    if (fp8 % 2 == 0) {
      append(t.name + "_scale_inv", "F32", {br, bc}, scale.data(), 4 * scale.size());
    } else {  // (BF16 scales: these are exact in bf16)
      std::vector<std::uint16_t> s16(scale.size());
      kernels::cast_f32_to_bf16(scale.data(), s16.data(), scale.size());
      append(t.name + "_scale_inv", "BF16", {br, bc}, s16.data(), 2 * s16.size());
    }
    ++fp8;
  }
  ASSERT_GT(fp8, 4);
  const std::string dir = temp_dir("import-fp8");
  test_files::write_safetensors(dir + "/model.safetensors", header, data);
  auto w = HfWeights::open(dir, c);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  EXPECT_EQ(w->dtype(), "mixed");
  EXPECT_TRUE(w->ignored().empty());
  std::vector<float> got(p.size());
  ASSERT_TRUE(w->read(0, got.size(), got.data()).is_ok());
  EXPECT_EQ(got, want);
  // A range of the down projection [16, 200] from inside its first column block into the second, and of
  // the gate [200, 16] across its row blocks.
  for (const auto& t : gpt_param_layout(c)) {
    if (t.name != "model.layers.1.mlp.down_proj.weight" && t.name != "model.layers.0.mlp.gate_proj.weight")
      continue;
    const std::size_t from = t.offset + 120, n = t.numel - 150;
    std::vector<float> part(n);
    ASSERT_TRUE(w->read(from, n, part.data()).is_ok());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), want.begin() + static_cast<std::ptrdiff_t>(from)))
        << t.name;
  }
  // Refusals: the scales missing, or of another block size.
  const std::string gate = "model.layers.0.mlp.gate_proj.weight";
  nlohmann::ordered_json bare = header;
  bare.erase(gate + "_scale_inv");
  test_files::write_safetensors(dir + "/model.safetensors", bare, data);
  auto missing = HfWeights::open(dir, c);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("tensor '" + gate +
                                            "' has dtype F8_E4M3 without its block "
                                            "scales '" +
                                            gate + "_scale_inv'"),
            std::string::npos)
      << missing.status().message();
  nlohmann::ordered_json other = header;
  other[gate + "_scale_inv"]["shape"] = {1, 1};
  test_files::write_safetensors(dir + "/model.safetensors", other, data);
  auto blocks = HfWeights::open(dir, c);
  ASSERT_FALSE(blocks.is_ok());
  EXPECT_NE(
      blocks.status().message().find("'" + gate + "_scale_inv' has shape [1, 1], this model needs [2, 1]"),
      std::string::npos)
      << blocks.status().message();
  std::filesystem::remove_all(dir);
}

TEST(Import, ReadsGptOssMxfp4Experts) {
  static constexpr float kFp4[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  GptConfig c = small_llama_config();
  c.channels = 32;
  c.max_seq = 8;
  c.gpt_oss = c.qkv_bias = true;
  c.experts = 3;
  c.experts_per_token = 2;
  c.expert_ffn = 32;
  c.norm_topk = true;
  std::vector<float> p(gpt_num_params(c));
  gpt_init(c, p.data(), 5);
  // Every expert weight row (one block of 32: C and F are 32) FP4 values times 2^(row's exponent).
  struct Row {
    std::size_t at;  // its first element in p
    int exponent;
  };
  std::map<std::string, std::size_t> offset;
  for (const auto& t : gpt_param_layout(c)) offset[t.name] = t.offset;
  const std::size_t C = 32, F = 32;
  int k = 0;
  for (const auto& t : gpt_param_layout(c)) {
    if (t.name.find(".mlp.experts.") == std::string::npos || t.shape.size() != 2) continue;
    for (std::size_t r = 0; r < static_cast<std::size_t>(t.shape[0]); ++r, ++k) {
      for (std::size_t i = 0; i < 32; ++i) {
        const float v = kFp4[(i * 5 + static_cast<std::size_t>(k)) % 8] * ((i + r) % 3 == 0 ? -1.0f : 1.0f);
        p[t.offset + r * 32 + i] = std::ldexp(v, k % 7 - 4);
      }
    }
  }
  const std::string dir = temp_dir("import-mxfp4");
  ASSERT_TRUE(export_hf(c, p.data(), dir).is_ok());
  // The file rewritten: each layer's gate_up_proj and down_proj as blocks and scales, the rest as they were.
  const std::string file = dir + "/model.safetensors", bytes = slurp(file);
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  const nlohmann::json old = safetensors_header(file);
  nlohmann::ordered_json header;
  std::string data;
  const auto add = [&](const std::string& name, const char* dtype, const std::vector<std::size_t>& shape,
                       const std::string& raw) {
    header[name] = {
        {"dtype", dtype}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + raw.size()}}};
    data += raw;
  };
  // The byte of the FP4 value v / 2^e.
  const auto nibble = [](float v, int e) {
    const float m = std::ldexp(std::fabs(v), -e);
    for (int i = 0; i < 8; ++i) {
      if (kFp4[i] == m) return (std::signbit(v) && m != 0 ? 8 : 0) + i;
    }
    ADD_FAILURE() << v << " is not FP4 at exponent " << e;
    return 0;
  };
  for (const auto& [name, e] : old.items()) {
    if (name == "__metadata__") continue;
    const bool gate_up = name.ends_with(".mlp.experts.gate_up_proj"),
               down = name.ends_with(".mlp.experts.down_proj");
    if (!gate_up && !down) {
      const auto off = e["data_offsets"].get<std::vector<std::size_t>>();
      add(name, e["dtype"].get<std::string>().c_str(), e["shape"].get<std::vector<std::size_t>>(),
          bytes.substr(8 + header_bytes + off[0], off[1] - off[0]));
      continue;
    }
    // Rows: gate_up_proj's 2F (gate f at 2f, up f at 2f + 1), down_proj's C; each one block of 32 inputs.
    const std::string layer = name.substr(0, name.find(".mlp."));
    const std::size_t rows = gate_up ? 2 * F : C;
    std::string blocks, scales;
    for (std::size_t x = 0; x < static_cast<std::size_t>(c.experts); ++x) {
      const std::string stem = layer + ".mlp.experts." + std::to_string(x) + ".";
      for (std::size_t r = 0; r < rows; ++r) {
        const float* row =
            gate_up ? p.data() + offset[stem + (r % 2 == 0 ? "gate_proj" : "up_proj") + ".weight"] + r / 2 * C
                    : p.data() + offset[stem + "down_proj.weight"] + r * F;
        float largest = 0;
        for (std::size_t i = 0; i < 32; ++i) largest = std::max(largest, std::fabs(row[i]));
        int ex =
            0;  // each row's largest is 6 x 2^e (every FP4 magnitude appears in a row) = 0.75 x 2^(e + 3)
        std::frexp(largest, &ex);
        ex -= 3;
        scales += static_cast<char>(ex + 127);
        for (std::size_t i = 0; i < 32; i += 2)
          blocks += static_cast<char>(nibble(row[i], ex) | nibble(row[i + 1], ex) << 4);
      }
    }
    const std::size_t in = gate_up ? C : F;
    add(name + "_blocks", "U8", {static_cast<std::size_t>(c.experts), rows, in / 32, 16}, blocks);
    add(name + "_scales", "U8", {static_cast<std::size_t>(c.experts), rows, in / 32}, scales);
  }
  write_safetensors(file, header, data);
  {
    auto w = HfWeights::open(dir, c);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    std::vector<float> got(p.size());
    ASSERT_TRUE(w->read(0, got.size(), got.data()).is_ok());
    EXPECT_EQ(got, p);
    EXPECT_TRUE(w->ignored().empty());
    EXPECT_EQ(w->dtype(), "mixed");  // (F32 and MXFP4)
  }
  // Expert 0's first gate_up byte and its row's exponent by hand.
  const std::string first = "model.layers.0.mlp.experts.gate_up_proj_";
  std::string edited = data;
  edited[header[first + "blocks"]["data_offsets"][0].get<std::size_t>()] = static_cast<char>(0x71);
  edited[header[first + "scales"]["data_offsets"][0].get<std::size_t>()] = static_cast<char>(128);
  write_safetensors(file, header, edited);
  {
    auto w = HfWeights::open(dir, c);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    std::vector<float> got(p.size());
    ASSERT_TRUE(w->read(0, got.size(), got.data()).is_ok());
    const std::size_t gate = offset["model.layers.0.mlp.experts.0.gate_proj.weight"];
    EXPECT_EQ(got[gate], 1.0f);
    EXPECT_EQ(got[gate + 1], 12.0f);
    EXPECT_EQ(got[gate + 2],
              2.0f * p[gate + 2] /
                  std::ldexp(1.0f, static_cast<unsigned char>(
                                       data[header[first + "scales"]["data_offsets"][0].get<std::size_t>()]) -
                                       127));
  }
  nlohmann::ordered_json bad = header;
  bad[first + "scales"]["dtype"] = "F8_E8M0";
  write_safetensors(file, bad, data);
  auto w = HfWeights::open(dir, c);
  ASSERT_FALSE(w.is_ok());
  EXPECT_NE(w.status().message().find("tensor '" + first + "scales' has dtype F8_E8M0; allowed: U8"),
            std::string::npos)
      << w.status().message();
  bad = header;
  bad[first + "blocks"]["shape"] = {3, 64, 2, 8};
  write_safetensors(file, bad, data);
  w = HfWeights::open(dir, c);
  ASSERT_FALSE(w.is_ok());
  EXPECT_NE(w.status().message().find("tensor '" + first +
                                      "blocks' has shape [3, 64, 2, 8], this model needs [3, 64, 1, 16]"),
            std::string::npos)
      << w.status().message();
  // (a bias cannot be MXFP4: blocks of 32 along a weight's inputs)
  bad = header;
  const std::string bias = "model.layers.0.mlp.experts.down_proj_bias";
  bad[bias + "_blocks"] = bad[bias];
  bad[bias + "_scales"] = bad[bias];
  bad.erase(bias);
  write_safetensors(file, bad, data);
  w = HfWeights::open(dir, c);
  ASSERT_FALSE(w.is_ok());
  EXPECT_NE(
      w.status().message().find("tensor '" + bias + "' is MXFP4 (_blocks, _scales), which needs a weight"),
      std::string::npos)
      << w.status().message();
  std::filesystem::remove_all(dir);
}

// Each way a file can fail to be this model's weights: one message naming the file and what is wrong.
TEST(Import, FilesThatAreNotThisModelAreNamed) {
  const GptConfig c = small_config();
  std::vector<float> p(gpt_num_params(c), 0.5f);
  const std::string dir = temp_dir("import-bad");
  ASSERT_TRUE(export_hf(c, p.data(), dir).is_ok());
  const std::string good = slurp(dir + "/model.safetensors");
  auto expect_error = [&](const GptConfig& model, const std::string& bytes, const std::string& needle) {
    const std::string path = dir + "/case.safetensors";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    auto w = HfWeights::open(path, model);
    ASSERT_FALSE(w.is_ok()) << needle;
    EXPECT_NE(w.status().message().find(path), std::string::npos) << w.status().message();
    EXPECT_NE(w.status().message().find(needle), std::string::npos) << w.status().message();
    EXPECT_EQ(w.status().message().find('\n'), std::string::npos);
  };
  GptConfig deeper = c;
  deeper.layers = 3;
  expect_error(deeper, good, "tensor 'h.2.ln_1.weight' is missing");
  GptConfig wider_vocab = c;
  wider_vocab.vocab = 256;
  expect_error(wider_vocab, good, "'wte.weight' has shape [13, 8], this model needs [256, 8]");
  expect_error(c, good.substr(0, good.size() - 4), "data_offsets do not fit");
  expect_error(c, "not a file of tensors", "not a safetensors file");
  std::string bad_dtype = good;
  const std::size_t at = bad_dtype.find("\"F32\"");
  ASSERT_NE(at, std::string::npos);
  bad_dtype.replace(at, 5, "\"I32\"");
  expect_error(c, bad_dtype, "has dtype I32; allowed: F32, F16, BF16");
  auto missing = HfWeights::open(dir + "/nope.safetensors", c);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("nope.safetensors"), std::string::npos);
}

// Weights files damaged every way: header bytes flipped, cut, repeated; the header length wrong; valid JSON
// with odd values in every entry (dtypes, shapes, offsets negative, huge, fractional, strings, reversed,
// overlapping); a shard index with odd weight maps. Each opens and reads back, or is one line naming the
// file, never a crash (scripts/sanitize.sh runs this under ASan and UBSan).
TEST(Import, DamagedFilesNeverCrash) {
  const GptConfig c = small_llama_config();
  std::vector<float> p(gpt_num_params(c));
  gpt_init(c, p.data(), 3);
  const std::string dir = temp_dir("import-damaged"), shards = temp_dir("import-damaged-shards");
  ASSERT_TRUE(export_hf(c, p.data(), dir, ExportDtype::kBF16).is_ok());
  const std::string good = slurp(dir + "/model.safetensors");
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i)
    header_bytes = (header_bytes << 8) | static_cast<unsigned char>(good[static_cast<std::size_t>(i)]);
  const nlohmann::json header = nlohmann::json::parse(good.substr(8, header_bytes));
  const std::string data = good.substr(8 + header_bytes);
  split_safetensors(dir + "/model.safetensors", shards, 2);
  const nlohmann::json index = nlohmann::json::parse(slurp(shards + "/model.safetensors.index.json"));
  testing::XorShift next{0x9E3779B97F4A7C15ull};  // the same cases on every run
  const nlohmann::json odd[] = {-1,
                                nullptr,
                                "F32",
                                3.5,
                                nlohmann::json::array(),
                                nlohmann::json::array({1}),
                                nlohmann::json::array({-8, 4}),
                                nlohmann::json::array({8, 4}),
                                nlohmann::json::array({0, 1ull << 62}),
                                nlohmann::json::array({1ull << 40, 1ull << 40}),
                                nlohmann::json::object(),
                                "I8",
                                "BF16"};
  int opened = 0, refused = 0;
  const std::string path = dir + "/case.safetensors";
  const auto try_open = [&](const std::string& file) {
    auto w = HfWeights::open(file, c);
    if (!w.is_ok()) {
      ++refused;
      EXPECT_EQ(w.status().message().find('\n'), std::string::npos) << w.status().message();
      return;
    }
    ++opened;
    std::vector<float> got(p.size());
    (void)w->read(0, got.size(), got.data());  // reads back, or says why not
  };
  std::vector<std::string> names;
  for (const auto& item : header.items()) {
    if (item.key() != "__metadata__") names.push_back(item.key());
  }
  for (int k = 0; k < 400; ++k) {
    std::string bytes;
    if (k < 150) {  // bytes of the header (and its length) damaged
      bytes = good;
      testing::damage_bytes(bytes, next, 8 + static_cast<std::size_t>(header_bytes), 24);
    } else {  // valid JSON with odd values
      nlohmann::ordered_json h = nlohmann::ordered_json::parse(header.dump());
      for (int e = 0, edits = 1 + static_cast<int>(next() % 3); e < edits; ++e) {
        const std::string& name = names[next() % names.size()];
        const char* key = next() % 3 == 0 ? "dtype" : next() % 2 == 0 ? "shape" : "data_offsets";
        if (next() % 10 == 0) {
          h[name] = odd[next() % std::size(odd)];
        } else {
          h[name][key] = odd[next() % std::size(odd)];
        }
      }
      std::string hs = h.dump();
      std::string len(8, '\0');
      for (int i = 0; i < 8; ++i)
        len[static_cast<std::size_t>(i)] = static_cast<char>((hs.size() >> (8 * i)) & 0xff);
      bytes = len + hs + data;
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    try_open(path);
  }
  // Shard indexes with odd weight maps (the shards themselves good).
  for (int k = 0; k < 100; ++k) {
    nlohmann::json bad = index;
    const std::string& name = names[next() % names.size()];
    switch (next() % 4) {
      case 0:
        bad["weight_map"][name] = odd[next() % std::size(odd)];
        break;
      case 1:
        bad["weight_map"][name] = "../" + std::string("model-00001-of-00002.safetensors");
        break;
      case 2:
        bad["weight_map"] = odd[next() % std::size(odd)];
        break;
      default:
        bad["weight_map"][name + "x"] = "model-00002-of-00002.safetensors";
        break;
    }
    std::ofstream(shards + "/model.safetensors.index.json", std::ios::trunc) << bad.dump();
    try_open(shards);
  }
  std::printf("%d damaged weights files opened, %d refused\n", opened, refused);
  EXPECT_GT(refused, 250);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(shards);
}

}  // namespace
}  // namespace memwall::model
