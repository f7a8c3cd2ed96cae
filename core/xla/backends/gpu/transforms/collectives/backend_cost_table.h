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

#ifndef XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_BACKEND_COST_TABLE_H_
#define XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_BACKEND_COST_TABLE_H_

// The cost table of collective-permute backends: per backend and link class,
// a parametric row and, where measured, a curve of points (the model is in
// permute_backend_selection.h). C++17, absl and protobuf only.

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/backend_cost_table.pb.h"
#include "xla/backends/gpu/transforms/collectives/cluster_topology.h"

namespace xla {
namespace gpu {
namespace backend_selection {

// NCCL (XLA's DEFAULT backend, the PRIVATE collectives mode), NVSHMEM (up
// to jax 0.10.1's XLA), and the PEER and SYMMETRIC collectives modes of later
// XLA.
enum class Backend { kNccl = 0, kNvshmem = 1, kPeer = 2, kSymmetric = 3 };
inline constexpr int kNumBackends = 4;

const char* BackendName(Backend backend);

struct LinkCost {
  double latency_us = 0;      // One permute of one buffer.
  double bandwidth_gbps = 1;  // GB/s = 1e9 bytes per second.
  double per_buffer_us = 0;   // Each buffer beyond the first.
};

// A permute of `buffers` buffers moving `bytes` took `us` per step.
struct CurvePoint {
  int buffers = 1;
  int64_t bytes = 1;
  double us = 1;
};

struct CostTable {
  std::array<std::array<LinkCost, kNumLinkClasses>, kNumBackends> links;
  // Measured curves, sorted by (buffers, bytes); empty: the parametric model.
  std::array<std::array<std::vector<CurvePoint>, kNumLinkClasses>, kNumBackends>
      curves;
  std::array<double, kNumBackends> sm_interference = {};
  double margin = 0.05;  // Required relative gain over NCCL.
  int64_t nvshmem_max_bytes = int64_t{1} << 30;  // Symmetric heap budget.

  const LinkCost& link(Backend backend, LinkClass link_class) const {
    return links[static_cast<int>(backend)][static_cast<int>(link_class)];
  }
  const std::vector<CurvePoint>& curve(Backend backend,
                                       LinkClass link_class) const {
    return curves[static_cast<int>(backend)][static_cast<int>(link_class)];
  }
};

// Estimates, with the curves of NCCL, NVSHMEM and peer memory measured on 2x
// H200 NVLink; peer and symmetric memory otherwise take NCCL's numbers.
const CostTable& DefaultCostTable();

// Which entry of an BackendCostTableProto is bad: a field number, the index
// in a repeated field and of a point in it.
struct CostTableEntry {
  int field_number = 0;
  int index = -1;
  int point = -1;
};

// Applies the entries of `proto` onto `table`, all or none. InvalidArgument
// for a bad entry, which `bad_entry` then names; a bad number's message
// starts with its field's name.
absl::Status ApplyCostTableProto(const BackendCostTableProto& proto,
                                 CostTable* table,
                                 CostTableEntry* bad_entry = nullptr);

// A table in text format applied onto the default table. InvalidArgument:
// "<source>: ...".
absl::StatusOr<CostTable> ParseCostTable(absl::string_view text,
                                         absl::string_view source_name);

}  // namespace backend_selection
}  // namespace gpu
}  // namespace xla

#endif  // XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_BACKEND_COST_TABLE_H_
