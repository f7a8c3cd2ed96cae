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
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_cost_table.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_topology.h"

namespace xla {
namespace gpu {
namespace nvshmem_selection {
namespace {

constexpr const char* kBackendTitles[kNumBackends] = {"NCCL", "NVSHMEM", "peer",
                                                      "symmetric"};

std::string Title(Backend backend) {
  return kBackendTitles[static_cast<int>(backend)];
}

std::string Us(double us) { return absl::StrFormat("%.2f us", us); }

std::string Bytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrFormat("%.0f %s", value, kUnits[unit])
                   : absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

// All edges move at once: the slowest one bounds the permute.
double PlanTimeForEdges(const CostTable& table, const Topology& topology,
                        const PermuteRequest& request, Backend backend) {
  double worst = 0;
  for (const auto& [src, dst] : request.device_edges) {
    worst =
        std::max(worst, EdgeTimeUs(table, backend, topology.Classify(src, dst),
                                   request.bytes, request.buffers));
  }
  return worst;
}

// Logical devices the topology places: its map's, or one per device.
int PlacedDevices(const Topology& topology) {
  return topology.partition_to_device().empty()
             ? topology.num_devices()
             : static_cast<int>(topology.partition_to_device().size());
}

Refusal MakeRefusal(Backend backend, RefusalKind kind) {
  Refusal refusal;
  refusal.backend = backend;
  refusal.kind = kind;
  return refusal;
}

// Edges that leave their host, or else that join two processes, for peer and
// symmetric memory, which XLA runs only among one process's GPUs.
std::optional<Refusal> CheckOneProcess(const Topology& topology,
                                       const PermuteRequest& request,
                                       Backend backend) {
  const auto& edges = request.device_edges;
  auto count = [&](auto differ) {
    return static_cast<int>(
        absl::c_count_if(edges, [&](const std::pair<int, int>& e) {
          return differ(e.first) != differ(e.second);
        }));
  };
  const int off_host = count([&](int d) { return topology.HostOf(d); });
  const int off_process = count([&](int d) { return topology.ProcessOf(d); });
  if (off_host == 0 && off_process == 0) return std::nullopt;
  Refusal refusal =
      MakeRefusal(backend, off_host > 0 ? RefusalKind::kLeavesHost
                                        : RefusalKind::kCrossesProcesses);
  refusal.count = off_host > 0 ? off_host : off_process;
  refusal.total = static_cast<int>(edges.size());
  refusal.gpus_per_process = topology.gpus_per_process();
  return refusal;
}

}  // namespace

std::vector<int> TeamDevices(const Topology& topology, int team_size) {
  std::vector<int> team;
  if (team_size <= 0) {
    // Unknown program size: the whole topology is the largest team there can
    // be, so requiring all of it to be sources never lets a hang through.
    team.reserve(topology.num_devices());
    for (int d = 0; d < topology.num_devices(); ++d) team.push_back(d);
    return team;
  }
  const int size = std::min(team_size, PlacedDevices(topology));
  team.reserve(size);
  for (int i = 0; i < size; ++i) {
    std::optional<int> device = topology.MapLogicalDevice(i);
    if (device) team.push_back(*device);
  }
  return team;
}

std::optional<Refusal> NvshmemHang(
    const std::vector<std::pair<int, int>>& device_edges,
    const std::vector<int>& team) {
  std::vector<int> members = team;
  absl::c_sort(members);
  std::vector<int> targets;
  targets.reserve(device_edges.size());
  for (const auto& [src, dst] : device_edges) {
    for (int device : {src, dst}) {
      if (!absl::c_binary_search(members, device)) {
        Refusal refusal =
            MakeRefusal(Backend::kNvshmem, RefusalKind::kEdgeOutsideTeam);
        refusal.devices = {src, dst, device};
        refusal.total = static_cast<int>(team.size());
        return refusal;
      }
    }
    targets.push_back(dst);
  }
  absl::c_sort(targets);
  Refusal refusal =
      MakeRefusal(Backend::kNvshmem, RefusalKind::kDeviceWithoutSource);
  for (int device : team) {
    if (!absl::c_binary_search(targets, device)) {
      refusal.devices.push_back(device);
    }
  }
  if (refusal.devices.empty()) return std::nullopt;
  refusal.count = static_cast<int>(refusal.devices.size());
  refusal.total = static_cast<int>(team.size());
  return refusal;
}

std::optional<Refusal> CheckSafety(const Topology& topology,
                                   const CostTable& table,
                                   const PermuteRequest& request,
                                   Backend backend) {
  if (backend == Backend::kNccl) return std::nullopt;
  if (!absl::c_linear_search(table.backends, backend)) {
    Refusal refusal = MakeRefusal(backend, RefusalKind::kNotOffered);
    refusal.offered = table.backends;
    return refusal;
  }
  if (backend == Backend::kNvshmem) {
    if (request.bytes > table.nvshmem_max_bytes) {
      Refusal refusal = MakeRefusal(backend, RefusalKind::kExceedsHeap);
      refusal.bytes = request.bytes;
      refusal.limit = table.nvshmem_max_bytes;
      return refusal;
    }
    if (request.team_size > PlacedDevices(topology)) {
      Refusal refusal = MakeRefusal(backend, RefusalKind::kTeamOutsideTopology);
      refusal.count = request.team_size;
      refusal.total = PlacedDevices(topology);
      return refusal;
    }
    return NvshmemHang(request.device_edges,
                       TeamDevices(topology, request.team_size));
  }
  if (backend == Backend::kSymmetric && !table.symmetric_signals) {
    return MakeRefusal(backend, RefusalKind::kNoSignals);
  }
  return CheckOneProcess(topology, request, backend);
}

std::string RefusalText(const Refusal& r) {
  const std::string refused =
      absl::StrCat(BackendName(r.backend), " refused: ");
  const std::string of_total = absl::StrCat(" of ", r.total, " edges ");
  switch (r.kind) {
    case RefusalKind::kNotOffered:
      return absl::StrCat(refused, "not offered by the target XLA (backends ",
                          BackendSetToString(r.offered), ")");
    case RefusalKind::kExceedsHeap:
      return absl::StrCat(refused, Bytes(r.bytes),
                          " exceeds the NVSHMEM symmetric heap (",
                          Bytes(r.limit), ")");
    case RefusalKind::kEdgeOutsideTeam:
      return absl::StrCat(refused, "edge (", r.devices[0], ", ", r.devices[1],
                          ") names device ", r.devices[2],
                          ", which is outside the team of ", r.total,
                          " devices");
    case RefusalKind::kDeviceWithoutSource: {
      constexpr size_t kListed = 4;
      const size_t listed = std::min(r.devices.size(), kListed);
      std::string devices =
          absl::StrJoin(r.devices.begin(), r.devices.begin() + listed, ", ");
      if (r.devices.size() > kListed) devices += ", ...";
      const bool one = r.count == 1;
      return absl::StrCat(
          refused, r.count, " of ", r.total, " devices of the team (",
          one ? "device " : "devices ", devices, ") ", one ? "has" : "have",
          " no source; XLA's NVSHMEM permute would hang in its "
          "barrier");
    }
    case RefusalKind::kTeamOutsideTopology:
      return absl::StrCat(refused, "the program's ", r.count,
                          " devices are more than the topology places (",
                          r.total, "); the team cannot be checked");
    case RefusalKind::kNoSignals:
      return absl::StrCat(
          refused,
          "the runtime's NCCL is not known to support signals "
          "(symmetric_signals 0), and put + signal fails without them");
    case RefusalKind::kLeavesHost:
      return absl::StrCat(
          refused, r.count, of_total,
          "leave their host; XLA copies through peer memory only inside "
          "one host and otherwise falls back to NCCL");
    case RefusalKind::kCrossesProcesses:
      return absl::StrCat(
          refused, r.count, of_total, "join GPUs of different processes (",
          r.gpus_per_process, r.gpus_per_process == 1 ? " GPU" : " GPUs",
          " per process); XLA copies through peer memory only among one "
          "process's GPUs and otherwise falls back to NCCL");
  }
  return refused;
}

Decision Decide(const Topology& topology, const CostTable& table,
                const PermuteRequest& request) {
  Decision decision;
  for (const auto& [src, dst] : request.device_edges) {
    ++decision.edges_by_class[static_cast<int>(topology.Classify(src, dst))];
  }
  const int nccl = static_cast<int>(Backend::kNccl);
  if (request.device_edges.empty()) {
    decision.backend_us[nccl] = 0;
    decision.verdict = Verdict::kNoEdges;
  } else {
    const double nccl_us =
        PlanTimeForEdges(table, topology, request, Backend::kNccl);
    decision.backend_us[nccl] = nccl_us;
    decision.chosen_us = nccl_us;
    for (int b = 0; b < kNumBackends; ++b) {
      const Backend backend = static_cast<Backend>(b);
      if (backend == Backend::kNccl) continue;
      decision.refused[b] = CheckSafety(topology, table, request, backend);
      if (decision.refused[b]) continue;
      const double us = PlanTimeForEdges(table, topology, request, backend);
      decision.backend_us[b] = us;
      if (!decision.fastest_alternative ||
          us < *decision.backend_us[static_cast<int>(
                   *decision.fastest_alternative)]) {
        decision.fastest_alternative = backend;
      }
    }
    if (!decision.fastest_alternative) {
      decision.verdict = Verdict::kNoAlternative;
    } else if (!(nccl_us > 0)) {
      decision.verdict = Verdict::kZeroCost;
    } else {
      const Backend best = *decision.fastest_alternative;
      const double best_us = *decision.backend_us[static_cast<int>(best)];
      if (best_us > nccl_us * (1.0 - table.margin)) {
        decision.verdict = Verdict::kWithinMargin;
      } else {
        decision.verdict = Verdict::kAlternative;
        decision.backend = best;
        decision.chosen_us = best_us;
      }
    }
  }
  decision.reason = DescribeDecision(topology, table, request, decision);
  return decision;
}

namespace {

std::string GainText(double nccl_us, double us) {
  return absl::StrFormat("%.1f%%", 100.0 * (nccl_us - us) / nccl_us);
}

// Which model priced `backend` on the request's edges.
std::string ModelKind(const Topology& topology, const CostTable& table,
                      const PermuteRequest& request, Backend backend) {
  size_t measured = 0;
  for (const auto& [src, dst] : request.device_edges) {
    if (HasMeasuredCurve(table, backend, topology.Classify(src, dst))) {
      ++measured;
    }
  }
  if (measured == request.device_edges.size()) return "measured curve";
  return measured == 0 ? "parametric" : "measured curve on some edges";
}

// "measured curve" when both compared backends are priced alike, else each.
std::string ModelNote(const Topology& topology, const CostTable& table,
                      const PermuteRequest& request, Backend other) {
  const std::string nccl = ModelKind(topology, table, request, Backend::kNccl);
  const std::string alt = ModelKind(topology, table, request, other);
  if (nccl == alt) return nccl;
  return absl::StrCat("NCCL ", nccl, ", ", Title(other), " ", alt);
}

// Where the chosen backend's edges run, for its reason.
std::string WhereText(const CostTable& table, const Decision& decision) {
  const int network =
      decision.edges_by_class[static_cast<int>(LinkClass::kNetwork)];
  if (decision.backend != Backend::kNvshmem) return " edges stay in one host";
  if (network == 0) return " edges stay in an NVLink domain";
  return absl::StrCat(" edges, ", network, " across the network (",
                      NvshmemTransportName(table.nvshmem_transport), ")");
}

}  // namespace

std::string DescribeDecision(const Topology& topology, const CostTable& table,
                             const PermuteRequest& request,
                             const Decision& decision) {
  if (decision.verdict == Verdict::kNoEdges) {
    return "NCCL: no source-target pairs, nothing to move";
  }
  if (decision.verdict == Verdict::kZeroCost) {
    return "NCCL: modeled at 0 us, nothing to gain";
  }
  const double nccl_us = *decision.backend_us[static_cast<int>(Backend::kNccl)];
  const std::string size = Bytes(request.bytes);
  if (decision.verdict == Verdict::kAlternative) {
    const double us = decision.chosen_us;
    return absl::StrCat(
        Title(decision.backend), ": all ", request.device_edges.size(),
        WhereText(table, decision), "; ", size, " in ", Us(us), " vs NCCL ",
        Us(nccl_us), " (", GainText(nccl_us, us), " faster; ",
        ModelNote(topology, table, request, decision.backend), ")");
  }
  // NCCL kept: why each offered alternative is not taken.
  std::vector<std::string> notes;
  for (const std::optional<Refusal>& refusal : decision.refused) {
    if (refusal && refusal->kind != RefusalKind::kNotOffered) {
      notes.push_back(RefusalText(*refusal));
    }
  }
  if (decision.verdict == Verdict::kWithinMargin) {
    const Backend best = *decision.fastest_alternative;
    const double best_us = *decision.backend_us[static_cast<int>(best)];
    notes.push_back(absl::StrFormat(
        "%s %s does not beat NCCL %s by the %.0f%% margin for %s (%s)",
        Title(best), Us(best_us), Us(nccl_us), table.margin * 100, size,
        ModelNote(topology, table, request, best)));
  }
  return absl::StrCat("NCCL: ", absl::StrJoin(notes, "; "));
}

}  // namespace nvshmem_selection
}  // namespace gpu
}  // namespace xla
