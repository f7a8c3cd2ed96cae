// How far the tools read an input: the defaults of the driver's
// --max-input-bytes and --input-timeout and the bound of a side input (a cost
// table, a module config, a manifest), one source for the driver and, through
// the binding, the Python tools.
#ifndef NVSHMEM_TOOL_LAYER_INPUT_LIMITS_H_
#define NVSHMEM_TOOL_LAYER_INPUT_LIMITS_H_

#include <cstdint>

namespace xla::gpu::backend_selection {

// XLA's parser takes about 16 bytes of address space per byte of HLO text, the
// Python reader about 8: a gigabyte of text stays within a few dozen.
inline constexpr int64_t kDefaultMaxInputBytes = int64_t{1} << 30;
// Seconds a FIFO, pipe or device may stay silent before its read fails.
inline constexpr double kDefaultInputTimeoutSeconds = 60;
// A side input is kilobytes: its own bound, whatever the module's.
inline constexpr int64_t kSideInputMaxBytes = int64_t{64} << 20;

}  // namespace xla::gpu::backend_selection

#endif  // NVSHMEM_TOOL_LAYER_INPUT_LIMITS_H_
