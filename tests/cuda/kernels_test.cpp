// Every CUDA kernel against its kernels/cpu reference, on random inputs. Skipped (with the reason) without a
// usable GPU. Tolerances, |gpu - cpu| <= atol + rtol * |cpu|:
//   fp32 GEMMs and attention: rtol 1e-4, atol 1e-5, plus 1e-5 of the result's RMS (cuBLAS and oneDNN sum
//   in different orders; a sum's rounding scales with what it adds up, also where the result cancels);
//   attention on TF32 operands: rtol 2e-2, atol 1e-3, plus 1e-2 of the RMS;
//   the same for the column sums of layernorm's and the linears' parameter gradients;
//   bf16 GEMMs: rtol 2e-3, atol 1e-3 (both round the same bf16 operands, fp32 accumulation in any order);
//   layernorm, GELU, cross-entropy, embedding: rtol 1e-5, atol 1e-6 (tanhf/expf differ from the CPU's
//   vector exp by a few ulp); Adam and casts: bitwise.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/adam.h"
#include "cpu/cast.h"
#include "cpu/gpt_ops.h"
#include "cuda/adam.h"
#include "cuda/cast.h"
#include "cuda/gpt_ops.h"

namespace memwall::kernels {
namespace {

namespace cu = kernels::cuda;

// A device copy of a host vector; copied back with host().
template <typename T>
class Dev {
 public:
  explicit Dev(const std::vector<T>& h) : n_(h.size()) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<std::size_t>(1, n_) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit Dev(std::size_t n) : Dev(std::vector<T>(n)) {}
  ~Dev() { cudaFree(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  T* get() { return static_cast<T*>(p_); }
  std::vector<T> host() const {
    std::vector<T> h(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }

 private:
  void* p_ = nullptr;
  std::size_t n_;
};

std::vector<float> randn(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

std::vector<std::uint16_t> bf16(const std::vector<float>& v) {
  std::vector<std::uint16_t> o(v.size());
  cast_f32_to_bf16_ref(v.data(), o.data(), v.size());
  return o;
}

// |gpu - cpu| <= atol + rtol |cpu| + arms rms(cpu). The last term is for sums (GEMMs, column reductions):
// their rounding error scales with the magnitude of what is summed, not with a result that cancels to near 0.
void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, float rtol, float atol,
                  const std::string& what, float arms = 0.0f) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double ss = 0;
  for (float c : cpu) ss += static_cast<double>(c) * static_cast<double>(c);
  const float rms = cpu.empty() ? 0.0f : static_cast<float>(std::sqrt(ss / static_cast<double>(cpu.size())));
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    if (!(std::fabs(gpu[i] - cpu[i]) <= atol + rtol * std::fabs(cpu[i]) + arms * rms)) {
      if (bad++ == 0) first = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << cpu.size() << " differ; first at " << first
                     << ": gpu " << gpu[first] << " cpu " << cpu[first];
}

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    const cudaError_t rc = cudaGetDeviceCount(&devices);
    // Without a driver this is cudaErrorInsufficientDriver, not cudaErrorNoDevice: any error means no GPU.
    if (rc != cudaSuccess || devices == 0) {
      GTEST_SKIP() << "no GPU: " << (rc != cudaSuccess ? cudaGetErrorString(rc) : "no device");
    }
    int status = 0;
    blas_ = cu::Blas::create(status);
    ASSERT_NE(blas_, nullptr) << cu::error_string(status);
  }
  void TearDown() override { delete blas_; }
  cu::Blas* blas_ = nullptr;
};

// T = 63: element counts and rows that no block size divides, so every bound check runs.
constexpr int B = 2, T = 63, C = 96, NH = 4, V = 200, N = B * T, OC = 160;

TEST_F(CudaKernels, MatmulForwardAndBackwardMatchTheCpu) {
  const auto inp = randn(static_cast<std::size_t>(N) * C, 1),
             w = randn(static_cast<std::size_t>(OC) * C, 2, 0.1f), bias = randn(OC, 3),
             dout = randn(static_cast<std::size_t>(N) * OC, 4);
  std::vector<float> out(static_cast<std::size_t>(N) * OC), dinp = randn(inp.size(), 5),
                                                            dw = randn(w.size(), 6), db = randn(OC, 7);
  Dev<float> d_inp(inp), d_w(w), d_bias(bias), d_dout(dout), d_out(out.size()), d_dinp(dinp), d_dw(dw),
      d_db(db);
  ASSERT_EQ(cu::matmul_forward(*blas_, d_out.get(), d_inp.get(), d_w.get(), d_bias.get(), N, C, OC, nullptr),
            0);
  ASSERT_EQ(cu::matmul_backward(*blas_, d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(),
                                d_w.get(), N, C, OC, nullptr),
            0);
  matmul_forward_ref(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
  matmul_backward_ref(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
  expect_close(d_out.host(), out, 1e-4f, 1e-5f, "out", 1e-5f);
  expect_close(d_dinp.host(), dinp, 1e-4f, 1e-5f, "dinp", 1e-5f);
  expect_close(d_dw.host(), dw, 1e-4f, 1e-5f, "dweight", 1e-5f);
  expect_close(d_db.host(), db, 1e-4f, 1e-5f, "dbias", 1e-5f);
}

TEST_F(CudaKernels, Bf16MatmulsMatchTheCpu) {
  const auto inp = randn(static_cast<std::size_t>(N) * C, 11),
             w = randn(static_cast<std::size_t>(OC) * C, 12, 0.1f),
             dout = randn(static_cast<std::size_t>(N) * OC, 13);
  const auto inp16 = bf16(inp), w16 = bf16(w), dout16 = bf16(dout);
  std::vector<float> out(static_cast<std::size_t>(N) * OC), dinp(inp.size()), dw(w.size());
  Dev<std::uint16_t> d_inp16(inp16), d_w16(w16), d_dout16(dout16);
  Dev<float> d_dout(dout), d_out(out.size()), d_dinp(dinp), d_dw(dw);
  ASSERT_EQ(
      cu::matmul_forward_bf16(*blas_, d_out.get(), d_inp16.get(), d_w16.get(), nullptr, N, C, OC, nullptr),
      0);
  ASSERT_EQ(cu::matmul_backward_bf16(*blas_, d_dinp.get(), d_dw.get(), nullptr, d_dout.get(), d_dout16.get(),
                                     d_inp16.get(), d_w16.get(), N, C, OC, nullptr),
            0);
  matmul_forward_bf16(out.data(), inp16.data(), w16.data(), nullptr, N, C, OC);
  matmul_backward_bf16(dinp.data(), dw.data(), nullptr, dout.data(), dout16.data(), inp16.data(), w16.data(),
                       N, C, OC);
  expect_close(d_out.host(), out, 2e-3f, 1e-3f, "out");
  expect_close(d_dinp.host(), dinp, 2e-3f, 1e-3f, "dinp");
  expect_close(d_dw.host(), dw, 2e-3f, 1e-3f, "dweight");
}

TEST_F(CudaKernels, LayernormGeluAndReluMatchTheCpu) {
  const auto x = randn(static_cast<std::size_t>(N) * C, 21), w = randn(C, 22), b = randn(C, 23),
             dy = randn(x.size(), 24);
  std::vector<float> out(x.size()), mean(N), rstd(N), dx = randn(x.size(), 25), dw = randn(C, 26),
                                                      db = randn(C, 27);
  Dev<float> d_x(x), d_w(w), d_b(b), d_dy(dy), d_out(out.size()), d_mean(mean), d_rstd(rstd), d_dx(dx),
      d_dw(dw), d_db(db);
  ASSERT_EQ(cu::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), d_b.get(), N,
                                  C, nullptr),
            0);
  ASSERT_EQ(cu::layernorm_backward(d_dx.get(), d_dw.get(), d_db.get(), d_dy.get(), d_x.get(), d_w.get(),
                                   d_mean.get(), d_rstd.get(), N, C, nullptr),
            0);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(),
                     N, C);
  expect_close(d_out.host(), out, 1e-5f, 1e-5f, "layernorm out");
  expect_close(d_rstd.host(), rstd, 1e-5f, 1e-6f, "rstd");
  expect_close(d_dx.host(), dx, 1e-4f, 1e-5f, "layernorm dinp", 1e-5f);
  expect_close(d_dw.host(), dw, 1e-4f, 1e-5f, "layernorm dweight", 1e-5f);
  expect_close(d_db.host(), db, 1e-5f, 1e-5f, "layernorm dbias", 1e-5f);
  // Without a bias (MPT's).
  ASSERT_EQ(cu::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), nullptr, N,
                                  C, nullptr),
            0);
  ASSERT_EQ(cu::layernorm_backward(d_dx.get(), d_dw.get(), nullptr, d_dy.get(), d_x.get(), d_w.get(),
                                   d_mean.get(), d_rstd.get(), N, C, nullptr),
            0);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), nullptr, N, C);
  layernorm_backward(dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), mean.data(), rstd.data(),
                     N, C);
  expect_close(d_out.host(), out, 1e-5f, 1e-5f, "layernorm out without bias");
  expect_close(d_dx.host(), dx, 1e-4f, 1e-5f, "layernorm dinp without bias", 1e-5f);
  expect_close(d_dw.host(), dw, 1e-4f, 1e-5f, "layernorm dweight without bias", 1e-5f);
  // Without weight or bias (OLMo's).
  ASSERT_EQ(cu::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), nullptr, nullptr, N, C,
                                  nullptr),
            0);
  ASSERT_EQ(cu::layernorm_backward(d_dx.get(), nullptr, nullptr, d_dy.get(), d_x.get(), nullptr, d_mean.get(),
                                   d_rstd.get(), N, C, nullptr),
            0);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), nullptr, nullptr, N, C);
  layernorm_backward(dx.data(), nullptr, nullptr, dy.data(), x.data(), nullptr, mean.data(), rstd.data(), N,
                     C);
  expect_close(d_out.host(), out, 1e-5f, 1e-5f, "layernorm out without parameters");
  expect_close(d_dx.host(), dx, 1e-4f, 1e-5f, "layernorm dinp without parameters", 1e-5f);
  // Nemotron's LayerNorm1P: 1 + weight.
  ASSERT_EQ(cu::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), d_b.get(), N,
                                  C, nullptr, 1.0f),
            0);
  ASSERT_EQ(cu::layernorm_backward(d_dx.get(), d_dw.get(), d_db.get(), d_dy.get(), d_x.get(), d_w.get(),
                                   d_mean.get(), d_rstd.get(), N, C, nullptr, 1.0f),
            0);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1.0f);
  layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(),
                     N, C, 1.0f);
  expect_close(d_out.host(), out, 1e-5f, 1e-5f, "layernorm1p out");
  expect_close(d_dx.host(), dx, 1e-4f, 1e-5f, "layernorm1p dinp", 1e-5f);
  expect_close(d_dw.host(), dw, 1e-4f, 1e-5f, "layernorm1p dweight", 1e-5f);

  std::vector<float> g(x.size()), dg = randn(x.size(), 28);
  Dev<float> d_g(g.size()), d_dg(dg);
  ASSERT_EQ(cu::gelu_forward(d_g.get(), d_x.get(), x.size(), nullptr), 0);
  ASSERT_EQ(cu::gelu_backward(d_dg.get(), d_x.get(), d_dy.get(), x.size(), nullptr), 0);
  gelu_forward(g.data(), x.data(), x.size());
  gelu_backward(dg.data(), x.data(), dy.data(), x.size());
  expect_close(d_g.host(), g, 1e-5f, 1e-6f, "gelu");
  expect_close(d_dg.host(), dg, 1e-5f, 1e-5f, "gelu backward");

  // The exact GELU (erff, expf: the device's rounding) at the elementwise tolerances.
  std::vector<float> ge(x.size()), dge = randn(x.size(), 30);
  Dev<float> d_ge(ge.size()), d_dge(dge);
  ASSERT_EQ(cu::gelu_exact_forward(d_ge.get(), d_x.get(), x.size(), nullptr), 0);
  ASSERT_EQ(cu::gelu_exact_backward(d_dge.get(), d_x.get(), d_dy.get(), x.size(), nullptr), 0);
  gelu_exact_forward(ge.data(), x.data(), x.size());
  gelu_exact_backward(dge.data(), x.data(), dy.data(), x.size());
  expect_close(d_ge.host(), ge, 1e-5f, 1e-6f, "exact gelu");
  expect_close(d_dge.host(), dge, 1e-5f, 1e-5f, "exact gelu backward");

  // OPT's ReLU: exact (a select, no arithmetic but the backward's one addition).
  std::vector<float> rl(x.size()), drl = randn(x.size(), 29);
  Dev<float> d_rl(rl.size()), d_drl(drl);
  ASSERT_EQ(cu::relu_forward(d_rl.get(), d_x.get(), x.size(), nullptr), 0);
  ASSERT_EQ(cu::relu_backward(d_drl.get(), d_x.get(), d_dy.get(), x.size(), nullptr), 0);
  relu_forward(rl.data(), x.data(), x.size());
  relu_backward(drl.data(), x.data(), dy.data(), x.size());
  EXPECT_EQ(d_rl.host(), rl);
  EXPECT_EQ(d_drl.host(), drl);
  // Nemotron's squared ReLU: one product forward, two and an addition backward (the same order).
  std::vector<float> r2(x.size()), dr2 = randn(x.size(), 31);
  Dev<float> d_r2(r2.size()), d_dr2(dr2);
  ASSERT_EQ(cu::relu2_forward(d_r2.get(), d_x.get(), x.size(), nullptr), 0);
  ASSERT_EQ(cu::relu2_backward(d_dr2.get(), d_x.get(), d_dy.get(), x.size(), nullptr), 0);
  relu2_forward(r2.data(), x.data(), x.size());
  relu2_backward(dr2.data(), x.data(), dy.data(), x.size());
  expect_close(d_r2.host(), r2, 1e-6f, 1e-7f, "relu2");
  expect_close(d_dr2.host(), dr2, 1e-6f, 1e-7f, "relu2 backward");
}

