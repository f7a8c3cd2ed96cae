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

// What a collective-permute costs on each backend and link class. An edge of
// a permute of B buffers moving `bytes` costs
//     permute(backend, class, B, bytes)
//       + bytes / bandwidth * sm_interference(backend)
// where permute() is the measured curve when the table has points for
// (backend, class), else latency + (B - 1) * per_buffer + bytes / bandwidth.
// A curve interpolates log(time) over log(bytes) between the points of one
// buffer count, continues at the row's bandwidth beyond them, blends two
// measured buffer counts linearly, and adds per_buffer per buffer outside
// them. Measured because XLA-level costs are not linear in B or bytes.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_cost_table.pb.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_topology.h"
#include "tsl/platform/protobuf.h"

namespace xla {
namespace gpu {
namespace nvshmem_selection {

// NCCL (XLA's DEFAULT backend, host-initiated send/recv) and NVSHMEM.
enum class Backend { kNccl = 0, kNvshmem = 1 };
inline constexpr int kNumBackends = 2;

const char* BackendName(Backend backend);
std::optional<Backend> BackendFromName(absl::string_view name);

struct LinkCost {
  double latency_us = 0;      // One permute of one buffer.
  double bandwidth_gbps = 1;  // GB/s = 1e9 bytes per second.
  double per_buffer_us = 0;   // Each buffer beyond the first.
};

// NVSHMEM's InfiniBand transport: IBRC (CPU proxy, the default) or IBGDA
// (GPU-initiated, NVSHMEM_IB_ENABLE_IBGDA=1).
enum class NvshmemTransport { kIbrc = 0, kIbgda = 1 };
// The estimate of NVSHMEM's network row for a transport.
LinkCost NvshmemNetworkCost(NvshmemTransport transport);

// A permute of `buffers` buffers moving `bytes` took `us` per step.
struct CurvePoint {
  int buffers = 1;
  int64_t bytes = 1;
  double us = 1;
};
// Points per (backend, link class): bounds the cost of parsing.
inline constexpr int kMaxCurvePoints = 4096;

// Cost model parameters; a table (NvshmemCostTableProto) can override any of
// them.
struct CostTable {
  std::array<std::array<LinkCost, kNumLinkClasses>, kNumBackends> links;
  std::array<double, kNumBackends> sm_interference = {0, 0};
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

// The documented defaults with the measured 2x H200 NVLink curves of NCCL
// and NVSHMEM compiled in. Built once.
CostTable DefaultCostTable();

// Which entry of an NvshmemCostTableProto: a field number, the index in a
// repeated field, and the index of a link's point or the number of the
// entry's own field that is wrong (0: the entry as a whole).
struct CostTableEntry {
  int field_number = 0;
  int index = -1;
  int point = -1;
  int subfield_number = 0;
};

// Applies the overrides of `proto` onto `table`: `nvshmem_transport` first,
// then the other fields. On an invalid entry returns InvalidArgument and, when
// `bad_entry` is given, says there which entry it was.
absl::Status ApplyCostTableProto(const NvshmemCostTableProto& proto,
                                 CostTable* table,
                                 CostTableEntry* bad_entry = nullptr);

// A table in text format (NvshmemCostTableProto) applied onto the defaults
// or onto `base`. Errors are InvalidArgument: "<source>:<line>: ...".
absl::StatusOr<CostTable> ParseCostTable(absl::string_view text,
                                         absl::string_view source_name);
absl::StatusOr<CostTable> ParseCostTableOnto(CostTable base,
                                             absl::string_view text,
                                             absl::string_view source_name);

// Time of one edge of a permute of `buffers` buffers moving `bytes`.
double EdgeTimeUs(const CostTable& table, Backend backend, LinkClass link_class,
                  int64_t bytes, int buffers = 1);

namespace text_internal {
// Parses `text` into `message`, recording where each field was in
// `locations`. A syntax error is InvalidArgument "<source>:<line>: ...".
absl::Status ParseTextProto(
    absl::string_view text, absl::string_view source_name,
    tsl::protobuf::Message* message,
    tsl::protobuf::TextFormat::ParseInfoTree* locations);
// The 1-based line of `entry` in a message of type `descriptor` parsed with
// `locations`; 0 where unknown.
int EntryLine(const tsl::protobuf::TextFormat::ParseInfoTree& locations,
              const tsl::protobuf::Descriptor& descriptor,
              const CostTableEntry& entry);
}  // namespace text_internal

}  // namespace nvshmem_selection
}  // namespace gpu
}  // namespace xla

#endif  // XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_COST_TABLE_H_
