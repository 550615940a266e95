// TraceModel: tracks, series, capacities and summary from a trace (see trace_model.h).
#include "gui/trace_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "exec/run_analysis.h"

namespace memwall::gui {

double Series::total(std::size_t i) const {
  double s = 0;
  for (const auto& v : values) s += v[i];
  return s;
}

std::string human_seconds(double s) {
  char buf[32];
  if (s >= 1)
    std::snprintf(buf, sizeof buf, "%.3f s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  return buf;
}

Result<TraceModel> TraceModel::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Status::not_found(path + ": cannot open");
  std::string bytes(static_cast<std::size_t>(std::max<std::streamoff>(0, in.tellg())), '\0');
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) return Status::io_error(path + ": cannot read");
  auto m = from_bytes(bytes, path);
  if (!m.is_ok()) return Status(m.status().code(), path + ": " + m.status().message());
  return m;
}

Result<TraceModel> TraceModel::from_bytes(std::string_view bytes, const std::string& name) {
  auto data = trace::read_trace(bytes);
  if (!data.is_ok()) return data.status();
  TraceModel m;
  m.name = name;
  m.data = std::move(data).value();
  m.build();
  return m;
}

namespace {

double num(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const nlohmann::json* p = &j;
  for (const char* k : path) {
    if (!p->is_object() || !p->contains(k)) return 0;
    p = &p->at(k);
  }
  return p->is_number() ? p->get<double>() : 0;
}

}  // namespace

