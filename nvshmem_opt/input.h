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
#include "tool_layer/backends.h"
#include "tool_layer/input_limits.h"
#include "xla/hlo/ir/hlo_module.h"

namespace nvshmem_opt {

// The defaults of --max-input-bytes and --input-timeout: the tool layer's,
// which the Python tools read through the binding.
using ::xla::gpu::backend_selection::kDefaultInputTimeoutSeconds;
using ::xla::gpu::backend_selection::kDefaultMaxInputBytes;
// Bytes of address space XLA's parser takes per byte of HLO text, about
// (measured: 14 MB more for a 1 MB train step than for a tiny module).
constexpr int64_t kParseBytesPerInputByte = 16;

// How every file the driver reads is bounded: the module, --cost-table,
// --module-config, the config and buffer assignment beside the module. Set
// once from the flags (main), read by ReadInput wherever it is called.
struct InputBounds {
  int64_t max_bytes = kDefaultMaxInputBytes;       // --max-input-bytes
  double timeout_s = kDefaultInputTimeoutSeconds;  // --input-timeout
};
void SetInputBounds(const InputBounds& bounds);
const InputBounds& CurrentInputBounds();

// A file's own byte limit and how it is set, for the message that names it.
struct InputLimit {
  int64_t max_bytes;
  std::string set_by;     // e.g. "--max-input-bytes"
  double timeout_s = -1;  // Below 0: CurrentInputBounds()'s.
};

// Up to `limit.max_bytes` of the file at `path` ('-': stdin), within what
// the address-space limit (ulimit -v) leaves. Regular files are checked
// before reading; pipes and devices are refused once past the limit, or once
// silent for the --input-timeout (a FIFO nobody writes to never hangs). A
// directory, socket and symlink loop are refused at once. The buffer never
// grows past the limit: nothing is read whole before its size is bounded.
absl::StatusOr<std::string> ReadBounded(const std::string& path,
                                        const InputLimit& limit);

// The same within `max_bytes` (--max-input-bytes names it) and `timeout_s`
// (below 0: the --input-timeout of CurrentInputBounds).
absl::StatusOr<std::string> ReadInput(const std::string& path,
                                      int64_t max_bytes, double timeout_s = -1);

// Bytes of address space the process may still map under its ulimit -v, and
// that limit in words for a message ("" and INT64_MAX without one).
int64_t AddressSpaceLeft();
std::string AddressSpaceText();

// `text` with every byte that is not part of valid UTF-8 (and every control
// character but tab) written as \xNN: how a file name is printed.
std::string Printable(const std::string& text);

struct LoadOptions {
  int num_partitions = 0;  // 0: from the module (InferPartitions).
  int num_replicas = 0;
  // The topology given by the user, or null: sizes a proto's partitions.
  const xla::gpu::backend_selection::Topology* topology = nullptr;
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
