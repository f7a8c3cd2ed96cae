/* Copyright 2026 The OpenXLA Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
==============================================================================*/

#ifndef XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_PERMUTE_BACKEND_SELECTION_H_
#define XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_PERMUTE_BACKEND_SELECTION_H_

// Backend selection for one collective-permute: another backend than NCCL
// when its runtime can run the permute and it is modeled faster than NCCL by
// the table's margin. A backend's time is its slowest edge (all edges move at
// once).
//
// Peer and symmetric memory (XLA after NVSHMEM's removal,
// backends/gpu/runtime/collective_permute_thunk.cc) copy or put only when the
// permute's clique, every device of its group, is in one process, and fall
// back to NCCL otherwise: they are chosen only for a program in one process.
//
// What XLA's NVSHMEM runtime can run (backends/gpu/collectives/
// nvshmem_communicator.cc and backends/gpu/runtime/
// nvshmem_collective_permute_thunk.cc):
//  * element types F64, F32, F16, BF16, S32, S64, U32 and U64: the only ones
//    NvshmemCommunicator::P2P puts ("Invalid NVSHMEM send type" otherwise);
//  * xla_gpu_use_memcpy_local_p2p off: the thunk's Initialize refuses it;
//  * every edge inside one host: a receiver waits for its data in
//    nvshmemx_barrier_on_stream(NVSHMEM_TEAM_SHARED), the PEs that share a
//    memory domain, so a put from another host is not waited for. Whether
//    NVSHMEM_TEAM_SHARED spans a multi-node NVLink domain is not established,
//    so edges between hosts of one NVLink domain are refused too;
//  * the group is the whole program and logical device i is device i: the
//    thunk puts to a group id as the PE, which is a process (one GPU each);
//  * a source for every device of the program: only receiving devices enter
//    the barrier, and the thunk emitter, which cannot see hosts, falls back
//    to NCCL unless every device has one
//    (backends/gpu/runtime/nvshmem_permute_support.h);
//  * every GPU of each host the permute touches in the program: with one GPU
//    per process NVSHMEM_TEAM_SHARED is every PE of the host, and a GPU of the
//    host outside the program never enters the barrier (the topology is the
//    job: a host of only the program's GPUs is stated by its spec);
//  * no destination that XLA's buffer assignment shows to be an entry
//    parameter's buffer (donated) or returned by the program: the emitter
//    puts only into heap buffers no caller sees (CheckNvshmemDestination in
//    the pinned series' nvshmem_permute_support.cc) and runs such a permute
//    on NCCL;
//  * the message fits the symmetric heap twice: operand and result are both
//    placed in NVSHMEM memory;
//  * a pair that leaves its device: with none, the emitter copies locally,
//    and the NVSHMEM config would only place the buffers on the heap, whose
//    set-up and allocations every process of the job must join.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/backend_cost_table.h"
#include "xla/backends/gpu/transforms/collectives/cluster_topology.h"

