// GPT operators: oneDNN matmuls against the reference, every backward against central finite differences,
// causal attention against a naive double-precision implementation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "cpu/cast.h"
#include "cpu/gpt_ops.h"
#include "cpu/vexp.h"

namespace memwall::kernels {
namespace {

std::vector<float> randn(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, double rel, double abs,
                  const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], abs + rel * std::fabs(b[i])) << what << " [" << i << "]";
  }
}

// Checks d(sum(out * R))/dx from `backward` against central differences of `forward`.
void check_gradient(std::vector<float>& x, const std::function<std::vector<float>()>& forward,
                    const std::vector<float>& analytic, const std::vector<float>& r, const char* what,
                    float h = 1e-2f, double tol = 2e-2) {
  for (std::size_t i = 0; i < x.size(); i += std::max<std::size_t>(1, x.size() / 40)) {
    const float saved = x[i];
    x[i] = saved + h;
    std::vector<float> up = forward();
    x[i] = saved - h;
    std::vector<float> down = forward();
    x[i] = saved;
    double lu = 0, ld = 0;
    for (std::size_t k = 0; k < r.size(); ++k) {
      lu += static_cast<double>(up[k]) * r[k];
      ld += static_cast<double>(down[k]) * r[k];
    }
    const double numeric = (lu - ld) / (2.0 * h);
    EXPECT_NEAR(analytic[i], numeric, 1e-3 + tol * std::fabs(numeric)) << what << " [" << i << "]";
  }
}

TEST(Matmul, BackendMatchesTheReference) {
  const int N = 37, IC = 65, OC = 29;
  const auto inp = randn(N * IC, 1), w = randn(OC * IC, 2), b = randn(OC, 3), dout = randn(N * OC, 4);
  std::vector<float> out(N * OC), ref(N * OC);
  matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, IC, OC);
  matmul_forward_ref(ref.data(), inp.data(), w.data(), b.data(), N, IC, OC);
  expect_close(out, ref, 1e-4, 1e-4, "forward");
  // Backward accumulates: start from non-zero gradients.
  std::vector<float> di = randn(N * IC, 5), dw = randn(OC * IC, 6), db = randn(OC, 7);
  std::vector<float> di_ref = di, dw_ref = dw, db_ref = db;
  matmul_backward(di.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
  matmul_backward_ref(di_ref.data(), dw_ref.data(), db_ref.data(), dout.data(), inp.data(), w.data(), N, IC,
                      OC);
  expect_close(di, di_ref, 1e-4, 1e-4, "dinp");
  expect_close(dw, dw_ref, 1e-4, 1e-4, "dweight");
  expect_close(db, db_ref, 1e-5, 1e-5, "dbias");
}

// A block of OC columns at column 11 of a W-wide array: forward writes those columns only (the rest keep
// their values) and equals the dense product; backward reading dout there equals the dense backward; fp32
// and bf16 (oneDNN and the reference alike).
TEST(Matmul, ColumnsOfAWiderArrayMatchTheDenseProduct) {
  const int N = 37, IC = 65, OC = 29, W = 50, col0 = 11;
  const auto inp = randn(N * IC, 31), w = randn(OC * IC, 32), b = randn(OC, 33), wide_dout = randn(N * W, 34);
  std::vector<std::uint16_t> inp16(inp.size()), w16(w.size());
  cast_f32_to_bf16(inp.data(), inp16.data(), inp.size());
  cast_f32_to_bf16(w.data(), w16.data(), w.size());
  std::vector<float> dout(N * OC);
  for (int r = 0; r < N; ++r) std::copy_n(wide_dout.data() + r * W + col0, OC, dout.data() + r * OC);
  std::vector<std::uint16_t> dout16(dout.size());
  cast_f32_to_bf16(dout.data(), dout16.data(), dout.size());
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    std::vector<float> dense(N * OC), wide = randn(N * W, 35);
    const std::vector<float> before = wide;
    if (bf16) {
      matmul_forward_bf16(dense.data(), inp16.data(), w16.data(), b.data(), N, IC, OC);
      matmul_forward_bf16(wide.data() + col0, inp16.data(), w16.data(), b.data(), N, IC, OC, W);
    } else {
      matmul_forward(dense.data(), inp.data(), w.data(), b.data(), N, IC, OC);
      matmul_forward(wide.data() + col0, inp.data(), w.data(), b.data(), N, IC, OC, W);
    }
    for (int r = 0; r < N; ++r) {
      for (int c = 0; c < W; ++c) {
        const std::size_t at = static_cast<std::size_t>(r) * W + c;
        if (c < col0 || c >= col0 + OC) {
          ASSERT_EQ(wide[at], before[at]) << r << " " << c;
        } else {
          ASSERT_NEAR(wide[at], dense[static_cast<std::size_t>(r) * OC + c - col0], 1e-4) << r << " " << c;
        }
      }
    }
    std::vector<float> di = randn(N * IC, 36), dw = randn(OC * IC, 37), db = randn(OC, 38);
    std::vector<float> di2 = di, dw2 = dw, db2 = db;
    if (bf16) {
      matmul_backward_bf16(di.data(), dw.data(), db.data(), dout.data(), dout16.data(), inp16.data(),
                           w16.data(), N, IC, OC);
      matmul_backward_bf16(di2.data(), dw2.data(), db2.data(), wide_dout.data() + col0, dout16.data(),
                           inp16.data(), w16.data(), N, IC, OC, W);
    } else {
      matmul_backward(di.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
      matmul_backward(di2.data(), dw2.data(), db2.data(), wide_dout.data() + col0, inp.data(), w.data(), N,
                      IC, OC, W);
    }
    expect_close(di2, di, 1e-5, 1e-5, "dinp");
    expect_close(dw2, dw, 1e-5, 1e-5, "dweight");
    expect_close(db2, db, 1e-6, 1e-6, "dbias");
  }
  // The references too.
  std::vector<float> dense(N * OC), wide(N * W, 0.0f);
  matmul_forward_ref(dense.data(), inp.data(), w.data(), b.data(), N, IC, OC);
  matmul_forward_ref(wide.data() + col0, inp.data(), w.data(), b.data(), N, IC, OC, W);
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < OC; ++c)
      ASSERT_EQ(wide[static_cast<std::size_t>(r) * W + col0 + c], dense[r * OC + c]);
  std::vector<float> di(N * IC, 0.0f), dw(OC * IC, 0.0f), db(OC, 0.0f), di2 = di, dw2 = dw, db2 = db;
  matmul_backward_ref(di.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
  matmul_backward_ref(di2.data(), dw2.data(), db2.data(), wide_dout.data() + col0, inp.data(), w.data(), N,
                      IC, OC, W);
  EXPECT_EQ(di2, di);
  EXPECT_EQ(dw2, dw);
  EXPECT_EQ(db2, db);
}

TEST(Matmul, Bf16InputsAccumulateInFp32) {
  const int N = 33, IC = 96, OC = 40;
  const auto inp = randn(N * IC, 8), w = randn(OC * IC, 9);
  std::vector<std::uint16_t> inp16(inp.size()), w16(w.size());
  cast_f32_to_bf16(inp.data(), inp16.data(), inp.size());
  cast_f32_to_bf16(w.data(), w16.data(), w.size());
  std::vector<float> inp_r(inp.size()), w_r(w.size());
  cast_bf16_to_f32(inp16.data(), inp_r.data(), inp.size());
  cast_bf16_to_f32(w16.data(), w_r.data(), w.size());
  std::vector<float> out(N * OC), ref(N * OC);
  matmul_forward_bf16(out.data(), inp16.data(), w16.data(), nullptr, N, IC, OC);
  matmul_forward_ref(ref.data(), inp_r.data(), w_r.data(), nullptr, N, IC, OC);
  expect_close(out, ref, 1e-4, 1e-4, "bf16 forward");
}