// The Llama shape's operators: RMSNorm, SwiGLU and the rotary rotation (both ways) at the elementwise
// tolerances; repeating and summing grouped key/value heads exactly (sums of 2 in the same order); the token
// embedding without a position table.
TEST_F(CudaKernels, LlamaOperatorsMatchTheCpu) {
  const auto x = randn(static_cast<std::size_t>(N) * C, 61), w = randn(C, 62), dy = randn(x.size(), 63);
  std::vector<float> out(x.size()), rstd(N), dx = randn(x.size(), 64), dw = randn(C, 65);
  Dev<float> d_x(x), d_w(w), d_dy(dy), d_out(out.size()), d_rstd(rstd), d_dx(dx), d_dw(dw);
  ASSERT_EQ(cu::rmsnorm_forward(d_out.get(), d_rstd.get(), d_x.get(), d_w.get(), N, C, 1e-5f, nullptr), 0);
  ASSERT_EQ(cu::rmsnorm_backward(d_dx.get(), d_dw.get(), d_dy.get(), d_x.get(), d_w.get(), d_rstd.get(), N, C,
                                 nullptr),
            0);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
  expect_close(d_out.host(), out, 1e-5f, 1e-5f, "rmsnorm out");
  expect_close(d_rstd.host(), rstd, 1e-5f, 1e-6f, "rmsnorm rstd");
  expect_close(d_dx.host(), dx, 1e-4f, 1e-5f, "rmsnorm dinp", 1e-5f);
  expect_close(d_dw.host(), dw, 1e-4f, 1e-5f, "rmsnorm dweight", 1e-5f);

  const int F = C / 2;  // x read as [N, 2F]: gate, up
  std::vector<float> sg(static_cast<std::size_t>(N) * F), dsg = randn(x.size(), 66);
  const auto dsw = randn(sg.size(), 67);
  Dev<float> d_sg(sg.size()), d_dsg(dsg), d_dsw(dsw);
  ASSERT_EQ(cu::swiglu_forward(d_sg.get(), d_x.get(), N, F, nullptr), 0);
  ASSERT_EQ(cu::swiglu_backward(d_dsg.get(), d_x.get(), d_dsw.get(), N, F, nullptr), 0);
  swiglu_forward(sg.data(), x.data(), N, F);
  swiglu_backward(dsg.data(), x.data(), dsw.data(), N, F);
  expect_close(d_sg.host(), sg, 1e-5f, 1e-6f, "swiglu");
  expect_close(d_dsg.host(), dsg, 1e-5f, 1e-5f, "swiglu backward");

  // Gemma's: RMSNorm by 1 + weight, GeGLU, the embedding scaled by sqrt(C).
  std::vector<float> go(x.size()), grstd(N), gdx = randn(x.size(), 76), gdw = randn(C, 77);
  Dev<float> d_go(go.size()), d_grstd(grstd), d_gdx(gdx), d_gdw(gdw);
  ASSERT_EQ(cu::rmsnorm_forward(d_go.get(), d_grstd.get(), d_x.get(), d_w.get(), N, C, 1e-6f, nullptr, 1.0f),
            0);
  ASSERT_EQ(cu::rmsnorm_backward(d_gdx.get(), d_gdw.get(), d_dy.get(), d_x.get(), d_w.get(), d_grstd.get(), N,
                                 C, nullptr, 1.0f),
            0);
  rmsnorm_forward(go.data(), grstd.data(), x.data(), w.data(), N, C, 1e-6f, 1.0f);
  rmsnorm_backward(gdx.data(), gdw.data(), dy.data(), x.data(), w.data(), grstd.data(), N, C, 1.0f);
  expect_close(d_go.host(), go, 1e-5f, 1e-5f, "rmsnorm (1 + weight) out");
  expect_close(d_gdx.host(), gdx, 1e-4f, 1e-5f, "rmsnorm (1 + weight) dinp", 1e-5f);
  expect_close(d_gdw.host(), gdw, 1e-4f, 1e-5f, "rmsnorm (1 + weight) dweight", 1e-5f);
  std::vector<float> gg(sg.size()), dgg = randn(x.size(), 78);
  Dev<float> d_gg(gg.size()), d_dgg(dgg);
  ASSERT_EQ(cu::geglu_forward(d_gg.get(), d_x.get(), N, F, nullptr), 0);
  ASSERT_EQ(cu::geglu_backward(d_dgg.get(), d_x.get(), d_dsw.get(), N, F, nullptr), 0);
  geglu_forward(gg.data(), x.data(), N, F);
  geglu_backward(dgg.data(), x.data(), dsw.data(), N, F);
  expect_close(d_gg.host(), gg, 1e-5f, 1e-6f, "geglu");
  expect_close(d_dgg.host(), dgg, 1e-5f, 1e-5f, "geglu backward");

  // Rotary on the q and k heads of a [N, 3C] tensor (v untouched), then back.
  const int heads = 4, hs = C / heads;
  auto q = randn(static_cast<std::size_t>(N) * 3 * C, 68);
  std::vector<double> freq(static_cast<std::size_t>(hs / 2));
  for (std::size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(500.0, -2.0 * static_cast<double>(i) / hs);
  std::vector<float> cos_t(static_cast<std::size_t>(T) * freq.size()), sin_t(cos_t.size());
  rope_table(cos_t.data(), sin_t.data(), T, hs, freq.data(), 3);
  Dev<float> d_q(q), d_cos(cos_t), d_sin(sin_t);
  ASSERT_EQ(cu::rope_apply(d_q.get(), B, T, 3 * C, 2 * heads, hs, d_cos.get(), d_sin.get(), false, nullptr),
            0);
  const auto rotated = d_q.host();
  auto want = q;
  rope_rotate(want.data(), B, T, 3 * C, 2 * heads, hs, freq.data(), 3, false);
  expect_close(rotated, want, 1e-5f, 1e-6f, "rope");
  ASSERT_EQ(cu::rope_apply(d_q.get(), B, T, 3 * C, 2 * heads, hs, d_cos.get(), d_sin.get(), true, nullptr),
            0);
  expect_close(d_q.host(), q, 1e-5f, 1e-5f, "rope inverse");
  // Partial rotary: the first hs / 2 channels of each head turn by a [T][hs/4] table, the others pass.
  const int rot = hs / 2;
  std::vector<double> part_freq(freq.begin(), freq.begin() + rot / 2);
  std::vector<float> pcos(static_cast<std::size_t>(T) * part_freq.size()), psin(pcos.size());
  rope_table(pcos.data(), psin.data(), T, rot, part_freq.data(), 1, 1.5);
  Dev<float> d_p(q), d_pcos(pcos), d_psin(psin);
  ASSERT_EQ(
      cu::rope_apply(d_p.get(), B, T, 3 * C, 2 * heads, hs, d_pcos.get(), d_psin.get(), false, nullptr, rot),
      0);
  auto part = q;
  rope_rotate(part.data(), B, T, 3 * C, 2 * heads, hs, part_freq.data(), 1, false, 1.5, rot);
  expect_close(d_p.host(), part, 1e-5f, 1e-6f, "partial rope");
  ASSERT_EQ(
      cu::rope_apply(d_p.get(), B, T, 3 * C, 2 * heads, hs, d_pcos.get(), d_psin.get(), true, nullptr, rot),
      0);
  rope_rotate(part.data(), B, T, 3 * C, 2 * heads, hs, part_freq.data(), 1, true, 1.5, rot);
  expect_close(d_p.host(), part, 1e-5f, 1e-5f, "partial rope inverse");
  // Cohere's neighbouring pairs (2i with 2i + 1), forward and inverse.
  ASSERT_EQ(cu::rope_apply(d_p.get(), B, T, 3 * C, 2 * heads, hs, d_cos.get(), d_sin.get(), false, nullptr, 0,
                           true),
            0);
  rope_apply(part.data(), B, T, 3 * C, 2 * heads, hs, cos_t.data(), sin_t.data(), false, 0, true);
  expect_close(d_p.host(), part, 1e-5f, 1e-6f, "rope pairs");
  ASSERT_EQ(
      cu::rope_apply(d_p.get(), B, T, 3 * C, 2 * heads, hs, d_cos.get(), d_sin.get(), true, nullptr, 0, true),
      0);
  rope_apply(part.data(), B, T, 3 * C, 2 * heads, hs, cos_t.data(), sin_t.data(), true, 0, true);
  expect_close(d_p.host(), part, 1e-5f, 1e-5f, "rope pairs inverse");

  // 4 query heads on 2 key/value heads: [N, C + 2 kv] -> [N, 3C] and the gradient back.
  const int kvh = 2, kv = kvh * hs, W = C + 2 * kv;
  const auto src = randn(static_cast<std::size_t>(N) * W, 69), dfull = randn(q.size(), 70);
  Dev<float> d_src(src), d_full(q.size()), d_dfull(dfull), d_dsrc(src.size());
  ASSERT_EQ(cu::repeat_kv(d_full.get(), d_src.get(), N, C, heads, kvh, nullptr), 0);
  ASSERT_EQ(cu::sum_kv(d_dsrc.get(), d_dfull.get(), N, C, heads, kvh, nullptr), 0);
  std::vector<float> full(q.size()), dsrc(src.size());
  repeat_kv(full.data(), src.data(), N, C, heads, kvh);
  sum_kv(dsrc.data(), dfull.data(), N, C, heads, kvh);
  expect_close(d_full.host(), full, 0.0f, 0.0f, "repeat_kv");
  expect_close(d_dsrc.host(), dsrc, 0.0f, 0.0f, "sum_kv");

  std::vector<int> tokens(N);
  for (int i = 0; i < N; ++i) tokens[i] = (7 * i + 3) % V;
  const auto wte = randn(static_cast<std::size_t>(V) * C, 71);
  std::vector<float> emb(static_cast<std::size_t>(N) * C), dwte = randn(wte.size(), 72);
  Dev<int> d_tok(tokens);
  Dev<float> d_wte(wte), d_emb(emb.size()), d_dwte(dwte);
  // Scaled as Gemma's (by sqrt(C), rounded to float).
  const float scale = std::sqrt(static_cast<float>(C));
  ASSERT_EQ(cu::embedding_forward(d_emb.get(), d_tok.get(), d_wte.get(), nullptr, B, T, C, nullptr, scale),
            0);
  ASSERT_EQ(cu::embedding_backward(d_dwte.get(), nullptr, d_dy.get(), d_tok.get(), B, T, C, nullptr, scale),
            0);
  embedding_forward(emb.data(), tokens.data(), wte.data(), nullptr, B, T, C, scale);
  embedding_backward(dwte.data(), nullptr, dy.data(), tokens.data(), B, T, C, scale);
  expect_close(d_emb.host(), emb, 0.0f, 0.0f, "embedding without positions");
  expect_close(d_dwte.host(), dwte, 1e-5f, 1e-5f, "dwte without positions");
}

// Qwen3's per-head norm (with `off` 1, Gemma 3's 1 + weight) on the GPU against the CPU kernel: QH query
// heads of hs, KVH key heads of khs and as many value heads.
void expect_head_rmsnorm_matches(float off, int QH, int KVH, int hs, int khs) {
  const int W = QH * hs + 2 * KVH * khs;
  const auto x = randn(static_cast<std::size_t>(N) * W, 71),
             w = randn(static_cast<std::size_t>(hs + khs), 72), dy = randn(x.size(), 73);
  std::vector<float> out(x.size()), rstd(static_cast<std::size_t>(N) * (QH + KVH)), dx = randn(x.size(), 74),
                                                                                    dw = randn(w.size(), 75);
  Dev<float> d_x(x), d_w(w), d_dy(dy), d_out(out.size()), d_rstd(rstd), d_dx(dx), d_dw(dw);
  ASSERT_EQ(cu::head_rmsnorm_forward(d_out.get(), d_rstd.get(), d_x.get(), d_w.get(), N, W, QH, KVH, hs, khs,
                                     1e-6f, nullptr, off),
            0);
  ASSERT_EQ(cu::head_rmsnorm_backward(d_dx.get(), d_dw.get(), d_dy.get(), d_x.get(), d_w.get(), d_rstd.get(),
                                      N, W, QH, KVH, hs, khs, nullptr, off),
            0);
  head_rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, W, QH, KVH, hs, khs, 1e-6f, off);
  head_rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, W, QH, KVH, hs,
                        khs, off);
  expect_close(d_out.host(), out, 1e-5f, 1e-5f, "head rmsnorm out");
  expect_close(d_rstd.host(), rstd, 1e-5f, 1e-6f, "head rmsnorm rstd");
  expect_close(d_dx.host(), dx, 1e-4f, 1e-5f, "head rmsnorm dinp", 1e-5f);
  expect_close(d_dw.host(), dw, 1e-4f, 1e-4f, "head rmsnorm dweight", 1e-4f);
}

