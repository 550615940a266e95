// TraceModel: a memwall trace (from plan, simulate, train or replay) arranged for drawing: one track of
// time-sorted spans per (rank, resource), memory occupancy per tier by category and bandwidth per link as
// step series, the hardware's capacities and link peaks from the header, and a summary (iteration time,
// TFLOP/s per GPU, peak memory per tier, exposed time, the largest compute stalls). Qt-free, so tests and the
// open benchmark use it without a display.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "trace/trace.h"

namespace memwall::gui {

struct Track {
  int pid = 0, tid = 0;
  std::string name;                // "rank 0 / compute"
  std::vector<double> start, end;  // seconds, sorted by start
  std::vector<std::size_t> span;   // index into TraceData::spans
  double longest = 0;              // longest span (for range lookups)
  double busy_s = 0, bytes = 0;
};

// A counter track as a step function: values[k][i] holds from t[i] until t[i + 1].
struct Series {
  std::string name;                         // "memory gpu", "bandwidth h2d", "loss"
  std::vector<std::string> keys;            // categories ("params16", ...) or "Bps"
  std::vector<double> t;                    // seconds
  std::vector<std::vector<double>> values;  // [key][sample]
  double peak_total = 0;                    // largest sum over keys at one sample
  double reserved = 0;                      // the largest "runtime_reserved" value (not drawn)
  double peak_shown = 0;                    // peak_total without the reserve
  double total(std::size_t i) const;
  bool shown(std::size_t key) const { return keys[key].find("reserved") == std::string::npos; }
};

struct Stall {
  double at_s = 0, seconds = 0;
  std::string before;  // the compute op that waited
  std::string cause;   // the last other task that ended before it started
};

struct Summary {
  int ranks = 1;
  int iterations = 1;
  double span_s = 0;                 // first start to last end
  double iteration_s = 0;            // span / iterations
  double compute_s = 0;              // rank 0's compute busy time (any of its compute lanes)
  double exposed_s = 0;              // span minus compute busy (rank 0)
  double tflops_per_gpu = 0;         // rank 0's compute FLOPs over the span
  double peak_bytes[3] = {0, 0, 0};  // gpu, cpu, nvme (from the memory counters, beyond the reserve)
  std::vector<Stall> stalls;         // the largest gaps on rank 0's (main) compute track
};

class TraceModel {
 public:
  static Result<TraceModel> load(const std::string& path);
  static Result<TraceModel> from_bytes(std::string_view bytes, const std::string& name);

  std::string name;  // file name
  trace::TraceData data;
  std::vector<Track> tracks;      // by (pid, tid)
  std::vector<Series> memory;     // per tier present: gpu, cpu, nvme (first rank)
  std::vector<Series> bandwidth;  // per link (first rank)
  // memwall train's per-step figures (first rank): "loss", "gradient norm", "expert load", in that order.
  std::vector<Series> metrics;
  double t_min = 0, t_max = 0;             // seconds
  std::map<std::string, double> capacity;  // "memory gpu" -> bytes, "bandwidth h2d" -> B/s (from hardware)
  Summary summary;

  // The span of track `track` covering time t (nullptr if none).
  const trace::TraceSpan* span_at(std::size_t track, double t) const;
  // Index of the last sample at or before t (or -1).
  static long sample_at(const Series& s, double t);
  double capacity_of(const std::string& series) const;

 private:
  void build();
};

// "3.200 ms", "1.234 s": times for labels and tooltips (bytes and rates use base/units.h).
std::string human_seconds(double s);

}  // namespace memwall::gui