TEST(GptOps, MatmulBackwardMatchesFiniteDifferences) {
  const int N = 4, IC = 6, OC = 5;
  auto inp = randn(N * IC, 10), w = randn(OC * IC, 11), b = randn(OC, 12);
  const auto r = randn(N * OC, 13);
  auto forward = [&] {
    std::vector<float> out(N * OC);
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, IC, OC);
    return out;
  };
  std::vector<float> di(N * IC), dw(OC * IC), db(OC);
  matmul_backward(di.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), N, IC, OC);
  check_gradient(inp, forward, di, r, "dinp");
  check_gradient(w, forward, dw, r, "dweight");
  check_gradient(b, forward, db, r, "dbias");
}

TEST(GptOps, LayernormBackwardMatchesFiniteDifferences) {
  const int N = 3, C = 16;
  auto x = randn(N * C, 20), w = randn(C, 21), b = randn(C, 22);
  const auto r = randn(N * C, 23);
  std::vector<float> mean(N), rstd(N);
  auto forward = [&] {
    std::vector<float> out(N * C);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return out;
  };
  forward();
  std::vector<float> dx(N * C), dw(C), db(C);
  layernorm_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(), rstd.data(),
                     N, C);
  check_gradient(x, forward, dx, r, "dinp", 1e-2f, 3e-2);
  check_gradient(w, forward, dw, r, "dweight");
  check_gradient(b, forward, db, r, "dbias");

  // Without a bias (MPT's): the output less the bias, the same input and weight gradients.
  std::vector<float> with_bias = forward(), out(N * C), mean2(N), rstd2(N);
  layernorm_forward(out.data(), mean2.data(), rstd2.data(), x.data(), w.data(), nullptr, N, C);
  for (int i = 0; i < N * C; ++i) EXPECT_FLOAT_EQ(out[i] + b[i % C], with_bias[i]) << i;
  std::vector<float> dx2(N * C), dw2(C);
  layernorm_backward(dx2.data(), dw2.data(), nullptr, r.data(), x.data(), w.data(), mean2.data(),
                     rstd2.data(), N, C);
  EXPECT_EQ(dx2, dx);
  EXPECT_EQ(dw2, dw);

  // Without weight or bias (OLMo's): the weight taken as 1, the input gradient that of a weight of ones.
  const std::vector<float> ones(C, 1.0f);
  std::vector<float> plain(N * C), unit(N * C), mean3(N), rstd3(N);
  layernorm_forward(plain.data(), mean3.data(), rstd3.data(), x.data(), nullptr, nullptr, N, C);
  layernorm_forward(unit.data(), mean3.data(), rstd3.data(), x.data(), ones.data(), nullptr, N, C);
  EXPECT_EQ(plain, unit);
  std::vector<float> dx3(N * C), dx4(N * C), dw4(C);
  layernorm_backward(dx3.data(), nullptr, nullptr, r.data(), x.data(), nullptr, mean3.data(), rstd3.data(), N,
                     C);
  layernorm_backward(dx4.data(), dw4.data(), nullptr, r.data(), x.data(), ones.data(), mean3.data(),
                     rstd3.data(), N, C);
  EXPECT_EQ(dx3, dx4);
}

TEST(GptOps, RmsnormBackwardMatchesFiniteDifferences) {
  const int N = 3, C = 16;
  auto x = randn(N * C, 24), w = randn(C, 25);
  const auto r = randn(N * C, 26);
  std::vector<float> rstd(N);
  auto forward = [&] {
    std::vector<float> out(N * C);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    return out;
  };
  const auto y = forward();
  // Each row of the output over the weight has unit root mean square.
  double ms = 0;
  for (int i = 0; i < C; ++i) ms += std::pow(static_cast<double>(y[i] / w[i]), 2);
  EXPECT_NEAR(ms / C, 1.0, 1e-4);
  std::vector<float> dx(N * C), dw(C);
  rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), N, C);
  check_gradient(x, forward, dx, r, "dinp", 1e-2f, 3e-2);
  check_gradient(w, forward, dw, r, "dweight");
  // Gemma's 1 + weight: the output is the plain norm's with weight + 1, the gradients its own.
  std::vector<float> w1(w);
  for (float& v : w1) v += 1.0f;
  std::vector<float> plain(N * C), offset(N * C);
  rmsnorm_forward(plain.data(), rstd.data(), x.data(), w1.data(), N, C, 1e-5f);
  rmsnorm_forward(offset.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f, 1.0f);
  for (std::size_t i = 0; i < plain.size(); ++i)
    EXPECT_NEAR(offset[i], plain[i], 1e-6f * (1 + std::fabs(plain[i])));
  auto forward1 = [&] {
    std::vector<float> out(N * C);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f, 1.0f);
    return out;
  };
  forward1();
  std::vector<float> dx1(N * C), dw1(C);
  rmsnorm_backward(dx1.data(), dw1.data(), r.data(), x.data(), w.data(), rstd.data(), N, C, 1.0f);
  check_gradient(x, forward1, dx1, r, "dinp (1 + weight)", 1e-2f, 3e-2);
  check_gradient(w, forward1, dw1, r, "dweight (1 + weight)");
}

// Qwen3's per-head norm: each query head is rmsnorm_forward of that head with the first weight, each key head
// with the second, the values pass through; backward against finite differences, values' gradient copied.
// Also OLMo 2's grouped-query form: one "head" of all 12 query channels, one of the 6 key channels.
TEST(GptOps, HeadRmsnormNormalisesEachQueryAndKeyHead) {
  struct Heads {
    int NH, KVH, hs, khs, values;  // query heads of hs, key heads of khs, value channels
  };
  for (const Heads g : {Heads{4, 2, 6, 6, 12}, Heads{1, 1, 12, 6, 6}}) {
    SCOPED_TRACE(std::to_string(g.NH) + " query heads of " + std::to_string(g.hs));
    const int N = 3, H = g.NH + g.KVH, normed = g.NH * g.hs + g.KVH * g.khs, W = normed + g.values;
    auto x = randn(static_cast<std::size_t>(N) * W, 27),
         w = randn(static_cast<std::size_t>(g.hs + g.khs), 28);
    const auto r = randn(x.size(), 29);
    std::vector<float> rstd(static_cast<std::size_t>(N) * H);
    auto forward = [&] {
      std::vector<float> out(x.size());
      head_rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, W, g.NH, g.KVH, g.hs, g.khs,
                           1e-6f);
      return out;
    };
    const auto y = forward();
    for (int n = 0; n < N; ++n) {
      for (int h = 0; h < H; ++h) {
        const int width = h < g.NH ? g.hs : g.khs,
                  start = h < g.NH ? h * g.hs : g.NH * g.hs + (h - g.NH) * g.khs;
        const std::size_t at = static_cast<std::size_t>(n) * W + static_cast<std::size_t>(start);
        std::vector<float> one(static_cast<std::size_t>(width));
        float s = 0;
        rmsnorm_forward(one.data(), &s, x.data() + at, w.data() + (h < g.NH ? 0 : g.hs), 1, width, 1e-6f);
        EXPECT_EQ(rstd[static_cast<std::size_t>(n) * H + h], s) << "row " << n << " head " << h;
        for (int i = 0; i < width; ++i) EXPECT_EQ(y[at + i], one[i]) << "row " << n << " head " << h;
      }
      for (int i = normed; i < W; ++i) {  // the values, unchanged
        EXPECT_EQ(y[static_cast<std::size_t>(n) * W + i], x[static_cast<std::size_t>(n) * W + i])
            << "row " << n;
      }
    }
    std::vector<float> dx(x.size(), 7.0f), dw(w.size());  // dx is written, not accumulated
    head_rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), N, W, g.NH, g.KVH,
                          g.hs, g.khs);
    check_gradient(x, forward, dx, r, "dinp", 1e-2f, 3e-2);
    check_gradient(w, forward, dw, r, "dweight");
  }
}

