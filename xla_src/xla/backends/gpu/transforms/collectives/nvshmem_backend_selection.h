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

// Backend selection for collective-permutes. A backend's time for a permute
// is its slowest edge (all edges move at once); a permute runs whole on one
// backend. An alternative to NCCL is chosen when its rules allow the permute
// and it beats NCCL by the table's margin.
//
// NVSHMEM's rules: the message fits the symmetric heap, and every device of
// the team receives. XLA's NVSHMEM permute ends each buffer with a barrier
// over the world team (every device of the program) that only receiving
// devices call, so a device without a source leaves the others waiting. The
// team is PermuteRequest::team_size logical devices; 0 (unknown) means the
// whole topology, which can only refuse more than the real team.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "xla/backends/gpu/transforms/collectives/nvshmem_cost_table.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_topology.h"

namespace xla {
namespace gpu {
namespace nvshmem_selection {

struct PermuteRequest {
  int64_t bytes = 0;  // From each source, all operands together.
  std::vector<std::pair<int, int>> device_edges;  // (source, target).
  int team_size = 0;  // Devices of the program; 0: unknown.
  int buffers = 1;    // Operands.
};

enum class RefusalKind {
  kExceedsHeap,
  kEdgeOutsideTeam,      // An edge names a device outside the team.
  kDeviceWithoutSource,  // A team member receives nothing.
  kTeamOutsideTopology,  // The program has more devices than are placed.
};

struct Refusal {
  RefusalKind kind = RefusalKind::kExceedsHeap;
  int count = 0;  // Devices concerned.
  int total = 0;  // Devices of the team (or placed).
  // kDeviceWithoutSource: those devices; kEdgeOutsideTeam: source, target
  // and the device outside the team.
  std::vector<int> devices;
  int64_t bytes = 0;  // kExceedsHeap: the message and the heap.
  int64_t limit = 0;
};

// Physical devices of a team of `team_size` logical devices.
std::vector<int> TeamDevices(const Topology& topology, int team_size);

// Why NVSHMEM over `device_edges` would hang with `team`, or nullopt.
std::optional<Refusal> NvshmemHang(
    const std::vector<std::pair<int, int>>& device_edges,
    const std::vector<int>& team);

// Why NVSHMEM may not run the permute, or nullopt.
std::optional<Refusal> CheckNvshmem(const Topology& topology,
                                    const CostTable& table,
                                    const PermuteRequest& request);

// The time of one edge of the request's link class on some backend.
using EdgeTimeFn = std::function<double(LinkClass)>;

// A backend weighed against NCCL.
struct Candidate {
  EdgeTimeFn edge_us;
  bool allowed = false;  // Whether its rules allow the permute.
};

enum class Verdict {
  kNoEdges,        // Nothing to move: NCCL.
  kNoAlternative,  // No candidate allowed: NCCL.
  kZeroCost,       // NCCL modeled at 0: NCCL.
  kWithinMargin,   // The fastest candidate does not beat NCCL by the margin.
  kAlternative,    // The fastest candidate wins.
};

struct Choice {
  Verdict verdict = Verdict::kNoEdges;
  std::optional<size_t> chosen;   // Index of the chosen candidate; none: NCCL.
  std::optional<size_t> fastest;  // Fastest allowed candidate.
  double nccl_us = 0;
  std::vector<std::optional<double>> candidate_us;  // Allowed ones only.
};

// The slowest edge of the request.
double PermuteTimeUs(const Topology& topology, const PermuteRequest& request,
                     const EdgeTimeFn& edge_us);

Choice Choose(const Topology& topology, const PermuteRequest& request,
              const EdgeTimeFn& nccl_edge_us,
              const std::vector<Candidate>& candidates, double margin);

// The pass's choice between NCCL and NVSHMEM.
struct Decision {
  Backend backend = Backend::kNccl;
  Choice choice;  // Candidate 0 is NVSHMEM.
  std::optional<Refusal> nvshmem_refusal;
};
Decision Decide(const Topology& topology, const CostTable& table,
                const PermuteRequest& request);

}  // namespace nvshmem_selection
}  // namespace gpu
}  // namespace xla

#endif  // XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_BACKEND_SELECTION_H_
