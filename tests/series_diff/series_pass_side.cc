// The series' pass itself as a side of the differential test: the case as an
// HLO module (the permute over parameters of its types, the program's
// partitions, replicas and static device assignment, NVSHMEM on in the
// module's options), or the seed's own module, run through
// NvshmemCollectivePermuteRewriter, and the backend it writes.

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tests/series_diff/diff_case.h"
#include "xla/backends/gpu/runtime/nvshmem_permute_support.h"
#include "xla/backends/gpu/runtime/nvshmem_run_checks.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_collective_permute_rewriter.h"
#include "xla/debug_options_flags.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/parser/hlo_parser.h"
#include "xla/literal_util.h"
#include "xla/primitive_util.h"
#include "xla/runtime/device_id.h"
#include "xla/runtime/process_id.h"
#include "xla/service/computation_placer.h"
#include "xla/service/gpu/backend_configs.pb.h"
#include "xla/service/hlo_module_config.h"
#include "xla/shape_util.h"

namespace series_diff {
namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::cerr << "series_diff: " << what << "\n";
  std::abort();
}

// The program's device assignment: the case's map, else XLA's default.
xla::DeviceAssignment Assignment(const Case& c) {
  const std::vector<int>& map = c.topology->partition_to_device();
  xla::DeviceAssignment assignment(c.replicas, c.partitions);
  for (int p = 0; p < c.partitions; ++p) {
    for (int r = 0; r < c.replicas; ++r) {
      assignment(r, p) =
          map.empty() ? r + p * c.replicas : map[r + p * c.replicas];
    }
  }
  return assignment;
}

// The module's options as a compile for `c` sets them.
void Configure(const Case& c, xla::HloModuleConfig& config) {
  config.set_replica_count(c.replicas);
  config.set_num_partitions(c.partitions);
  xla::DebugOptions options = config.debug_options();
  options.set_xla_gpu_experimental_enable_nvshmem(true);
  options.set_xla_gpu_use_memcpy_local_p2p(c.memcpy_local_p2p);
  config.set_debug_options(options);
  config.set_static_device_assignment(Assignment(c));
}

// `c` as a module: one permute of one parameter per type, each a vector of
// its share of the bytes.
std::unique_ptr<xla::HloModule> BuildModule(const Case& c) {
  xla::HloModuleConfig config;
  Configure(c, config);
  auto module = std::make_unique<xla::HloModule>("series_diff", config);
  xla::HloComputation::Builder builder("entry");
  std::vector<xla::HloInstruction*> operands;
  std::vector<xla::Shape> shapes;
  const int64_t share = c.bytes / static_cast<int64_t>(c.types.size());
  for (const std::string& name : c.types) {
    absl::StatusOr<xla::PrimitiveType> type =
        xla::primitive_util::StringToPrimitiveType(name);
    if (!type.ok()) Fail(absl::StrCat("no XLA type ", name));
    const int64_t width = xla::primitive_util::ByteWidth(*type);
    shapes.push_back(xla::ShapeUtil::MakeShape(*type, {share / width}));
    operands.push_back(
        builder.AddInstruction(xla::HloInstruction::CreateParameter(
            static_cast<int64_t>(operands.size()), shapes.back(), "p")));
  }
  const xla::Shape result =
      shapes.size() == 1 ? shapes[0] : xla::ShapeUtil::MakeTupleShape(shapes);
  const std::optional<int64_t> channel =
      c.channel ? std::optional<int64_t>(1) : std::nullopt;
  if (c.in_place) {
    // Into the whole of an output parameter, at offset 0 on every device.
    xla::HloInstruction* output =
        builder.AddInstruction(xla::HloInstruction::CreateParameter(
            static_cast<int64_t>(operands.size()), shapes[0], "out"));
    xla::HloInstruction* zero = builder.AddInstruction(
        xla::HloInstruction::CreateConstant(xla::LiteralUtil::CreateR0(0)));
    xla::HloInstruction* start =
        builder.AddInstruction(xla::HloInstruction::CreateTuple({zero}));
    const std::vector<std::vector<int64_t>> slice_sizes = {
        {shapes[0].dimensions().begin(), shapes[0].dimensions().end()}};
    builder.AddInstruction(xla::HloInstruction::CreateCollectivePermute(
        shapes[0], operands[0], output, start, start, c.pairs, slice_sizes,
        channel));
  } else {
    builder.AddInstruction(xla::HloInstruction::CreateCollectivePermute(
        result, operands, c.pairs, channel));
  }
  module->AddEntryComputation(builder.Build());
  return module;
}

xla::gpu::NvshmemCollectivePermuteRewriter::Options PassOptions(const Case& c) {
  xla::gpu::NvshmemCollectivePermuteRewriter::Options options;
  options.devices_per_host = c.series_devices_per_host >= 0
                                 ? c.series_devices_per_host
                                 : c.topology->gpus_per_host();
  options.slice_size = c.slice_size();
  options.job_devices = c.job_devices;
  options.crossover_bytes = c.crossover_bytes;
  options.num_visible_devices_per_process = c.topology->gpus_per_process();
  return options;
}