// StableLM 2 12B's per-head LayerNorms: each of the 6 query and key heads is layernorm_forward of that head
// with its own weight and no bias, the values pass through; backward against finite differences.
TEST(GptOps, HeadLayernormNormalisesEachHeadWithItsOwnWeight) {
  const int N = 3, heads = 6, hs = 5, W = (heads + 2) * hs;  // 4 query heads, 2 key heads, 2 value heads
  auto x = randn(static_cast<std::size_t>(N) * W, 30), w = randn(static_cast<std::size_t>(heads) * hs, 31);
  const auto r = randn(x.size(), 32);
  std::vector<float> mean(static_cast<std::size_t>(N) * heads), rstd(mean.size());
  auto forward = [&] {
    std::vector<float> out(x.size());
    head_layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), N, W, heads, hs, 1e-5f);
    return out;
  };
  const auto y = forward();
  for (int n = 0; n < N; ++n) {
    for (int h = 0; h < heads + 2; ++h) {
      const std::size_t at = static_cast<std::size_t>(n) * W + static_cast<std::size_t>(h) * hs;
      std::vector<float> one(hs);
      float m = 0, s = 0;
      if (h < heads) {
        layernorm_forward(one.data(), &m, &s, x.data() + at, w.data() + h * hs, nullptr, 1, hs);
        EXPECT_EQ(mean[static_cast<std::size_t>(n) * heads + h], m);
        EXPECT_EQ(rstd[static_cast<std::size_t>(n) * heads + h], s);
      } else {
        std::copy_n(x.data() + at, hs, one.data());  // a value head, unchanged
      }
      for (int i = 0; i < hs; ++i) EXPECT_EQ(y[at + i], one[i]) << "row " << n << " head " << h;
    }
  }
  std::vector<float> dx(x.size(), 7.0f), dw(w.size());  // dx is written, not accumulated
  head_layernorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), mean.data(), rstd.data(), N, W,
                          heads, hs);
  check_gradient(x, forward, dx, r, "dinp", 1e-2f, 3e-2);
  check_gradient(w, forward, dw, r, "dweight");
}

// Grouped-query heads: query head h reads key/value head h / group, and sum_kv is repeat_kv's adjoint:
// <repeat(x), y> = <x, sum(y)> for any x and y.
TEST(GptOps, RepeatKvCopiesGroupsAndSumKvIsItsAdjoint) {
  const int N = 5, C = 24, NH = 6, KVH = 2, hs = C / NH, kv = KVH * hs, W = C + 2 * kv;
  const auto x = randn(static_cast<std::size_t>(N) * W, 40),
             y = randn(static_cast<std::size_t>(N) * 3 * C, 41);
  std::vector<float> rx(y.size()), sy(x.size());
  repeat_kv(rx.data(), x.data(), N, C, NH, KVH);
  sum_kv(sy.data(), y.data(), N, C, NH, KVH);
  for (int r = 0; r < N; ++r) {
    for (int h = 0; h < NH; ++h) {
      for (int d = 0; d < hs; ++d) {
        const std::size_t q = static_cast<std::size_t>(r) * 3 * C + h * hs + d;
        const std::size_t k = static_cast<std::size_t>(r) * W + C + h / (NH / KVH) * hs + d;
        EXPECT_EQ(rx[q], x[static_cast<std::size_t>(r) * W + h * hs + d]);  // q as it is
        EXPECT_EQ(rx[q + C], x[k]);                                         // k of the group
        EXPECT_EQ(rx[q + 2 * C], x[k + kv]);                                // v of the group
      }
    }
  }
  double lhs = 0, rhs = 0;
  for (std::size_t i = 0; i < y.size(); ++i) lhs += static_cast<double>(rx[i]) * y[i];
  for (std::size_t i = 0; i < x.size(); ++i) rhs += static_cast<double>(x[i]) * sy[i];
  EXPECT_NEAR(lhs, rhs, 1e-4 * std::fabs(lhs) + 1e-4);
}

TEST(GptOps, SwigluBackwardMatchesFiniteDifferences) {
  const int N = 3, F = 8;
  auto x = randn(N * 2 * F, 27, 2.0f);
  const auto r = randn(N * F, 28);
  auto forward = [&] {
    std::vector<float> out(N * F);
    swiglu_forward(out.data(), x.data(), N, F);
    return out;
  };
  const auto y = forward();
  // silu(g) * u for one element by hand.
  const double g = x[1], u = x[F + 1];
  EXPECT_NEAR(y[1], g / (1 + std::exp(-g)) * u, 1e-5);
  std::vector<float> dx(x.size());
  swiglu_backward(dx.data(), x.data(), r.data(), N, F);
  check_gradient(x, forward, dx, r, "swiglu", 1e-3f);
}

// Gemma's GeGLU: gelu(g) * u with GELU's tanh approximation, by hand and against finite differences.
TEST(GptOps, GegluBackwardMatchesFiniteDifferences) {
  const int N = 3, F = 8;
  auto x = randn(N * 2 * F, 30, 2.0f);
  const auto r = randn(N * F, 31);
  auto forward = [&] {
    std::vector<float> out(N * F);
    geglu_forward(out.data(), x.data(), N, F);
    return out;
  };
  const auto y = forward();
  for (int i : {1, F + 5}) {  // rows 0 and 1
    const std::size_t at = static_cast<std::size_t>(i / F) * 2 * F + static_cast<std::size_t>(i % F);
    const double g = x[at], u = x[at + F];
    const double gelu =
        0.5 * g * (1 + std::tanh(std::sqrt(2 / std::acos(-1.0)) * (g + 0.044715 * g * g * g)));
    EXPECT_NEAR(y[static_cast<std::size_t>(i)], gelu * u, 1e-5 * (1 + std::fabs(gelu * u)));
  }
  std::vector<float> dx(x.size());
  geglu_backward(dx.data(), x.data(), r.data(), N, F);
  check_gradient(x, forward, dx, r, "geglu", 1e-3f);
}

