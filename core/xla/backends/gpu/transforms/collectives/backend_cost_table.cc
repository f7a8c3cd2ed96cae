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

#include "xla/backends/gpu/transforms/collectives/backend_cost_table.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/backend_cost_table.pb.h"
#include "xla/backends/gpu/transforms/collectives/cluster_topology.h"
#include "tsl/platform/protobuf.h"

namespace xla {
namespace gpu {
namespace backend_selection {
namespace {

using Proto = BackendCostTableProto;

// Measured on 2x H200 over NVLink (NV18), us per step at 1, 2 and 4 buffers of
// 1 KiB * 4^i bytes: NCCL, NVSHMEM (this XLA), peer memory (jax 0.11.2's XLA).
constexpr int kMeasuredBuffers[] = {1, 2, 4};
constexpr int kMeasuredSizes = 10;
constexpr int kMeasuredBackends = 3;  // NCCL, NVSHMEM, peer.
constexpr double kNvlinkUs[kMeasuredBackends][3][kMeasuredSizes] = {
    {{14.5772, 17.2559, 15.5571, 10.1698, 13.7265, 12.7499, 27.3116, 87.9325,
      251.413, 878.109},
     {11.9895, 11.8388, 15.4894, 11.6695, 16.4905, 20.5988, 30.9077, 91.5907,
      265.207, 897.841},
     {42.8117, 42.3326, 39.0704, 43.5768, 44.6771, 43.8672, 57.7051, 120.04,
      302.831, 951.988}},
    {{21.6699, 18.2826, 20.6729, 21.9467, 14.5943, 18.4228, 25.1187, 66.0216,
      193.784, 707.543},
     {33.7911, 34.9409, 32.8862, 26.2151, 25.1904, 27.0985, 35.9205, 76.1716,
      192.175, 665.359},
     {76.2832, 75.4755, 81.2555, 80.5964, 81.9409, 78.2031, 71.1472, 97.3978,
      217.314, 669.732}},
    {{28.7564, 31.6171, 33.3478, 35.5272, 34.8791, 35.0594, 34.7271, 66.4153,
      196.021, 702.793},
     {38.5729, 36.3928, 30.2589, 37.1159, 34.4449, 30.2898, 32.199, 68.9396,
      191.826, 659.7},
     {57.0906, 50.0959, 54.882, 47.5541, 53.1087, 45.6091, 47.0729, 74.8927,
      199.45, 649.31}}};

// Unmeasured: NVLink4 450 GB/s, an HBM3e copy 2.4 TB/s, NCCL's grouped
// send/recv 6 us, NVSHMEM's on-stream put 5.6 us; NCCL across hosts adds the
// 10.6 us its tuning model gives a network hop, at 45 of an NDR NIC's 50 GB/s.
// NVSHMEM has no network row; later backends start from NCCL's numbers. On
// NVLink, the rows are fitted beyond the measured points.
CostTable BuildDefaultCostTable() {
  CostTable table;
  const int nvlink = static_cast<int>(LinkClass::kIntraHostNvlink);
  auto& links = table.links;
  links[0] = {{{6.0, 2400.0, 7.6},
               {10.15, 316.47, 7.05471},
               {6.0, 450.0, 7.6},
               {20.75, 45.0, 7.6}}};
  links[1] = {
      {{5.6, 2400.0, 8.0}, {16.5555, 419.617, 16.0292}, {5.6, 450.0, 8.0}}};
  for (int b = 2; b < kNumBackends; ++b) links[b] = links[0];
  links[2][nvlink] = {29.2774, 423.992, 5.22982};
  for (int b = 0; b < kMeasuredBackends; ++b) {
    for (int n = 0; n < 3; ++n) {
      for (int i = 0; i < kMeasuredSizes; ++i) {
        table.curves[b][nvlink].push_back({kMeasuredBuffers[n],
                                           int64_t{1024} << (2 * i),
                                           kNvlinkUs[b][n][i]});
      }
    }
  }
  table.curves[static_cast<int>(Backend::kSymmetric)] = table.curves[0];
  // NVSHMEM's thunk now also waits in a barrier before its puts, which these
  // times lack: each is charged one more buffer, a put and a barrier.
  LinkCost& nvshmem = links[1][nvlink];
  nvshmem.latency_us += nvshmem.per_buffer_us;
  for (CurvePoint& p : table.curves[1][nvlink]) p.us += nvshmem.per_buffer_us;
  return table;  // No SM interference measured; heap 1 GiB, margin 5%.
}

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

// The proto's values are the enum's plus one; a value the enum lacks has none.
std::optional<Backend> BackendOf(int backend) {
  if (backend < Proto::NCCL || backend > kNumBackends) return std::nullopt;
  return static_cast<Backend>(backend - 1);
}

// Sets `*slot` to a given `value`: finite, >= 0, and > 0 if `positive`.
absl::Status SetNumber(bool given, absl::string_view name, double value,
                       bool positive, double* slot) {
  if (!given) return absl::OkStatus();
  if (!std::isfinite(value) || value < 0 || (positive && value == 0)) {
    return Invalid(absl::StrFormat("%s must be a number %s 0, not %g", name,
                                   positive ? ">" : ">=", value));
  }
  *slot = value;
  return absl::OkStatus();
}

// Inserts a point into its sorted curve; each (buffers, bytes) once.
absl::Status InsertPoint(const Proto::Point& point,
                         std::vector<CurvePoint>* curve) {
  constexpr int kMaxBuffers = 1 << 20;
  if (point.buffers() < 1 || point.buffers() > kMaxBuffers) {
    return Invalid(absl::StrCat("buffers must be from 1 to ", kMaxBuffers,
                                ", not ", point.buffers()));
  }
  if (point.bytes() < 1) {
    return Invalid(
        absl::StrCat("bytes must be at least 1, not ", point.bytes()));
  }
  CurvePoint added = {point.buffers(), point.bytes()};
  // Time is interpolated in log(time): it must be above 0.
  absl::Status us = SetNumber(true, "us", point.us(), true, &added.us);
  if (!us.ok()) return us;
  auto before = [](const CurvePoint& a, const CurvePoint& b) {
    return std::make_pair(a.buffers, a.bytes) <
           std::make_pair(b.buffers, b.bytes);
  };
  auto at = std::lower_bound(curve->begin(), curve->end(), added, before);
  if (at != curve->end() && !before(added, *at)) {
    return Invalid(absl::StrCat("a second point at ", added.buffers,
                                " buffers and ", added.bytes, " bytes"));
  }
  curve->insert(at, added);
  return absl::OkStatus();
}

// Applies one `links` entry; `entry` names a bad field or point.
absl::Status ApplyLink(const Proto::Link& link, CostTable* table,
                       std::vector<std::pair<int, int>>* seen,
                       CostTableEntry* entry) {
  std::optional<Backend> backend = BackendOf(link.backend());
  const int c = link.link_class() - 1;  // SAME_DEVICE = 1 ... NETWORK = 4.
  if (!backend || c < 0 || c >= kNumLinkClasses) {
    return Invalid("an entry needs a backend and a link_class");
  }
  const int b = static_cast<int>(*backend);
  if (*backend == Backend::kNvshmem &&
      c == static_cast<int>(LinkClass::kNetwork)) {
    return Invalid(
        "NVSHMEM has no network row: it runs only inside "
        "NVSHMEM_TEAM_SHARED");
  }
  if (absl::c_linear_search(*seen, std::make_pair(b, c))) {
    return Invalid("a second entry for this backend and link_class");
  }
  seen->push_back({b, c});
  LinkCost& cost = table->links[b][c];
  // A bad number's message starts with its field's name.
  for (const absl::Status& status :
       {SetNumber(link.has_latency_us(), "latency_us", link.latency_us(), false,
                  &cost.latency_us),
        SetNumber(link.has_bandwidth_gbps(), "bandwidth_gbps",
                  link.bandwidth_gbps(), true, &cost.bandwidth_gbps),
        SetNumber(link.has_per_buffer_us(), "per_buffer_us",
                  link.per_buffer_us(), false, &cost.per_buffer_us)}) {
    if (!status.ok()) return status;
  }
  // Points replace the default curve; without any, the parametric model.
  constexpr int kMaxPoints = 4096;  // Bounds the sorted inserts.
  if (link.points_size() > kMaxPoints) {
    return Invalid(absl::StrCat("more than ", kMaxPoints, " points"));
  }
  std::vector<CurvePoint>& curve = table->curves[b][c];
  curve.clear();
  for (entry->point = 0; entry->point < link.points_size(); ++entry->point) {
    absl::Status status = InsertPoint(link.points(entry->point), &curve);
    if (!status.ok()) return status;
  }
  entry->point = -1;
  return absl::OkStatus();
}

absl::Status ApplyEntries(const Proto& proto, CostTable* table,
                          CostTableEntry* entry) {
  std::vector<std::pair<int, int>> seen;
  for (int i = 0; i < proto.links_size(); ++i) {
    *entry = {Proto::kLinksFieldNumber, i};
    absl::Status status = ApplyLink(proto.links(i), table, &seen, entry);
    if (!status.ok()) return status;
  }
  for (int i = 0; i < proto.sm_interference_size(); ++i) {
    *entry = {Proto::kSmInterferenceFieldNumber, i};
    const Proto::SmInterference& sm = proto.sm_interference(i);
    std::optional<Backend> backend = BackendOf(sm.backend());
    if (!backend) return Invalid("an entry needs a backend");
    absl::Status status =
        SetNumber(true, "fraction", sm.fraction(), false,
                  &table->sm_interference[static_cast<int>(*backend)]);
    if (!status.ok()) return status;
  }
  if (proto.has_margin()) {
    *entry = {Proto::kMarginFieldNumber};
    if (!(proto.margin() >= 0 && proto.margin() < 1)) {
      return Invalid("margin must be from 0 to below 1");
    }
    table->margin = proto.margin();
  }
  if (proto.has_nvshmem_max_bytes()) {
    *entry = {Proto::kNvshmemMaxBytesFieldNumber};
    if (proto.nvshmem_max_bytes() < 0) {
      return Invalid("nvshmem_max_bytes must not be negative");
    }
    table->nvshmem_max_bytes = proto.nvshmem_max_bytes();
  }
  return absl::OkStatus();
}

// Keeps the first syntax error.
class FirstError : public tsl::protobuf::io::ErrorCollector {
 public:
  void RecordError(int line, tsl::protobuf::io::ColumnNumber /*column*/,
                   absl::string_view message) override {
    if (message_.empty()) message_ = absl::StrCat(line + 1, ": ", message);
  }
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

}  // namespace

const char* BackendName(Backend backend) {
  constexpr const char* kNames[kNumBackends] = {"nccl", "nvshmem", "peer",
                                                "symmetric"};
  return kNames[static_cast<int>(backend)];
}

const CostTable& DefaultCostTable() {
  static const CostTable* const table = new CostTable(BuildDefaultCostTable());
  return *table;
}

absl::Status ApplyCostTableProto(const BackendCostTableProto& proto,
                                 CostTable* table, CostTableEntry* bad_entry) {
  CostTable result = *table;
  CostTableEntry entry;
  absl::Status status = ApplyEntries(proto, &result, &entry);
  if (!status.ok()) {
    if (bad_entry != nullptr) *bad_entry = entry;
    return status;
  }
  *table = std::move(result);
  return absl::OkStatus();
}

absl::StatusOr<CostTable> ParseCostTable(absl::string_view text,
                                         absl::string_view source_name) {
  BackendCostTableProto proto;
  FirstError errors;
  tsl::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &proto)) {
    return Invalid(absl::StrCat(source_name, ":", errors.message()));
  }
  CostTable table = DefaultCostTable();
  CostTableEntry bad;
  absl::Status status = ApplyCostTableProto(proto, &table, &bad);
  if (!status.ok()) {
    const auto* field =
        proto.GetDescriptor()->FindFieldByNumber(bad.field_number);
    return Invalid(absl::StrCat(
        source_name, ": ", field->name(),
        field->is_repeated() ? absl::StrCat(" #", bad.index + 1) : "", ": ",
        status.message()));
  }
  return table;
}

}  // namespace backend_selection
}  // namespace gpu
}  // namespace xla
