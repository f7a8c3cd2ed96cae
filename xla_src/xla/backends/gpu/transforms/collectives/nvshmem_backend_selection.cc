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

#include "xla/backends/gpu/transforms/collectives/nvshmem_backend_selection.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace xla {
namespace gpu {
namespace nvshmem_selection {
namespace {

constexpr const char* kLinkClassNames[kNumLinkClasses] = {
    "same_device", "nvlink", "nvlink_domain", "network"};
constexpr const char* kBackendNames[kNumBackends] = {"nccl", "nvshmem", "peer",
                                                     "symmetric"};
constexpr const char* kBackendTitles[kNumBackends] = {"NCCL", "NVSHMEM", "peer",
                                                      "symmetric"};

// Largest topology we accept; guards against specs that would allocate
// absurd maps or overflow device numbers.
constexpr int64_t kMaxDevices = 1 << 20;
// Largest buffer count of a measured point (XLA permutes have a handful).
constexpr int64_t kMaxBuffers = 1 << 20;

std::string Us(double us) { return absl::StrFormat("%.2f us", us); }

// The shortest text that reads back as the same double, fixed or scientific
// whichever is shorter: 5.6 and 450, not 5.5999999999999996 (%.17g) or
// 4.5e+02 (%g), so printed tables stay readable and round-trip exactly.
std::string Shortest(double value) {
  char buffer[64];
  std::to_chars_result result =
      std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

std::string Bytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrFormat("%.0f %s", value, kUnits[unit])
                   : absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

// User text echoed in an error message: control characters escaped (so the
// message stays on one line) and long text cut short.
std::string Printable(absl::string_view s) {
  constexpr size_t kMaxEchoed = 256;
  std::string out;
  for (char c : s.substr(0, kMaxEchoed)) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", byte);
    } else {
      out += c;
    }
  }
  if (s.size() > kMaxEchoed) out += "...";
  return out;
}

// Words of a table line: blanks (space, tab, CR) separate them.
std::vector<absl::string_view> SplitWords(absl::string_view line) {
  return absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
}

// Strict non-negative integer: digits only (SimpleAtoi alone would take a
// sign and blanks), no overflow.
std::optional<int64_t> ParseCount(absl::string_view s) {
  int64_t value = 0;
  if (s.empty() || !absl::c_all_of(s, absl::ascii_isdigit) ||
      !absl::SimpleAtoi(s, &value)) {
    return std::nullopt;
  }
  return value;
}

// Strict finite number, whole string consumed.
std::optional<double> ParseNumber(absl::string_view s) {
  double value = 0;
  // SimpleAtod skips blanks; table words have none, spec items are trimmed.
  if (s.empty() || s.size() > 64 || !absl::SimpleAtod(s, &value) ||
      !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// All edges move at once: the slowest one bounds the permute.
double PlanTimeForEdges(const CostTable& table, const Topology& topology,
                        const PermuteRequest& request, Backend backend) {
  double worst = 0;
  for (const auto& [src, dst] : request.device_edges) {
    worst =
        std::max(worst, EdgeTimeUs(table, backend, topology.Classify(src, dst),
                                   request.bytes, request.buffers));
  }
  return worst;
}

}  // namespace

const char* LinkClassName(LinkClass link_class) {
  return kLinkClassNames[static_cast<int>(link_class)];
}
const char* BackendName(Backend backend) {
  return kBackendNames[static_cast<int>(backend)];
}

std::optional<LinkClass> LinkClassFromName(absl::string_view name) {
  for (int i = 0; i < kNumLinkClasses; ++i) {
    if (name == kLinkClassNames[i]) return static_cast<LinkClass>(i);
  }
  return std::nullopt;
}

std::optional<Backend> BackendFromName(absl::string_view name) {
  for (int i = 0; i < kNumBackends; ++i) {
    if (name == kBackendNames[i]) return static_cast<Backend>(i);
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<Backend>> ParseBackendSet(absl::string_view text) {
  std::vector<Backend> backends;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    std::optional<Backend> backend = BackendFromName(item);
    if (!backend) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown backend '", Printable(item),
                       "' in backend set (nccl, nvshmem, peer, symmetric)"));
    }
    if (absl::c_linear_search(backends, *backend)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "backend '", BackendName(*backend), "' named twice in backend set"));
    }
    backends.push_back(*backend);
  }
  auto has = [&](Backend b) { return absl::c_linear_search(backends, b); };
  if (!has(Backend::kNccl)) {
    return absl::InvalidArgumentError(
        absl::StrCat("backend set '", Printable(text),
                     "' lacks nccl, the default every XLA runs"));
  }
  if (has(Backend::kNvshmem) &&
      (has(Backend::kPeer) || has(Backend::kSymmetric))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backend set '", Printable(text),
        "' mixes nvshmem (XLA of jax <= 0.10.1) with peer/symmetric "
        "(XLA of jax >= 0.10.2); no XLA offers both"));
  }
  // Canonical order, so that text round-trips.
  absl::c_sort(backends);
  return backends;
}

std::string BackendSetToString(const std::vector<Backend>& backends) {
  return absl::StrJoin(backends, ",", [](std::string* out, Backend backend) {
    out->append(BackendName(backend));
  });
}

