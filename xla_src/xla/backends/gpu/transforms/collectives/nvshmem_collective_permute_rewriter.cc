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

#include "xla/backends/gpu/transforms/collectives/nvshmem_collective_permute_rewriter.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/log/log.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_backend_selection.h"
#include "xla/hlo/ir/hlo_casting_utils.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/ir/hlo_opcode.h"
#include "xla/service/computation_placer.h"
#include "xla/service/gpu/backend_configs.pb.h"
#include "xla/shape.h"
#include "xla/shape_util.h"
#include "xla/tsl/platform/errors.h"
#include "xla/tsl/platform/statusor.h"
#include "xla/xla_data.pb.h"

namespace xla {
namespace gpu {
namespace {

namespace sel = nvshmem_selection;
using OpRecord = NvshmemCollectivePermuteRewriter::OpRecord;

// The in-tree writer: the backend through the proto, as
// CollectiveBackendAssigner writes it. This XLA's CollectiveBackendConfig has
// DEFAULT and NVSHMEM only.
absl::StatusOr<bool> WriteBackendThroughProto(HloInstruction* instr,
                                              sel::Backend backend) {
  if (backend != sel::Backend::kNccl && backend != sel::Backend::kNvshmem) {
    return absl::InvalidArgumentError(absl::StrCat(
        instr->name(), ": this XLA's CollectiveBackendConfig cannot express ",
        sel::BackendName(backend), " (it has DEFAULT and NVSHMEM only)"));
  }
  const auto wanted = backend == sel::Backend::kNvshmem
                          ? CollectiveBackendConfig::NVSHMEM
                          : CollectiveBackendConfig::DEFAULT;
  TF_ASSIGN_OR_RETURN(GpuBackendConfig config,
                      instr->backend_config<GpuBackendConfig>());
  if (config.has_collective_backend_config() &&
      config.collective_backend_config().backend() == wanted) {
    return false;
  }
  config.mutable_collective_backend_config()->set_backend(wanted);
  TF_RETURN_IF_ERROR(instr->set_backend_config(config));
  return true;
}

int64_t MessageBytes(const HloInstruction& instr) {
  int64_t bytes = 0;
  for (const HloInstruction* operand : instr.operands()) {
    ShapeUtil::ForEachSubshape(
        operand->shape(), [&](const Shape& subshape, const ShapeIndex&) {
          if (subshape.IsArray()) {
            bytes += ShapeUtil::ByteSizeOfElements(subshape);
          }
        });
  }
  return bytes;
}

std::string ModeledUs(const sel::Decision& d) {
  std::string out;
  for (int b = 0; b < sel::kNumBackends; ++b) {
    if (d.backend_us[b] < 0) continue;
    absl::StrAppendFormat(&out, "%s%s=%.3f", out.empty() ? "" : ",",
                          sel::BackendName(static_cast<sel::Backend>(b)),
                          d.backend_us[b]);
  }
  return out;
}

// Records the decision in the op's frontend attributes; true if changed.
bool Annotate(HloInstruction* instr, const OpRecord& record) {
  FrontendAttributes attributes = instr->frontend_attributes();
  auto& map = *attributes.mutable_map();
  bool changed = false;
  for (const auto& [key, value] :
       {std::pair<absl::string_view, std::string>{
            kNvshmemPlanAttr, sel::BackendName(record.decision.backend)},
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

// Why the pass leaves this permute alone, or nullopt.
std::optional<std::string> WhyNotEligible(
    const HloCollectivePermuteInstruction& cp) {
  if (cp.inplace()) return "in-place (dynamic-slice) collective-permute";
  if (cp.parent()->IsAsyncComputation()) {
    return "wrapped in an async computation (newer XLA's async-start)";
  }
  return std::nullopt;
}

std::vector<HloCollectivePermuteInstruction*> CollectPermutes(
    HloModule* module,
    const absl::flat_hash_set<absl::string_view>& execution_threads) {
  std::vector<HloCollectivePermuteInstruction*> permutes;
  for (HloComputation* computation :
       module->MakeNonfusionComputations(execution_threads)) {
    for (HloInstruction* instr : computation->MakeInstructionPostOrder()) {
      if (HloPredicateIsOp<HloOpcode::kCollectivePermute,
                           HloOpcode::kCollectivePermuteStart>(instr)) {
        permutes.push_back(Cast<HloCollectivePermuteInstruction>(instr));
      }
    }
  }
  return permutes;
}

absl::StatusOr<std::string> ReadCostTableFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot open the cost table"));
  }
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// The table the options name, with the backend set they give.
absl::StatusOr<sel::CostTable> CostTableFromOptions(
    const NvshmemCollectivePermuteRewriter::Options& options) {
  std::string text = options.cost_table;
  std::string source = "cost table";
  if (text.empty() && !options.cost_table_path.empty()) {
    TF_ASSIGN_OR_RETURN(text, ReadCostTableFile(options.cost_table_path));
    source = options.cost_table_path;
  }
  TF_ASSIGN_OR_RETURN(sel::CostTable table, sel::ParseCostTable(text, source));
  if (!options.backends.empty()) {
    TF_ASSIGN_OR_RETURN(table.backends, sel::ParseBackendSet(options.backends));
  }
  return table;
}

}  // namespace

NvshmemCollectivePermuteRewriter::NvshmemCollectivePermuteRewriter(
    Options options)
    : options_(std::move(options)) {
  if (!options_.write_backend)
    options_.write_backend = WriteBackendThroughProto;
  absl::StatusOr<sel::CostTable> table = CostTableFromOptions(options_);
  if (!table.ok()) {
    init_status_ = table.status();
    return;
  }
  cost_table_ = *std::move(table);
  if (!options_.topology.empty()) {
    absl::StatusOr<sel::Topology> topology =
        sel::Topology::Parse(options_.topology);
    if (topology.ok()) {
      topology_ = *std::move(topology);
    } else {
      init_status_ = topology.status();
    }
  }
}

// The spec when given; else what XLA knows: hosts of devices_per_host GPUs
// (one NVLink domain each) holding every device of the module, placed as the
// module's static device assignment says when it has one.
absl::StatusOr<sel::Topology> NvshmemCollectivePermuteRewriter::TopologyFor(
    const HloModule& module) const {
  TF_RETURN_IF_ERROR(init_status_);  // A bad spec is not a derived topology.
  if (topology_.has_value()) return *topology_;
  const int per_host = options_.devices_per_host;
  if (per_host < 1) {
    return absl::InvalidArgumentError(
        "no topology: give a topology spec or the devices per host");
  }
  const HloModuleConfig& config = module.config();
  int64_t devices = int64_t{config.num_partitions()} * config.replica_count();
  std::vector<int> placement;  // Logical r + p * replicas -> device.
  if (config.has_static_device_assignment()) {
    const DeviceAssignment& assignment = config.static_device_assignment();
    if (assignment.replica_count() != config.replica_count() ||
        assignment.computation_count() != config.num_partitions()) {
      return absl::InvalidArgumentError(
          "the device assignment does not match partitions x replicas");
    }
    for (int p = 0; p < config.num_partitions(); ++p) {
      for (int r = 0; r < config.replica_count(); ++r) {
        const int64_t device = assignment(r, p);
        if (device < 0 || device >= (int64_t{1} << 30)) {
          return absl::InvalidArgumentError(
              absl::StrCat("the device assignment names device ", device));
        }
        placement.push_back(static_cast<int>(device));
        devices = std::max(devices, device + 1);
      }
    }
  }
  const int64_t hosts = (devices + per_host - 1) / per_host;
  if (hosts > (1 << 20)) {
    return absl::InvalidArgumentError("too many devices for a topology");
  }
  return sel::Topology::Create(1, static_cast<int>(hosts), per_host, per_host,
                               std::move(placement));
}

absl::StatusOr<OpRecord> NvshmemCollectivePermuteRewriter::Decide(
    const HloCollectivePermuteInstruction& cp, const sel::Topology& topology,
    const HloModuleConfig& config) const {
  OpRecord record;
  record.computation = std::string(cp.parent()->name());
  record.instruction = std::string(cp.name());
  record.form = cp.opcode() == HloOpcode::kCollectivePermute ? "sync" : "async";
  record.bytes = MessageBytes(cp);
  record.pairs = cp.source_target_pairs();
  absl::StatusOr<std::vector<std::pair<int, int>>> edges =
      sel::EdgeIdsToDevices(topology, record.pairs, cp.channel_id().has_value(),
                            config.num_partitions(), config.replica_count());
  if (!edges.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": ", cp.name(), ": ", edges.status().message()));
  }
  sel::PermuteRequest request;
  request.bytes = record.bytes;
  request.device_edges = *std::move(edges);
  // NVSHMEM's barrier spans every device of the program.
  request.team_size = config.num_partitions() * config.replica_count();
  request.buffers = static_cast<int>(cp.operand_count());
  record.decision = sel::Decide(topology, cost_table_, request);
  if (std::optional<std::string> why = WhyNotEligible(cp)) {
    record.skipped = true;
    record.decision.reason = absl::StrCat("not rewritten: ", *why,
                                          "; model: ", record.decision.reason);
  }
  return record;
}

absl::StatusOr<bool> NvshmemCollectivePermuteRewriter::Apply(
    HloCollectivePermuteInstruction* cp, const OpRecord& record) const {
  bool changed = false;
  if (!record.skipped && !options_.decide_only) {
    TF_ASSIGN_OR_RETURN(changed,
                        options_.write_backend(cp, record.decision.backend));
  }
  if (options_.annotate) changed |= Annotate(cp, record);
  return changed;
}

absl::StatusOr<bool> NvshmemCollectivePermuteRewriter::RunImpl(
    HloModule* module,
    const absl::flat_hash_set<absl::string_view>& execution_threads) {
  records_.clear();
  TF_RETURN_IF_ERROR(init_status_);
  TF_ASSIGN_OR_RETURN(sel::Topology topology, TopologyFor(*module));
  bool changed = false;
  for (HloCollectivePermuteInstruction* cp :
       CollectPermutes(module, execution_threads)) {
    TF_ASSIGN_OR_RETURN(OpRecord record,
                        Decide(*cp, topology, module->config()));
    VLOG(1) << name() << ": " << cp->name() << ": "
            << sel::BackendName(record.decision.backend) << ": "
            << record.decision.reason;
    TF_ASSIGN_OR_RETURN(bool op_changed, Apply(cp, record));
    changed |= op_changed;
    records_.push_back(std::move(record));
  }
  return changed;
}

}  // namespace gpu
}  // namespace xla