// Qwen3's per-head query and key norm over rows with a value part: every head against the CPU kernel, the
// values copied both ways; the input gradient written over what the buffer held, the weight's accumulated.
// Plain weights (Qwen3's) and 1 + weight (Gemma 3's); OLMo 2's grouped-query form too: one "head" of all 96
// query channels, one of the 48 key channels.
TEST_F(CudaKernels, HeadRmsnormMatchesTheCpu) {
  for (const float off : {0.0f, 1.0f}) {
    SCOPED_TRACE("weight offset " + std::to_string(off));
    expect_head_rmsnorm_matches(off, 4, 2, 24, 24);
  }
  SCOPED_TRACE("all the queries, all the keys");
  expect_head_rmsnorm_matches(0.0f, 1, 1, 96, 48);
}

// StableLM 2 12B's per-head LayerNorms (each head its own weight, no bias) on the GPU against the CPU kernel,
// over rows with a value part.
TEST_F(CudaKernels, HeadLayernormMatchesTheCpu) {
  const int heads = 6, hs = 40, W = (heads + 2) * hs;
  const auto x = randn(static_cast<std::size_t>(N) * W, 76),
             w = randn(static_cast<std::size_t>(heads) * hs, 77), dy = randn(x.size(), 78);
  std::vector<float> out(x.size()), mean(static_cast<std::size_t>(N) * heads), rstd(mean.size()),
      dx = randn(x.size(), 79), dw = randn(w.size(), 80);
  Dev<float> d_x(x), d_w(w), d_dy(dy), d_out(out.size()), d_mean(mean), d_rstd(rstd), d_dx(dx), d_dw(dw);
  ASSERT_EQ(cu::head_layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), N, W,
                                       heads, hs, 1e-5f, nullptr),
            0);
  ASSERT_EQ(cu::head_layernorm_backward(d_dx.get(), d_dw.get(), d_dy.get(), d_x.get(), d_w.get(),
                                        d_mean.get(), d_rstd.get(), N, W, heads, hs, nullptr),
            0);
  head_layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), N, W, heads, hs, 1e-5f);
  head_layernorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N, W,
                          heads, hs);
  expect_close(d_out.host(), out, 1e-5f, 1e-5f, "head layernorm out");
  expect_close(d_mean.host(), mean, 1e-5f, 1e-6f, "head layernorm mean");
  expect_close(d_rstd.host(), rstd, 1e-5f, 1e-6f, "head layernorm rstd");
  expect_close(d_dx.host(), dx, 1e-4f, 1e-5f, "head layernorm dinp", 1e-5f);
  expect_close(d_dw.host(), dw, 1e-4f, 1e-4f, "head layernorm dweight", 1e-4f);
}

