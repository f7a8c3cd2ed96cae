// The one way nvshmem-opt writes a file (-o, --report).
//
// Rule: a regular file is replaced atomically (readers see the old bytes or
// the new ones, never a part); anything else is written in place and never
// replaced. So `-o /dev/null` writes to the device, a FIFO gets the bytes,
// and a symlink stays a link while the file it names is replaced in the
// link target's own directory.
//   "-"                     stdout
//   a device, FIFO, socket  opened for writing as it is (no O_CREAT/O_TRUNC)
//   a regular file / none   temporary file beside the real target, fsync,
//                           rename over it; an existing file keeps its mode
//                           (and owner where we may set it), a new one gets
//                           0666 & ~umask as open() would give
// Symlinks are followed first (a dangling link creates the file it names).

#ifndef NVSHMEM_OPT_DRIVER_OUTPUT_FILE_H_
#define NVSHMEM_OPT_DRIVER_OUTPUT_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace nvshmem_opt {

// Writes `data` to `path` as above. InvalidArgument, one line starting with
// `path`, when it cannot (a directory, a missing directory, no permission, a
// FIFO nobody reads for `timeout_s`).
absl::Status WriteOutput(const std::string& path, absl::string_view data,
                         double timeout_s = 60);

// `path` with every symlink along its last component followed (relative
// targets read from the link's directory); `path` itself when it is none.
// InvalidArgument on a loop.
absl::Status ResolveOutputPath(const std::string& path, std::string* real);

}  // namespace nvshmem_opt

#endif  // NVSHMEM_OPT_DRIVER_OUTPUT_FILE_H_
