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

#include "xla/backends/gpu/transforms/collectives/permute_backend_assigner.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/log/log.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/permute_backend_selection.h"
#include "xla/hlo/ir/hlo_casting_utils.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/ir/hlo_opcode.h"
#include "xla/primitive_util.h"
#include "xla/service/computation_placer.h"
#include "xla/service/gpu/backend_configs.pb.h"
#include "xla/service/hlo_module_config.h"
#include "xla/shape.h"
#include "xla/shape_util.h"
#include "xla/side_effect_util.h"
#include "xla/tsl/platform/env.h"
#include "xla/tsl/platform/errors.h"
#include "xla/tsl/platform/statusor.h"

namespace xla {
namespace gpu {
namespace {

namespace core = backend_selection;

// Writes `backend` into the permute's config; returns whether it changed.
absl::StatusOr<bool> WriteBackend(HloInstruction* instr,
                                  core::Backend backend) {
  const CollectiveBackendConfig::CollectiveBackend wanted =
      backend == core::Backend::kNvshmem ? CollectiveBackendConfig::NVSHMEM
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

// Logical device r + p * replicas -> the device the module's static device
// assignment names; empty without one.
absl::StatusOr<std::vector<int>> Placement(const HloModuleConfig& config) {
  std::vector<int> placement;
  if (!config.has_static_device_assignment()) return placement;
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
    }
  }
  return placement;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PermuteBackendAssigner>>
PermuteBackendAssigner::Create(const Options& options) {
  const int64_t per_host = options.num_devices_per_host;
  if (per_host < 0 || options.slice_size < 0) {
    return absl::InvalidArgumentError(
        "devices per host and slice size must not be negative");
  }
  if (per_host > 0 && options.slice_size > per_host &&
      options.slice_size % per_host != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a slice of ", options.slice_size,
                     " devices is not a whole number of hosts of ", per_host));
  }
  core::CostTable table = core::DefaultCostTable();
  if (!options.cost_table_path.empty()) {
    std::string text;
    TF_RETURN_IF_ERROR(tsl::ReadFileToString(tsl::Env::Default(),
                                             options.cost_table_path, &text));
    TF_ASSIGN_OR_RETURN(table,
                        core::ParseCostTable(text, options.cost_table_path));
  }
  return std::make_unique<PermuteBackendAssigner>(std::move(table),
                                                  std::nullopt, options);
}

PermuteBackendAssigner::PermuteBackendAssigner(
    core::CostTable cost_table, std::optional<core::Topology> topology,
    const Options& options)
    : cost_table_(std::move(cost_table)),
      topology_(std::move(topology)),
      num_devices_per_host_(options.num_devices_per_host),
      slice_size_(options.slice_size),
      num_visible_devices_per_process_(
          options.num_visible_devices_per_process) {}

// Hosts of num_devices_per_host GPUs (else of a slice, else one host), in
// NVLink domains of slice_size devices (else of one host), holding every
// device of the module, placed by its static device assignment.
absl::StatusOr<core::Topology> PermuteBackendAssigner::TopologyFor(
    const HloModule& module) const {
  if (topology_.has_value()) return *topology_;
  const HloModuleConfig& config = module.config();
  TF_ASSIGN_OR_RETURN(std::vector<int> placement, Placement(config));
  int64_t devices = int64_t{config.num_partitions()} * config.replica_count();
  for (int device : placement) devices = std::max<int64_t>(devices, device + 1);
  const int64_t per_host = num_devices_per_host_ > 0 ? num_devices_per_host_
                           : slice_size_ > 0         ? slice_size_
                                                     : devices;
  const int64_t domain = std::max(slice_size_, per_host);
  if (domain % per_host != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a slice of ", slice_size_,
                     " devices is not a whole number of hosts of ", per_host));
  }
  const int64_t hosts = (devices + domain - 1) / domain * (domain / per_host);
  if (hosts * per_host > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("too many devices for a topology");
  }
  return core::Topology::Create(1, static_cast<int>(hosts),
                                static_cast<int>(per_host),
                                static_cast<int>(domain), std::move(placement));
}

bool PermuteBackendAssigner::RunsUnderConditionalBranch(
    const HloComputation& computation) {
  std::vector<const HloComputation*> pending = {&computation};
  absl::flat_hash_set<const HloComputation*> seen;
  while (!pending.empty()) {
    const HloComputation* callee = pending.back();
    pending.pop_back();
    if (callee == nullptr || !seen.insert(callee).second) continue;
    for (const HloInstruction* caller : callee->caller_instructions()) {
      if (caller->opcode() == HloOpcode::kConditional) return true;
      pending.push_back(caller->parent());
    }
  }
  return false;
}

