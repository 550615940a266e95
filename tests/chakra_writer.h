// Writes Chakra execution traces (.et: varint32-length-prefixed protobuf messages, et_def.proto's field
// numbers) for tests of the importer, byte by byte, independently of memwall's decoder.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

// Outside namespace memwall: the CLI tests call a function named memwall.
namespace chakra_testing {

class ChakraWriter {
 public:
  enum Type { kMetadata = 1, kMemLoad = 2, kMemStore = 3, kComp = 4, kSend = 5, kRecv = 6, kColl = 7 };
  enum Comm { kAllReduce = 0, kAllGather = 2, kAllToAll = 6, kReduceScatter = 7 };

  struct Node {
    std::uint64_t id = 0;
    std::string name;
    int type = kComp;
    std::vector<std::uint64_t> data_deps, ctrl_deps;
    std::uint64_t start_us = 0, dur_us = 0;
    std::vector<std::pair<std::string, std::int64_t>> int_attrs;    // int64_val
    std::vector<std::pair<std::string, bool>> bool_attrs;           // bool_val
    std::vector<std::pair<std::string, double>> double_attrs;       // double_val
    std::vector<std::pair<std::string, std::string>> string_attrs;  // string_val
    bool packed_deps = true;
  };

  explicit ChakraWriter(const std::string& version = "0.0.4") {
    std::string meta;
    field_bytes(meta, 1, version);
    message(meta);
  }
  void add(const Node& n) {
    std::string m;
    field_varint(m, 1, n.id);
    field_bytes(m, 2, n.name);
    field_varint(m, 3, static_cast<std::uint64_t>(n.type));
    ids(m, 4, n.ctrl_deps, n.packed_deps);
    ids(m, 5, n.data_deps, n.packed_deps);
    if (n.start_us) field_varint(m, 6, n.start_us);
    if (n.dur_us) field_varint(m, 7, n.dur_us);
    for (const auto& [name, v] : n.int_attrs) {
      std::string a;
      field_bytes(a, 1, name);
      field_varint(a, 9, static_cast<std::uint64_t>(v));
      field_bytes(m, 10, a);
    }
    for (const auto& [name, v] : n.bool_attrs) {
      std::string a;
      field_bytes(a, 1, name);
      field_varint(a, 27, v ? 1 : 0);
      field_bytes(m, 10, a);
    }
    for (const auto& [name, v] : n.string_attrs) {
      std::string a;
      field_bytes(a, 1, name);
      field_bytes(a, 29, v);
      field_bytes(m, 10, a);
    }
    for (const auto& [name, v] : n.double_attrs) {
      std::string a;
      field_bytes(a, 1, name);
      key(a, 3, 1);
      std::uint64_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      for (int i = 0; i < 8; ++i) a.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
      field_bytes(m, 10, a);
    }
    message(m);
  }
  const std::string& bytes() const { return out_; }

 private:
  static void varint(std::string& s, std::uint64_t v) {
    while (v >= 0x80) {
      s.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    s.push_back(static_cast<char>(v));
  }
  static void key(std::string& s, int field, int type) {
    varint(s, static_cast<std::uint64_t>(field << 3 | type));
  }
  static void field_varint(std::string& s, int field, std::uint64_t v) {
    key(s, field, 0);
    varint(s, v);
  }
  static void field_bytes(std::string& s, int field, const std::string& b) {
    key(s, field, 2);
    varint(s, b.size());
    s += b;
  }
  static void ids(std::string& s, int field, const std::vector<std::uint64_t>& v, bool packed) {
    if (v.empty()) return;
    if (!packed) {
      for (std::uint64_t x : v) field_varint(s, field, x);
      return;
    }
    std::string p;
    for (std::uint64_t x : v) varint(p, x);
    field_bytes(s, field, p);
  }
  void message(const std::string& m) {
    varint(out_, m.size());
    out_ += m;
  }
  std::string out_;
};

}  // namespace chakra_testing
