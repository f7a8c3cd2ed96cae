// How many partitions a module runs on when it does not say: jax's lowered
// text (`jax.jit(f).lower(...).as_text(dialect="hlo")`) prints no
// num_partitions, and XLA's parser then assumes 1, which no SPMD permute fits.
// The driver and the Python tools each count what their own parse sees and
// settle the number here, so both give the same count for one module.
#ifndef NVSHMEM_TOOL_LAYER_PARTITIONS_H_
#define NVSHMEM_TOOL_LAYER_PARTITIONS_H_

#include <cstdint>
#include <string>

namespace xla::gpu::backend_selection {

struct ModuleDevices {
  // One more than the largest partition id a cross-partition collective (one
  // with a channel_id) names in its pairs or groups; 0 when none does.
  int64_t ids_used = 0;
  // Devices of the largest Shardy mesh in the frontend attributes; 0: none.
  int64_t mesh_devices = 0;
  // Devices of the topology the user gave; 0: none given.
  int64_t topology_devices = 0;
  int64_t replicas = 1;
};

struct PartitionCount {
  int64_t partitions = 1;
  std::string from;  // What it was inferred from; empty: nothing to infer.
};

// The Shardy mesh, else the topology's devices per replica, else the ids
// used; never fewer than the ids used.
PartitionCount InferPartitions(const ModuleDevices& devices);

}  // namespace xla::gpu::backend_selection

#endif  // NVSHMEM_TOOL_LAYER_PARTITIONS_H_
