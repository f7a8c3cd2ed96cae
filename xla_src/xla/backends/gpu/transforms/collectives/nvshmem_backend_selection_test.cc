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
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_cost_table.h"
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

// A refusal's text, or "" when there is none (for readable expectations).
std::string Text(const std::optional<Refusal>& refusal) {
  return refusal ? RefusalText(*refusal) : "";
}

std::string HangText(const std::vector<std::pair<int, int>>& edges,
                     const std::vector<int>& team) {
  return Text(NvshmemHang(edges, team));
}

std::string SafetyText(const Topology& topology, const CostTable& table,
                       const PermuteRequest& request, Backend backend) {
  return Text(CheckSafety(topology, table, request, backend));
}

std::vector<std::pair<int, int>> Ring(int n) {
  std::vector<std::pair<int, int>> edges;
  for (int i = 0; i < n; ++i) edges.emplace_back(i, (i + 1) % n);
  return edges;
}

TEST(DecideTest, OneHostRingGoesToNvshmem) {
  Topology t = MustParse("1x1x8");
  Decision d = Decide(t, DefaultCostTable(), {32 << 20, Ring(8)});
  EXPECT_EQ(d.backend, Backend::kNvshmem) << d.reason;
  EXPECT_EQ(d.edges_by_class[static_cast<int>(LinkClass::kIntraHostNvlink)], 8);
  EXPECT_LT(d.backend_us[static_cast<int>(Backend::kNvshmem)],
            d.backend_us[static_cast<int>(Backend::kNccl)]);
  EXPECT_EQ(d.reason.rfind("NVSHMEM: all 8 edges", 0), 0u) << d.reason;
}

