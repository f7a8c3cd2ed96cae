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
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_backend_selection.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/pass/hlo_pass_interface.h"

namespace xla {
namespace gpu {

// Chooses the backend of every collective-permute, per op, from a model of
// the cluster topology and of each backend's cost (nvshmem_backend_selection.h
// holds the model and the rule), and writes it into the op's
// GpuBackendConfig, as CollectiveBackendAssigner does.
//
// Ring attention rotates K/V blocks with a collective-permute inside a while
// loop: frequent and on the critical path. Upstream's assigner gives NVSHMEM
// to every permute whose devices share a host (or slice); this pass instead
//   * classifies every source->target edge (same host, an NVLink domain that
//     spans hosts as in NVL72, or the network) and prices each backend of the
//     target XLA's set: "nccl,nvshmem" (the default) or "nccl,peer[,symmetric]"
//     for XLA versions that write collective_backend_config.collectives_mode;
//   * keeps NCCL (DEFAULT) unless another backend is modeled faster by the
//     table's margin;
//   * never plans NVSHMEM where XLA's NVSHMEM permute would hang: its runtime
//     ends each buffer with a barrier over every device of the program that
//     only devices with a source reach, so a permute in which some device
//     receives nothing (a non-cyclic shift, a subset of devices) stays NCCL.
//
// The pass runs after the collective-permute combiner and before
// AsyncCollectiveCreator, which makes the permute asynchronous and copies the
// config onto the start and the done. A collective-permute-start that already
// exists gets its backend in place. In-place (dynamic-slice) permutes and
// permutes wrapped in an async computation are left alone, with the reason.
//
// Before (8 GPUs of one host):
//   cp = bf16[4096,8,128] collective-permute(k), channel_id=1,
//        source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}
// After:
//   cp = bf16[4096,8,128] collective-permute(k), channel_id=1,
//        source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}},
//        backend_config={"collective_backend_config":{"backend":"NVSHMEM"}}
//
// Decisions are logged (VLOG(1)) and kept in records(); with `annotate` they
// are also written to frontend attributes (_nvshmem_plan, _nvshmem_reason,
// _nvshmem_modeled_us), which change the module's fingerprint, so only on
// request. Running the pass twice changes nothing the second time.
class NvshmemCollectivePermuteRewriter : public HloModulePass {
 public:
  // Writes the chosen backend into a permute's backend config; returns
  // whether the config changed.
  using BackendWriter = std::function<absl::StatusOr<bool>(
      HloInstruction*, nvshmem_selection::Backend)>;

  struct Options {
    // Topology spec (nvshmem_selection::Topology::Parse), e.g. "1x2x4" or
    // "1x9x8:nvl72"; it overrides what XLA knows. Empty: hosts of
    // `devices_per_host` GPUs holding every device of the module (partitions
    // x replicas), placed by its static device assignment when it has one.
    std::string topology;
    // GPUs per host (one NVLink domain each), used when `topology` is empty.
    int devices_per_host = 0;
    // Cost table text (nvshmem_selection::ParseCostTable); when empty, the
    // file at cost_table_path; when both are empty, the defaults.
    std::string cost_table;
    std::string cost_table_path;
    // Backends the target XLA runs (nvshmem_selection::ParseBackendSet):
    // "nccl,nvshmem" or "nccl,peer[,symmetric]". Empty: the table's set
    // (by default nccl,nvshmem).
    std::string backends;
    // Also record each decision in the op's frontend attributes.
    bool annotate = false;
    // Decide (and annotate) only: leave backend configs as they are.
    bool decide_only = false;
    // Default (null): through backend_config<GpuBackendConfig>(), which
    // knows DEFAULT and NVSHMEM. A build whose modules come from a newer XLA
    // may supply one that also writes collectives_mode.
    BackendWriter write_backend;
  };

  // What the pass saw and decided for one collective-permute.
  struct OpRecord {
    std::string computation;
    std::string instruction;
    std::string form;  // "sync" or "async"
    int64_t bytes = 0;
    std::vector<std::pair<int64_t, int64_t>> pairs;
    nvshmem_selection::Decision decision;
    bool skipped = false;  // Not eligible; the reason says why.
  };

  // Options are checked here; a bad spec, table or backend set makes Run
  // return InvalidArgument.
  explicit NvshmemCollectivePermuteRewriter(Options options);

  absl::string_view name() const override {
    return "nvshmem-collective-permute-rewriter";
  }

  // Records of the last run, in module order.
  const std::vector<OpRecord>& records() const { return records_; }

  // The topology the pass decides on for `module`: the spec of the options
  // when given, else the one derived from the module (see Options::topology).
  // Tools that report or compare decisions ask here rather than derive it
  // again.
  absl::StatusOr<nvshmem_selection::Topology> TopologyFor(
      const HloModule& module) const;

 protected:
  absl::StatusOr<bool> RunImpl(
      HloModule* module,
      const absl::flat_hash_set<absl::string_view>& execution_threads) override;

 private:
  absl::StatusOr<OpRecord> Decide(const HloCollectivePermuteInstruction& cp,
                                  const nvshmem_selection::Topology& topology,
                                  const HloModuleConfig& config) const;
  absl::StatusOr<bool> Apply(HloCollectivePermuteInstruction* cp,
                             const OpRecord& record) const;

  Options options_;
  absl::Status init_status_;
  std::optional<nvshmem_selection::Topology> topology_;
  nvshmem_selection::CostTable cost_table_;
  std::vector<OpRecord> records_;
};

// Frontend attribute keys the pass writes when annotating.
inline constexpr absl::string_view kNvshmemPlanAttr = "_nvshmem_plan";
inline constexpr absl::string_view kNvshmemReasonAttr = "_nvshmem_reason";
inline constexpr absl::string_view kNvshmemModeledAttr = "_nvshmem_modeled_us";

}  // namespace gpu
}  // namespace xla

#endif  // XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_COLLECTIVE_PERMUTE_REWRITER_H_
