// XLA's buffer-assignment dump beside a module after optimizations
// (`<stem>-buffer-assignment.txt`, what --xla_dump_to writes): which
// allocation holds each value, and what of a collective-permute's
// destination the pinned series' emitter refuses (CheckNvshmemDestination:
// an entry parameter's buffer, or one the program returns).

#ifndef NVSHMEM_OPT_BUFFER_ASSIGNMENT_H_
#define NVSHMEM_OPT_BUFFER_ASSIGNMENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tool_layer/backends.h"
#include "xla/hlo/ir/hlo_instruction.h"

namespace nvshmem_opt {

struct Allocation {
  int64_t number = 0;
  int64_t parameter = -1;  // The entry parameter it holds; -1: none.
  bool maybe_live_out = false;
};

// {instruction: {shape index: the allocation holding that value}}.
using BufferAssignment =
    absl::flat_hash_map<std::string,
                        std::map<std::vector<int64_t>, Allocation>>;

// Where XLA dumps the buffer assignment of the module at `module_path`
// (the path less .txt or .hlo, then -buffer-assignment.txt).
std::string BufferAssignmentPath(const std::string& module_path);

// The allocation and value lines of a dump; InvalidArgument
// "PATH:LINE: ..." on text that is not one.
absl::StatusOr<BufferAssignment> ParseBufferAssignment(absl::string_view text,
                                                       absl::string_view path);

// What `assignment` says of each destination of `permute` (an async start's
// outputs {1,...}): its allocation, the entry parameter that allocation is,
// and whether the destination's buffer is returned (a loop's, branch's, call's
// or the permute's own value returned from the same allocation; any other
// value there is another buffer that reuses the allocation). Empty where the
// dump places none of them, or for a synchronous permute.
std::vector<xla::gpu::backend_selection::DestinationBuffer> DestinationsOf(
    const xla::HloInstruction& permute, const BufferAssignment& assignment);

}  // namespace nvshmem_opt

#endif  // NVSHMEM_OPT_BUFFER_ASSIGNMENT_H_
