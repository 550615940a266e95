// NCCL collectives on GPU buffers for ZeRO-3 on real GPUs: all-gather of parameter shards, reduce-scatter and
// all-reduce of fp32 gradients, one GPU per rank, enqueued on the caller's stream (the device's collective
// stream), so they overlap compute like DeepSpeed's. The communicator is bootstrapped through the host
// Communicator (MPI): rank 0's ncclUniqueId reaches every rank by an all-gather. Compiled only with NCCL.
//
// Unlike comm::Communicator's reductions, NCCL's sums are not in rank order: results across rank counts agree
// to rounding, not bitwise.
#pragma once

#include <cstddef>
#include <memory>

#include "base/status.h"
#include "engine/comm/comm.h"

namespace memwall::comm {

class NcclComm {
 public:
  // Collective over every rank of `world`, on the current CUDA device (one per rank).
  static Result<std::unique_ptr<NcclComm>> create(Communicator& world);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // full[size() * shard_bytes] = every rank's shard in rank order (device pointers).
  Status all_gather(const void* shard, void* full, std::size_t shard_bytes, void* stream);
  // shard[count] = sum over ranks of full[rank() * count, (rank() + 1) * count).
  Status reduce_scatter_sum(const float* full, float* shard, std::size_t count, void* stream);
  // data[count] = sum over ranks of data, in place.
  Status all_reduce_sum(float* data, std::size_t count, void* stream);

 private:
  NcclComm(void* comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  void* comm_ = nullptr;  // ncclComm_t
  int rank_ = 0, size_ = 1;
};

}  // namespace memwall::comm