TEST(DecideTest, TwoHostRingIsPricedAndStaysOnNcclWithDefaultCosts) {
  Decision d =
      Decide(MustParse("1x2x4"), DefaultCostTable(), {32 << 20, Ring(8)});
  EXPECT_EQ(d.backend, Backend::kNccl) << d.reason;
  // Eligible and priced by its slowest (network) edge, not refused.
  EXPECT_EQ(Text(d.refused[static_cast<int>(Backend::kNvshmem)]), "");
  EXPECT_DOUBLE_EQ(*d.backend_us[static_cast<int>(Backend::kNvshmem)],
                   EdgeTimeUs(DefaultCostTable(), Backend::kNvshmem,
                              LinkClass::kNetwork, 32 << 20));
  EXPECT_EQ(d.edges_by_class[static_cast<int>(LinkClass::kNetwork)], 2);
  EXPECT_NE(d.reason.find("does not beat NCCL"), std::string::npos) << d.reason;
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

TEST(AcrossHostsTest, ModelPicksNvshmemWhereItsNetworkRowWins) {
  // A table whose network rows say NVSHMEM is faster (as a calibration on
  // the user's nodes may): the whole permute goes to NVSHMEM.
  absl::StatusOr<CostTable> fast = ParseCostTable(
      "link nccl network 25 40 8\nlink nvshmem network 12 48 10\n", "t");
  ASSERT_TRUE(fast.ok()) << fast.status();
  Decision d =
      Decide(MustParse("1x2x8"), *fast, {8 << 20, CpRingAcrossTwoHosts(), 16});
  EXPECT_EQ(d.backend, Backend::kNvshmem) << d.reason;
  EXPECT_EQ(d.edges_by_class[static_cast<int>(LinkClass::kNetwork)], 16);
  EXPECT_EQ(d.reason.rfind("NVSHMEM: all 16 edges, 16 across the network "
                           "(ibrc)",
                           0),
            0u)
      << d.reason;
  // The default estimates: the NIC bounds both, NVSHMEM's put and barrier
  // cost more than NCCL's send/receive, so NCCL, priced, not refused.
  Decision by_default = Decide(MustParse("1x2x8"), DefaultCostTable(),
                               {8 << 20, CpRingAcrossTwoHosts(), 16});
  EXPECT_EQ(by_default.backend, Backend::kNccl) << by_default.reason;
  EXPECT_GT(by_default.backend_us[static_cast<int>(Backend::kNvshmem)],
            by_default.backend_us[static_cast<int>(Backend::kNccl)]);
}

TEST(AcrossHostsTest, MixedRingIsPricedByItsSlowestEdge) {
  absl::StatusOr<CostTable> fast =
      ParseCostTable("link nvshmem network 12 60 10\n", "t");
  ASSERT_TRUE(fast.ok()) << fast.status();
  const Topology t = MustParse("1x4x4");
  Decision d = Decide(t, *fast, {64 << 20, Ring(16), 16});
  EXPECT_EQ(d.backend, Backend::kNvshmem) << d.reason;
  EXPECT_EQ(d.edges_by_class[static_cast<int>(LinkClass::kNetwork)], 4);
  EXPECT_EQ(d.edges_by_class[static_cast<int>(LinkClass::kIntraHostNvlink)],
            12);
  EXPECT_DOUBLE_EQ(
      *d.backend_us[static_cast<int>(Backend::kNvshmem)],
      EdgeTimeUs(*fast, Backend::kNvshmem, LinkClass::kNetwork, 64 << 20));
  Decision by_default = Decide(t, DefaultCostTable(), {64 << 20, Ring(16), 16});
  EXPECT_EQ(by_default.backend, Backend::kNccl) << by_default.reason;
}

TEST(AcrossHostsTest, ShiftAcrossHostsIsStillRefused) {
  absl::StatusOr<CostTable> fast =
      ParseCostTable("link nvshmem network 1 900 1\n", "t");
  ASSERT_TRUE(fast.ok()) << fast.status();
  // Host 0 sends to host 1 only: devices 0..7 receive nothing.
  std::vector<std::pair<int, int>> shift;
  for (int t = 0; t < 8; ++t) shift.emplace_back(t, t + 8);
  Decision d = Decide(MustParse("1x2x8"), *fast, {8 << 20, shift, 16});
  EXPECT_EQ(d.backend, Backend::kNccl);
  const std::optional<Refusal>& refusal =
      d.refused[static_cast<int>(Backend::kNvshmem)];
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->kind, RefusalKind::kDeviceWithoutSource);
  EXPECT_EQ(refusal->devices, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(refusal->total, 16);
  EXPECT_NE(Text(refusal).find(
                "8 of 16 devices of the team (devices 0, 1, 2, 3, ...) have "
                "no source"),
            std::string::npos)
      << d.reason;
}

TEST(AcrossHostsTest, HeapLimitStillRefuses) {
  absl::StatusOr<CostTable> fast =
      ParseCostTable("link nvshmem network 1 900 1\n", "t");
  ASSERT_TRUE(fast.ok()) << fast.status();
  Decision d = Decide(MustParse("1x2x8"), *fast,
                      {int64_t{2} << 30, CpRingAcrossTwoHosts(), 16});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_EQ(d.verdict, Verdict::kNoAlternative);
  const std::optional<Refusal>& refusal =
      d.refused[static_cast<int>(Backend::kNvshmem)];
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->kind, RefusalKind::kExceedsHeap);
  EXPECT_EQ(refusal->bytes, int64_t{2} << 30);
  EXPECT_EQ(refusal->limit, int64_t{1} << 30);
  EXPECT_NE(d.reason.find("exceeds the NVSHMEM symmetric heap"),
            std::string::npos)
      << d.reason;
}

// The runtime's barrier is called only by devices with a source: any team
// member without one hangs the others.
TEST(DeadlockFreeTest, NonCyclicShiftIsRefused) {
  Decision d =
      Decide(MustParse("1x1x2"), DefaultCostTable(), {32 << 20, {{0, 1}}, 2});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_FALSE(d.backend_us[static_cast<int>(Backend::kNvshmem)].has_value());
  EXPECT_EQ(d.reason,
            "NCCL: nvshmem refused: 1 of 2 devices of the team (device 0) has "
            "no source; XLA's NVSHMEM permute would hang in its barrier");
  // The same devices as a cycle are safe and NVSHMEM wins with these costs.
  Decision ring =
      Decide(MustParse("1x1x2"), DefaultCostTable(), {32 << 20, Ring(2), 2});
  EXPECT_EQ(ring.backend, Backend::kNvshmem) << ring.reason;
}

