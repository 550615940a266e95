// Typed, validated reads of JSON objects with file/key context in every error.
#include "spec/json_reader.h"

#include <cmath>

#include "base/suggest.h"
#include "base/units.h"

namespace memwall::detail {

std::string short_dump(const nlohmann::json& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

JsonObjectReader::JsonObjectReader(const nlohmann::json& obj, std::string source, std::string prefix,
                                   Diagnostics& diag)
    : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)), diag_(diag) {}

Status JsonObjectReader::error(const char* key, const std::string& what) const {
  return Status::invalid_argument(source_ + ": key '" + path(key) + "': " + what);
}

Status JsonObjectReader::get_int(const char* key, int& out, long long min, long long max) {
  known_.insert(key);
  if (!has(key)) return Status::ok();
  const auto& v = obj_.at(key);
  if (!v.is_number()) {
    return error(key, short_dump(v) + " is not a number; allowed: an integer " + std::to_string(min) + ".." +
                          std::to_string(max));
  }
  const double d = v.get<double>();
  if (std::floor(d) != d || d < static_cast<double>(min) || d > static_cast<double>(max)) {
    return error(key, short_dump(v) + " is not allowed; allowed: an integer " + std::to_string(min) + ".." +
                          std::to_string(max));
  }
  out = static_cast<int>(d);
  return Status::ok();
}

Status JsonObjectReader::get_count(const char* key, double& out, double min) {
  known_.insert(key);
  if (!has(key)) return Status::ok();
  const auto& v = obj_.at(key);
  if (!v.is_number()) {
    return error(key, short_dump(v) + " is not a number; allowed: an integer >= " + strprintf("%.0f", min));
  }
  const double d = v.get<double>();
  // Up to 2^53, where doubles still hold every integer (and sizes convert to 64-bit integers exactly).
  constexpr double kMax = 9007199254740992.0;
  if (!std::isfinite(d) || std::floor(d) != d || d < min || d > kMax) {
    return error(key, short_dump(v) + " is not allowed; allowed: an integer >= " + strprintf("%.0f", min) +
                          " (at most 2^53)");
  }
  out = d;
  return Status::ok();
}

Status JsonObjectReader::get_auto_count(const char* key, AutoCount& out, double min) {
  known_.insert(key);
  if (!has(key)) return Status::ok();
  const auto& v = obj_.at(key);
  if (v.is_string() && v.get<std::string>() == "auto") {
    out.is_auto = true;
    return Status::ok();
  }
  if (!v.is_number()) {
    return error(
        key, short_dump(v) + " is not allowed; allowed: \"auto\" or an integer >= " + strprintf("%.0f", min));
  }
  double d = 0;
  MW_RETURN_IF_ERROR(get_count(key, d, min));
  out.is_auto = false;
  out.value = d;
  return Status::ok();
}

Status JsonObjectReader::get_number(const char* key, double& out, double min, double max) {
  known_.insert(key);
  if (!has(key)) return Status::ok();
  const auto& v = obj_.at(key);
  if (!v.is_number()) {
    return error(key, short_dump(v) + " is not a number; allowed: " + strprintf("%g", min) + " to " +
                          strprintf("%g", max));
  }
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < min || d > max) {
    return error(key, short_dump(v) + " is out of range; allowed: " + strprintf("%g", min) + " to " +
                          strprintf("%g", max));
  }
  out = d;
  return Status::ok();
}

Status JsonObjectReader::get_bool(const char* key, bool& out) {
  known_.insert(key);
  if (!has(key)) return Status::ok();
  const auto& v = obj_.at(key);
  if (!v.is_boolean()) return error(key, short_dump(v) + " is not allowed; allowed: true or false");
  out = v.get<bool>();
  return Status::ok();
}

Status JsonObjectReader::get_auto_bool(const char* key, bool& out, bool& is_auto) {
  known_.insert(key);
  if (!has(key)) return Status::ok();
  const auto& v = obj_.at(key);
  if (v.is_string() && v.get<std::string>() == "auto") {
    is_auto = true;
    return Status::ok();
  }
  if (!v.is_boolean()) return error(key, short_dump(v) + " is not allowed; allowed: true, false or \"auto\"");
  out = v.get<bool>();
  is_auto = false;
  return Status::ok();
}

Status JsonObjectReader::get_string(const char* key, std::string& out) {
  known_.insert(key);
  if (!has(key)) return Status::ok();
  const auto& v = obj_.at(key);
  if (!v.is_string()) return error(key, short_dump(v) + " is not a string");
  out = v.get<std::string>();
  return Status::ok();
}

Status JsonObjectReader::get_choice(const char* key, std::string& out,
                                    std::initializer_list<const char*> allowed) {
  std::string value = out;
  MW_RETURN_IF_ERROR(get_string(key, value));
  if (!has(key)) return Status::ok();
  std::string list;
  std::vector<std::string> names;
  for (const char* a : allowed) {
    if (value == a) {
      out = value;
      return Status::ok();
    }
    list += (list.empty() ? "" : ", ") + std::string(a);
    names.emplace_back(a);
  }
  return error(key, "\"" + value + "\" is not allowed" + did_you_mean(value, names) + "; allowed: " + list);
}

Status JsonObjectReader::get_string_list(const char* key, std::vector<std::string>& out) {
  known_.insert(key);
  if (!has(key)) return Status::ok();
  const auto& v = obj_.at(key);
  if (v.is_string()) {
    out = {v.get<std::string>()};
    return Status::ok();
  }
  if (!v.is_array()) return error(key, "is not a list of strings");
  out.clear();
  for (const auto& e : v) {
    if (!e.is_string()) return error(key, "is not a list of strings");
    out.push_back(e.get<std::string>());
  }
  return Status::ok();
}

Status JsonObjectReader::get_number_list(const char* key, std::vector<double>& out, double min, double max) {
  known_.insert(key);
  if (!has(key)) return Status::ok();
  const auto& v = obj_.at(key);
  if (!v.is_array()) return error(key, short_dump(v) + " is not a list of numbers");
  std::vector<double> got;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number()) {
      return error(key, "element " + std::to_string(i) + " (" + short_dump(v[i]) + ") is not a number");
    }
    const double x = v[i].get<double>();
    if (!std::isfinite(x) || x < min || x > max) {
      return error(key, "element " + std::to_string(i) + " (" + short_dump(v[i]) +
                            ") is out of range; allowed: " + strprintf("%g", min) + " to " +
                            strprintf("%g", max));
    }
    got.push_back(x);
  }
  out = std::move(got);
  return Status::ok();
}

Result<const nlohmann::json*> JsonObjectReader::get_object(const char* key) {
  known_.insert(key);
  if (!has(key)) return static_cast<const nlohmann::json*>(nullptr);
  const auto& v = obj_.at(key);
  if (!v.is_object()) return error(key, short_dump(v) + " is not an object");
  return &v;
}

void JsonObjectReader::ignore(std::initializer_list<const char*> keys) {
  for (const char* k : keys) known_.insert(k);
}

void JsonObjectReader::finish() {
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    const std::string& k = it.key();
    if (known_.count(k) || k.rfind("_comment", 0) == 0) continue;
    const std::string near = closest_name(k, std::vector<std::string>(known_.begin(), known_.end()));
    const std::string at = prefix_.empty() ? "" : prefix_ + ".";
    diag_.warnings.push_back(source_ + ": unknown key '" + at + k + "' ignored" +
                             (near.empty() ? "" : " (did you mean '" + at + near + "'?)"));
  }
}

}  // namespace memwall::detail
