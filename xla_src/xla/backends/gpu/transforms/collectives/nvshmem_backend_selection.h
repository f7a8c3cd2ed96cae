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

#ifndef XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_BACKEND_SELECTION_H_
#define XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_BACKEND_SELECTION_H_

// Backend selection for collective-permutes: which of the backends that the
// target XLA offers runs each permute.
//
// C++17 and absl, with no XLA dependency, so that the XLA pass, the Python
// tools (through bindings) and the heuristics harness all ask the very same
// code; outside XLA it builds against any absl.
//
// Backends are data. The cost table names the set the target XLA offers:
//   nccl,nvshmem            the pinned XLA (jax <= 0.10.1): backend_config
//                           "backend" DEFAULT or NVSHMEM. The default set.
//   nccl,peer[,symmetric]   XLA of jax >= 0.10.2: backend_config
//                           "collectives_mode" COLLECTIVES_PEER_MEMORY or
//                           COLLECTIVES_SYMMETRIC_MEMORY.
// NCCL (XLA's DEFAULT, host-initiated NCCL send/recv) is always in the set
// and is the default answer.
//
// The heuristic, in short:
//   * Every source->target edge gets a link class from the topology: same
//     device, same host (NVLink), same NVLink domain across hosts (e.g. an
//     NVL72 rack), or network.
//   * A backend's time on an edge, for a permute of B buffers (operands)
//     moving `bytes` in all from each source, is
//         permute(backend, class, B, bytes)
//           + bytes / bandwidth(backend, class) * sm_interference(backend)
//     sm_interference is the share of the transfer time that the backend
//     takes away from compute it overlaps with. permute() is, when the table
//     has measured points for (backend, class), the measured curve (below);
//     otherwise the parametric model
//         latency + (B - 1) * per_buffer + bytes / bandwidth
//     per_buffer is what each extra buffer costs: XLA's NVSHMEM permute does
//     a put and a barrier per buffer, NCCL groups all buffers in one launch.
//   * Measured curve. Points (buffers, bytes, us) measured at the XLA level
//     (the permute's own time per loop step). On the points of one buffer
//     count, time is interpolated linearly in log(bytes)-log(time), exact at
//     the points and monotone wherever the points are; outside the measured
//     sizes it continues from the end point at the row's bandwidth. Between
//     two measured buffer counts the two curves' times blend linearly; below
//     the smallest or beyond the largest count, per_buffer is subtracted or
//     added per buffer. Measured because the XLA-level costs are not linear:
//     on 2x H200 a second buffer costs 1-5 us, four buffers 25-30 us, and
//     both backends bend at 16 MiB.
//   * A backend's time for the permute is its slowest edge (all edges move
//     at once).
//   * Each backend other than NCCL is eligible only where its safety rule
//     below holds; NCCL runs everywhere.
//   * The fastest eligible backend is chosen when it beats NCCL by at least
//     `margin` (a fraction); otherwise NCCL.
//
// Safety rules, one per backend, each with its reason:
//   nvshmem  (a) the message fits the symmetric heap (nvshmem_max_bytes);
//            (b) every device of the team has a source, the deadlock-free
//            rule below. Edges may cross the network: XLA initializes
//            NVSHMEM over every process, and NVSHMEM carries puts between
//            hosts over InfiniBand (IBRC or IBGDA); the model prices them.
//   peer     every edge inside one host and one process (the topology's
//            gpus_per_process; by default one process drives a host's GPUs).
//            XLA's peer-memory permute copies with the copy engines straight
//            into the target's buffer, which needs CUDA peer access among the
//            calling process's devices; otherwise XLA falls back to NCCL's
//            host-initiated permute, so there is nothing to gain and the
//            model would be wrong. Safe for shifts: every rank of the clique
//            joins the same rendezvous, with or without a source.
//   symmetric  every edge inside one process (same fallback as peer), and the
//            table says the runtime supports NCCL signals (symmetric_signals
//            1). The one-sided put + signal on NCCL symmetric memory fails at
//            run time where NCCL cannot query signal support ("Signal is not
//            supported: NCCL failed to query communicator properties", seen
//            on 2x H200 with NVLink multicast off), so it is off by default.
//
// Deadlock-free rule (nvshmem). XLA's NVSHMEM collective-permute (the runtime
// thunk RunCollectivePermute) does, for each buffer, a put to the target and
// then a barrier on a communicator of the world team, i.e. every device of
// the program (num_replicas x num_partitions). Only devices that have a
// source call that barrier. If any device of the team has no source, the
// devices that do wait in the barrier forever: the program hangs (observed on
// two H200: pairs {0,1} never finishes). So Decide never plans NVSHMEM for a
// permute in which a team member is not the target of some pair: non-cyclic
// shifts and permutes over a subset of devices. For the same reason a permute
// runs whole on one backend, never split (NVSHMEM for some edges, NCCL for
// the rest): its NVSHMEM half would leave the targets of the other edges
// without a source.
// The team is given by PermuteRequest::team_size; when it is unknown (0) the
// team is taken to be every device of the topology, which can only refuse
// more, never less, than the real team.

