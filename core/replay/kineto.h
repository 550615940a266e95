// Importing PyTorch profiler (Kineto) Chrome traces for replay: one file per rank.
//
// What is read: ProfilerStep#N user annotations (iterations; without them the whole trace is one), GPU
// kernels / memcpys / memsets with their stream and correlation id, the CUDA runtime launch each correlates
// to (its timestamp is the task's release: the CPU side is kept as measured), NCCL kernels matched in order
// to `record_param_comms` CPU ops (collective name, message sizes, dtype, group size), distributedInfo (rank,
// world size). Tasks: compute kernels and memsets keep their measured durations; host<->device memcpys are
// re-simulated from their bytes; NCCL kernels become collectives re-simulated from their message bytes.
// Dependencies: the order within each CUDA stream, each task's release time, and cross-stream waits from
// cuda_sync "Stream Wait Event" events (cudaStreamWaitEvent: the waiting stream's next task after the wait
// depends on the waited stream's last task launched before the event record). Each stream is a lane of its
// resource (Task::lane): kernels of several compute streams run side by side, as they were measured.
#pragma once

#include <string>
#include <string_view>

#include "replay/replay.h"

namespace memwall {

struct KinetoInfo {
  int rank = 0, world_size = 1;
  std::size_t kernels = 0, memcpys = 0, collectives = 0, unmatched_collectives = 0;
  std::size_t point_to_point = 0;  // NCCL send/recv kernels (kept with their measured durations)
  std::size_t in_subgroups = 0;    // collectives of a process group smaller than the world, its ranks listed
  std::size_t stream_waits = 0;    // cross-stream dependencies from cuda_sync "Stream Wait Event"
  std::size_t unknown_events = 0;  // event kinds not read (counted, not fatal)
};

// `bytes`: the file's content (gzip already inflated). `first`, `last`: steps [first, last).
Result<ReplayGraph> import_kineto_trace(std::string_view bytes, int first, int last, KinetoInfo& info);

}  // namespace memwall