void TraceModel::build() {
  // Tracks.
  std::map<std::pair<int, int>, std::size_t> index;
  const auto& spans = data.spans;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const auto& s = spans[i];
    auto key = std::make_pair(s.pid, s.tid);
    auto it = index.find(key);
    if (it == index.end()) {
      Track t;
      t.pid = s.pid;
      t.tid = s.tid;
      auto th = data.threads.find(key);
      const std::string thread = th != data.threads.end() ? th->second : "track " + std::to_string(s.tid);
      auto pr = data.processes.find(s.pid);
      t.name = (pr != data.processes.end() ? pr->second : "rank " + std::to_string(s.pid)) + " / " + thread;
      it = index.emplace(key, tracks.size()).first;
      tracks.push_back(std::move(t));
    }
    Track& t = tracks[it->second];
    t.span.push_back(i);
  }
  std::sort(tracks.begin(), tracks.end(),
            [](const Track& a, const Track& b) { return std::tie(a.pid, a.tid) < std::tie(b.pid, b.tid); });
  t_min = spans.empty() ? 0 : 1e300;
  t_max = 0;
  for (Track& t : tracks) {
    std::stable_sort(t.span.begin(), t.span.end(),
                     [&](std::size_t a, std::size_t b) { return spans[a].ts_us < spans[b].ts_us; });
    t.start.reserve(t.span.size());
    t.end.reserve(t.span.size());
    for (std::size_t i : t.span) {
      const double s = spans[i].ts_us * 1e-6, e = (spans[i].ts_us + spans[i].dur_us) * 1e-6;
      t.start.push_back(s);
      t.end.push_back(e);
      t.longest = std::max(t.longest, e - s);
      t.busy_s += e - s;
      t.bytes += spans[i].bytes;
      t_min = std::min(t_min, s);
      t_max = std::max(t_max, e);
    }
  }
  // Counters of the first rank that has them.
  std::map<std::string, Series> by_name;
  int counter_pid = -1;
  for (const auto& c : data.counters) {
    if (counter_pid < 0) counter_pid = c.pid;
    if (c.pid != counter_pid) continue;
    Series& s = by_name[c.name];
    s.name = c.name;
    for (const auto& [k, v] : c.values) {
      if (std::find(s.keys.begin(), s.keys.end(), k) == s.keys.end()) {
        s.keys.push_back(k);
        s.values.emplace_back(s.t.size(), 0.0);
      }
    }
    // A sample holds every key: absent ones keep their previous value.
    for (std::size_t k = 0; k < s.keys.size(); ++k) {
      double v = s.values[k].empty() ? 0 : s.values[k].back();
      for (const auto& [key, val] : c.values) {
        if (key == s.keys[k]) v = val;
      }
      s.values[k].push_back(v);
    }
    s.t.push_back(c.ts_us * 1e-6);
  }
  for (auto& [n, s] : by_name) {
    // Counter samples are written in time order per track, but keep them sorted regardless.
    std::vector<std::size_t> order(s.t.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return s.t[a] < s.t[b]; });
    Series sorted = s;
    for (std::size_t i = 0; i < order.size(); ++i) {
      sorted.t[i] = s.t[order[i]];
      for (std::size_t k = 0; k < s.keys.size(); ++k) sorted.values[k][i] = s.values[k][order[i]];
    }
    for (std::size_t i = 0; i < sorted.t.size(); ++i) {
      sorted.peak_total = std::max(sorted.peak_total, sorted.total(i));
      double shown = 0;
      for (std::size_t k = 0; k < sorted.keys.size(); ++k) {
        if (sorted.shown(k))
          shown += sorted.values[k][i];
        else
          sorted.reserved = std::max(sorted.reserved, sorted.values[k][i]);
      }
      sorted.peak_shown = std::max(sorted.peak_shown, shown);
    }
    if (!sorted.t.empty()) {
      t_min = std::min(t_min, sorted.t.front());
      t_max = std::max(t_max, sorted.t.back());
    }
    if (n.rfind("memory ", 0) == 0)
      memory.push_back(std::move(sorted));
    else if (n.rfind("bandwidth ", 0) == 0)
      bandwidth.push_back(std::move(sorted));
    else if (n == "loss" || n == "gradient norm" || n == "expert load")
      metrics.push_back(std::move(sorted));
  }
  const auto metric_rank = [](const Series& s) {
    return s.name == "loss" ? 0 : s.name == "gradient norm" ? 1 : 2;
  };
  std::sort(metrics.begin(), metrics.end(),
            [&](const Series& a, const Series& b) { return metric_rank(a) < metric_rank(b); });
  auto tier_rank = [](const Series& s) {
    return s.name == "memory gpu" ? 0 : s.name == "memory cpu" ? 1 : 2;
  };
  std::sort(memory.begin(), memory.end(),
            [&](const Series& a, const Series& b) { return tier_rank(a) < tier_rank(b); });
  if (t_max < t_min) t_min = t_max = 0;

  // Capacities and link peaks from the resolved hardware in the header.
  nlohmann::json hw = nlohmann::json::parse(data.header.hardware_json, nullptr, false);
  if (!hw.is_discarded()) {
    capacity["memory gpu"] = num(hw, {"gpu", "memory_bytes"});
    capacity["memory cpu"] = num(hw, {"cpu", "memory_bytes"});
    capacity["memory nvme"] = num(hw, {"nvme", "drives"}) * num(hw, {"nvme", "drive_capacity_bytes"});
    capacity["bandwidth h2d"] = capacity["bandwidth d2h"] = num(hw, {"pcie", "gpu_link_Bps"});
    capacity["bandwidth nvme_read"] = num(hw, {"nvme", "drives"}) * num(hw, {"nvme", "drive_read_Bps"});
    capacity["bandwidth nvme_write"] = num(hw, {"nvme", "drives"}) * num(hw, {"nvme", "drive_write_Bps"});
    const double nvlink = num(hw, {"nvlink", "gpu_Bps"});
    capacity["bandwidth network"] =
        nvlink > 0 ? nvlink : num(hw, {"network", "nics"}) * num(hw, {"network", "nic_Bps"});
  }

  // Summary of rank 0.
  Summary& sm = summary;
  sm.ranks = std::max(1, data.header.ranks);
  sm.span_s = t_max - t_min;
  const Track* compute = nullptr;
  for (const Track& t : tracks) {
    if (t.pid == (tracks.empty() ? 0 : tracks.front().pid) && t.name.find("compute") != std::string::npos) {
      compute = &t;
      break;
    }
  }
  double flops = 0;
  if (compute != nullptr) {
    sm.compute_s = compute->busy_s;
    std::map<std::string, int> names;
    for (std::size_t i : compute->span) {
      flops += spans[i].flops;
      ++names[spans[i].name];
    }
    // A replayed trace's further compute lanes (its other CUDA streams, "compute 1", ...): their FLOPs count,
    // and compute is busy while any lane is (the union of the lanes' spans).
    const std::string lane_prefix = compute->name + " ";
    std::vector<Interval> busy;
    for (const Track& t : tracks) {
      if (&t == compute || t.pid != compute->pid || t.name.rfind(lane_prefix, 0) != 0) continue;
      for (std::size_t i : t.span) flops += spans[i].flops;
      for (std::size_t k = 0; k < t.start.size(); ++k) busy.emplace_back(t.start[k], t.end[k]);
    }
    if (!busy.empty()) {
      for (std::size_t k = 0; k < compute->start.size(); ++k)
        busy.emplace_back(compute->start[k], compute->end[k]);
      sm.compute_s = total_length(interval_union(std::move(busy)));
    }
    // Iterations: how often the first op of the trace appears.
    if (!compute->span.empty()) sm.iterations = std::max(1, names[spans[compute->span.front()].name]);
    // Stalls: the largest gaps on the compute track, with the task that ended last before the op resumed.
    std::vector<Stall> gaps;
    for (std::size_t k = 1; k < compute->start.size(); ++k) {
      const double gap = compute->start[k] - compute->end[k - 1];
      if (gap <= 0) continue;
      Stall st{compute->end[k - 1], gap, spans[compute->span[k]].name, ""};
      gaps.push_back(st);
    }
    std::partial_sort(gaps.begin(),
                      gaps.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(5, gaps.size())),
                      gaps.end(), [](const Stall& a, const Stall& b) { return a.seconds > b.seconds; });
    gaps.resize(std::min<std::size_t>(5, gaps.size()));
    for (Stall& st : gaps) {
      double best = -1;
      for (const Track& t : tracks) {
        if (&t == compute || t.pid != compute->pid) continue;
        const double resume = st.at_s + st.seconds;
        auto it = std::upper_bound(t.end.begin(), t.end.end(), resume);  // ends are nearly sorted
        for (long j = static_cast<long>(it - t.end.begin()) - 1; j >= 0 && j + 8 > it - t.end.begin(); --j) {
          const double e = t.end[static_cast<std::size_t>(j)];
          if (e <= resume + 1e-9 && e >= st.at_s && e > best) {
            best = e;
            st.cause = spans[t.span[static_cast<std::size_t>(j)]].name;
          }
        }
      }
    }
    sm.stalls = std::move(gaps);
  }
  sm.iteration_s = sm.span_s / sm.iterations;
  sm.exposed_s = std::max(0.0, sm.span_s - sm.compute_s);
  sm.tflops_per_gpu = sm.span_s > 0 ? flops / sm.span_s / 1e12 : 0;
  for (const Series& s : memory) {
    const int tier = tier_rank(s);
    sm.peak_bytes[tier] = s.peak_shown;
  }
}

