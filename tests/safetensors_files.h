// Test helpers that write safetensors files by hand: one file from a header and its data, and a model saved
// in shards as transformers saves a large one (model.safetensors.index.json naming each tensor's
// model-0000k-of-0000N.safetensors), made from a single file.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace test_files {

// The little-endian header length, the header, the data.
inline void write_safetensors(const std::string& path, const nlohmann::ordered_json& header,
                              const std::string& data) {
  const std::string h = header.dump();
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i)
    file[static_cast<std::size_t>(i)] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << file + h + data;
}

// `file`'s tensors dealt round `shards` files in `dir` (the k-th tensor by name to shard k mod shards), with
// the index beside them.
inline void split_safetensors(const std::string& file, const std::string& dir, int shards) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i)
    header_bytes = (header_bytes << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_bytes));
  const std::string all = bytes.substr(8 + header_bytes);
  const auto n = static_cast<std::size_t>(shards);
  std::vector<nlohmann::ordered_json> headers(n);
  std::vector<std::string> data(n);
  const auto name_of = [&](std::size_t s) {
    const auto digits = [](std::size_t v) {
      std::string t = std::to_string(v);
      return std::string(5 - t.size(), '0') + t;
    };
    return "model-" + digits(s + 1) + "-of-" + digits(n) + ".safetensors";
  };
  nlohmann::json weight_map = nlohmann::json::object();
  std::size_t k = 0;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    const auto off = e["data_offsets"].get<std::vector<std::size_t>>();
    const std::size_t s = k++ % n;
    headers[s][name] = {{"dtype", e["dtype"]},
                        {"shape", e["shape"]},
                        {"data_offsets", {data[s].size(), data[s].size() + off[1] - off[0]}}};
    data[s] += all.substr(off[0], off[1] - off[0]);
    weight_map[name] = name_of(s);
  }
  for (std::size_t s = 0; s < n; ++s) write_safetensors(dir + "/" + name_of(s), headers[s], data[s]);
  const nlohmann::json index = {{"metadata", {{"total_size", all.size()}}}, {"weight_map", weight_map}};
  std::ofstream(dir + "/model.safetensors.index.json", std::ios::trunc) << index.dump();
}

}  // namespace test_files
