// Writes a synthetic memwall trace of N events for the viewer's open benchmark (bench/gui_open.sh): ranks of
// 7 resource tracks with back-to-back spans (the compute track a forward/backward pattern, the others
// transfers with bytes), plus memory counters per tier with six categories and bandwidth counters.
// Deterministic. Usage: memwall-trace-gen OUT.json[.gz] EVENTS [RANKS=4]
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "trace/trace.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: memwall-trace-gen OUT.json[.gz] EVENTS [RANKS=4]\n");
    return 2;
  }
  const std::string path = argv[1];
  const long events = std::atol(argv[2]);
  const int ranks = argc > 3 ? std::atoi(argv[3]) : 4;
  std::ofstream file(path, std::ios::binary);
  if (!file) {
    std::fprintf(stderr, "%s: cannot open\n", path.c_str());
    return 1;
  }
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  std::unique_ptr<memwall::trace::GzipOstream> zout;
  if (gz) zout = std::make_unique<memwall::trace::GzipOstream>(file);
  std::ostream& out = gz ? static_cast<std::ostream&>(*zout) : file;
  memwall::trace::TraceWriter w(out);
  memwall::trace::TraceHeader h;
  h.memwall_version = "bench";
  h.executor = "synthetic";
  h.command = "trace-gen";
  h.ranks = ranks;
  h.hardware_json = R"({"gpu": {"memory_bytes": 34359738368}, "cpu": {"memory_bytes": 1649267441664},
    "pcie": {"gpu_link_Bps": 12e9}, "nvme": {"drives": 8, "drive_capacity_bytes": 3.84e12,
    "drive_read_Bps": 3.2e9, "drive_write_Bps": 1.9e9}})";
  w.begin(h);
  const char* tracks[] = {"compute", "h2d", "d2h", "nvme_read", "nvme_write", "network", "cpu_optimizer"};
  const char* cats[] = {"compute", "copy", "copy", "nvme_read", "nvme_write", "collective", "optimizer_step"};
  for (int r = 0; r < ranks; ++r) {
    w.process_name(r, "rank " + std::to_string(r));
    for (int t = 0; t < 7; ++t) w.thread_name(r, t + 1, tracks[t]);
  }
  // 90% spans, 10% counter samples.
  const long samples = events / 10, spans = events - samples;
  const long per_track = spans / (ranks * 7) + 1;
  long written = 0;
  for (int r = 0; r < ranks && written < spans; ++r) {
    for (int t = 0; t < 7 && written < spans; ++t) {
      double ts = 0;
      for (long i = 0; i < per_track && written < spans; ++i, ++written) {
        memwall::trace::TraceSpan s;
        s.pid = r;
        s.tid = t + 1;
        s.name = std::string(t == 0 ? (i % 2 ? "bwd L" : "fwd L") : "task L") + std::to_string(i % 97);
        s.category = cats[t];
        s.task = static_cast<int>(i);
        s.phase = i % 2 ? "backward" : "forward";
        s.ts_us = ts;
        s.dur_us = 5 + static_cast<double>((i * 7919 + t * 31) % 40);
        s.bytes = t == 0 ? 0 : 1e6 * static_cast<double>(1 + i % 16);
        s.flops = t == 0 ? 1e9 : 0;
        w.span(s);
        ts += s.dur_us + (t == 0 ? 1 : 3 + (i % 5));
      }
    }
  }
  const char* tiers[] = {"memory gpu", "memory cpu", "memory nvme"};
  for (long i = 0; i < samples; ++i) {
    const double ts = static_cast<double>(i) * 3.0;
    if (i % 4 == 3) {
      w.counter(
          {0, "bandwidth h2d", ts, {{"Bps", (i % 8 == 3) ? 6e9 + 1e7 * static_cast<double>(i % 100) : 0.0}}});
      continue;
    }
    const double wave = static_cast<double>(i % 1000);
    w.counter({0,
               tiers[i % 3],
               ts,
               {{"params16", 1e9 + wave * 1e6},
                {"grads16", 5e8 + wave * 2e5},
                {"momentum32", 2e9},
                {"variance32", 2e9},
                {"activations", wave * 4e6},
                {"pinned_swap_buffers", 3e8}}});
  }
  if (!w.finish().is_ok()) return 1;
  if (gz && !zout->close().is_ok()) return 1;
  std::printf("%s: %ld spans, %ld counter samples\n", path.c_str(), spans, samples);
  return 0;
}
