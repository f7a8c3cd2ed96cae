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

#ifndef XLA_BACKENDS_GPU_RUNTIME_NVSHMEM_PERMUTE_SUPPORT_H_
#define XLA_BACKENDS_GPU_RUNTIME_NVSHMEM_PERMUTE_SUPPORT_H_

#include <cstdint>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/service/buffer_assignment.h"
#include "xla/service/hlo_module_config.h"

namespace xla::gpu {

// Returns OK when NvshmemCollectivePermuteStartThunk can run `permute` (a
// collective-permute or collective-permute-start of a module with `config`),
// else FailedPrecondition naming the rule it breaks:
//
//  * xla_gpu_experimental_enable_nvshmem is on in the module's options and in
//    XLA_FLAGS: without the first no buffer is placed in NVSHMEM memory,
//    without the second NVSHMEM is not set up in this process and collective
//    memory comes from NCCL. xla_gpu_use_memcpy_local_p2p is off: the thunk's
//    Initialize fails with it. The permute is not inside a collectives group
//    (an async computation), whose thunk runs NCCL communicators only, nor
//    under a conditional's branch: devices may take different branches, and
//    the thunk puts to the address of the sender's own destination.
//  * The permute is not in-place and each operand is an array of F64, F32, F16,
//    BF16, S32, S64, U32 or U64: NvshmemCommunicator::P2P puts those types
//    only and fails at run time on any other; the thunk puts whole operands.
//  * Its group (partition ids with a channel id, replica ids without) holds
//    every device of the program, and the static device assignment, when the
//    config has one, runs id i on device i: the thunk puts to an id as the
//    NVSHMEM PE, and PE i is process i, which drives device i (one GPU each).
//  * Every id of the group is the target of exactly one pair. A device with a
//    source waits for its data in a barrier over NVSHMEM_TEAM_SHARED that every
//    PE of the team must enter, and a device without one never enters it: the
//    others would hang. The thunk keeps one source per target.
//
// Which PEs share an NVSHMEM_TEAM_SHARED, and which PE a device is, are known
// only at run time; the thunk's Initialize checks them with CheckIdIsOwnPe,
// CheckBarrierTeamInsideGroup and CheckPairsInsideBarrierTeam.
absl::Status CanRunNvshmemCollectivePermute(
    const HloCollectivePermuteInstruction& permute,
    const HloModuleConfig& config);

// Whether `computation` runs under a conditional's branch, directly or through
// the computations that call it: devices may take different branches, and the
// NVSHMEM thunk puts to the address of the sender's own destination.
bool RunsUnderConditionalBranch(const HloComputation& computation);

// Fails unless `destination`, a buffer the permute writes, is one XLA allocates
// in `collective_color`, the memory space that NVSHMEM's allocator serves: an
// entry parameter (a donated input reused as the output) is the caller's
// memory, outside the symmetric heap, where a put cannot land.
absl::Status CheckNvshmemDestination(const BufferAllocation& destination,
                                     int64_t collective_color);

// Fails when an allocation of `collective_color` among `allocations` may be
// live out. A put lands at the sender's own offset in the symmetric heap, so
// offsets must agree on every PE, and each process serves collective memory
// from its own pool: a buffer that outlives the run is freed when that
// process's caller drops it, after which the processes allocate differently.
absl::Status CheckCollectiveMemoryFreedEachRun(
    absl::Span<const BufferAllocation> allocations, int64_t collective_color);

// Fails unless `id`, this device's id in the permute's group, is `pe`, its
// NVSHMEM PE: the thunk puts to a target id as the PE, so any other PE
// numbering sends the data to other devices.
absl::Status CheckIdIsOwnPe(int64_t id, int64_t pe);

// Fails unless the `team_size` PEs of this PE's NVSHMEM_TEAM_SHARED, those for
// which `is_barrier_peer` holds, are all among the permute's ids
// 0..group_size-1: the receive barrier waits for every PE of the team, and a PE
// outside the group never runs the permute.
absl::Status CheckBarrierTeamInsideGroup(
    int64_t group_size, int64_t team_size,
    absl::FunctionRef<absl::StatusOr<bool>(int64_t)> is_barrier_peer);

// Fails when a (source, target) pair of `pairs` joins a PE for which
// `is_barrier_peer` holds and one for which it does not: the receive barrier
// would not wait for that put, and the receiver would read stale data.
absl::Status CheckPairsInsideBarrierTeam(
    absl::Span<const std::pair<int64_t, int64_t>> pairs,
    absl::FunctionRef<absl::StatusOr<bool>(int64_t)> is_barrier_peer);

}  // namespace xla::gpu

#endif  // XLA_BACKENDS_GPU_RUNTIME_NVSHMEM_PERMUTE_SUPPORT_H_
