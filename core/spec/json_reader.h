// Internal to core/spec (include from .cpp files only): typed, validated access to one JSON object,
// with the key path and file name in every error and a warning for every key nobody asked for.
#pragma once

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "spec/run_config.h"
#include "spec/spec_loader.h"

namespace memwall::detail {

class JsonObjectReader {
 public:
  // `obj` must outlive the reader. `prefix` is the key path of `obj` ("" at top level).
  JsonObjectReader(const nlohmann::json& obj, std::string source, std::string prefix, Diagnostics& diag);

  bool has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  std::string path(const char* key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

  // Each getter leaves *out unchanged when the key is absent or null, and marks the key as known.
  Status get_int(const char* key, int& out, long long min, long long max);
  Status get_count(const char* key, double& out, double min);  // integral number in [min, 2^53] (1e9 ok)
  Status get_auto_count(const char* key, AutoCount& out, double min);
  Status get_number(const char* key, double& out, double min, double max);
  Status get_bool(const char* key, bool& out);
  Status get_auto_bool(const char* key, bool& out, bool& is_auto);
  Status get_string(const char* key, std::string& out);
  Status get_choice(const char* key, std::string& out, std::initializer_list<const char*> allowed);
  Status get_string_list(const char* key, std::vector<std::string>& out);
  // A list of numbers, each in [min, max] (the first outside is named by its index).
  Status get_number_list(const char* key, std::vector<double>& out, double min, double max);
  // A nested object; absent -> nullptr (and ok). Present but not an object -> error.
  Result<const nlohmann::json*> get_object(const char* key);

  // Keys that are accepted and deliberately not used.
  void ignore(std::initializer_list<const char*> keys);
  // Warn for every key that no getter or ignore() touched.
  void finish();

  Status error(const char* key, const std::string& what) const;

 private:
  const nlohmann::json& obj_;
  std::string source_;
  std::string prefix_;
  Diagnostics& diag_;
  std::set<std::string> known_;
};

// "5", "\"auto\"", "1e+09": a short rendering of a JSON value for messages.
std::string short_dump(const nlohmann::json& v);

}  // namespace memwall::detail