#include <array>
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

enum class Backend { kNccl = 0, kNvshmem = 1, kPeer = 2, kSymmetric = 3 };
inline constexpr int kNumBackends = 4;

// A backend set as written in flags and tables: "nccl,nvshmem",
// "nccl,peer", "nccl,peer,symmetric". NCCL must be in it, and NVSHMEM does
// not mix with peer/symmetric (no XLA offers both); InvalidArgument
// otherwise.
absl::StatusOr<std::vector<Backend>> ParseBackendSet(absl::string_view text);
std::string BackendSetToString(const std::vector<Backend>& backends);

// Stable names used in spec strings, cost tables, HLO attributes and JSON.
const char* LinkClassName(LinkClass link_class);
const char* BackendName(Backend backend);
std::optional<LinkClass> LinkClassFromName(absl::string_view name);
std::optional<Backend> BackendFromName(absl::string_view name);

// A GPU cluster: slices x hosts per slice x GPUs per host. Devices are
// numbered slice-major, then host, then GPU. NVLink domains are consecutive
// groups of `nvlink_domain_size` devices (a whole number of hosts, never
// crossing a slice).
class Topology {
 public:
  // Spec grammar: SLICESxHOSTSxGPUS[:OPTION]...
  //   nvlN | nvl=N     NVLink domain of N GPUs (default: one host)
  //   gpus_per_process=N  GPUs each process drives (default: a whole host,
  //                    one process per host; 1: one process per GPU). XLA's
  //                    peer and symmetric paths need every device of the
  //                    permute in the calling process.
  //   map=D0,D1,...    physical device of each logical device, where logical
  //                    device r + p * num_replicas is (replica r, partition
  //                    p) as XLA places them by default; with one replica
  //                    that is the device of each partition (default:
  //                    identity). A map must cover partitions x replicas.
  // Examples: "1x2x4", "1x9x8:nvl72", "1x1x8:gpus_per_process=1",
  //   "2x2x4:map=0,2,4,6,1,3,5,7,8,9,10,11,..."
  // Errors are InvalidArgument, their message starting "topology spec
  // '<spec>': ".
  static absl::StatusOr<Topology> Parse(absl::string_view spec);
  // A topology without a spec, for programmatic use; InvalidArgument when the
  // numbers are inconsistent.
  // gpus_per_process 0 means a whole host.
  static absl::StatusOr<Topology> Create(int slices, int hosts_per_slice,
                                         int gpus_per_host,
                                         int nvlink_domain_size,
                                         std::vector<int> partition_to_device,
                                         int gpus_per_process = 0);

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

  int HostOf(int device) const { return device / gpus_per_host_; }
  int NvlinkDomainOf(int device) const { return device / nvlink_domain_size_; }
  int ProcessOf(int device) const { return device / gpus_per_process_; }

