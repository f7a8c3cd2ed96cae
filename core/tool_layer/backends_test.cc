// Tests of the project's layer over the selection core: peer and symmetric
// memory, the table text with their rows, the decision's reasons, and the
// behaviour the tools rely on through it (moved here from the core's tests).

#include "tool_layer/backends.h"

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
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tool_layer/decide.h"
#include "tool_layer/table_text.h"
#include "tool_layer/topology_spec.h"

namespace xla::gpu::backend_selection {
namespace {

Topology MustParse(const std::string& spec) {
  absl::StatusOr<Topology> topology = ParseTopology(spec);
  EXPECT_TRUE(topology.ok()) << topology.status();
  return topology.ok() ? *topology : *Topology::Create(1, 1, 1, 0, {});
}

// The backend sets of the pinned XLA and of jax >= 0.10.2's.
const std::vector<Backend> kNvshmemSet = {Backend::kNccl, Backend::kNvshmem};
const std::vector<Backend> kPeerSet = {Backend::kNccl, Backend::kPeer};

// `spec` in the layout of `offered` with its map, logical device i on device
// i: a decision on a one-sided backend needs the order known.
Topology Placed(const std::string& spec,
                const std::vector<Backend>& offered = kNvshmemSet) {
  std::string devices;
  for (int d = 0; d < MustParse(spec).num_devices(); ++d) {
    absl::StrAppend(&devices, d == 0 ? ":map=" : ",", d);
  }
  if (absl::StrContains(spec, "map=")) devices.clear();  // Its own map.
  absl::StatusOr<Topology> topology =
      ParseTopology(absl::StrCat(spec, devices), offered);
  EXPECT_TRUE(topology.ok()) << topology.status();
  return topology.ok() ? *topology : *Topology::Create(1, 1, 1, 0, {});
}

// The message of a failed call, "" when it succeeded.
template <typename T>
std::string ErrorOf(const absl::StatusOr<T>& value) {
  return value.ok() ? "" : std::string(value.status().message());
}

std::string ParseError(const std::string& spec) {
  absl::StatusOr<Topology> topology = ParseTopology(spec);
  EXPECT_EQ(topology.status().code(), absl::StatusCode::kInvalidArgument)
      << spec;
  return ErrorOf(topology);
}

ToolCostTable TableWith(const std::string& text) {
  absl::StatusOr<ToolCostTable> table = ParseToolCostTable(text, "t");
  EXPECT_TRUE(table.ok()) << table.status();
  return table.value_or(DefaultToolCostTable());
}

// A measured NVSHMEM curve on NVLink: 1 and 4 buffers at 1 KiB, 1 MiB,
// 64 MiB; the link row (latency 99 would be far off) only extrapolates.
constexpr char kCurveTable[] = R"table(
  links {
    backend: NVSHMEM
    link_class: NVLINK
    latency_us: 99
    bandwidth_gbps: 400
    per_buffer_us: 10
    points { buffers: 1 bytes: 1024 us: 20 }
    points { buffers: 1 bytes: 1048576 us: 30 }
    points { buffers: 1 bytes: 67108864 us: 200 }
    points { buffers: 4 bytes: 67108864 us: 260 }  # Sorted on read.
    points { buffers: 4 bytes: 1024 us: 50 }
    points { buffers: 4 bytes: 1048576 us: 60 }
  }
  sm_interference { backend: NVSHMEM fraction: 0 }
)table";

double NvshmemNvlinkUs(const ToolCostTable& table, int64_t bytes, int buffers) {
  return EdgeTimeUs(table, Backend::kNvshmem, LinkClass::kIntraHostNvlink,
                    bytes, buffers);
}

std::vector<std::pair<int, int>> Ring(int n) {
  std::vector<std::pair<int, int>> edges;
  for (int i = 0; i < n; ++i) edges.emplace_back(i, (i + 1) % n);
  return edges;
}

// A refusal's text, or "" when there is none (for readable expectations).
std::string Text(const std::optional<ToolRefusal>& refusal) {
  return refusal ? RefusalText(*refusal) : "";
}

std::string HangText(const std::vector<std::pair<int, int>>& edges,
                     const std::vector<int>& team) {
  std::optional<Refusal> hang = NvshmemHang(edges, team);
  return Text(hang ? std::optional<ToolRefusal>(AsToolRefusal(*hang))
                   : std::nullopt);
}

TEST(PlaceOfTest, ABranchOutranksAGroup) {
  EXPECT_EQ(PlaceOf(false, false), Place::kAnywhere);
  EXPECT_EQ(PlaceOf(false, true), Place::kCollectivesGroup);
  EXPECT_EQ(PlaceOf(true, false), Place::kConditionalBranch);
  EXPECT_EQ(PlaceOf(true, true), Place::kConditionalBranch);
}

// NCCL is where every refusal falls back to: no layout refuses it, though the
// same layout refuses each one-sided backend.
TEST(LayoutRefusalTest, NeverRefusesNccl) {
  PermuteRequest request;
  request.team_size = 8;
  const Topology apart = MustParse("1x1x8:gpus_per_process=1");
  EXPECT_EQ(Text(LayoutRefusal(apart, request, Backend::kNccl)), "");
  EXPECT_NE(Text(LayoutRefusal(apart, request, Backend::kPeer)), "");
  const Topology shared = MustParse("1x1x8");
  EXPECT_EQ(Text(LayoutRefusal(shared, request, Backend::kNccl)), "");
  EXPECT_NE(Text(LayoutRefusal(shared, request, Backend::kNvshmem)), "");
}

TEST(TopologyTest, ParsesShapesDomainsAndMaps) {
  Topology t = MustParse("2x2x4");
  EXPECT_EQ(t.num_devices(), 16);
  EXPECT_EQ(t.nvlink_domain_size(), 4);
  EXPECT_EQ(TopologySpec(t), "2x2x4");
  EXPECT_EQ(TopologySpec(MustParse("1x9x8:nvl=72")), "1x9x8:nvl72");
  Topology mapped = MustParse("1x2x2:map=0,2,1,3");
  EXPECT_EQ(mapped.MapLogicalDevice(1), 2);
  EXPECT_EQ(TopologySpec(mapped), "1x2x2:map=0,2,1,3");
  EXPECT_EQ(TopologySpec(
                MustParse("1x2x4:map=0,1,2,3,4,5,6,7:gpus_per_process=2:nvl8")),
            "1x2x4:nvl8:gpus_per_process=2:map=0,1,2,3,4,5,6,7");
}

TEST(TopologyTest, RejectsMalformedSpecs) {
  for (const char* bad :
       {"", "1x2", "1x0x4", "1x-2x4", "1x2x4x", "1x2x4:nvl6", "1x2x4:nvl16",
        "1x2x4:fast", "1x1x2:map=0,0", "1x1x2:map=0,5", "1x1x2:map=0,x",
        "1x2x4:nvl8:nvl8", "1x1x2:map=0,1:map=0,1", "9999x9999x9999",
        "1x2000000x8", "1x99999999999999999999x8"}) {
    EXPECT_EQ(ParseError(bad).rfind("topology spec '", 0), 0u) << bad;
  }
  EXPECT_EQ(ParseError("1x2x4:fast"),
            "topology spec '1x2x4:fast': unknown option 'fast' (known: nvlN, "
            "gpus_per_process=N, processes=..., map=...)");
  EXPECT_EQ(Printable("a\nb"), "a\\x0ab");
  EXPECT_EQ(ParseCount("12"), 12);
  EXPECT_FALSE(ParseCount("+1").has_value());
  EXPECT_FALSE(ParseCount("99999999999999999999").has_value());
}

TEST(TopologyTest, GpusPerProcessOption) {
  EXPECT_EQ(MustParse("1x2x4").gpus_per_process(), 4);
  const Topology t = MustParse("1x2x4:gpus_per_process=2");
  EXPECT_EQ(t.gpus_per_process(), 2);
  EXPECT_EQ(t.ProcessOf(3), 1);
  EXPECT_EQ(TopologySpec(t), "1x2x4:gpus_per_process=2");
  EXPECT_EQ(TopologySpec(MustParse("1x2x4:gpus_per_process=4")), "1x2x4");
  for (const char* bad :
       {"1x2x4:gpus_per_process=3", "1x2x4:gpus_per_process=0",
        "1x2x4:gpus_per_process=8",
        "1x2x4:gpus_per_process=1:gpus_per_process=1"}) {
    EXPECT_FALSE(ParseTopology(bad).ok()) << bad;
  }
}

TEST(CostTableTest, ParsesOverridesAndKeepsDefaults) {
  std::string error;
  absl::StatusOr<ToolCostTable> table = ParseToolCostTable(
      "# measured\nlinks { backend: NCCL link_class: NETWORK latency_us: 12.5 "
      "bandwidth_gbps: 45 per_buffer_us: 0 }\nmargin: 0.1\nsm_interference { "
      "backend: NCCL fraction: 0.2 }\nnvshmem_max_bytes: 2147483648\n",
      "t.txt");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_DOUBLE_EQ(table->link(Backend::kNccl, LinkClass::kNetwork).latency_us,
                   12.5);
  EXPECT_DOUBLE_EQ(table->core.margin, 0.1);
  EXPECT_DOUBLE_EQ(table->sm_interference(Backend::kNccl), 0.2);
  EXPECT_EQ(table->core.nvshmem_max_bytes, int64_t{2147483648});
  // Untouched entries keep the documented defaults.
  EXPECT_DOUBLE_EQ(
      table->link(Backend::kNvshmem, LinkClass::kNvlinkDomain).latency_us, 5.6);
  EXPECT_FALSE(
      table->curve(Backend::kNvshmem, LinkClass::kIntraHostNvlink).empty());
}

TEST(CostTableTest, RoundTripsThroughText) {
  ToolCostTable table = DefaultToolCostTable();
  table.core.margin = 0.125;
  std::string error;
  absl::StatusOr<ToolCostTable> again =
      ParseToolCostTable(CostTableToString(table), "x");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(CostTableToString(*again), CostTableToString(table));
  // Numbers print in their shortest exact form (5.6, not 5.5999999999999996;
  // 450, not 4.5e+02).
  EXPECT_EQ(CostTableToString(table).find("e+"), std::string::npos)
      << CostTableToString(table);
  EXPECT_NE(CostTableToString(table).find("  backend: NVSHMEM\n  link_class: "
                                          "NVLINK_DOMAIN\n  latency_us: 5.6\n"),
            std::string::npos)
      << CostTableToString(table);
}

TEST(CostTableTest, ErrorsNameTheLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"margin: 0.1\nlinks { backend: NCCL link_class: WARP }",
       "t.txt:2: Unknown enumeration value of \"WARP\""},
      {"links { backend: NCCL link_class: NVLINK bandwidth_gbps: 0 }",
       "t.txt:1: bandwidth_gbps must be a number > 0, not 0"},
      {"\n\nfoo: 1",
       "t.txt:3: Message type "
       "\"xla.gpu.backend_selection.CostTableProto\" "
       "has no field named \"foo\""},
      {"margin: abc", "t.txt:1: "},
      {"margin: 1.5", "t.txt:1: margin must be from 0 to below 1"},
      {"margin: nan", "t.txt:1: margin must be from 0 to below 1"},
      {"# c\nlinks { link_class: NVLINK }",
       "t.txt:2: backend must be NCCL, NVSHMEM, PEER or SYMMETRIC"},
      {"sm_interference { fraction: 0.5 }",
       "t.txt:1: backend must be NCCL, NVSHMEM, PEER or SYMMETRIC"},
      {"links { backend: PEER link_class: NVLINK }\n"
       "links { backend: PEER link_class: NVLINK }",
       "t.txt:2: a second entry for this backend and link_class"},
      {"links { backend: NCCL link_class: NETWORK }\n"
       "links {\n backend: NVSHMEM\n link_class: NETWORK\n}",
       "t.txt:2: NVSHMEM has no network row"},
      {"nvshmem_transport: IBGDA", "t.txt:1: "},
      {"link nccl nvlink 1 2\n",
       "t.txt:1: the cost table is in text format now"},
  };
  for (const auto& [text, message] : cases) {
    const std::string error = ErrorOf(ParseToolCostTable(text, "t.txt"));
    EXPECT_EQ(error.rfind(message, 0), 0u) << text << " -> " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(CostTableTest, AnErrorChangesNothing) {
  // The error comes after the margin: neither part applies.
  absl::StatusOr<ToolCostTable> table = ParseToolCostTable(
      "margin: 0.2\nlinks { backend: SYMMETRIC link_class: NVLINK "
      "bandwidth_gbps: -1 }",
      "t");
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorOf(table).rfind("t:2: bandwidth_gbps", 0), 0u)
      << ErrorOf(table);
}

