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

#include "xla/backends/gpu/transforms/collectives/nvshmem_backend_selection.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_cost_table.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_topology.h"

namespace xla {
namespace gpu {
namespace nvshmem_selection {
namespace {

// Logical devices the topology places: its map's, or one per device.
int PlacedDevices(const Topology& topology) {
  return topology.partition_to_device().empty()
             ? topology.num_devices()
             : static_cast<int>(topology.partition_to_device().size());
}

Refusal MakeRefusal(RefusalKind kind, int count, int total) {
  Refusal refusal;
  refusal.kind = kind;
  refusal.count = count;
  refusal.total = total;
  return refusal;
}

}  // namespace

std::vector<int> TeamDevices(const Topology& topology, int team_size) {
  std::vector<int> team;
  if (team_size <= 0) {
    // Unknown: the whole topology is the largest team there can be.
    for (int d = 0; d < topology.num_devices(); ++d) team.push_back(d);
    return team;
  }
  const int size = std::min(team_size, PlacedDevices(topology));
  for (int i = 0; i < size; ++i) {
    if (std::optional<int> device = topology.MapLogicalDevice(i)) {
      team.push_back(*device);
    }
  }
  return team;
}

std::optional<Refusal> NvshmemHang(
    const std::vector<std::pair<int, int>>& device_edges,
    const std::vector<int>& team) {
  std::vector<int> members = team;
  absl::c_sort(members);
  std::vector<int> targets;
  for (const auto& [src, dst] : device_edges) {
    for (int device : {src, dst}) {
      if (!absl::c_binary_search(members, device)) {
        Refusal refusal = MakeRefusal(RefusalKind::kEdgeOutsideTeam, 1,
                                      static_cast<int>(team.size()));
        refusal.devices = {src, dst, device};
        return refusal;
      }
    }
    targets.push_back(dst);
  }
  absl::c_sort(targets);
  Refusal refusal = MakeRefusal(RefusalKind::kDeviceWithoutSource, 0,
                                static_cast<int>(team.size()));
  for (int device : team) {
    if (!absl::c_binary_search(targets, device)) {
      refusal.devices.push_back(device);
    }
  }
  if (refusal.devices.empty()) return std::nullopt;
  refusal.count = static_cast<int>(refusal.devices.size());
  return refusal;
}

std::optional<Refusal> CheckNvshmem(const Topology& topology,
                                    const CostTable& table,
                                    const PermuteRequest& request) {
  if (request.bytes > table.nvshmem_max_bytes) {
    Refusal refusal = MakeRefusal(RefusalKind::kExceedsHeap, 0, 0);
    refusal.bytes = request.bytes;
    refusal.limit = table.nvshmem_max_bytes;
    return refusal;
  }
  if (request.team_size > PlacedDevices(topology)) {
    return MakeRefusal(RefusalKind::kTeamOutsideTopology, request.team_size,
                       PlacedDevices(topology));
  }
  return NvshmemHang(request.device_edges,
                     TeamDevices(topology, request.team_size));
}

double PermuteTimeUs(const Topology& topology, const PermuteRequest& request,
                     const EdgeTimeFn& edge_us) {
  double worst = 0;
  for (const auto& [src, dst] : request.device_edges) {
    worst = std::max(worst, edge_us(topology.Classify(src, dst)));
  }
  return worst;
}

Choice Choose(const Topology& topology, const PermuteRequest& request,
              const EdgeTimeFn& nccl_edge_us,
              const std::vector<Candidate>& candidates, double margin) {
  Choice choice;
  choice.candidate_us.resize(candidates.size());
  if (request.device_edges.empty()) return choice;
  choice.nccl_us = PermuteTimeUs(topology, request, nccl_edge_us);
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!candidates[i].allowed) continue;
    const double us = PermuteTimeUs(topology, request, candidates[i].edge_us);
    choice.candidate_us[i] = us;
    if (!choice.fastest || us < *choice.candidate_us[*choice.fastest]) {
      choice.fastest = i;
    }
  }
  if (!choice.fastest) {
    choice.verdict = Verdict::kNoAlternative;
  } else if (!(choice.nccl_us > 0)) {
    choice.verdict = Verdict::kZeroCost;
  } else if (*choice.candidate_us[*choice.fastest] >
             choice.nccl_us * (1.0 - margin)) {
    choice.verdict = Verdict::kWithinMargin;
  } else {
    choice.verdict = Verdict::kAlternative;
    choice.chosen = choice.fastest;
  }
  return choice;
}

Decision Decide(const Topology& topology, const CostTable& table,
                const PermuteRequest& request) {
  Decision decision;
  auto time_on = [&](Backend backend) -> EdgeTimeFn {
    return [&table, &request, backend](LinkClass link_class) {
      return EdgeTimeUs(table, backend, link_class, request.bytes,
                        request.buffers);
    };
  };
  decision.nvshmem_refusal = CheckNvshmem(topology, table, request);
  decision.choice = Choose(
      topology, request, time_on(Backend::kNccl),
      {{time_on(Backend::kNvshmem), !decision.nvshmem_refusal}}, table.margin);
  if (decision.choice.chosen) decision.backend = Backend::kNvshmem;
  return decision;
}

}  // namespace nvshmem_selection
}  // namespace gpu
}  // namespace xla
