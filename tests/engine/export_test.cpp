// Hugging Face export: the safetensors header and bytes, transposed linear weights, the config.
#include "engine/model/export.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

namespace memwall::model {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Export, WritesSafetensorsWithConv1dLayoutAndConfig) {
  GptConfig c;
  c.vocab = 13;
  c.max_seq = 6;
  c.layers = 2;
  c.heads = 2;
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

}  // namespace
}  // namespace memwall::model
