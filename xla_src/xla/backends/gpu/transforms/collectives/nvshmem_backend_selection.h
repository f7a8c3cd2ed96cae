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

#ifndef XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_BACKEND_SELECTION_H_
#define XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_BACKEND_SELECTION_H_

// Backend selection for collective-permutes: which of the backends that the
// target XLA offers runs each permute. C++17 and absl, no XLA dependency.
//
//   * Every source->target edge gets a link class from the topology
//     (nvshmem_topology.h); the cost table prices it (nvshmem_cost_table.h).
//   * A backend's time for the permute is its slowest edge (all edges move
//     at once); a permute runs whole on one backend, never split.
//   * Each backend other than NCCL runs only where its safety rules hold
//     (CheckSafety); NCCL runs everywhere.
//   * The fastest safe backend is chosen when it beats NCCL by at least the
//     table's margin (a fraction); otherwise NCCL.
//
// Safety rules, one per backend:
//   nvshmem  (a) the message fits the symmetric heap (nvshmem_max_bytes);
//            (b) every device of the team has a source (below). Edges may
//            cross the network: XLA initializes NVSHMEM over every process,
//            and NVSHMEM carries puts between hosts over InfiniBand.
//   peer     every edge inside one host and one process (the topology's
//            gpus_per_process). XLA's peer-memory permute copies with the
//            copy engines into the target's buffer, which needs CUDA peer
//            access among the calling process's devices; otherwise XLA falls
//            back to NCCL, so there is nothing to gain. Safe for shifts:
//            every rank of the clique joins the same rendezvous.
//   symmetric  as peer, and the table says the runtime's NCCL supports
//            signals (symmetric_signals 1): the one-sided put + signal fails
//            at run time where NCCL cannot query signal support.
//
// Deadlock-free rule (nvshmem). XLA's NVSHMEM collective-permute does, for
// each buffer, a put to the target and then a barrier on a communicator of
// the world team, i.e. every device of the program (replicas x partitions).
// Only devices that receive (have a source) call that barrier. If any device
// of the team has no source, the others wait in the barrier forever. So
// NVSHMEM is never planned for a permute in which a team member is not the
// target of some pair: non-cyclic shifts and permutes over a subset of
// devices. For the same reason there is no split plan (NVSHMEM for some
// edges, NCCL for the rest): its NVSHMEM half would leave the targets of the
// other edges without a source. The team is PermuteRequest::team_size; when
// it is unknown (0), every device of the topology, which can only refuse
// more, never less, than the real team.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "xla/backends/gpu/transforms/collectives/nvshmem_cost_table.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_topology.h"

namespace xla {
namespace gpu {
namespace nvshmem_selection {

// One collective-permute, as the selection sees it.
struct PermuteRequest {
  int64_t bytes = 0;  // Bytes each source sends (all operands together).
  std::vector<std::pair<int, int>> device_edges;  // (source, target) devices.
  // Devices of the program (num_replicas x num_partitions), which is the
  // NVSHMEM team at the pinned XLA: logical devices 0..team_size-1, placed
  // through the topology's map. 0: unknown, the team is the whole topology.
  int team_size = 0;
  // Buffers (operands) of the one permute; `bytes` is all of them together.
  int buffers = 1;
};

// Why a backend may not run a permute.
enum class RefusalKind {
  kNotOffered,           // Not in the table's backend set.
  kExceedsHeap,          // nvshmem: above nvshmem_max_bytes.
  kEdgeOutsideTeam,      // nvshmem: an edge names a device outside the team.
  kDeviceWithoutSource,  // nvshmem: a team member receives nothing (hang).
  kTeamOutsideTopology,  // nvshmem: the program has devices the topology
                         // does not place.
  kNoSignals,            // symmetric: NCCL signals not known to work.
  kLeavesHost,           // peer, symmetric: edges between hosts.
  kCrossesProcesses,     // peer, symmetric: edges between processes.
};

// A refusal and the facts its text names.
struct Refusal {
  Backend backend = Backend::kNccl;
  RefusalKind kind = RefusalKind::kNotOffered;
  int count = 0;  // Edges or team devices concerned.
  int total = 0;  // Of how many edges, or devices of the team.
  // kDeviceWithoutSource: the devices without a source (all of them);
  // kEdgeOutsideTeam: source, target and the device outside the team.
  std::vector<int> devices;
  int64_t bytes = 0;             // kExceedsHeap: the message ...
  int64_t limit = 0;             // ... and the heap.
  int gpus_per_process = 0;      // kCrossesProcesses.
  std::vector<Backend> offered;  // kNotOffered: the table's set.
};

// The one-line text of a refusal, "<backend> refused: ...".
std::string RefusalText(const Refusal& refusal);

// The refusal of `backend` for this permute, or nullopt when its safety rules
// hold (see the header comment). NCCL is never refused.
std::optional<Refusal> CheckSafety(const Topology& topology,
                                   const CostTable& table,
                                   const PermuteRequest& request,
                                   Backend backend);

// Physical devices of the NVSHMEM team of a request with `team_size` (see
// PermuteRequest::team_size), in logical order; at most as many as the
// topology places (CheckSafety refuses a larger team).
std::vector<int> TeamDevices(const Topology& topology, int team_size);

// Why an NVSHMEM permute over `device_edges` would hang XLA's runtime with
// this team (a team member without a source, or an edge that names a device
// outside the team); nullopt when it is safe.
std::optional<Refusal> NvshmemHang(
    const std::vector<std::pair<int, int>>& device_edges,
    const std::vector<int>& team);

// How the decision came about, apart from its text.
enum class Verdict {
  kNoEdges,        // Nothing to move: NCCL.
  kNoAlternative,  // Every other backend refused or not offered: NCCL.
  kZeroCost,       // NCCL modeled at 0: nothing to gain.
  kWithinMargin,   // The fastest alternative does not beat NCCL by the margin.
  kAlternative,    // The fastest alternative wins.
};

struct Decision {
  Backend backend = Backend::kNccl;  // The chosen backend.
  Verdict verdict = Verdict::kNoEdges;
  // The fastest safe backend other than NCCL, when there is one.
  std::optional<Backend> fastest_alternative;
  // Modeled time of each backend, indexed by Backend; none when it is not
  // in the set or refused (refused[b] says why). NCCL's is always set.
  std::array<std::optional<double>, kNumBackends> backend_us;
  std::array<std::optional<Refusal>, kNumBackends> refused;
  double chosen_us = 0;  // backend_us of the chosen backend.
  // Edge counts per link class, indexed by LinkClass.
  std::array<int, kNumLinkClasses> edges_by_class = {0, 0, 0, 0};
  std::string reason;  // One line, DescribeDecision's.
};

Decision Decide(const Topology& topology, const CostTable& table,
                const PermuteRequest& request);

// The decision's reason as one line: the chosen backend, the modeled times,
// and the refusals of the offered backends.
std::string DescribeDecision(const Topology& topology, const CostTable& table,
                             const PermuteRequest& request,
                             const Decision& decision);

}  // namespace nvshmem_selection
}  // namespace gpu
}  // namespace xla

#endif  // XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_BACKEND_SELECTION_H_