absl::StatusOr<Topology> Topology::Create(
    int slices, int hosts_per_slice, int gpus_per_host, int nvlink_domain_size,
    std::vector<int> partition_to_device, int gpus_per_process) {
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
  if (gpus_per_process == 0) gpus_per_process = gpus_per_host;
  if (gpus_per_process < 1 || gpus_per_host % gpus_per_process != 0) {
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
  return topology;
}

namespace {

// The options after SLICESxHOSTSxGPUS: ":nvlN" and ":map=D0,D1,...".
struct TopologyOptions {
  int nvlink_domain_size = 0;  // 0: one host.
  int gpus_per_process = 0;    // 0: one host.
  std::vector<int> map;
};

absl::StatusOr<TopologyOptions> ParseTopologyOptions(
    const std::vector<absl::string_view>& sections) {
  TopologyOptions options;
  bool have_domain = false;
  bool have_map = false;
  bool have_process = false;
  for (size_t i = 1; i < sections.size(); ++i) {
    absl::string_view option = sections[i];
    if (absl::ConsumePrefix(&option, "nvl")) {
      absl::ConsumePrefix(&option, "=");
      std::optional<int64_t> value = ParseCount(option);
      if (have_domain || !value || *value < 1 || *value > kMaxDevices) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad NVLink domain option '", Printable(sections[i]),
                         "' (expected nvlN or nvl=N once, N GPUs)"));
      }
      options.nvlink_domain_size = static_cast<int>(*value);
      have_domain = true;
    } else if (absl::ConsumePrefix(&option, "gpus_per_process=")) {
      std::optional<int64_t> value = ParseCount(option);
      if (have_process || !value || *value < 1 || *value > kMaxDevices) {
        return absl::InvalidArgumentError(absl::StrCat(
            "bad option '", Printable(sections[i]),
            "' (expected gpus_per_process=N once, N GPUs)"));
      }
      options.gpus_per_process = static_cast<int>(*value);
      have_process = true;
    } else if (absl::ConsumePrefix(&option, "map=")) {
      if (have_map) return absl::InvalidArgumentError("map given twice");
      have_map = true;
      for (absl::string_view item : absl::StrSplit(option, ',')) {
        std::optional<int64_t> value =
            ParseCount(absl::StripAsciiWhitespace(item));
        if (!value || *value > kMaxDevices) {
          return absl::InvalidArgumentError(
              absl::StrCat("bad device '", Printable(item), "' in map"));
        }
        options.map.push_back(static_cast<int>(*value));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown option '", Printable(option),
          "' (known: nvlN, gpus_per_process=N, map=...)"));
    }
  }
  return options;
}

absl::StatusOr<Topology> ParseTopologySpec(absl::string_view spec) {
  const std::vector<absl::string_view> sections = absl::StrSplit(spec, ':');
  const std::vector<absl::string_view> dims = absl::StrSplit(sections[0], 'x');
  if (dims.size() != 3) {
    return absl::InvalidArgumentError(
        "expected SLICESxHOSTSxGPUS such as 1x2x4, optionally followed by "
        ":nvlN and :map=D0,D1,...");
  }
  int values[3];
  for (int i = 0; i < 3; ++i) {
    std::optional<int64_t> value = ParseCount(dims[i]);
    if (!value || *value < 1 || *value > kMaxDevices) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", Printable(dims[i]), "' is not a positive whole number"));
    }
    values[i] = static_cast<int>(*value);
  }
  absl::StatusOr<TopologyOptions> options = ParseTopologyOptions(sections);
  if (!options.ok()) return options.status();
  return Topology::Create(values[0], values[1], values[2],
                          options->nvlink_domain_size, std::move(options->map),
                          options->gpus_per_process);
}

}  // namespace

absl::StatusOr<Topology> Topology::Parse(absl::string_view spec) {
  absl::StatusOr<Topology> topology = ParseTopologySpec(spec);
  if (!topology.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology spec '", Printable(spec),
                     "': ", topology.status().message()));
  }
  return topology;
}