  // Device of a logical device number (XLA's default placement, see
  // EdgeIdsToDevices); identity unless a map was given.
  int MapLogicalDevice(int logical_device) const;

  LinkClass Classify(int src_device, int dst_device) const;

  // Canonical spec string, parseable by Parse.
  std::string ToString() const;

 private:
  int slices_ = 1;
  int hosts_per_slice_ = 1;
  int gpus_per_host_ = 1;
  int nvlink_domain_size_ = 1;
  int gpus_per_process_ = 1;
  std::vector<int> partition_to_device_;
};

struct LinkCost {
  double latency_us = 0;      // One permute of one buffer.
  double bandwidth_gbps = 1;  // GB/s = 1e9 bytes per second.
  double per_buffer_us = 0;   // Each buffer beyond the first.
};

// How NVSHMEM reaches another host over InfiniBand: through the CPU proxy
// thread (IBRC, NVSHMEM's default remote transport) or GPU-initiated
// (IBGDA, NVSHMEM_IB_ENABLE_IBGDA=1). The default is IBRC, the slower one.
enum class NvshmemTransport { kIbrc = 0, kIbgda = 1 };
const char* NvshmemTransportName(NvshmemTransport transport);
// The documented estimate of NVSHMEM's network row for a transport.
LinkCost NvshmemNetworkCost(NvshmemTransport transport);

// One measured point of a backend's curve on one link class: a permute of
// `buffers` buffers moving `bytes` in all took `us` of its own per step.
struct CurvePoint {
  int buffers = 1;
  int64_t bytes = 1;
  double us = 1;
};
// Points per (backend, link class) a table may hold: a measured curve has
// tens; the bound keeps parsing hostile input linear in practice.
inline constexpr int kMaxCurvePoints = 4096;

// Cost model parameters. Defaults (see DefaultCostTable in the .cc) carry
// their sources; a text table can override any of them.
struct CostTable {
  std::array<std::array<LinkCost, kNumLinkClasses>, kNumBackends> links;
  std::array<double, kNumBackends> sm_interference = {0, 0, 0, 0};
  // The backends the target XLA offers (see the header comment).
  std::vector<Backend> backends = {Backend::kNccl, Backend::kNvshmem};
  // Whether the runtime's NCCL supports signals (symmetric's put + signal).
  bool symmetric_signals = false;
  // NVSHMEM's InfiniBand transport; picks its network row's default.
  NvshmemTransport nvshmem_transport = NvshmemTransport::kIbrc;
  double margin = 0.05;  // Required relative gain over NCCL.
  int64_t nvshmem_max_bytes = int64_t{1} << 30;  // Symmetric heap budget.

  // Measured curves, sorted by (buffers, bytes), no two alike; empty: the
  // parametric model of `links`.
  std::array<std::array<std::vector<CurvePoint>, kNumLinkClasses>, kNumBackends>
      curves;

  const std::vector<CurvePoint>& curve(Backend backend,
                                       LinkClass link_class) const {
    return curves[static_cast<int>(backend)][static_cast<int>(link_class)];
  }
  const LinkCost& link(Backend backend, LinkClass link_class) const {
    return links[static_cast<int>(backend)][static_cast<int>(link_class)];
  }
  LinkCost& link(Backend backend, LinkClass link_class) {
    return links[static_cast<int>(backend)][static_cast<int>(link_class)];
  }
};

// The documented defaults, with the measured 2x H200 NVLink curves compiled
// in: NCCL and NVSHMEM at the pinned XLA, peer memory with one process
// driving the GPUs (symmetric gets NCCL's numbers). Built once.
CostTable DefaultCostTable();

