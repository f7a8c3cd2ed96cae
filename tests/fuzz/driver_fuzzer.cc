// libFuzzer harness for nvshmem-opt's whole path, through the driver's own
// library (nvshmem_opt/input.h, nvshmem_opt/pipeline.h, nvshmem_opt/report.h):
//   parse (HLO text or serialized proto) -> HloVerifier -> pass ->
//   AsyncCollectiveCreator -> HloVerifier -> JSON report -> the output spliced
//   into the input's text -> that text parsed, verified and run again.
//
// Input: the module file itself, byte for byte what nvshmem-opt reads (one
// reading path: input.h LoadModule). A leading comment, which XLA's lexer and
// the driver skip, picks the configuration:
//   /* driver_fuzzer --topology=1x2x4:nvl8 --mode=annotate --slow-network */
// (a topology of kTopologies, a mode of kModes; without one: 1x2x4, rewrite,
// default costs). A violation prints the nvshmem-opt command that replays it.
// tests/fuzz/make_corpus.py writes the seeds.
//
// Properties checked (a violation aborts, so libFuzzer records it):
//   * a rejected input gets a non-empty, one-line error message;
//   * the pass's output passes HloVerifier (the driver's exit code 1);
//   * the JSON report holds no non-finite number (nan/inf is not JSON);
//   * the output text parses and verifies again, and the pass on it changes
//     nothing.

#include <csetjmp>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "nvshmem_opt/input.h"
#include "nvshmem_opt/pipeline.h"
#include "nvshmem_opt/report.h"
#include "tests/fuzz/alt_signal_stack.h"
#include "tool_layer/backends.h"
#include "tool_layer/table_text.h"
#include "tool_layer/topology_spec.h"

