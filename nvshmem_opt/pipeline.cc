#include "nvshmem_opt/pipeline.h"

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "nvshmem_opt/backend_config_json.h"
#include "nvshmem_opt/hlo_splice.h"
#include "nvshmem_opt/readable_text.h"
#include "xla/hlo/ir/hlo_casting_utils.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/hlo/parser/hlo_parser.h"
#include "xla/hlo/transforms/collectives/async_collective_creator.h"
#include "xla/service/gpu/backend_configs.pb.h"
#include "xla/service/gpu/transforms/collectives/collective_backend_assigner.h"
#include "xla/stream_executor/cuda/cuda_compute_capability.h"

namespace nvshmem_opt {
namespace {

namespace core = ::xla::gpu::backend_selection;

bool IsPermute(const xla::HloInstruction* instr) {
  return instr->opcode() == xla::HloOpcode::kCollectivePermute ||
         instr->opcode() == xla::HloOpcode::kCollectivePermuteStart;
}

// What XLA's compiler does after the pass: AsyncCollectiveCreator turns each
// sync permute the pass wrote into a start/done pair carrying its config.
// The done takes the permute's name. Returns the new names by that name.
absl::StatusOr<std::map<std::string, std::vector<std::string>>> MakeAsync(
    xla::HloModule* module, const std::vector<Plan::OpRecord>& records) {
  std::map<std::string, const Plan::OpRecord*> by_name;
  for (const Plan::OpRecord& r : records) {
    if (r.form == "sync" && !r.skipped) by_name[r.instruction] = &r;
  }
  // The start keeps the permute's operands: that is how it is found again.
  using Key = std::pair<const xla::HloComputation*,
                        std::vector<const xla::HloInstruction*>>;
  std::map<Key, std::string> names;
  absl::flat_hash_set<const xla::HloInstruction*> convert;
  for (xla::HloComputation* computation : module->computations()) {
    for (xla::HloInstruction* instr : computation->instructions()) {
      if (instr->opcode() == xla::HloOpcode::kCollectivePermute &&
          by_name.count(std::string(instr->name())) > 0) {
        convert.insert(instr);
        names[{computation,
               {instr->operands().begin(), instr->operands().end()}}] =
            std::string(instr->name());
      }
    }
  }
  xla::AsyncCollectiveCreator::CollectiveCreatorConfig config;
  config.convert_collective_permute = [&](const xla::HloInstruction* instr) {
    return convert.contains(instr);
  };
  absl::StatusOr<bool> ran = xla::AsyncCollectiveCreator(config).Run(module);
  if (!ran.ok()) return ran.status();
  std::map<std::string, std::vector<std::string>> made;
  for (xla::HloComputation* computation : module->computations()) {
    for (xla::HloInstruction* instr : computation->instructions()) {
      if (instr->opcode() != xla::HloOpcode::kCollectivePermuteStart) continue;
      auto it = names.find(
          {computation, {instr->operands().begin(), instr->operands().end()}});
      if (it == names.end()) continue;
      std::vector<std::string>& entry = made[it->second];
      entry.push_back(std::string(instr->name()));
      for (xla::HloInstruction* user : instr->users()) {
        if (user->opcode() == xla::HloOpcode::kCollectivePermuteDone) {
          user->SetAndSanitizeName(it->second);
        }
        entry.push_back(std::string(user->name()));
      }
    }
  }
  return made;
}

// Upstream's assigner parses backend configs strictly, and HLO from a newer
// jax carries fields this XLA does not know: on its copy, such configs are
// read leniently (the unknown fields dropped) and every permute starts from
// DEFAULT (upstream only ever sets NVSHMEM: a backend already in the input
// would come back as its answer).
absl::Status ReadableConfigs(xla::HloModule* module) {
  google::protobuf::util::JsonParseOptions lenient;
  lenient.ignore_unknown_fields = true;
  for (xla::HloComputation* computation : module->computations()) {
    for (xla::HloInstruction* instr : computation->instructions()) {
      const std::string raw = instr->raw_backend_config_string();
      xla::gpu::GpuBackendConfig config;
      if (!raw.empty() &&
          !google::protobuf::util::JsonStringToMessage(raw, &config).ok()) {
        config.Clear();
        if (!google::protobuf::util::JsonStringToMessage(raw, &config, lenient)
                 .ok()) {
          continue;  // Not a GpuBackendConfig; upstream does not read it.
        }
        if (!IsPermute(instr)) {
          if (absl::Status s = instr->set_backend_config(config); !s.ok())
            return s;
        }
      }
      if (!IsPermute(instr)) continue;
      config.mutable_collective_backend_config()->set_backend(
          xla::gpu::CollectiveBackendConfig::DEFAULT);
      if (absl::Status s = instr->set_backend_config(config); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// The edit of one decided permute: its start and done as XLA prints them
// (the permute became async), or its own statement's backend_config (and
// frontend attributes when annotating).
std::optional<StatementEdit> EditFor(const xla::HloModule& output,
                                     const PassRun& run,
                                     const Plan::OpRecord& record,
                                     bool annotate) {
  xla::HloComputation* computation = nullptr;
  for (xla::HloComputation* c : output.computations()) {
    if (c->name() == record.computation) computation = c;
  }
  if (computation == nullptr) return std::nullopt;
  StatementEdit edit{record.computation, record.instruction, {}, {}};
  if (auto it = run.made.find(record.instruction); it != run.made.end()) {
    for (const std::string& name : it->second) {
      const xla::HloInstruction* instr =
          computation->GetInstructionWithName(name);
      if (instr == nullptr) return std::nullopt;
      edit.statements.push_back(instr->ToString());
    }
    return edit;
  }
  const xla::HloInstruction* instr =
      computation->GetInstructionWithName(record.instruction);
  if (instr == nullptr) return std::nullopt;
  const std::string printed = instr->ToString();
  for (const char* key : {"backend_config", "frontend_attributes"}) {
    // Without annotations only the collectives mode attribute is written.
    if (std::string(key) == "frontend_attributes" && !annotate &&
        !instr->get_frontend_attribute("_xla_collectives_mode")) {
      continue;
    }
    std::string value = AttributeValue(printed, key);
    if (!value.empty()) edit.attributes.emplace_back(key, std::move(value));
  }
  return edit;
}

// Whether a statement the pass made names an operand, or sits in a
// computation, that the input's text does not: XLA's parser made a name
// unique (an input that repeats a name across computations, which XLA's
// printer never writes), so the edits cannot be spliced into that text.
bool ParserRenamed(const std::string& text, const xla::HloModule& output,
                   const PassRun& run,
                   const std::vector<StatementEdit>& edits) {
  for (const StatementEdit& edit : edits) {
    const auto made = run.made.find(edit.instruction);
    if (made == run.made.end()) continue;
    xla::HloComputation* computation = nullptr;
    for (xla::HloComputation* c : output.computations()) {
      if (c->name() == edit.computation) computation = c;
    }
    if (computation == nullptr) return true;
    for (const std::string& name : made->second) {
      const xla::HloInstruction* instr =
          computation->GetInstructionWithName(name);
      if (instr == nullptr) continue;
      for (const xla::HloInstruction* operand : instr->operands()) {
        const std::string used(operand->name());
        if (absl::c_linear_search(made->second, used)) continue;
        if (StatementLine(text, edit.computation, used) == 0) return true;
      }
    }
  }
  return false;
}

// A proto's module as XLA prints it, but replica groups in this XLA's short
// mesh form (@mesh<...> {...}), which no jax reads, as full lists.
absl::StatusOr<std::string> PrintWithFullGroups(const xla::HloModule& module) {
  std::vector<StatementEdit> edits;
  for (const xla::HloComputation* computation : module.computations()) {
    for (const xla::HloInstruction* instr : computation->instructions()) {
      const auto* collective =
          xla::DynCast<xla::HloCollectiveInstruction>(instr);
      if (collective == nullptr ||
          AttributeValue(instr->ToString(), "replica_groups").rfind("@", 0) !=
              0) {
        continue;
      }
      std::vector<std::string> groups;
      for (const xla::ReplicaGroup& group : collective->replica_groups()) {
        groups.push_back(
            absl::StrCat("{", absl::StrJoin(group.replica_ids(), ","), "}"));
      }
      edits.push_back({std::string(computation->name()),
                       std::string(instr->name()),
                       {},
                       {{"replica_groups",
                         absl::StrCat("{", absl::StrJoin(groups, ","), "}")}}});
    }
  }
  absl::StatusOr<std::string> text = SpliceStatements(module.ToString(), edits);
  if (!text.ok()) {
    return absl::InternalError(absl::StrCat(
        "cannot print replica groups in full: ", text.status().message(),
        " (a bug)"));
  }
  return text;
}

}  // namespace

Plan::Options DriverPassOptions(std::optional<core::Topology> topology,
                                int devices_per_host, core::ToolCostTable table,
                                const std::string& mode, bool annotate) {
  Plan::Options options;
  options.topology = std::move(topology);
  options.devices_per_host = devices_per_host;
  options.table = std::move(table);
  options.annotate = annotate || mode == "annotate";
  options.decide_only = mode != "rewrite";
  options.write_backend = SetBackendInJson;
  options.read_backend = BackendInJson;
  return options;
}

absl::StatusOr<PassRun> RunPass(const Plan::Options& options,
                                xla::HloModule* target,
                                const StageHook& stage) {
  Plan plan(options);
  return RunPass(plan, options, target, stage);
}

absl::StatusOr<PassRun> RunPass(Plan& plan, const Plan::Options& options,
                                xla::HloModule* target,
                                const StageHook& stage) {
  stage("running the pass", 1);
  auto begin = std::chrono::steady_clock::now();
  absl::StatusOr<bool> changed = plan.Run(target);
  PassRun run;
  run.pass_us = std::chrono::duration<double, std::micro>(
                    std::chrono::steady_clock::now() - begin)
                    .count();
  if (!changed.ok()) {
    // InvalidArgument: the input does not fit (topology, backend_config).
    if (changed.status().code() == absl::StatusCode::kInvalidArgument) {
      return absl::InvalidArgumentError(
          OneLine(std::string(changed.status().message())));
    }
    return absl::InternalError(
        OneLine(std::string(changed.status().message())) + " (a bug)");
  }
  run.changed = *changed;
  run.records = plan.records();
  if (!options.decide_only) {
    stage("making the permutes async", 1);
    auto async = MakeAsync(target, run.records);
    if (!async.ok()) {
      return absl::InternalError("AsyncCollectiveCreator failed (a bug): " +
                                 OneLine(async.status().ToString()));
    }
    run.made = *std::move(async);
    run.changed |= !run.made.empty();
  }
  stage("verifying the pass's output", 1);
  if (absl::Status status = Verify(target); !status.ok()) {
    return absl::InternalError(
        "HloVerifier rejects the pass's output (a bug): " +
        OneLine(std::string(status.message())));
  }
  return run;
}

absl::StatusOr<std::map<std::string, std::string>> UpstreamDecisions(
    const xla::HloModule& module, const core::Topology& topology,
    int64_t threshold_bytes) {
  std::unique_ptr<xla::HloModule> copy = module.Clone("");
  copy->mutable_config()
      .mutable_debug_options()
      .set_xla_gpu_experimental_enable_nvshmem(true);
  if (absl::Status status = ReadableConfigs(copy.get()); !status.ok())
    return status;
  // Upstream models one NVLink island per "slice" of slice_size devices; the
  // closest thing in our topology is the NVLink domain.
  xla::gpu::CollectiveBackendAssigner assigner(
      stream_executor::CudaComputeCapability(9, 0),
      /*num_visible_devices_per_process=*/topology.gpus_per_process(),
      /*slice_size=*/topology.nvlink_domain_size(), threshold_bytes);
  absl::StatusOr<bool> ran = assigner.Run(copy.get());
  if (!ran.ok()) return ran.status();
  std::map<std::string, std::string> decisions;
  for (xla::HloComputation* computation : copy->computations()) {
    for (xla::HloInstruction* instr : computation->instructions()) {
      if (!IsPermute(instr)) continue;
      auto config = instr->backend_config<xla::gpu::GpuBackendConfig>();
      std::string backend = "DEFAULT";
      if (config.ok() && config->has_collective_backend_config()) {
        backend = xla::gpu::CollectiveBackendConfig::CollectiveBackend_Name(
            config->collective_backend_config().backend());
      }
      decisions[std::string(instr->name())] = backend;
    }
  }
  return decisions;
}

absl::StatusOr<std::string> OutputText(const LoadedModule& input,
                                       const xla::HloModule& output,
                                       const PassRun& run,
                                       const Plan::Options& options) {
  if (input.text.empty()) return PrintWithFullGroups(output);
  const bool annotate = options.annotate;
  const bool compact = UsesCompactTupleElements(input.text);
  std::vector<StatementEdit> edits;
  for (const Plan::OpRecord& record : run.records) {
    if (record.skipped && !annotate) continue;
    std::optional<StatementEdit> edit = EditFor(output, run, record, annotate);
    if (!edit) {
      return absl::InternalError(absl::StrCat("the pass's output has no ",
                                              record.computation, "/",
                                              record.instruction, " (a bug)"));
    }
    // Operands the input wrote as compact tuple elements, written so again.
    if (compact) {
      for (std::string& statement : edit->statements) {
        statement = CompactTupleElementNames(statement);
      }
    }
    edits.push_back(*std::move(edit));
  }
  absl::StatusOr<std::string> text = SpliceStatements(input.text, edits);
  // A layout of statements the splicer does not follow (several on a line):
  // XLA's printing, valid but not the input's own text.
  if (!text.ok()) return PrintWithFullGroups(output);
  // The spliced text must read back as a valid module.
  int rewritten = 0;
  auto again = xla::ParseAndReturnUnverifiedModule(
      ReadableText(*text, &rewritten), output.config());
  absl::Status status = again.ok() ? Verify(again->get()) : again.status();
  if (!status.ok() && ParserRenamed(input.text, output, run, edits)) {
    // Valid, and XLA's printing rather than the input's own bytes.
    return PrintWithFullGroups(output);
  }
  if (!status.ok()) {
    return absl::InternalError("the spliced output does not verify (a bug): " +
                               OneLine(std::string(status.message())));
  }
  return text;
}

}  // namespace nvshmem_opt