// The backend the pass writes on each permute of `module`, by name.
std::map<std::string, bool> RunPass(const Case& c, xla::HloModule& module) {
  xla::gpu::NvshmemCollectivePermuteRewriter pass(PassOptions(c));
  absl::StatusOr<bool> ran = pass.Run(&module);
  if (!ran.ok()) Fail(absl::StrCat(c.Describe(), ": ", ran.status().message()));
  std::map<std::string, bool> nvshmem;
  for (const xla::HloComputation* computation : module.computations()) {
    for (const xla::HloInstruction* instr : computation->instructions()) {
      if (instr->opcode() != xla::HloOpcode::kCollectivePermute &&
          instr->opcode() != xla::HloOpcode::kCollectivePermuteStart) {
        continue;
      }
      absl::StatusOr<xla::gpu::GpuBackendConfig> config =
          instr->backend_config<xla::gpu::GpuBackendConfig>();
      nvshmem[std::string(instr->name())] =
          config.ok() && config->collective_backend_config().backend() ==
                             xla::gpu::CollectiveBackendConfig::NVSHMEM;
    }
  }
  return nvshmem;
}

// Clears a permute's backend config that the wheel's XLA cannot read: newer
// jax writes fields (collectives_mode) that the pinned XLA never holds.
void ClearNewerConfigs(xla::HloModule& module) {
  for (xla::HloComputation* computation : module.computations()) {
    for (xla::HloInstruction* instr : computation->instructions()) {
      if (instr->opcode() == xla::HloOpcode::kCollectivePermute ||
          instr->opcode() == xla::HloOpcode::kCollectivePermuteStart) {
        if (!instr->backend_config<xla::gpu::GpuBackendConfig>().ok()) {
          instr->set_raw_backend_config_string("");
        }
      }
    }
  }
}

// A seed module's backends, run once per module text and topology.
bool SeedBackend(const Case& c) {
  static auto* runs = new std::map<std::pair<const std::string*, std::string>,
                                   std::map<std::string, bool>>();
  const auto key = std::make_pair(c.module_text.get(), c.spec);
  auto it = runs->find(key);
  if (it == runs->end()) {
    absl::StatusOr<std::unique_ptr<xla::HloModule>> module =
        xla::ParseAndReturnUnverifiedModule(*c.module_text);
    if (!module.ok()) Fail(std::string(module.status().message()));
    xla::HloModuleConfig config = (*module)->config();
    Configure(c, config);
    (*module)->set_config(config);
    ClearNewerConfigs(**module);
    it = runs->emplace(key, RunPass(c, **module)).first;
  }
  auto found = it->second.find(c.permute_name);
  if (found == it->second.end()) Fail("no permute " + c.permute_name);
  return found->second;
}

// What the series' executable and thunk check as each process of the program
// runs it, on the case's processes and hosts: the first refusal, or OK.
absl::Status RuntimeChecks(const Case& c) {
  const xla::DeviceAssignment assignment = Assignment(c);
  absl::flat_hash_map<xla::GlobalDeviceId, xla::ProcessId> device_to_process;
  std::map<int, int> process_host;  // Of each process.
  for (int d = 0; d < c.topology->num_devices(); ++d) {
    device_to_process[xla::GlobalDeviceId(d)] = xla::ProcessId(c.ProcessOf(d));
    process_host[c.ProcessOf(d)] = c.topology->HostOf(d);
  }
  const int gpus_per_process = c.topology->gpus_per_process();
  const absl::Status job =
      xla::gpu::CheckNvshmemJob(c.topology->num_devices() / gpus_per_process,
                                gpus_per_process, &assignment);
  if (!job.ok()) return job;
  // Each process of the program translates the ids and asks about the PEs of
  // its own host.
  for (int id = 0; id < c.program_devices(); ++id) {
    const int host =
        process_host[c.ProcessOf(assignment(id % c.replicas, id / c.replicas))];
    xla::gpu::NvshmemPeRecord record;
    const absl::Status pes = xla::gpu::CheckAndRecordNvshmemPes(
        assignment, &device_to_process, c.pairs,
        [&](int64_t pe) -> absl::StatusOr<bool> {
          auto it = process_host.find(static_cast<int>(pe));
          if (it == process_host.end()) {
            return absl::InvalidArgumentError(absl::StrCat("no PE ", pe));
          }
          return it->second == host;
        },
        record);
    if (!pes.ok()) return pes;
  }
  return absl::OkStatus();
}

}  // namespace

Answer SeriesRunDecide(const Case& c, int64_t* bytes) {
  Answer answer = SeriesPassDecide(c, bytes);
  if (!answer.nvshmem) return answer;
  const absl::Status run = RuntimeChecks(c);
  if (run.ok()) return answer;
  return {false, absl::StrCat("refused at run time: ", run.message())};
}

bool SeriesPassSeesNvshmemFlag() {
  return xla::GetDebugOptionsFromFlags().xla_gpu_experimental_enable_nvshmem();
}

Answer SeriesPassDecide(const Case& c, int64_t* bytes) {
  *bytes = c.bytes;
  if (c.module_text) return {SeedBackend(c), "the series' pass on the seed"};
  const std::unique_ptr<xla::HloModule> module = BuildModule(c);
  *bytes = 0;
  for (const xla::HloInstruction* param :
       module->entry_computation()->parameter_instructions()) {
    if (param->name() == "out") continue;  // An in-place permute's output.
    *bytes += xla::ShapeUtil::ByteSizeOfElements(param->shape());
  }
  const std::map<std::string, bool> nvshmem = RunPass(c, *module);
  if (nvshmem.size() != 1) Fail("not one permute in " + c.Describe());
  return {nvshmem.begin()->second, "the series' pass"};
}

}  // namespace series_diff
