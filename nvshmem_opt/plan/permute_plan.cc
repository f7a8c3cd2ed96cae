#include "nvshmem_opt/plan/permute_plan.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "tool_layer/topology_spec.h"
#include "xla/hlo/ir/hlo_casting_utils.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/hlo/ir/hlo_opcode.h"
#include "xla/tsl/platform/errors.h"
#include "xla/tsl/platform/statusor.h"
#include "xla/xla_data.pb.h"

namespace nvshmem_plan {
namespace {

namespace core = ::xla::gpu::backend_selection;
using Rewriter = xla::gpu::PermuteBackendAssigner;
using OpRecord = PermutePlan::OpRecord;

std::string ModeledUs(const core::ToolDecision& d) {
  std::string out;
  for (int b = 0; b < core::kNumBackends; ++b) {
    const auto backend = static_cast<core::Backend>(b);
    if (!d.TimeUs(backend)) continue;
    absl::StrAppendFormat(&out, "%s%s=%.3f", out.empty() ? "" : ",",
                          core::BackendName(backend), *d.TimeUs(backend));
  }
  return out;
}

// Records the decision in the op's frontend attributes; true if changed.
bool Annotate(xla::HloInstruction* instr, const OpRecord& record) {
  xla::FrontendAttributes attributes = instr->frontend_attributes();
  auto& map = *attributes.mutable_map();
  bool changed = false;
  for (const auto& [key, value] :
       {std::pair<absl::string_view, std::string>{
            kNvshmemPlanAttr, core::BackendName(record.decision.backend)},
        {kNvshmemReasonAttr, record.decision.reason},
        {kNvshmemModeledAttr, ModeledUs(record.decision)}}) {
    auto it = map.find(std::string(key));
    if (it == map.end() || it->second != value) {
      map[std::string(key)] = value;
      changed = true;
    }
  }
  if (changed) instr->set_frontend_attributes(attributes);
  return changed;
}

// Why the pass leaves this permute alone (it does not say).
std::string WhyLeftAlone(const xla::HloCollectivePermuteInstruction& cp) {
  if (cp.inplace()) return "in-place (dynamic-slice) collective-permute";
  return "wrapped in an async computation (newer XLA's async-start)";
}

// `rewritable`: whether the pass would write this permute's backend.
OpRecord ToRecord(const xla::HloCollectivePermuteInstruction& permute,
                  const core::Topology& topology,
                  const core::PermuteRequest& request, bool rewritable,
                  core::ToolDecision decision) {
  OpRecord record;
  record.decision = std::move(decision);
  record.computation = std::string(permute.parent()->name());
  record.instruction = std::string(permute.name());
  record.form =
      permute.opcode() == xla::HloOpcode::kCollectivePermute ? "sync" : "async";
  record.bytes = request.bytes;
  record.pairs = permute.source_target_pairs();
  record.buffers = request.buffers;
  for (const auto& [src, dst] : request.device_edges) {
    record.edges.emplace_back(src, dst, topology.Classify(src, dst));
  }
  if (!rewritable) {
    record.skipped = true;
    record.decision.reason =
        absl::StrCat("not rewritten: ", WhyLeftAlone(permute),
                     "; model: ", record.decision.reason);
  }
  return record;
}

// A permute the user marked keeps its mark (core::KeepUserMark); a mark that
// names no mode fails, as the patched XLA's compile does.
absl::Status KeepUserMark(const xla::HloInstruction& permute,
                          OpRecord& record) {
  std::optional<std::string> mark =
      permute.get_frontend_attribute(std::string(core::kModeAttribute));
  if (!mark.has_value()) return absl::OkStatus();
  // The tools' own earlier choice, not a user's: decided again.
  if (permute.get_frontend_attribute(std::string(core::kToolsModeAttribute)) ==
      mark) {
    return absl::OkStatus();
  }
  if (absl::Status bad = core::CheckUserMark(*mark); !bad.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("%", permute.name(), ": ", bad.message()));
  }
  record.user_mark = *mark;
  core::KeepUserMark(*mark, record.decision);
  return absl::OkStatus();
}

// Why the core refuses `backend`, the one the op carries, where it sits:
// decided over NCCL and it alone, so that only its rules can refuse it,
// never its cost or the offered set.
std::optional<core::ToolRefusal> CarriedRefusal(
    const core::Topology& topology, core::ToolCostTable table,
    const core::PermuteRequest& request, core::Place place,
    core::Backend backend) {
  if (backend == core::Backend::kNccl) return std::nullopt;
  table.backends = {core::Backend::kNccl, backend};
  return core::Decide(topology, table, request, place)
      .refused[static_cast<int>(backend)];
}

}  // namespace

PermutePlan::PermutePlan(Options options) : options_(std::move(options)) {
  table_ = options_.table;
  topology_ = options_.topology;
  if (!options_.decide_only && !options_.write_backend) {
    status_ = absl::InvalidArgumentError("no backend writer");
  }
  Rewriter::Options cluster;
  cluster.num_devices_per_host = options_.devices_per_host;
  std::optional<core::Topology> core_topology;
  if (topology_) core_topology = *topology_;
  pass_ = std::make_unique<Rewriter>(table_.core, std::move(core_topology),
                                     cluster);
}

absl::StatusOr<core::Topology> PermutePlan::TopologyFor(
    const xla::HloModule& module) const {
  TF_RETURN_IF_ERROR(status_);
  if (topology_) return *topology_;
  // A derived topology states no process layout: the backend set's default.
  TF_ASSIGN_OR_RETURN(core::Topology derived, pass_->TopologyFor(module));
  return core::WithDefaultProcesses(derived, table_.backends);
}

absl::StatusOr<bool> PermutePlan::Run(xla::HloModule* module) {
  records_.clear();
  TF_RETURN_IF_ERROR(status_);
  TF_ASSIGN_OR_RETURN(core::Topology topology, TopologyFor(*module));
  Rewriter::Options cluster;
  cluster.num_devices_per_host = options_.devices_per_host;
  Rewriter pass(table_.core, topology, cluster);
  const LoopNests loop_nests(*module);
  pass.set_permute_step(
      [&](const core::Topology& on, Rewriter::PermuteSite& site) {
        return Step(on, site, loop_nests);
      });
  return pass.Run(module);
}

absl::StatusOr<bool> PermutePlan::Step(const core::Topology& topology,
                                       Rewriter::PermuteSite& site,
                                       const LoopNests& loop_nests) {
  xla::HloCollectivePermuteInstruction* permute = site.permute;
  core::PermuteRequest& request = site.request;
  if (options_.read_destinations) {
    request.destinations = options_.read_destinations(*permute);
  }
  const core::Place place =
      core::PlaceOf(site.under_conditional_branch, site.in_collectives_group);
  OpRecord record = ToRecord(*permute, topology, request, site.rewritable,
                             core::Decide(topology, table_, request, place));
  record.loops = loop_nests.Of(*permute->parent());
  if (options_.read_backend) {
    record.current = options_.read_backend(*permute);
    if (record.current) {
      record.current_refusal =
          CarriedRefusal(topology, table_, request, place, *record.current);
    }
  }
  TF_RETURN_IF_ERROR(KeepUserMark(*permute, record));
  bool changed = false;
  // A user's mark is law: its permute keeps the config it has.
  if (!record.skipped && record.user_mark.empty() && !options_.decide_only) {
    TF_ASSIGN_OR_RETURN(
        changed, options_.write_backend(permute, record.decision.backend));
  }
  if (options_.annotate) changed |= Annotate(permute, record);
  records_.push_back(std::move(record));
  return changed;
}

}  // namespace nvshmem_plan
