// memwall's CPU Adam on one flat tensor: prints the median ms/step over several steps, params/s and the
// optimizer-state traffic in GB/s (read p, g, m, v; write p, m, v = 28 bytes per fp32 parameter).
// Usage: memwall-adam-bench [params=100000000] [threads=2] [steps=10] [isa=auto|scalar|avx2|avx512]  (auto:
// what adam_step uses)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/adam.h"

int main(int argc, char** argv) {
  using namespace memwall::kernels;
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 100000000;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 10;
  const std::string want = argc > 4 ? argv[4] : "auto";
  Isa isa = adam_isa();
  if (want == "scalar") isa = Isa::kScalar;
  if (want == "avx2") isa = Isa::kAvx2;
  if (want == "avx512") isa = Isa::kAvx512;
  std::vector<float> p(n, 0.5f), m(n, 0.0f), v(n, 0.0f), g(n, 1e-3f);
  const AdamArrays a = fp32_arrays(p.data(), m.data(), v.data(), g.data(), n);
  AdamHyper h;
  std::vector<double> ms;
  for (int s = 0; s <= steps; ++s) {  // step 0 warms up (page faults)
    h.step = s + 1;
    const auto t0 = std::chrono::steady_clock::now();
    adam_step_isa(isa, a, h, threads);
    const double dt =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) ms.push_back(dt);
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  std::printf(
      "{\"isa\": \"%s\", \"params\": %zu, \"threads\": %d, \"ms_per_step\": %.3f, \"params_per_s\": %.4g, "
      "\"state_GBps\": %.2f}\n",
      isa_name(isa), n, threads, med, n / (med / 1e3), 28.0 * n / (med / 1e3) / 1e9);
  return 0;
}
