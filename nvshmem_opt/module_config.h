// XLA's module config beside a text module: the device assignment, which HLO
// text does not carry. XLA's GPU compiler dumps the config as
// `module_NNNN.NAME.config.pbtxt` beside each stage of the module; the tools
// keep a copy as `<stem>.config.pbtxt` beside a module file of their own
// (`after_optimizations.config.pbtxt` beside `after_optimizations.hlo`).

#ifndef NVSHMEM_OPT_DRIVER_MODULE_CONFIG_H_
#define NVSHMEM_OPT_DRIVER_MODULE_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace nvshmem_opt {

// `<stem>.config.pbtxt` for a module file (stem: the path less .hlo.pb,
// .hlo, .txt or .pb).
std::string SidecarConfigPath(const std::string& module_path);

// The config beside `module_path`: its sidecar, else XLA's own config of the
// dumped module the file belongs to; "" when there is none.
std::string FindModuleConfig(const std::string& module_path);

// OK unless something by the name of a config beside `module_path` (one
// FindModuleConfig would try) is not a regular file: a FIFO, a directory, a
// device, a dangling link. Then InvalidArgument naming it: a config found
// there is neither read (a FIFO could stall) nor silently passed over.
absl::Status CheckConfigBeside(const std::string& module_path);

struct ModulePlacement {
  int replicas = 0;
  int partitions = 0;
  // Device of logical device r + p * replicas, as the core's topology maps.
  std::vector<int> devices;
  // The program's xla_gpu_collective_permute_mode ("": not given).
  std::string collective_permute_mode;
  std::string text;  // The config file's text, for the output's sidecar.
};

// The static device assignment of the config at `path`, checked as XLA checks
// one; InvalidArgument naming the file (and line) when bad or absent. Read
// within `max_bytes` (a config's own limit, not --max-input-bytes) and
// --input-timeout (input.h CurrentInputBounds).
absl::StatusOr<ModulePlacement> ReadModulePlacement(const std::string& path,
                                                    int64_t max_bytes);

}  // namespace nvshmem_opt

#endif  // NVSHMEM_OPT_DRIVER_MODULE_CONFIG_H_
