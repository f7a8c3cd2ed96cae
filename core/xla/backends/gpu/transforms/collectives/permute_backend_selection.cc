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

#include "xla/backends/gpu/transforms/collectives/permute_backend_selection.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/backend_cost_table.h"
#include "xla/backends/gpu/transforms/collectives/cluster_topology.h"

namespace xla {
namespace gpu {
namespace backend_selection {
namespace {

// Logical devices the topology places: its map's, or one per device.
int PlacedDevices(const Topology& topology) {
  return topology.partition_to_device().empty()
             ? topology.num_devices()
             : static_cast<int>(topology.partition_to_device().size());
}

Refusal MakeRefusal(RefusalKind kind, int count = 0, int total = 0) {
  Refusal refusal;
  refusal.kind = kind;
  refusal.count = count;
  refusal.total = total;
  return refusal;
}

// Time on the points [begin, end) of one buffer count, sorted by bytes:
// log-log interpolation inside, the row's bandwidth from the end points out.
double CurveTimeUs(const CurvePoint* begin, const CurvePoint* end,
                   int64_t bytes, double bandwidth_gbps) {
  const CurvePoint& first = *begin;
  const CurvePoint& last = *(end - 1);
  if (bytes <= first.bytes) {
    return std::max(first.us - static_cast<double>(first.bytes - bytes) /
                                   (bandwidth_gbps * 1e3),
                    0.0);
  }
  if (bytes >= last.bytes) {
    return last.us +
           static_cast<double>(bytes - last.bytes) / (bandwidth_gbps * 1e3);
  }
  const CurvePoint* upper = std::lower_bound(
      begin, end, bytes,
      [](const CurvePoint& p, int64_t b) { return p.bytes < b; });
  if (upper->bytes == bytes) return upper->us;  // Exact at the points.
  const CurvePoint& lower = *(upper - 1);
  const double x = std::log(static_cast<double>(bytes));
  const double x0 = std::log(static_cast<double>(lower.bytes));
  const double x1 = std::log(static_cast<double>(upper->bytes));
  const double f = (x - x0) / (x1 - x0);
  return std::exp(std::log(lower.us) +
                  f * (std::log(upper->us) - std::log(lower.us)));
}

// The measured curve at `buffers`: the curve of that count, a linear blend of
// the two measured counts around it, or per_buffer per buffer beyond them.
double MeasuredTimeUs(const std::vector<CurvePoint>& curve,
                      const LinkCost& cost, int64_t bytes, int buffers) {
  // Runs of one buffer count, in increasing count.
  std::vector<std::pair<const CurvePoint*, const CurvePoint*>> runs;
  const CurvePoint* data = curve.data();
  for (size_t i = 0; i < curve.size();) {
    size_t j = i;
    while (j < curve.size() && curve[j].buffers == curve[i].buffers) ++j;
    runs.emplace_back(data + i, data + j);
    i = j;
  }
  auto time = [&](size_t run) {
    return CurveTimeUs(runs[run].first, runs[run].second, bytes,
                       cost.bandwidth_gbps);
  };
  auto count = [&](size_t run) { return runs[run].first->buffers; };
  if (buffers <= count(0)) {
    return std::max(time(0) - (count(0) - buffers) * cost.per_buffer_us, 0.0);
  }
  const size_t top = runs.size() - 1;
  if (buffers >= count(top)) {
    return time(top) + (buffers - count(top)) * cost.per_buffer_us;
  }
  size_t hi = 1;
  while (count(hi) < buffers) ++hi;
  if (count(hi) == buffers) return time(hi);
  const double f = static_cast<double>(buffers - count(hi - 1)) /
                   (count(hi) - count(hi - 1));
  const double low = time(hi - 1), high = time(hi);
  // Equal ends (infinite ones included) need no blend, and inf - inf is NaN.
  return low == high ? low : low + f * (high - low);
}

// Why NVSHMEM may not run the permute, or nullopt.
std::optional<Refusal> CheckNvshmem(const Topology& topology,
                                    const CostTable& table,
                                    const PermuteRequest& request) {
  for (const std::string& type : request.element_types) {
    if (NvshmemPutsType(type)) continue;
    Refusal refusal = MakeRefusal(RefusalKind::kUnsupportedType);
    refusal.type = type;
    return refusal;
  }
  if (request.memcpy_local_p2p) {
    return MakeRefusal(RefusalKind::kMemcpyLocalP2p);
  }
  const auto& edges = request.device_edges;
  if (absl::c_all_of(edges, [](auto e) { return e.first == e.second; })) {
    return MakeRefusal(RefusalKind::kLocalCopy);
  }
  if (int off_host = EdgesLeavingHost(topology, edges)) {
    return MakeRefusal(RefusalKind::kOutsideSharedMemory, off_host,
                       static_cast<int>(edges.size()));
  }
  if (std::optional<Refusal> heap = NvshmemHeapOverflow(table, request.bytes)) {
    return heap;
  }
  if (request.team_size > PlacedDevices(topology)) {
    return MakeRefusal(RefusalKind::kTeamOutsideTopology, request.team_size,
                       PlacedDevices(topology));
  }
  const std::vector<int> team = TeamDevices(topology, request.team_size);
  if (request.team_size > 0) {
    if (std::optional<Refusal> idle =
            NvshmemHostGpusIdle(topology, edges, team)) {
      return idle;
    }
  }
  if (std::optional<Refusal> mismatch =
          NvshmemPeMismatch(topology, request.team_size, request.groups)) {
    return mismatch;
  }
  if (std::optional<Refusal> hang = NvshmemHang(edges, team)) return hang;
  return NvshmemDestinationOffHeap(request.destinations);
}

}  // namespace

bool NvshmemPutsType(absl::string_view type) {
  constexpr absl::string_view kPut[] = {"f64", "f32", "f16", "bf16",
                                        "s32", "s64", "u32", "u64"};
  return absl::c_linear_search(kPut, type);
}

std::vector<int> TeamDevices(const Topology& topology, int team_size) {
  std::vector<int> team;
  if (team_size <= 0) {
    // Unknown: the whole topology is the largest team there can be.
    for (int d = 0; d < topology.num_devices(); ++d) team.push_back(d);
    return team;
  }
  for (int i = 0; i < std::min(team_size, PlacedDevices(topology)); ++i) {
    if (std::optional<int> device = topology.MapLogicalDevice(i)) {
      team.push_back(*device);
    }
  }
  return team;
}

std::optional<Refusal> NvshmemHang(
    const std::vector<std::pair<int, int>>& device_edges,
    const std::vector<int>& team) {
  std::vector<int> members = team, targets;
  absl::c_sort(members);
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

std::optional<Refusal> NvshmemHostGpusIdle(
    const Topology& topology,
    const std::vector<std::pair<int, int>>& device_edges,
    const std::vector<int>& team) {
  std::vector<int> members = team, hosts;
  absl::c_sort(members);
  for (const auto& [src, dst] : device_edges) {
    hosts.push_back(topology.HostOf(src));
    hosts.push_back(topology.HostOf(dst));
  }
  absl::c_sort(hosts);
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  const int per_host = topology.gpus_per_host();
  for (int host : hosts) {
    Refusal refusal = MakeRefusal(RefusalKind::kHostGpusIdle, host, per_host);
    for (int d = host * per_host; d < (host + 1) * per_host; ++d) {
      if (!absl::c_binary_search(members, d)) refusal.devices.push_back(d);
    }
    if (!refusal.devices.empty()) return refusal;
  }
  return std::nullopt;
}

std::optional<Refusal> NvshmemDestinationOffHeap(
    const std::vector<DestinationBuffer>& destinations) {
  for (const DestinationBuffer& destination : destinations) {
    if (destination.parameter < 0 && !destination.returned) continue;
    Refusal refusal = MakeRefusal(
        RefusalKind::kDestinationOffHeap,
        static_cast<int>(std::min<int64_t>(destination.allocation, 1 << 30)),
        static_cast<int>(std::min<int64_t>(destination.parameter, 1 << 30)));
    if (destination.parameter < 0) refusal.type = "returned";
    return refusal;
  }
  return std::nullopt;
}

std::optional<Refusal> NvshmemHeapOverflow(const CostTable& table,
                                           int64_t bytes) {
  if (bytes <= table.nvshmem_max_bytes / 2) return std::nullopt;
  Refusal refusal = MakeRefusal(RefusalKind::kExceedsHeap);
  refusal.bytes = bytes;
  refusal.limit = table.nvshmem_max_bytes;
  return refusal;
}

std::optional<Refusal> NvshmemPeMismatch(const Topology& topology,
                                         int team_size, int groups) {
  if (groups > 1) return MakeRefusal(RefusalKind::kSeveralGroups, groups);
  const std::vector<int> program = TeamDevices(topology, team_size);
  for (int i = 0; i < static_cast<int>(program.size()); ++i) {
    // The PE is the process: device i with one GPU a process, else as the
    // topology's process map says.
    const int pe = topology.device_to_process().empty()
                       ? program[i]
                       : topology.ProcessOf(program[i]);
    if (pe == i) continue;
    Refusal refusal = MakeRefusal(RefusalKind::kPlacedOffItsPe, 1,
                                  static_cast<int>(program.size()));
    refusal.devices = {i, program[i]};
    return refusal;
  }
  return std::nullopt;
}

std::optional<Refusal> CheckBackend(const Topology& topology,
                                    const CostTable& table,
                                    const PermuteRequest& request,
                                    Backend backend) {
  switch (backend) {  // No default: a backend without a rule draws -Wswitch.
    case Backend::kNccl:
      return std::nullopt;
    case Backend::kNvshmem:
      return CheckNvshmem(topology, table, request);
    case Backend::kPeer:
    case Backend::kSymmetric:
      break;  // The rule below.
  }
  if (int n = EdgesLeavingHost(topology, request.device_edges)) {
    return MakeRefusal(RefusalKind::kLeavesHost, n,
                       static_cast<int>(request.device_edges.size()));
  }
  // The thunk's clique, every device of the group, must be in one process.
  const std::vector<int> team = TeamDevices(topology, request.team_size);
  const int outside = static_cast<int>(absl::c_count_if(team, [&](int d) {
    return topology.ProcessOf(d) != topology.ProcessOf(team.front());
  }));
  if (outside > 0) {
    return MakeRefusal(RefusalKind::kCrossesProcesses, outside,
                       static_cast<int>(team.size()));
  }
  return std::nullopt;
}

namespace {

// The row's own time: its measured curve, else its parametric model.
double RowTimeUs(const CostTable& table, Backend backend, LinkClass link_class,
                 int64_t bytes, int buffers) {
  const LinkCost& cost = table.link(backend, link_class);
  // GB/s = 1e3 bytes per microsecond.
  const double transfer_us =
      static_cast<double>(bytes) / (cost.bandwidth_gbps * 1e3);
  const std::vector<CurvePoint>& curve = table.curve(backend, link_class);
  const double permute_us =
      curve.empty()
          ? cost.latency_us + std::max(buffers - 1, 0) * cost.per_buffer_us +
                transfer_us
          : MeasuredTimeUs(curve, cost, bytes, buffers);
  const double interference = table.sm_interference[static_cast<int>(backend)];
  // No interference adds nothing, even to an infinite transfer.
  return interference == 0 ? permute_us
                           : permute_us + transfer_us * interference;
}

}  // namespace

double EdgeTimeUs(const CostTable& table, Backend backend, LinkClass link_class,
                  int64_t bytes, int buffers) {
  double us = RowTimeUs(table, backend, link_class, bytes, buffers);
  if (!table.curve(backend, link_class).empty()) return us;
  // An estimated row is never cheaper than a measured faster class of the same
  // backend at the same size: a link between hosts is no faster than one
  // inside a host, nor a network than an NVLink domain.
  for (int faster = static_cast<int>(LinkClass::kIntraHostNvlink);
       faster < static_cast<int>(link_class); ++faster) {
    const LinkClass c = static_cast<LinkClass>(faster);
    if (!table.curve(backend, c).empty()) {
      us = std::max(us, RowTimeUs(table, backend, c, bytes, buffers));
    }
  }
  return us;
}

double PermuteTimeUs(const Topology& topology, const CostTable& table,
                     Backend backend, const PermuteRequest& request) {
  double worst = 0;
  for (const auto& [src, dst] : request.device_edges) {
    worst =
        std::max(worst, EdgeTimeUs(table, backend, topology.Classify(src, dst),
                                   request.bytes, request.buffers));
  }
  return worst;
}

Decision Decide(const Topology& topology, const CostTable& table,
                const PermuteRequest& request,
                const std::vector<Backend>& alternatives) {
  Decision decision;
  if (request.device_edges.empty()) return decision;
  decision.nccl_us = PermuteTimeUs(topology, table, Backend::kNccl, request);
  double best_us = decision.nccl_us * (1.0 - table.margin);
  for (Backend backend : alternatives) {
    const int b = static_cast<int>(backend);
    decision.refusals[b] = CheckBackend(topology, table, request, backend);
    if (decision.refusals[b]) continue;
    decision.us[b] = PermuteTimeUs(topology, table, backend, request);
    if (decision.nccl_us > 0 && *decision.us[b] <= best_us &&
        (decision.backend == Backend::kNccl || *decision.us[b] < best_us)) {
      decision.backend = backend;
      best_us = *decision.us[b];
    }
  }
  return decision;
}

}  // namespace backend_selection
}  // namespace gpu
}  // namespace xla
