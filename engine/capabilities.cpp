// Probes of io_uring, libaio, MPI, CUDA and NCCL availability.
#include "engine/capabilities.h"

#include <cerrno>
#include <cstring>

#if MEMWALL_HAVE_URING
#include <liburing.h>
#endif
#if MEMWALL_HAVE_AIO
#include <libaio.h>
#endif
#if MEMWALL_HAVE_MPI
#include <mpi.h>
#endif
#if MEMWALL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#if MEMWALL_HAVE_NCCL
#include <nccl.h>
#endif

namespace memwall::engine {

std::vector<Capability> probe_capabilities() {
  std::vector<Capability> caps;
  {
    Capability c{"io_uring", false, false, "not compiled in (MEMWALL_URING)"};
#if MEMWALL_HAVE_URING
    c.compiled = true;
    io_uring ring;
    const int rc = io_uring_queue_init(4, &ring, 0);
    if (rc == 0) {
      io_uring_queue_exit(&ring);
      c.usable = true;
      c.detail = "io_uring_queue_init ok";
    } else {
      c.detail = std::string("io_uring_queue_init: ") + std::strerror(-rc);
    }
#endif
    caps.push_back(c);
  }
  {
    Capability c{"libaio", false, false, "not compiled in (MEMWALL_AIO)"};
#if MEMWALL_HAVE_AIO
    c.compiled = true;
    io_context_t ctx = nullptr;
    const int rc = io_setup(4, &ctx);
    if (rc == 0) {
      io_destroy(ctx);
      c.usable = true;
      c.detail = "io_setup ok";
    } else {
      c.detail = std::string("io_setup: ") + std::strerror(-rc);
    }
#endif
    caps.push_back(c);
  }
  {
    Capability c{"mpi", false, false, "not compiled in (MEMWALL_MPI)"};
#if MEMWALL_HAVE_MPI
    c.compiled = true;
    c.usable = true;
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    c.detail = std::string(version, static_cast<size_t>(len));
    if (const auto nl = c.detail.find_first_of("\n,"); nl != std::string::npos) c.detail.resize(nl);
#endif
    caps.push_back(c);
  }
  {
    Capability c{"cuda", false, false, "not compiled in (MEMWALL_CUDA)"};
#if MEMWALL_HAVE_CUDA
    c.compiled = true;
    int devices = 0;
    const cudaError_t rc = cudaGetDeviceCount(&devices);
    // Without a driver this is cudaErrorInsufficientDriver, not cudaErrorNoDevice: any error means no GPU.
    if (rc == cudaSuccess && devices > 0) {
      c.usable = true;
      c.detail = std::to_string(devices) + " device(s)";
    } else {
      c.detail = std::string("no GPU (") + cudaGetErrorString(rc) + ")";
    }
#endif
    caps.push_back(c);
  }
  {
    Capability c{"nccl", false, false, "not compiled in (MEMWALL_NCCL)"};
#if MEMWALL_HAVE_NCCL
    c.compiled = true;
    int version = 0;
    if (ncclGetVersion(&version) == ncclSuccess) {
      c.detail = "NCCL " + std::to_string(version / 10000) + "." + std::to_string((version / 100) % 100) +
                 "." + std::to_string(version % 100) + " (needs a GPU)";
    }
    c.usable = caps.back().usable;
#endif
    caps.push_back(c);
  }
  return caps;
}

}  // namespace memwall::engine
