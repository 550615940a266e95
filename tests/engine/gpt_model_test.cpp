// The GPT model assembled from kernels/cpu: parameter layout, initialisation, and the full backward pass
// against central finite differences of the loss on a tiny configuration.
#include "engine/model/gpt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace memwall::model {
namespace {

GptConfig tiny() {
  GptConfig c;
  c.vocab = 11;
  c.max_seq = 8;
  c.layers = 2;
  c.heads = 2;
  c.channels = 8;
  return c;
}

TEST(GptModel, LayoutCountsEveryParameterOnce) {
  const GptConfig c = tiny();
  const auto layout = gpt_param_layout(c);
  std::size_t next = 0;
  for (const auto& t : layout) {
    EXPECT_EQ(t.offset, next) << t.name;
    next += t.numel;
  }
  const std::size_t C = 8, per_layer = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C +
                                       4 * C * C + C;
  EXPECT_EQ(gpt_num_params(c), 11 * C + 8 * C + 2 * per_layer + 2 * C);
  EXPECT_EQ(layout.front().name, "wte.weight");
  EXPECT_EQ(layout[2].name, "h.0.ln_1.weight");
  EXPECT_EQ(layout.back().name, "ln_f.bias");
}

TEST(GptModel, RejectsBadConfigsNamingTheField) {
  GptConfig c = tiny();
  c.heads = 3;
  EXPECT_NE(validate(c, 1, 4).message().find("divisible by heads"), std::string::npos);
  EXPECT_NE(validate(tiny(), 1, 9).message().find("max_seq"), std::string::npos);
  EXPECT_NE(validate(tiny(), 0, 4).message().find("batch"), std::string::npos);
  EXPECT_TRUE(validate(tiny(), 2, 8).is_ok());
}

TEST(GptModel, InitialLossIsNearUniformAndDeterministic) {
  const GptConfig c = tiny();
  std::vector<float> p(gpt_num_params(c)), q(p.size());
  gpt_init(c, p.data(), 7);
  gpt_init(c, q.data(), 7);
  EXPECT_EQ(p, q);
  const int B = 2, T = 8;
  std::vector<int> tok(B * T), tgt(B * T);
  for (int i = 0; i < B * T; ++i) tok[i] = (3 * i) % 11, tgt[i] = (5 * i + 1) % 11;
  GptModel m(c, B, T);
  const float loss = m.forward(p.data(), tok.data(), tgt.data());
  // Small weights: predictions close to uniform over 11 classes.
  EXPECT_NEAR(static_cast<double>(loss), std::log(11.0), 0.05);
}

TEST(GptModel, BackwardMatchesFiniteDifferences) {
  const GptConfig c = tiny();
  std::vector<float> p(gpt_num_params(c));
  gpt_init(c, p.data(), 3);
  // Larger weights than GPT-2's init so every path carries a visible gradient.
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 0.3f);
  for (auto& x : p) x += d(rng);
  const int B = 2, T = 5;
  std::vector<int> tok(B * T), tgt(B * T);
  for (int i = 0; i < B * T; ++i) tok[i] = (7 * i + 2) % 11, tgt[i] = (4 * i + 3) % 11;
  GptModel m(c, B, T);
  m.forward(p.data(), tok.data(), tgt.data());
  std::vector<float> g(p.size(), 0.0f);
  m.backward(p.data(), g.data());
  const float h = 1e-2f;
  int checked = 0;
  for (const auto& t : gpt_param_layout(c)) {
    // A few coordinates of every tensor, so no parameter tensor's gradient goes unchecked.
    for (std::size_t j = 0; j < t.numel; j += std::max<std::size_t>(1, t.numel / 3)) {
      const std::size_t i = t.offset + j;
      const float saved = p[i];
      p[i] = saved + h;
      const double up = m.forward(p.data(), tok.data(), tgt.data());
      p[i] = saved - h;
      const double down = m.forward(p.data(), tok.data(), tgt.data());
      p[i] = saved;
      const double numeric = (up - down) / (2.0 * static_cast<double>(h));
      EXPECT_NEAR(g[i], numeric, 2e-3 + 5e-2 * std::fabs(numeric)) << t.name << "[" << j << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 3 * 28);
}

}  // namespace
}  // namespace memwall::model
