// nvshmem-opt's input: the bytes of a file (bounded), HLO text from any jax
// 0.9 -> 0.11 or a serialized HloModuleProto, made into a module of the
// TensorFlow wheel's XLA with its partition count settled.
//
// Every failure is InvalidArgument with a one-line message that starts with
// the input's path (and line, where the text has one). Nothing here exits:
// the fuzz harness runs exactly this path.

#ifndef NVSHMEM_OPT_DRIVER_INPUT_H_
#define NVSHMEM_OPT_DRIVER_INPUT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "extensions/backends.h"
#include "xla/hlo/ir/hlo_module.h"

namespace nvshmem_opt {

// Seconds a FIFO, pipe or device may stay silent before its read fails.
constexpr double kDefaultInputTimeoutSeconds = 60;

// Up to `max_bytes` of the file at `path` ('-': stdin). Regular files are
// checked before reading; pipes and devices are refused once past the limit,
// or once silent for `timeout_s` (a FIFO nobody writes to never hangs). A
// socket and a symlink loop are refused at once.
absl::StatusOr<std::string> ReadInput(
    const std::string& path, int64_t max_bytes,
    double timeout_s = kDefaultInputTimeoutSeconds);

struct LoadOptions {
  int num_partitions = 0;  // 0: from the module (InferPartitions).
  int num_replicas = 0;
  // The topology given by the user, or null: sizes a proto's partitions.
  const xla::gpu::nvshmem_selection::Topology* topology = nullptr;
};

struct LoadedModule {
  std::unique_ptr<xla::HloModule> module;
  // The input's HLO text exactly as read (empty for a proto): the pass's
  // output is spliced into it (hlo_splice.h).
  std::string text;
  int rewritten_for_xla =
      0;  // Places read in the wheel's form (readable_text.h).
  // Where the partition count came from when the input does not state it
  // (a message for the user), else empty.
  std::string partitions_note;
  std::string partitions_from;  // What the count was inferred from, or "".
};

// `data` (the input's bytes) as a module, parsed but not yet verified.
// Text in forms the wheel's parser lacks (readable_text.h) is parsed in the
// equivalent form it reads; `text` keeps the input.
absl::StatusOr<LoadedModule> ParseModule(const std::string& path,
                                         std::string data,
                                         const LoadOptions& options);

// Called as each XLA stage of loading starts ("parsing the module",
// "verifying the input"): the driver records it for its launcher.
using LoadHook = std::function<void(const char* stage)>;

// The one reading path, of nvshmem-opt and of the fuzz harness alike: the
// bytes as a module (ParseModule), verified (Verify), each permute's
// backend_config checked as the pass will edit it (JSON). Every message
// starts with `path`, and with its line where the text has one.
absl::StatusOr<LoadedModule> LoadModule(const std::string& path,
                                        std::string data,
                                        const LoadOptions& options,
                                        const LoadHook& stage = nullptr);

// HloVerifier (layout-insensitive, mixed precision allowed) plus a check of
// every shape's layout, which that verifier skips and XLA later trips on.
absl::Status Verify(xla::HloModule* module);

// Newlines and carriage returns as spaces: XLA's messages span lines.
std::string OneLine(std::string text);

}  // namespace nvshmem_opt

#endif  // NVSHMEM_OPT_DRIVER_INPUT_H_
