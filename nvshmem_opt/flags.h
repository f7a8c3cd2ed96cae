// The driver's command line: its flags, parsed and checked, and how it stops
// on a bad one (one line on stderr and an exit code; see nvshmem_opt.cc).

#ifndef NVSHMEM_OPT_FLAGS_H_
#define NVSHMEM_OPT_FLAGS_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "nvshmem_opt/input.h"
#include "xla/service/gpu/transforms/collectives/collective_backend_assigner.h"

namespace nvshmem_opt {

struct Flags {
  std::string input, output, topology, cost_table, backends, report;
  std::string module_config;  // "": the one found beside a text input.
  std::string mode = "rewrite";
  int devices_per_host = 0;  // 0: kDefaultDevicesPerHost (capped).
  bool compare_upstream = false, annotate = false, print_cost_table = false,
       time = false;
  bool print_readable = false;
  // The target XLA runs each permute's own collectives_mode (the series for
  // jax v0.11.0's and openxla main's XLA); default: a stock XLA, which runs
  // one mode per program (xla_gpu_collective_permute_mode). hlo-tools'
  // --per-op-modes is the same setting, with the same default.
  bool per_op_modes = false;
  int64_t upstream_threshold_bytes = xla::gpu::kDefaultThresholdInBytes;
  int num_partitions = 0, num_replicas = 0;  // 0: from the input.
  int64_t max_input_bytes =
      nvshmem_opt::kDefaultMaxInputBytes;  // Larger inputs are refused.
  // A FIFO, pipe or device silent this long is refused.
  double input_timeout = nvshmem_opt::kDefaultInputTimeoutSeconds;
};

// argv read into Flags; --help and --version print and exit 0, a bad flag or
// argument exits 2 through Fail.
Flags ParseFlags(int argc, char** argv);

// `text` cut to one screen line: XLA's verifier may quote a whole instruction.
std::string CapLine(const std::string& text);

// From here on, each line written to std::cerr is written as Printable
// (input.h) makes it: a file name that is not UTF-8 is printed escaped, and a
// message stays one line.
void PrintableStderr();

// "nvshmem-opt: MESSAGE" on stderr, then exit `code`.
[[noreturn]] void Fail(int code, const std::string& message);

// Exit 2 for InvalidArgument (the input), else 1 (a bug).
template <typename T>
T OrFail(absl::StatusOr<T> value, const std::string& prefix = "") {
  if (value.ok()) return *std::move(value);
  const bool input =
      value.status().code() == absl::StatusCode::kInvalidArgument;
  Fail(input ? 2 : 1, prefix + std::string(value.status().message()));
}

}  // namespace nvshmem_opt

#endif  // NVSHMEM_OPT_FLAGS_H_
