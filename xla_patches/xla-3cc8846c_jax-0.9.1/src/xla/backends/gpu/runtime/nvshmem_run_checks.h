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

#ifndef XLA_BACKENDS_GPU_RUNTIME_NVSHMEM_RUN_CHECKS_H_
#define XLA_BACKENDS_GPU_RUNTIME_NVSHMEM_RUN_CHECKS_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "xla/runtime/device_id.h"
#include "xla/runtime/process_id.h"
#include "xla/service/buffer_assignment.h"
#include "xla/service/computation_placer.h"

namespace xla::gpu {

// Whether a run allocates one of `allocations` in collective memory (the heap).
bool RunAllocatesHeap(absl::Span<const BufferAllocation* const> allocations,
                      int64_t collective_color);

// The device assignment a permute thunk checked, and the PE of each id.
struct NvshmemPeRecord {
  std::optional<DeviceAssignment> devices;
  std::vector<int64_t> pes;
};

// Unless `record` holds `devices`: the PE (process) of each id r + p *
// replicas, devices(r, p)'s in the `job` (null: NVSHMEM has none), one each;
// every pair with both ends or neither in this PE's NVSHMEM_TEAM_SHARED
// (`in_team`), whose barrier waits for no other put; then the record.
absl::Status CheckAndRecordNvshmemPes(
    const DeviceAssignment& devices,
    const absl::flat_hash_map<GlobalDeviceId, ProcessId>* job,
    absl::Span<const std::pair<int64_t, int64_t>> pairs,
    absl::FunctionRef<absl::StatusOr<bool>(int64_t pe)> in_team,
    NvshmemPeRecord& record);

// The PE that `target`, an id if any, puts to, from the record of `devices`.
absl::StatusOr<std::optional<int64_t>> NvshmemTargetPe(
    const NvshmemPeRecord& record, const DeviceAssignment& devices,
    std::optional<int64_t> target);

// Fails unless the NVSHMEM job has one GPU per process and a process for each
// device of the program (`devices`; null: one): its heap allocations wait for
// them all.
absl::Status CheckNvshmemJob(int64_t processes, int64_t devices_per_process,
                             const DeviceAssignment* devices);

}  // namespace xla::gpu

#endif  // XLA_BACKENDS_GPU_RUNTIME_NVSHMEM_RUN_CHECKS_H_