TEST(DeadlockFreeTest, ShiftOfEightListsTheDeviceWithoutSource) {
  std::vector<std::pair<int, int>> shift;
  for (int i = 0; i < 7; ++i) shift.emplace_back(i, i + 1);
  Decision d =
      Decide(MustParse("1x1x8"), DefaultCostTable(), {32 << 20, shift, 8});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_NE(
      d.reason.find("1 of 8 devices of the team (device 0) has no source"),
      std::string::npos)
      << d.reason;
}

TEST(DeadlockFreeTest, PartialGroupIsRefusedForTheWholeProgram) {
  // A ring over devices 0..3 of an 8-device program: 4..7 call no barrier.
  Decision d =
      Decide(MustParse("1x1x8"), DefaultCostTable(), {32 << 20, Ring(4), 8});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_NE(d.reason.find("4 of 8 devices of the team (devices 4, 5, 6, 7) "
                          "have no source"),
            std::string::npos)
      << d.reason;
  // In a 4-device program on the same machine the ring covers the team.
  Decision four =
      Decide(MustParse("1x1x8"), DefaultCostTable(), {32 << 20, Ring(4), 4});
  EXPECT_EQ(four.backend, Backend::kNvshmem) << four.reason;
}

TEST(DeadlockFreeTest, UnknownTeamIsTheWholeTopology) {
  Decision d =
      Decide(MustParse("1x1x8"), DefaultCostTable(), {32 << 20, Ring(4)});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_NE(d.reason.find("4 of 8 devices"), std::string::npos) << d.reason;
  Decision full =
      Decide(MustParse("1x1x8"), DefaultCostTable(), {32 << 20, Ring(8)});
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
                .find("2 of 8 devices of the team (devices 0, 1) have"),
            std::string::npos);
}

