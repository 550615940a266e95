// Reports the SimGrid library linked into this build (asked of the library, not its headers).
#include "sim/simgrid_backend.h"

#if MEMWALL_HAVE_SIMGRID
#include <simgrid/config.h>
#include <simgrid/version.h>
#include <xbt/base.h>
#endif

namespace memwall::sim {

bool simgrid_available() {
#if MEMWALL_HAVE_SIMGRID
  return true;
#else
  return false;
#endif
}

std::string simgrid_version() {
#if MEMWALL_HAVE_SIMGRID
  int major = 0, minor = 0, patch = 0;
  sg_version_get(&major, &minor, &patch);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
#else
  return "";
#endif
}

}  // namespace memwall::sim
