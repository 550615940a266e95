// What the real engine can use on this machine: which optional backends were compiled in, and whether
// each one works here (io_uring may be disabled by the kernel or seccomp, there may be no GPU).
// Probing opens and closes small kernel objects; call it from one thread.
#pragma once

#include <string>
#include <vector>

namespace memwall::engine {

struct Capability {
  std::string name;       // "io_uring", "libaio", "mpi", "cuda", "nccl"
  bool compiled = false;  // built into this binary
  bool usable = false;    // works on this machine right now
  std::string detail;     // version, device count, or why not usable
};

std::vector<Capability> probe_capabilities();

}  // namespace memwall::engine
