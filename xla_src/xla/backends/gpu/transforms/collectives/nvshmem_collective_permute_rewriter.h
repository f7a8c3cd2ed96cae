/* Copyright 2026 The NVSHMEM ring-attention pass authors.

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
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/pass/hlo_pass_interface.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_backend_selection.h"

namespace xla {
namespace gpu {

// Chooses NVSHMEM or NCCL (XLA's DEFAULT collective backend) for every
// collective-permute, from a model of the cluster topology and of each
// backend's cost (see nvshmem_backend_selection.h), and makes the choice
// explicit in the HLO.
//
// Ring attention rotates K/V blocks with a collective-permute inside a while
// loop: small, frequent and on the critical path. On NVLink, NVSHMEM's
// on-stream puts run on copy engines and leave the SMs to the attention
// kernels; across the network only NCCL can carry the data. Unlike upstream's
// CollectiveBackendAssigner (NVSHMEM for intra-node permutes, DEFAULT
// otherwise), this pass looks at every edge: it knows NVLink domains that span
// hosts (NVL72), prices each backend, and can split a permute whose ring
// crosses hosts into an NVSHMEM part and an NCCL part.
//
// Every sync collective-permute becomes a start/done pair carrying the chosen
// backend (in-place dynamic-slice permutes, permutes wrapped in a newer XLA's
// async computation, and nested tuple results are left alone, with the
// reason recorded):
//
//   cp = bf16[4096,8,128] collective-permute(k), channel_id=1,
//        source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
// becomes
//   cp-start = (bf16[4096,8,128], bf16[4096,8,128])
//        collective-permute-start(k), channel_id=1,
//        source_target_pairs={{0,1},{1,2},{2,3},{3,0}},
//        frontend_attributes={_nvshmem_plan="nvshmem",_nvshmem_reason="..."},
//        backend_config={"collective_backend_config":{"backend":"NVSHMEM"}}
//   cp-done = bf16[4096,8,128] collective-permute-done(cp-start)
//
// A collective-permute-start that already exists gets its backend set in
// place. A split produces two start/done pairs with disjoint pairs (NVSHMEM
// for the pairs whose every edge stays in an NVLink domain, DEFAULT for the
// rest) whose results are combined with a select on the partition (or
// replica) id, so every device receives exactly what the original permute
// gave it. A module that is already scheduled is never split: the new
// instructions would lose the overlap the schedule gave the permute. Decisions are recorded in frontend
// attributes (_nvshmem_plan, _nvshmem_reason, _nvshmem_modeled_us) for tools.
//
// Running the pass twice changes nothing the second time.
class NvshmemCollectivePermuteRewriter : public HloModulePass {
 public:
  enum class Mode {
    kRewrite,       // Make permutes async with the chosen backend.
    kAnnotateOnly,  // Only record decisions in frontend attributes.
  };

  struct Options {
    nvshmem_selection::Topology topology;
    nvshmem_selection::CostTable cost_table =
        nvshmem_selection::DefaultCostTable();
    Mode mode = Mode::kRewrite;
  };

  // What the pass saw and decided for one collective-permute.
  struct OpRecord {
    std::string computation;
    std::string instruction;
    std::string form;  // "sync" or "async"
    int64_t bytes = 0;
    std::vector<std::pair<int64_t, int64_t>> pairs;
    nvshmem_selection::Decision decision;
    bool skipped = false;  // Not eligible for rewriting; reason says why.
    std::vector<std::string> new_instructions;
  };

  explicit NvshmemCollectivePermuteRewriter(Options options)
      : options_(std::move(options)) {}

  absl::string_view name() const override {
    return "nvshmem-collective-permute-rewriter";
  }

  // Records of the last run, in module order.
  const std::vector<OpRecord>& records() const { return records_; }

 protected:
  absl::StatusOr<bool> RunImpl(
      HloModule* module,
      const absl::flat_hash_set<absl::string_view>& execution_threads) override;

 private:
  Options options_;
  std::vector<OpRecord> records_;
};

// Frontend attribute keys the pass writes.
inline constexpr absl::string_view kNvshmemPlanAttr = "_nvshmem_plan";
inline constexpr absl::string_view kNvshmemReasonAttr = "_nvshmem_reason";
inline constexpr absl::string_view kNvshmemModeledAttr = "_nvshmem_modeled_us";
inline constexpr absl::string_view kNvshmemSplitPartAttr = "_nvshmem_split_part";

}  // namespace gpu
}  // namespace xla

#endif  // XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_COLLECTIVE_PERMUTE_REWRITER_H_