TEST(AcrossHostsTest, NvshmemHasNoNetworkRow) {
  EXPECT_EQ(CostTableToString(DefaultToolCostTable())
                .find("backend: NVSHMEM\n  link_class: NETWORK"),
            std::string::npos);
  absl::StatusOr<ToolCostTable> again =
      ParseToolCostTable(CostTableToString(DefaultToolCostTable()), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(CostTableToString(*again),
            CostTableToString(DefaultToolCostTable()));
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
  error = ErrorOf(ParseToolCostTable("backends: [NCCL, GLOO]\n", "t.txt"));
  EXPECT_FALSE(error.empty());
  EXPECT_EQ(error.rfind("t.txt:1: Unknown enumeration value of \"GLOO\"", 0),
            0u)
      << error;
  error =
      ErrorOf(ParseToolCostTable("\nbackends: [PEER, SYMMETRIC]\n", "t.txt"));
  EXPECT_EQ(error.rfind("t.txt:2: backend set 'peer,symmetric' lacks nccl", 0),
            0u)
      << error;
  error = ErrorOf(ParseToolCostTable("symmetric_signals: yes", "t.txt"));
  EXPECT_EQ(error.rfind("t.txt:1: ", 0), 0u) << error;
}

TEST(BackendSetTest, TableCarriesSetSignalsAndPerBufferCosts) {
  ToolCostTable table = TableWith(
      "backends: [NCCL, PEER, SYMMETRIC]\nsymmetric_signals: true\nlinks { "
      "backend: PEER link_class: NVLINK latency_us: 20 bandwidth_gbps: 300 "
      "per_buffer_us: 1.5 }\n");
  EXPECT_EQ(BackendSetToString(table.backends), "nccl,peer,symmetric");
  EXPECT_TRUE(table.symmetric_signals);
  EXPECT_DOUBLE_EQ(
      table.link(Backend::kPeer, LinkClass::kIntraHostNvlink).per_buffer_us,
      1.5);
  std::string error;
  absl::StatusOr<ToolCostTable> again =
      ParseToolCostTable(CostTableToString(table), "x");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(CostTableToString(*again), CostTableToString(table));
  EXPECT_EQ(BackendSetToString(DefaultToolCostTable().backends),
            "nccl,nvshmem");
}

TEST(MeasuredCurveTest, ExactAtThePointsAndLogLogBetween) {
  ToolCostTable table = TableWith(kCurveTable);
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
  ToolCostTable table = TableWith(kCurveTable);
  double previous = 0;
  for (int64_t bytes = 1; bytes <= (int64_t{1} << 30);
       bytes = bytes * 3 / 2 + 1) {
    const double us = NvshmemNvlinkUs(table, bytes, 1);
    EXPECT_GE(us, previous) << bytes;
    previous = us;
  }
  // Data that dips stays between its neighbours, not beyond.
  ToolCostTable dip = TableWith(
      "links { backend: NCCL link_class: NVLINK points { buffers: 1 bytes: "
      "1000 us: 20 } points { buffers: 1 bytes: 10000 us: 15 } points { "
      "buffers: 1 bytes: 100000 us: 25 } }\n");
  const double mid =
      EdgeTimeUs(dip, Backend::kNccl, LinkClass::kIntraHostNvlink, 3000, 1);
  EXPECT_LT(mid, 20);
  EXPECT_GT(mid, 15);
}

TEST(MeasuredCurveTest, ExtrapolatesWithTheRowsBandwidth) {
  ToolCostTable table = TableWith(kCurveTable);
  // 400 GB/s = 400000 bytes/us beyond 64 MiB, from the last point.
  const int64_t top = 67108864;
  EXPECT_NEAR(NvshmemNvlinkUs(table, top + 400000000, 1), 200 + 1000, 1e-9);
  EXPECT_NEAR(NvshmemNvlinkUs(table, 4 * top, 4), 260 + 3.0 * top / 4e5, 1e-9);
  // Below 1 KiB: the first point less the transfer of the missing bytes.
  EXPECT_NEAR(NvshmemNvlinkUs(table, 24, 1), 20 - 1000.0 / 4e5, 1e-12);
  EXPECT_GE(NvshmemNvlinkUs(table, 0, 1), 0);
}

TEST(MeasuredCurveTest, BlendsBetweenBufferCountsAndAddsPerBufferBeyond) {
  ToolCostTable table = TableWith(kCurveTable);
  // 2 buffers: a third of the way from the 1-buffer to the 4-buffer curve.
  EXPECT_NEAR(NvshmemNvlinkUs(table, 1024, 2), 20 + (50 - 20) / 3.0, 1e-9);
  EXPECT_NEAR(NvshmemNvlinkUs(table, 1048576, 3), 30 + 2 * (60 - 30) / 3.0,
              1e-9);
  // 6 buffers: the 4-buffer curve plus 2 x per_buffer (10 us).
  EXPECT_NEAR(NvshmemNvlinkUs(table, 1024, 6), 70, 1e-9);
  // Only 4 buffers measured: fewer buffers take per_buffer off, never below 0.
  ToolCostTable four = TableWith(
      "links { backend: NCCL link_class: NVLINK latency_us: 1 bandwidth_gbps: "
      "100 per_buffer_us: 5 points { buffers: 4 bytes: 1000 us: 12 } points { "
      "buffers: 4 bytes: 2000 us: 14 } }\nsm_interference { backend: NCCL "
      "fraction: 0 }\n");
  EXPECT_NEAR(
      EdgeTimeUs(four, Backend::kNccl, LinkClass::kIntraHostNvlink, 1000, 3), 7,
      1e-9);
  EXPECT_EQ(
      EdgeTimeUs(four, Backend::kNccl, LinkClass::kIntraHostNvlink, 1000, 1),
      0);
}

TEST(MeasuredCurveTest, SmInterferenceAddsOnTopOfTheCurve) {
  ToolCostTable table =
      TableWith(std::string(kCurveTable) +
                "sm_interference { backend: NVSHMEM fraction: 0.5 }\n");
  // 1 MiB at 400 GB/s is 2.62144 us of transfer; half of it on top.
  EXPECT_NEAR(NvshmemNvlinkUs(table, 1048576, 1), 30 + 0.5 * 2.62144, 1e-9);
}

TEST(MeasuredCurveTest, AnEntryWithoutPointsDropsTheInheritedCurve) {
  ToolCostTable base = TableWith(kCurveTable);
  std::string error;
  absl::StatusOr<ToolCostTable> over =
      ParseToolCostTable(CostTableToString(base) + "", "x");
  ASSERT_TRUE(over.ok()) << over.status();
  EXPECT_EQ(CostTableToString(*over), CostTableToString(base));
  EXPECT_NE(CostTableToString(base).find(
                "  points { buffers: 4 bytes: 1024 us: 50 }\n"),
            std::string::npos);
  // The default's curves (if any) give way to an entry naming the pair.
  ToolCostTable parametric = TableWith(
      "links { backend: NVSHMEM link_class: NVLINK latency_us: 5 "
      "bandwidth_gbps: 450 per_buffer_us: 1 }\nlinks { backend: NCCL "
      "link_class: NVLINK latency_us: 6 bandwidth_gbps: 450 per_buffer_us: 1 "
      "}\n");
  EXPECT_FALSE(HasMeasuredCurve(parametric, Backend::kNvshmem,
                                LinkClass::kIntraHostNvlink));
  EXPECT_FALSE(HasMeasuredCurve(parametric, Backend::kNccl,
                                LinkClass::kIntraHostNvlink));
  EXPECT_NEAR(EdgeTimeUs(parametric, Backend::kNvshmem,
                         LinkClass::kIntraHostNvlink, 450000, 3),
              5 + 2 + 1 * (1 + parametric.sm_interference(Backend::kNvshmem)),
              1e-9);
  // An entry's numbers and points apply together.
  ToolCostTable both = TableWith(
      "links { backend: NCCL link_class: NVLINK latency_us: 6 bandwidth_gbps: "
      "450 per_buffer_us: 0 points { buffers: 1 bytes: 10 us: 7 } }\n");
  EXPECT_EQ(both.curve(Backend::kNccl, LinkClass::kIntraHostNvlink).size(), 1u);
  EXPECT_DOUBLE_EQ(
      both.link(Backend::kNccl, LinkClass::kIntraHostNvlink).latency_us, 6);
}

TEST(MeasuredCurveTest, BadPointsNameTheirLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"points { buffers: 1 bytes: 1024 }", "us must be a number > 0, not 0"},
      {"points { buffers: 0 bytes: 1024 us: 5 }",
       "buffers must be from 1 to 1048576, not 0"},
      {"points { buffers: 1.5 bytes: 1024 us: 5 }", "Expected integer"},
      {"points { buffers: 1 bytes: 0 us: 5 }",
       "bytes must be at least 1, not 0"},
      {"points { buffers: 1 bytes: -4 us: 5 }",
       "bytes must be at least 1, not -4"},
      {"points { buffers: 1 bytes: 1024 us: inf }",
       "us must be a number > 0, not inf"},
      {"points { buffers: 1 bytes: 1024 us: 5 }\n"
       "points { buffers: 1 bytes: 1024 us: 6 }",
       "a second point at 1 buffers and 1024 bytes"},
  };
  for (const auto& [points, message] : cases) {
    const std::string text = absl::StrCat(
        "# c\nlinks {\n  backend: NCCL link_class: NVLINK\n", points, "\n}\n");
    const std::string error = ErrorOf(ParseToolCostTable(text, "t.txt"));
    // The line of the bad point: the last one given.
    const int line =
        std::string(points).find('\n') == std::string::npos ? 4 : 5;
    EXPECT_EQ(error.rfind(absl::StrCat("t.txt:", line, ": "), 0), 0u)
        << text << " -> " << error;
    EXPECT_NE(error.find(message), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
  std::string many = "links { backend: NCCL link_class: NVLINK\n";
  constexpr int kMaxCurvePoints = 4096;  // The core's bound on a curve.
  for (int i = 1; i <= kMaxCurvePoints + 1; ++i) {
    absl::StrAppend(&many, "points { buffers: 1 bytes: ", i, " us: 5 }\n");
  }
  const std::string error = ErrorOf(ParseToolCostTable(many + "}\n", "t.txt"));
  EXPECT_NE(error.find("more than 4096 points"), std::string::npos) << error;
}

TEST(DefaultTableTest, MeasuredH200NvlinkCurvesForTheTwoPinnedBackends) {
  const ToolCostTable table = DefaultToolCostTable();
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
    EXPECT_EQ(table.sm_interference(backend), 0);
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
TEST(DecideTest, OneHostRingGoesToNvshmem) {
  Topology t = Placed("1x1x8");
  ToolDecision d = Decide(t, DefaultToolCostTable(), {32 << 20, Ring(8)});
  EXPECT_EQ(d.backend, Backend::kNvshmem) << d.reason;
  EXPECT_EQ(d.edges_by_class[static_cast<int>(LinkClass::kIntraHostNvlink)], 8);
  EXPECT_LT(d.TimeUs(Backend::kNvshmem), d.TimeUs(Backend::kNccl));
  EXPECT_EQ(d.reason.rfind("NVSHMEM: all 8 edges", 0), 0u) << d.reason;
}

TEST(DecideTest, TwoHostRingIsRefusedNvshmem) {
  ToolDecision d =
      Decide(Placed("1x2x4"), DefaultToolCostTable(), {32 << 20, Ring(8)});
  EXPECT_EQ(d.backend, Backend::kNccl) << d.reason;
  EXPECT_EQ(Text(d.refused[static_cast<int>(Backend::kNvshmem)]),
            "nvshmem refused: 2 of 8 edges leave their host; XLA's NVSHMEM "
            "permute waits for data only in a barrier over "
            "NVSHMEM_TEAM_SHARED, one host's GPUs");
  EXPECT_FALSE(d.TimeUs(Backend::kNvshmem).has_value());
  EXPECT_EQ(d.edges_by_class[static_cast<int>(LinkClass::kNetwork)], 2);
}

// Tensor parallelism inside each host, the context-parallel ring across
// hosts: on 1x2x8 with cp 2, every edge of the ring's permute crosses the
// network (device t <-> t + 8).
std::vector<std::pair<int, int>> CpRingAcrossTwoHosts() {
  std::vector<std::pair<int, int>> edges;
  for (int t = 0; t < 8; ++t) {
    edges.emplace_back(t, t + 8);
    edges.emplace_back(t + 8, t);
  }
  return edges;
}

TEST(AcrossHostsTest, NoTableMakesNvshmemCrossHosts) {
  // A table whose NVLink-domain rows say NVSHMEM is far faster: across the
  // hosts of one NVLink domain, or of none, NVSHMEM is still refused.
  absl::StatusOr<ToolCostTable> fast = ParseToolCostTable(
      "links { backend: NVSHMEM link_class: NVLINK_DOMAIN latency_us: 0.1 "
      "bandwidth_gbps: 9000 }\n",
      "t");
  ASSERT_TRUE(fast.ok()) << fast.status();
  for (const char* spec : {"1x2x8", "1x2x8:nvl16"}) {
    ToolDecision d =
        Decide(Placed(spec), *fast, {8 << 20, CpRingAcrossTwoHosts(), 16});
    EXPECT_EQ(d.backend, Backend::kNccl) << d.reason;
    const std::optional<ToolRefusal>& refusal =
        d.refused[static_cast<int>(Backend::kNvshmem)];
    ASSERT_TRUE(refusal.has_value()) << spec;
    EXPECT_EQ(refusal->kind, RefusalKind::kOutsideSharedMemory);
    EXPECT_EQ(refusal->count, 16);
  }
}

TEST(AcrossHostsTest, HeapLimitRefuses) {
  ToolDecision d = Decide(Placed("1x1x8"), DefaultToolCostTable(),
                          {int64_t{2} << 30, Ring(8), 8});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_EQ(d.verdict, Verdict::kNoAlternative);
  const std::optional<ToolRefusal>& refusal =
      d.refused[static_cast<int>(Backend::kNvshmem)];
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->kind, RefusalKind::kExceedsHeap);
  EXPECT_EQ(refusal->bytes, int64_t{2} << 30);
  EXPECT_EQ(refusal->limit, int64_t{1} << 30);
  EXPECT_NE(d.reason.find("2 x 2.0 GiB, exceed the NVSHMEM symmetric heap"),
            std::string::npos)
      << d.reason;
}

TEST(RuntimeRulesTest, TypesAndMemcpyFlag) {
  PermuteRequest request{32 << 20, Ring(8), 8, 2};
  request.element_types = {"bf16", "s8"};
  ToolDecision d = Decide(Placed("1x1x8"), DefaultToolCostTable(), request);
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_NE(d.reason.find("element type s8 is not one NVSHMEM puts"),
            std::string::npos)
      << d.reason;
  request.element_types = {"bf16", "bf16"};
  EXPECT_EQ(Decide(Placed("1x1x8"), DefaultToolCostTable(), request).backend,
            Backend::kNvshmem);
  request.memcpy_local_p2p = true;
  d = Decide(Placed("1x1x8"), DefaultToolCostTable(), request);
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_NE(d.reason.find("xla_gpu_use_memcpy_local_p2p"), std::string::npos)
      << d.reason;
}

// The runtime's barrier is called only by devices with a source: any team
// member without one hangs the others.
TEST(DeadlockFreeTest, NonCyclicShiftIsRefused) {
  ToolDecision d =
      Decide(Placed("1x1x2"), DefaultToolCostTable(), {32 << 20, {{0, 1}}, 2});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_FALSE(d.TimeUs(Backend::kNvshmem).has_value());
  EXPECT_EQ(
      d.reason,
      "NCCL: nvshmem refused: 1 of 2 devices of the program (device 0) has "
      "no source; a device without one skips the barrier over "
      "NVSHMEM_TEAM_SHARED, in which its host's devices with a source "
      "would hang, so the patched runtime runs such a permute on NCCL");
  // The same devices as a cycle are safe and NVSHMEM wins with these costs.
  ToolDecision ring =
      Decide(Placed("1x1x2"), DefaultToolCostTable(), {32 << 20, Ring(2), 2});
  EXPECT_EQ(ring.backend, Backend::kNvshmem) << ring.reason;
}

TEST(DeadlockFreeTest, ShiftOfEightListsTheDeviceWithoutSource) {
  std::vector<std::pair<int, int>> shift;
  for (int i = 0; i < 7; ++i) shift.emplace_back(i, i + 1);
  ToolDecision d =
      Decide(Placed("1x1x8"), DefaultToolCostTable(), {32 << 20, shift, 8});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_NE(
      d.reason.find("1 of 8 devices of the program (device 0) has no source"),
      std::string::npos)
      << d.reason;
}

TEST(DeadlockFreeTest, PartialGroupIsRefusedForTheWholeProgram) {
  // A ring over devices 0..3 of an 8-device program: 4..7 call no barrier.
  ToolDecision d =
      Decide(Placed("1x1x8"), DefaultToolCostTable(), {32 << 20, Ring(4), 8});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_NE(d.reason.find("4 of 8 devices of the program (devices 4, "
                          "5, 6, 7) have no source"),
            std::string::npos)
      << d.reason;
  // A 4-device program on the same host leaves GPUs 4..7 of the host's
  // NVSHMEM_TEAM_SHARED out of the barrier; on a host of only its GPUs the
  // ring covers the team.
  ToolDecision four =
      Decide(Placed("1x1x8"), DefaultToolCostTable(), {32 << 20, Ring(4), 4});
  EXPECT_EQ(four.backend, Backend::kNccl);
  EXPECT_NE(four.reason.find("all 8 GPUs of host 0; GPUs 4-7 are not in the "
                             "program"),
            std::string::npos)
      << four.reason;
  ToolDecision own =
      Decide(Placed("1x1x4"), DefaultToolCostTable(), {32 << 20, Ring(4), 4});
  EXPECT_EQ(own.backend, Backend::kNvshmem) << own.reason;
}

TEST(DeadlockFreeTest, UnknownTeamIsTheWholeTopology) {
  ToolDecision d =
      Decide(Placed("1x1x8"), DefaultToolCostTable(), {32 << 20, Ring(4)});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_NE(d.reason.find("4 of 8 devices"), std::string::npos) << d.reason;
  ToolDecision full =
      Decide(Placed("1x1x8"), DefaultToolCostTable(), {32 << 20, Ring(8)});
  EXPECT_EQ(full.backend, Backend::kNvshmem) << full.reason;
}

TEST(DeadlockFreeTest, TeamFollowsTheDeviceMap) {
  Topology t = MustParse("1x1x4:map=3,2,1,0");
  EXPECT_EQ(TeamDevices(t, 2), (std::vector<int>{3, 2}));
  EXPECT_EQ(TeamDevices(t, 0), (std::vector<int>{0, 1, 2, 3}));
  // Logical 0,1 live on devices 3,2: a 2-device ring there is safe.
  EXPECT_EQ(HangText({{3, 2}, {2, 3}}, TeamDevices(t, 2)), "");
  EXPECT_NE(HangText({{0, 1}, {1, 0}}, TeamDevices(t, 2))
                .find("names device 0, which is outside the team of 2"),
            std::string::npos);
}

TEST(DeadlockFreeTest, EveryReplicaGroupMustCoverItsDevices) {
  std::string error;
  Topology t = MustParse("1x1x8");
  // Cross-partition ring of 4 partitions x 2 replicas: every device a target.
  auto ring = EdgeIdsToDevices(t, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}, true, 4, 2);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(HangText(*ring, TeamDevices(t, 8)), "");
  // A shift 0->1->2->3 leaves partition 0 of both replicas (devices 0, 1).
  auto shift = EdgeIdsToDevices(t, {{0, 1}, {1, 2}, {2, 3}}, true, 4, 2);
  ASSERT_TRUE(shift.ok()) << shift.status();
  EXPECT_NE(HangText(*shift, TeamDevices(t, 8))
                .find("2 of 8 devices of the program (devices 0, 1) "
                      "have"),
            std::string::npos);
}

