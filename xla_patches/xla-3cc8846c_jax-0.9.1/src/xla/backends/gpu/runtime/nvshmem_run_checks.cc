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

#include "xla/backends/gpu/runtime/nvshmem_run_checks.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "xla/runtime/device_id.h"
#include "xla/runtime/process_id.h"
#include "xla/service/buffer_assignment.h"
#include "xla/service/computation_placer.h"
#include "xla/tsl/platform/errors.h"
#include "xla/tsl/platform/statusor.h"
#include "xla/util.h"

namespace xla::gpu {

bool RunAllocatesHeap(absl::Span<const BufferAllocation* const> allocations,
                      int64_t collective_color) {
  return absl::c_any_of(allocations, [&](const BufferAllocation* allocation) {
    return allocation->color() == collective_color && allocation->size() > 0 &&
           !allocation->is_entry_computation_parameter() &&
           !allocation->is_constant() && !allocation->is_thread_local();
  });
}

absl::Status CheckAndRecordNvshmemPes(
    const DeviceAssignment& devices,
    const absl::flat_hash_map<GlobalDeviceId, ProcessId>* job,
    absl::Span<const std::pair<int64_t, int64_t>> pairs,
    absl::FunctionRef<absl::StatusOr<bool>(int64_t pe)> in_team,
    NvshmemPeRecord& record) {
  if (record.devices == devices) return absl::OkStatus();
  if (job == nullptr) {
    return FailedPrecondition(
        "NVSHMEM was not set up with the job's processes");
  }
  std::vector<int64_t> pes;
  absl::flat_hash_set<int64_t> taken;
  for (int p = 0; p < devices.computation_count(); ++p) {
    for (int r = 0; r < devices.replica_count(); ++r) {
      auto it = job->find(GlobalDeviceId(devices(r, p)));
      if (it == job->end() || !taken.insert(it->second.value()).second) {
        return FailedPrecondition(
            "id %d runs on device %d, in no process of the NVSHMEM job or in "
            "one that runs another id",
            pes.size(), devices(r, p));
      }
      pes.push_back(it->second.value());
    }
  }
  for (const auto& [source, target] : pairs) {
    if (std::min(source, target) < 0 ||
        std::max(source, target) >= static_cast<int64_t>(pes.size())) {
      return FailedPrecondition("pair %d -> %d has no PE", source, target);
    }
    TF_ASSIGN_OR_RETURN(bool source_in, in_team(pes[source]));
    TF_ASSIGN_OR_RETURN(bool target_in, in_team(pes[target]));
    if (source_in != target_in) {
      return FailedPrecondition("pair %d -> %d leaves NVSHMEM_TEAM_SHARED",
                                source, target);
    }
  }
  record = {devices, std::move(pes)};
  return absl::OkStatus();
}

absl::StatusOr<std::optional<int64_t>> NvshmemTargetPe(
    const NvshmemPeRecord& record, const DeviceAssignment& devices,
    std::optional<int64_t> target) {
  if (!(record.devices == devices)) {
    return FailedPrecondition("PEs not checked for this device assignment");
  }
  if (!target.has_value()) return std::nullopt;
  if (*target < 0 || *target >= static_cast<int64_t>(record.pes.size())) {
    return FailedPrecondition("target %d has no PE", *target);
  }
  return record.pes[*target];
}

absl::Status CheckNvshmemJob(int64_t processes, int64_t devices_per_process,
                             const DeviceAssignment* devices) {
  const int64_t program_devices = devices ? devices->num_elements() : 1;
  if (devices_per_process != 1) {
    return FailedPrecondition(
        "this process drives %d GPUs; NVSHMEM runs one per process",
        devices_per_process);
  }
  if (program_devices != processes) {
    return FailedPrecondition(
        "the program runs on %d devices of the NVSHMEM job's %d processes, "
        "all of which its heap allocations wait for",
        program_devices, processes);
  }
  return absl::OkStatus();
}

}  // namespace xla::gpu
