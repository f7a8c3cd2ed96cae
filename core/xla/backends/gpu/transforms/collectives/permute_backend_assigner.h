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

#ifndef XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_PERMUTE_BACKEND_ASSIGNER_H_
#define XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_PERMUTE_BACKEND_ASSIGNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/permute_backend_selection.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/pass/hlo_pass_interface.h"

namespace xla {
namespace gpu {

// Chooses NCCL (the DEFAULT backend) or NVSHMEM for each collective-permute
// and writes it into the op's collective_backend_config: NVSHMEM only where
// XLA's NVSHMEM runtime can run the permute (permute_backend_selection.h:
// element types, xla_gpu_use_memcpy_local_p2p, every edge inside one
// NVSHMEM_TEAM_SHARED, a source for each of its members) and the cost model
// prices it below NCCL by the table's margin. A config set before, by
// CollectiveBackendAssigner or by hand, is replaced.
//
// Runs after the collective combiners (it prices combined messages) and
// before AsyncCollectiveCreator, which copies the config onto the start and
// done. In-place permutes and permutes inside async computations are left
// alone; permutes in a collectives group or under a conditional's branch stay
// on NCCL.
//
// The tools run this pass too, with a step of their own for each permute
// (set_permute_step): the walk and the facts it gives (which permutes, in
// which order, each one's request and place) are the pass's alone.
class PermuteBackendAssigner : public HloModulePass {
 public:
  struct Options {
    // The cluster as the compiler knows it: GPUs per host (a flag; XLA's
    // GpuTopology counts processes as hosts) and devices per NVLink domain
    // (the fast-interconnect slice), 0 when unknown.
    int64_t num_devices_per_host = 0;
    int64_t slice_size = 0;
    // A cost table file (ParseCostTable) in place of the built-in table.
    std::string cost_table_path;
    // GPUs this process sees. NVSHMEM's initialisation stops a process that
    // drives more than one (stream_executor/cuda/nvshmem.cc), so NVSHMEM is
    // chosen only when it sees one, as CollectiveBackendAssigner requires.
    int64_t num_visible_devices_per_process = 1;
  };

  // One permute as the pass meets it, with what the pass knows of it.
  struct PermuteSite {
    HloCollectivePermuteInstruction* permute = nullptr;
    backend_selection::PermuteRequest request;
    // Its computation runs under a conditional's branch
    // (RunsUnderConditionalBranch), or in a collectives group
    // (CollectivesGroups): the emitter's places for NCCL only.
    bool under_conditional_branch = false;
    bool in_collectives_group = false;
    // Whether the pass writes its backend: not in place, not inside an async
    // computation.
    bool rewritable = false;
  };

  // A tool's step for each permute, in place of the pass's own (which decides
  // NCCL or NVSHMEM for a rewritable permute and writes it); returns whether
  // it changed the module. It meets every permute, rewritable or not.
  using PermuteStep = std::function<absl::StatusOr<bool>(
      const backend_selection::Topology&, PermuteSite&)>;
  void set_permute_step(PermuteStep step) { step_ = std::move(step); }

  // Reads what `options` name: InvalidArgument when a value is bad, the file
  // system's error when the table cannot be read.
  static absl::StatusOr<std::unique_ptr<PermuteBackendAssigner>> Create(
      const Options& options);

  // Decides with `cost_table`, on `topology` when given, else on the cluster
  // of `options` holding the module's devices.
  PermuteBackendAssigner(backend_selection::CostTable cost_table,
                         std::optional<backend_selection::Topology> topology,
                         const Options& options);

  absl::string_view name() const override { return "permute-backend-assigner"; }

  // The topology the module's permutes are decided on.
  absl::StatusOr<backend_selection::Topology> TopologyFor(
      const HloModule& module) const;

  // Computations that a call marked kCollectivesGroupAttr runs as one group,
  // with all they call: the group's thunk needs NCCL communicators.
  static absl::flat_hash_set<const HloComputation*> CollectivesGroups(
      const HloModule& module);

  // Whether `computation` runs under a conditional's branch, directly or
  // through the computations that call it: devices may take different
  // branches, and the NVSHMEM thunk puts to the address of the sender's own
  // destination (the emitter's rule, nvshmem_permute_support in the series).
  static bool RunsUnderConditionalBranch(const HloComputation& computation);

  // What `permute` asks of a backend on `topology`.
  static absl::StatusOr<backend_selection::PermuteRequest> RequestFor(
      const HloCollectivePermuteInstruction& permute,
      const backend_selection::Topology& topology);

 protected:
  absl::StatusOr<bool> RunImpl(
      HloModule* module,
      const absl::flat_hash_set<absl::string_view>& execution_threads) override;

 private:
  backend_selection::CostTable cost_table_;
  std::optional<backend_selection::Topology> topology_;
  int64_t num_devices_per_host_;
  int64_t slice_size_;
  int64_t num_visible_devices_per_process_;
  PermuteStep step_;  // Empty: the pass's own.
};

}  // namespace gpu
}  // namespace xla

#endif  // XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_PERMUTE_BACKEND_ASSIGNER_H_