const trace::TraceSpan* TraceModel::span_at(std::size_t track, double t) const {
  const Track& tr = tracks[track];
  auto it = std::upper_bound(tr.start.begin(), tr.start.end(), t);
  for (long i = static_cast<long>(it - tr.start.begin()) - 1; i >= 0; --i) {
    const auto k = static_cast<std::size_t>(i);
    if (tr.end[k] >= t) return &data.spans[tr.span[k]];
    if (tr.start[k] < t - tr.longest) break;
  }
  return nullptr;
}

long TraceModel::sample_at(const Series& s, double t) {
  auto it = std::upper_bound(s.t.begin(), s.t.end(), t);
  return static_cast<long>(it - s.t.begin()) - 1;
}

double TraceModel::capacity_of(const std::string& series) const {
  auto it = capacity.find(series);
  if (it != capacity.end()) return it->second;
  // A further lane of a link ("bandwidth network 1", a replayed trace's second stream) shares its capacity.
  const std::size_t space = series.find_last_of(' ');
  if (space != std::string::npos && space + 1 < series.size() &&
      series.find_first_not_of("0123456789", space + 1) == std::string::npos) {
    it = capacity.find(series.substr(0, space));
  }
  return it == capacity.end() ? 0 : it->second;
}

}  // namespace memwall::gui
