// The topology spec grammar (topology_spec.cc): the core's Topology written
// as text, the process layout a spec leaves unstated, and the helpers for user
// text the layer's messages echo.

#ifndef NVSHMEM_TOOL_LAYER_TOPOLOGY_SPEC_H_
#define NVSHMEM_TOOL_LAYER_TOPOLOGY_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/backend_cost_table.h"
#include "xla/backends/gpu/transforms/collectives/cluster_topology.h"

namespace xla::gpu::backend_selection {

// User text echoed in an error message: one line, cut short.
std::string Printable(absl::string_view s);
// Digits only, no sign or blanks, no overflow.
std::optional<int64_t> ParseCount(absl::string_view s);

// The core's topology, written as a spec:
//   SLICESxHOSTSxGPUS[:OPTION]... with options
//   nvlN | nvl=N           NVLink domain of N GPUs (default: one host)
//   gpus_per_process=N     GPUs that share a process (default: see
//                          DefaultGpusPerProcess)
//   processes=P0,P1,...    the process of each device of the topology (a
//                          runtime's facts: jax's process_index of each
//                          device), in place of gpus_per_process
//   map=D0,D1,...          physical device of each logical device, where
//                          logical device r + p * num_replicas is (replica
//                          r, partition p) as XLA places them by default
// Examples: "1x2x4", "1x9x8:nvl72". Errors are InvalidArgument,
// "topology spec '<spec>': ...".
absl::StatusOr<Topology> ParseTopology(absl::string_view spec);
std::string TopologySpec(const Topology& topology);

// The process layout a spec leaves unstated, one fact for every backend: one
// GPU per process where the target XLA offers NVSHMEM (the pinned XLA runs it
// only so: its pass keeps NCCL when a process sees more GPUs), else one
// process per host (jax's default on a host, the layout peer memory needs).
int DefaultGpusPerProcess(const std::vector<Backend>& offered,
                          int gpus_per_host);
// A spec with the layout default of the `offered` backend set.
absl::StatusOr<Topology> ParseTopology(absl::string_view spec,
                                       const std::vector<Backend>& offered);
// Whether a spec states its process layout (gpus_per_process=N).
bool SpecStatesProcesses(absl::string_view spec);
// The process layout in words, with why where it is the default:
// "processes of 1 GPU (the default where the target XLA offers NVSHMEM ...)".
std::string ProcessLayoutText(const Topology& topology, bool stated,
                              const std::vector<Backend>& offered);
// `topology` with the layout default of `offered` where it has one host per
// process by default (a topology derived from a module states none).
Topology WithDefaultProcesses(const Topology& topology,
                              const std::vector<Backend>& offered);

}  // namespace xla::gpu::backend_selection

#endif  // NVSHMEM_TOOL_LAYER_TOPOLOGY_SPEC_H_
