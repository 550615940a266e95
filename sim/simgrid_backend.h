// The SimGrid backend of `memwall simulate`: whether it is built in, and the linked SimGrid version.
#pragma once

#include <string>

namespace memwall::sim {

bool simgrid_available();
// "3.32.0" as reported by the linked library, or "" when not built in.
std::string simgrid_version();

}  // namespace memwall::sim