// Full causal attention, a sliding window of 5 (query t sees keys t - 4 .. t), soft-capped scores, ALiBi's
// biases, chunks of 3 (Llama 4's: query t sees its own chunk's keys up to it).
TEST_F(CudaKernels, CausalAttentionMatchesTheCpu) {
  const auto qkv = randn(static_cast<std::size_t>(N) * 3 * C, 31),
             dout = randn(static_cast<std::size_t>(N) * C, 32), dqkv0 = randn(qkv.size(), 33);
  // Full, a window of 5, Gemma 2's soft-capped scores (at 1.5) of another scale (0.4) in that window, and
  // BLOOM's ALiBi (6: full attention with it).
  for (const int wc : {0, 5, -5, 6, 7}) {
    const bool alibi = wc == 6;
    const int window = wc == 7 ? -3 : wc < 0 ? -wc : alibi ? 0 : wc;
    const float scale = wc < 0 ? 0.4f : 0.0f, cap = wc < 0 ? 1.5f : 0.0f;
    std::vector<float> out(static_cast<std::size_t>(N) * C), att(static_cast<std::size_t>(B) * NH * T * T),
        dqkv = dqkv0;
    attention_forward_ref(out.data(), att.data(), qkv.data(), B, T, C, NH, window, scale, cap, alibi);
    attention_backward_ref(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, window, scale, cap);
    // fp32 GEMMs; then TF32 operands (10 mantissa bits: each product within about 1e-3 relative, whether
    // the tensor cores round or truncate, compounded through the softmax and the backward's three GEMMs).
    for (const bool tf32 : {false, true}) {
      SCOPED_TRACE(std::string(tf32 ? "tf32" : "fp32") + " window " + std::to_string(window) + " cap " +
                   std::to_string(cap) + (alibi ? " alibi" : ""));
      const float rtol = tf32 ? 2e-2f : 1e-4f, atol = tf32 ? 1e-3f : 1e-5f, arms = tf32 ? 1e-2f : 1e-5f;
      Dev<float> d_qkv(qkv), d_dout(dout), d_out(out.size()), d_att(att.size()), d_dqkv(dqkv0),
          d_scratch(std::max(cu::attention_forward_scratch(B, T, C),
                             cu::attention_backward_scratch(B, T, C, NH, cap > 0)));
      ASSERT_EQ(cu::attention_forward(*blas_, d_out.get(), d_att.get(), d_qkv.get(), B, T, C, NH, tf32,
                                      d_scratch.get(), nullptr, window, scale, cap, alibi),
                0);
      ASSERT_EQ(cu::attention_backward(*blas_, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_att.get(), B, T, C,
                                       NH, tf32, d_scratch.get(), nullptr, window, scale, cap),
                0);
      expect_close(d_att.host(), att, rtol, tf32 ? atol : 1e-6f, "att");
      expect_close(d_out.host(), out, rtol, atol, "attention out", arms);
      expect_close(d_dqkv.host(), dqkv, rtol, atol, "dqkv", arms);
    }
  }
}