// Rotary embedding: Hugging Face Llama's pairing (i with i + hs/2) and angles (position x the pair's
// frequency, here theta^(-2i/hs) with the last pair's divided by 8 as a rope_scaling would), norm-preserving,
// undone by the inverse, and the inverse is the backward (the transpose of the rotation).
TEST(GptOps, RopeRotatesHalvesByPositionAngles) {
  const int B = 2, T = 5, heads = 2, hs = 8, stride = 20;  // 4 trailing floats per row are not touched
  std::vector<double> freq(hs / 2);
  for (int i = 0; i < hs / 2; ++i) freq[static_cast<std::size_t>(i)] = std::pow(10000.0, -2.0 * i / hs);
  freq.back() /= 8;
  const double* theta = freq.data();
  auto x = randn(static_cast<std::size_t>(B) * T * stride, 29);
  auto y = x;
  rope_rotate(y.data(), B, T, stride, heads, hs, theta, 3, false);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const std::size_t row = (static_cast<std::size_t>(b) * T + t) * stride;
      for (int h = 0; h < heads; ++h) {
        for (int i = 0; i < hs / 2; ++i) {
          const double a = (3 + t) * std::pow(10000.0, -2.0 * i / hs) / (i == hs / 2 - 1 ? 8 : 1);
          const std::size_t lo = row + static_cast<std::size_t>(h) * hs + i, hi = lo + hs / 2;
          EXPECT_NEAR(y[lo], x[lo] * std::cos(a) - x[hi] * std::sin(a), 1e-5);
          EXPECT_NEAR(y[hi], x[hi] * std::cos(a) + x[lo] * std::sin(a), 1e-5);
        }
      }
      for (int i = heads * hs; i < stride; ++i) EXPECT_EQ(y[row + i], x[row + i]);
    }
  }
  auto back = y;
  rope_rotate(back.data(), B, T, stride, heads, hs, theta, 3, true);
  expect_close(back, x, 0, 1e-5, "inverse");
  const auto r = randn(x.size(), 30);
  auto forward = [&] {
    auto out = x;
    rope_rotate(out.data(), B, T, stride, heads, hs, theta, 3, false);
    return out;
  };
  auto dx = r;
  rope_rotate(dx.data(), B, T, stride, heads, hs, theta, 3, true);
  check_gradient(x, forward, dx, r, "rope");
}

// Cohere's neighbouring pairs: channel 2i turns with 2i + 1 by pair i's angle; the same as the halves'
// rotation of the head with its channels reordered (2i -> i, 2i + 1 -> i + hs/2); the inverse is the
// backward.
TEST(GptOps, RopePairsTurnNeighbouringChannels) {
  const int B = 2, T = 4, heads = 3, hs = 8, stride = 26;
  std::vector<double> freq(hs / 2);
  for (int i = 0; i < hs / 2; ++i) freq[static_cast<std::size_t>(i)] = std::pow(100.0, -2.0 * i / hs);
  const auto x = randn(static_cast<std::size_t>(B) * T * stride, 43);
  auto y = x, halves = x;
  // The halves' layout of the same values: channel 2i at i, 2i + 1 at i + hs/2.
  for (std::size_t row = 0; row < static_cast<std::size_t>(B * T); ++row) {
    for (int h = 0; h < heads; ++h) {
      const std::size_t head = row * stride + static_cast<std::size_t>(h) * hs;
      for (int i = 0; i < hs / 2; ++i) {
        halves[head + i] = x[head + 2 * i];
        halves[head + hs / 2 + i] = x[head + 2 * i + 1];
      }
    }
  }
  rope_rotate(y.data(), B, T, stride, heads, hs, freq.data(), 2, false, 1.0, 0, true);
  rope_rotate(halves.data(), B, T, stride, heads, hs, freq.data(), 2, false);
  for (std::size_t row = 0; row < static_cast<std::size_t>(B * T); ++row) {
    for (int h = 0; h < heads; ++h) {
      const std::size_t head = row * stride + static_cast<std::size_t>(h) * hs;
      for (int i = 0; i < hs / 2; ++i) {
        EXPECT_FLOAT_EQ(y[head + 2 * i], halves[head + i]);
        EXPECT_FLOAT_EQ(y[head + 2 * i + 1], halves[head + hs / 2 + i]);
      }
    }
    for (int i = heads * hs; i < stride; ++i) EXPECT_EQ(y[row * stride + i], x[row * stride + i]);
  }
  const auto r = randn(x.size(), 44);
  auto in = x;
  auto forward = [&] {
    auto out = in;
    rope_rotate(out.data(), B, T, stride, heads, hs, freq.data(), 2, false, 1.0, 0, true);
    return out;
  };
  auto dx = r;
  rope_rotate(dx.data(), B, T, stride, heads, hs, freq.data(), 2, true, 1.0, 0, true);
  check_gradient(in, forward, dx, r, "rope pairs");
}

// Partial rotary (Phi-4-mini's): the first `rot` channels of each head turn as a head of `rot` would (pairs i
// and i + rot/2, a [T][rot/2] table), the other hs - rot pass through, and the inverse is the backward.
TEST(GptOps, PartialRopeTurnsTheFirstChannelsOfEachHead) {
  const int B = 2, T = 5, heads = 3, hs = 10, rot = 6, stride = 34;
  std::vector<double> freq(rot / 2);
  for (int i = 0; i < rot / 2; ++i) freq[static_cast<std::size_t>(i)] = std::pow(50.0, -2.0 * i / rot);
  auto x = randn(static_cast<std::size_t>(B) * T * stride, 41);
  auto y = x;
  rope_rotate(y.data(), B, T, stride, heads, hs, freq.data(), 2, false, 1.25, rot);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const std::size_t row = (static_cast<std::size_t>(b) * T + t) * stride;
      for (int h = 0; h < heads; ++h) {
        const std::size_t head = row + static_cast<std::size_t>(h) * hs;
        for (int i = 0; i < rot / 2; ++i) {
          const double a = (2 + t) * std::pow(50.0, -2.0 * i / rot);
          const std::size_t lo = head + static_cast<std::size_t>(i), hi = lo + rot / 2;
          EXPECT_NEAR(y[lo], 1.25 * (x[lo] * std::cos(a) - x[hi] * std::sin(a)), 1e-5);
          EXPECT_NEAR(y[hi], 1.25 * (x[hi] * std::cos(a) + x[lo] * std::sin(a)), 1e-5);
        }
        for (int i = rot; i < hs; ++i)
          EXPECT_EQ(y[head + static_cast<std::size_t>(i)], x[head + static_cast<std::size_t>(i)]);
      }
      for (int i = heads * hs; i < stride; ++i) EXPECT_EQ(y[row + i], x[row + i]);
    }
  }
  const auto r = randn(x.size(), 42);
  auto forward = [&] {
    auto out = x;
    rope_rotate(out.data(), B, T, stride, heads, hs, freq.data(), 2, false, 1.0, rot);
    return out;
  };
  auto dx = r;
  rope_rotate(dx.data(), B, T, stride, heads, hs, freq.data(), 2, true, 1.0, rot);
  check_gradient(x, forward, dx, r, "partial rope");
}

TEST(GptOps, GeluBackwardMatchesFiniteDifferences) {
  auto x = randn(64, 30, 2.0f);
  const auto r = randn(64, 31);
  auto forward = [&] {
    std::vector<float> out(x.size());
    gelu_forward(out.data(), x.data(), x.size());
    return out;
  };
  std::vector<float> dx(x.size());
  gelu_backward(dx.data(), x.data(), r.data(), x.size());
  check_gradient(x, forward, dx, r, "gelu", 1e-3f);
}

