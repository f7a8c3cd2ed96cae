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

#ifndef XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_TOPOLOGY_H_
#define XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_TOPOLOGY_H_

// The cluster a collective-permute runs on, for backend selection: slices x
// hosts x GPUs per host, NVLink domains, and where XLA places each logical
// device. C++17 and absl only.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace xla {
namespace gpu {
namespace nvshmem_selection {

enum class LinkClass {
  kSameDevice = 0,
  kIntraHostNvlink = 1,
  kNvlinkDomain = 2,  // Different hosts, same NVLink domain (NVL72-style).
  kNetwork = 3,
};
inline constexpr int kNumLinkClasses = 4;

// Names in cost tables.
const char* LinkClassName(LinkClass link_class);
std::optional<LinkClass> LinkClassFromName(absl::string_view name);

// A GPU cluster: slices x hosts per slice x GPUs per host. Devices are
// numbered slice-major, then host, then GPU. NVLink domains are consecutive
// groups of `nvlink_domain_size` devices (a whole number of hosts, never
// crossing a slice).
class Topology {
 public:
  // Spec grammar: SLICESxHOSTSxGPUS[:OPTION]...
  //   nvlN | nvl=N     NVLink domain of N GPUs (default: one host)
  //   map=D0,D1,...    physical device of each logical device, where logical
  //                    device r + p * num_replicas is (replica r, partition
  //                    p) as XLA places them by default; with one replica
  //                    that is the device of each partition (default:
  //                    identity). A map must cover partitions x replicas.
  // Examples: "1x2x4", "1x9x8:nvl72",
  //   "2x2x4:map=0,2,4,6,1,3,5,7,8,9,10,11,..."
  // Errors are InvalidArgument, their message starting "topology spec
  // '<spec>': ".
  static absl::StatusOr<Topology> Parse(absl::string_view spec);
  // A topology without a spec, for programmatic use; InvalidArgument when the
  // numbers are inconsistent. nvlink_domain_size 0 means one host.
  static absl::StatusOr<Topology> Create(int slices, int hosts_per_slice,
                                         int gpus_per_host,
                                         int nvlink_domain_size,
                                         std::vector<int> partition_to_device);

  int slices() const { return slices_; }
  int hosts_per_slice() const { return hosts_per_slice_; }
  int gpus_per_host() const { return gpus_per_host_; }
  int nvlink_domain_size() const { return nvlink_domain_size_; }
  int num_devices() const {
    return slices_ * hosts_per_slice_ * gpus_per_host_;
  }
  const std::vector<int>& partition_to_device() const {
    return partition_to_device_;
  }

  int HostOf(int device) const { return device / gpus_per_host_; }
  int NvlinkDomainOf(int device) const { return device / nvlink_domain_size_; }

  // Device of a logical device number (XLA's default placement, see
  // EdgeIdsToDevices); identity unless a map was given; nullopt outside the
  // map.
  std::optional<int> MapLogicalDevice(int logical_device) const;

  LinkClass Classify(int src_device, int dst_device) const;

  // Canonical spec string, parseable by Parse.
  std::string ToString() const;

 private:
  int slices_ = 1;
  int hosts_per_slice_ = 1;
  int gpus_per_host_ = 1;
  int nvlink_domain_size_ = 1;
  std::vector<int> partition_to_device_;
};

// Expands the ids of source_target_pairs to device edges. In cross-partition
// mode (the op has a channel id) the pairs hold partition ids and apply to
// every replica; otherwise they hold replica ids and apply to every
// partition. The logical device of (replica r, partition p) follows XLA's
// default placement, r + p * num_replicas; the topology's map, when given,
// turns it into a physical device. InvalidArgument when an id is out of
// range or a device exceeds the topology.
absl::StatusOr<std::vector<std::pair<int, int>>> EdgeIdsToDevices(
    const Topology& topology,
    const std::vector<std::pair<int64_t, int64_t>>& pairs, bool cross_partition,
    int num_partitions, int num_replicas);

// Text helpers shared by the topology and cost-table parsers.
namespace text_internal {
// Largest topology accepted (bounds maps and device numbers).
inline constexpr int64_t kMaxDevices = 1 << 20;
// User text echoed in an error message: one line, cut short.
std::string Printable(absl::string_view s);
// Digits only, no sign or blanks, no overflow.
std::optional<int64_t> ParseCount(absl::string_view s);
}  // namespace text_internal

}  // namespace nvshmem_selection
}  // namespace gpu
}  // namespace xla

#endif  // XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_TOPOLOGY_H_