int Topology::MapLogicalDevice(int logical_device) const {
  if (partition_to_device_.empty()) return logical_device;
  if (logical_device < 0 ||
      logical_device >= static_cast<int>(partition_to_device_.size())) {
    return -1;
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

std::string Topology::ToString() const {
  std::string spec =
      absl::StrCat(slices_, "x", hosts_per_slice_, "x", gpus_per_host_);
  if (nvlink_domain_size_ != gpus_per_host_) {
    absl::StrAppend(&spec, ":nvl", nvlink_domain_size_);
  }
  if (gpus_per_process_ != gpus_per_host_) {
    absl::StrAppend(&spec, ":gpus_per_process=", gpus_per_process_);
  }
  if (!partition_to_device_.empty()) {
    absl::StrAppend(&spec, ":map=", absl::StrJoin(partition_to_device_, ","));
  }
  return spec;
}

namespace {

// Network rows (estimates; sources in docs/cost_model.md). NCCL's own tuning
// model prices a network hop of its proxy-driven Simple protocol at 14.0 us
// against 3.4 us over NVLink: 10.6 us more, added to the NCCL row measured on
// NVLink (10.15 us). One NDR NIC moves 50 GB/s per direction; 45 GB/s is what
// RDMA transfers reach in practice (NVSHMEM's 43-58 GB/s in DeepEP).
constexpr LinkCost kNcclNetwork = {20.75, 45.0, 7.6};
// XLA's NVSHMEM permute does a put and a team barrier per buffer: two network
// steps on top of the NVSHMEM row measured on NVLink (16.6 us, 16.0 us per
// buffer). Through IBRC each step passes the CPU proxy thread (10.6 us, as
// for NCCL's proxy); with IBGDA the GPU posts to the NIC itself, which leaves
// the wire and NIC part of a hop (NCCL's LL protocol: 2.7 - 0.6 = 2.1 us).
constexpr double kIbrcStepUs = 10.6;
constexpr double kIbgdaStepUs = 2.1;

}  // namespace

LinkCost NvshmemNetworkCost(NvshmemTransport transport) {
  const double step =
      transport == NvshmemTransport::kIbgda ? kIbgdaStepUs : kIbrcStepUs;
  return {16.6 + 2 * step, 45.0, 16.0 + 2 * step};
}

const char* NvshmemTransportName(NvshmemTransport transport) {
  return transport == NvshmemTransport::kIbgda ? "ibgda" : "ibrc";
}

namespace {

// The documented defaults before the measured curves are applied.
CostTable DocumentedCostTable() {
  CostTable table;
  // NCCL (XLA's DEFAULT backend). Latency: NCCL's small-message point-to-point
  // latency is about 3-6 us over NVLink; a collective-permute is a grouped
  // send + receive on every device, so we take the upper end. Bandwidth:
  // NVLink4 gives 450 GB/s per direction per H100/H200; NDR InfiniBand
  // 50 GB/s per direction (400 Gb/s) per NIC.
  table.link(Backend::kNccl, LinkClass::kSameDevice) = {6.0, 2400.0};
  table.link(Backend::kNccl, LinkClass::kIntraHostNvlink) = {6.0, 450.0};
  table.link(Backend::kNccl, LinkClass::kNvlinkDomain) = {6.0, 450.0};
  table.link(Backend::kNccl, LinkClass::kNetwork) = kNcclNetwork;
  // NVSHMEM on-stream put: XLA PR #30718 measured 5.6-7.5 us from 1 KB to
  // 32 MB for the put itself; the data still crosses the same link, so the
  // link bandwidth bounds the transfer. Same-device: an HBM3e copy on H200
  // (4.8 TB/s read + write -> 2.4 TB/s).
  table.link(Backend::kNvshmem, LinkClass::kSameDevice) = {5.6, 2400.0};
  table.link(Backend::kNvshmem, LinkClass::kIntraHostNvlink) = {5.6, 450.0};
  table.link(Backend::kNvshmem, LinkClass::kNvlinkDomain) = {5.6, 450.0};
  table.link(Backend::kNvshmem, LinkClass::kNetwork) =
      NvshmemNetworkCost(NvshmemTransport::kIbrc);
  // Each buffer beyond the first, fitted from the XLA-level ring permute on
  // 2x H200 NVLink with jax 0.9.1 (1, 2 and 4 operands): NCCL 7.6 us, NVSHMEM
  // 8.0 us (XLA's NVSHMEM permute repeats its put and team barrier for every
  // buffer; NCCL's grouped launch costs about as much at the XLA level).
  // Measured on NVLink only; the other link classes assume the same, except
  // the network rows, which carry their own (see NvshmemNetworkCost).
  for (int c = 0; c < kNumLinkClasses; ++c) {
    if (c == static_cast<int>(LinkClass::kNetwork)) continue;
    table.links[static_cast<int>(Backend::kNccl)][c].per_buffer_us = 7.6;
    table.links[static_cast<int>(Backend::kNvshmem)][c].per_buffer_us = 8.0;
  }
  // Estimate: NCCL's point-to-point kernels run one CTA per channel, 8-32
  // channels on Hopper; 16 of H200's 132 SMs is ~12% of compute taken while
  // the transfer overlaps it. NVSHMEM's on-stream puts use copy engines.
  // The measured table below sets both to 0: its times include everything
  // the measured permute paid.
  table.sm_interference = {0.12, 0.0, 0.12, 0.12};
  table.backends = {Backend::kNccl, Backend::kNvshmem};
  table.symmetric_signals = false;
  table.margin = 0.05;
  // NVSHMEM's default symmetric heap (NVSHMEM_SYMMETRIC_SIZE) is 1 GiB.
  table.nvshmem_max_bytes = int64_t{1} << 30;
  return table;
}

// The measured 2x H200 NVLink entries of NCCL and NVSHMEM at the pinned XLA,
// in the cost-table format. Written by scripts/embed_default_cost_table.py
// from the committed calibrated table; edit that table, not this block.
// BEGIN GENERATED DEFAULT TABLE
// Generated from gpu/results/h200x2_nvlink_cost_table.txt; provenance:
//   Cost table fitted by hlo-tools heuristics calibrate from
//     h200x2_xla_permute_calibration_jax091.csv.
//   Measured on: 2x NVIDIA H200 143771 MiB, NV18 NVLink, driver 580.159.04
//   jax: 0.9.1; devices: 2; loop trips: 100
//   Software: jax, jaxlib, jax-cuda13-plugin 0.9.1 (XLA openxla/xla 3cc8846c)
//   Note: CSV built by gpu/calibration_set.py: nccl and one-operand nvshmem
//     rows from the fine sweep (every power of two 1 KiB..256 MiB, step and
//     baseline timed alternately), two- and four-operand nvshmem rows from the
//     sweep without permute combining (at the pin the combiner runs after the
//     backend assigner, so combined permutes ran on NCCL)
//   Note: h200x2_xla_permute_fine_jax091.csv sha256
//     d418259514395b34408dc6d11099f73264b49f5e49c64386621432bfda449c4e
//   Measurements: h200x2_xla_permute_calibration_jax091.csv (sha256
//     c45a58e906641d4eeddcff001d710c71413ea4c2d30354fae671e331178aa95f)
//   Calibrated: 2026-11-30 by hlo-tools heuristics calibrate; model: the
//     measured curve (point rows: log-log interpolation, linear in buffers),
//     the link row outside the measured sizes and buffer counts
//   Point rows: sizes that are powers of 4; the other sizes were held out for
//     validation
constexpr char kMeasuredNvlinkTable[] = R"table(
link nccl nvlink 10.15 316.47 7.05471
point nccl nvlink 1 1024 14.5772
point nccl nvlink 1 4096 17.2559
point nccl nvlink 1 16384 15.5571
point nccl nvlink 1 65536 10.1698
point nccl nvlink 1 262144 13.7265
point nccl nvlink 1 1048576 12.7499
point nccl nvlink 1 4194304 27.3116
point nccl nvlink 1 16777216 87.9325
point nccl nvlink 1 67108864 251.413
point nccl nvlink 1 268435456 878.109
point nccl nvlink 2 1024 11.9895
point nccl nvlink 2 4096 11.8388
point nccl nvlink 2 16384 15.4894
point nccl nvlink 2 65536 11.6695
point nccl nvlink 2 262144 16.4905
point nccl nvlink 2 1048576 20.5988
point nccl nvlink 2 4194304 30.9077
point nccl nvlink 2 16777216 91.5907
point nccl nvlink 2 67108864 265.207
point nccl nvlink 2 268435456 897.841
point nccl nvlink 4 1024 42.8117
point nccl nvlink 4 4096 42.3326
point nccl nvlink 4 16384 39.0704
point nccl nvlink 4 65536 43.5768
point nccl nvlink 4 262144 44.6771
point nccl nvlink 4 1048576 43.8672
point nccl nvlink 4 4194304 57.7051
point nccl nvlink 4 16777216 120.04
point nccl nvlink 4 67108864 302.831
point nccl nvlink 4 268435456 951.988
link nvshmem nvlink 16.5555 419.617 16.0292
point nvshmem nvlink 1 1024 21.6699
point nvshmem nvlink 1 4096 18.2826
point nvshmem nvlink 1 16384 20.6729
point nvshmem nvlink 1 65536 21.9467
point nvshmem nvlink 1 262144 14.5943
point nvshmem nvlink 1 1048576 18.4228
point nvshmem nvlink 1 4194304 25.1187
point nvshmem nvlink 1 16777216 66.0216
point nvshmem nvlink 1 67108864 193.784
point nvshmem nvlink 1 268435456 707.543
point nvshmem nvlink 2 1024 33.7911
point nvshmem nvlink 2 4096 34.9409
point nvshmem nvlink 2 16384 32.8862
point nvshmem nvlink 2 65536 26.2151
point nvshmem nvlink 2 262144 25.1904
point nvshmem nvlink 2 1048576 27.0985
point nvshmem nvlink 2 4194304 35.9205
point nvshmem nvlink 2 16777216 76.1716
point nvshmem nvlink 2 67108864 192.175
point nvshmem nvlink 2 268435456 665.359
point nvshmem nvlink 4 1024 76.2832
point nvshmem nvlink 4 4096 75.4755
point nvshmem nvlink 4 16384 81.2555
point nvshmem nvlink 4 65536 80.5964
point nvshmem nvlink 4 262144 81.9409
point nvshmem nvlink 4 1048576 78.2031
point nvshmem nvlink 4 4194304 71.1472
point nvshmem nvlink 4 16777216 97.3978
point nvshmem nvlink 4 67108864 217.314
point nvshmem nvlink 4 268435456 669.732
sm_interference nccl 0
sm_interference nvshmem 0
)table";
// END GENERATED DEFAULT TABLE

// The measured 2x H200 NVLink curve of peer memory with one process driving
// both GPUs (the XLA of a later jax release; XLA takes the peer path only when
// the calling process drives every device of the permute). Copied from
// gpu/results/h200x2_nvlink_cost_table_jax0112.txt (machine, software and
// CSV checksum there); a test checks the two agree.
constexpr char kMeasuredPeerTable[] = R"table(
link peer nvlink 29.2774 423.992 5.22982
point peer nvlink 1 1024 28.7564
point peer nvlink 1 4096 31.6171
point peer nvlink 1 16384 33.3478
point peer nvlink 1 65536 35.5272
point peer nvlink 1 262144 34.8791
point peer nvlink 1 1048576 35.0594
point peer nvlink 1 4194304 34.7271
point peer nvlink 1 16777216 66.4153
point peer nvlink 1 67108864 196.021
point peer nvlink 1 268435456 702.793
point peer nvlink 2 1024 38.5729
point peer nvlink 2 4096 36.3928
point peer nvlink 2 16384 30.2589
point peer nvlink 2 65536 37.1159
point peer nvlink 2 262144 34.4449
point peer nvlink 2 1048576 30.2898
point peer nvlink 2 4194304 32.199
point peer nvlink 2 16777216 68.9396
point peer nvlink 2 67108864 191.826
point peer nvlink 2 268435456 659.7
point peer nvlink 4 1024 57.0906
point peer nvlink 4 4096 50.0959
point peer nvlink 4 16384 54.882
point peer nvlink 4 65536 47.5541
point peer nvlink 4 262144 53.1087
point peer nvlink 4 1048576 45.6091
point peer nvlink 4 4194304 47.0729
point peer nvlink 4 16777216 74.8927
point peer nvlink 4 67108864 199.45
point peer nvlink 4 268435456 649.31
sm_interference peer 0
)table";

absl::StatusOr<CostTable> ParseCostTableOnto(CostTable table,
                                             absl::string_view text,
                                             absl::string_view source_name);

CostTable BuildDefaultCostTable() {
  absl::StatusOr<CostTable> table = ParseCostTableOnto(
      DocumentedCostTable(), kMeasuredNvlinkTable, "default table");
  // The block is the committed table's own lines (tested), so it parses;
  // should it not, the documented numbers are still a usable model.
  if (!table.ok()) table = DocumentedCostTable();
  // Symmetric memory was never measured working (put + signal failed without
  // NCCL signals): NCCL's numbers. Peer memory: NCCL's numbers off NVLink (it
  // is refused there anyway), its own measured curve on NVLink.
  for (Backend backend : {Backend::kPeer, Backend::kSymmetric}) {
    const int b = static_cast<int>(backend);
    const int nccl = static_cast<int>(Backend::kNccl);
    table->links[b] = table->links[nccl];
    table->curves[b] = table->curves[nccl];
    table->sm_interference[b] = table->sm_interference[nccl];
  }
  absl::StatusOr<CostTable> with_peer =
      ParseCostTableOnto(*table, kMeasuredPeerTable, "default peer table");
  if (with_peer.ok()) table = *std::move(with_peer);
  return *table;
}

}  // namespace

