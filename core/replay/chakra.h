// Importing MLCommons Chakra execution traces (`.et`, the protobuf stream ASTRA-sim reads) for replay: one
// file per rank, named PREFIX.RANK.et as chakra_converter writes them.
//
// The file is a stream of varint32-length-prefixed protobuf messages: GlobalMetadata, then one Node each
// (schema/protobuf/et_def.proto; decoded here from the wire format, no protobuf library). What is read:
// each node's id, name, type, data and control dependencies, start time and duration, and the attributes
// comm_type, comm_size, pg_name, is_cpu_op, num_ops, tensor_size, and stream or tid (chakra_converter's
// copy of a GPU op's CUDA stream, or a CPU op's thread): each stream or thread is a lane of its resource
// (Task::lane), so ops of different streams run side by side as measured. Tasks:
//   COMP_NODE      GPU compute with its measured duration, or num_ops FLOPs at the hardware's achievable
//                  rate when the duration is 0 (ASTRA-sim's roofline mode); is_cpu_op: on the host CPU lane
//   COMM_COLL_NODE all-reduce / all-gather / reduce-scatter / broadcast re-simulated from comm_size bytes
//                  over the collective's process group (pg_name; the world when unknown)
//                  (taken as the collective's whole buffer, as for Kineto; chakra_converter's sum of the
//                  op's tensor arguments is one shard more where both whole and shard are passed); the other
//                  kinds (all-to-all, reduce, gather, scatter, barrier) keep their measured duration on the
//                  network
//   COMM_SEND/RECV kept with their measured duration on the network
//   MEM_LOAD/STORE host-to-device / device-to-host copies of tensor_size bytes (else measured)
// Everything else (metadata, storage, batch, checkpoint nodes; nodes with neither duration nor FLOPs nor
// bytes) is skipped and its dependencies pass through to the nodes that depended on it.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "replay/replay.h"

namespace memwall {

struct ChakraInfo {
  std::string version;  // GlobalMetadata.version (the schema, e.g. 0.0.4)
  std::size_t nodes = 0, compute = 0, cpu_ops = 0, collectives = 0, measured_communication = 0, copies = 0,
              skipped = 0, dangling_deps = 0;
  std::size_t in_subgroups = 0;             // collectives of a process group smaller than the world
  std::set<std::string> unresolved_groups;  // pg_names not in `groups` (their collectives span the world)
  bool timed = false;                       // nodes carry start times: the measured iteration is known
};

// A process group's name (a collective's pg_name attribute, as chakra_converter writes it from PyTorch's
// record_param_comms) -> its ranks, sorted.
using ChakraGroups = std::map<std::string, std::vector<int>>;

// The pg_names this trace's collectives name. A Chakra file does not say which ranks a group has, but
// PyTorch names every group once for all ranks, so the ranks whose traces name a group are its members:
// given every rank's trace, that is the group (memwall replay does this).
std::set<std::string> chakra_process_groups(std::string_view bytes);

// `bytes`: the file's content. `rank`, `world_size`: from the file names. A collective whose pg_name is in
// `groups` (and has this rank) spans that group's ranks; any other spans the world. One iteration (a Chakra
// trace has no step markers): `first`, `last` as for the other importers.
Result<ReplayGraph> import_chakra_trace(std::string_view bytes, int rank, int world_size, int first, int last,
                                        ChakraInfo& info, const ChakraGroups& groups = {});

// True when `bytes` begins like a Chakra trace (a length-prefixed GlobalMetadata message).
bool looks_like_chakra(std::string_view bytes);

}  // namespace memwall
