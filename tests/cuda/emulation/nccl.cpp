// The NCCL functions memwall calls, emulated (see emulation.h) for ranks that are MPI processes, each with
// its emulated GPU: a collective is queued on its stream like a kernel and, when the stream runs it, is the
// matching MPI collective on the device buffers (host memory here) over a duplicate of MPI_COMM_WORLD. One
// rank needs no MPI. Streams run lazily, so ranks reach the collectives at different times; MPI matches them
// in stream order, which is the order every rank queues them in, as with NCCL.
#include <mpi.h>
#include <nccl.h>

#include <cstring>
#include <functional>
#include <vector>

#include "cuda/emulation/emulation.h"

struct ncclComm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
};

namespace {

namespace emu = memwall::emulated_gpu;

std::size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}

ncclResult_t queued(void* stream, std::function<void()> work, const std::vector<emu::Access>& access,
                    const char* what) {
  return emu::enqueue(stream, std::move(work), access, what) == 0 ? ncclSuccess : ncclInvalidArgument;
}

}  // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
  return result == ncclSuccess ? "no error" : "emulated NCCL error";
}

const char* ncclGetLastError(ncclComm_t) {
  return "emulated NCCL";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof *id);
  std::strncpy(id->internal, "memwall emulated NCCL", sizeof id->internal - 1);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId, int rank) {
  auto* c = new ncclComm();
  c->rank = rank;
  c->size = nranks;
  if (nranks > 1) {
    int up = 0, world = 0;
    MPI_Initialized(&up);
    if (up != 0) MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world != nranks) {
      delete c;
      return ncclInvalidUsage;  // the emulation's ranks are the MPI processes
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);  // collective: every rank creates its communicator together
  }
  *comm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;  // the duplicate communicator stays until MPI_Finalize (freeing it is collective)
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  const std::size_t bytes = sendcount * type_bytes(datatype);
  if (emu::check_device(sendbuff, bytes, "ncclAllGather send") != 0 ||
      emu::check_device(recvbuff, bytes * static_cast<std::size_t>(comm->size), "ncclAllGather recv") != 0)
    return ncclInvalidArgument;
  return queued(
      stream,
      [=] {
        char* recv = static_cast<char*>(recvbuff);
        const bool in_place = sendbuff == recv + bytes * static_cast<std::size_t>(comm->rank);
        if (comm->size == 1) {
          if (!in_place) std::memmove(recv, sendbuff, bytes);
          return;
        }
        MPI_Allgather(in_place ? MPI_IN_PLACE : sendbuff, static_cast<int>(bytes), MPI_BYTE, recv,
                      static_cast<int>(bytes), MPI_BYTE, comm->comm);
      },
      {{sendbuff, bytes, false}, {recvbuff, bytes * static_cast<std::size_t>(comm->size), true}},
      "ncclAllGather");
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  if (datatype != ncclFloat32 || op != ncclSum) return ncclInvalidArgument;  // what memwall uses
  const std::size_t bytes = recvcount * 4;
  if (emu::check_device(sendbuff, bytes * static_cast<std::size_t>(comm->size), "ncclReduceScatter send") !=
          0 ||
      emu::check_device(recvbuff, bytes, "ncclReduceScatter recv") != 0)
    return ncclInvalidArgument;
  return queued(
      stream,
      [=] {
        if (comm->size == 1) {
          std::memmove(recvbuff, sendbuff, bytes);
          return;
        }
        MPI_Reduce_scatter_block(sendbuff, recvbuff, static_cast<int>(recvcount), MPI_FLOAT, MPI_SUM,
                                 comm->comm);
      },
      {{sendbuff, bytes * static_cast<std::size_t>(comm->size), false}, {recvbuff, bytes, true}},
      "ncclReduceScatter");
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (datatype != ncclFloat32 || op != ncclSum) return ncclInvalidArgument;
  const std::size_t bytes = count * 4;
  if (emu::check_device(sendbuff, bytes, "ncclAllReduce send") != 0 ||
      emu::check_device(recvbuff, bytes, "ncclAllReduce recv") != 0)
    return ncclInvalidArgument;
  return queued(
      stream,
      [=] {
        if (comm->size == 1) {
          if (sendbuff != recvbuff) std::memmove(recvbuff, sendbuff, bytes);
          return;
        }
        MPI_Allreduce(sendbuff == recvbuff ? MPI_IN_PLACE : sendbuff, recvbuff, static_cast<int>(count),
                      MPI_FLOAT, MPI_SUM, comm->comm);
      },
      {{sendbuff, bytes, false}, {recvbuff, bytes, true}}, "ncclAllReduce");
}

}  // extern "C"