TEST(DeadlockFreeTest, TeamLargerThanTheTopologyIsRefused) {
  const Topology t = Placed("1x1x4");
  EXPECT_EQ(TeamDevices(t, 6).size(), 4u);
  ToolDecision d = Decide(t, DefaultToolCostTable(), {32 << 20, Ring(4), 6});
  EXPECT_EQ(d.backend, Backend::kNccl);
  const std::optional<ToolRefusal>& refusal =
      d.refused[static_cast<int>(Backend::kNvshmem)];
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->kind, RefusalKind::kTeamOutsideTopology);
  EXPECT_EQ(Text(refusal),
            "nvshmem refused: the program's 6 devices are more than the "
            "topology places (4); the team cannot be checked");
}

TEST(DeadlockFreeTest, SelfEdgesCountAsSources) {
  EXPECT_EQ(HangText({{0, 0}, {1, 1}}, {0, 1}), "");
  EXPECT_NE(HangText({}, {0}), "");
}

TEST(DecideTest, Nvl72DomainKeepsNcclAcrossHosts) {
  // NVSHMEM_TEAM_SHARED is not known to span a multi-node NVLink domain.
  ToolDecision d = Decide(Placed("1x9x8:nvl72"), DefaultToolCostTable(),
                          {32 << 20, Ring(72)});
  EXPECT_EQ(d.backend, Backend::kNccl) << d.reason;
  EXPECT_EQ(d.edges_by_class[static_cast<int>(LinkClass::kNvlinkDomain)], 9);
  EXPECT_EQ(d.refused[static_cast<int>(Backend::kNvshmem)]->kind,
            RefusalKind::kOutsideSharedMemory);
}