absl::flat_hash_set<const HloComputation*>
PermuteBackendAssigner::CollectivesGroups(const HloModule& module) {
  absl::flat_hash_set<const HloComputation*> groups;
  const std::vector<HloComputation*> callees_first =
      module.MakeComputationPostOrder();
  for (auto it = callees_first.rbegin(); it != callees_first.rend(); ++it) {
    const bool inherited = groups.contains(*it);
    for (const HloInstruction* instr : (*it)->instructions()) {
      if (inherited || (instr->opcode() == HloOpcode::kCall &&
                        instr->frontend_attributes().map().contains(
                            kCollectivesGroupAttr))) {
        groups.insert(instr->called_computations().begin(),
                      instr->called_computations().end());
      }
    }
  }
  return groups;
}

absl::StatusOr<core::PermuteRequest> PermuteBackendAssigner::RequestFor(
    const HloCollectivePermuteInstruction& permute,
    const core::Topology& topology) {
  const HloModuleConfig& config = permute.GetModule()->config();
  core::PermuteRequest request;
  absl::StatusOr<std::vector<std::pair<int, int>>> edges =
      core::EdgeIdsToDevices(topology, permute.source_target_pairs(),
                             permute.channel_id().has_value(),
                             config.num_partitions(), config.replica_count());
  if (!edges.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(permute.name(), ": ", edges.status().message()));
  }
  request.device_edges = *std::move(edges);
  // Every device of the program runs the permute, in groups of its ids.
  request.team_size = config.num_partitions() * config.replica_count();
  request.groups = permute.channel_id().has_value() ? config.replica_count()
                                                    : config.num_partitions();
  request.buffers = static_cast<int>(permute.operand_count());
  request.memcpy_local_p2p =
      config.debug_options().xla_gpu_use_memcpy_local_p2p();
  for (const HloInstruction* operand : permute.operands()) {
    ShapeUtil::ForEachSubshape(operand->shape(), [&](const Shape& subshape,
                                                     const ShapeIndex&) {
      if (!subshape.IsArray()) return;
      request.bytes += ShapeUtil::ByteSizeOfElements(subshape);
      request.element_types.push_back(
          primitive_util::LowercasePrimitiveTypeName(subshape.element_type()));
    });
  }
  return request;
}

absl::StatusOr<bool> PermuteBackendAssigner::RunImpl(
    HloModule* module,
    const absl::flat_hash_set<absl::string_view>& execution_threads) {
  TF_ASSIGN_OR_RETURN(core::Topology topology, TopologyFor(*module));
  std::vector<core::Backend> alternatives = {core::Backend::kNvshmem};
  if (num_visible_devices_per_process_ != 1) {
    VLOG(1) << name() << ": NCCL throughout: this process sees "
            << num_visible_devices_per_process_
            << " GPUs, and NVSHMEM runs only with one GPU per process";
    alternatives.clear();
  }
  const absl::flat_hash_set<const HloComputation*> groups =
      CollectivesGroups(*module);
  bool changed = false;
  for (HloComputation* computation :
       module->MakeNonfusionComputations(execution_threads)) {
    PermuteSite site;
    site.in_collectives_group = groups.contains(computation);
    site.under_conditional_branch = RunsUnderConditionalBranch(*computation);
    // The emitter's rules for where an NVSHMEM permute may sit.
    const bool nccl_only =
        site.in_collectives_group || site.under_conditional_branch;
    for (HloInstruction* instr : computation->MakeInstructionPostOrder()) {
      auto* permute = DynCast<HloCollectivePermuteInstruction>(instr);
      if (permute == nullptr) continue;
      site.permute = permute;
      site.rewritable =
          !permute->inplace() && !computation->IsAsyncComputation();
      if (!site.rewritable && !step_) continue;
      TF_ASSIGN_OR_RETURN(site.request, RequestFor(*permute, topology));
      if (step_) {
        TF_ASSIGN_OR_RETURN(bool step_changed, step_(topology, site));
        changed |= step_changed;
        continue;
      }
      const core::PermuteRequest& request = site.request;
      const core::Decision decision =
          core::Decide(topology, cost_table_, request,
                       nccl_only ? std::vector<core::Backend>() : alternatives);
      VLOG(1) << name() << ": " << permute->name() << ": "
              << core::BackendName(decision.backend) << " (NCCL "
              << decision.nccl_us << " us"
              << (decision.refusals[static_cast<int>(core::Backend::kNvshmem)]
                      ? "; NVSHMEM cannot run it)"
                      : ")");
      TF_ASSIGN_OR_RETURN(bool op_changed,
                          WriteBackend(permute, decision.backend));
      changed |= op_changed;
    }
  }
  return changed;
}

}  // namespace gpu
}  // namespace xla