// The fused kernels against the unfused CPU reference (fp32 tolerances): the fixture's shape (two tiles of
// 32 rows, the second partly filled), and T = 300 (ten tiles) whose running maximum and sums carry across
// tiles; sliding windows shorter than the fixture's sequence and longer than a tile (rows' tiles then start
// mid-sequence, and a key tile's queries end before T). Gemma 2's soft-capped scores of another scale, across
// tiles and in a window. Every head size class (up to 64, 128 and 256 channels, tiles of 32, 16 and 8 rows)
// at its top and past the one below (64, 65, 128, 200, 256: channels past the head size in a class's tiles
// stay zero), in windows and chunks; heads of 6 channels (a thread's channels past them). Chunks (a negative
// window: Llama 4's) of 3, of 140 across the key tiles (a key tile's queries end at its chunk's end), and of 40
// over tiles of 32.
TEST_F(CudaKernels, FlashAttentionMatchesTheCpu) {
  struct Shape {
    int B, T, C, NH, window;
    float scale = 0, cap = 0;
    bool alibi = false;
  };
  for (const Shape s :
       {Shape{B, T, C, NH, 0}, Shape{1, 300, 32, 2, 0}, Shape{B, T, C, NH, 3}, Shape{1, 300, 32, 2, 140},
        Shape{1, 300, 32, 2, 0, 0.3f, 2.0f}, Shape{B, T, C, NH, 3, 0.4f, 1.5f}, Shape{1, 150, 512, 2, 0},
        Shape{1, 150, 400, 2, 20, 0.05f, 3.0f}, Shape{1, 300, 30, 5, 0, 0, 0, true},
        Shape{B, T, C, NH, 3, 0, 0, true}, Shape{B, T, C, NH, -3}, Shape{1, 300, 32, 2, -140},
        Shape{1, 70, 256, 2, 0}, Shape{1, 70, 130, 2, 20, 0.1f, 2.0f}, Shape{2, 100, 128, 2, -40}}) {
    SCOPED_TRACE("T " + std::to_string(s.T) + " window " + std::to_string(s.window) + " cap " +
                 std::to_string(s.cap) + (s.alibi ? " alibi" : ""));
    const std::size_t n = static_cast<std::size_t>(s.B) * s.T;
    auto qkv = randn(n * 3 * s.C, 34);
    for (auto& x : qkv) x *= 2.0f;  // peaked rows: later tiles raise the running maximum
    const auto dout = randn(n * s.C, 35), dqkv0 = randn(qkv.size(), 36);
    std::vector<float> out(n * s.C), att(static_cast<std::size_t>(s.B) * s.NH * s.T * s.T), dqkv = dqkv0;
    attention_forward_ref(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.window, s.scale, s.cap,
                          s.alibi);
    attention_backward_ref(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH, s.window,
                           s.scale, s.cap);
    Dev<float> d_qkv(qkv), d_dout(dout), d_out(out.size()), d_lse(static_cast<std::size_t>(s.B) * s.NH * s.T),
        d_dqkv(dqkv0), d_scratch(cu::flash_attention_backward_scratch(s.B, s.T, s.NH));
    ASSERT_EQ(cu::flash_attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), s.B, s.T, s.C, s.NH, nullptr,
                                          s.window, s.scale, s.cap, s.alibi),
              0);
    ASSERT_EQ(cu::flash_attention_backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(),
                                           s.B, s.T, s.C, s.NH, d_scratch.get(), nullptr, s.window, s.scale,
                                           s.cap, s.alibi),
              0);
    expect_close(d_out.host(), out, 1e-4f, 1e-5f, "flash out", 1e-5f);
    expect_close(d_dqkv.host(), dqkv, 1e-4f, 1e-5f, "flash dqkv", 1e-5f);
    // The CPU's fused kernel keeps the same log-sum-exps.
    std::vector<float> out_c(out.size()), lse_c(static_cast<std::size_t>(s.B) * s.NH * s.T);
    flash_attention_forward(out_c.data(), lse_c.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.window, s.scale,
                            s.cap, s.alibi);
    expect_close(d_lse.host(), lse_c, 1e-5f, 1e-5f, "lse");
  }
  // Heads wider than the largest class: refused, nothing launched.
  Dev<float> d(static_cast<std::size_t>(3) * 384);
  EXPECT_EQ(cu::flash_attention_forward(d.get(), d.get(), d.get(), 1, 1, 384, 1, nullptr),
            static_cast<int>(cudaErrorInvalidValue));
}

