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
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_topology.h"

namespace xla {
namespace gpu {
namespace nvshmem_selection {
namespace {

Topology MustParse(const std::string& spec) {
  absl::StatusOr<Topology> topology = Topology::Parse(spec);
  EXPECT_TRUE(topology.ok()) << topology.status();
  return topology.ok() ? *topology : *Topology::Create(1, 1, 1, 0, {});
}

// The message of a failed call, "" when it succeeded.
template <typename T>
std::string ErrorOf(const absl::StatusOr<T>& value) {
  return value.ok() ? "" : std::string(value.status().message());
}

std::string ParseError(const std::string& spec) {
  absl::StatusOr<Topology> topology = Topology::Parse(spec);
  EXPECT_EQ(topology.status().code(), absl::StatusCode::kInvalidArgument)
      << spec;
  return ErrorOf(topology);
}

CostTable TableWith(const std::string& text) {
  absl::StatusOr<CostTable> table = ParseCostTable(text, "t");
  EXPECT_TRUE(table.ok()) << table.status();
  return table.value_or(DefaultCostTable());
}

// A measured NVSHMEM curve on NVLink: 1 and 4 buffers at 1 KiB, 1 MiB,
// 64 MiB; the link row (latency 99 would be far off) only extrapolates.
constexpr char kCurveTable[] =
    "link nvshmem nvlink 99 400 10\n"
    "point nvshmem nvlink 1 1024 20\n"
    "point nvshmem nvlink 1 1048576 30\n"
    "point nvshmem nvlink 1 67108864 200\n"
    "point nvshmem nvlink 4 67108864 260\n"  // Out of order: sorted on read.
    "point nvshmem nvlink 4 1024 50\n"
    "point nvshmem nvlink 4 1048576 60\n"
    "sm_interference nvshmem 0\n";

double NvshmemNvlinkUs(const CostTable& table, int64_t bytes, int buffers) {
  return EdgeTimeUs(table, Backend::kNvshmem, LinkClass::kIntraHostNvlink,
                    bytes, buffers);
}

std::vector<std::pair<int, int>> Ring(int n) {
  std::vector<std::pair<int, int>> edges;
  for (int i = 0; i < n; ++i) edges.emplace_back(i, (i + 1) % n);
  return edges;
}

TEST(CostTableTest, ParsesOverridesAndKeepsDefaults) {
  std::string error;
  absl::StatusOr<CostTable> table = ParseCostTable(
      "# measured\nlink nccl network 12.5 45  # NDR\nmargin 0.1\n"
      "sm_interference nccl 0.2\nnvshmem_max_bytes 2147483648\n",
      "t.txt");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_DOUBLE_EQ(table->link(Backend::kNccl, LinkClass::kNetwork).latency_us,
                   12.5);
  EXPECT_DOUBLE_EQ(table->margin, 0.1);
  EXPECT_DOUBLE_EQ(table->sm_interference[0], 0.2);
  EXPECT_EQ(table->nvshmem_max_bytes, int64_t{2147483648});
  // Untouched entries keep the documented defaults.
  EXPECT_DOUBLE_EQ(
      table->link(Backend::kNvshmem, LinkClass::kNvlinkDomain).latency_us, 5.6);
  EXPECT_FALSE(
      table->curve(Backend::kNvshmem, LinkClass::kIntraHostNvlink).empty());
}

TEST(CostTableTest, RoundTripsThroughText) {
  CostTable table = DefaultCostTable();
  table.margin = 0.125;
  std::string error;
  absl::StatusOr<CostTable> again =
      ParseCostTable(CostTableToString(table), "x");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(CostTableToString(*again), CostTableToString(table));
  // Numbers print in their shortest exact form (5.6, not 5.5999999999999996;
  // 450, not 4.5e+02).
  EXPECT_EQ(CostTableToString(table).find("e+"), std::string::npos)
      << CostTableToString(table);
  EXPECT_NE(CostTableToString(table).find("link nvshmem nvlink_domain 5.6 "),
            std::string::npos)
      << CostTableToString(table);
}

TEST(CostTableTest, ErrorsNameTheLine) {
  std::string error;
  error = ErrorOf(ParseCostTable("margin 0.1\nlink nccl warp 1 2\n", "t.txt"));
  EXPECT_FALSE(error.empty());
  EXPECT_EQ(error.rfind("t.txt:2: unknown link class 'warp'", 0), 0u) << error;
  error = ErrorOf(ParseCostTable("link nccl nvlink 1 0\n", "t.txt"));
  EXPECT_FALSE(error.empty());
  EXPECT_EQ(error.rfind("t.txt:1: '0' is not a number > 0", 0), 0u) << error;
  error = ErrorOf(ParseCostTable("\n\nfoo 1\n", "t.txt"));
  EXPECT_FALSE(error.empty());
  EXPECT_EQ(error.rfind("t.txt:3: unknown entry 'foo'", 0), 0u) << error;
  error = ErrorOf(ParseCostTable("margin abc\n", "t.txt"));
  EXPECT_FALSE(error.empty());
  EXPECT_EQ(error.rfind("t.txt:1:", 0), 0u) << error;
  error = ErrorOf(ParseCostTable("margin 1.5\n", "t.txt"));
  EXPECT_FALSE(error.empty());
  error = ErrorOf(ParseCostTable("link nccl nvlink 1\n", "t.txt"));
  EXPECT_FALSE(error.empty());
  EXPECT_NE(error.find("expected 'link BACKEND"), std::string::npos) << error;
  error = ErrorOf(ParseCostTable("margin nan\n", "t.txt"));
  EXPECT_FALSE(error.empty());
}

// The split plan's entries: an old table must not load as if they counted.
TEST(CostTableTest, SplitEntriesAreRejected) {
  EXPECT_EQ(
      ErrorOf(ParseCostTable("margin 0.1\nsplit_overhead_us 2\n", "old.txt")),
      "old.txt:2: split_overhead_us is no longer used (the split plan "
      "was removed); delete the line");
  EXPECT_EQ(
      ErrorOf(ParseCostTable("combine_bandwidth_GBps 2400\n", "old.txt"))
          .rfind("old.txt:1: combine_bandwidth_GBps is no longer used", 0),
      0u);
  EXPECT_EQ(CostTableToString(DefaultCostTable()).find("split"),
            std::string::npos);
}

TEST(AcrossHostsTest, TransportPicksTheNetworkRow) {
  const CostTable ibrc = DefaultCostTable();
  EXPECT_EQ(ibrc.nvshmem_transport, NvshmemTransport::kIbrc);
  absl::StatusOr<CostTable> ibgda =
      ParseCostTable("nvshmem_transport ibgda\n", "t");
  ASSERT_TRUE(ibgda.ok()) << ibgda.status();
  EXPECT_EQ(ibgda->nvshmem_transport, NvshmemTransport::kIbgda);
  // GPU-initiated puts skip the proxy: cheaper per permute and per buffer.
  EXPECT_LT(ibgda->link(Backend::kNvshmem, LinkClass::kNetwork).latency_us,
            ibrc.link(Backend::kNvshmem, LinkClass::kNetwork).latency_us);
  EXPECT_LT(ibgda->link(Backend::kNvshmem, LinkClass::kNetwork).per_buffer_us,
            ibrc.link(Backend::kNvshmem, LinkClass::kNetwork).per_buffer_us);
  // Round trip: the printed table reads back to the same transport and row.
  absl::StatusOr<CostTable> again =
      ParseCostTable(CostTableToString(*ibgda), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(CostTableToString(*again), CostTableToString(*ibgda));
  // A link line after the transport overrides its row.
  absl::StatusOr<CostTable> own = ParseCostTable(
      "nvshmem_transport ibgda\nlink nvshmem network 3 40\n", "t");
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_DOUBLE_EQ(own->link(Backend::kNvshmem, LinkClass::kNetwork).latency_us,
                   3);
  EXPECT_FALSE(ParseCostTable("nvshmem_transport udp\n", "t").ok());
}

TEST(BackendSetTest, ParsesCanonicalSetsAndRejectsBadOnes) {
  std::string error;
  auto set = ParseBackendSet("peer,nccl,symmetric");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(BackendSetToString(*set), "nccl,peer,symmetric");
  error = ErrorOf(ParseBackendSet("peer"));
  EXPECT_FALSE(error.empty());
  EXPECT_NE(error.find("lacks nccl"), std::string::npos) << error;
  error = ErrorOf(ParseBackendSet("nccl,nvshmem,peer"));
  EXPECT_FALSE(error.empty());
  EXPECT_NE(error.find("no XLA offers both"), std::string::npos) << error;
  error = ErrorOf(ParseBackendSet("nccl,nccl"));
  EXPECT_FALSE(error.empty());
  error = ErrorOf(ParseBackendSet("nccl,warp"));
  EXPECT_FALSE(error.empty());
  EXPECT_NE(error.find("unknown backend 'warp'"), std::string::npos) << error;
  error = ErrorOf(ParseCostTable("backends nccl,gloo\n", "t.txt"));
  EXPECT_FALSE(error.empty());
  EXPECT_EQ(error.rfind("t.txt:1: unknown backend 'gloo'", 0), 0u) << error;
  error = ErrorOf(ParseCostTable("symmetric_signals yes\n", "t.txt"));
  EXPECT_FALSE(error.empty());
  EXPECT_EQ(error.rfind("t.txt:1: symmetric_signals must be 0 or 1", 0), 0u);
}

TEST(BackendSetTest, TableCarriesSetSignalsAndPerBufferCosts) {
  CostTable table = TableWith(
      "backends nccl,peer,symmetric\nsymmetric_signals 1\n"
      "link peer nvlink 20 300 1.5\n");
  EXPECT_EQ(BackendSetToString(table.backends), "nccl,peer,symmetric");
  EXPECT_TRUE(table.symmetric_signals);
  EXPECT_DOUBLE_EQ(
      table.link(Backend::kPeer, LinkClass::kIntraHostNvlink).per_buffer_us,
      1.5);
  std::string error;
  absl::StatusOr<CostTable> again =
      ParseCostTable(CostTableToString(table), "x");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(CostTableToString(*again), CostTableToString(table));
  EXPECT_EQ(BackendSetToString(DefaultCostTable().backends), "nccl,nvshmem");
}

TEST(MeasuredCurveTest, ExactAtThePointsAndLogLogBetween) {
  CostTable table = TableWith(kCurveTable);
  EXPECT_TRUE(
      HasMeasuredCurve(table, Backend::kNvshmem, LinkClass::kIntraHostNvlink));
  EXPECT_FALSE(
      HasMeasuredCurve(table, Backend::kNvshmem, LinkClass::kNvlinkDomain));
  EXPECT_EQ(NvshmemNvlinkUs(table, 1024, 1), 20);
  EXPECT_EQ(NvshmemNvlinkUs(table, 1048576, 1), 30);
  EXPECT_EQ(NvshmemNvlinkUs(table, 67108864, 4), 260);
  // 32 KiB is halfway between 1 KiB and 1 MiB in log(bytes): the geometric
  // mean of the times.
  EXPECT_NEAR(NvshmemNvlinkUs(table, 32768, 1), std::sqrt(20.0 * 30.0), 1e-9);
  // 8 MiB is halfway between 1 MiB and 64 MiB.
  EXPECT_NEAR(NvshmemNvlinkUs(table, 8 << 20, 1), std::sqrt(30.0 * 200.0),
              1e-9);
}

TEST(MeasuredCurveTest, MonotoneWhereTheDataIs) {
  CostTable table = TableWith(kCurveTable);
  double previous = 0;
  for (int64_t bytes = 1; bytes <= (int64_t{1} << 30);
       bytes = bytes * 3 / 2 + 1) {
    const double us = NvshmemNvlinkUs(table, bytes, 1);
    EXPECT_GE(us, previous) << bytes;
    previous = us;
  }
  // Data that dips stays between its neighbours, not beyond.
  CostTable dip = TableWith(
      "point nccl nvlink 1 1000 20\npoint nccl nvlink 1 10000 15\n"
      "point nccl nvlink 1 100000 25\n");
  const double mid =
      EdgeTimeUs(dip, Backend::kNccl, LinkClass::kIntraHostNvlink, 3000, 1);
  EXPECT_LT(mid, 20);
  EXPECT_GT(mid, 15);
}

TEST(MeasuredCurveTest, ExtrapolatesWithTheRowsBandwidth) {
  CostTable table = TableWith(kCurveTable);
  // 400 GB/s = 400000 bytes/us beyond 64 MiB, from the last point.
  const int64_t top = 67108864;
  EXPECT_NEAR(NvshmemNvlinkUs(table, top + 400000000, 1), 200 + 1000, 1e-9);
  EXPECT_NEAR(NvshmemNvlinkUs(table, 4 * top, 4), 260 + 3.0 * top / 4e5, 1e-9);
  // Below 1 KiB: the first point less the transfer of the missing bytes.
  EXPECT_NEAR(NvshmemNvlinkUs(table, 24, 1), 20 - 1000.0 / 4e5, 1e-12);
  EXPECT_GE(NvshmemNvlinkUs(table, 0, 1), 0);
}

TEST(MeasuredCurveTest, BlendsBetweenBufferCountsAndAddsPerBufferBeyond) {
  CostTable table = TableWith(kCurveTable);
  // 2 buffers: a third of the way from the 1-buffer to the 4-buffer curve.
  EXPECT_NEAR(NvshmemNvlinkUs(table, 1024, 2), 20 + (50 - 20) / 3.0, 1e-9);
  EXPECT_NEAR(NvshmemNvlinkUs(table, 1048576, 3), 30 + 2 * (60 - 30) / 3.0,
              1e-9);
  // 6 buffers: the 4-buffer curve plus 2 x per_buffer (10 us).
  EXPECT_NEAR(NvshmemNvlinkUs(table, 1024, 6), 70, 1e-9);
  // Only 4 buffers measured: fewer buffers take per_buffer off, never below 0.
  CostTable four = TableWith(
      "link nccl nvlink 1 100 5\n"
      "point nccl nvlink 4 1000 12\n"
      "point nccl nvlink 4 2000 14\n"
      "sm_interference nccl 0\n");
  EXPECT_NEAR(
      EdgeTimeUs(four, Backend::kNccl, LinkClass::kIntraHostNvlink, 1000, 3), 7,
      1e-9);
  EXPECT_EQ(
      EdgeTimeUs(four, Backend::kNccl, LinkClass::kIntraHostNvlink, 1000, 1),
      0);
}

TEST(MeasuredCurveTest, SmInterferenceAddsOnTopOfTheCurve) {
  CostTable table =
      TableWith(std::string(kCurveTable) + "sm_interference nvshmem 0.5\n");
  // 1 MiB at 400 GB/s is 2.62144 us of transfer; half of it on top.
  EXPECT_NEAR(NvshmemNvlinkUs(table, 1048576, 1), 30 + 0.5 * 2.62144, 1e-9);
}

TEST(MeasuredCurveTest, ALinkLineAloneDropsTheInheritedCurve) {
  CostTable base = TableWith(kCurveTable);
  std::string error;
  absl::StatusOr<CostTable> over =
      ParseCostTable(CostTableToString(base) + "", "x");
  ASSERT_TRUE(over.ok()) << over.status();
  EXPECT_EQ(CostTableToString(*over), CostTableToString(base));
  EXPECT_NE(CostTableToString(base).find("point nvshmem nvlink 4 1024 50\n"),
            std::string::npos);
  // The default's curves (if any) give way to a link line naming the pair.
  CostTable parametric = TableWith(
      "link nvshmem nvlink 5 450 1\n"
      "link nccl nvlink 6 450 1\n");
  EXPECT_FALSE(HasMeasuredCurve(parametric, Backend::kNvshmem,
                                LinkClass::kIntraHostNvlink));
  EXPECT_FALSE(HasMeasuredCurve(parametric, Backend::kNccl,
                                LinkClass::kIntraHostNvlink));
  EXPECT_NEAR(EdgeTimeUs(parametric, Backend::kNvshmem,
                         LinkClass::kIntraHostNvlink, 450000, 3),
              5 + 2 + 1 * (1 + parametric.sm_interference[1]), 1e-9);
  // Point lines after a link line of the same pair in one file add up.
  CostTable both =
      TableWith("link nccl nvlink 6 450\npoint nccl nvlink 1 10 7\n");
  EXPECT_EQ(both.curve(Backend::kNccl, LinkClass::kIntraHostNvlink).size(), 1u);
  EXPECT_DOUBLE_EQ(
      both.link(Backend::kNccl, LinkClass::kIntraHostNvlink).latency_us, 6);
}

TEST(MeasuredCurveTest, BadPointRowsNameTheLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"point nccl nvlink 1 1024\n", "expected 'point BACKEND"},
      {"point gloo nvlink 1 1024 5\n", "unknown backend 'gloo'"},
      {"point nccl warp 1 1024 5\n", "unknown link class 'warp'"},
      {"point nccl nvlink 0 1024 5\n", "buffers '0' is not a whole number"},
      {"point nccl nvlink 1.5 1024 5\n", "buffers '1.5' is not a whole"},
      {"point nccl nvlink 1 0 5\n", "bytes '0' is not a whole number"},
      {"point nccl nvlink 1 -4 5\n", "bytes '-4' is not a whole number"},
      {"point nccl nvlink 1 1024 0\n", "'0' is not a number > 0"},
      {"point nccl nvlink 1 1024 inf\n", "'inf' is not a number > 0"},
      {"point nccl nvlink 1 1024 5\npoint nccl nvlink 1 1024 6\n",
       "given twice"},
  };
  for (const auto& [text, message] : cases) {
    std::string error;
    error = ErrorOf(ParseCostTable(std::string("# c\n") + text, "t.txt"));
    EXPECT_FALSE(error.empty()) << text;
    const std::string line =
        std::string(text).find("given twice") == std::string::npos &&
                std::string(message) != "given twice"
            ? "t.txt:2: "
            : "t.txt:3: ";
    EXPECT_EQ(error.rfind(line, 0), 0u) << error;
    EXPECT_NE(error.find(message), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
  std::string many;
  for (int i = 1; i <= kMaxCurvePoints + 1; ++i) {
    many += "point nccl nvlink 1 " + std::to_string(i) + " 5\n";
  }
  std::string error;
  error = ErrorOf(ParseCostTable(many, "t.txt"));
  EXPECT_FALSE(error.empty());
  EXPECT_NE(error.find("more than 4096 points"), std::string::npos) << error;
}

TEST(DefaultTableTest, MeasuredH200NvlinkCurvesForTheTwoPinnedBackends) {
  const CostTable table = DefaultCostTable();
  for (Backend backend : {Backend::kNccl, Backend::kNvshmem, Backend::kPeer,
                          Backend::kSymmetric}) {
    const std::vector<CurvePoint>& curve =
        table.curve(backend, LinkClass::kIntraHostNvlink);
    ASSERT_FALSE(curve.empty()) << BackendName(backend);
    EXPECT_EQ(curve.front().buffers, 1);
    EXPECT_EQ(curve.front().bytes, 1024);
    EXPECT_EQ(curve.back().buffers, 4);
    EXPECT_EQ(curve.back().bytes, int64_t{256} << 20);
    // The measured time is the whole cost: no interference on top.
    EXPECT_EQ(table.sm_interference[static_cast<int>(backend)], 0);
    // Other link classes keep the documented parametric model.
    EXPECT_FALSE(HasMeasuredCurve(table, backend, LinkClass::kNvlinkDomain));
    EXPECT_FALSE(HasMeasuredCurve(table, backend, LinkClass::kNetwork));
  }
  // Symmetric carries NCCL's numbers (never measured working).
  EXPECT_EQ(EdgeTimeUs(table, Backend::kSymmetric, LinkClass::kIntraHostNvlink,
                       3 << 20, 3),
            EdgeTimeUs(table, Backend::kNccl, LinkClass::kIntraHostNvlink,
                       3 << 20, 3));
  EXPECT_DOUBLE_EQ(
      table.link(Backend::kNccl, LinkClass::kNvlinkDomain).latency_us, 6);
  EXPECT_DOUBLE_EQ(
      table.link(Backend::kNvshmem, LinkClass::kNvlinkDomain).latency_us, 5.6);
  EXPECT_DOUBLE_EQ(table.link(Backend::kNccl, LinkClass::kNetwork).latency_us,
                   20.75);
}
}  // namespace
}  // namespace nvshmem_selection
}  // namespace gpu
}  // namespace xla