TEST(DecideTest, HugeMessagesExceedTheSymmetricHeap) {
  ToolDecision d = Decide(Placed("1x1x8"), DefaultToolCostTable(),
                          {int64_t{2} << 30, Ring(8)});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_NE(d.reason.find("symmetric heap"), std::string::npos) << d.reason;
}

TEST(DecideTest, MarginKeepsNcclForTinyGains) {
  ToolCostTable table = DefaultToolCostTable();
  table.core.margin = 0.5;
  ToolDecision d = Decide(Placed("1x1x8"), table, {1024, Ring(8)});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_NE(d.reason.find("margin"), std::string::npos) << d.reason;
}

TEST(DecideTest, DegenerateAndEmptyPermutes) {
  ToolDecision self = Decide(MustParse("1x1x4"), DefaultToolCostTable(),
                             {4096, {{0, 0}, {1, 1}}});
  EXPECT_EQ(self.edges_by_class[static_cast<int>(LinkClass::kSameDevice)], 2);
  ToolDecision none =
      Decide(MustParse("1x1x4"), DefaultToolCostTable(), {4096, {}});
  EXPECT_EQ(none.backend, Backend::kNccl);
  EXPECT_NE(none.reason.find("no source-target pairs"), std::string::npos);
}

TEST(DecideTest, PairsSpanningHostsKeepNccl) {
  std::string error;
  absl::StatusOr<ToolCostTable> table = ParseToolCostTable(
      "links { backend: NCCL link_class: NETWORK latency_us: 4 bandwidth_gbps: "
      "900 per_buffer_us: 0 }\nsm_interference { backend: NCCL fraction: 0.5 "
      "}\n",
      "t");
  ASSERT_TRUE(table.ok()) << table.status();
  Topology t = Placed("1x2x2");
  // Two rings, one inside each host.
  ToolDecision d =
      Decide(t, *table, {64 << 20, {{0, 1}, {1, 0}, {2, 3}, {3, 2}}, 4});
  EXPECT_EQ(d.backend, Backend::kNvshmem) << d.reason;
  // Devices 1 and 2 are on different hosts: refused whatever the costs.
  std::vector<std::pair<int, int>> mixed = {{0, 1}, {1, 0}, {2, 1}, {1, 2}};
  ToolDecision whole = Decide(t, *table, {64 << 20, mixed, 4});
  EXPECT_EQ(whole.backend, Backend::kNccl) << whole.reason;
  EXPECT_NE(whole.reason.find("2 of 4 edges leave their host"),
            std::string::npos)
      << whole.reason;
}