CostTable DefaultCostTable() {
  static const CostTable* const table = new CostTable(BuildDefaultCostTable());
  return *table;
}

namespace {

using Words = std::vector<absl::string_view>;

// Each Apply* below handles one kind of cost-table entry and returns the
// error message without its "<source>:<line>: " prefix, or "" on success.

std::string ReadNumber(const Words& words, size_t index, double minimum,
                       bool exclusive, double* out) {
  std::optional<double> value = ParseNumber(words[index]);
  if (!value || (exclusive ? *value <= minimum : *value < minimum)) {
    return absl::StrFormat("'%s' is not a number %s %g",
                           Printable(words[index]),
                           exclusive ? ">" : ">=", minimum);
  }
  *out = *value;
  return "";
}

std::string Usage(absl::string_view usage) {
  return absl::StrCat("expected '", usage, "'");
}

std::string UnknownBackend(absl::string_view name) {
  return absl::StrCat("unknown backend '", Printable(name),
                      "' (nccl, nvshmem, peer, symmetric)");
}

// Which (backend, link class) pairs the text being parsed has named in a
// link or point line: the first such line drops the inherited curve.
using Touched = std::array<std::array<bool, kNumLinkClasses>, kNumBackends>;

void Touch(Backend backend, LinkClass link_class, CostTable* table,
           Touched* touched) {
  bool& seen =
      (*touched)[static_cast<int>(backend)][static_cast<int>(link_class)];
  if (!seen)
    table->curves[static_cast<int>(backend)][static_cast<int>(link_class)]
        .clear();
  seen = true;
}

std::string UnknownLinkClass(absl::string_view name) {
  return absl::StrCat("unknown link class '", Printable(name),
                      "' (same_device, nvlink, nvlink_domain, network)");
}

std::string ApplyLink(const Words& words, CostTable* table, Touched* touched) {
  if (words.size() != 5 && words.size() != 6) {
    return Usage(
        "link BACKEND LINK_CLASS LATENCY_US BANDWIDTH_GBPS [PER_BUFFER_US]");
  }
  std::optional<Backend> backend = BackendFromName(words[1]);
  if (!backend) return UnknownBackend(words[1]);
  std::optional<LinkClass> link_class = LinkClassFromName(words[2]);
  if (!link_class) return UnknownLinkClass(words[2]);
  LinkCost cost;  // An omitted per-buffer cost is 0.
  std::string error = ReadNumber(words, 3, 0, false, &cost.latency_us);
  if (error.empty())
    error = ReadNumber(words, 4, 0, true, &cost.bandwidth_gbps);
  if (error.empty() && words.size() == 6) {
    error = ReadNumber(words, 5, 0, false, &cost.per_buffer_us);
  }
  if (!error.empty()) return error;
  Touch(*backend, *link_class, table, touched);
  table->link(*backend, *link_class) = cost;
  return "";
}

std::string ReadWhole(absl::string_view what, absl::string_view text,
                      int64_t maximum, int64_t* out) {
  std::optional<int64_t> value = ParseCount(text);
  if (!value || *value < 1 || *value > maximum) {
    return absl::StrCat(what, " '", Printable(text),
                        "' is not a whole number from 1 to ", maximum);
  }
  *out = *value;
  return "";
}

// point BACKEND LINK_CLASS BUFFERS BYTES US: one measured point, kept sorted.
std::string ApplyPoint(const Words& words, CostTable* table, Touched* touched) {
  if (words.size() != 6) {
    return Usage("point BACKEND LINK_CLASS BUFFERS BYTES US");
  }
  std::optional<Backend> backend = BackendFromName(words[1]);
  if (!backend) return UnknownBackend(words[1]);
  std::optional<LinkClass> link_class = LinkClassFromName(words[2]);
  if (!link_class) return UnknownLinkClass(words[2]);
  int64_t buffers, bytes;
  CurvePoint point;
  std::string error = ReadWhole("buffers", words[3], kMaxBuffers, &buffers);
  if (error.empty()) {
    error = ReadWhole("bytes", words[4], int64_t{1} << 62, &bytes);
  }
  // Time is interpolated in log(time): it must be above 0.
  if (error.empty()) error = ReadNumber(words, 5, 0, true, &point.us);
  if (!error.empty()) return error;
  point.buffers = static_cast<int>(buffers);
  point.bytes = bytes;
  Touch(*backend, *link_class, table, touched);
  std::vector<CurvePoint>& curve =
      table->curves[static_cast<int>(*backend)][static_cast<int>(*link_class)];
  auto before = [](const CurvePoint& a, const CurvePoint& b) {
    return std::make_pair(a.buffers, a.bytes) <
           std::make_pair(b.buffers, b.bytes);
  };
  auto at = std::lower_bound(curve.begin(), curve.end(), point, before);
  if (at != curve.end() && !before(point, *at)) {
    return absl::StrCat("point ", BackendName(*backend), " ",
                        LinkClassName(*link_class), " at ", buffers,
                        " buffers, ", bytes,
                        " bytes given twice (one row per point; calibrate "
                        "writes the median)");
  }
  if (curve.size() >= static_cast<size_t>(kMaxCurvePoints)) {
    return absl::StrCat("more than ", kMaxCurvePoints, " points for ",
                        BackendName(*backend), " ", LinkClassName(*link_class));
  }
  curve.insert(at, point);
  return "";
}

std::string ApplySmInterference(const Words& words, CostTable* table) {
  if (words.size() != 3) return Usage("sm_interference BACKEND FRACTION");
  std::optional<Backend> backend = BackendFromName(words[1]);
  if (!backend) return UnknownBackend(words[1]);
  return ReadNumber(words, 2, 0, false,
                    &table->sm_interference[static_cast<int>(*backend)]);
}

std::string ApplyBackendSet(const Words& words, CostTable* table) {
  if (words.size() != 2) return Usage("backends NAME,NAME,...");
  absl::StatusOr<std::vector<Backend>> backends = ParseBackendSet(words[1]);
  if (!backends.ok()) return std::string(backends.status().message());
  table->backends = *std::move(backends);
  return "";
}

std::string ApplySymmetricSignals(const Words& words, CostTable* table) {
  if (words.size() != 2) return Usage("symmetric_signals 0|1");
  if (words[1] != "0" && words[1] != "1") {
    return absl::StrCat("symmetric_signals must be 0 or 1, not '",
                        Printable(words[1]), "'");
  }
  table->symmetric_signals = words[1] == "1";
  return "";
}

// nvshmem_transport ibrc|ibgda: the runtime's InfiniBand transport, which
// sets NVSHMEM's network row to that transport's documented estimate (a later
// link line still overrides it).
std::string ApplyNvshmemTransport(const Words& words, CostTable* table,
                                  Touched* touched) {
  if (words.size() != 2) return Usage("nvshmem_transport ibrc|ibgda");
  NvshmemTransport transport;
  if (words[1] == "ibrc") {
    transport = NvshmemTransport::kIbrc;
  } else if (words[1] == "ibgda") {
    transport = NvshmemTransport::kIbgda;
  } else {
    return absl::StrCat("nvshmem_transport must be ibrc or ibgda, not '",
                        Printable(words[1]), "'");
  }
  table->nvshmem_transport = transport;
  Touch(Backend::kNvshmem, LinkClass::kNetwork, table, touched);
  table->link(Backend::kNvshmem, LinkClass::kNetwork) =
      NvshmemNetworkCost(transport);
  return "";
}

// margin, nvshmem_max_bytes.
std::string ApplyScalar(const Words& words, CostTable* table) {
  const absl::string_view key = words[0];
  if (words.size() != 2) return Usage(absl::StrCat(key, " VALUE"));
  double value;
  std::string error = ReadNumber(words, 1, 0, false, &value);
  if (!error.empty()) return error;
  if (key == "margin") {
    if (value >= 1) return "margin must be below 1";
    table->margin = value;
  } else {
    if (value > 9.2e18) return "nvshmem_max_bytes is too large";
    table->nvshmem_max_bytes = static_cast<int64_t>(value);
  }
  return "";
}

std::string ApplyEntry(const Words& words, CostTable* table, Touched* touched) {
  const absl::string_view key = words[0];
  if (key == "link") return ApplyLink(words, table, touched);
  if (key == "point") return ApplyPoint(words, table, touched);
  if (key == "sm_interference") return ApplySmInterference(words, table);
  if (key == "backends") return ApplyBackendSet(words, table);
  if (key == "symmetric_signals") return ApplySymmetricSignals(words, table);
  if (key == "nvshmem_transport") {
    return ApplyNvshmemTransport(words, table, touched);
  }
  if (key == "margin" || key == "nvshmem_max_bytes") {
    return ApplyScalar(words, table);
  }
  // Entries of older tables: silently ignoring them would hide that the table
  // was written for another model.
  if (key == "split_overhead_us" || key == "combine_bandwidth_GBps") {
    return absl::StrCat(key,
                        " is no longer used (the split plan was removed); "
                        "delete the line");
  }
  return absl::StrCat("unknown entry '", Printable(key),
                      "' (link, point, sm_interference, backends, "
                      "symmetric_signals, nvshmem_transport, margin, "
                      "nvshmem_max_bytes)");
}

absl::StatusOr<CostTable> ParseCostTableOnto(CostTable table,
                                             absl::string_view text,
                                             absl::string_view source_name) {
  Touched touched = {};
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const Words words = SplitWords(line.substr(0, line.find('#')));
    if (words.empty()) continue;
    const std::string message = ApplyEntry(words, &table, &touched);
    if (!message.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_name, ":", line_number, ": ", message));
    }
  }
  return table;
}

}  // namespace

