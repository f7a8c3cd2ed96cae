/* Copyright 2026 The OpenXLA Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
==============================================================================*/

#include "xla/backends/gpu/transforms/collectives/cluster_topology.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace xla {
namespace gpu {
namespace backend_selection {

absl::StatusOr<Topology> Topology::Create(int slices, int hosts_per_slice,
                                          int gpus_per_host,
                                          int nvlink_domain_size,
                                          std::vector<int> partition_to_device,
                                          int gpus_per_process,
                                          std::vector<int> device_to_process) {
  if (slices < 1 || hosts_per_slice < 1 || gpus_per_host < 1) {
    return absl::InvalidArgumentError(
        "slices, hosts and GPUs per host must all be at least 1");
  }
  const int64_t devices = int64_t{slices} * hosts_per_slice * gpus_per_host;
  if (devices > kMaxDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology has ", devices, " devices; at most ",
                     kMaxDevices, " are supported"));
  }
  if (nvlink_domain_size == 0) nvlink_domain_size = gpus_per_host;
  const int64_t slice_devices = int64_t{hosts_per_slice} * gpus_per_host;
  if (nvlink_domain_size < gpus_per_host ||
      nvlink_domain_size % gpus_per_host != 0 ||
      slice_devices % nvlink_domain_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NVLink domain of ", nvlink_domain_size,
        " GPUs must be a whole number of hosts (", gpus_per_host,
        " GPUs each) that divides a slice (", slice_devices, " GPUs)"));
  }
  if (!device_to_process.empty()) {
    if (gpus_per_process != 0) {
      return absl::InvalidArgumentError(
          "give GPUs per process or each device's process, not both");
    }
    if (static_cast<int64_t>(device_to_process.size()) != devices) {
      return absl::InvalidArgumentError(
          absl::StrCat("the process map has ", device_to_process.size(),
                       " entries but the topology has ", devices, " devices"));
    }
    std::vector<int> per_process(devices, 0);
    for (int process : device_to_process) {
      if (process < 0 || process >= devices) {
        return absl::InvalidArgumentError(
            absl::StrCat("process map names process ", process, " outside 0..",
                         devices - 1));
      }
      gpus_per_process = std::max(gpus_per_process, ++per_process[process]);
    }
  }
  if (gpus_per_process == 0) gpus_per_process = gpus_per_host;
  if (gpus_per_process < 1 ||
      (device_to_process.empty() && gpus_per_host % gpus_per_process != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(gpus_per_process, " GPUs per process must divide a host (",
                     gpus_per_host, " GPUs)"));
  }
  std::vector<bool> seen(partition_to_device.empty() ? 0 : devices, false);
  for (int device : partition_to_device) {
    if (device < 0 || device >= devices) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device map names device ", device, " outside 0..", devices - 1));
    }
    if (seen[device]) {
      return absl::InvalidArgumentError(
          absl::StrCat("device map names device ", device, " twice"));
    }
    seen[device] = true;
  }
  Topology topology;
  topology.slices_ = slices;
  topology.hosts_per_slice_ = hosts_per_slice;
  topology.gpus_per_host_ = gpus_per_host;
  topology.nvlink_domain_size_ = nvlink_domain_size;
  topology.gpus_per_process_ = gpus_per_process;
  topology.partition_to_device_ = std::move(partition_to_device);
  topology.device_to_process_ = std::move(device_to_process);
  return topology;
}

std::optional<int> Topology::MapLogicalDevice(int logical_device) const {
  if (partition_to_device_.empty()) return logical_device;
  if (logical_device < 0 ||
      logical_device >= static_cast<int>(partition_to_device_.size())) {
    return std::nullopt;
  }
  return partition_to_device_[logical_device];
}

LinkClass Topology::Classify(int src_device, int dst_device) const {
  if (src_device == dst_device) return LinkClass::kSameDevice;
  if (HostOf(src_device) == HostOf(dst_device)) {
    return LinkClass::kIntraHostNvlink;
  }
  if (NvlinkDomainOf(src_device) == NvlinkDomainOf(dst_device)) {
    return LinkClass::kNvlinkDomain;
  }
  return LinkClass::kNetwork;
}

absl::StatusOr<std::vector<std::pair<int, int>>> EdgeIdsToDevices(
    const Topology& topology,
    const std::vector<std::pair<int64_t, int64_t>>& pairs, bool cross_partition,
    int num_partitions, int num_replicas) {
  if (num_partitions < 1 || num_replicas < 1) {
    return absl::InvalidArgumentError(
        "num_partitions and num_replicas must be at least 1");
  }
  const int64_t id_limit = cross_partition ? num_partitions : num_replicas;
  const int groups = cross_partition ? num_replicas : num_partitions;
  const int64_t logical_devices = int64_t{num_partitions} * num_replicas;
  const size_t map_size = topology.partition_to_device().size();
  if (map_size != 0 && static_cast<int64_t>(map_size) != logical_devices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the topology's map has ", map_size, " entries but the module has ",
        logical_devices, " devices (partitions x replicas)"));
  }
  if (logical_devices > topology.num_devices()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the module needs ", logical_devices, " devices (", num_partitions,
        " partitions x ", num_replicas, " replicas) but the topology has ",
        topology.num_devices()));
  }
  for (const auto& [src, dst] : pairs) {
    if (src < 0 || src >= id_limit || dst < 0 || dst >= id_limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pair {", src, ",", dst, "} is outside 0..", id_limit - 1, " (",
          cross_partition ? "partitions" : "replicas", ")"));
    }
  }
  std::vector<std::pair<int, int>> edges;
  edges.reserve(pairs.size() * groups);
  for (int group = 0; group < groups; ++group) {
    for (const auto& [src, dst] : pairs) {
      auto logical = [&](int64_t id) {
        int64_t replica = cross_partition ? group : id;
        int64_t partition = cross_partition ? id : group;
        return static_cast<int>(replica + partition * num_replicas);
      };
      // In range: the map, when given, covers every logical device (above).
      edges.emplace_back(*topology.MapLogicalDevice(logical(src)),
                         *topology.MapLogicalDevice(logical(dst)));
    }
  }
  return edges;
}

int EdgesLeavingHost(const Topology& topology,
                     const std::vector<std::pair<int, int>>& edges) {
  int count = 0;
  for (const auto& [src, dst] : edges) {
    if (topology.HostOf(src) != topology.HostOf(dst)) ++count;
  }
  return count;
}

}  // namespace backend_selection
}  // namespace gpu
}  // namespace xla
