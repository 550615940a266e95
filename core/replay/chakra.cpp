// Chakra execution traces into a replay graph (see chakra.h).
#include "replay/chakra.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <queue>
#include <unordered_map>

#include "base/units.h"

namespace memwall {

namespace {

// Protobuf wire format: a cursor over one message's bytes. Every read checks the bounds; `ok` turns false
// on the first malformed field and stays false.
struct Wire {
  const unsigned char* p;
  const unsigned char* end;
  bool ok = true;

  Wire(const char* data, std::size_t n)
      : p(reinterpret_cast<const unsigned char*>(data)),
        end(reinterpret_cast<const unsigned char*>(data) + n) {}
  bool more() const { return ok && p < end; }

  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) break;
      const unsigned char b = *p++;
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    ok = false;
    return 0;
  }
  std::uint64_t fixed(int n) {
    if (end - p < n) {
      ok = false;
      return 0;
    }
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);  // little-endian
    p += n;
    return v;
  }
  std::string_view bytes() {
    const std::uint64_t n = varint();
    if (!ok || n > static_cast<std::uint64_t>(end - p)) {
      ok = false;
      return {};
    }
    std::string_view s(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
    p += n;
    return s;
  }
  void skip(int wire_type) {
    switch (wire_type) {
      case 0:
        varint();
        break;
      case 1:
        fixed(8);
        break;
      case 2:
        bytes();
        break;
      case 5:
        fixed(4);
        break;
      default:
        ok = false;  // groups (3, 4) are not proto3; anything else is corrupt
    }
  }
};