TEST(DecideTest, ZeroCostKeepsNcclWithoutNan) {
  std::string error;
  absl::StatusOr<ToolCostTable> table = ParseToolCostTable(
      "links { backend: NCCL link_class: NVLINK latency_us: 0 bandwidth_gbps: "
      "450 per_buffer_us: 0 }\nlinks { backend: NVSHMEM link_class: NVLINK "
      "latency_us: 0 bandwidth_gbps: 450 per_buffer_us: 0 }\n",
      "t");
  ASSERT_TRUE(table.ok()) << table.status();
  ToolDecision d = Decide(MustParse("1x1x8"), *table, {0, Ring(8)});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_EQ(d.reason.find("nan"), std::string::npos) << d.reason;
}

TEST(DecideTest, ModeledTimeGrowsWithBytes) {
  // The parametric model grows with size; measured curves follow their data
  // (MeasuredCurveTest), which at small sizes is noise around a plateau.
  ToolCostTable parametric = TableWith(
      "links { backend: NCCL link_class: NVLINK latency_us: 6 bandwidth_gbps: "
      "450 per_buffer_us: 7.6 }\n");
  Topology t = MustParse("1x2x4");
  double previous = -1;
  for (int64_t bytes = 1024; bytes <= (int64_t{1} << 30); bytes *= 4) {
    ToolDecision d = Decide(t, parametric, {bytes, Ring(8)});
    EXPECT_GT(d.ChosenUs(), previous);
    previous = d.ChosenUs();
  }
}

