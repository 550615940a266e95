// Google Benchmark microbenchmarks of the CPU kernels, one row per path, so the SIMD paths can be compared
// with their scalar references and the matmul backends with each other on this machine:
//   ./build/bench/memwall-kernels-gbench [--benchmark_filter=Adam]
// Bytes/s counters count the bytes each kernel must read and write; matmuls report GFLOP/s.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cpu/adam.h"
#include "cpu/cast.h"
#include "cpu/gpt_ops.h"
#include "cpu/vexp.h"

namespace memwall::kernels {
namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

bool isa_supported(Isa isa) {
  return static_cast<int>(isa) <= static_cast<int>(best_isa());
}

void BM_Adam(benchmark::State& state) {
  const auto isa = static_cast<Isa>(state.range(0));
  const auto n = static_cast<std::size_t>(state.range(1));
  if (!isa_supported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  auto p = random_floats(n, 1), m = std::vector<float>(n, 0.0f), v = std::vector<float>(n, 0.0f);
  auto g = random_floats(n, 2);
  const AdamArrays a = fp32_arrays(p.data(), m.data(), v.data(), g.data(), n);
  AdamHyper h;
  for (auto _ : state) {
    adam_step_isa(isa, a, h, 1);
    ++h.step;
  }
  state.SetLabel(isa_name(isa));
  // Reads p, m, v, g; writes p, m, v: 28 bytes per fp32 parameter.
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(n) * 28);
}
BENCHMARK(BM_Adam)->ArgsProduct({{0, 1, 2}, {1 << 16, 1 << 22}})->Unit(benchmark::kMicrosecond);

template <void (*Cast)(const float*, std::uint16_t*, std::size_t)>
void BM_CastF32To16(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto in = random_floats(n, 3);
  std::vector<std::uint16_t> out(n);
  for (auto _ : state) {
    Cast(in.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(n) * 6);
}
BENCHMARK(BM_CastF32To16<cast_f32_to_bf16_ref>)->Name("CastF32ToBF16/ref")->Arg(1 << 20);
BENCHMARK(BM_CastF32To16<cast_f32_to_bf16>)->Name("CastF32ToBF16/dispatch")->Arg(1 << 20);
BENCHMARK(BM_CastF32To16<cast_f32_to_f16_ref>)->Name("CastF32ToF16/ref")->Arg(1 << 20);
BENCHMARK(BM_CastF32To16<cast_f32_to_f16>)->Name("CastF32ToF16/dispatch")->Arg(1 << 20);

void BM_ExpInplace(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto src = random_floats(n, 4);
  auto x = src;
  for (auto _ : state) {
    state.PauseTiming();
    x = src;
    state.ResumeTiming();
    exp_inplace(x.data(), n);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(n));
}
BENCHMARK(BM_ExpInplace)->Arg(1 << 16);

void BM_MatmulF32(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto a = random_floats(static_cast<std::size_t>(n) * n, 5), w = random_floats(a.size(), 6);
  std::vector<float> out(a.size());
  for (auto _ : state) matmul_forward(out.data(), a.data(), w.data(), nullptr, n, n, n);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * n * n * n * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MatmulF32)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MatmulBF16(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto af = random_floats(static_cast<std::size_t>(n) * n, 7), wf = random_floats(af.size(), 8);
  std::vector<std::uint16_t> a(af.size()), w(wf.size());
  cast_f32_to_bf16(af.data(), a.data(), a.size());
  cast_f32_to_bf16(wf.data(), w.data(), w.size());
  std::vector<float> out(af.size());
  for (auto _ : state) matmul_forward_bf16(out.data(), a.data(), w.data(), nullptr, n, n, n);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * n * n * n * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MatmulBF16)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

// Causal attention forward + backward, B = 2 sequences of T tokens, 4 heads of 64 channels: the batched-GEMM
// unfused kernels (arg 0, T x T probabilities kept) against the fused row-by-row ones (arg 1, a log-sum-exp
// per row), and those over a sliding window of 256 keys (args 2 and 3: the fused ones then visit only the key
// tiles in it). GFLOP/s counts the unfused kernels' 12 B T^2 C (forward 4, backward 8; no causal discount),
// so the rows compare as times.
void BM_Attention(benchmark::State& state) {
  const bool flash = state.range(0) % 2 == 1;
  const int window = state.range(0) >= 2 ? 256 : 0;
  const int B = 2, T = static_cast<int>(state.range(1)), C = 256, NH = 4;
  const std::size_t n = static_cast<std::size_t>(B) * T;
  const auto qkv = random_floats(n * 3 * C, 9), dout = random_floats(n * C, 10);
  std::vector<float> out(n * C), dqkv(n * 3 * C),
      att(static_cast<std::size_t>(B) * NH * T * (flash ? 1 : static_cast<std::size_t>(T)));
  for (auto _ : state) {
    if (flash) {
      flash_attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, window);
      flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), att.data(), B, T, C, NH,
                               window);
    } else {
      attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, window);
      attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, window);
    }
  }
  state.SetLabel(std::string(flash ? "flash" : "unfused") + (window > 0 ? ", window 256" : ""));
  state.counters["GFLOP/s"] = benchmark::Counter(
      12.0 * B * T * static_cast<double>(T) * C * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Attention)->ArgsProduct({{0, 1, 2, 3}, {256, 1024, 4096}})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace memwall::kernels

BENCHMARK_MAIN();