// The exact GELU: x Phi(x) against its value in double at a few points (Phi(1) = 0.841344746), and its
// backward against finite differences; it differs from the tanh approximation by up to ~1e-3.
TEST(GptOps, ExactGeluIsXTimesTheNormalCdf) {
  const std::vector<float> x = {-3.0f, -1.0f, 0.0f, 0.5f, 1.0f, 2.5f};
  std::vector<float> out(x.size()), approx(x.size());
  gelu_exact_forward(out.data(), x.data(), x.size());
  gelu_forward(approx.data(), x.data(), x.size());
  double largest_gap = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i], want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    EXPECT_NEAR(out[i], want, 1e-6 * (1 + std::fabs(want))) << x[i];
    largest_gap = std::max(largest_gap, std::fabs(static_cast<double>(out[i] - approx[i])));
  }
  EXPECT_NEAR(out[4], 0.841344746, 1e-6);
  EXPECT_GT(largest_gap, 1e-5);  // not the tanh approximation
  EXPECT_LT(largest_gap, 2e-3);
  auto xs = randn(64, 32, 2.0f);
  const auto r = randn(64, 33);
  auto forward = [&] {
    std::vector<float> o(xs.size());
    gelu_exact_forward(o.data(), xs.data(), xs.size());
    return o;
  };
  std::vector<float> dx(xs.size());
  gelu_exact_backward(dx.data(), xs.data(), r.data(), xs.size());
  check_gradient(xs, forward, dx, r, "exact gelu", 1e-3f);
}

// OPT's ReLU: max(x, 0) forward; backward adds dout where x > 0 only (none at 0, as PyTorch's), so an input
// of exactly 0 passes nothing back.
TEST(GptOps, ReluPassesThePositivePartBothWays) {
  const std::vector<float> x = {-2.0f, -0.0f, 0.0f, 1e-30f, 3.5f, -1e-30f};
  std::vector<float> out(x.size(), -9.0f), dx(x.size(), 1.0f);
  const std::vector<float> dout = {10, 20, 30, 40, 50, 60};
  relu_forward(out.data(), x.data(), x.size());
  relu_backward(dx.data(), x.data(), dout.data(), x.size());
  EXPECT_EQ(out, (std::vector<float>{0, 0, 0, 1e-30f, 3.5f, 0}));
  EXPECT_EQ(dx, (std::vector<float>{1, 1, 1, 41, 51, 1}));  // accumulated onto dinp
}

// Nemotron's squared ReLU: max(x, 0)^2, its gradient 2 max(x, 0) by finite differences; and its
// LayerNorm1P: LayerNorm with weight_offset 1 is LayerNorm with every weight plus 1, both ways (the weight's
// and the bias's gradients the same).
TEST(GptOps, SquaredReluAndLayerNormWithAUnitOffset) {
  const std::vector<float> x = {-2.0f, 0.0f, 0.5f, 3.0f};
  std::vector<float> out(x.size());
  relu2_forward(out.data(), x.data(), x.size());
  EXPECT_EQ(out, (std::vector<float>{0, 0, 0.25f, 9}));
  auto xs = randn(64, 34, 2.0f);
  const auto r = randn(64, 35);
  auto forward = [&] {
    std::vector<float> o(xs.size());
    relu2_forward(o.data(), xs.data(), xs.size());
    return o;
  };
  std::vector<float> dx(xs.size());
  relu2_backward(dx.data(), xs.data(), r.data(), xs.size());
  check_gradient(xs, forward, dx, r, "relu2", 1e-3f);

  const int N = 5, C = 16;
  const auto in = randn(N * C, 36), w = randn(C, 37), b = randn(C, 38), dy = randn(N * C, 39);
  std::vector<float> w1(w);
  for (float& v : w1) v += 1.0f;
  std::vector<float> o1(N * C), o2(N * C), m1(N), m2(N), s1(N), s2(N);
  layernorm_forward(o1.data(), m1.data(), s1.data(), in.data(), w.data(), b.data(), N, C, 1.0f);
  layernorm_forward(o2.data(), m2.data(), s2.data(), in.data(), w1.data(), b.data(), N, C);
  EXPECT_EQ(o1, o2);
  std::vector<float> dx1(N * C), dx2(N * C), dw1(C), dw2(C), db1(C), db2(C);
  layernorm_backward(dx1.data(), dw1.data(), db1.data(), dy.data(), in.data(), w.data(), m1.data(), s1.data(),
                     N, C, 1.0f);
  layernorm_backward(dx2.data(), dw2.data(), db2.data(), dy.data(), in.data(), w1.data(), m2.data(),
                     s2.data(), N, C);
  EXPECT_EQ(dx1, dx2);
  EXPECT_EQ(dw1, dw2);
  EXPECT_EQ(db1, db2);
}

// Full causal attention, and with a sliding window of 3 (query t sees keys t - 2 .. t, as transformers'
// sliding_window_overlay masks kv_idx > q_idx - window); scores of another scale, soft-capped (Gemma 2's
// cap * tanh(score / cap)); chunks of 3 (window -3: Llama 4's chunked_attention, query t sees keys u <= t
// with u / 3 == t / 3, as transformers' chunked_overlay masks them).
TEST(GptOps, AttentionMatchesANaiveImplementation) {
  const int B = 2, T = 7, C = 12, NH = 3, hs = C / NH;
  const auto qkv = randn(B * T * 3 * C, 40);
  struct Case {
    int window;
    float scale, cap;
    bool alibi = false;
  };
  // ALiBi's slopes for 3 heads (BLOOM's rule: 2^-4 and 2^-8 for the largest power of two, 2, then 2^-2).
  const double slopes[] = {1.0 / 16, 1.0 / 256, 1.0 / 4};
  for (const Case cs : {Case{0, 0, 0}, Case{3, 0, 0}, Case{0, 0.8f, 1.5f}, Case{3, 0.3f, 0.5f},
                        Case{0, 0, 0, true}, Case{3, 0.5f, 0, true}, Case{-3, 0, 0}, Case{-3, 0.4f, 1.5f}}) {
    const int window = cs.window;
    SCOPED_TRACE("window " + std::to_string(window) + " scale " + std::to_string(cs.scale) + " cap " +
                 std::to_string(cs.cap) + " alibi " + std::to_string(cs.alibi));
    std::vector<float> out(B * T * C), att(B * NH * T * T);
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, window, cs.scale, cs.cap, cs.alibi);
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        for (int t = 0; t < T; ++t) {
          const int lo = window > 0 ? std::max(0, t - window + 1) : window < 0 ? t / -window * -window : 0;
          std::vector<double> s(t + 1, -INFINITY);
          double maxv = -1e300, sum = 0;
          for (int u = lo; u <= t; ++u) {
            double dot = 0;
            for (int i = 0; i < hs; ++i) {
              dot += static_cast<double>(qkv[(b * T + t) * 3 * C + h * hs + i]) *
                     qkv[(b * T + u) * 3 * C + C + h * hs + i];
            }
            s[u] = cs.scale > 0 ? dot * cs.scale : dot / std::sqrt(static_cast<double>(hs));
            if (cs.cap > 0) s[u] = cs.cap * std::tanh(s[u] / cs.cap);
            if (cs.alibi) s[u] += slopes[h] * (u - t);
            maxv = std::max(maxv, s[u]);
          }
          for (auto& e : s) sum += (e = std::exp(e - maxv));
          for (int u = 0; u < T; ++u) {  // the probabilities kept for backward: zero outside the window
            EXPECT_NEAR(att[((b * NH + h) * T + t) * T + u], u <= t ? s[u] / sum : 0.0, 1e-6)
                << t << " " << u;
          }
          for (int i = 0; i < hs; ++i) {
            double o = 0;
            for (int u = 0; u <= t; ++u) o += s[u] / sum * qkv[(b * T + u) * 3 * C + 2 * C + h * hs + i];
            EXPECT_NEAR(out[(b * T + t) * C + h * hs + i], o, 1e-5) << b << " " << h << " " << t << " " << i;
          }
        }
      }
    }
  }
}

