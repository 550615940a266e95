// Collectives for ZeRO-3 across data-parallel ranks: all-gather of parameter shards and reduce-scatter of
// gradients, on equal-sized per-rank shards (the planner pads to that).
//
// Every collective has a deadline. A peer that died or a rank that left the schedule shows up as a Status
// naming this rank, the collective, its tag (e.g. "step 12 h.3 allgather") and how long it waited, not as a
// silent hang. Before each collective the ranks exchange what they are about to run (operation, size, tag):
// ranks that diverged get an error naming what each one runs, instead of a hang or mixed-up data.
// Reductions are deterministic: each rank receives every peer's piece of its shard and sums
// them in rank order, so results do not depend on the MPI library's reduction algorithm, and one rank gives
// bitwise the same sum as the sequential reference.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "base/status.h"

namespace memwall::comm {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // full[size() * shard_bytes] = concatenation of every rank's shard, in rank order.
  virtual Status allgather(const void* shard, void* full, std::size_t shard_bytes,
                           const std::string& tag) = 0;
  // shard[count] = sum over ranks r (in rank order) of full_r[rank() * count, (rank() + 1) * count).
  virtual Status reduce_scatter_sum(const float* full, float* shard, std::size_t count,
                                    const std::string& tag) = 0;
  virtual Status barrier(const std::string& tag) = 0;
};

// Every rank's `local` outcome, agreed by all of them (a collective): ok on every rank when it is ok on all,
// else every rank returns the failure of the lowest failing rank, its code and message, prefixed "rank K of
// N: " where K is another rank. So a step that one rank cannot do (a corrupt checkpoint file, a full disk)
// stops every rank at once with the reason, instead of leaving the others waiting for a collective.
Status agree(Communicator& comm, const Status& local, const std::string& tag);

// One rank, no MPI: collectives are copies.
std::unique_ptr<Communicator> make_local_comm();

// The MPI world (MPI_Init on first use, MPI_Finalize at exit), or unavailable when memwall was built without
// MPI. `timeout` bounds every collective.
Result<std::unique_ptr<Communicator>> make_mpi_comm(std::chrono::milliseconds timeout);

// True when this process was started by mpirun/mpiexec (OpenMPI, MPICH or Slurm's PMI variables).
bool launched_by_mpi();

}  // namespace memwall::comm
