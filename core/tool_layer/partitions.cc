#include "tool_layer/partitions.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace xla::gpu::backend_selection {

PartitionCount InferPartitions(const ModuleDevices& devices) {
  PartitionCount count;
  if (devices.ids_used <= 1 && devices.mesh_devices <= 1) return count;
  const std::string by_ids = "the largest partition id its collectives name";
  if (devices.mesh_devices > 1) {
    count = {devices.mesh_devices,
             "the Shardy mesh in its frontend attributes"};
  } else if (devices.topology_devices > 0) {
    count = {
        std::max<int64_t>(1, devices.topology_devices /
                                 std::max<int64_t>(1, devices.replicas)),
        absl::StrCat("the topology's ", devices.topology_devices, " devices")};
  } else {
    count = {devices.ids_used, by_ids};
  }
  if (count.partitions < devices.ids_used) {
    count = {devices.ids_used, by_ids};
  }
  return count;
}

}  // namespace xla::gpu::backend_selection