namespace xla {
namespace gpu {
namespace backend_selection {

// What XLA's buffer assignment says of one destination of a permute, where
// it is beside the module: the entry parameter its allocation holds (-1:
// none) and whether the destination's own value is returned by the program.
struct DestinationBuffer {
  int64_t allocation = -1;
  int64_t parameter = -1;
  bool returned = false;
};

struct PermuteRequest {
  int64_t bytes = 0;  // From each source, all operands together.
  std::vector<std::pair<int, int>> device_edges;  // (source, target).
  int team_size = 0;  // Devices of the program; 0: unknown (the topology).
  int buffers = 1;    // Operands.
  std::vector<std::string> element_types;  // Of each buffer, as in HLO: "f32".
  bool memcpy_local_p2p = false;           // xla_gpu_use_memcpy_local_p2p.
  int groups = 1;  // Copies of the pairs: replicas with a channel id, else
                   // partitions.
  // Each destination's buffer facts; empty where no buffer assignment is
  // known (the rule then cannot refuse).
  std::vector<DestinationBuffer> destinations;
};

enum class RefusalKind {
  kUnsupportedType,      // `type` is not put by NVSHMEM.
  kMemcpyLocalP2p,       // The flag is on.
  kOutsideSharedMemory,  // `count` edges leave their host.
  kExceedsHeap,          // Twice `bytes` above `limit`.
  kEdgeOutsideTeam,      // Edge devices[0..1] names devices[2], not a member.
  kDeviceWithoutSource,  // `devices` of the team receive nothing.
  kTeamOutsideTopology,  // The program has more devices than are placed.
  kSeveralGroups,        // The pairs apply to `count` groups.
  kPlacedOffItsPe,       // Logical device devices[0] runs on devices[1].
  kLeavesHost,           // Peer or symmetric: `count` edges leave their host,
  kCrossesProcesses,     // or `count` devices of the program are outside
                         // the process of its first.
  kLocalCopy,            // Every pair is a device to itself.
  kHostGpusIdle,         // `devices` of host `count` (of `total` GPUs) are
                         // not in the program.
  kDestinationOffHeap,   // Destination in allocation `count` is parameter
                         // `total` (>= 0), or returned (`type` "returned").
};

struct Refusal {
  RefusalKind kind = RefusalKind::kExceedsHeap;
  int count = 0;  // Devices or edges concerned.
  int total = 0;  // Devices of the team, or edges.
  std::vector<int> devices;
  int64_t bytes = 0;
  int64_t limit = 0;
  std::string type;
};

// Whether NVSHMEM puts buffers of this HLO element type ("bf16").
bool NvshmemPutsType(absl::string_view type);

// Physical devices of a program of `team_size` logical devices.
std::vector<int> TeamDevices(const Topology& topology, int team_size);

// Why NVSHMEM over `device_edges` would hang with the members of `team`, or
// nullopt.
std::optional<Refusal> NvshmemHang(
    const std::vector<std::pair<int, int>>& device_edges,
    const std::vector<int>& team);

// Why a permute moving `bytes` from each source overflows NVSHMEM's symmetric
// heap, or nullopt: its operand and result are both placed in it.
std::optional<Refusal> NvshmemHeapOverflow(const CostTable& table,
                                           int64_t bytes);

// Why NVSHMEM's barrier over NVSHMEM_TEAM_SHARED would wait for GPUs outside
// the program, or nullopt: the first host of `device_edges` that has GPUs
// outside `team` (with one GPU per process, a host's team is all its GPUs).
std::optional<Refusal> NvshmemHostGpusIdle(
    const Topology& topology,
    const std::vector<std::pair<int, int>>& device_edges,
    const std::vector<int>& team);

// Why the emitter would not put into one of `destinations`, or nullopt: a
// donated parameter's buffer or one the program returns.
std::optional<Refusal> NvshmemDestinationOffHeap(
    const std::vector<DestinationBuffer>& destinations);

// Why XLA's NVSHMEM permute would put to other GPUs than the permute's, or
// nullopt: the pairs of one group of `groups` name PEs, and logical device i
// of the program's `team_size` must be device i, whose process is PE i.
std::optional<Refusal> NvshmemPeMismatch(const Topology& topology,
                                         int team_size, int groups);

// Why `backend` may not run the permute, or nullopt (NCCL runs any).
std::optional<Refusal> CheckBackend(const Topology& topology,
                                    const CostTable& table,
                                    const PermuteRequest& request,
                                    Backend backend);

// The slowest edge of the request on `backend`.
double PermuteTimeUs(const Topology& topology, const CostTable& table,
                     Backend backend, const PermuteRequest& request);

// Time of one edge of a permute of B = `buffers` buffers moving `bytes`:
//     permute(backend, class, B, bytes)
//       + bytes / bandwidth * sm_interference(backend)
// where permute() is the measured curve when the table has points for
// (backend, class), else latency + (B - 1) * per_buffer + bytes / bandwidth.
// A class without points (an estimate) is never priced below a measured
// faster class of the backend (NVLink inside a host, then an NVLink domain,
// then the network) at the same size and buffers: it takes the larger.
// A curve interpolates log(time) over log(bytes) between the points of one
// buffer count, continues at the row's bandwidth beyond them, blends two
// measured buffer counts linearly, and adds per_buffer per buffer outside
// them: XLA-level costs are not linear in B or bytes.
double EdgeTimeUs(const CostTable& table, Backend backend, LinkClass link_class,
                  int64_t bytes, int buffers = 1);

struct Decision {
  Backend backend = Backend::kNccl;
  double nccl_us = 0;
  // Of each alternative: its time when it may run the permute, else why not.
  std::array<std::optional<double>, kNumBackends> us;
  std::array<std::optional<Refusal>, kNumBackends> refusals;
};
// NCCL, or the fastest of `alternatives` (ties to the first) that may run
// the permute when it beats NCCL by the margin.
Decision Decide(const Topology& topology, const CostTable& table,
                const PermuteRequest& request,
                const std::vector<Backend>& alternatives = {Backend::kNvshmem});

}  // namespace backend_selection
}  // namespace gpu
}  // namespace xla

#endif  // XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_PERMUTE_BACKEND_SELECTION_H_