// ALiBi's slopes as BLOOM's build_alibi_tensor makes them: 2^(-8/n) to the powers 1..n for n heads a power
// of two; else those of the largest power of two below, then the odd powers of its square root.
TEST(GptOps, AlibiSlopesFollowBloom) {
  for (int h = 0; h < 8; ++h) EXPECT_EQ(alibi_slope(h, 8), std::ldexp(1.0f, -(h + 1)));
  for (int h = 0; h < 16; ++h) EXPECT_FLOAT_EQ(alibi_slope(h, 16), std::pow(2.0f, -0.5f * (h + 1)));
  const float twelve[] = {0.5f,
                          0.25f,
                          0.125f,
                          0.0625f,
                          1.0f / 32,
                          1.0f / 64,
                          1.0f / 128,
                          1.0f / 256,
                          std::pow(2.0f, -0.5f),
                          std::pow(2.0f, -1.5f),
                          std::pow(2.0f, -2.5f),
                          std::pow(2.0f, -3.5f)};
  for (int h = 0; h < 12; ++h) EXPECT_FLOAT_EQ(alibi_slope(h, 12), twelve[h]) << h;
  EXPECT_EQ(alibi_slope(0, 1), 1.0f / 256);
}

// The GEMMs compute the whole square of scores where windows are long (T 9), and only the blocks that hold
// every row's window where they are short (T 70): a window of one key (blocks of 16 rows on the diagonal), 5
// and 17 (a causal block of 16 or 32 rows, blocks of 16 rows with their 20 or 32 keys, overlapping, then 6
// or 2 rows), chunks of 16 (4 and a partial one), 10 and 35; from 128 tokens (T 150) causal blocks of 64
// rows against the keys up to their last, for full attention, a window too long for its own blocks (80) and
// chunks as long (100).
TEST(GptOps, GemmAttentionMatchesTheLoopReference) {
  struct Shape {
    int T;
    std::vector<int> windows;
  };
  for (const Shape& sh :
       {Shape{9, {0, 1, 4, 9, -4}}, Shape{70, {1, 5, 17, -16, -10, -35}}, Shape{150, {0, 80, -100}}}) {
    const int B = 2, T = sh.T, C = 16, NH = 4;
    const auto qkv = randn(B * T * 3 * C, 60), dout = randn(B * T * C, 61);
    for (const int window : sh.windows) {     // (negative: chunks)
      for (const float cap : {0.0f, 2.0f}) {  // with soft-capping, and scores scaled by 0.3
        const float scale = cap > 0 ? 0.3f : 0.0f;
        SCOPED_TRACE("T " + std::to_string(T) + " window " + std::to_string(window) + " cap " +
                     std::to_string(cap));
        std::vector<float> out(B * T * C), att(B * NH * T * T), out_r(out.size()), att_r(att.size());
        attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, window, scale, cap);
        attention_forward_ref(out_r.data(), att_r.data(), qkv.data(), B, T, C, NH, window, scale, cap);
        expect_close(out, out_r, 1e-4, 1e-5, "out");
        expect_close(att, att_r, 1e-4, 1e-6, "att");
        std::vector<float> d(qkv.size(), 0.5f), d_r(qkv.size(), 0.5f);  // accumulates into existing gradients
        attention_backward(d.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, window, scale, cap);
        attention_backward_ref(d_r.data(), dout.data(), qkv.data(), att_r.data(), B, T, C, NH, window, scale,
                               cap);
        expect_close(d, d_r, 1e-4, 1e-5, "dqkv");
      }
    }
  }
}

// Flash attention against the loop reference, on sequences around its tiles (16 query rows, 64 keys): one
// token, exactly one row tile, a partial one, more than one key tile; odd head sizes and peaked softmax rows
// (the log-sum-exp must carry the maximum across key tiles). Sliding windows: one key, shorter than a row
// tile, one that starts a row tile's keys inside a later key tile (rows of the tile that see no key of the
// first tile visited), longer than a key tile, and as long as the sequence. Soft-capped scores of another
// scale (Gemma 2's), with and without a window. Chunks (a negative window, Llama 4's): shorter than a row
// tile, starting inside a key tile, and as long as one.
TEST(GptOps, FlashAttentionMatchesTheUnfusedReference) {
  struct Shape {
    int B, T, C, NH, window;
    float scale = 0, cap = 0;
    bool alibi = false;
  };
  for (const Shape sh :
       {Shape{1, 1, 8, 2, 0}, Shape{2, 16, 24, 3, 0}, Shape{2, 37, 24, 3, 0}, Shape{1, 130, 40, 2, 0},
        Shape{2, 37, 24, 3, 1}, Shape{2, 37, 24, 3, 5}, Shape{1, 130, 40, 2, 20}, Shape{1, 150, 16, 2, 70},
        Shape{2, 37, 24, 3, 37}, Shape{1, 130, 40, 2, 0, 0.2f, 3.0f}, Shape{2, 37, 24, 3, 5, 0.5f, 2.0f},
        Shape{1, 130, 40, 5, 0, 0, 0, true}, Shape{2, 37, 24, 3, 5, 0, 0, true}, Shape{2, 37, 24, 3, -5},
        Shape{1, 150, 16, 2, -70}, Shape{1, 130, 40, 2, -64, 0.2f, 3.0f}}) {
    const int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH, W = sh.window;
    const float S = sh.scale, cap = sh.cap;
    const bool A = sh.alibi;
    SCOPED_TRACE("T " + std::to_string(T) + " window " + std::to_string(W) + " cap " + std::to_string(cap) +
                 " alibi " + std::to_string(A));
    auto qkv = randn(B * T * 3 * C, 70);
    for (auto& x : qkv) x *= 3.0f;
    const auto dout = randn(B * T * C, 71);
    std::vector<float> out(B * T * C), lse(B * NH * T), out_r(out.size()), att_r(B * NH * T * T);
    flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, W, S, cap, A);
    attention_forward_ref(out_r.data(), att_r.data(), qkv.data(), B, T, C, NH, W, S, cap, A);
    expect_close(out, out_r, 1e-4, 1e-5, "out");
    // lse is what recovers the probabilities: exp(score - lse) of the diagonal equals the reference's.
    const float scale = S > 0 ? S : 1.0f / std::sqrt(static_cast<float>(C / NH));
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH, hs = C / NH;
      for (int t = 0; t < T; ++t) {
        float s = 0;
        for (int i = 0; i < hs; ++i) {
          s += qkv[(b * T + t) * 3 * C + h * hs + i] * qkv[(b * T + t) * 3 * C + C + h * hs + i];
        }
        EXPECT_NEAR(std::exp(soft_cap(scale * s, cap) - lse[bh * T + t]), att_r[(bh * T + t) * T + t], 1e-5)
            << "bh " << bh << " t " << t;
      }
    }
    std::vector<float> d(qkv.size(), 0.25f), d_r(qkv.size(), 0.25f);  // both accumulate
    flash_attention_backward(d.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, W, S,
                             cap, A);
    attention_backward_ref(d_r.data(), dout.data(), qkv.data(), att_r.data(), B, T, C, NH, W, S, cap);
    expect_close(d, d_r, 1e-4, 1e-4, "dqkv");
  }
}

