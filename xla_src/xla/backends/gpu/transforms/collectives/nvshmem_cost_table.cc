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
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_topology.h"

namespace xla {
namespace gpu {
namespace nvshmem_selection {
namespace {

using text_internal::ParseCount;
using text_internal::Printable;

constexpr const char* kBackendNames[kNumBackends] = {"nccl", "nvshmem"};
// Largest buffer count of a measured point (XLA permutes have a handful).
constexpr int64_t kMaxBuffers = 1 << 20;

// Words of a table line: blanks (space, tab, CR) separate them.
std::vector<absl::string_view> SplitWords(absl::string_view line) {
  return absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
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

using Words = std::vector<absl::string_view>;

// Each Apply* below handles one kind of cost-table entry; its error's message
// lacks the "<source>:<line>: " prefix, which the caller adds.

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

absl::StatusOr<double> ReadNumber(absl::string_view word, double minimum,
                                  bool exclusive) {
  std::optional<double> value = ParseNumber(word);
  if (!value || (exclusive ? *value <= minimum : *value < minimum)) {
    return Invalid(absl::StrFormat("'%s' is not a number %s %g",
                                   Printable(word),
                                   exclusive ? ">" : ">=", minimum));
  }
  return *value;
}

absl::Status Usage(absl::string_view usage) {
  return Invalid(absl::StrCat("expected '", usage, "'"));
}

absl::StatusOr<Backend> ReadBackend(absl::string_view name) {
  std::optional<Backend> backend = BackendFromName(name);
  if (!backend) {
    return Invalid(absl::StrCat("unknown backend '", Printable(name),
                                "' (nccl, nvshmem)"));
  }
  return *backend;
}

absl::StatusOr<LinkClass> ReadLinkClass(absl::string_view name) {
  std::optional<LinkClass> link_class = LinkClassFromName(name);
  if (!link_class) {
    return Invalid(
        absl::StrCat("unknown link class '", Printable(name),
                     "' (same_device, nvlink, nvlink_domain, network)"));
  }
  return *link_class;
}

// Which (backend, link class) pairs the text being parsed has named in a
// link or point line: the first such line drops the inherited curve.
using Touched = std::array<std::array<bool, kNumLinkClasses>, kNumBackends>;

void Touch(Backend backend, LinkClass link_class, CostTable* table,
           Touched* touched) {
  bool& seen =
      (*touched)[static_cast<int>(backend)][static_cast<int>(link_class)];
  if (!seen) {
    table->curves[static_cast<int>(backend)][static_cast<int>(link_class)]
        .clear();
  }
  seen = true;
}

absl::Status ApplyLink(const Words& words, CostTable* table, Touched* touched) {
  if (words.size() != 5 && words.size() != 6) {
    return Usage(
        "link BACKEND LINK_CLASS LATENCY_US BANDWIDTH_GBPS [PER_BUFFER_US]");
  }
  absl::StatusOr<Backend> backend = ReadBackend(words[1]);
  if (!backend.ok()) return backend.status();
  absl::StatusOr<LinkClass> link_class = ReadLinkClass(words[2]);
  if (!link_class.ok()) return link_class.status();
  absl::StatusOr<double> latency = ReadNumber(words[3], 0, false);
  if (!latency.ok()) return latency.status();
  absl::StatusOr<double> bandwidth = ReadNumber(words[4], 0, true);
  if (!bandwidth.ok()) return bandwidth.status();
  // An omitted per-buffer cost is 0.
  absl::StatusOr<double> per_buffer =
      words.size() == 6 ? ReadNumber(words[5], 0, false) : 0.0;
  if (!per_buffer.ok()) return per_buffer.status();
  Touch(*backend, *link_class, table, touched);
  table->link(*backend, *link_class) = {*latency, *bandwidth, *per_buffer};
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ReadWhole(absl::string_view what,
                                  absl::string_view text, int64_t maximum) {
  std::optional<int64_t> value = ParseCount(text);
  if (!value || *value < 1 || *value > maximum) {
    return Invalid(absl::StrCat(what, " '", Printable(text),
                                "' is not a whole number from 1 to ", maximum));
  }
  return *value;
}

// Inserts a point into its sorted curve; each (buffers, bytes) once.
absl::Status InsertPoint(Backend backend, LinkClass link_class,
                         const CurvePoint& point, CostTable* table) {
  std::vector<CurvePoint>& curve =
      table->curves[static_cast<int>(backend)][static_cast<int>(link_class)];
  auto before = [](const CurvePoint& a, const CurvePoint& b) {
    return std::make_pair(a.buffers, a.bytes) <
           std::make_pair(b.buffers, b.bytes);
  };
  auto at = std::lower_bound(curve.begin(), curve.end(), point, before);
  if (at != curve.end() && !before(point, *at)) {
    return Invalid(absl::StrCat("point ", BackendName(backend), " ",
                                LinkClassName(link_class), " at ",
                                point.buffers, " buffers, ", point.bytes,
                                " bytes given twice (one row per point)"));
  }
  if (curve.size() >= static_cast<size_t>(kMaxCurvePoints)) {
    return Invalid(absl::StrCat("more than ", kMaxCurvePoints, " points for ",
                                BackendName(backend), " ",
                                LinkClassName(link_class)));
  }
  curve.insert(at, point);
  return absl::OkStatus();
}

// point BACKEND LINK_CLASS BUFFERS BYTES US: one measured point.
absl::Status ApplyPoint(const Words& words, CostTable* table,
                        Touched* touched) {
  if (words.size() != 6) {
    return Usage("point BACKEND LINK_CLASS BUFFERS BYTES US");
  }
  absl::StatusOr<Backend> backend = ReadBackend(words[1]);
  if (!backend.ok()) return backend.status();
  absl::StatusOr<LinkClass> link_class = ReadLinkClass(words[2]);
  if (!link_class.ok()) return link_class.status();
  absl::StatusOr<int64_t> buffers = ReadWhole("buffers", words[3], kMaxBuffers);
  if (!buffers.ok()) return buffers.status();
  absl::StatusOr<int64_t> bytes =
      ReadWhole("bytes", words[4], int64_t{1} << 62);
  if (!bytes.ok()) return bytes.status();
  // Time is interpolated in log(time): it must be above 0.
  absl::StatusOr<double> us = ReadNumber(words[5], 0, true);
  if (!us.ok()) return us.status();
  Touch(*backend, *link_class, table, touched);
  return InsertPoint(*backend, *link_class,
                     {static_cast<int>(*buffers), *bytes, *us}, table);
}

absl::Status ApplySmInterference(const Words& words, CostTable* table) {
  if (words.size() != 3) return Usage("sm_interference BACKEND FRACTION");
  absl::StatusOr<Backend> backend = ReadBackend(words[1]);
  if (!backend.ok()) return backend.status();
  absl::StatusOr<double> value = ReadNumber(words[2], 0, false);
  if (!value.ok()) return value.status();
  table->sm_interference[static_cast<int>(*backend)] = *value;
  return absl::OkStatus();
}

// nvshmem_transport ibrc|ibgda: the runtime's InfiniBand transport, which
// sets NVSHMEM's network row to that transport's documented estimate (a later
// link line still overrides it).
absl::Status ApplyNvshmemTransport(const Words& words, CostTable* table,
                                   Touched* touched) {
  if (words.size() != 2) return Usage("nvshmem_transport ibrc|ibgda");
  NvshmemTransport transport;
  if (words[1] == "ibrc") {
    transport = NvshmemTransport::kIbrc;
  } else if (words[1] == "ibgda") {
    transport = NvshmemTransport::kIbgda;
  } else {
    return Invalid(
        absl::StrCat("nvshmem_transport must be ibrc or ibgda, not '",
                     Printable(words[1]), "'"));
  }
  table->nvshmem_transport = transport;
  Touch(Backend::kNvshmem, LinkClass::kNetwork, table, touched);
  table->link(Backend::kNvshmem, LinkClass::kNetwork) =
      NvshmemNetworkCost(transport);
  return absl::OkStatus();
}

// margin, nvshmem_max_bytes.
absl::Status ApplyScalar(const Words& words, CostTable* table) {
  const absl::string_view key = words[0];
  if (words.size() != 2) return Usage(absl::StrCat(key, " VALUE"));
  absl::StatusOr<double> value = ReadNumber(words[1], 0, false);
  if (!value.ok()) return value.status();
  if (key == "margin") {
    if (*value >= 1) return Invalid("margin must be below 1");
    table->margin = *value;
  } else {
    if (*value > 9.2e18) return Invalid("nvshmem_max_bytes is too large");
    table->nvshmem_max_bytes = static_cast<int64_t>(*value);
  }
  return absl::OkStatus();
}

absl::Status ApplyEntry(const Words& words, CostTable* table,
                        Touched* touched) {
  const absl::string_view key = words[0];
  if (key == "link") return ApplyLink(words, table, touched);
  if (key == "point") return ApplyPoint(words, table, touched);
  if (key == "sm_interference") return ApplySmInterference(words, table);
  if (key == "nvshmem_transport") {
    return ApplyNvshmemTransport(words, table, touched);
  }
  if (key == "margin" || key == "nvshmem_max_bytes") {
    return ApplyScalar(words, table);
  }
  return Invalid(absl::StrCat("unknown entry '", Printable(key),
                              "' (link, point, sm_interference, "
                              "nvshmem_transport, margin, nvshmem_max_bytes)"));
}

}  // namespace

absl::StatusOr<CostTable> ParseCostTableOnto(CostTable table,
                                             absl::string_view text,
                                             absl::string_view source_name) {
  Touched touched = {};
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const Words words = SplitWords(line.substr(0, line.find('#')));
    if (words.empty()) continue;
    const absl::Status status = ApplyEntry(words, &table, &touched);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_name, ":", line_number, ": ", status.message()));
    }
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
