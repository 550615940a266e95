// Importing MLCommons Chakra execution traces (`.et`, the protobuf stream ASTRA-sim reads) for replay: one
// file per rank, named PREFIX.RANK.et as chakra_converter writes them.
//
// The file is a stream of varint32-length-prefixed protobuf messages: GlobalMetadata, then one Node each
// (schema/protobuf/et_def.proto; decoded here from the wire format, no protobuf library). What is read:
// each node's id, name, type, data and control dependencies, start time and duration, and the attributes
// comm_type, comm_size, is_cpu_op, num_ops and tensor_size. Tasks:
//   COMP_NODE      GPU compute with its measured duration, or num_ops FLOPs at the hardware's achievable
//                  rate when the duration is 0 (ASTRA-sim's roofline mode); is_cpu_op: on the host CPU lane
//   COMM_COLL_NODE all-reduce / all-gather / reduce-scatter / broadcast re-simulated from comm_size bytes
//                  (taken as the collective's whole buffer, as for Kineto; chakra_converter's sum of the
//                  op's tensor arguments is one shard more where both whole and shard are passed); the other
//                  kinds (all-to-all, reduce, gather, scatter, barrier) keep their measured duration on the
//                  network
//   COMM_SEND/RECV kept with their measured duration on the network
//   MEM_LOAD/STORE host-to-device / device-to-host copies of tensor_size bytes (else measured)
// Everything else (metadata, storage, batch, checkpoint nodes; nodes with neither duration nor FLOPs nor
// bytes) is skipped and its dependencies pass through to the nodes that depended on it.
#pragma once

#include <string>
#include <string_view>

#include "replay/replay.h"

namespace memwall {

struct ChakraInfo {
  std::string version;  // GlobalMetadata.version (the schema, e.g. 0.0.4)
  std::size_t nodes = 0, compute = 0, cpu_ops = 0, collectives = 0, measured_communication = 0, copies = 0,
              skipped = 0, dangling_deps = 0;
  bool timed = false;  // nodes carry start times: the measured iteration is known
};

// `bytes`: the file's content. `rank`, `world_size`: from the file names (collective groups span the world).
// One iteration (a Chakra trace has no step markers): `first`, `last` as for the other importers.
Result<ReplayGraph> import_chakra_trace(std::string_view bytes, int rank, int world_size, int first, int last,
                                        ChakraInfo& info);

// True when `bytes` begins like a Chakra trace (a length-prefixed GlobalMetadata message).
bool looks_like_chakra(std::string_view bytes);

}  // namespace memwall
