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

#ifndef XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_CLUSTER_TOPOLOGY_H_
#define XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_CLUSTER_TOPOLOGY_H_

// The cluster a collective-permute runs on, for backend selection: slices x
// hosts x GPUs per host, NVLink domains, and where XLA places each logical
// device. C++17 and absl only.

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace xla {
namespace gpu {
namespace backend_selection {

enum class LinkClass {
  kSameDevice = 0,
  kIntraHostNvlink = 1,
  kNvlinkDomain = 2,  // Different hosts, same NVLink domain (NVL72-style).
  kNetwork = 3,
};
inline constexpr int kNumLinkClasses = 4;

// Largest topology accepted (bounds maps and device numbers).
inline constexpr int64_t kMaxDevices = 1 << 20;

// A GPU cluster: slices x hosts per slice x GPUs per host, numbered
// slice-major, then host, then GPU. NVLink domains are consecutive groups of
// `nvlink_domain_size` devices (whole hosts, never crossing a slice), and
// processes of `gpus_per_process` devices (dividing a host).
class Topology {
 public:
  // partition_to_device: the physical device of each logical device, where
  // logical device r + p * num_replicas is (replica r, partition p) as XLA
  // places them by default; empty means identity. InvalidArgument when
  // inconsistent; nvlink_domain_size and gpus_per_process 0 mean one host.
  // device_to_process, where given (a runtime's facts, such as jax's
  // process_index of each device), is the process of every device and takes
  // the place of gpus_per_process, which must then be 0: gpus_per_process()
  // becomes the most devices one process drives.
  static absl::StatusOr<Topology> Create(
      int slices, int hosts_per_slice, int gpus_per_host,
      int nvlink_domain_size, std::vector<int> partition_to_device,
      int gpus_per_process = 0, std::vector<int> device_to_process = {});

  int slices() const { return slices_; }
  int hosts_per_slice() const { return hosts_per_slice_; }
  int gpus_per_host() const { return gpus_per_host_; }
  int nvlink_domain_size() const { return nvlink_domain_size_; }
  int gpus_per_process() const { return gpus_per_process_; }
  int num_devices() const {
    return slices_ * hosts_per_slice_ * gpus_per_host_;
  }
  const std::vector<int>& partition_to_device() const {
    return partition_to_device_;
  }

  // The process of each device where the topology was given one; empty:
  // processes of gpus_per_process consecutive devices.
  const std::vector<int>& device_to_process() const {
    return device_to_process_;
  }

  int HostOf(int device) const { return device / gpus_per_host_; }
  int NvlinkDomainOf(int device) const { return device / nvlink_domain_size_; }
  int ProcessOf(int device) const {
    return device_to_process_.empty() ? device / gpus_per_process_
                                      : device_to_process_[device];
  }

  // Device of a logical device (see EdgeIdsToDevices); nullopt outside the
  // map.
  std::optional<int> MapLogicalDevice(int logical_device) const;

  LinkClass Classify(int src_device, int dst_device) const;

 private:
  int slices_ = 1;
  int hosts_per_slice_ = 1;
  int gpus_per_host_ = 1;
  int nvlink_domain_size_ = 1;
  int gpus_per_process_ = 1;
  std::vector<int> partition_to_device_;
  std::vector<int> device_to_process_;
};

// Expands source_target_pairs to device edges: partition ids applied to
// every replica when `cross_partition` (the op has a channel id), else
// replica ids applied to every partition. (replica r, partition p) is logical
// device r + p * num_replicas, XLA's default placement, which the topology's
// map turns into a device. InvalidArgument when an id is out of range.
absl::StatusOr<std::vector<std::pair<int, int>>> EdgeIdsToDevices(
    const Topology& topology,
    const std::vector<std::pair<int64_t, int64_t>>& pairs, bool cross_partition,
    int num_partitions, int num_replicas);

// How many of `edges` join devices of different hosts.
int EdgesLeavingHost(const Topology& topology,
                     const std::vector<std::pair<int, int>>& edges);

}  // namespace backend_selection
}  // namespace gpu
}  // namespace xla

#endif  // XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_CLUSTER_TOPOLOGY_H_
