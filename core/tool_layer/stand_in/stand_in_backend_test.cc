// A fifth backend, `stand_in`, added by add_backend.py at build time through
// the files docs/architecture.md lists and no other: named, parsed, printed,
// priced, planned and refused like the others, by the same code. A spot that
// still enumerates the four backends fails here.

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "tool_layer/backends.h"
#include "tool_layer/decide.h"
#include "tool_layer/table_text.h"
#include "tool_layer/topology_spec.h"

namespace xla::gpu::backend_selection {
namespace {

constexpr Backend kStandIn = Backend::kStandIn;

Topology MustParse(const std::string& spec,
                   const std::vector<Backend>& offered) {
  absl::StatusOr<Topology> topology = ParseTopology(spec, offered);
  EXPECT_TRUE(topology.ok()) << topology.status();
  return topology.ok() ? *std::move(topology) : *ParseTopology("1x1x1");
}

std::vector<std::pair<int, int>> Ring(int n) {
  std::vector<std::pair<int, int>> edges;
  for (int i = 0; i < n; ++i) edges.emplace_back(i, (i + 1) % n);
  return edges;
}

// A permute of one MiB from each source over `edges` of a program of `team`.
PermuteRequest Request(std::vector<std::pair<int, int>> edges, int team) {
  PermuteRequest request;
  request.bytes = 1 << 20;
  request.device_edges = std::move(edges);
  request.team_size = team;
  return request;
}

// Plans over NCCL and the stand-in, which is faster on NVLink.
constexpr char kTable[] =
    "backends: [NCCL, STAND_IN]\n"
    "links { backend: STAND_IN link_class: NVLINK latency_us: 1 "
    "bandwidth_gbps: 900 per_buffer_us: 0 }\n"
    "sm_interference { backend: STAND_IN fraction: 0.25 }\n";

ToolCostTable StandInTable() {
  absl::StatusOr<ToolCostTable> table = ParseToolCostTable(kTable, "t.txt");
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? *std::move(table) : DefaultToolCostTable();
}

std::string Refused(const ToolDecision& decision) {
  const auto& refusal = decision.refused[static_cast<int>(kStandIn)];
  return refusal ? RefusalText(*refusal) : "";
}

TEST(StandInBackendTest, NamedAndInBackendSets) {
  EXPECT_EQ(kNumBackends, 5);
  EXPECT_EQ(std::string(BackendName(kStandIn)), "stand_in");
  EXPECT_EQ(BackendFromName("stand_in"), kStandIn);
  EXPECT_EQ(AllBackends().back(), kStandIn);
  absl::StatusOr<std::vector<Backend>> set = ParseBackendSet("stand_in, nccl");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(BackendSetToString(*set), "nccl,stand_in");
  // Its own runtime: no XLA offers it with peer memory.
  EXPECT_NE(ParseBackendSet("nccl,peer,stand_in")
                .status()
                .message()
                .find("mixes peer"),
            std::string::npos);
  EXPECT_NE(ParseBackendSet("nccl,bogus")
                .status()
                .message()
                .find("(nccl, nvshmem, peer, symmetric, stand_in)"),
            std::string::npos);
}

TEST(StandInBackendTest, DefaultRowsAreNcclsAndTablesRoundTrip) {
  const ToolCostTable defaults = DefaultToolCostTable();
  for (int c = 0; c < kNumLinkClasses; ++c) {
    const LinkClass link_class = static_cast<LinkClass>(c);
    const LinkCost& nccl = defaults.link(Backend::kNccl, link_class);
    const LinkCost& stand_in = defaults.link(kStandIn, link_class);
    EXPECT_EQ(stand_in.latency_us, nccl.latency_us) << c;
    EXPECT_EQ(stand_in.bandwidth_gbps, nccl.bandwidth_gbps) << c;
    EXPECT_EQ(stand_in.per_buffer_us, nccl.per_buffer_us) << c;
  }
  const ToolCostTable table = StandInTable();
  EXPECT_EQ(table.backends, (std::vector<Backend>{Backend::kNccl, kStandIn}));
  EXPECT_EQ(table.link(kStandIn, LinkClass::kIntraHostNvlink).latency_us, 1);
  EXPECT_EQ(table.sm_interference(kStandIn), 0.25);
  const std::string printed = CostTableToString(table);
  EXPECT_NE(printed.find("backends: [NCCL, STAND_IN]"), std::string::npos);
  EXPECT_NE(printed.find("backend: STAND_IN\n  link_class: NVLINK"),
            std::string::npos);
  absl::StatusOr<ToolCostTable> again = ParseToolCostTable(printed, "printed");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(CostTableToString(*again), printed);
  // An entry of a value the enum lacks is still refused.
  EXPECT_FALSE(ParseToolCostTable("sm_interference { backend: 6 }", "t").ok());
}

TEST(StandInBackendTest, PlannedWithItsRecordsWords) {
  const ToolCostTable table = StandInTable();
  const Topology one_host = MustParse("1x1x2", table.backends);
  const ToolDecision d = Decide(one_host, table, Request(Ring(2), 2));
  EXPECT_EQ(d.backend, kStandIn) << d.reason;
  EXPECT_EQ(d.verdict, Verdict::kAlternative);
  EXPECT_EQ(
      d.reason.rfind("stand-in memory: all 2 edges stay in one host; ", 0), 0u)
      << d.reason;
  // Its rule, not peer memory's: a program of two processes on one host.
  const Topology two_processes = MustParse("1x2x2:map=0,1,2,3", table.backends);
  const ToolDecision in_host =
      Decide(two_processes, table, Request({{0, 1}, {1, 0}}, 4));
  EXPECT_EQ(in_host.backend, kStandIn) << in_host.reason;
  // The core alone, asked about it.
  EXPECT_EQ(
      Decide(one_host, table.core, Request(Ring(2), 2), {kStandIn}).backend,
      kStandIn);
}

TEST(StandInBackendTest, RefusedByItsRuleAndOutsideItsSet) {
  const ToolCostTable table = StandInTable();
  const Topology two_hosts = MustParse("1x2x1:map=0,1", table.backends);
  const ToolDecision across = Decide(two_hosts, table, Request(Ring(2), 2));
  EXPECT_EQ(across.backend, Backend::kNccl);
  EXPECT_EQ(Refused(across),
            "stand_in refused: 2 of 2 edges leave their host; XLA runs "
            "stand-in memory only inside one host and otherwise falls back "
            "to NCCL");
  const ToolCostTable defaults = DefaultToolCostTable();
  const ToolDecision not_offered = Decide(MustParse("1x1x2", defaults.backends),
                                          defaults, Request(Ring(2), 2));
  EXPECT_EQ(Refused(not_offered),
            "stand_in refused: not offered by the target XLA (backends "
            "nccl,nvshmem)");
}

TEST(StandInBackendTest, AUsersMarkKeepsIt) {
  const ToolCostTable table = StandInTable();
  ToolDecision d =
      Decide(MustParse("1x1x2", table.backends), table, Request(Ring(2), 2));
  d.backend = Backend::kNccl;
  KeepUserMark("stand_in", d);
  EXPECT_EQ(d.backend, kStandIn) << d.reason;
  EXPECT_EQ(d.reason, "marked by the user: stand_in; kept as marked");
}

}  // namespace
}  // namespace xla::gpu::backend_selection
