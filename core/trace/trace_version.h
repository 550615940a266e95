// The memwall trace format's identity and version rules (docs/trace-format.md).
//
// A trace names its format and a "major.minor" version. Readers accept any minor of their own major and
// reject other majors with a message that says which version is needed. The event schema, writer and
// reader arrive with the scheduling core; this is the part every reader and writer shares.
#pragma once

#include <string>

#include "base/status.h"

namespace memwall::trace {

inline constexpr const char* kFormatName = "memwall-trace";
inline constexpr int kFormatMajor = 1;
inline constexpr int kFormatMinor = 1;  // 1.1: spans carry deps, collective and group

// "1.0"
std::string format_version();
// ok for "1.x"; kInvalidArgument for another major, naming the version this build reads.
Status check_version(const std::string& format, const std::string& version);

}  // namespace memwall::trace