TEST(GptOps, FlashAttentionBackwardMatchesFiniteDifferences) {
  const int B = 1, T = 6, C = 8, NH = 2;
  auto qkv = randn(B * T * 3 * C, 43);
  const auto r = randn(B * T * C, 44);
  // -1: full attention, soft-capped at 1 (a steep cap), scale 0.6; -2: ALiBi
  for (const int window : {0, 2, -1, -2}) {
    const float cap = window == -1 ? 1.0f : 0.0f, scale = window == -1 ? 0.6f : 0.0f;
    const bool alibi = window == -2;
    SCOPED_TRACE("window " + std::to_string(window));
    std::vector<float> lse(B * NH * T), out(B * T * C);
    auto forward = [&] {
      flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, std::max(window, 0), scale,
                              cap, alibi);
      return out;
    };
    forward();
    const auto out0 = out;
    const auto lse0 = lse;
    std::vector<float> dqkv(qkv.size());
    flash_attention_backward(dqkv.data(), r.data(), qkv.data(), out0.data(), lse0.data(), B, T, C, NH,
                             std::max(window, 0), scale, cap, alibi);
    check_gradient(qkv, forward, dqkv, r, "dqkv", 1e-2f, 3e-2);
  }
}

// DeepSeek's latent attention's narrower values (`values` < the head size, the rest of each head's value and
// of the output's gradient zero padding): the unfused and flash kernels, which compute only those channels,
// give the loop reference's output (zeros in the padding) and qkv gradient (the value gradient's padding left
// as it was: the reference adds zeros there). Values of 5 of 8 channels (the tiles' scalar columns), 16 of
// 24 with a window of 5 (one vector of columns), 42 of 64 (DeepSeek's cut of bench/train_vs_torch.sh: two
// vectors and ten columns), chunks of 16.
TEST(GptOps, NarrowValuesMatchTheZeroPaddedComputation) {
  struct Shape {
    int B, T, C, NH, window, values;
  };
  for (const Shape sh : {Shape{2, 37, 24, 3, 0, 5}, Shape{2, 70, 48, 2, 5, 16}, Shape{1, 130, 128, 2, 0, 42},
                         Shape{1, 70, 128, 2, -16, 42}}) {
    const int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH, W = sh.window, hs = C / NH;
    SCOPED_TRACE("T " + std::to_string(T) + " head " + std::to_string(hs) + " values " +
                 std::to_string(sh.values) + " window " + std::to_string(W));
    auto qkv = randn(B * T * 3 * C, 90);
    auto dout = randn(B * T * C, 91);
    for (int n = 0; n < B * T; ++n) {
      for (int h = 0; h < NH; ++h) {
        for (int c = sh.values; c < hs; ++c) {
          qkv[static_cast<std::size_t>(n) * 3 * C + 2 * C + h * hs + c] = 0;
          dout[static_cast<std::size_t>(n) * C + h * hs + c] = 0;
        }
      }
    }
    std::vector<float> out_r(B * T * C), att_r(B * NH * T * T), out(out_r.size(), 7.0f), att(att_r.size()),
        out_f(out_r.size(), 7.0f), lse(B * NH * T);
    attention_forward_ref(out_r.data(), att_r.data(), qkv.data(), B, T, C, NH, W);
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, W, 0, 0, 0, nullptr, sh.values);
    flash_attention_forward(out_f.data(), lse.data(), qkv.data(), B, T, C, NH, W, 0, 0, 0, nullptr,
                            sh.values);
    expect_close(out, out_r, 1e-4, 1e-5, "out");
    expect_close(out_f, out_r, 1e-4, 1e-5, "flash out");
    std::vector<float> d_r(qkv.size(), 0.5f), d(qkv.size(), 0.5f), d_f(qkv.size(), 0.5f);
    attention_backward_ref(d_r.data(), dout.data(), qkv.data(), att_r.data(), B, T, C, NH, W);
    attention_backward(d.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, W, 0, 0, nullptr, nullptr,
                       sh.values);
    flash_attention_backward(d_f.data(), dout.data(), qkv.data(), out_f.data(), lse.data(), B, T, C, NH, W, 0,
                             0, 0, nullptr, nullptr, sh.values);
    expect_close(d, d_r, 1e-4, 1e-5, "dqkv");
    expect_close(d_f, d_r, 1e-4, 1e-4, "flash dqkv");
  }
}

// gpt-oss's sink logits: the unfused kernel (GEMMs), its loop reference and flash attention agree on the
// output, the qkv gradient and the sinks' gradient (full and windowed, one token to several tiles), and the
// sinks' gradient matches finite differences of the output. A sink far below every score changes nothing.
TEST(GptOps, AttentionSinksAgreeAcrossKernelsAndMatchFiniteDifferences) {
  struct Shape {
    int B, T, C, NH, window;
  };
  for (const Shape sh :
       {Shape{1, 1, 8, 2, 0}, Shape{2, 37, 24, 3, 0}, Shape{2, 37, 24, 3, 5}, Shape{1, 130, 40, 2, 20}}) {
    const int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH, W = sh.window;
    SCOPED_TRACE("T " + std::to_string(T) + " window " + std::to_string(W));
    auto qkv = randn(B * T * 3 * C, 80);
    for (auto& x : qkv) x *= 2.0f;
    auto sinks = randn(NH, 81);
    for (auto& s : sinks) s = 1.0f + 2.0f * s;  // (their share is not tiny)
    const auto dout = randn(B * T * C, 82);
    std::vector<float> out(B * T * C), att(B * NH * T * T), out_r(out.size()), att_r(att.size()),
        out_f(out.size()), lse(B * NH * T);
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, W, 0, 0, 0, sinks.data());
    attention_forward_ref(out_r.data(), att_r.data(), qkv.data(), B, T, C, NH, W, 0, 0, 0, sinks.data());
    flash_attention_forward(out_f.data(), lse.data(), qkv.data(), B, T, C, NH, W, 0, 0, 0, sinks.data());
    expect_close(out, out_r, 1e-4, 1e-5, "out");
    expect_close(out_f, out_r, 1e-4, 1e-5, "flash out");
    std::vector<float> d(qkv.size()), d_r(qkv.size()), d_f(qkv.size()), ds(NH, 0.5f), ds_r(NH, 0.5f),
        ds_f(NH, 0.5f);  // (the sinks' gradients accumulate)
    attention_backward(d.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, W, 0, 0, sinks.data(),
                       ds.data());
    attention_backward_ref(d_r.data(), dout.data(), qkv.data(), att_r.data(), B, T, C, NH, W, 0, 0,
                           sinks.data(), ds_r.data());
    flash_attention_backward(d_f.data(), dout.data(), qkv.data(), out_f.data(), lse.data(), B, T, C, NH, W, 0,
                             0, 0, sinks.data(), ds_f.data());
    expect_close(d, d_r, 1e-4, 1e-4, "dqkv");
    expect_close(d_f, d_r, 1e-4, 1e-4, "flash dqkv");
    expect_close(ds, ds_r, 1e-3, 1e-4, "dsinks");
    expect_close(ds_f, ds_r, 1e-3, 1e-4, "flash dsinks");
    for (float& x : ds_r) x -= 0.5f;
    const auto forward = [&] {
      attention_forward_ref(out_r.data(), att_r.data(), qkv.data(), B, T, C, NH, W, 0, 0, 0, sinks.data());
      return out_r;
    };
    check_gradient(sinks, forward, ds_r, dout, "dsinks", 1e-2f, 3e-2);
    std::vector<float> low(NH, -1e4f), plain(out.size());
    attention_forward_ref(out_r.data(), att_r.data(), qkv.data(), B, T, C, NH, W, 0, 0, 0, low.data());
    attention_forward_ref(plain.data(), att_r.data(), qkv.data(), B, T, C, NH, W);
    expect_close(out_r, plain, 1e-6, 1e-7, "a sink far below every score");
  }
}