// gpt-oss's sink logits (one a head, some above the rows' scores, some far below) in the unfused and the
// fused kernels, full and in a window of 5, against the CPU reference: outputs, dqkv and the sinks' gradients
// (each head's sum over its rows, within 1e-4 of their RMS).
TEST_F(CudaKernels, AttentionSinksMatchTheCpu) {
  const auto qkv = randn(static_cast<std::size_t>(N) * 3 * C, 52),
             dout = randn(static_cast<std::size_t>(N) * C, 53), dqkv0 = randn(qkv.size(), 54);
  const std::vector<float> sinks = {2.0f, -1.0f, 0.5f, -30.0f};
  for (const int window : {0, 5}) {
    SCOPED_TRACE("window " + std::to_string(window));
    std::vector<float> out(static_cast<std::size_t>(N) * C), att(static_cast<std::size_t>(B) * NH * T * T),
        dqkv = dqkv0, dsinks(NH, 0.25f);
    attention_forward_ref(out.data(), att.data(), qkv.data(), B, T, C, NH, window, 0, 0, 0, sinks.data());
    attention_backward_ref(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, window, 0, 0,
                           sinks.data(), dsinks.data());
    Dev<float> d_qkv(qkv), d_dout(dout), d_out(out.size()), d_att(att.size()), d_dqkv(dqkv0), d_sinks(sinks),
        d_dsinks(std::vector<float>(NH, 0.25f)),
        d_scratch(std::max(cu::attention_forward_scratch(B, T, C),
                           cu::attention_backward_scratch(B, T, C, NH, false, true)));
    ASSERT_EQ(cu::attention_forward(*blas_, d_out.get(), d_att.get(), d_qkv.get(), B, T, C, NH, false,
                                    d_scratch.get(), nullptr, window, 0, 0, 0, d_sinks.get()),
              0);
    ASSERT_EQ(
        cu::attention_backward(*blas_, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_att.get(), B, T, C, NH,
                               false, d_scratch.get(), nullptr, window, 0, 0, d_sinks.get(), d_dsinks.get()),
        0);
    expect_close(d_out.host(), out, 1e-4f, 1e-5f, "out", 1e-5f);
    expect_close(d_dqkv.host(), dqkv, 1e-4f, 1e-5f, "dqkv", 1e-5f);
    expect_close(d_dsinks.host(), dsinks, 1e-4f, 1e-5f, "dsinks", 1e-4f);
    Dev<float> f_out(out.size()), f_lse(static_cast<std::size_t>(B) * NH * T), f_dqkv(dqkv0),
        f_dsinks(std::vector<float>(NH, 0.25f)),
        f_scratch(cu::flash_attention_backward_scratch(B, T, NH, true));
    ASSERT_EQ(cu::flash_attention_forward(f_out.get(), f_lse.get(), d_qkv.get(), B, T, C, NH, nullptr, window,
                                          0, 0, 0, d_sinks.get()),
              0);
    ASSERT_EQ(cu::flash_attention_backward(f_dqkv.get(), d_dout.get(), d_qkv.get(), f_out.get(), f_lse.get(),
                                           B, T, C, NH, f_scratch.get(), nullptr, window, 0, 0, 0,
                                           d_sinks.get(), f_dsinks.get()),
              0);
    expect_close(f_out.host(), out, 1e-4f, 1e-5f, "flash out", 1e-5f);
    expect_close(f_dqkv.host(), dqkv, 1e-4f, 1e-5f, "flash dqkv", 1e-5f);
    expect_close(f_dsinks.host(), dsinks, 1e-4f, 1e-5f, "flash dsinks", 1e-4f);
    EXPECT_GT(std::fabs(dsinks[0] - 0.25f), 1e-3f);  // (a sink above the scores takes a real gradient)
  }
}

// Gemma 2's logit soft-capping, forward in place and backward from the capped values.
TEST_F(CudaKernels, SoftcapMatchesTheCpu) {
  auto x = randn(1000, 37);
  for (auto& v : x) v *= 20.0f;  // through tanh's bend and its flat ends
  const auto dx0 = randn(x.size(), 38);
  std::vector<float> y = x, dx = dx0;
  softcap_forward(y.data(), y.size(), 15.0f);
  softcap_backward(dx.data(), y.data(), dx.size(), 15.0f);
  Dev<float> d_y(x), d_dx(dx0);
  ASSERT_EQ(cu::softcap_forward(d_y.get(), x.size(), 15.0f, nullptr), 0);
  ASSERT_EQ(cu::softcap_backward(d_dx.get(), d_y.get(), x.size(), 15.0f, nullptr), 0);
  expect_close(d_y.host(), y, 1e-5f, 1e-5f, "softcap");
  expect_close(d_dx.host(), dx, 1e-4f, 1e-5f, "softcap bwd");
}

// OLMo 1.7's clip_qkv: the clamp in place and its gradient mask, bitwise the CPU's; and Cohere's scale.
TEST_F(CudaKernels, ClampMatchesTheCpu) {
  auto x = randn(1000, 39);
  for (auto& v : x) v *= 3.0f;  // about a third outside [-2, 2]
  const auto dx0 = randn(x.size(), 40);
  std::vector<float> y = x, dx = dx0;
  clamp_forward(y.data(), y.size(), 2.0f);
  clamp_backward(dx.data(), y.data(), dx.size(), 2.0f);
  Dev<float> d_y(x), d_dx(dx0);
  ASSERT_EQ(cu::clamp_forward(d_y.get(), x.size(), 2.0f, nullptr), 0);
  ASSERT_EQ(cu::clamp_backward(d_dx.get(), d_y.get(), x.size(), 2.0f, nullptr), 0);
  expect_close(d_y.host(), y, 0.0f, 0.0f, "clamp");
  expect_close(d_dx.host(), dx, 0.0f, 0.0f, "clamp bwd");
  // Cohere's logit_scale: x *= s, bitwise the CPU's.
  std::vector<float> scaled = x;
  scale_values(scaled.data(), scaled.size(), 0.0625f);
  Dev<float> d_s(x);
  ASSERT_EQ(cu::scale_values(d_s.get(), x.size(), 0.0625f, nullptr), 0);
  expect_close(d_s.host(), scaled, 0.0f, 0.0f, "scale");
  EXPECT_EQ(scaled[7], x[7] * 0.0625f);
}

// A mixture of experts' rows: one expert's share of N tokens x 2 choices (every third choice, some tokens'
// first and some their second), gathered (plain and weighted), scattered back weighted, and the scatter's
// backward (the outputs' and the weights' gradients); the products bitwise the CPU's, the dot products (a
// block's order against a loop's) within 1e-5. And Qwen2-MoE's sigmoid-gated add, forward and backward.
TEST_F(CudaKernels, ExpertRowsAndTheGatedAddMatchTheCpu) {
  const int K = 2;
  std::vector<int> rows;
  for (int r = 0; r < N * K; r += 3) rows.push_back(r);
  const int n = static_cast<int>(rows.size());
  const auto x = randn(static_cast<std::size_t>(N) * C, 41), w = randn(static_cast<std::size_t>(N) * K, 42),
             y = randn(static_cast<std::size_t>(n) * C, 43), dst0 = randn(x.size(), 44),
             dx = randn(x.size(), 45);
  std::vector<float> g(static_cast<std::size_t>(n) * C), gw = g, dst = dst0, dy = g, dw(w.size(), 0.0f);
  gather_rows(g.data(), x.data(), rows.data(), nullptr, n, C, K);
  gather_rows(gw.data(), x.data(), rows.data(), w.data(), n, C, K);
  scatter_add_rows(dst.data(), y.data(), rows.data(), w.data(), 0.5f, n, C, K);
  scatter_add_rows_backward(dy.data(), dw.data(), dx.data(), y.data(), rows.data(), w.data(), 0.5f, n, C, K);
  Dev<float> d_x(x), d_w(w), d_y(y), d_g(g.size()), d_gw(g.size()), d_dst(dst0), d_dx(dx), d_dy(g.size()),
      d_dw(w.size());
  Dev<int> d_rows(rows);
  ASSERT_EQ(cu::gather_rows(d_g.get(), d_x.get(), d_rows.get(), nullptr, n, C, K, N, nullptr), 0);
  ASSERT_EQ(cu::gather_rows(d_gw.get(), d_x.get(), d_rows.get(), d_w.get(), n, C, K, N, nullptr), 0);
  ASSERT_EQ(cu::scatter_add_rows(d_dst.get(), d_y.get(), d_rows.get(), d_w.get(), 0.5f, n, C, K, N, nullptr),
            0);
  ASSERT_EQ(cu::scatter_add_rows_backward(d_dy.get(), d_dw.get(), d_dx.get(), d_y.get(), d_rows.get(),
                                          d_w.get(), 0.5f, n, C, K, N, nullptr),
            0);
  expect_close(d_g.host(), g, 0.0f, 0.0f, "gather");
  expect_close(d_gw.host(), gw, 0.0f, 0.0f, "weighted gather");
  expect_close(d_dst.host(), dst, 0.0f, 0.0f, "scatter");
  expect_close(d_dy.host(), dy, 0.0f, 0.0f, "scatter bwd");
  expect_close(d_dw.host(), dw, 1e-5f, 1e-5f, "routing weights' gradient", 1e-5f);
  EXPECT_NE(dw[0], 0.0f);  // (a routed choice's weight got its gradient)
  EXPECT_EQ(dw[1], 0.0f);  // (one not in this expert's rows did not)
  // The gate: s = sigmoid(z) (expf against the CPU's exp: a few ulp), dst += 0.5 s y.
  const auto z = randn(N, 46, 2.0f), yy = randn(x.size(), 47);
  std::vector<float> gd = dst0, s(N), gdy(x.size()), dz(N);
  gated_add_forward(gd.data(), s.data(), z.data(), yy.data(), 0.5f, N, C);
  gated_add_backward(gdy.data(), dz.data(), dx.data(), yy.data(), s.data(), 0.5f, N, C);
  Dev<float> d_gd(dst0), d_s(s.size()), d_z(z), d_yy(yy), d_gdy(x.size()), d_dz(dz.size());
  ASSERT_EQ(cu::gated_add_forward(d_gd.get(), d_s.get(), d_z.get(), d_yy.get(), 0.5f, N, C, nullptr), 0);
  ASSERT_EQ(
      cu::gated_add_backward(d_gdy.get(), d_dz.get(), d_dx.get(), d_yy.get(), d_s.get(), 0.5f, N, C, nullptr),
      0);
  expect_close(d_s.host(), s, 1e-6f, 1e-7f, "gate");
  expect_close(d_gd.host(), gd, 1e-5f, 1e-6f, "gated add");
  expect_close(d_gdy.host(), gdy, 1e-5f, 1e-6f, "gated add bwd");
  expect_close(d_dz.host(), dz, 1e-5f, 1e-6f, "gate logits' gradient", 1e-5f);
}

