// An empty directory of the engine tests' own under the system's temp directory: memwall-NAME-PID.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace memwall::testing {

inline std::string fresh_temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("memwall-" + name + "-" + std::to_string(static_cast<long>(::getpid())));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace memwall::testing
