// The tools' decision over a backend set (decide.cc): the core's Decide over
// NVSHMEM, peer and symmetric with the tools' own rules (the offered set, NCCL
// signals, the program's layout, where a permute sits), the refusals and the
// one-line reason in words, and a user's _xla_collectives_mode mark.

#ifndef NVSHMEM_TOOL_LAYER_DECIDE_H_
#define NVSHMEM_TOOL_LAYER_DECIDE_H_

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "tool_layer/backends.h"
#include "xla/backends/gpu/transforms/collectives/backend_cost_table.h"
#include "xla/backends/gpu/transforms/collectives/cluster_topology.h"
#include "xla/backends/gpu/transforms/collectives/permute_backend_selection.h"

namespace xla::gpu::backend_selection {

// Why a backend may not run a permute: one of the core's rules (its
// RefusalKind and details), or a rule only the tools know.
enum class ToolRule {
  kNone,                   // The core's rule.
  kNotOffered,             // The target XLA does not offer it (`offered`).
  kNoSignals,              // Symmetric memory without NCCL signals.
  kInGroup,                // NVSHMEM in a collectives group.
  kUnderBranch,            // Under a conditional's branch.
  kSeveralGpusPerProcess,  // NVSHMEM where a process drives `count` GPUs.
  kPlacementUnknown,       // No map, and the program spans `count` processes
                      // over `total` hosts: where each device runs decides.
};
struct ToolRefusal : Refusal {
  Backend backend = Backend::kNccl;
  ToolRule tool_rule = ToolRule::kNone;
  int gpus_per_process = 0;
  std::vector<Backend> offered;
};

std::string RefusalText(const ToolRefusal& refusal);

// What the program's layout refuses a one-sided backend, or nullopt: NVSHMEM
// where a process drives several GPUs, and any of them where no map says
// which device runs each logical device while the program spans several
// processes or hosts (then every edge's class and process, and NVSHMEM's PE
// for each id, rest on the unknown order).
std::optional<ToolRefusal> LayoutRefusal(const Topology& topology,
                                         const PermuteRequest& request,
                                         Backend backend);

// A refusal of the core's (NvshmemHang, NvshmemPeMismatch, ...) as the tools
// say it: of `backend`, in a layout of `gpus_per_process` GPUs per process.
ToolRefusal AsToolRefusal(const Refusal& refusal,
                          Backend backend = Backend::kNvshmem,
                          int gpus_per_process = 0);

enum class Verdict {
  kNoEdges,        // Nothing to move: NCCL.
  kNoAlternative,  // No alternative allowed: NCCL.
  kZeroCost,       // NCCL modeled at 0: NCCL.
  kWithinMargin,   // The fastest alternative does not beat NCCL by the margin.
  kAlternative,    // The fastest alternative wins.
};

// The core's decision (backend, NCCL's time, each alternative's time or
// refusal) with what the tools add: the verdict, every backend's refusal
// including the tools' own rules, the edge counts and the one-line reason.
struct ToolDecision : Decision {
  Verdict verdict = Verdict::kNoEdges;
  std::optional<Backend> fastest_alternative;
  std::array<std::optional<ToolRefusal>, kNumBackends> refused;
  std::array<int, kNumLinkClasses> edges_by_class = {0, 0, 0, 0};
  std::string reason;  // One line.

  // A backend's modeled time: NCCL's always, another's unless refused.
  std::optional<double> TimeUs(Backend backend) const {
    if (backend == Backend::kNccl) return nccl_us;
    return us[static_cast<int>(backend)];
  }
  double ChosenUs() const { return *TimeUs(backend); }
};

// Where a permute sits, as far as the patched XLAs' rules go: NVSHMEM's thunk
// cannot run in a collectives group, and no one-sided backend under a
// conditional's branch, where devices may run other permutes.
enum class Place { kAnywhere, kCollectivesGroup, kConditionalBranch };

// The place of a permute whose computation runs under a conditional's branch
// and/or in a collectives group: the branch's, which refuses more, where both.
// Every caller (the tools' step, the binding's users) asks this one rule.
Place PlaceOf(bool under_conditional_branch, bool in_collectives_group);

// The core's rule over NVSHMEM, peer and symmetric: the fastest allowed
// alternative when it beats NCCL by the margin (ties to the first).
ToolDecision Decide(const Topology& topology, const ToolCostTable& table,
                    const PermuteRequest& request,
                    Place place = Place::kAnywhere);

// A user's _xla_collectives_mode mark is law: the decision becomes the mark's
// backend (peer or symmetric where the core models it, else NCCL, private's
// path: where the permute cannot run the mode, XLA keeps the flag's, private by
// default), and the reason says so.
void KeepUserMark(absl::string_view mark, ToolDecision& decision);

// The frontend attribute that names a permute's mode (the patched XLA's
// assigner reads it), and the one the tools write beside it with the same value
// when the mode is their own choice: an _xla_collectives_mode that the second
// matches is the tools' choice, which a later run decides again; any other is
// the user's mark, which is law.
inline constexpr absl::string_view kModeAttribute = "_xla_collectives_mode";
inline constexpr absl::string_view kToolsModeAttribute = "_nvshmem_opt_mode";

// The mode word a mark names, lower case, as the patched assigner parses it:
// comma-joined parts (a combiner joins its permutes' values), each a backend's
// mode attribute in any case, all the same; nullopt where none or two.
std::optional<std::string> MarkWord(absl::string_view mark);

// InvalidArgument, naming the value, for a mark that names no collectives mode
// (MarkWord): the patched XLA's assigner fails such a compile, and no XLA runs
// it, so every tool refuses it too.
absl::Status CheckUserMark(absl::string_view mark);

}  // namespace xla::gpu::backend_selection

#endif  // NVSHMEM_TOOL_LAYER_DECIDE_H_
