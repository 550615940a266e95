// memwall traces: Chrome trace-event JSON (Perfetto and chrome://tracing open it) with a versioned header.
// docs/trace-format.md specifies every field.
//
// TraceWriter streams events to an std::ostream as they come (constant memory, linear time); wrap the
// stream in GzipOstream for .json.gz. read_trace() loads a whole trace (plain or gzip) into typed structs.
//
//   std::ofstream file("out.json");
//   TraceWriter w(file);
//   w.begin(header);
//   w.thread_name(0, 1, "compute");
//   w.span({...});
//   w.counter(0, "memory gpu", ts_us, {{"params16", 1e9}});
//   Status s = w.finish();
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace memwall::trace {

struct TraceHeader {
  std::string memwall_version;
  std::string executor;       // "reference", "simgrid", "cpu", "cuda"
  std::string command;        // "plan", "simulate", "train", "replay"
  int ranks = 1;              // ranks of the run (the trace may show fewer)
  std::string hardware_json;  // the resolved specs, as JSON text
  std::string model_json;
  std::string run_json;
  std::string summary_json;  // optional run summary (iteration time, peaks), as JSON text
};

// A complete ("X") event: one task on one track.
struct TraceSpan {
  int pid = 0;  // rank
  int tid = 0;  // track (resource) within the rank
  std::string name;
  std::string category;  // task kind: compute, copy, nvme_read, ...
  double ts_us = 0;
  double dur_us = 0;
  int task = -1;
  std::string phase;  // forward, recompute, backward, optimizer, setup
  double bytes = 0;
  double flops = 0;
  // Since format 1.1: the task ids this one waited for (alloc/free bookkeeping resolved through), and for
  // a collective its kind ("allgather", ...) and group size. Replay rebuilds the task graph from these.
  std::vector<int> deps;
  std::string collective;
  int group = 0;
};

// A counter ("C") event: several named values of one counter track at one time.
struct CounterSample {
  int pid = 0;
  std::string name;  // "memory gpu", "bandwidth h2d"
  double ts_us = 0;
  std::vector<std::pair<std::string, double>> values;
};

class TraceWriter {
 public:
  explicit TraceWriter(std::ostream& out);
  void begin(const TraceHeader& header);
  void process_name(int pid, const std::string& name);
  void thread_name(int pid, int tid, const std::string& name);
  void span(const TraceSpan& s);
  void counter(const CounterSample& c);
  // Closes the JSON document and flushes; fails if the stream failed at any point.
  Status finish();
  std::uint64_t events() const { return events_; }

 private:
  void separator();
  std::ostream& out_;
  std::uint64_t events_ = 0;
  bool begun_ = false;
};

struct TraceData {
  std::string format;
  std::string version;
  TraceHeader header;
  std::map<std::pair<int, int>, std::string> threads;  // (pid, tid) -> name
  std::map<int, std::string> processes;
  std::vector<TraceSpan> spans;
  std::vector<CounterSample> counters;
  std::uint64_t unknown_events = 0;  // event kinds memwall does not read (counted, not fatal)
};

// Parses a trace from its bytes (gzip is detected by its magic). Errors name what is wrong: not JSON,
// truncated gzip, not a memwall trace, an unsupported major version.
Result<TraceData> read_trace(std::string_view bytes);

// The bytes themselves, or their gzip-decompressed content when they start with gzip's magic (errors name a
// truncated or corrupt stream). For readers of other trace formats (replay's Kineto importer).
Result<std::string> inflate_if_gzip(std::string_view bytes);

// An ostream that gzip-compresses into another ostream. Call close() (or destroy it) to finish the stream.
class GzipOstream : public std::ostream {
 public:
  explicit GzipOstream(std::ostream& sink, int level = 6);
  ~GzipOstream() override;
  Status close();

 private:
  class Buf;
  std::unique_ptr<Buf> buf_;
};

// JSON string literal with escapes ("a\"b").
std::string json_quote(std::string_view s);

}  // namespace memwall::trace