absl::StatusOr<CostTable> ParseCostTable(absl::string_view text,
                                         absl::string_view source_name) {
  return ParseCostTableOnto(DefaultCostTable(), text, source_name);
}

std::string CostTableToString(const CostTable& table) {
  std::string out =
      absl::StrCat("backends ", BackendSetToString(table.backends), "\n",
                   "symmetric_signals ", table.symmetric_signals ? 1 : 0, "\n",
                   // Before the link rows: the network row printed below
                   // overrides the transport's default on reading back.
                   "nvshmem_transport ",
                   NvshmemTransportName(table.nvshmem_transport), "\n",
                   "# backend link_class latency_us bandwidth_GBps "
                   "[per_buffer_us]\n");
  for (int b = 0; b < kNumBackends; ++b) {
    for (int c = 0; c < kNumLinkClasses; ++c) {
      const LinkCost& cost = table.links[b][c];
      absl::StrAppend(&out, "link ", kBackendNames[b], " ", kLinkClassNames[c],
                      " ", Shortest(cost.latency_us), " ",
                      Shortest(cost.bandwidth_gbps));
      // Optional column: five-word lines stay as they were.
      if (cost.per_buffer_us != 0) {
        absl::StrAppend(&out, " ", Shortest(cost.per_buffer_us));
      }
      out += "\n";
    }
  }
  bool any_points = false;
  for (int b = 0; b < kNumBackends; ++b) {
    for (int c = 0; c < kNumLinkClasses; ++c) {
      for (const CurvePoint& point : table.curves[b][c]) {
        if (!any_points) {
          out += "# point backend link_class buffers bytes us (measured)\n";
          any_points = true;
        }
        absl::StrAppend(&out, "point ", kBackendNames[b], " ",
                        kLinkClassNames[c], " ", point.buffers, " ",
                        point.bytes, " ", Shortest(point.us), "\n");
      }
    }
  }
  for (int b = 0; b < kNumBackends; ++b) {
    absl::StrAppend(&out, "sm_interference ", kBackendNames[b], " ",
                    Shortest(table.sm_interference[b]), "\n");
  }
  absl::StrAppend(&out, "margin ", Shortest(table.margin), "\n",
                  "nvshmem_max_bytes ", table.nvshmem_max_bytes, "\n");
  return out;
}

