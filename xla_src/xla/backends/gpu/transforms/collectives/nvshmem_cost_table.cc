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

#include "xla/backends/gpu/transforms/collectives/nvshmem_cost_table.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_cost_table.pb.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_topology.h"
#include "tsl/platform/protobuf.h"

namespace xla {
namespace gpu {
namespace nvshmem_selection {
namespace {

constexpr const char* kBackendNames[kNumBackends] = {"nccl", "nvshmem"};

}  // namespace

const char* BackendName(Backend backend) {
  return kBackendNames[static_cast<int>(backend)];
}

std::optional<Backend> BackendFromName(absl::string_view name) {
  for (int i = 0; i < kNumBackends; ++i) {
    if (name == kBackendNames[i]) return static_cast<Backend>(i);
  }
  return std::nullopt;
}

namespace {

// Network rows are estimates. NCCL: its NVLink row plus the 10.6 us its own
// tuning model adds for a proxy-driven network hop; 45 GB/s of an NDR NIC's
// 50. NVSHMEM: a put and a team barrier per buffer, each a network step on
// top of its NVLink row: through the CPU proxy (IBRC) like NCCL's hop, or
// posted by the GPU (IBGDA), the wire and NIC part of a hop only.
constexpr LinkCost kNcclNetwork = {20.75, 45.0, 7.6};
constexpr double kIbrcStepUs = 10.6;
constexpr double kIbgdaStepUs = 2.1;

}  // namespace

LinkCost NvshmemNetworkCost(NvshmemTransport transport) {
  const double step =
      transport == NvshmemTransport::kIbgda ? kIbgdaStepUs : kIbrcStepUs;
  return {16.6 + 2 * step, 45.0, 16.0 + 2 * step};
}

namespace {

// Defaults where nothing was measured: NVLink4 450 GB/s per direction, an
// HBM3e copy on the same device 2.4 TB/s, NCCL's grouped send/recv about
// 6 us, NVSHMEM's on-stream put 5.6 us; per extra buffer as fitted on NVLink.
// NCCL's kernels take SMs from overlapping compute (~12%); NVSHMEM's puts use
// copy engines.
CostTable DocumentedCostTable() {
  CostTable table;
  table.link(Backend::kNccl, LinkClass::kSameDevice) = {6.0, 2400.0};
  table.link(Backend::kNccl, LinkClass::kIntraHostNvlink) = {6.0, 450.0};
  table.link(Backend::kNccl, LinkClass::kNvlinkDomain) = {6.0, 450.0};
  table.link(Backend::kNccl, LinkClass::kNetwork) = kNcclNetwork;
  table.link(Backend::kNvshmem, LinkClass::kSameDevice) = {5.6, 2400.0};
  table.link(Backend::kNvshmem, LinkClass::kIntraHostNvlink) = {5.6, 450.0};
  table.link(Backend::kNvshmem, LinkClass::kNvlinkDomain) = {5.6, 450.0};
  table.link(Backend::kNvshmem, LinkClass::kNetwork) =
      NvshmemNetworkCost(NvshmemTransport::kIbrc);
  for (int c = 0; c < kNumLinkClasses; ++c) {
    if (c == static_cast<int>(LinkClass::kNetwork)) continue;
    table.links[static_cast<int>(Backend::kNccl)][c].per_buffer_us = 7.6;
    table.links[static_cast<int>(Backend::kNvshmem)][c].per_buffer_us = 8.0;
  }
  table.sm_interference = {0.12, 0.0};
  return table;  // margin 0.05; heap 1 GiB, NVSHMEM_SYMMETRIC_SIZE's default.
}

// NCCL and NVSHMEM measured on 2x H200 over NVLink at this XLA: the permute's
// own time per step, 1 KiB to 256 MiB, 1, 2 and 4 buffers.
// BEGIN GENERATED DEFAULT TABLE
constexpr char kMeasuredNvlinkTable[] = R"table(
links {
  backend: NCCL
  link_class: NVLINK
  latency_us: 10.15
  bandwidth_gbps: 316.47
  per_buffer_us: 7.05471
  points { buffers: 1 bytes: 1024 us: 14.5772 }
  points { buffers: 1 bytes: 4096 us: 17.2559 }
  points { buffers: 1 bytes: 16384 us: 15.5571 }
  points { buffers: 1 bytes: 65536 us: 10.1698 }
  points { buffers: 1 bytes: 262144 us: 13.7265 }
  points { buffers: 1 bytes: 1048576 us: 12.7499 }
  points { buffers: 1 bytes: 4194304 us: 27.3116 }
  points { buffers: 1 bytes: 16777216 us: 87.9325 }
  points { buffers: 1 bytes: 67108864 us: 251.413 }
  points { buffers: 1 bytes: 268435456 us: 878.109 }
  points { buffers: 2 bytes: 1024 us: 11.9895 }
  points { buffers: 2 bytes: 4096 us: 11.8388 }
  points { buffers: 2 bytes: 16384 us: 15.4894 }
  points { buffers: 2 bytes: 65536 us: 11.6695 }
  points { buffers: 2 bytes: 262144 us: 16.4905 }
  points { buffers: 2 bytes: 1048576 us: 20.5988 }
  points { buffers: 2 bytes: 4194304 us: 30.9077 }
  points { buffers: 2 bytes: 16777216 us: 91.5907 }
  points { buffers: 2 bytes: 67108864 us: 265.207 }
  points { buffers: 2 bytes: 268435456 us: 897.841 }
  points { buffers: 4 bytes: 1024 us: 42.8117 }
  points { buffers: 4 bytes: 4096 us: 42.3326 }
  points { buffers: 4 bytes: 16384 us: 39.0704 }
  points { buffers: 4 bytes: 65536 us: 43.5768 }
  points { buffers: 4 bytes: 262144 us: 44.6771 }
  points { buffers: 4 bytes: 1048576 us: 43.8672 }
  points { buffers: 4 bytes: 4194304 us: 57.7051 }
  points { buffers: 4 bytes: 16777216 us: 120.04 }
  points { buffers: 4 bytes: 67108864 us: 302.831 }
  points { buffers: 4 bytes: 268435456 us: 951.988 }
}
links {
  backend: NVSHMEM
  link_class: NVLINK
  latency_us: 16.5555
  bandwidth_gbps: 419.617
  per_buffer_us: 16.0292
  points { buffers: 1 bytes: 1024 us: 21.6699 }
  points { buffers: 1 bytes: 4096 us: 18.2826 }
  points { buffers: 1 bytes: 16384 us: 20.6729 }
  points { buffers: 1 bytes: 65536 us: 21.9467 }
  points { buffers: 1 bytes: 262144 us: 14.5943 }
  points { buffers: 1 bytes: 1048576 us: 18.4228 }
  points { buffers: 1 bytes: 4194304 us: 25.1187 }
  points { buffers: 1 bytes: 16777216 us: 66.0216 }
  points { buffers: 1 bytes: 67108864 us: 193.784 }
  points { buffers: 1 bytes: 268435456 us: 707.543 }
  points { buffers: 2 bytes: 1024 us: 33.7911 }
  points { buffers: 2 bytes: 4096 us: 34.9409 }
  points { buffers: 2 bytes: 16384 us: 32.8862 }
  points { buffers: 2 bytes: 65536 us: 26.2151 }
  points { buffers: 2 bytes: 262144 us: 25.1904 }
  points { buffers: 2 bytes: 1048576 us: 27.0985 }
  points { buffers: 2 bytes: 4194304 us: 35.9205 }
  points { buffers: 2 bytes: 16777216 us: 76.1716 }
  points { buffers: 2 bytes: 67108864 us: 192.175 }
  points { buffers: 2 bytes: 268435456 us: 665.359 }
  points { buffers: 4 bytes: 1024 us: 76.2832 }
  points { buffers: 4 bytes: 4096 us: 75.4755 }
  points { buffers: 4 bytes: 16384 us: 81.2555 }
  points { buffers: 4 bytes: 65536 us: 80.5964 }
  points { buffers: 4 bytes: 262144 us: 81.9409 }
  points { buffers: 4 bytes: 1048576 us: 78.2031 }
  points { buffers: 4 bytes: 4194304 us: 71.1472 }
  points { buffers: 4 bytes: 16777216 us: 97.3978 }
  points { buffers: 4 bytes: 67108864 us: 217.314 }
  points { buffers: 4 bytes: 268435456 us: 669.732 }
}
sm_interference { backend: NCCL fraction: 0 }
sm_interference { backend: NVSHMEM fraction: 0 }
)table";
// END GENERATED DEFAULT TABLE

CostTable BuildDefaultCostTable() {
  absl::StatusOr<CostTable> table = ParseCostTableOnto(
      DocumentedCostTable(), kMeasuredNvlinkTable, "default table");
  // The block is the committed table's own lines (tested), so it parses;
  // should it not, the documented numbers are still a usable model.
  if (!table.ok()) table = DocumentedCostTable();
  return *table;
}

}  // namespace

CostTable DefaultCostTable() {
  static const CostTable* const table = new CostTable(BuildDefaultCostTable());
  return *table;
}

namespace {

using Proto = NvshmemCostTableProto;
using tsl::protobuf::TextFormat;

// Largest buffer count of a measured point (XLA permutes have a handful).
constexpr int64_t kMaxBuffers = 1 << 20;

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

std::optional<Backend> BackendOf(int backend) {
  switch (backend) {
    case Proto::NCCL:
      return Backend::kNccl;
    case Proto::NVSHMEM:
      return Backend::kNvshmem;
    default:
      return std::nullopt;
  }
}

std::optional<LinkClass> LinkClassOf(int link_class) {
  switch (link_class) {
    case Proto::SAME_DEVICE:
      return LinkClass::kSameDevice;
    case Proto::NVLINK:
      return LinkClass::kIntraHostNvlink;
    case Proto::NVLINK_DOMAIN:
      return LinkClass::kNvlinkDomain;
    case Proto::NETWORK:
      return LinkClass::kNetwork;
    default:
      return std::nullopt;
  }
}

// `value` finite and at least (or, `exclusive`, above) `minimum`.
absl::Status CheckNumber(absl::string_view field, double value, double minimum,
                         bool exclusive) {
  if (std::isfinite(value) &&
      (exclusive ? value > minimum : value >= minimum)) {
    return absl::OkStatus();
  }
  return Invalid(absl::StrFormat("%s must be a number %s %g, not %g", field,
                                 exclusive ? ">" : ">=", minimum, value));
}

// Inserts a point into its sorted curve; each (buffers, bytes) once.
absl::Status InsertPoint(const Proto::Point& point,
                         std::vector<CurvePoint>* curve) {
  if (point.buffers() < 1 || point.buffers() > kMaxBuffers) {
    return Invalid(absl::StrCat("buffers must be from 1 to ", kMaxBuffers,
                                ", not ", point.buffers()));
  }
  if (point.bytes() < 1) {
    return Invalid(
        absl::StrCat("bytes must be at least 1, not ", point.bytes()));
  }
  // Time is interpolated in log(time): it must be above 0.
  absl::Status us = CheckNumber("us", point.us(), 0, /*exclusive=*/true);
  if (!us.ok()) return us;
  const CurvePoint added = {point.buffers(), point.bytes(), point.us()};
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

// Which (backend, link class) pairs the proto has an entry for.
using Seen = std::array<std::array<bool, kNumLinkClasses>, kNumBackends>;

// Applies one entry of `links`; `entry->point` names a bad point.
absl::Status ApplyLink(const Proto::Link& link, CostTable* table, Seen* seen,
                       CostTableEntry* entry) {
  std::optional<Backend> backend = BackendOf(link.backend());
  if (!backend) return Invalid("backend must be NCCL or NVSHMEM");
  std::optional<LinkClass> link_class = LinkClassOf(link.link_class());
  if (!link_class) {
    return Invalid(
        "link_class must be SAME_DEVICE, NVLINK, NVLINK_DOMAIN or NETWORK");
  }
  const int b = static_cast<int>(*backend), c = static_cast<int>(*link_class);
  if ((*seen)[b][c]) {
    return Invalid(absl::StrCat("a second entry for ", BackendName(*backend),
                                " ", LinkClassName(*link_class)));
  }
  (*seen)[b][c] = true;
  LinkCost& cost = table->links[b][c];
  // Each number given is checked; a bad one names its own field.
  const struct {
    bool given;
    const char* name;
    int field_number;
    double value;
    bool exclusive;
    double* slot;
  } numbers[] = {
      {link.has_latency_us(), "latency_us", Proto::Link::kLatencyUsFieldNumber,
       link.latency_us(), false, &cost.latency_us},
      {link.has_bandwidth_gbps(), "bandwidth_gbps",
       Proto::Link::kBandwidthGbpsFieldNumber, link.bandwidth_gbps(), true,
       &cost.bandwidth_gbps},
      {link.has_per_buffer_us(), "per_buffer_us",
       Proto::Link::kPerBufferUsFieldNumber, link.per_buffer_us(), false,
       &cost.per_buffer_us},
  };
  for (const auto& number : numbers) {
    if (!number.given) continue;
    absl::Status status =
        CheckNumber(number.name, number.value, 0, number.exclusive);
    if (!status.ok()) {
      entry->subfield_number = number.field_number;
      return status;
    }
    *number.slot = number.value;
  }
  absl::Status status = absl::OkStatus();
  if (link.points_size() > kMaxCurvePoints) {
    return Invalid(absl::StrCat("more than ", kMaxCurvePoints, " points"));
  }
  // The entry's points replace the inherited curve; none leave the pair to
  // the parametric model.
  std::vector<CurvePoint>& curve = table->curves[b][c];
  curve.clear();
  for (entry->point = 0; entry->point < link.points_size(); ++entry->point) {
    status = InsertPoint(link.points(entry->point), &curve);
    if (!status.ok()) return status;
  }
  entry->point = -1;
  return absl::OkStatus();
}

absl::Status ApplyTransport(int transport, CostTable* table) {
  if (transport != Proto::IBRC && transport != Proto::IBGDA) {
    return Invalid("nvshmem_transport must be IBRC or IBGDA");
  }
  table->nvshmem_transport = transport == Proto::IBGDA
                                 ? NvshmemTransport::kIbgda
                                 : NvshmemTransport::kIbrc;
  // The transport's estimate replaces the network row and its curve.
  const int nvshmem = static_cast<int>(Backend::kNvshmem);
  const int network = static_cast<int>(LinkClass::kNetwork);
  table->links[nvshmem][network] = NvshmemNetworkCost(table->nvshmem_transport);
  table->curves[nvshmem][network].clear();
  return absl::OkStatus();
}

absl::Status ApplyScalars(const Proto& proto, CostTable* table,
                          CostTableEntry* entry) {
  if (proto.has_margin()) {
    *entry = {Proto::kMarginFieldNumber};
    absl::Status status = CheckNumber("margin", proto.margin(), 0, false);
    if (!status.ok()) return status;
    if (proto.margin() >= 1) return Invalid("margin must be below 1");
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

absl::Status ApplyEntries(const Proto& proto, CostTable* table,
                          CostTableEntry* entry) {
  if (proto.nvshmem_transport() != Proto::NVSHMEM_TRANSPORT_UNSPECIFIED) {
    *entry = {Proto::kNvshmemTransportFieldNumber};
    absl::Status status = ApplyTransport(proto.nvshmem_transport(), table);
    if (!status.ok()) return status;
  }
  Seen seen = {};
  for (int i = 0; i < proto.links_size(); ++i) {
    *entry = {Proto::kLinksFieldNumber, i};
    absl::Status status = ApplyLink(proto.links(i), table, &seen, entry);
    if (!status.ok()) return status;
  }
  for (int i = 0; i < proto.sm_interference_size(); ++i) {
    *entry = {Proto::kSmInterferenceFieldNumber, i};
    const Proto::SmInterference& sm = proto.sm_interference(i);
    std::optional<Backend> backend = BackendOf(sm.backend());
    if (!backend) return Invalid("backend must be NCCL or NVSHMEM");
    absl::Status status = CheckNumber("fraction", sm.fraction(), 0, false);
    if (!status.ok()) {
      entry->subfield_number = Proto::SmInterference::kFractionFieldNumber;
      return status;
    }
    table->sm_interference[static_cast<int>(*backend)] = sm.fraction();
  }
  return ApplyScalars(proto, table, entry);
}

// Keeps the first syntax error and where it was (0-based).
class FirstError : public tsl::protobuf::io::ErrorCollector {
 public:
  void RecordError(int line, tsl::protobuf::io::ColumnNumber column,
                   absl::string_view message) override {
    if (!message_.empty()) return;
    line_ = line;
    column_ = column;
    message_ = std::string(message);
  }
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& message() const { return message_; }

 private:
  int line_ = 0;
  int column_ = 0;
  std::string message_;
};

// The parser reports a bad value once it has read it, at the token after it,
// which may be on a later line: the line of the token before (line, column).
int LineOfTokenBefore(absl::string_view text, int line, int column) {
  tsl::protobuf::io::ArrayInputStream input(text.data(),
                                            static_cast<int>(text.size()));
  FirstError ignored;
  tsl::protobuf::io::Tokenizer tokenizer(&input, &ignored);
  int before = line;
  while (tokenizer.Next()) {
    const tsl::protobuf::io::Tokenizer::Token& token = tokenizer.current();
    if (std::make_pair(token.line, token.column) >=
        std::make_pair(line, column))
      break;
    before = token.line;
  }
  return before;
}

bool IsAboutTheValueRead(absl::string_view message) {
  return absl::StartsWith(message, "Unknown enumeration value") ||
         absl::StartsWith(message, "Invalid value for boolean") ||
         absl::StrContains(message, "out of range");
}

}  // namespace

absl::Status ApplyCostTableProto(const NvshmemCostTableProto& proto,
                                 CostTable* table, CostTableEntry* bad_entry) {
  // Applied to a copy: a table is changed entirely or not at all.
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

namespace text_internal {

absl::Status ParseTextProto(absl::string_view text,
                            absl::string_view source_name,
                            tsl::protobuf::Message* message,
                            TextFormat::ParseInfoTree* locations) {
  FirstError errors;
  TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(locations);
  if (!parser.ParseFromString(std::string(text), message)) {
    int line = errors.line();
    if (IsAboutTheValueRead(errors.message())) {
      line = LineOfTokenBefore(text, line, errors.column());
    }
    // The parser quotes the offending token, which may hold any byte.
    return Invalid(absl::StrCat(source_name, ":", line + 1, ": ",
                                text_internal::Printable(errors.message())));
  }
  return absl::OkStatus();
}

int EntryLine(const TextFormat::ParseInfoTree& locations,
              const tsl::protobuf::Descriptor& descriptor,
              const CostTableEntry& entry) {
  const tsl::protobuf::FieldDescriptor* field =
      descriptor.FindFieldByNumber(entry.field_number);
  if (field == nullptr) return 0;
  const int index = field->is_repeated() ? std::max(entry.index, 0) : -1;
  // The most precise place known: a point, else a field of the entry.
  const tsl::protobuf::Descriptor* message = field->message_type();
  const tsl::protobuf::FieldDescriptor* inner =
      message == nullptr ? nullptr
      : entry.point >= 0 ? message->FindFieldByName("points")
                         : message->FindFieldByNumber(entry.subfield_number);
  const TextFormat::ParseInfoTree* nested =
      inner == nullptr ? nullptr : locations.GetTreeForNested(field, index);
  if (nested != nullptr) {
    const int line =
        nested->GetLocation(inner, entry.point >= 0 ? entry.point : -1).line;
    if (line >= 0) return line + 1;
  }
  const int line = locations.GetLocation(field, index).line;
  return line >= 0 ? line + 1 : 0;
}

}  // namespace text_internal

absl::StatusOr<CostTable> ParseCostTableOnto(CostTable table,
                                             absl::string_view text,
                                             absl::string_view source_name) {
  NvshmemCostTableProto proto;
  TextFormat::ParseInfoTree locations;
  absl::Status status =
      text_internal::ParseTextProto(text, source_name, &proto, &locations);
  if (!status.ok()) return status;
  CostTableEntry bad;
  status = ApplyCostTableProto(proto, &table, &bad);
  if (!status.ok()) {
    return Invalid(absl::StrCat(
        source_name, ":",
        text_internal::EntryLine(locations, *proto.GetDescriptor(), bad), ": ",
        status.message()));
  }
  return table;
}

absl::StatusOr<CostTable> ParseCostTable(absl::string_view text,
                                         absl::string_view source_name) {
  return ParseCostTableOnto(DefaultCostTable(), text, source_name);
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

}  // namespace nvshmem_selection
}  // namespace gpu
}  // namespace xla
