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

#ifndef XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_COST_TABLE_H_
#define XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_COST_TABLE_H_

// What a collective-permute costs on each backend and link class: the cost
// table (documented defaults with measured curves compiled in, a text format
// to override them) and the time of one edge. C++17 and absl only.
//
// A backend's time on an edge, for a permute of B buffers (operands) moving
// `bytes` in all from each source, is
//     permute(backend, class, B, bytes)
//       + bytes / bandwidth(backend, class) * sm_interference(backend)
// sm_interference is the share of the transfer time that the backend takes
// away from compute it overlaps with. permute() is, when the table has
// measured points for (backend, class), the measured curve; otherwise the
// parametric model
//     latency + (B - 1) * per_buffer + bytes / bandwidth
// per_buffer is what each extra buffer costs: XLA's NVSHMEM permute does a
// put and a barrier per buffer, NCCL groups all buffers in one launch.
//
// Measured curve. Points (buffers, bytes, us) measured at the XLA level (the
// permute's own time per loop step). On the points of one buffer count, time
// is interpolated linearly in log(bytes)-log(time), exact at the points and
// monotone wherever the points are; outside the measured sizes it continues
// from the end point at the row's bandwidth. Between two measured buffer
// counts the two curves' times blend linearly; below the smallest or beyond
// the largest count, per_buffer is subtracted or added per buffer. Measured
// because the XLA-level costs are not linear: on 2x H200 a second buffer
// costs 1-5 us, four buffers 25-30 us, and both backends bend at 16 MiB.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_topology.h"

namespace xla {
namespace gpu {
namespace nvshmem_selection {

// Backends are data: the cost table names the set the target XLA offers (see
// ParseBackendSet). NCCL (XLA's DEFAULT, host-initiated NCCL send/recv) is
// always in the set and is the default answer.
enum class Backend { kNccl = 0, kNvshmem = 1, kPeer = 2, kSymmetric = 3 };
inline constexpr int kNumBackends = 4;

const char* BackendName(Backend backend);
std::optional<Backend> BackendFromName(absl::string_view name);

// A backend set as written in flags and tables: "nccl,nvshmem",
// "nccl,peer", "nccl,peer,symmetric". NCCL must be in it, and NVSHMEM does
// not mix with peer/symmetric (no XLA offers both); InvalidArgument
// otherwise.
absl::StatusOr<std::vector<Backend>> ParseBackendSet(absl::string_view text);
std::string BackendSetToString(const std::vector<Backend>& backends);

struct LinkCost {
  double latency_us = 0;      // One permute of one buffer.
  double bandwidth_gbps = 1;  // GB/s = 1e9 bytes per second.
  double per_buffer_us = 0;   // Each buffer beyond the first.
};

// How NVSHMEM reaches another host over InfiniBand: through the CPU proxy
// thread (IBRC, NVSHMEM's default remote transport) or GPU-initiated
// (IBGDA, NVSHMEM_IB_ENABLE_IBGDA=1). The default is IBRC, the slower one.
enum class NvshmemTransport { kIbrc = 0, kIbgda = 1 };
const char* NvshmemTransportName(NvshmemTransport transport);
// The documented estimate of NVSHMEM's network row for a transport.
LinkCost NvshmemNetworkCost(NvshmemTransport transport);

// One measured point of a backend's curve on one link class: a permute of
// `buffers` buffers moving `bytes` in all took `us` of its own per step.
struct CurvePoint {
  int buffers = 1;
  int64_t bytes = 1;
  double us = 1;
};
// Points per (backend, link class) a table may hold: a measured curve has
// tens; the bound keeps parsing hostile input linear in practice.
inline constexpr int kMaxCurvePoints = 4096;

// Cost model parameters. Defaults (see DefaultCostTable in the .cc) carry
// their sources; a text table can override any of them.
struct CostTable {
  std::array<std::array<LinkCost, kNumLinkClasses>, kNumBackends> links;
  std::array<double, kNumBackends> sm_interference = {0, 0, 0, 0};
  // The backends the target XLA offers (see the header comment).
  std::vector<Backend> backends = {Backend::kNccl, Backend::kNvshmem};
  // Whether the runtime's NCCL supports signals (symmetric's put + signal).
  bool symmetric_signals = false;
  // NVSHMEM's InfiniBand transport; picks its network row's default.
  NvshmemTransport nvshmem_transport = NvshmemTransport::kIbrc;
  double margin = 0.05;  // Required relative gain over NCCL.
  int64_t nvshmem_max_bytes = int64_t{1} << 30;  // Symmetric heap budget.

  // Measured curves, sorted by (buffers, bytes), no two alike; empty: the
  // parametric model of `links`.
  std::array<std::array<std::vector<CurvePoint>, kNumLinkClasses>, kNumBackends>
      curves;

  const std::vector<CurvePoint>& curve(Backend backend,
                                       LinkClass link_class) const {
    return curves[static_cast<int>(backend)][static_cast<int>(link_class)];
  }
  const LinkCost& link(Backend backend, LinkClass link_class) const {
    return links[static_cast<int>(backend)][static_cast<int>(link_class)];
  }
  LinkCost& link(Backend backend, LinkClass link_class) {
    return links[static_cast<int>(backend)][static_cast<int>(link_class)];
  }
};

// The documented defaults, with the measured 2x H200 NVLink curves compiled
// in: NCCL and NVSHMEM at the pinned XLA, peer memory with one process
// driving the GPUs (symmetric gets NCCL's numbers). Built once.
CostTable DefaultCostTable();

// Text format, one entry per line, '#' starts a comment:
//   link <nccl|nvshmem|peer|symmetric>
//        <same_device|nvlink|nvlink_domain|network>
//        <latency_us> <bandwidth_GBps> [<per_buffer_us>]   (omitted: 0)
//   point <backend> <link_class> <buffers> <bytes> <us>   (a measured point;
//        buffers and bytes whole numbers >= 1, us > 0, each (buffers, bytes)
//        once per backend and link class)
//   sm_interference <backend> <fraction>
//   backends <nccl,nvshmem|nccl,peer|nccl,peer,symmetric|...>
//   symmetric_signals <0|1>
//   nvshmem_transport <ibrc|ibgda>   (sets NVSHMEM's network row to that
//        transport's estimate; a later link line overrides it)
//   margin <fraction>
//   nvshmem_max_bytes <bytes>
// Entries not mentioned keep their defaults. A table that mentions a
// (backend, link class) in a link or point line replaces its whole model:
// the inherited points of that pair are dropped, so a link line alone means
// the parametric model and point lines bring their own curve. Errors are
// InvalidArgument and name the line: "<source>:<line>: <message>". The
// entries split_overhead_us and combine_bandwidth_GBps of older tables are
// errors: they priced a split plan, which no longer exists.
absl::StatusOr<CostTable> ParseCostTable(absl::string_view text,
                                         absl::string_view source_name);
std::string CostTableToString(const CostTable& table);

// Time of one edge on one backend, for a permute of `buffers` buffers that
// moves `bytes` in all.
double EdgeTimeUs(const CostTable& table, Backend backend, LinkClass link_class,
                  int64_t bytes, int buffers = 1);

// Whether EdgeTimeUs uses a measured curve (else the parametric model).
bool HasMeasuredCurve(const CostTable& table, Backend backend,
                      LinkClass link_class);

}  // namespace nvshmem_selection
}  // namespace gpu
}  // namespace xla

#endif  // XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_COST_TABLE_H_