TEST(BackendSetTest, DefaultPeerIsTheMeasuredOneProcessCurve) {
  // With the backend set alone, one host: peer's copies lose below a few MiB
  // and win from 16 MiB on, as measured with one process driving the GPUs.
  ToolCostTable table = TableWith("backends: [NCCL, PEER]\n");
  const Topology host = Placed("1x1x8", kPeerSet);
  ToolDecision small = Decide(host, table, {1 << 20, Ring(8), 8});
  EXPECT_EQ(small.backend, Backend::kNccl) << small.reason;
  ToolDecision big = Decide(host, table, {int64_t{128} << 20, Ring(8), 8});
  EXPECT_EQ(big.backend, Backend::kPeer) << big.reason;
  EXPECT_TRUE(
      HasMeasuredCurve(table, Backend::kPeer, LinkClass::kIntraHostNvlink));
  // One process per GPU: XLA runs "peer" as NCCL, so it is refused.
  const Topology per_gpu = Placed("1x1x8:gpus_per_process=1", kPeerSet);
  ToolDecision refused =
      Decide(per_gpu, table, {int64_t{128} << 20, Ring(8), 8});
  EXPECT_EQ(refused.backend, Backend::kNccl);
  EXPECT_EQ(Text(refused.refused[static_cast<int>(Backend::kPeer)]),
            "peer refused: 7 of the program's 8 devices are outside its first "
            "device's process (1 GPU per process); XLA runs peer "
            "memory only when every device of the permute's group is in one "
            "process and otherwise falls back to NCCL");
  // Two processes of four GPUs: a ring inside one process is refused in a
  // program of eight devices, whose permute's clique is all eight, and chosen
  // in a program of four.
  const Topology halves = Placed("1x1x8:gpus_per_process=4", kPeerSet);
  ToolDecision wide = Decide(halves, table, {int64_t{128} << 20, Ring(4), 8});
  EXPECT_EQ(wide.backend, Backend::kNccl) << wide.reason;
  ToolDecision inside = Decide(halves, table, {int64_t{128} << 20, Ring(4), 4});
  EXPECT_EQ(inside.backend, Backend::kPeer) << inside.reason;
}

TEST(BackendSetTest, FasterPeerIsChosenInsideOneHost) {
  ToolCostTable table = TableWith(
      "backends: [NCCL, PEER]\nlinks { backend: PEER link_class: NVLINK "
      "latency_us: 2 bandwidth_gbps: 450 per_buffer_us: 0 }\n");
  ToolDecision d = Decide(Placed("1x1x2", kPeerSet), table, {1024, Ring(2), 2});
  EXPECT_EQ(d.backend, Backend::kPeer) << d.reason;
  EXPECT_EQ(d.backend, Backend::kPeer);
  EXPECT_EQ(d.reason.rfind("peer memory: all 2 edges stay in one process", 0),
            0u)
      << d.reason;
  EXPECT_FALSE(d.TimeUs(Backend::kNvshmem).has_value());
  EXPECT_NE(Text(d.refused[static_cast<int>(Backend::kNvshmem)]), "");
  // Peer has no team barrier: a shift is safe for it.
  ToolDecision shift =
      Decide(Placed("1x1x2", kPeerSet), table, {1024, {{0, 1}}, 2});
  EXPECT_EQ(shift.backend, Backend::kPeer) << shift.reason;
  // Across hosts XLA falls back to NCCL: peer is refused.
  ToolDecision hosts =
      Decide(Placed("1x2x1", kPeerSet), table, {1024, Ring(2), 2});
  EXPECT_EQ(hosts.backend, Backend::kNccl);
  EXPECT_NE(hosts.reason.find("peer refused: 2 of 2 edges leave their host"),
            std::string::npos)
      << hosts.reason;
}

TEST(BackendSetTest, SymmetricNeedsSignals) {
  ToolCostTable table = TableWith(
      "backends: [NCCL, PEER, SYMMETRIC]\nlinks { backend: SYMMETRIC "
      "link_class: NVLINK latency_us: 1 bandwidth_gbps: 450 per_buffer_us: 0 "
      "}\n");
  ToolDecision d = Decide(MustParse("1x1x2"), table, {1024, Ring(2), 2});
  EXPECT_NE(d.backend, Backend::kSymmetric) << d.reason;
  EXPECT_NE(
      Text(d.refused[static_cast<int>(Backend::kSymmetric)])
          .find("symmetric refused: the runtime's NCCL is not known to support "
                "signals"),
      std::string::npos);
  table.symmetric_signals = true;
  EXPECT_EQ(Decide(MustParse("1x1x2"), table, {1024, Ring(2), 2}).backend,
            Backend::kSymmetric);
}

TEST(BackendSetTest, BackendOutsideTheSetIsRefused) {
  const ToolDecision d =
      Decide(MustParse("1x1x2"), DefaultToolCostTable(), {1024, Ring(2), 2});
  EXPECT_NE(Text(d.refused[static_cast<int>(Backend::kPeer)])
                .find("peer refused: not offered by the target XLA"),
            std::string::npos);
  EXPECT_EQ(Text(d.refused[static_cast<int>(Backend::kNccl)]), "");
}

TEST(CostModelTest, PerBufferCostCountsExtraBuffers) {
  ToolCostTable table = TableWith(
      "links { backend: NCCL link_class: NVLINK latency_us: 10 bandwidth_gbps: "
      "100 per_buffer_us: 0 }\nlinks { backend: NVSHMEM link_class: NVLINK "
      "latency_us: 5 bandwidth_gbps: 100 per_buffer_us: 4 }\nsm_interference { "
      "backend: NCCL fraction: 0 }\n");
  // 1 MB over 100 GB/s = 10 us.
  EXPECT_DOUBLE_EQ(EdgeTimeUs(table, Backend::kNvshmem,
                              LinkClass::kIntraHostNvlink, 1000000, 1),
                   15);
  EXPECT_DOUBLE_EQ(EdgeTimeUs(table, Backend::kNvshmem,
                              LinkClass::kIntraHostNvlink, 1000000, 4),
                   27);
  // One buffer: NVSHMEM wins; four buffers: its per-buffer barrier loses.
  PermuteRequest one{1000000, Ring(2), 2, 1};
  PermuteRequest four{1000000, Ring(2), 2, 4};
  EXPECT_EQ(Decide(Placed("1x1x2"), table, one).backend, Backend::kNvshmem);
  EXPECT_EQ(Decide(Placed("1x1x2"), table, four).backend, Backend::kNccl);
}

TEST(MeasuredCurveTest, ReasonsSayWhichModelPriced) {
  ToolCostTable table = TableWith(
      std::string(kCurveTable) +
      "links { backend: NCCL link_class: NVLINK points { buffers: 1 bytes: "
      "1024 us: 10 } points { buffers: 1 bytes: 67108864 us: 400 } }\n");
  ToolDecision big = Decide(Placed("1x1x2"), table, {64 << 20, Ring(2), 2});
  EXPECT_EQ(big.backend, Backend::kNvshmem) << big.reason;
  EXPECT_DOUBLE_EQ(*big.TimeUs(Backend::kNvshmem), 200);
  EXPECT_NE(big.reason.find("faster; measured curve)"), std::string::npos)
      << big.reason;
  ToolDecision small = Decide(Placed("1x1x2"), table, {1024, Ring(2), 2});
  EXPECT_EQ(small.backend, Backend::kNccl) << small.reason;
  EXPECT_NE(small.reason.find("margin for 1.0 KiB (measured curve)"),
            std::string::npos)
      << small.reason;
  ToolCostTable mixed =
      TableWith(std::string(kCurveTable) +
                "links { backend: NCCL link_class: NVLINK latency_us: 1 "
                "bandwidth_gbps: 450 per_buffer_us: 0 }\n");
  ToolDecision m = Decide(Placed("1x1x2"), mixed, {1024, Ring(2), 2});
  EXPECT_NE(m.reason.find("(NCCL parametric, NVSHMEM measured curve)"),
            std::string::npos)
      << m.reason;
}