namespace {

namespace core = ::xla::gpu::backend_selection;
using nvshmem_opt::Plan;

// XLA's parser and verifier abort on some malformed modules (CHECK failures
// inside the wheel's XLA). The command line's launcher turns those into a
// one-line error and exit code 2; here we jump back out of the
// fatal-signal handler instead, count the input as rejected and go on. Only
// the input stages are guarded: a crash in the pass or on its output is still
// a crash.
sigjmp_buf g_jump;
int64_t g_xla_input_aborts = 0;
extern "C" void OnXlaInputAbort(int) { siglongjmp(g_jump, 1); }

// Runs on its own stack (alt_signal_stack.h), so a stack overflow is caught.
struct InputGuard {
  struct sigaction old[nvshmem_opt::kNumFatalSignals];
  InputGuard() { nvshmem_opt::HandleFatalSignals(OnXlaInputAbort, old); }
  ~InputGuard() { nvshmem_opt::RestoreFatalSignals(old); }
};

void ReportAborts() {
  std::fprintf(stderr,
               "driver_fuzzer: %lld inputs made XLA abort while reading or "
               "verifying them (the driver reports these as exit 2)\n",
               static_cast<long long>(g_xla_input_aborts));
}

struct Config {
  const char* topology;
  bool slow_network;
  const char* mode;
};

constexpr const char* kTopologies[] = {
    "1x1x8", "1x2x4", "2x2x4",      "1x2x4:nvl8",
    "1x1x4", "2x2x2", "1x4x4:nvl8", "1x2x4:map=1,0,3,2,5,4,7,6"};
constexpr const char* kModes[] = {"rewrite", "annotate", "explain"};
// Slow NCCL on the network: NVSHMEM on the NVLink edges alone would pay off,
// so inputs also run where only the safety rules keep a permute on NCCL.
constexpr char kSlowNcclNetwork[] =
    "links { backend: NCCL link_class: NETWORK latency_us: 1 bandwidth_gbps: "
    "900 per_buffer_us: 0 }\nsm_interference { backend: NCCL fraction: 4 }\n";

// The configuration the input's leading comment names (see the top).
Config PickConfig(const std::string& input) {
  Config config{"1x2x4", false, "rewrite"};
  constexpr char kTag[] = "/* driver_fuzzer ";
  if (input.rfind(kTag, 0) != 0) return config;
  const size_t end = input.find("*/");
  if (end == std::string::npos) return config;
  const std::string comment = " " + input.substr(0, end) + " ";
  for (const char* topology : kTopologies) {
    if (comment.find(std::string(" --topology=") + topology + " ") !=
        std::string::npos) {
      config.topology = topology;
    }
  }
  for (const char* mode : kModes) {
    if (comment.find(std::string(" --mode=") + mode + " ") != std::string::npos)
      config.mode = mode;
  }
  config.slow_network = comment.find(" --slow-network ") != std::string::npos;
  return config;
}

Config g_config{"1x2x4", false, "rewrite"};  // The input's, for the replay.

[[noreturn]] void Violation(const std::string& what) {
  std::fprintf(stderr, "PROPERTY VIOLATED: %s\n", what.c_str());
  std::fprintf(stderr,
               "replay: nvshmem-opt INPUT --topology=%s --mode=%s%s (INPUT: "
               "the crash file libFuzzer writes; --slow-network: a table "
               "holding kSlowNcclNetwork of tests/fuzz/driver_fuzzer.cc)\n",
               g_config.topology, g_config.mode,
               g_config.slow_network ? " --cost-table=SLOW_NETWORK_TABLE" : "");
  std::abort();
}

// The driver turns every rejection into "nvshmem-opt: <message>\n"; the
// message must say something and fit on one line.
void CheckRejection(const std::string& message) {
  if (message.empty()) Violation("empty error message");
  if (message.find('\n') != std::string::npos ||
      message.find('\r') != std::string::npos) {
    Violation("multi-line error message: " + message);
  }
}

void CheckJson(const std::string& json) {
  for (const char* bad :
       {":nan", ":inf", ":-nan", ":-inf", "NaN", "Infinity"}) {
    if (json.find(bad) != std::string::npos) {
      Violation(std::string("non-finite number in the JSON report: ") + json);
    }
  }
}

// The input through the driver's own reading path (LoadModule: the checks
// before XLA's parser, the parser, the verifier, the permutes' configs),
// guarded against XLA's aborts; null when rejected.
std::unique_ptr<nvshmem_opt::LoadedModule> LoadGuarded(
    const std::string& input, const core::Topology& topology) {
  auto loaded = std::make_unique<nvshmem_opt::LoadedModule>();
  InputGuard guard;
  if (sigsetjmp(g_jump, 1) != 0) {
    ++g_xla_input_aborts;  // What was allocated is leaked; fine here.
    loaded.release();
    return nullptr;
  }
  absl::StatusOr<nvshmem_opt::LoadedModule> parsed =
      nvshmem_opt::LoadModule("fuzz.hlo", input, {0, 0, &topology});
  if (!parsed.ok()) {
    CheckRejection(std::string(parsed.status().message()));
    return nullptr;
  }
  *loaded = *std::move(parsed);
  return loaded;
}

void NoStage(const char*, int) {}

// The pass's run; null when the input is refused. A bug (Internal) is a
// violation.
std::unique_ptr<nvshmem_opt::PassRun> Run(const Plan::Options& options,
                                          xla::HloModule* target) {
  absl::StatusOr<nvshmem_opt::PassRun> run =
      nvshmem_opt::RunPass(options, target, NoStage);
  if (run.ok()) return std::make_unique<nvshmem_opt::PassRun>(*std::move(run));
  if (run.status().code() != absl::StatusCode::kInvalidArgument) {
    Violation(std::string(run.status().message()));
  }
  CheckRejection("fuzz.hlo: " + std::string(run.status().message()));
  return nullptr;
}

// The written text reads back, and a second run changes nothing.
void CheckOutput(const nvshmem_opt::LoadedModule& input,
                 const nvshmem_opt::PassRun& run, const Plan::Options& options,
                 const core::Topology& topology) {
  absl::StatusOr<std::string> text =
      nvshmem_opt::OutputText(input, *input.module, run, options);
  if (!text.ok())
    Violation("no output: " + std::string(text.status().message()));
  absl::StatusOr<nvshmem_opt::LoadedModule> again =
      nvshmem_opt::LoadModule("out.hlo", *text, {0, 0, &topology});
  if (!again.ok()) {
    Violation("the output does not read back: " +
              std::string(again.status().message()));
  }
  absl::StatusOr<nvshmem_opt::PassRun> second =
      nvshmem_opt::RunPass(options, again->module.get(), NoStage);
  if (!second.ok())
    Violation("second run fails: " + std::string(second.status().message()));
  if (!options.decide_only && second->changed) {
    Violation("second run changed the module (pass not idempotent)");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  setenv("TF_CPP_MIN_LOG_LEVEL", "3", 0);
  std::atexit(ReportAborts);
  // A broken built-in table would turn every input into a rejection.
  if (absl::StatusOr<core::ToolCostTable> table =
          core::ParseToolCostTable(kSlowNcclNetwork, "slow_network.txt");
      !table.ok()) {
    Violation("built-in cost table rejected: " +
              std::string(table.status().message()));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const Config config = g_config = PickConfig(input);
  absl::StatusOr<core::Topology> topology =
      core::ParseTopology(config.topology);
  if (!topology.ok()) {
    Violation("built-in topology rejected: " +
              std::string(topology.status().message()));
  }
  std::unique_ptr<nvshmem_opt::LoadedModule> loaded =
      LoadGuarded(input, *topology);
  if (loaded == nullptr) return 0;

  // The pass as the driver configures it; explain decides on a copy.
  const std::string mode = config.mode;
  const core::ToolCostTable table =
      config.slow_network
          ? *core::ParseToolCostTable(kSlowNcclNetwork, "slow_network.txt")
          : core::DefaultToolCostTable();
  const Plan::Options options = nvshmem_opt::DriverPassOptions(
      *core::ParseTopology(config.topology, table.backends), 0, table, mode,
      false);
  std::unique_ptr<xla::HloModule> copy =
      mode == "explain" ? loaded->module->Clone("") : nullptr;
  std::unique_ptr<nvshmem_opt::PassRun> run =
      Run(options, copy ? copy.get() : loaded->module.get());
  if (run == nullptr) return 0;
  absl::StatusOr<std::string> json = nvshmem_opt::ReportJson(
      {"fuzz.hlo", config.topology, "flag", {}, mode}, *run, nullptr);
  if (!json.ok()) Violation(std::string(json.status().message()));
  CheckJson(*json);
  if (mode != "explain") CheckOutput(*loaded, *run, options, *topology);
  return 0;
}
