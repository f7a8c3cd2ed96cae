// The tools' run of the one pass that decides permutes,
// PermuteBackendAssigner (core/), with a step for each permute it meets
// (PermuteBackendAssigner::set_permute_step) that adds what the tools
// add and XLA does not get, for the out-of-tree tools (nvshmem-opt, its
// fuzzer):
//   * Records of every decision (op, form, bytes, pairs, the model's times
//     and reason) for reports, and a decide-only mode that leaves the module.
//   * Decisions written to frontend attributes (_nvshmem_plan, ...) on
//     request; they change the module's fingerprint, so never by default.
//   * The peer and symmetric backends of newer XLA
//     (core/tool_layer/backends.h). The backend is written by a caller-given
//     writer (the driver's edits the JSON text, keeping fields the wheel's
//     proto lacks).
// The pass finds the permutes, in its order, with their requests and places;
// the step decides each through core/tool_layer/ (the core's rule over the
// table's backend set), with the same topology and table.

#ifndef NVSHMEM_PLAN_PERMUTE_PLAN_H_
#define NVSHMEM_PLAN_PERMUTE_PLAN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nvshmem_opt/plan/loop_nest.h"
#include "tool_layer/backends.h"
#include "tool_layer/decide.h"
#include "tool_layer/table_text.h"
#include "xla/backends/gpu/transforms/collectives/permute_backend_assigner.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_module.h"

namespace nvshmem_plan {

class PermutePlan {
 public:
  // Writes the chosen backend into a permute's config; returns whether the
  // config changed.
  using BackendWriter = std::function<absl::StatusOr<bool>(
      xla::HloInstruction*, xla::gpu::backend_selection::Backend)>;

  // Reads the backend a permute already carries from its config; nullopt
  // where the config names none the core knows.
  using BackendReader =
      std::function<std::optional<xla::gpu::backend_selection::Backend>(
          const xla::HloInstruction&)>;

  // What XLA's buffer assignment says of a permute's destinations (empty:
  // nothing known), which the core's NVSHMEM rule reads.
  using DestinationReader =
      std::function<std::vector<xla::gpu::backend_selection::DestinationBuffer>(
          const xla::HloInstruction&)>;

  // Each input already parsed, once, by the caller.
  struct Options {
    // The topology to decide on; none: hosts of `devices_per_host` GPUs
    // holding the module's devices, as the pass derives it.
    std::optional<xla::gpu::backend_selection::Topology> topology;
    int devices_per_host = 0;
    // The cost table, planning over its backend set.
    xla::gpu::backend_selection::ToolCostTable table =
        xla::gpu::backend_selection::DefaultToolCostTable();
    bool annotate = false;        // Also write the decision to attributes.
    bool decide_only = false;     // Leave backend configs as they are.
    BackendWriter write_backend;  // Required unless decide_only.
    BackendReader read_backend;   // Optional: records what each op carries.
    DestinationReader read_destinations;  // Optional: none, nothing known.
  };

  // What the pass saw and decided for one collective-permute.
  struct OpRecord {
    std::string computation;
    std::string instruction;
    std::string form;  // "sync" or "async"
    int64_t bytes = 0;
    std::vector<std::pair<int64_t, int64_t>> pairs;
    int buffers = 1;
    // The pairs' devices on the topology and the link between them.
    std::vector<std::tuple<int, int, xla::gpu::backend_selection::LinkClass>>
        edges;
    std::vector<EnclosingLoop> loops;  // Innermost first.
    xla::gpu::backend_selection::ToolDecision decision;
    bool skipped = false;  // Left alone by the pass; the reason says why.
    // The user's _xla_collectives_mode on the permute ("": none), which no
    // tool overrides: the pass writes no backend on a marked permute.
    std::string user_mark;
    // The backend the op carried before the pass (read_backend), and why its
    // runtime may not run it there: the core's refusal, none where it may.
    std::optional<xla::gpu::backend_selection::Backend> current;
    std::optional<xla::gpu::backend_selection::ToolRefusal> current_refusal;
  };

  // Options without a writer (unless decide_only) make Run and TopologyFor
  // return InvalidArgument.
  explicit PermutePlan(Options options);

  // The records of the last Run, in the pass's order.
  const std::vector<OpRecord>& records() const { return records_; }

  absl::StatusOr<xla::gpu::backend_selection::Topology> TopologyFor(
      const xla::HloModule& module) const;

  // Runs the pass on `module` with the tools' step; whether it changed it.
  absl::StatusOr<bool> Run(xla::HloModule* module);

 private:
  // The tools' step for one permute the pass meets.
  absl::StatusOr<bool> Step(
      const xla::gpu::backend_selection::Topology& topology,
      xla::gpu::PermuteBackendAssigner::PermuteSite& site,
      const LoopNests& loop_nests);

  Options options_;
  absl::Status status_;  // Of the options.
  xla::gpu::backend_selection::ToolCostTable table_;
  std::optional<xla::gpu::backend_selection::Topology> topology_;
  // The pass on the options' cluster, for TopologyFor: a derived topology is
  // the pass's own (Run builds one on the topology it resolves).
  std::unique_ptr<xla::gpu::PermuteBackendAssigner> pass_;
  std::vector<OpRecord> records_;
};

// Frontend attribute keys written when annotating.
inline constexpr absl::string_view kNvshmemPlanAttr = "_nvshmem_plan";
inline constexpr absl::string_view kNvshmemReasonAttr = "_nvshmem_reason";
inline constexpr absl::string_view kNvshmemModeledAttr = "_nvshmem_modeled_us";

}  // namespace nvshmem_plan

#endif  // NVSHMEM_PLAN_PERMUTE_PLAN_H_