TEST(DefaultTableTest, DecidesAsMeasuredOnTwoH200) {
  const Topology t = Placed("1x1x2");
  // One buffer: NCCL below a few MiB (NVSHMEM's put + barrier costs more),
  // NVSHMEM from 16 MiB on (its copy moves data faster).
  ToolDecision small =
      Decide(t, DefaultToolCostTable(), {64 << 10, Ring(2), 2});
  EXPECT_EQ(small.backend, Backend::kNccl) << small.reason;
  EXPECT_NE(small.reason.find("(measured curve)"), std::string::npos)
      << small.reason;
  ToolDecision big = Decide(t, DefaultToolCostTable(), {64 << 20, Ring(2), 2});
  EXPECT_EQ(big.backend, Backend::kNvshmem) << big.reason;
  // Four buffers of 1 MiB in all: four barriers, NCCL.
  ToolDecision four =
      Decide(t, DefaultToolCostTable(), {1 << 20, Ring(2), 2, 4});
  EXPECT_EQ(four.backend, Backend::kNccl) << four.reason;
}
TEST(DecideTest, VerdictSaysHowTheDecisionCameAbout) {
  const Topology t = Placed("1x1x8");
  EXPECT_EQ(Decide(t, DefaultToolCostTable(), {4096, {}}).verdict,
            Verdict::kNoEdges);
  ToolDecision shift =
      Decide(t, DefaultToolCostTable(), {32 << 20, {{0, 1}}, 8});
  EXPECT_EQ(shift.verdict, Verdict::kNoAlternative);
  EXPECT_FALSE(shift.fastest_alternative.has_value());
  ToolDecision small = Decide(t, DefaultToolCostTable(), {1024, Ring(8), 8});
  EXPECT_EQ(small.verdict, Verdict::kWithinMargin);
  EXPECT_EQ(small.fastest_alternative, Backend::kNvshmem);
  EXPECT_EQ(small.backend, Backend::kNccl);
  ToolDecision big = Decide(t, DefaultToolCostTable(), {32 << 20, Ring(8), 8});
  EXPECT_EQ(big.verdict, Verdict::kAlternative);
  EXPECT_EQ(big.backend, Backend::kNvshmem);
  EXPECT_EQ(big.ChosenUs(), *big.TimeUs(Backend::kNvshmem));
}

TEST(DecideTest, NvshmemPutsToGroupIdsAsPes) {
  // Logical r + 2p -> device: (r0,p0)=0 (r1,p0)=2 (r0,p1)=1 (r1,p1)=3.
  Topology t = Placed("1x1x4:map=0,2,1,3");
  auto edges = EdgeIdsToDevices(t, {{0, 1}, {1, 0}}, /*cross_partition=*/true,
                                /*num_partitions=*/2, /*num_replicas=*/2);
  ASSERT_TRUE(edges.ok()) << edges.status();
  PermuteRequest request = {64 << 20, *edges, 4};
  request.groups = 2;
  ToolDecision d = Decide(t, DefaultToolCostTable(), request);
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_NE(d.reason.find("its pairs apply to 2 groups"), std::string::npos)
      << d.reason;
  request.groups = 1;
  d = Decide(t, DefaultToolCostTable(), request);
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_NE(d.reason.find("logical device 1 runs on device 2"),
            std::string::npos)
      << d.reason;
}

TEST(LayoutTest, TheUnstatedLayoutIsTheSetsDefault) {
  EXPECT_EQ(Placed("1x2x4").gpus_per_process(), 1);
  EXPECT_EQ(Placed("1x2x4", kPeerSet).gpus_per_process(), 4);
  EXPECT_EQ(Placed("1x2x4:gpus_per_process=2").gpus_per_process(), 2);
  EXPECT_EQ(
      ProcessLayoutText(Placed("1x2x4:gpus_per_process=2"), true, kNvshmemSet),
      "processes of 2 GPUs (stated)");
  EXPECT_NE(ProcessLayoutText(Placed("1x2x4"), false, kNvshmemSet)
                .find("the default where the target XLA offers NVSHMEM"),
            std::string::npos);
  EXPECT_EQ(
      WithDefaultProcesses(MustParse("1x2x4"), kNvshmemSet).gpus_per_process(),
      1);
  EXPECT_TRUE(SpecStatesProcesses("1x1x8:gpus_per_process=8"));
  EXPECT_FALSE(SpecStatesProcesses("1x1x8"));
}

TEST(LayoutTest, NvshmemNeedsOneGpuPerProcessAndEveryOneSidedBackendAMap) {
  const PermuteRequest ring = {32 << 20, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}, 4};
  ToolDecision d =
      Decide(Placed("1x1x4:gpus_per_process=4"), DefaultToolCostTable(), ring);
  EXPECT_EQ(d.backend, Backend::kNccl);
  ASSERT_TRUE(d.refused[static_cast<int>(Backend::kNvshmem)]);
  EXPECT_EQ(d.refused[static_cast<int>(Backend::kNvshmem)]->tool_rule,
            ToolRule::kSeveralGpusPerProcess);
  // No map, four processes: the order decides, and is unknown.
  d = Decide(MustParse("1x1x4:gpus_per_process=1"), DefaultToolCostTable(),
             ring);
  EXPECT_EQ(d.refused[static_cast<int>(Backend::kNvshmem)]->tool_rule,
            ToolRule::kPlacementUnknown);
  EXPECT_NE(d.reason.find("spans 4 processes (1 GPU each) on 1 host"),
            std::string::npos)
      << d.reason;
  // One process on one host: no order can change peer's verdict.
  ToolCostTable peer = DefaultToolCostTable();
  peer.backends = kPeerSet;
  d = Decide(MustParse("1x1x4"), peer, ring);
  EXPECT_FALSE(d.refused[static_cast<int>(Backend::kPeer)] &&
               d.refused[static_cast<int>(Backend::kPeer)]->tool_rule ==
                   ToolRule::kPlacementUnknown);
  // A conditional's branch is said first: it needs no map.
  d = Decide(MustParse("1x1x4:gpus_per_process=1"), DefaultToolCostTable(),
             ring, Place::kConditionalBranch);
  EXPECT_EQ(d.refused[static_cast<int>(Backend::kNvshmem)]->tool_rule,
            ToolRule::kUnderBranch);
}

// Where a permute sits: under a conditional's branch no one-sided backend
// runs (each would be chosen elsewhere); in a collectives group NVSHMEM does
// not, and peer and symmetric memory still may.
TEST(PlaceTest, BranchRefusesEveryOneSidedBackendAndAGroupOnlyNvshmem) {
  const PermuteRequest ring = {256 << 20, Ring(4), 4};
  ToolCostTable all = TableWith(R"table(
    backends: [NCCL, PEER, SYMMETRIC]
    symmetric_signals: true
    links { backend: PEER link_class: NVLINK latency_us: 1 bandwidth_gbps: 1e6 }
    links { backend: SYMMETRIC link_class: NVLINK latency_us: 1 bandwidth_gbps: 1e6 }
  )table");
  const Topology one_process =
      Placed("1x1x4:gpus_per_process=4",
             {Backend::kNccl, Backend::kPeer, Backend::kSymmetric});
  const Topology one_gpu_each = Placed("1x1x4:gpus_per_process=1");
  for (Backend backend : {Backend::kPeer, Backend::kSymmetric}) {
    ToolCostTable table = all;
    table.backends = {Backend::kNccl, backend};
    const int b = static_cast<int>(backend);
    ToolDecision d = Decide(one_process, table, ring);
    ASSERT_EQ(d.backend, backend) << d.reason;
    d = Decide(one_process, table, ring, Place::kConditionalBranch);
    EXPECT_EQ(d.backend, Backend::kNccl) << d.reason;
    ASSERT_TRUE(d.refused[b]);
    EXPECT_EQ(d.refused[b]->tool_rule, ToolRule::kUnderBranch);
    d = Decide(one_process, table, ring, Place::kCollectivesGroup);
    EXPECT_EQ(d.backend, backend) << d.reason;
  }
  ToolCostTable nvshmem = all;
  nvshmem.backends = kNvshmemSet;
  constexpr int kNvshmem = static_cast<int>(Backend::kNvshmem);
  const PermuteRequest large = {32 << 20, Ring(4), 4};
  ToolDecision d = Decide(one_gpu_each, nvshmem, large);
  ASSERT_EQ(d.backend, Backend::kNvshmem) << d.reason;
  for (Place place : {Place::kConditionalBranch, Place::kCollectivesGroup}) {
    d = Decide(one_gpu_each, nvshmem, large, place);
    EXPECT_EQ(d.backend, Backend::kNccl) << d.reason;
    ASSERT_TRUE(d.refused[kNvshmem]);
    EXPECT_EQ(d.refused[kNvshmem]->tool_rule, place == Place::kConditionalBranch
                                                  ? ToolRule::kUnderBranch
                                                  : ToolRule::kInGroup);
  }
}

