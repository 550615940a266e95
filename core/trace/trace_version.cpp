// Trace format identity and the major-version compatibility rule.
#include "trace/trace_version.h"

#include <cstdlib>

namespace memwall::trace {

std::string format_version() {
  return std::to_string(kFormatMajor) + "." + std::to_string(kFormatMinor);
}

Status check_version(const std::string& format, const std::string& version) {
  if (format != kFormatName) {
    return Status::invalid_argument("not a memwall trace (format \"" + format + "\", expected \"" +
                                    kFormatName + "\")");
  }
  const auto dot = version.find('.');
  const std::string major_text = version.substr(0, dot);
  char* end = nullptr;
  const long major = std::strtol(major_text.c_str(), &end, 10);
  if (major_text.empty() || *end != '\0') {
    return Status::invalid_argument("trace version \"" + version + "\" is not of the form MAJOR.MINOR");
  }
  if (major != kFormatMajor) {
    return Status::invalid_argument("trace version " + version + " needs a memwall that reads format " +
                                    std::to_string(major) + ".x; this one reads " + format_version());
  }
  return Status::ok();
}

}  // namespace memwall::trace