double as_double(std::uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}
float as_float(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
std::int64_t zigzag(std::uint64_t v) {
  return static_cast<std::int64_t>(v >> 1) ^ -static_cast<std::int64_t>(v & 1);
}

struct Attr {
  std::string name;
  double number = 0;  // any numeric or bool value
  bool has_number = false;
  std::string text;  // string_val
  bool has_text = false;
};

// AttributeProto: name = 1, then a oneof of scalar values (lists are skipped).
Attr parse_attr(std::string_view msg, bool& ok) {
  Wire w(msg.data(), msg.size());
  Attr a;
  while (w.more()) {
    const std::uint64_t key = w.varint();
    const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    if (field == 1 && type == 2) {
      a.name = std::string(w.bytes());
      continue;
    }
    double v = 0;
    bool numeric = true;
    if (type == 0 && (field == 7 || field == 9 || field == 11 || field == 13 || field == 27)) {
      const std::uint64_t raw = w.varint();
      // int32/int64 are two's complement in 64 bits; uint32/uint64/bool are plain.
      v = field == 7 || field == 9 ? static_cast<double>(static_cast<std::int64_t>(raw))
                                   : static_cast<double>(raw);
    } else if (type == 0 && (field == 15 || field == 17)) {
      v = static_cast<double>(zigzag(w.varint()));
    } else if (type == 1 && field == 3) {
      v = as_double(w.fixed(8));
    } else if (type == 5 && field == 5) {
      v = as_float(static_cast<std::uint32_t>(w.fixed(4)));
    } else if (type == 5 && (field == 19 || field == 23)) {
      const auto raw = static_cast<std::uint32_t>(w.fixed(4));
      v = field == 19 ? static_cast<double>(raw) : static_cast<double>(static_cast<std::int32_t>(raw));
    } else if (type == 1 && (field == 21 || field == 25)) {
      const std::uint64_t raw = w.fixed(8);
      v = field == 21 ? static_cast<double>(raw) : static_cast<double>(static_cast<std::int64_t>(raw));
    } else if (type == 2 && field == 29) {
      a.text = std::string(w.bytes());
      a.has_text = true;
      numeric = false;
    } else {
      numeric = false;
      w.skip(type);
    }
    if (numeric) {
      a.number = v;
      a.has_number = true;
    }
  }
  ok = ok && w.ok;
  return a;
}

enum NodeType { kInvalid = 0, kMetadata, kMemLoad, kMemStore, kComp, kSend, kRecv, kColl };

struct Node {
  std::uint64_t id = 0;
  std::string name;
  int type = kInvalid;
  std::vector<std::uint64_t> deps;  // data and control
  double start_us = 0, dur_us = 0;
  std::map<std::string, double> attrs;
  std::map<std::string, std::string> texts;
  double attr(const char* key, double fallback = 0) const {
    auto it = attrs.find(key);
    return it == attrs.end() ? fallback : it->second;
  }
  std::string text(const char* key) const {
    auto it = texts.find(key);
    return it == texts.end() ? std::string() : it->second;
  }
};

// Repeated uint64 (data_deps, ctrl_deps): packed (wire type 2) or one varint per field.
void read_ids(Wire& w, int type, std::vector<std::uint64_t>& out) {
  if (type == 0) {
    out.push_back(w.varint());
    return;
  }
  if (type != 2) {
    w.ok = false;
    return;
  }
  const std::string_view packed = w.bytes();
  Wire in(packed.data(), packed.size());
  while (in.more()) out.push_back(in.varint());
  w.ok = w.ok && in.ok;
}

Result<Node> parse_node(std::string_view msg) {
  Wire w(msg.data(), msg.size());
  Node n;
  bool ok = true;
  while (w.more()) {
    const std::uint64_t key = w.varint();
    const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    if (field == 1 && type == 0) {
      n.id = w.varint();
    } else if (field == 2 && type == 2) {
      n.name = std::string(w.bytes());
    } else if (field == 3 && type == 0) {
      n.type = static_cast<int>(w.varint());
    } else if (field == 4 || field == 5) {
      read_ids(w, type, n.deps);
    } else if (field == 6 && type == 0) {
      n.start_us = static_cast<double>(w.varint());
    } else if (field == 7 && type == 0) {
      n.dur_us = static_cast<double>(w.varint());
    } else if (field == 10 && type == 2) {
      const Attr a = parse_attr(w.bytes(), ok);
      if (a.has_number) n.attrs[a.name] = a.number;
      if (a.has_text) n.texts[a.name] = a.text;
    } else {
      w.skip(type);
    }
  }
  if (!w.ok || !ok) return Status::invalid_argument("a malformed node message");
  return n;
}

// The stream's messages: varint32 length, then that many bytes.
Result<std::vector<std::string_view>> split_messages(std::string_view bytes) {
  std::vector<std::string_view> out;
  Wire w(bytes.data(), bytes.size());
  while (w.more()) {
    const std::size_t at = bytes.size() - static_cast<std::size_t>(w.end - w.p);
    const std::string_view m = w.bytes();
    if (!w.ok) {
      return Status::invalid_argument("truncated or not a Chakra trace: message " +
                                      std::to_string(out.size()) + " at byte " + std::to_string(at) +
                                      " runs past the end of the file");
    }
    out.push_back(m);
  }
  return out;
}

CollectiveKind collective_of(int comm_type) {
  switch (comm_type) {
    case 0:
      return CollectiveKind::kAllReduce;
    case 2:
      return CollectiveKind::kAllGather;
    case 5:
      return CollectiveKind::kBroadcast;
    case 7:
    case 8:
      return CollectiveKind::kReduceScatter;
    default:
      return CollectiveKind::kNone;  // reduce, gather, scatter, all-to-all, barrier
  }
}

}  // namespace

bool looks_like_chakra(std::string_view bytes) {
  // First message: GlobalMetadata, whose first field is `version` (field 1, a string) or `attr` (field 2).
  Wire w(bytes.data(), bytes.size());
  const std::string_view first = w.bytes();
  if (!w.ok || first.empty()) return false;
  Wire m(first.data(), first.size());
  const std::uint64_t key = m.varint();
  return m.ok && (key == ((1 << 3) | 2) || key == ((2 << 3) | 2));
}

std::set<std::string> chakra_process_groups(std::string_view bytes) {
  std::set<std::string> out;
  auto messages = split_messages(bytes);
  if (!messages.is_ok()) return out;  // the import says what is wrong with the file
  for (std::size_t i = 1; i < messages->size(); ++i) {
    auto n = parse_node((*messages)[i]);
    if (n.is_ok() && n->type == kColl && !n->text("pg_name").empty()) out.insert(n->text("pg_name"));
  }
  return out;
}