// Text format, one entry per line, '#' starts a comment:
//   link <nccl|nvshmem|peer|symmetric>
//        <same_device|nvlink|nvlink_domain|network>
//        <latency_us> <bandwidth_GBps> [<per_buffer_us>]   (omitted: 0)
//   point <backend> <link_class> <buffers> <bytes> <us>   (a measured point;
//        buffers and bytes whole numbers >= 1, us > 0, each (buffers, bytes)
//        once per backend and link class)
//   sm_interference <backend> <fraction>
//   backends <nccl,nvshmem|nccl,peer|nccl,peer,symmetric|...>
//   symmetric_signals <0|1>
//   nvshmem_transport <ibrc|ibgda>   (sets NVSHMEM's network row to that
//        transport's estimate; a later link line overrides it)
//   margin <fraction>
//   nvshmem_max_bytes <bytes>
// Entries not mentioned keep their defaults. A table that mentions a
// (backend, link class) in a link or point line replaces its whole model:
// the inherited points of that pair are dropped, so a link line alone means
// the parametric model and point lines bring their own curve. Errors are
// InvalidArgument and name the line: "<source>:<line>: <message>". The
// entries split_overhead_us and combine_bandwidth_GBps of older tables are
// errors: they priced a split plan, which no longer exists.
absl::StatusOr<CostTable> ParseCostTable(absl::string_view text,
                                         absl::string_view source_name);
std::string CostTableToString(const CostTable& table);

// One collective-permute, as the selection sees it.
struct PermuteRequest {
  int64_t bytes = 0;  // Bytes each source sends (all operands together).
  std::vector<std::pair<int, int>> device_edges;  // (source, target) devices.
  // Devices of the program (num_replicas x num_partitions), which is the
  // NVSHMEM team at the pinned XLA: logical devices 0..team_size-1, placed
  // through the topology's map. 0: unknown, the team is the whole topology
  // (the safe side, see the deadlock-free rule above).
  int team_size = 0;
  // Buffers (operands) of the one permute; `bytes` is all of them together.
  int buffers = 1;
};

// Why `backend` may not run this permute, as one line starting
// "<backend> refused: "; empty when its safety rule holds (see the header
// comment). NCCL is never refused; a backend outside the table's set is.
std::string RefusalReason(const Topology& topology, const CostTable& table,
                          const PermuteRequest& request, Backend backend);

// Physical devices of the NVSHMEM team of a request with `team_size` (see
// PermuteRequest::team_size), in logical order.
std::vector<int> TeamDevices(const Topology& topology, int team_size);

// Why an NVSHMEM permute over `device_edges` would hang the pinned XLA's
// runtime with this team (a team member without a source, or an edge that
// names a device outside the team), as one line starting "nvshmem refused:";
// empty when it is safe.
std::string NvshmemHangReason(
    const std::vector<std::pair<int, int>>& device_edges,
    const std::vector<int>& team);

struct Decision {
  Backend backend = Backend::kNccl;  // The chosen backend.
  // Modeled time of each backend, indexed by Backend; negative when it is not
  // in the set or refused (refused[b] then says why, one line). NCCL's is
  // always set.
  std::array<double, kNumBackends> backend_us = {-1, -1, -1, -1};
  std::array<std::string, kNumBackends> refused;
  double chosen_us = 0;  // backend_us of the chosen backend.
  // Edge counts per link class, indexed by LinkClass.
  std::array<int, kNumLinkClasses> edges_by_class = {0, 0, 0, 0};
  std::string reason;  // One line.
};

// Time of one edge on one backend, for a permute of `buffers` buffers that
// moves `bytes` in all.
double EdgeTimeUs(const CostTable& table, Backend backend, LinkClass link_class,
                  int64_t bytes, int buffers = 1);

// Whether EdgeTimeUs uses a measured curve (else the parametric model).
bool HasMeasuredCurve(const CostTable& table, Backend backend,
                      LinkClass link_class);

Decision Decide(const Topology& topology, const CostTable& table,
                const PermuteRequest& request);

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

}  // namespace nvshmem_selection
}  // namespace gpu
}  // namespace xla

#endif  // XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_NVSHMEM_BACKEND_SELECTION_H_