TEST(DeadlockFreeTest, TeamLargerThanTheTopologyIsRefused) {
  const Topology t = MustParse("1x1x4");
  EXPECT_EQ(TeamDevices(t, 6).size(), 4u);
  Decision d = Decide(t, DefaultCostTable(), {32 << 20, Ring(4), 6});
  EXPECT_EQ(d.backend, Backend::kNccl);
  const std::optional<Refusal>& refusal =
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

TEST(DecideTest, Nvl72DomainAllowsNvshmemAcrossHosts) {
  Decision d = Decide(MustParse("1x9x8:nvl72"), DefaultCostTable(),
                      {32 << 20, Ring(72)});
  EXPECT_EQ(d.backend, Backend::kNvshmem) << d.reason;
  EXPECT_EQ(d.edges_by_class[static_cast<int>(LinkClass::kNvlinkDomain)], 9);
  // Same ring without the NVL72 domain: network edges, which the default
  // estimates price above NCCL's.
  Decision plain =
      Decide(MustParse("1x9x8"), DefaultCostTable(), {32 << 20, Ring(72)});
  EXPECT_EQ(plain.backend, Backend::kNccl) << plain.reason;
}

TEST(DecideTest, HugeMessagesExceedTheSymmetricHeap) {
  Decision d = Decide(MustParse("1x1x8"), DefaultCostTable(),
                      {int64_t{2} << 30, Ring(8)});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_NE(d.reason.find("symmetric heap"), std::string::npos) << d.reason;
}

TEST(DecideTest, MarginKeepsNcclForTinyGains) {
  CostTable table = DefaultCostTable();
  table.margin = 0.5;
  Decision d = Decide(MustParse("1x1x8"), table, {1024, Ring(8)});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_NE(d.reason.find("margin"), std::string::npos) << d.reason;
}

TEST(DecideTest, DegenerateAndEmptyPermutes) {
  Decision self =
      Decide(MustParse("1x1x4"), DefaultCostTable(), {4096, {{0, 0}, {1, 1}}});
  EXPECT_EQ(self.edges_by_class[static_cast<int>(LinkClass::kSameDevice)], 2);
  Decision none = Decide(MustParse("1x1x4"), DefaultCostTable(), {4096, {}});
  EXPECT_EQ(none.backend, Backend::kNccl);
  EXPECT_NE(none.reason.find("no source-target pairs"), std::string::npos);
}

TEST(DecideTest, PairsSpanningHostsKeepNccl) {
  std::string error;
  absl::StatusOr<CostTable> table = ParseCostTable(
      "link nccl network 4 900\nsm_interference nccl 0.5\n", "t");
  ASSERT_TRUE(table.ok()) << table.status();
  Topology t = MustParse("1x2x2:map=0,2,1,3");
  // Logical r + 2p -> device: (r0,p0)=0 (r1,p0)=2 (r0,p1)=1 (r1,p1)=3.
  auto edges = EdgeIdsToDevices(t, {{0, 1}, {1, 0}}, /*cross_partition=*/true,
                                /*num_partitions=*/2, /*num_replicas=*/2);
  ASSERT_TRUE(edges.ok()) << edges.status();
  // Edges: r0: 0->1, 1->0 (same host); r1: 2->3, 3->2 (same host).
  Decision d = Decide(t, *table, {64 << 20, *edges, 4});
  EXPECT_EQ(d.backend, Backend::kNvshmem) << d.reason;
  // Device 3 has no source here: refused whatever the costs.
  std::vector<std::pair<int, int>> mixed = {{0, 1}, {1, 0}, {2, 1}, {1, 2}};
  Decision whole = Decide(t, *table, {64 << 20, mixed, 4});
  EXPECT_EQ(whole.backend, Backend::kNccl) << whole.reason;
  EXPECT_NE(whole.reason.find("1 of 4 devices of the team (device 3) "
                              "has no source"),
            std::string::npos)
      << whole.reason;
}

TEST(DecideTest, ZeroCostKeepsNcclWithoutNan) {
  std::string error;
  absl::StatusOr<CostTable> table = ParseCostTable(
      "link nccl nvlink 0 450\nlink nvshmem nvlink 0 450\n", "t");
  ASSERT_TRUE(table.ok()) << table.status();
  Decision d = Decide(MustParse("1x1x8"), *table, {0, Ring(8)});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_EQ(d.reason.find("nan"), std::string::npos) << d.reason;
}

TEST(DecideTest, ModeledTimeGrowsWithBytes) {
  // The parametric model grows with size; measured curves follow their data
  // (MeasuredCurveTest), which at small sizes is noise around a plateau.
  CostTable parametric = TableWith("link nccl nvlink 6 450 7.6\n");
  Topology t = MustParse("1x2x4");
  double previous = -1;
  for (int64_t bytes = 1024; bytes <= (int64_t{1} << 30); bytes *= 4) {
    Decision d = Decide(t, parametric, {bytes, Ring(8)});
    EXPECT_GT(d.chosen_us, previous);
    previous = d.chosen_us;
  }
}

TEST(BackendSetTest, DefaultPeerIsTheMeasuredOneProcessCurve) {
  // With the backend set alone, one host: peer's copies lose below a few MiB
  // and win from 16 MiB on, as measured with one process driving the GPUs.
  CostTable table = TableWith("backends nccl,peer\n");
  const Topology host = MustParse("1x1x8");
  Decision small = Decide(host, table, {1 << 20, Ring(8), 8});
  EXPECT_EQ(small.backend, Backend::kNccl) << small.reason;
  Decision big = Decide(host, table, {int64_t{128} << 20, Ring(8), 8});
  EXPECT_EQ(big.backend, Backend::kPeer) << big.reason;
  EXPECT_TRUE(
      HasMeasuredCurve(table, Backend::kPeer, LinkClass::kIntraHostNvlink));
  // One process per GPU: XLA runs "peer" as NCCL, so it is refused.
  const Topology per_gpu = MustParse("1x1x8:gpus_per_process=1");
  Decision refused = Decide(per_gpu, table, {int64_t{128} << 20, Ring(8), 8});
  EXPECT_EQ(refused.backend, Backend::kNccl);
  EXPECT_EQ(Text(refused.refused[static_cast<int>(Backend::kPeer)]),
            "peer refused: 8 of 8 edges join GPUs of different processes (1 "
            "GPU per process); XLA copies through peer memory only among one "
            "process's GPUs and otherwise falls back to NCCL");
  // Two processes of four GPUs: a ring inside each process is fine.
  const Topology halves = MustParse("1x1x8:gpus_per_process=4");
  Decision inside = Decide(halves, table, {int64_t{128} << 20, Ring(4), 8});
  EXPECT_EQ(inside.backend, Backend::kPeer) << inside.reason;
}

TEST(BackendSetTest, FasterPeerIsChosenInsideOneHost) {
  CostTable table = TableWith("backends nccl,peer\nlink peer nvlink 2 450\n");
  Decision d = Decide(MustParse("1x1x2"), table, {1024, Ring(2), 2});
  EXPECT_EQ(d.backend, Backend::kPeer) << d.reason;
  EXPECT_EQ(d.backend, Backend::kPeer);
  EXPECT_EQ(d.reason.rfind("peer: all 2 edges stay in one host", 0), 0u)
      << d.reason;
  EXPECT_FALSE(d.backend_us[static_cast<int>(Backend::kNvshmem)].has_value());
  EXPECT_NE(Text(d.refused[static_cast<int>(Backend::kNvshmem)]), "");
  // Peer has no team barrier: a shift is safe for it.
  Decision shift = Decide(MustParse("1x1x2"), table, {1024, {{0, 1}}, 2});
  EXPECT_EQ(shift.backend, Backend::kPeer) << shift.reason;
  // Across hosts XLA falls back to NCCL: peer is refused.
  Decision hosts = Decide(MustParse("1x2x1"), table, {1024, Ring(2), 2});
  EXPECT_EQ(hosts.backend, Backend::kNccl);
  EXPECT_NE(hosts.reason.find("peer refused: 2 of 2 edges leave their host"),
            std::string::npos)
      << hosts.reason;
}

TEST(BackendSetTest, SymmetricNeedsSignals) {
  CostTable table =
      TableWith("backends nccl,peer,symmetric\nlink symmetric nvlink 1 450\n");
  Decision d = Decide(MustParse("1x1x2"), table, {1024, Ring(2), 2});
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
  CostTable table = DefaultCostTable();
  EXPECT_NE(
      SafetyText(MustParse("1x1x2"), table, {1024, Ring(2), 2}, Backend::kPeer)
          .find("peer refused: not offered by the target XLA"),
      std::string::npos);
  EXPECT_EQ(
      SafetyText(MustParse("1x1x2"), table, {1024, Ring(2), 2}, Backend::kNccl),
      "");
}

TEST(CostModelTest, PerBufferCostCountsExtraBuffers) {
  CostTable table = TableWith(
      "link nccl nvlink 10 100 0\nlink nvshmem nvlink 5 100 4\n"
      "sm_interference nccl 0\n");
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
  EXPECT_EQ(Decide(MustParse("1x1x2"), table, one).backend, Backend::kNvshmem);
  EXPECT_EQ(Decide(MustParse("1x1x2"), table, four).backend, Backend::kNccl);
}

TEST(MeasuredCurveTest, ReasonsSayWhichModelPriced) {
  CostTable table = TableWith(std::string(kCurveTable) +
                              "point nccl nvlink 1 1024 10\n"
                              "point nccl nvlink 1 67108864 400\n");
  Decision big = Decide(MustParse("1x1x2"), table, {64 << 20, Ring(2), 2});
  EXPECT_EQ(big.backend, Backend::kNvshmem) << big.reason;
  EXPECT_DOUBLE_EQ(*big.backend_us[static_cast<int>(Backend::kNvshmem)], 200);
  EXPECT_NE(big.reason.find("faster; measured curve)"), std::string::npos)
      << big.reason;
  Decision small = Decide(MustParse("1x1x2"), table, {1024, Ring(2), 2});
  EXPECT_EQ(small.backend, Backend::kNccl) << small.reason;
  EXPECT_NE(small.reason.find("margin for 1.0 KiB (measured curve)"),
            std::string::npos)
      << small.reason;
  CostTable mixed =
      TableWith(std::string(kCurveTable) + "link nccl nvlink 1 450\n");
  Decision m = Decide(MustParse("1x1x2"), mixed, {1024, Ring(2), 2});
  EXPECT_NE(m.reason.find("(NCCL parametric, NVSHMEM measured curve)"),
            std::string::npos)
      << m.reason;
}

TEST(DefaultTableTest, DecidesAsMeasuredOnTwoH200) {
  const Topology t = MustParse("1x1x2");
  // One buffer: NCCL below a few MiB (NVSHMEM's put + barrier costs more),
  // NVSHMEM from 16 MiB on (its copy moves data faster).
  Decision small = Decide(t, DefaultCostTable(), {64 << 10, Ring(2), 2});
  EXPECT_EQ(small.backend, Backend::kNccl) << small.reason;
  EXPECT_NE(small.reason.find("(measured curve)"), std::string::npos)
      << small.reason;
  Decision big = Decide(t, DefaultCostTable(), {64 << 20, Ring(2), 2});
  EXPECT_EQ(big.backend, Backend::kNvshmem) << big.reason;
  // Four buffers of 1 MiB in all: four barriers, NCCL.
  Decision four = Decide(t, DefaultCostTable(), {1 << 20, Ring(2), 2, 4});
  EXPECT_EQ(four.backend, Backend::kNccl) << four.reason;
}
TEST(DecideTest, VerdictSaysHowTheDecisionCameAbout) {
  const Topology t = MustParse("1x1x8");
  EXPECT_EQ(Decide(t, DefaultCostTable(), {4096, {}}).verdict,
            Verdict::kNoEdges);
  Decision shift = Decide(t, DefaultCostTable(), {32 << 20, {{0, 1}}, 8});
  EXPECT_EQ(shift.verdict, Verdict::kNoAlternative);
  EXPECT_FALSE(shift.fastest_alternative.has_value());
  Decision small = Decide(t, DefaultCostTable(), {1024, Ring(8), 8});
  EXPECT_EQ(small.verdict, Verdict::kWithinMargin);
  EXPECT_EQ(small.fastest_alternative, Backend::kNvshmem);
  EXPECT_EQ(small.backend, Backend::kNccl);
  Decision big = Decide(t, DefaultCostTable(), {32 << 20, Ring(8), 8});
  EXPECT_EQ(big.verdict, Verdict::kAlternative);
  EXPECT_EQ(big.backend, Backend::kNvshmem);
  EXPECT_EQ(big.chosen_us,
            *big.backend_us[static_cast<int>(Backend::kNvshmem)]);
  // The text is built from the decision alone.
  EXPECT_EQ(
      DescribeDecision(t, DefaultCostTable(), {32 << 20, Ring(8), 8}, big),
      big.reason);
}

TEST(DecideTest, EveryRefusalKindHasOneLineOfText) {
  for (RefusalKind kind :
       {RefusalKind::kNotOffered, RefusalKind::kExceedsHeap,
        RefusalKind::kEdgeOutsideTeam, RefusalKind::kDeviceWithoutSource,
        RefusalKind::kTeamOutsideTopology, RefusalKind::kNoSignals,
        RefusalKind::kLeavesHost, RefusalKind::kCrossesProcesses}) {
    Refusal refusal;
    refusal.backend = Backend::kPeer;
    refusal.kind = kind;
    refusal.devices = {0, 1, 2};
    const std::string text = RefusalText(refusal);
    EXPECT_EQ(text.rfind("peer refused: ", 0), 0u) << text;
    EXPECT_GT(text.size(), std::string("peer refused: ").size()) << text;
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace nvshmem_selection
}  // namespace gpu
}  // namespace xla