Result<ReplayGraph> import_chakra_trace(std::string_view bytes, int rank, int world_size, int first, int last,
                                        ChakraInfo& info, const ChakraGroups& groups) {
  auto messages = split_messages(bytes);
  if (!messages.is_ok()) return messages.status();
  if (messages->empty()) return Status::invalid_argument("an empty file, not a Chakra trace");
  if (!looks_like_chakra(bytes)) {
    return Status::invalid_argument("not a Chakra execution trace: no GlobalMetadata message at the start");
  }
  {
    Wire m((*messages)[0].data(), (*messages)[0].size());
    while (m.more()) {
      const std::uint64_t key = m.varint();
      if (key == ((1 << 3) | 2)) {
        info.version = std::string(m.bytes());
      } else {
        m.skip(static_cast<int>(key & 7));
      }
    }
  }
  std::vector<Node> nodes;
  std::unordered_map<std::uint64_t, std::size_t> index;
  for (std::size_t i = 1; i < messages->size(); ++i) {
    auto n = parse_node((*messages)[i]);
    if (!n.is_ok())
      return Status::invalid_argument("message " + std::to_string(i) + ": " + n.status().message());
    if (index.count(n->id)) {
      return Status::invalid_argument("node id " + std::to_string(n->id) + " appears twice");
    }
    index[n->id] = nodes.size();
    nodes.push_back(std::move(*n));
  }
  info.nodes = nodes.size();
  if (nodes.empty()) return Status::invalid_argument("no nodes after the metadata");

  // Topological order (ids break ties), so that every task's dependencies come before it.
  std::vector<std::vector<std::size_t>> users(nodes.size());
  std::vector<int> waiting(nodes.size(), 0);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    std::sort(nodes[i].deps.begin(), nodes[i].deps.end());
    nodes[i].deps.erase(std::unique(nodes[i].deps.begin(), nodes[i].deps.end()), nodes[i].deps.end());
    for (std::uint64_t d : nodes[i].deps) {
      auto it = index.find(d);
      if (it == index.end()) {
        ++info.dangling_deps;
        continue;
      }
      users[it->second].push_back(i);
      ++waiting[i];
    }
  }
  auto later = [&](std::size_t a, std::size_t b) { return nodes[a].id > nodes[b].id; };
  std::priority_queue<std::size_t, std::vector<std::size_t>, decltype(later)> ready(later);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (waiting[i] == 0) ready.push(i);
  }
  std::vector<std::size_t> order;
  while (!ready.empty()) {
    const std::size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (std::size_t u : users[i]) {
      if (--waiting[u] == 0) ready.push(u);
    }
  }
  if (order.size() != nodes.size()) {
    return Status::invalid_argument("the dependencies form a cycle (" +
                                    std::to_string(nodes.size() - order.size()) +
                                    " nodes never become ready)");
  }

  ReplayGraph g;
  g.pid = rank;
  g.ranks = std::max(1, world_size);
  g.steps_total = 1;
  MW_RETURN_IF_ERROR(choose_steps(g, first, last));
  Schedule& s = g.schedule;
  // Per node: the tasks that stand for it as a dependency (itself, or a skipped node's own dependencies).
  std::vector<std::vector<int>> stands_for(nodes.size());
  double t0 = std::numeric_limits<double>::infinity(), t1 = 0;
  // Per task: its stream or CPU thread, a lane of its resource (assign_lanes). chakra_converter copies a GPU
  // op's stream into its `tid` attribute (a CPU op's is its thread); `stream` where a trace names it.
  std::vector<double> streams;
  for (const std::size_t i : order) {
    const Node& n = nodes[i];
    std::vector<int> deps;
    for (std::uint64_t d : n.deps) {
      auto it = index.find(d);
      if (it == index.end()) continue;
      const auto& via = stands_for[it->second];
      deps.insert(deps.end(), via.begin(), via.end());
    }
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    Task t;
    const std::vector<int>* members = nullptr;  // a process group's ranks, not the world's
    t.name = n.name;
    t.phase = Phase::kForward;
    const double dur_s = n.dur_us * 1e-6;
    bool keep = true;
    if (n.type == kComp) {
      t.kind = TaskKind::kCompute;
      const bool cpu = n.attr("is_cpu_op") != 0;
      t.resource = cpu ? Resource::kCpuOptimizer : Resource::kCompute;
      t.flops = std::max(0.0, n.attr("num_ops"));
      t.bytes = std::max(0.0, n.attr("tensor_size"));  // memory it reads and writes (the roofline's bytes)
      if (dur_s > 0) {
        t.measured_s = dur_s;
      } else if (cpu || (t.flops <= 0 && t.bytes <= 0)) {
        keep = false;  // nothing to time it by
      }
      if (keep) ++(cpu ? info.cpu_ops : info.compute);
    } else if (n.type == kColl || n.type == kSend || n.type == kRecv) {
      const CollectiveKind kind =
          n.type == kColl
              ? collective_of(static_cast<int>(std::clamp(whole_or(n.attr("comm_type", -1), -1), -1L, 64L)))
              : CollectiveKind::kNone;
      const double size = n.attr("comm_size");
      if (kind != CollectiveKind::kNone && size > 0) {
        t.kind = TaskKind::kCollective;
        t.resource = Resource::kNetwork;
        t.collective = kind;
        t.group = g.ranks;
        t.bytes = size;
        ++info.collectives;
        if (const std::string pg = n.text("pg_name"); !pg.empty()) {
          auto it = groups.find(pg);
          if (it == groups.end() || !std::binary_search(it->second.begin(), it->second.end(), rank)) {
            info.unresolved_groups.insert(pg);
          } else if (static_cast<int>(it->second.size()) < g.ranks) {
            members = &it->second;
            ++info.in_subgroups;
          }
        }
      } else if (dur_s > 0) {  // kept as measured, on the network lane
        t.kind = TaskKind::kCompute;
        t.resource = Resource::kNetwork;
        t.measured_s = dur_s;
        ++info.measured_communication;
      } else {
        keep = false;
      }
    } else if (n.type == kMemLoad || n.type == kMemStore) {
      const double size = n.attr("tensor_size");
      const bool load = n.type == kMemLoad;
      if (size > 0) {
        t.kind = TaskKind::kCopy;
        t.resource = load ? Resource::kH2D : Resource::kD2H;
        t.src = load ? Tier::kCpu : Tier::kGpu;
        t.dst = load ? Tier::kGpu : Tier::kCpu;
        t.bytes = size;
        ++info.copies;
      } else if (dur_s > 0) {
        t.kind = TaskKind::kCompute;
        t.resource = load ? Resource::kH2D : Resource::kD2H;
        t.measured_s = dur_s;
        ++info.copies;
      } else {
        keep = false;
      }
    } else {
      keep = false;  // metadata, storage, batch, checkpoint, invalid
    }
    if (!keep) {
      ++info.skipped;
      stands_for[i] = std::move(deps);
      continue;
    }
    if (n.start_us > 0) {
      info.timed = true;
      t0 = std::min(t0, n.start_us);
      t1 = std::max(t1, n.start_us + n.dur_us);
    }
    streams.push_back(n.attr("stream", n.attr("tid", -1)));
    t.id = static_cast<int>(s.tasks.size());
    t.deps = std::move(deps);
    if (members != nullptr) {
      g.group_ranks[t.id] = *members;
      t.group = static_cast<int>(members->size());
    }
    stands_for[i] = {t.id};
    s.tasks.push_back(std::move(t));
  }
  if (s.tasks.empty()) {
    return Status::invalid_argument("none of the " + std::to_string(nodes.size()) +
                                    " nodes has a duration, FLOPs or bytes to replay");
  }
  if (info.timed && t1 > t0) g.measured_step_s.push_back((t1 - t0) * 1e-6);
  set_measured_iteration(g);
  assign_lanes(s, streams);
  s.ranks = s.data_parallel = g.ranks;
  s.ranks_per_node = 1;
  return g;
}

}  // namespace memwall
