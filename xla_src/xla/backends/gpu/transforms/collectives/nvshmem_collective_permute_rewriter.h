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

#ifndef XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_COLLECTIVE_PERMUTE_REWRITER_H_
#define XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_COLLECTIVE_PERMUTE_REWRITER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_backend_selection.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/pass/hlo_pass_interface.h"

namespace xla {
namespace gpu {

// Chooses NCCL (the DEFAULT backend) or NVSHMEM for each collective-permute
// and writes it into the op's collective_backend_config. Each source-target
// edge is classified by the link it crosses (same host, an NVLink domain over
// several hosts, or the network) and priced per backend by the cost model of
// nvshmem_backend_selection.h; NCCL stays unless NVSHMEM is modeled faster.
// NVSHMEM is never chosen when a device of the program receives nothing: XLA's
// NVSHMEM permute ends with a barrier that only receiving devices call.
//
// Runs after the collective combiners (it prices combined messages) and
// before AsyncCollectiveCreator, which copies the config onto the start and
// done. When it runs, CollectiveBackendAssigner leaves permutes to it.
// In-place permutes and permutes inside async computations are left alone.
class NvshmemCollectivePermuteRewriter : public HloModulePass {
 public:
  struct Options {
    // The cluster as the compiler knows it (CompileOptions::gpu_topology or
    // the fast-interconnect slice size): GPUs per host and devices per NVLink
    // domain, 0 when unknown.
    int64_t num_devices_per_host = 0;
    int64_t slice_size = 0;
    // Overrides: a topology spec (Topology::Parse) in place of the above, and
    // a cost table file (ParseCostTable) in place of the built-in table.
    std::string topology_spec;
    std::string cost_table_path;
  };

  // One permute's decision.
  struct PermuteDecision {
    HloCollectivePermuteInstruction* permute;
    bool rewritable;  // False for permutes the pass leaves alone.
    nvshmem_selection::PermuteRequest request;
    nvshmem_selection::Decision decision;
  };

  // Parses and reads what `options` name: InvalidArgument when a value is
  // bad, the file system's error when the table cannot be read.
  static absl::StatusOr<std::unique_ptr<NvshmemCollectivePermuteRewriter>>
  Create(const Options& options);

  // Decides with `cost_table`, on `topology` when given, else on the cluster
  // of `options` holding the module's devices.
  NvshmemCollectivePermuteRewriter(
      nvshmem_selection::CostTable cost_table,
      std::optional<nvshmem_selection::Topology> topology,
      const Options& options);

  absl::string_view name() const override {
    return "nvshmem-collective-permute-rewriter";
  }

  // The topology decisions on `module` are made on.
  absl::StatusOr<nvshmem_selection::Topology> TopologyFor(
      const HloModule& module) const;

  // The decision for every collective-permute, in post order; changes
  // nothing.
  absl::StatusOr<std::vector<PermuteDecision>> Decide(
      const HloModule& module,
      const absl::flat_hash_set<absl::string_view>& execution_threads = {})
      const;

 protected:
  absl::StatusOr<bool> RunImpl(
      HloModule* module,
      const absl::flat_hash_set<absl::string_view>& execution_threads) override;

 private:
  nvshmem_selection::CostTable cost_table_;
  std::optional<nvshmem_selection::Topology> topology_;
  int64_t num_devices_per_host_;
  int64_t slice_size_;
};

}  // namespace gpu
}  // namespace xla

#endif  // XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_COLLECTIVE_PERMUTE_REWRITER_H_