namespace {

// Time on the points [begin, end) of one buffer count, sorted by bytes:
// log-log interpolation inside, the row's bandwidth from the end points out.
double CurveTimeUs(const CurvePoint* begin, const CurvePoint* end,
                   int64_t bytes, double bandwidth_gbps) {
  const CurvePoint& first = *begin;
  const CurvePoint& last = *(end - 1);
  if (bytes <= first.bytes) {
    return std::max(first.us - static_cast<double>(first.bytes - bytes) /
                                   (bandwidth_gbps * 1e3),
                    0.0);
  }
  if (bytes >= last.bytes) {
    return last.us +
           static_cast<double>(bytes - last.bytes) / (bandwidth_gbps * 1e3);
  }
  const CurvePoint* upper = std::lower_bound(
      begin, end, bytes,
      [](const CurvePoint& p, int64_t b) { return p.bytes < b; });
  if (upper->bytes == bytes) return upper->us;  // Exact at the points.
  const CurvePoint& lower = *(upper - 1);
  const double x = std::log(static_cast<double>(bytes));
  const double x0 = std::log(static_cast<double>(lower.bytes));
  const double x1 = std::log(static_cast<double>(upper->bytes));
  const double f = (x - x0) / (x1 - x0);
  return std::exp(std::log(lower.us) +
                  f * (std::log(upper->us) - std::log(lower.us)));
}

// The measured curve at `buffers`: the curve of that count, a linear blend of
// the two measured counts around it, or per_buffer per buffer beyond them.
double MeasuredTimeUs(const std::vector<CurvePoint>& curve,
                      const LinkCost& cost, int64_t bytes, int buffers) {
  // Runs of one buffer count, in increasing count.
  std::vector<std::pair<const CurvePoint*, const CurvePoint*>> runs;
  const CurvePoint* data = curve.data();
  for (size_t i = 0; i < curve.size();) {
    size_t j = i;
    while (j < curve.size() && curve[j].buffers == curve[i].buffers) ++j;
    runs.emplace_back(data + i, data + j);
    i = j;
  }
  auto time = [&](size_t run) {
    return CurveTimeUs(runs[run].first, runs[run].second, bytes,
                       cost.bandwidth_gbps);
  };
  auto count = [&](size_t run) { return runs[run].first->buffers; };
  if (buffers <= count(0)) {
    return std::max(time(0) - (count(0) - buffers) * cost.per_buffer_us, 0.0);
  }
  const size_t top = runs.size() - 1;
  if (buffers >= count(top)) {
    return time(top) + (buffers - count(top)) * cost.per_buffer_us;
  }
  size_t hi = 1;
  while (count(hi) < buffers) ++hi;
  if (count(hi) == buffers) return time(hi);
  const double f = static_cast<double>(buffers - count(hi - 1)) /
                   (count(hi) - count(hi - 1));
  const double low = time(hi - 1), high = time(hi);
  // Equal ends (infinite ones included) need no blend, and inf - inf is NaN.
  return low == high ? low : low + f * (high - low);
}

}  // namespace

