// NCCL communicator and collectives (see nccl.h).
#include "engine/comm/nccl.h"

#include <nccl.h>

#include <string>
#include <vector>

namespace memwall::comm {

namespace {

Status check(ncclResult_t rc, const std::string& call) {
  if (rc == ncclSuccess) return Status::ok();
  return Status::internal("nccl: " + call + ": " + ncclGetErrorString(rc) + " (" + ncclGetLastError(nullptr) +
                          ")");
}

ncclComm_t as_comm(void* c) {
  return static_cast<ncclComm_t>(c);
}
cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}

}  // namespace

Result<std::unique_ptr<NcclComm>> NcclComm::create(Communicator& world) {
  ncclUniqueId id{};
  if (world.rank() == 0) MW_RETURN_IF_ERROR(check(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  std::vector<ncclUniqueId> ids(static_cast<std::size_t>(world.size()));
  MW_RETURN_IF_ERROR(world.allgather(&id, ids.data(), sizeof id, "nccl bootstrap"));
  ncclComm_t comm = nullptr;
  MW_RETURN_IF_ERROR(check(
      ncclCommInitRank(&comm, world.size(), ids[0], world.rank()),
      "ncclCommInitRank(rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size()) + ")"));
  return std::unique_ptr<NcclComm>(new NcclComm(comm, world.rank(), world.size()));
}

NcclComm::~NcclComm() {
  if (comm_ != nullptr) ncclCommDestroy(as_comm(comm_));
}

Status NcclComm::all_gather(const void* shard, void* full, std::size_t shard_bytes, void* stream) {
  return check(ncclAllGather(shard, full, shard_bytes, ncclUint8, as_comm(comm_), as_stream(stream)),
               "ncclAllGather");
}

Status NcclComm::reduce_scatter_sum(const float* full, float* shard, std::size_t count, void* stream) {
  return check(ncclReduceScatter(full, shard, count, ncclFloat32, ncclSum, as_comm(comm_), as_stream(stream)),
               "ncclReduceScatter");
}

Status NcclComm::all_reduce_sum(float* data, std::size_t count, void* stream) {
  return check(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, as_comm(comm_), as_stream(stream)),
               "ncclAllReduce");
}

}  // namespace memwall::comm