// Two GPUs in a process are already too many for NVSHMEM's set-up: the
// boundary of the rule, on a layout every other rule lets through.
TEST(LayoutTest, TwoGpusPerProcessAreRefusedNvshmem) {
  const PermuteRequest ring = {32 << 20, Ring(8), 8};
  ToolCostTable table = DefaultToolCostTable();
  ToolDecision d = Decide(Placed("1x1x8:gpus_per_process=1"), table, ring);
  ASSERT_EQ(d.backend, Backend::kNvshmem) << d.reason;
  d = Decide(Placed("1x1x8:gpus_per_process=2"), table, ring);
  EXPECT_EQ(d.backend, Backend::kNccl) << d.reason;
  ASSERT_TRUE(d.refused[static_cast<int>(Backend::kNvshmem)]);
  EXPECT_EQ(d.refused[static_cast<int>(Backend::kNvshmem)]->tool_rule,
            ToolRule::kSeveralGpusPerProcess);
}

// A mark of a backend that can run is that backend, even where the model
// keeps NCCL (a small message).
TEST(LayoutTest, AMarkOfARunnableBackendIsThatBackend) {
  const PermuteRequest small = {4096, {{0, 1}, {1, 0}}, 2};
  ToolCostTable peer = DefaultToolCostTable();
  peer.backends = kPeerSet;
  ToolDecision d = Decide(Placed("1x1x2", kPeerSet), peer, small);
  ASSERT_EQ(d.backend, Backend::kNccl) << d.reason;
  KeepUserMark("peer", d);
  EXPECT_EQ(d.backend, Backend::kPeer);
  EXPECT_EQ(d.reason, "marked by the user: peer; kept as marked");
}

TEST(LayoutTest, AUsersMarkIsKept) {
  const PermuteRequest ring = {128 << 20, {{0, 1}, {1, 0}}, 2};
  ToolCostTable peer = DefaultToolCostTable();
  peer.backends = kPeerSet;
  ToolDecision d = Decide(Placed("1x1x2", kPeerSet), peer, ring);
  ASSERT_EQ(d.backend, Backend::kPeer);
  KeepUserMark("private", d);
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_EQ(d.reason, "marked by the user: private; kept as marked");
  d = Decide(Placed("1x1x2:gpus_per_process=1", kPeerSet), peer, ring);
  KeepUserMark("Peer", d);
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_NE(d.reason.find("though XLA keeps the flag's mode: peer refused"),
            std::string::npos)
      << d.reason;
}

// A mark names one mode in any case, or comma-joined parts all naming it (a
// combiner joins its permutes' values); none, or two, is an error.
TEST(LayoutTest, AMarkNamesOneModeOrIsAnError) {
  EXPECT_EQ(MarkWord("Peer,peer"), "peer");
  EXPECT_EQ(MarkWord("PRIVATE"), "private");
  for (absl::string_view bad : {"peer,symmetric", "warp_drive", "", "peer,"}) {
    EXPECT_EQ(MarkWord(bad), std::nullopt) << bad;
    EXPECT_FALSE(CheckUserMark(bad).ok()) << bad;
  }
  EXPECT_TRUE(CheckUserMark("Peer,peer").ok());
  const PermuteRequest small = {4096, {{0, 1}, {1, 0}}, 2};
  ToolCostTable peer = DefaultToolCostTable();
  peer.backends = kPeerSet;
  ToolDecision d = Decide(Placed("1x1x2", kPeerSet), peer, small);
  KeepUserMark("Peer,peer", d);
  EXPECT_EQ(d.backend, Backend::kPeer);
}

// Peer memory over more devices than a process drives: under any order some
// device is outside the first one's process, so the process rule refuses it
// without a map, and the reason says so, not that the order is unknown.
TEST(LayoutTest, NoOrderPutsTheProgramInOneProcess) {
  const PermuteRequest ring = {32 << 20, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}, 4};
  ToolCostTable peer = DefaultToolCostTable();
  peer.backends = kPeerSet;
  for (absl::string_view spec : {"1x1x4:gpus_per_process=1", "1x2x2"}) {
    absl::StatusOr<Topology> topology =
        ParseTopology(std::string(spec), kPeerSet);
    ASSERT_TRUE(topology.ok()) << topology.status();
    const ToolDecision d = Decide(*topology, peer, ring);
    const auto& refused = d.refused[static_cast<int>(Backend::kPeer)];
    ASSERT_TRUE(refused) << spec;
    EXPECT_EQ(refused->kind, RefusalKind::kCrossesProcesses) << spec;
    EXPECT_EQ(refused->tool_rule, ToolRule::kNone) << spec;
  }
}

// A type the request names verbatim is printed escaped (the selection
// fuzzer's finding: a control character reached the reason).
TEST(DecideTest, AnUnknownTypeIsPrintedEscaped) {
  ToolRefusal refusal;
  refusal.kind = RefusalKind::kUnsupportedType;
  refusal.type = std::string("s\x01\n8");
  const std::string text = RefusalText(refusal);
  EXPECT_NE(text.find("element type s\\x01\\x0a8 "), std::string::npos) << text;
  for (unsigned char c : text) EXPECT_GE(c, 0x20) << text;
}

TEST(DecideTest, EveryRefusalHasOneLineOfText) {
  std::vector<ToolRefusal> refusals;
  for (RefusalKind kind :
       {RefusalKind::kUnsupportedType, RefusalKind::kMemcpyLocalP2p,
        RefusalKind::kOutsideSharedMemory, RefusalKind::kExceedsHeap,
        RefusalKind::kEdgeOutsideTeam, RefusalKind::kDeviceWithoutSource,
        RefusalKind::kTeamOutsideTopology, RefusalKind::kSeveralGroups,
        RefusalKind::kPlacedOffItsPe, RefusalKind::kLeavesHost,
        RefusalKind::kCrossesProcesses, RefusalKind::kLocalCopy,
        RefusalKind::kHostGpusIdle, RefusalKind::kDestinationOffHeap}) {
    refusals.emplace_back();
    refusals.back().kind = kind;
  }
  for (ToolRule rule : {ToolRule::kNotOffered, ToolRule::kNoSignals}) {
    refusals.emplace_back();
    refusals.back().tool_rule = rule;
  }
  for (ToolRefusal& refusal : refusals) {
    refusal.backend = Backend::kPeer;
    refusal.devices = {0, 1, 2};
    const std::string text = RefusalText(refusal);
    EXPECT_EQ(text.rfind("peer refused: ", 0), 0u) << text;
    EXPECT_GT(text.size(), std::string("peer refused: ").size()) << text;
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  }
}

TEST(BackendInfoTest, RecordsAreNamedAsTheCoreNamesBackends) {
  for (int b = 0; b < kNumBackends; ++b) {
    const Backend backend = static_cast<Backend>(b);
    EXPECT_STREQ(Info(backend).name, BackendName(backend));
    EXPECT_EQ(BackendFromName(BackendName(backend)), backend);
  }
}

}  // namespace
}  // namespace xla::gpu::backend_selection
