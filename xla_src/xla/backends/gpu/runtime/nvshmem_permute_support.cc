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

#include "xla/backends/gpu/runtime/nvshmem_permute_support.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "xla/debug_options_flags.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/hlo/ir/hlo_opcode.h"
#include "xla/primitive_util.h"
#include "xla/service/buffer_assignment.h"
#include "xla/service/computation_placer.h"
#include "xla/service/hlo_module_config.h"
#include "xla/tsl/platform/errors.h"
#include "xla/tsl/platform/statusor.h"
#include "xla/xla_data.pb.h"

namespace xla::gpu {
namespace {

// The types of NvshmemCommunicator::P2P's switch.
bool HasNvshmemPut(PrimitiveType type) {
  switch (type) {
    case F64:
    case F32:
    case F16:
    case BF16:
    case S32:
    case S64:
    case U32:
    case U64:
      return true;
    default:
      return false;
  }
}

absl::Status CheckOperands(const HloCollectivePermuteInstruction& permute) {
  if (permute.inplace()) {
    return absl::FailedPreconditionError(
        "in-place collective-permute: the NVSHMEM thunk puts whole operands");
  }
  for (const HloInstruction* operand : permute.operands()) {
    const PrimitiveType type = operand->shape().element_type();
    if (!HasNvshmemPut(type)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "operand %s is %s: NVSHMEM puts only f64, f32, f16, bf16, s32, s64, "
          "u32 and u64",
          operand->name(), primitive_util::LowercasePrimitiveTypeName(type)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckEveryIdReceivesOnce(
    const HloCollectivePermuteInstruction& permute, int64_t group_size) {
  std::vector<int64_t> sources(group_size, 0);
  for (const auto& [source, target] : permute.source_target_pairs()) {
    if (target < 0 || target >= group_size) {
      return absl::FailedPreconditionError(
          absl::StrFormat("pair %d -> %d: target outside the group of %d ids",
                          source, target, group_size));
    }
    ++sources[target];
  }
  for (int64_t id = 0; id < group_size; ++id) {
    if (sources[id] == 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "id %d receives nothing: it skips the receive barrier over "
          "NVSHMEM_TEAM_SHARED, in which the devices with a source would hang",
          id));
    }
    if (sources[id] > 1) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "id %d receives from %d sources: the NVSHMEM thunk keeps one", id,
          sources[id]));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckIdsRunOnTheirPes(const HloModuleConfig& config) {
  if (!config.has_static_device_assignment()) {
    return absl::OkStatus();
  }
  const DeviceAssignment& assignment = config.static_device_assignment();
  const int replicas = assignment.replica_count();
  for (int r = 0; r < replicas; ++r) {
    for (int p = 0; p < assignment.computation_count(); ++p) {
      const int64_t id = r + int64_t{p} * replicas;
      if (assignment(r, p) != id) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "id %d runs on device %d: the NVSHMEM thunk puts to id %d as the "
            "PE, which should be the process of device %d",
            id, assignment(r, p), id, id));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CanRunNvshmemCollectivePermute(
    const HloCollectivePermuteInstruction& permute,
    const HloModuleConfig& config) {
  if (!config.debug_options().xla_gpu_experimental_enable_nvshmem()) {
    return absl::FailedPreconditionError(
        "xla_gpu_experimental_enable_nvshmem is off: buffers are not placed in "
        "NVSHMEM memory");
  }
  // The collective allocator and NVSHMEM's set-up read the process's flags,
  // not the module's (nccl_collectives.cc, cuda_platform.cc).
  if (!GetDebugOptionsFromFlags().xla_gpu_experimental_enable_nvshmem()) {
    return absl::FailedPreconditionError(
        "xla_gpu_experimental_enable_nvshmem is not in XLA_FLAGS: this process "
        "does not set NVSHMEM up");
  }
  if (config.debug_options().xla_gpu_use_memcpy_local_p2p()) {
    return absl::FailedPreconditionError(
        "xla_gpu_use_memcpy_local_p2p is set, which the NVSHMEM thunk refuses");
  }
  if (permute.parent() != nullptr && permute.parent()->IsAsyncComputation()) {
    return absl::FailedPreconditionError(
        "in a collectives group, whose thunk needs NCCL communicators: the "
        "NVSHMEM thunk has none");
  }
  if (permute.parent() != nullptr &&
      RunsUnderConditionalBranch(*permute.parent())) {
    return absl::FailedPreconditionError(
        "under a conditional's branch: devices may take different branches, "
        "and a put lands at the address of the sender's own branch's buffer");
  }
  TF_RETURN_IF_ERROR(CheckOperands(permute));
  // The ids as NvshmemCollectivePermuteStartThunk::GetNvshmemP2PConfig counts.
  const int64_t group_size = permute.channel_id().has_value()
                                 ? config.num_partitions()
                                 : config.replica_count();
  const int64_t devices = config.replica_count() * config.num_partitions();
  if (group_size != devices) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the permute's group has %d of the program's %d devices, and the "
        "NVSHMEM thunk uses its ids as PEs",
        group_size, devices));
  }
  TF_RETURN_IF_ERROR(CheckIdsRunOnTheirPes(config));
  return CheckEveryIdReceivesOnce(permute, group_size);
}

bool RunsUnderConditionalBranch(const HloComputation& computation) {
  std::vector<const HloComputation*> pending = {&computation};
  absl::flat_hash_set<const HloComputation*> seen;
  while (!pending.empty()) {
    const HloComputation* callee = pending.back();
    pending.pop_back();
    if (callee == nullptr || !seen.insert(callee).second) {
      continue;
    }
    for (const HloInstruction* caller : callee->caller_instructions()) {
      if (caller->opcode() == HloOpcode::kConditional) {
        return true;
      }
      pending.push_back(caller->parent());
    }
  }
  return false;
}

absl::Status CheckNvshmemDestination(const BufferAllocation& destination,
                                     int64_t collective_color) {
  if (destination.is_entry_computation_parameter()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "its destination is parameter %d's buffer, which the caller allocated "
        "outside the NVSHMEM heap",
        destination.parameter_number()));
  }
  if (destination.color() != collective_color) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "its destination is in memory space %d, not the NVSHMEM heap's %d",
        destination.color(), collective_color));
  }
  return absl::OkStatus();
}

