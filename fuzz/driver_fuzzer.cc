// libFuzzer harness for nvshmem-opt's whole path:
//   parse (HLO text or serialized proto) -> HloVerifier -> pass -> HloVerifier
//   -> JSON report + print -> re-parse of the printed text -> pass again.
//
// It compiles the driver itself (driver/nvshmem_opt.cc, with its main renamed)
// so that the driver's own code (ParseInput with its checks before XLA's
// parser, Verify, RecordsToJson, JsonString) is the code under test; only the
// parts that exit() (LoadModule's Fail, ReadFileOrDie) are left out.
//
// Input: byte 0 picks the configuration (topology x mode x cost table), the
// rest is the module. fuzz/make_corpus.py writes the seeds.
//
// Properties checked (a violation aborts, so libFuzzer records it):
//   * a rejected input gets a non-empty, one-line error message;
//   * the pass's output passes HloVerifier (the driver's exit code 1);
//   * the JSON report holds no non-finite number (nan/inf is not JSON);
//   * the printed module parses again, and the pass on it changes nothing.

#define main nvshmem_opt_driver_main
#include "../driver/nvshmem_opt.cc"
#undef main

#include <csetjmp>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

// XLA's parser and verifier abort on some malformed modules (CHECK failures
// inside the wheel's XLA). The driver turns those into a one-line error and
// exit code 2 (see XlaGuard in nvshmem_opt.cc); here we jump back out of the
// fatal-signal handler instead, count the input as rejected and go on. Only
// the input stages are guarded: a crash in the pass or on its output is still
// a crash.
sigjmp_buf g_jump;
int64_t g_xla_input_aborts = 0;
extern "C" void OnXlaInputAbort(int) { siglongjmp(g_jump, 1); }

// Runs on its own stack, as the driver's handler does (alt_signal_stack.h).
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
    "link nccl network 1 900\nsm_interference nccl 4\n";

Config PickConfig(uint8_t byte) {
  Config config;
  config.topology = kTopologies[byte % 8];
  config.mode = kModes[(byte / 8) % 3];
  config.slow_network = (byte / 24) % 2 == 1;
  return config;
}

[[noreturn]] void Violation(const std::string& what) {
  std::fprintf(stderr, "PROPERTY VIOLATED: %s\n", what.c_str());
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
  for (const char* bad : {"nan", "inf"}) {
    // Numbers follow ": " in the report; strings are quoted.
    if (json.find(std::string(": ") + bad) != std::string::npos ||
        json.find(std::string(": -") + bad) != std::string::npos) {
      Violation(std::string("non-finite number in the JSON report: ") + json);
    }
  }
}

// The input through the driver's own loader (the same checks before XLA's
// parser) and the verifier, guarded against XLA's aborts; null when rejected.
std::unique_ptr<xla::HloModule> LoadGuarded(const std::string& input,
                                            const sel::Topology& topology) {
  std::unique_ptr<xla::HloModule> module;
  InputGuard guard;
  if (sigsetjmp(g_jump, 1) != 0) {
    ++g_xla_input_aborts;  // What was allocated is leaked; fine here.
    module.release();
    return nullptr;
  }
  Flags load_flags;
  absl::StatusOr<std::unique_ptr<xla::HloModule>> loaded =
      ParseInput("fuzz.hlo", input, load_flags, &topology);
  if (!loaded.ok()) {
    CheckRejection(std::string(loaded.status().message()));
    return nullptr;
  }
  module = *std::move(loaded);
  if (absl::Status status = Verify(module.get()); !status.ok()) {
    CheckRejection("fuzz.hlo: HloVerifier rejects the input: " +
                   OneLine(std::string(status.message())));
    return nullptr;
  }
  return module;
}

// The printed module reads back, and a second run changes nothing.
void CheckReprint(const xla::HloModule& target,
                  const Rewriter::Options& options, const std::string& mode) {
  const std::string text = target.ToString();
  auto again = xla::ParseAndReturnUnverifiedModule(text);
  if (!again.ok()) {
    Violation("printed module does not parse: " +
              std::string(again.status().message()));
  }
  if (absl::Status status = Verify(again->get()); !status.ok()) {
    Violation("printed module does not verify: " +
              std::string(status.message()));
  }
  Rewriter second(options);
  absl::StatusOr<bool> changed_again = second.Run(again->get());
  if (!changed_again.ok()) {
    Violation("second run fails: " +
              std::string(changed_again.status().message()));
  }
  if (mode == "rewrite" && *changed_again) {
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
  if (absl::StatusOr<sel::CostTable> table =
          sel::ParseCostTable(kSlowNcclNetwork, "slow_network.txt");
      !table.ok()) {
    Violation("built-in cost table rejected: " +
              std::string(table.status().message()));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Config config = PickConfig(data[0]);
  const std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  absl::StatusOr<sel::Topology> topology =
      sel::Topology::Parse(config.topology);
  if (!topology.ok()) {
    Violation("built-in topology rejected: " +
              std::string(topology.status().message()));
  }
  std::unique_ptr<xla::HloModule> module = LoadGuarded(input, *topology);
  if (module == nullptr) return 0;

  // The pass as the driver configures it.
  Flags flags;
  flags.input = "fuzz.hlo";
  flags.topology = config.topology;
  flags.mode = config.mode;
  const Rewriter::Options options =
      PassOptions(flags, config.slow_network ? kSlowNcclNetwork : "", 0);
  Rewriter pass(options);
  std::unique_ptr<xla::HloModule> scratch;
  xla::HloModule* target = module.get();
  if (flags.mode == "explain") {
    scratch = module->Clone("");
    target = scratch.get();
  }
  absl::StatusOr<bool> changed = pass.Run(target);
  if (!changed.ok()) {
    CheckRejection("fuzz.hlo: " +
                   OneLine(std::string(changed.status().message())));
    return 0;
  }
  if (absl::Status status = Verify(target); !status.ok()) {
    Violation("HloVerifier rejects the pass's output: " +
              std::string(status.message()));
  }
  CheckJson(RecordsToJson(flags, {*topology, false}, pass.records(), {},
                          nullptr, *changed, 1.0));
  CheckReprint(*target, options, flags.mode);
  return 0;
}