// DeepSeek's latent heads (4 heads of 6 + 4 rotary channels, values of 5, a latent of 7) into the attention
// kernels' layout and back, and the value heads narrowed and widened: copies, and the rotary key's gradient
// summed over the heads in the CPU's order, so bitwise.
TEST_F(CudaKernels, LatentHeadsMatchTheCpu) {
  const int H = 4, D = 10, R = 4, Vd = 5, L = 7, P = D - R;
  const auto q = randn(static_cast<std::size_t>(N) * H * D, 48),
             kva = randn(static_cast<std::size_t>(N) * (L + R), 49),
             kvb = randn(static_cast<std::size_t>(N) * H * (P + Vd), 50),
             dqkv = randn(static_cast<std::size_t>(N) * 3 * H * D, 51);
  std::vector<float> qkv(dqkv.size()), dq(q.size()), dkva = kva, dkvb(kvb.size());
  mla_assemble(qkv.data(), q.data(), kva.data(), kvb.data(), N, H, D, R, Vd, L);
  mla_scatter(dq.data(), dkva.data(), dkvb.data(), dqkv.data(), N, H, D, R, Vd, L);
  Dev<float> d_q(q), d_kva(kva), d_kvb(kvb), d_dqkv(dqkv), d_qkv(qkv.size()), d_dq(dq.size()), d_dkva(kva),
      d_dkvb(kvb.size());
  ASSERT_EQ(cu::mla_assemble(d_qkv.get(), d_q.get(), d_kva.get(), d_kvb.get(), N, H, D, R, Vd, L, nullptr),
            0);
  ASSERT_EQ(cu::mla_scatter(d_dq.get(), d_dkva.get(), d_dkvb.get(), d_dqkv.get(), N, H, D, R, Vd, L, nullptr),
            0);
  expect_close(d_qkv.host(), qkv, 0.0f, 0.0f, "latent heads");
  expect_close(d_dq.host(), dq, 0.0f, 0.0f, "dqueries");
  expect_close(d_dkva.host(), dkva, 0.0f, 0.0f, "dkv_a (the latent's columns left as they were)");
  expect_close(d_dkvb.host(), dkvb, 0.0f, 0.0f, "dkv_b");
  const std::size_t rows = static_cast<std::size_t>(N) * H;
  std::vector<float> narrow(rows * Vd), wide(rows * D, 1.0f);
  narrow_heads(narrow.data(), qkv.data(), rows, D, Vd);
  widen_heads(wide.data(), narrow.data(), rows, D, Vd);
  Dev<float> d_narrow(narrow.size()), d_wide(std::vector<float>(wide.size(), 1.0f));
  ASSERT_EQ(cu::narrow_heads(d_narrow.get(), d_qkv.get(), rows, D, Vd, nullptr), 0);
  ASSERT_EQ(cu::widen_heads(d_wide.get(), d_narrow.get(), rows, D, Vd, nullptr), 0);
  expect_close(d_narrow.host(), narrow, 0.0f, 0.0f, "narrow heads");
  expect_close(d_wide.host(), wide, 0.0f, 0.0f, "widened heads (zeros past the values)");
}

// Llama 4's: its query and key heads' norm without weights (8 heads of 12 in rows of 100, forward and
// backward; double sums as the CPU's), the queries' temperature by position, and the routing weights'
// gradient from the weighted expert inputs' (a block's dot products against a loop's: within 1e-5).
TEST_F(CudaKernels, Llama4OperatorsMatchTheCpu) {
  const int stride = 100, heads = 8, hs = 12;
  const auto x = randn(static_cast<std::size_t>(N) * stride, 55), d0 = randn(x.size(), 56);
  std::vector<float> y = x, rstd(static_cast<std::size_t>(N) * heads), d = d0;
  l2_norm_heads(y.data(), rstd.data(), N, stride, heads, hs, 1e-5f);
  l2_norm_heads_backward(d.data(), y.data(), rstd.data(), N, stride, heads, hs);
  Dev<float> d_y(x), d_rstd(rstd.size()), d_d(d0);
  ASSERT_EQ(cu::l2_norm_heads(d_y.get(), d_rstd.get(), N, stride, heads, hs, 1e-5f, nullptr), 0);
  ASSERT_EQ(cu::l2_norm_heads_backward(d_d.get(), d_y.get(), d_rstd.get(), N, stride, heads, hs, nullptr), 0);
  expect_close(d_y.host(), y, 1e-6f, 1e-7f, "l2 norm");
  expect_close(d_rstd.host(), rstd, 1e-6f, 1e-7f, "l2 norm rstd");
  expect_close(d_d.host(), d, 1e-5f, 1e-6f, "l2 norm bwd");
  std::vector<float> temp(T), scaled = x;
  for (int t = 0; t < T; ++t) temp[static_cast<std::size_t>(t)] = 1.0f + 0.1f * static_cast<float>(t % 7);
  scale_rows_by_position(scaled.data(), N, T, stride, 40, temp.data());
  Dev<float> d_scaled(x), d_temp(temp);
  ASSERT_EQ(cu::scale_rows_by_position(d_scaled.get(), N, T, stride, 40, d_temp.get(), nullptr), 0);
  expect_close(d_scaled.host(), scaled, 0.0f, 0.0f, "query temperature");
  const int K = 2;
  std::vector<int> rows;
  for (int r = 1; r < N * K; r += 3) rows.push_back(r);
  const int n = static_cast<int>(rows.size());
  const auto din = randn(static_cast<std::size_t>(n) * C, 57),
             xin = randn(static_cast<std::size_t>(N) * C, 58);
  std::vector<float> dw(static_cast<std::size_t>(N) * K, 0.5f);
  add_row_dots(dw.data(), din.data(), xin.data(), rows.data(), n, C, K);
  Dev<float> d_dw(std::vector<float>(dw.size(), 0.5f)), d_din(din), d_xin(xin);
  Dev<int> d_rows(rows);
  ASSERT_EQ(cu::add_row_dots(d_dw.get(), d_din.get(), d_xin.get(), d_rows.get(), n, C, K, N, nullptr), 0);
  expect_close(d_dw.host(), dw, 1e-5f, 1e-5f, "routing weights' gradient", 1e-5f);
}