bool HasMeasuredCurve(const CostTable& table, Backend backend,
                      LinkClass link_class) {
  return !table.curve(backend, link_class).empty();
}

double EdgeTimeUs(const CostTable& table, Backend backend, LinkClass link_class,
                  int64_t bytes, int buffers) {
  const LinkCost& cost = table.link(backend, link_class);
  // GB/s = 1e3 bytes per microsecond.
  const double transfer_us =
      static_cast<double>(bytes) / (cost.bandwidth_gbps * 1e3);
  const std::vector<CurvePoint>& curve = table.curve(backend, link_class);
  const double permute_us =
      curve.empty()
          ? cost.latency_us + std::max(buffers - 1, 0) * cost.per_buffer_us +
                transfer_us
          : MeasuredTimeUs(curve, cost, bytes, buffers);
  const double interference = table.sm_interference[static_cast<int>(backend)];
  // No interference adds nothing, even to an infinite transfer.
  return interference == 0 ? permute_us
                           : permute_us + transfer_us * interference;
}

std::vector<int> TeamDevices(const Topology& topology, int team_size) {
  std::vector<int> team;
  if (team_size <= 0) {
    // Unknown program size: the whole topology is the largest team there can
    // be, so requiring all of it to be sources never lets a hang through.
    team.reserve(topology.num_devices());
    for (int d = 0; d < topology.num_devices(); ++d) team.push_back(d);
    return team;
  }
  // One beyond the largest topology is enough to make an oversized team
  // unsatisfiable without allocating without bound.
  const int size =
      static_cast<int>(std::min<int64_t>(team_size, kMaxDevices + 1));
  team.reserve(size);
  for (int i = 0; i < size; ++i) team.push_back(topology.MapLogicalDevice(i));
  return team;
}

std::string NvshmemHangReason(
    const std::vector<std::pair<int, int>>& device_edges,
    const std::vector<int>& team) {
  std::vector<int> members = team;
  absl::c_sort(members);
  std::vector<int> targets;
  targets.reserve(device_edges.size());
  for (const auto& [src, dst] : device_edges) {
    for (int device : {src, dst}) {
      if (!absl::c_binary_search(members, device)) {
        return absl::StrCat(
            "nvshmem refused: edge (", src, ", ", dst, ") names device ",
            device, ", which is outside the team of ", team.size(), " devices");
      }
    }
    targets.push_back(dst);
  }
  absl::c_sort(targets);
  std::vector<int> missing;
  for (int device : team) {
    if (!absl::c_binary_search(targets, device)) missing.push_back(device);
  }
  if (missing.empty()) return "";
  constexpr size_t kListed = 4;
  std::string listed =
      absl::StrJoin(missing.begin(),
                    missing.begin() + std::min(missing.size(), kListed), ", ");
  if (missing.size() > kListed) listed += ", ...";
  const bool one = missing.size() == 1;
  return absl::StrCat("nvshmem refused: ", missing.size(), " of ", team.size(),
                      " devices of the team (", one ? "device " : "devices ",
                      listed, ") ", one ? "has" : "have",
                      " no source; XLA's NVSHMEM permute would hang in its "
                      "barrier");
}