absl::Status CheckCollectiveMemoryFreedEachRun(
    absl::Span<const BufferAllocation> allocations, int64_t collective_color) {
  for (const BufferAllocation& allocation : allocations) {
    if (allocation.color() == collective_color && allocation.maybe_live_out()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "allocation %d of the NVSHMEM heap may be live out: each process "
          "frees it when its caller does, so later heap offsets need not agree "
          "across PEs",
          allocation.index()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckIdIsOwnPe(int64_t id, int64_t pe) {
  if (id == pe) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "NVSHMEM collective-permute on id %d, which is NVSHMEM PE %d: the thunk "
      "puts to a target id as the PE, so the data would reach other devices; "
      "run id i in the process of PE i or run this permute with NCCL",
      id, pe));
}

absl::Status CheckBarrierTeamInsideGroup(
    int64_t group_size, int64_t team_size,
    absl::FunctionRef<absl::StatusOr<bool>(int64_t)> is_barrier_peer) {
  int64_t inside = 0;
  for (int64_t id = 0; id < group_size; ++id) {
    TF_ASSIGN_OR_RETURN(bool peer, is_barrier_peer(id));
    inside += peer ? 1 : 0;
  }
  if (inside == team_size) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "NVSHMEM_TEAM_SHARED has %d PEs, %d of them among the permute's %d ids: "
      "the receive barrier would wait for PEs that do not run it; run this "
      "permute with NCCL",
      team_size, inside, group_size));
}

absl::Status CheckPairsInsideBarrierTeam(
    absl::Span<const std::pair<int64_t, int64_t>> pairs,
    absl::FunctionRef<absl::StatusOr<bool>(int64_t)> is_barrier_peer) {
  for (const auto& [source, target] : pairs) {
    TF_ASSIGN_OR_RETURN(bool source_inside, is_barrier_peer(source));
    TF_ASSIGN_OR_RETURN(bool target_inside, is_barrier_peer(target));
    if (source_inside != target_inside) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "NVSHMEM collective-permute pair %d -> %d crosses "
          "NVSHMEM_TEAM_SHARED (PE %d shares this PE's memory domain, PE %d "
          "does not): the receive barrier would not wait for the put; run "
          "this permute with NCCL",
          source, target, source_inside ? source : target,
          source_inside ? target : source));
    }
  }
  return absl::OkStatus();
}

}  // namespace xla::gpu