TEST_F(CudaKernels, EmbeddingAndCrossEntropyMatchTheCpu) {
  std::vector<int> tokens(N), targets(N);
  std::mt19937 g(41);
  for (int i = 0; i < N; ++i) {
    tokens[i] = static_cast<int>(g() % V);
    targets[i] = static_cast<int>(g() % V);
  }
  tokens[1] = tokens[0];  // a repeated token: its gradient rows add
  const auto wte = randn(static_cast<std::size_t>(V) * C, 42),
             wpe = randn(static_cast<std::size_t>(T) * C, 43),
             dout = randn(static_cast<std::size_t>(N) * C, 44);
  std::vector<float> emb(static_cast<std::size_t>(N) * C), dwte = randn(wte.size(), 45),
                                                           dwpe = randn(wpe.size(), 46);
  Dev<int> d_tok(tokens), d_tgt(targets);
  Dev<float> d_wte(wte), d_wpe(wpe), d_dout(dout), d_emb(emb.size()), d_dwte(dwte), d_dwpe(dwpe);
  ASSERT_EQ(cu::embedding_forward(d_emb.get(), d_tok.get(), d_wte.get(), d_wpe.get(), B, T, C, nullptr), 0);
  ASSERT_EQ(cu::embedding_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tok.get(), B, T, C, nullptr),
            0);
  embedding_forward(emb.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  expect_close(d_emb.host(), emb, 0.0f, 0.0f, "embedding");
  expect_close(d_dwte.host(), dwte, 1e-5f, 1e-5f, "dwte");
  expect_close(d_dwpe.host(), dwpe, 1e-5f, 1e-5f, "dwpe");

  const auto logits = randn(static_cast<std::size_t>(N) * V, 47, 3.0f);
  std::vector<float> probs(logits.size()), dlogits = randn(logits.size(), 48);
  Dev<float> d_logits(logits), d_probs(probs.size()), d_losses(static_cast<std::size_t>(N)),
      d_dlogits(dlogits);
  ASSERT_EQ(
      cu::crossentropy_forward(d_probs.get(), d_losses.get(), d_logits.get(), d_tgt.get(), N, V, nullptr), 0);
  ASSERT_EQ(cu::crossentropy_backward(d_dlogits.get(), d_probs.get(), d_tgt.get(), N, V, nullptr), 0);
  const float loss = crossentropy_forward(probs.data(), logits.data(), targets.data(), N, V);
  crossentropy_backward(dlogits.data(), probs.data(), targets.data(), N, V);
  double sum = 0;
  for (float l : d_losses.host()) sum += static_cast<double>(l);
  EXPECT_NEAR(sum / N, static_cast<double>(loss), 1e-5 * std::fabs(static_cast<double>(loss)));
  expect_close(d_probs.host(), probs, 1e-5f, 1e-7f, "probs");
  expect_close(d_dlogits.host(), dlogits, 1e-5f, 1e-7f, "dlogits");
}

TEST_F(CudaKernels, AdamAndCastsAreBitwiseTheCpuReference) {
  const std::size_t n = 100003;
  for (bool decoupled : {false, true}) {
    auto p = randn(n, 51), m = randn(n, 52, 0.01f), v = randn(n, 53, 0.01f);
    for (float& x : v) x = std::fabs(x);
    const auto grads = randn(n, 54);
    AdamHyper h;
    h.lr = 3e-4f;
    h.weight_decay = 0.1f;
    h.decoupled = decoupled;
    h.step = 7;
    Dev<float> d_p(p), d_m(m), d_v(v), d_g(grads);
    Dev<std::uint16_t> d_out(n);
    cu::AdamDeviceArrays a;
    a.params = d_p.get();
    a.exp_avg = d_m.get();
    a.exp_avg_sq = d_v.get();
    a.grads = d_g.get();
    a.params_bf16 = d_out.get();
    a.n = n;
    ASSERT_EQ(cu::adam_step(a, h, nullptr), 0);
    std::vector<std::uint16_t> out(n);
    AdamArrays c = fp32_arrays(p.data(), m.data(), v.data(), grads.data(), n);
    c.params_out = out.data();
    ASSERT_TRUE(adam_step_isa(Isa::kScalar, c, h, 1));
    const auto gp = d_p.host(), gm = d_m.host(), gv = d_v.host();
    EXPECT_EQ(std::memcmp(gp.data(), p.data(), n * 4), 0) << "params, decoupled " << decoupled;
    EXPECT_EQ(std::memcmp(gm.data(), m.data(), n * 4), 0) << "exp_avg";
    EXPECT_EQ(std::memcmp(gv.data(), v.data(), n * 4), 0) << "exp_avg_sq";
    EXPECT_EQ(d_out.host(), out) << "bf16 params";
  }
  const auto x = randn(n, 55, 100.0f);
  std::vector<std::uint16_t> b(n);
  std::vector<float> back(n);
  cast_f32_to_bf16_ref(x.data(), b.data(), n);
  cast_bf16_to_f32_ref(b.data(), back.data(), n);
  Dev<float> d_x(x), d_back(n);
  Dev<std::uint16_t> d_b(n);
  ASSERT_EQ(cu::cast_f32_to_bf16(d_x.get(), d_b.get(), n, nullptr), 0);
  ASSERT_EQ(cu::cast_bf16_to_f32(d_b.get(), d_back.get(), n, nullptr), 0);
  EXPECT_EQ(d_b.host(), b);
  const auto gb = d_back.host();
  EXPECT_EQ(std::memcmp(gb.data(), back.data(), n * 4), 0);
}

// Gradient clipping's sum of squares: bitwise the reference's order on the GPU, and within rounding of the
// plain sum (sizes below, at and above one element per thread, chunks that end past n).
TEST_F(CudaKernels, SumOfSquaresIsBitwiseTheCpuReference) {
  Dev<double> partials(static_cast<std::size_t>(kSquaresSplit)), out(1);
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{300}, std::size_t{65536},
                              std::size_t{2 * 65536 + 17}, std::size_t{100003}}) {
    const auto x = randn(n, 56 + static_cast<std::uint32_t>(n % 1000), 3.0f);
    Dev<float> d_x(x);
    ASSERT_EQ(cu::sum_of_squares(d_x.get(), n, partials.get(), out.get(), nullptr), 0);
    const double got = out.host()[0], want = sum_of_squares(x.data(), n);
    EXPECT_EQ(std::memcmp(&got, &want, sizeof(double)), 0) << "n " << n << ": " << got << " vs " << want;
    double plain = 0;
    for (float v : x) plain += static_cast<double>(v) * static_cast<double>(v);
    EXPECT_NEAR(got, plain, 1e-12 * plain) << "n " << n;
    if (n == 1) {
      EXPECT_EQ(got, static_cast<double>(x[0]) * static_cast<double>(x[0]));
    }
  }
}

}  // namespace
}  // namespace memwall::kernels