std::string RefusalReason(const Topology& topology, const CostTable& table,
                          const PermuteRequest& request, Backend backend) {
  if (backend == Backend::kNccl) return "";
  const std::string refused = absl::StrCat(BackendName(backend), " refused: ");
  if (!absl::c_linear_search(table.backends, backend)) {
    return absl::StrCat(refused, "not offered by the target XLA (backends ",
                        BackendSetToString(table.backends), ")");
  }
  std::array<int, kNumLinkClasses> by_class = {0, 0, 0, 0};
  for (const auto& [src, dst] : request.device_edges) {
    ++by_class[static_cast<int>(topology.Classify(src, dst))];
  }
  const int total = static_cast<int>(request.device_edges.size());
  const int off_host = by_class[static_cast<int>(LinkClass::kNetwork)] +
                       by_class[static_cast<int>(LinkClass::kNvlinkDomain)];
  const std::string of_total = absl::StrCat(" of ", total, " edges ");
  if (backend == Backend::kNvshmem) {
    if (request.bytes > table.nvshmem_max_bytes) {
      return absl::StrCat(refused, Bytes(request.bytes),
                          " exceeds the NVSHMEM symmetric heap (",
                          Bytes(table.nvshmem_max_bytes), ")");
    }
    return NvshmemHangReason(request.device_edges,
                             TeamDevices(topology, request.team_size));
  }
  if (backend == Backend::kSymmetric && !table.symmetric_signals) {
    return absl::StrCat(
        refused,
        "the runtime's NCCL is not known to support signals "
        "(symmetric_signals 0), and put + signal fails without them");
  }
  if (off_host > 0) {
    return absl::StrCat(
        refused, off_host, of_total,
        "leave their host; XLA copies through peer memory only inside "
        "one host and otherwise falls back to NCCL");
  }
  const int off_process = absl::c_count_if(
      request.device_edges, [&](const std::pair<int, int>& edge) {
        return topology.ProcessOf(edge.first) !=
               topology.ProcessOf(edge.second);
      });
  if (off_process > 0) {
    return absl::StrCat(
        refused, off_process, of_total, "join GPUs of different processes (",
        topology.gpus_per_process(),
        topology.gpus_per_process() == 1 ? " GPU" : " GPUs",
        " per process); XLA copies through peer memory only among one "
        "process's GPUs and otherwise falls back to NCCL");
  }
  return "";
}

namespace {

std::string GainText(double nccl_us, double us) {
  return absl::StrFormat("%.1f%%", 100.0 * (nccl_us - us) / nccl_us);
}

// Which model priced `backend` on the request's edges, for reasons.
std::string ModelKind(const Topology& topology, const CostTable& table,
                      const PermuteRequest& request, Backend backend) {
  size_t measured = 0;
  for (const auto& [src, dst] : request.device_edges) {
    if (HasMeasuredCurve(table, backend, topology.Classify(src, dst))) {
      ++measured;
    }
  }
  if (measured == request.device_edges.size()) return "measured curve";
  return measured == 0 ? "parametric" : "measured curve on some edges";
}

// "measured curve" when both compared backends are priced alike, else each.
std::string ModelNote(const Topology& topology, const CostTable& table,
                      const PermuteRequest& request, Backend other) {
  const std::string nccl = ModelKind(topology, table, request, Backend::kNccl);
  const std::string alt = ModelKind(topology, table, request, other);
  if (nccl == alt) return nccl;
  return absl::StrCat("NCCL ", nccl, ", ",
                      kBackendTitles[static_cast<int>(other)], " ", alt);
}

// The reason of a decision that keeps NCCL: every alternative's note.
std::string KeepNcclReason(const std::vector<std::string>& notes) {
  return absl::StrCat("NCCL: ", absl::StrJoin(notes, "; "));
}

}  // namespace

Decision Decide(const Topology& topology, const CostTable& table,
                const PermuteRequest& request) {
  Decision decision;
  const auto& edges = request.device_edges;
  for (const auto& [src, dst] : edges) {
    ++decision.edges_by_class[static_cast<int>(topology.Classify(src, dst))];
  }
  if (edges.empty()) {
    decision.backend_us[0] = 0;
    decision.reason = "NCCL: no source-target pairs, nothing to move";
    return decision;
  }
  const double nccl_us =
      PlanTimeForEdges(table, topology, request, Backend::kNccl);
  decision.backend_us[0] = nccl_us;
  decision.chosen_us = nccl_us;
  const std::string size = Bytes(request.bytes);

  std::vector<std::string> notes;
  int best = -1;
  for (int b = 1; b < kNumBackends; ++b) {
    const Backend backend = static_cast<Backend>(b);
    decision.refused[b] = RefusalReason(topology, table, request, backend);
    const bool offered = absl::c_linear_search(table.backends, backend);
    if (!decision.refused[b].empty()) {
      // Only the offered backends make the reason; the rest say why apart.
      if (offered) notes.push_back(decision.refused[b]);
      continue;
    }
    decision.backend_us[b] =
        PlanTimeForEdges(table, topology, request, backend);
    if (best < 0 || decision.backend_us[b] < decision.backend_us[best]) {
      best = b;
    }
  }
  if (best < 0) {
    decision.reason = KeepNcclReason(notes);
    return decision;
  }
  if (!(nccl_us > 0)) {
    decision.reason = "NCCL: modeled at 0 us, nothing to gain";
    return decision;
  }
  const double best_us = decision.backend_us[best];
  const std::string title = kBackendTitles[best];
  const std::string model =
      ModelNote(topology, table, request, static_cast<Backend>(best));
  if (best_us > nccl_us * (1.0 - table.margin)) {
    notes.push_back(absl::StrFormat(
        "%s %s does not beat NCCL %s by the %.0f%% margin for %s (%s)", title,
        Us(best_us), Us(nccl_us), table.margin * 100, size, model));
    decision.reason = KeepNcclReason(notes);
    return decision;
  }
  decision.backend = static_cast<Backend>(best);
  decision.chosen_us = best_us;
  const int network =
      decision.edges_by_class[static_cast<int>(LinkClass::kNetwork)];
  std::string where = " edges stay in one host";
  if (decision.backend == Backend::kNvshmem) {
    where = network == 0 ? " edges stay in an NVLink domain"
                         : absl::StrCat(" edges, ", network,
                                        " across the network (",
                                        NvshmemTransportName(
                                            table.nvshmem_transport),
                                        ")");
  }
  decision.reason =
      absl::StrCat(title, ": all ", edges.size(), where, "; ", size, " in ",
                   Us(best_us), " vs NCCL ", Us(nccl_us), " (",
                   GainText(nccl_us, best_us), " faster; ", model, ")");
  return decision;
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
        " partitions x ", num_replicas, " replicas) but topology ",
        topology.ToString(), " has ", topology.num_devices()));
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
      edges.emplace_back(topology.MapLogicalDevice(logical(src)),
                         topology.MapLogicalDevice(logical(dst)));
    }
  }
  return edges;
}

}  // namespace nvshmem_selection
}  // namespace gpu
}  // namespace xla
