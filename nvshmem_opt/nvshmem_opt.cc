// nvshmem-opt: an hlo-opt-style driver for the tools' collective-permute
// pass. Reads HLO text or a serialized HloModuleProto, runs HloVerifier ->
// pass -> AsyncCollectiveCreator -> HloVerifier (the library in input.h and
// pipeline.h; the flags in flags.h, topology and placement in placement.h), and
// writes the result and, on request, a JSON report of every decision
// (optionally next to the decision of upstream's CollectiveBackendAssigner).
//
// Exit codes: 0 success, 1 the pass produced an invalid module (a bug),
// 2 unusable input (missing file, malformed HLO, bad flag or topology).

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ext/stdio_filebuf.h>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nvshmem_opt/flags.h"
#include "nvshmem_opt/input.h"
#include "nvshmem_opt/module_config.h"
#include "nvshmem_opt/output_file.h"
#include "nvshmem_opt/pipeline.h"
#include "nvshmem_opt/placement.h"
#include "nvshmem_opt/readable_text.h"
#include "nvshmem_opt/report.h"
#include "tool_layer/backends.h"
#include "tool_layer/table_text.h"
#include "tool_layer/topology_spec.h"

namespace {

namespace core = ::xla::gpu::backend_selection;
using nvshmem_opt::CompileFlag;
using nvshmem_opt::DevicesPerHost;
using nvshmem_opt::Fail;
using nvshmem_opt::Flags;
using nvshmem_opt::OrFail;
using nvshmem_opt::OtherHostShapes;
using nvshmem_opt::ParseFlags;
using nvshmem_opt::PlacementText;
using nvshmem_opt::PlaceTextModule;
using nvshmem_opt::Plan;
using nvshmem_opt::ResolveTopology;
using nvshmem_opt::SpecToDecideAgain;
using nvshmem_opt::TopologySource;

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  if (stat(a.c_str(), &sa) != 0 || stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// Every file the driver writes goes through WriteOutput (output_file.h):
// regular files atomically, devices and FIFOs in place, '-' to stdout.
void Write(const Flags& flags, const std::string& path,
           const std::string& text) {
  if (path != "-" && SameFile(flags.input, path))
    Fail(2, path + ": refusing to overwrite the input");
  if (absl::Status status =
          nvshmem_opt::WriteOutput(path, text, flags.input_timeout);
      !status.ok())
    Fail(2, std::string(status.message()));
}

// Under the launcher (nvshmem_opt_launcher.cc) stderr is a memory file that
// keeps TensorFlow's and XLA's logs: the driver's own lines go to the real
// stderr it passes, and each stage that runs XLA is recorded for it, with the
// exit code a death there means (2: the input is at fault, 1: a bug).
int g_stage_fd = -1;
void UseLauncherFds() {
  if (const char* fd = std::getenv("NVSHMEM_OPT_STDERR_FD")) {
    static __gnu_cxx::stdio_filebuf<char> real(std::atoi(fd), std::ios::out);
    std::cerr.rdbuf(&real);
  }
  if (const char* fd = std::getenv("NVSHMEM_OPT_STAGE_FD"))
    g_stage_fd = std::atoi(fd);
}
void Stage(const std::string& input, const char* stage, int code) {
  const std::string record = absl::StrCat(code, "\t", input, "\t", stage);
  if (g_stage_fd >= 0 &&
      pwrite(g_stage_fd, record.data(), record.size(), 0) >= 0) {
    if (ftruncate(g_stage_fd, record.size()) != 0) g_stage_fd = -1;
  }
}

// The cost table of --cost-table ('-': stdin) with the backend set of
// --backends, parsed once for the whole run.
core::ToolCostTable LoadCostTable(const Flags& flags) {
  core::ToolCostTable table = core::DefaultToolCostTable();
  if (!flags.cost_table.empty()) {
    if (flags.cost_table == "-" && flags.input == "-")
      Fail(2, "INPUT and --cost-table cannot both be '-' (stdin)");
    Stage(flags.cost_table, "reading the cost table", 2);
    const std::string text = OrFail(nvshmem_opt::ReadInput(
        flags.cost_table, flags.max_input_bytes, flags.input_timeout));
    // The text format reads nothing as the default table: a file given and
    // empty is more likely a mistake than a wish for the default.
    if (absl::StripAsciiWhitespace(text).empty()) {
      Fail(2, flags.cost_table +
                  ": empty file, no cost table (without --cost-table the "
                  "default applies)");
    }
    table = OrFail(core::ParseToolCostTable(text, flags.cost_table));
  }
  if (!flags.backends.empty()) {
    table.backends =
        OrFail(core::ParseBackendSet(flags.backends), "--backends: ");
  }
  return table;
}

// The input, parsed and verified, its partitions settled: the same path as
// the fuzz harness's (input.h LoadModule).
nvshmem_opt::LoadedModule Load(const Flags& flags,
                               const core::Topology* topology) {
  Stage(flags.input, "reading the module", 2);
  std::string data = OrFail(nvshmem_opt::ReadInput(
      flags.input, flags.max_input_bytes, flags.input_timeout));
  nvshmem_opt::LoadedModule loaded = OrFail(nvshmem_opt::LoadModule(
      flags.input, std::move(data),
      {flags.num_partitions, flags.num_replicas, topology},
      [&](const char* stage) { Stage(flags.input, stage, 2); }));
  if (!loaded.partitions_note.empty()) {
    std::cerr << "nvshmem-opt: " << loaded.partitions_note << "\n";
  }
  return loaded;
}

// The input's config beside a regular output file, so that what reads the
// output (verify, explain) places its ids as the pass did. Never beside a
// device or FIFO, and never over a config that is not a regular file.
void WriteOutputConfig(
    const Flags& flags,
    const std::optional<nvshmem_opt::ModulePlacement>& read) {
  if (!read || flags.output.empty() || flags.output == "-") return;
  struct stat out, config;
  if (stat(flags.output.c_str(), &out) != 0 || !S_ISREG(out.st_mode)) return;
  const std::string path = nvshmem_opt::SidecarConfigPath(flags.output);
  if (lstat(path.c_str(), &config) == 0 && !S_ISREG(config.st_mode)) return;
  if (SameFile(flags.module_config.empty()
                   ? nvshmem_opt::FindModuleConfig(flags.input)
                   : flags.module_config,
               path)) {
    return;  // The output's config is the input's own.
  }
  Write(flags, path, read->text);
}

// On a stock XLA (no --per-op-modes), what became of the permutes the core
// puts on peer or symmetric memory: written as NCCL (rewrite), or, deciding
// only (explain, annotate), what a rewrite would write.
void StockNote(const Flags& flags, const nvshmem_opt::PassRun& run,
               int written_as_nccl) {
  int one_sided = 0;
  for (const auto& record : run.records) {
    if (!record.skipped && record.user_mark.empty() &&
        (record.decision.backend == core::Backend::kPeer ||
         record.decision.backend == core::Backend::kSymmetric)) {
      ++one_sided;
    }
  }
  const int count = flags.mode == "rewrite" ? written_as_nccl : one_sided;
  if (count == 0) return;
  std::cerr << "nvshmem-opt: " << flags.input << ": " << count
            << " permute(s) the core puts on peer or symmetric memory "
            << (flags.mode == "rewrite" ? "written" : "would be written")
            << " as NCCL: the target is a stock XLA, whose thunk runs every "
               "permute in the program's one collectives mode "
               "(xla_gpu_collective_permute_mode), not an op's own; `hlo-tools "
               "explain` gives the program's mode and its setting, and "
               "--per-op-modes writes each permute's own mode, for an XLA with "
               "the series\n";
}

// The JSON report (--report): the run's decisions, with where the topology
// and the placement of the ids came from.
void WriteReport(const Flags& flags, const nvshmem_opt::LoadedModule& input,
                 const core::Topology& topology,
                 const core::ToolCostTable& table,
                 const std::string& config_path,
                 const std::optional<nvshmem_opt::ModulePlacement>& placement,
                 bool spec_states_map, const nvshmem_opt::PassRun& run,
                 const std::map<std::string, std::string>* upstream_ptr) {
  const std::string spec = SpecToDecideAgain(flags, topology);
  const auto [flag_config, flag_mode] =
      CompileFlag(flags, !input.text.empty(), config_path, placement);
  const std::string json = OrFail(nvshmem_opt::ReportJson(
      {flags.input, core::TopologySpec(topology),
       TopologySource(flags, *input.module), topology.partition_to_device(),
       flags.mode, input.module->config().num_partitions(),
       input.module->config().replica_count(), input.partitions_from,
       core::ProcessLayoutText(
           topology, core::SpecStatesProcesses(flags.topology), table.backends),
       PlacementText(flags, topology, config_path, placement, spec_states_map,
                     input.text.empty() &&
                         input.module->config().has_static_device_assignment()),
       spec, flag_config, flag_mode, &topology,
       OtherHostShapes(flags, topology)},
      run, upstream_ptr));
  Write(flags, flags.report, json + "\n");
}

}  // namespace

int main(int argc, char** argv) {
  UseLauncherFds();
  nvshmem_opt::PrintableStderr();
  const Flags flags = ParseFlags(argc, argv);
  // Every file read from here on is bounded alike (input.h ReadBounded).
  nvshmem_opt::SetInputBounds({flags.max_input_bytes, flags.input_timeout});
  const core::ToolCostTable table = LoadCostTable(flags);
  if (flags.per_op_modes &&
      std::find(table.backends.begin(), table.backends.end(),
                core::Backend::kNvshmem) != table.backends.end()) {
    Fail(2, "--per-op-modes and the backend set " +
                core::BackendSetToString(table.backends) +
                ": no XLA runs both (per-permute modes are the series for jax "
                "v0.11.0's and openxla main's XLA, which run no NVSHMEM "
                "permute; NVSHMEM is the pinned XLA's): give "
                "--backends=nccl,peer[,symmetric], or drop --per-op-modes");
  }
  if (flags.print_cost_table) {
    std::cout << core::CostTableToString(table);
    return 0;
  }
  std::optional<core::Topology> given;
  if (!flags.topology.empty())
    given = OrFail(core::ParseTopology(flags.topology, table.backends));
  if (!flags.output.empty() && flags.output != "-" &&
      SameFile(flags.input, flags.output)) {
    Fail(2, flags.output + ": refusing to overwrite the input");
  }
  if (flags.print_readable) {
    int rewritten = 0;
    std::cout << nvshmem_opt::ReadableText(
        OrFail(nvshmem_opt::ReadInput(flags.input, flags.max_input_bytes,
                                      flags.input_timeout)),
        &rewritten);
    return 0;
  }
  if (flags.module_config.empty()) {
    if (absl::Status beside = nvshmem_opt::CheckConfigBeside(flags.input);
        !beside.ok()) {
      Fail(2, std::string(beside.message()));
    }
  }
  nvshmem_opt::LoadedModule input = Load(flags, given ? &*given : nullptr);
  Stage(flags.input, "reading the module config", 2);
  std::optional<nvshmem_opt::ModulePlacement> placement;
  const bool spec_states_map = given && !given->partition_to_device().empty();
  const std::string config_path =
      PlaceTextModule(flags, *input.module, given, placement);
  Stage(flags.input, "placing the module on the topology", 2);
  // One rewriter, on the spec and table parsed above, resolves the topology
  // and runs the pass.
  Plan::Options options = nvshmem_opt::DriverPassOptions(
      given, given ? 0 : DevicesPerHost(flags, *input.module), table,
      flags.mode, flags.annotate);
  // XLA's buffer assignment beside the module: its destinations' facts.
  options.read_destinations = nvshmem_opt::DestinationReader(flags);
  // A stock XLA's thunk runs the program's one mode, not an op's: a permute
  // the core puts on peer or symmetric memory is written as NCCL there, and
  // the program's mode is explain's to give (hlo_tools/model/program_mode.py).
  int held_to_program = 0;
  if (!flags.per_op_modes && !options.decide_only) {
    options.write_backend = [write = options.write_backend, &held_to_program](
                                xla::HloInstruction* instr,
                                core::Backend backend) {
      if (backend == core::Backend::kPeer ||
          backend == core::Backend::kSymmetric) {
        ++held_to_program;
        backend = core::Backend::kNccl;
      }
      return write(instr, backend);
    };
  }
  Plan plan(options);
  const core::Topology topology = ResolveTopology(flags, plan, *input.module);
  std::optional<std::map<std::string, std::string>> upstream;
  if (flags.compare_upstream) {
    Stage(flags.input, "running upstream's CollectiveBackendAssigner", 2);
    upstream =
        OrFail(nvshmem_opt::UpstreamDecisions(*input.module, topology,
                                              flags.upstream_threshold_bytes),
               flags.input + ": upstream CollectiveBackendAssigner failed: ");
  }
  // Explain leaves the module alone: decide on a copy.
  std::unique_ptr<xla::HloModule> copy =
      flags.mode == "explain" ? input.module->Clone("") : nullptr;
  auto stage = [&](const char* name, int code) {
    Stage(flags.input, name, code);
  };
  const nvshmem_opt::PassRun run =
      OrFail(nvshmem_opt::RunPass(
                 plan, options, copy ? copy.get() : input.module.get(), stage),
             flags.input + ": ");
  if (flags.time)
    std::cerr << "nvshmem-opt: pass took " << run.pass_us << " us\n";
  if (!flags.per_op_modes) StockNote(flags, run, held_to_program);
  const auto* upstream_ptr = upstream ? &*upstream : nullptr;
  if (!flags.report.empty()) {
    WriteReport(flags, input, topology, table, config_path, placement,
                spec_states_map, run, upstream_ptr);
  }
  if (flags.mode == "explain") {
    if (flags.report != "-")
      std::cout << nvshmem_opt::ExplainText(run, upstream_ptr);
    return 0;
  }
  Stage(flags.input, "printing the module", 1);
  const std::string text =
      OrFail(nvshmem_opt::OutputText(input, *input.module, run, options),
             flags.input + ": ");
  const bool to_stdout = flags.output.empty() || flags.output == "-";
  if (to_stdout && flags.report == "-") return 0;  // stdout has the report.
  Write(flags, to_stdout ? "-" : flags.output, text);
  WriteOutputConfig(flags, placement);
  return 0;
}