TEST(GptOps, AttentionBackwardMatchesFiniteDifferences) {
  const int B = 1, T = 5, C = 8, NH = 2;
  auto qkv = randn(B * T * 3 * C, 41);
  const auto r = randn(B * T * C, 42);
  for (const int window : {0, 2, -1}) {  // -1: full attention, soft-capped at 1, scale 0.6
    const float cap = window < 0 ? 1.0f : 0.0f, scale = window < 0 ? 0.6f : 0.0f;
    const int w = std::max(window, 0);
    SCOPED_TRACE("window " + std::to_string(window));
    std::vector<float> att(B * NH * T * T);
    auto forward = [&] {
      std::vector<float> out(B * T * C);
      attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, w, scale, cap);
      return out;
    };
    forward();
    std::vector<float> dqkv(qkv.size());
    attention_backward(dqkv.data(), r.data(), qkv.data(), att.data(), B, T, C, NH, w, scale, cap);
    check_gradient(qkv, forward, dqkv, r, "dqkv", 1e-2f, 3e-2);
  }
}

// Gemma 2's logit soft-capping: cap * tanh(x / cap) in place; backward from the capped values.
TEST(GptOps, SoftcapBackwardMatchesFiniteDifferences) {
  auto x = randn(50, 45, 4.0f);
  const auto r = randn(50, 46);
  const float cap = 3.0f;
  auto forward = [&] {
    std::vector<float> y = x;
    softcap_forward(y.data(), y.size(), cap);
    return y;
  };
  const auto y = forward();
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(y[i], cap * std::tanh(x[i] / cap), 1e-5);
    EXPECT_LT(std::fabs(y[i]), cap);
  }
  std::vector<float> dx = r;
  softcap_backward(dx.data(), y.data(), dx.size(), cap);
  check_gradient(x, forward, dx, r, "dx", 1e-2f, 2e-2);
}

// OLMo 1.7's clip_qkv: a clamp to [-clip, clip] in place; its gradient passes inside and is zero where it
// clipped (finite differences, whose steps do not cross +-clip for these values).
TEST(GptOps, ClampPassesTheGradientInsideOnly) {
  auto x = randn(60, 47, 3.0f);
  const auto r = randn(60, 48);
  const float clip = 2.0f;
  for (auto& v : x) {
    if (std::fabs(std::fabs(v) - clip) < 0.05f) v *= 1.1f;  // away from the bend
  }
  auto forward = [&] {
    std::vector<float> y = x;
    clamp_forward(y.data(), y.size(), clip);
    return y;
  };
  const auto y = forward();
  int clipped = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(y[i], std::fabs(x[i]) > clip ? std::copysign(clip, x[i]) : x[i]);
    clipped += std::fabs(x[i]) > clip;
  }
  EXPECT_GT(clipped, 5);  // the test covers both sides of the bend
  EXPECT_LT(clipped, 55);
  std::vector<float> dx = r;
  clamp_backward(dx.data(), y.data(), dx.size(), clip);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(dx[i], std::fabs(x[i]) > clip ? 0.0f : r[i]);
  check_gradient(x, forward, dx, r, "dx", 1e-2f, 2e-2);
}

TEST(GptOps, CrossEntropyAndEmbedding) {
  const int N = 6, V = 11;
  auto logits = randn(N * V, 50);
  const std::vector<int> targets = {0, 3, 10, 5, 5, 1};
  std::vector<float> probs(N * V);
  auto loss = [&] {
    return std::vector<float>{crossentropy_forward(probs.data(), logits.data(), targets.data(), N, V)};
  };
  const float l = loss()[0];
  EXPECT_GT(l, 0.0f);
  std::vector<float> dl(N * V);
  crossentropy_backward(dl.data(), probs.data(), targets.data(), N, V);
  check_gradient(logits, loss, dl, {1.0f}, "dlogits", 1e-2f, 3e-2);
  // Uniform logits: the loss is log(V).
  std::vector<float> flat(N * V, 0.0f);
  EXPECT_NEAR(crossentropy_forward(probs.data(), flat.data(), targets.data(), N, V), std::log(11.0), 1e-6);
  // Embedding: forward is a lookup plus position; backward scatters into the used rows only.
  const int B = 1, T = 3, C = 4;
  const std::vector<int> tokens = {2, 0, 2};
  const auto wte = randn(5 * C, 51), wpe = randn(T * C, 52), dout = randn(T * C, 53);
  std::vector<float> out(T * C), dwte(5 * C), dwpe(T * C);
  embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  EXPECT_FLOAT_EQ(out[1 * C + 2], wte[0 * C + 2] + wpe[1 * C + 2]);
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  EXPECT_FLOAT_EQ(dwte[2 * C + 1], dout[0 * C + 1] + dout[2 * C + 1]);
  EXPECT_FLOAT_EQ(dwte[4 * C + 1], 0.0f);
  EXPECT_FLOAT_EQ(dwpe[2 * C + 3], dout[2 * C + 3]);
  // Gemma's scaled embedding (no position table): the row times the scale, its gradient times it too.
  std::vector<float> scaled(T * C), dscaled(5 * C);
  embedding_forward(scaled.data(), tokens.data(), wte.data(), nullptr, B, T, C, 3.0f);
  EXPECT_FLOAT_EQ(scaled[1 * C + 2], 3.0f * wte[0 * C + 2]);
  embedding_backward(dscaled.data(), nullptr, dout.data(), tokens.data(), B, T, C, 3.0f);
  EXPECT_FLOAT_EQ(dscaled[2 * C + 1], 3.0f * (dout[0 * C + 1] + dout[2 * C + 1]));
}

TEST(GptOps, VectorExpMatchesStdExp) {
  // Covers the polynomial range, the clamps at both ends and a tail shorter than one vector.
  std::vector<float> x;
  for (int i = -1000; i <= 1000; ++i) x.push_back(static_cast<float>(i) * 0.1f);
  x.push_back(-200.0f);
  x.push_back(200.0f);
  std::vector<float> y = x;
  exp_inplace(y.data(), y.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(std::clamp(x[i], -87.3f, 88.7f)));
    ASSERT_TRUE(std::isfinite(y[i])) << "x=" << x[i];
    EXPECT_NEAR(y[i] / want, 1.0, 1e-6) << "x=" << x[i];
  }
}

}  // namespace
}  // namespace memwall::kernels
