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

#include "xla/backends/gpu/transforms/collectives/permute_backend_selection.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "xla/backends/gpu/transforms/collectives/backend_cost_table.h"
#include "xla/backends/gpu/transforms/collectives/cluster_topology.h"

namespace xla {
namespace gpu {
namespace backend_selection {
namespace {

// Hosts of `gpus` GPUs; `map` places the logical devices (empty: identity).
Topology Hosts(int hosts, int gpus, std::vector<int> map = {}) {
  absl::StatusOr<Topology> topology =
      Topology::Create(1, hosts, gpus, 0, std::move(map));
  EXPECT_TRUE(topology.ok()) << topology.status();
  return topology.ok() ? *topology : *Topology::Create(1, 1, 1, 0, {});
}

std::vector<std::pair<int, int>> Ring(int n) {
  std::vector<std::pair<int, int>> edges;
  for (int i = 0; i < n; ++i) edges.emplace_back(i, (i + 1) % n);
  return edges;
}

CostTable TableWith(const std::string& text) {
  absl::StatusOr<CostTable> table = ParseCostTable(text, "t");
  EXPECT_TRUE(table.ok()) << table.status();
  return table.value_or(DefaultCostTable());
}

// NVSHMEM on NVLink measured at 1 and 4 buffers; the link row extrapolates.
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

double NvshmemNvlinkUs(const CostTable& table, int64_t bytes, int buffers) {
  return EdgeTimeUs(table, Backend::kNvshmem, LinkClass::kIntraHostNvlink,
                    bytes, buffers);
}

TEST(MeasuredCurveTest, ExactAtThePointsAndLogLogBetween) {
  CostTable table = TableWith(kCurveTable);
  EXPECT_EQ(NvshmemNvlinkUs(table, 1024, 1), 20);
  EXPECT_EQ(NvshmemNvlinkUs(table, 67108864, 4), 260);
  EXPECT_NEAR(NvshmemNvlinkUs(table, 32768, 1), std::sqrt(20.0 * 30.0), 1e-9);
}

TEST(MeasuredCurveTest, ExtrapolatesWithTheRowsBandwidth) {
  CostTable table = TableWith(kCurveTable);
  // 400 GB/s = 400000 bytes/us beyond the last point.
  EXPECT_NEAR(NvshmemNvlinkUs(table, 67108864 + 400000000, 1), 1200, 1e-9);
  EXPECT_GE(NvshmemNvlinkUs(table, 0, 1), 0);
}

TEST(MeasuredCurveTest, BlendsBetweenBufferCountsAndAddsPerBufferBeyond) {
  CostTable table = TableWith(kCurveTable);
  EXPECT_NEAR(NvshmemNvlinkUs(table, 1024, 2), 20 + (50 - 20) / 3.0, 1e-9);
  EXPECT_NEAR(NvshmemNvlinkUs(table, 1024, 6), 70, 1e-9);  // + 2 x 10 us.
}

TEST(MeasuredCurveTest, AnEntryWithoutPointsDropsTheInheritedCurve) {
  CostTable parametric = TableWith(
      "links { backend: NVSHMEM link_class: NVLINK latency_us: 5 "
      "bandwidth_gbps: 450 per_buffer_us: 1 }");
  EXPECT_TRUE(
      parametric.curve(Backend::kNvshmem, LinkClass::kIntraHostNvlink).empty());
  EXPECT_NEAR(EdgeTimeUs(parametric, Backend::kNvshmem,
                         LinkClass::kIntraHostNvlink, 450000, 3),
              5 + 2 + 1, 1e-9);
}

TEST(DecideTest, OneHostRingGoesToNvshmem) {
  Decision d = Decide(Hosts(1, 8), DefaultCostTable(), {32 << 20, Ring(8), 8});
  EXPECT_EQ(d.backend, Backend::kNvshmem);
  EXPECT_LT(*d.us[1], d.nccl_us);
}

TEST(DecideTest, SmallMessagesStayOnNccl) {
  Decision d = Decide(Hosts(1, 8), DefaultCostTable(), {1024, Ring(8), 8});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_FALSE(d.refusals[1].has_value());
}

TEST(DecideTest, EmptyPermuteMovesNothing) {
  Decision d = Decide(Hosts(1, 8), DefaultCostTable(), {1024, {}, 8});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_EQ(d.nccl_us, 0);
}

TEST(DecideTest, NvshmemMustBeatTheMargin) {
  for (const auto& [latency, backend] :
       std::vector<std::pair<const char*, Backend>>{
           {"96", Backend::kNccl}, {"94", Backend::kNvshmem}}) {
    absl::StatusOr<CostTable> table = ParseCostTable(
        absl::StrCat("links { backend: NCCL link_class: NVLINK latency_us: 100 "
                     "bandwidth_gbps: 1e9 }\n"
                     "links { backend: NVSHMEM link_class: NVLINK latency_us: ",
                     latency, " bandwidth_gbps: 1e9 }"),
        "t");
    ASSERT_TRUE(table.ok()) << table.status();
    EXPECT_EQ(Decide(Hosts(1, 2), *table, {1024, Ring(2), 2}).backend, backend)
        << latency;
  }
}

TEST(RuntimeRulesTest, OnlyTypesNvshmemPuts) {
  for (const char* type :
       {"f64", "f32", "f16", "bf16", "s32", "s64", "u32", "u64"}) {
    EXPECT_TRUE(NvshmemPutsType(type)) << type;
  }
  for (const char* type :
       {"pred", "s8", "u8", "s16", "u16", "f8e4m3fn", "f8e5m2", "c64", "s4"}) {
    EXPECT_FALSE(NvshmemPutsType(type)) << type;
  }
  PermuteRequest request{32 << 20, Ring(8), 8, 2};
  request.element_types = {"bf16", "f8e4m3fn"};  // One buffer is enough.
  Decision d = Decide(Hosts(1, 8), DefaultCostTable(), request);
  EXPECT_EQ(d.backend, Backend::kNccl);
  ASSERT_TRUE(d.refusals[1].has_value());
  EXPECT_EQ(d.refusals[1]->kind, RefusalKind::kUnsupportedType);
  EXPECT_EQ(d.refusals[1]->type, "f8e4m3fn");
}

TEST(RuntimeRulesTest, MemcpyLocalP2pRefusesNvshmem) {
  PermuteRequest request{32 << 20, Ring(8), 8};
  request.memcpy_local_p2p = true;
  std::optional<Refusal> refusal =
      CheckBackend(Hosts(1, 8), DefaultCostTable(), request, Backend::kNvshmem);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->kind, RefusalKind::kMemcpyLocalP2p);
}

TEST(RuntimeRulesTest, EveryEdgeInsideOneHost) {
  // NVSHMEM_TEAM_SHARED is a host's PEs; it is not known to span an NVLink
  // domain of several hosts, so both refuse.
  // Two hosts of 4 alone, in an NVLink domain of 8, and in two slices.
  for (const auto& [slices, hosts, domain] :
       std::vector<std::tuple<int, int, int>>{
           {1, 2, 0}, {1, 2, 8}, {2, 1, 0}}) {
    absl::StatusOr<Topology> topology =
        Topology::Create(slices, hosts, 4, domain, {});
    ASSERT_TRUE(topology.ok()) << topology.status();
    std::optional<Refusal> refusal = CheckBackend(
        *topology, DefaultCostTable(), {1024, Ring(8), 8}, Backend::kNvshmem);
    ASSERT_TRUE(refusal.has_value()) << slices << "x" << hosts << " " << domain;
    EXPECT_EQ(refusal->kind, RefusalKind::kOutsideSharedMemory);
    EXPECT_EQ(refusal->count, 2);
    EXPECT_EQ(refusal->total, 8);
  }
  // Huge tables cannot change it: the rule is not a cost.
  EXPECT_EQ(
      Decide(Hosts(2, 4), DefaultCostTable(), {int64_t{1} << 29, Ring(8), 8})
          .backend,
      Backend::kNccl);
}

TEST(DeadlockFreeTest, DeviceWithoutSourceRefusesNvshmem) {
  // A non-cyclic shift: device 0 receives nothing.
  std::vector<std::pair<int, int>> shift = Ring(8);
  shift.pop_back();
  Decision d = Decide(Hosts(1, 8), DefaultCostTable(), {32 << 20, shift, 8});
  EXPECT_EQ(d.backend, Backend::kNccl);
  ASSERT_TRUE(d.refusals[1].has_value());
  EXPECT_EQ(d.refusals[1]->kind, RefusalKind::kDeviceWithoutSource);
  EXPECT_EQ(d.refusals[1]->devices, std::vector<int>{0});
}

TEST(DeadlockFreeTest, EveryDeviceOfTheProgramNeedsASource) {
  // A ring over half of one host leaves the other half without a source.
  const Topology t = Hosts(1, 8);
  EXPECT_FALSE(CheckBackend(Hosts(1, 4), DefaultCostTable(),
                            {1 << 20, Ring(4), 4}, Backend::kNvshmem));
  std::optional<Refusal> half = CheckBackend(
      t, DefaultCostTable(), {1 << 20, Ring(4), 8}, Backend::kNvshmem);
  ASSERT_TRUE(half.has_value());
  EXPECT_EQ(half->count, 4);
  // Unknown team: the whole topology.
  EXPECT_TRUE(CheckBackend(t, DefaultCostTable(), {1 << 20, Ring(4), 0},
                           Backend::kNvshmem));
  std::optional<Refusal> big = CheckBackend(
      t, DefaultCostTable(), {1 << 20, Ring(8), 16}, Backend::kNvshmem);
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(big->kind, RefusalKind::kTeamOutsideTopology);
  // Two hosts: a ring on the first leaves the second without a source, which
  // the thunk emitter, blind to hosts, runs on NCCL.
  std::optional<Refusal> other_host =
      CheckBackend(Hosts(2, 4), DefaultCostTable(), {1 << 20, Ring(4), 8},
                   Backend::kNvshmem);
  ASSERT_TRUE(other_host.has_value());
  EXPECT_EQ(other_host->kind, RefusalKind::kDeviceWithoutSource);
  EXPECT_EQ(other_host->devices, (std::vector<int>{4, 5, 6, 7}));
}

// With one process per GPU NVSHMEM_TEAM_SHARED is every GPU of the host: a
// program on part of a host leaves PEs that never enter the barrier.
TEST(DeadlockFreeTest, EveryGpuOfATouchedHostMustRunTheProgram) {
  std::optional<Refusal> idle =
      CheckBackend(Hosts(1, 8), DefaultCostTable(), {1 << 20, Ring(4), 4},
                   Backend::kNvshmem);
  ASSERT_TRUE(idle.has_value());
  EXPECT_EQ(idle->kind, RefusalKind::kHostGpusIdle);
  EXPECT_EQ(idle->count, 0);  // Host 0,
  EXPECT_EQ(idle->total, 8);  // of 8 GPUs.
  EXPECT_EQ(idle->devices, (std::vector<int>{4, 5, 6, 7}));
  // The user's answer: a host of only the program's GPUs.
  EXPECT_FALSE(CheckBackend(Hosts(1, 4), DefaultCostTable(),
                            {1 << 20, Ring(4), 4}, Backend::kNvshmem));
  // Half of each of two hosts, a ring inside each: both hosts have idle GPUs,
  // the first is named.
  const Topology halves = Hosts(2, 8, {0, 1, 2, 3, 8, 9, 10, 11});
  std::vector<std::pair<int, int>> rings;
  for (int base : {0, 8}) {
    for (int i = 0; i < 4; ++i)
      rings.emplace_back(base + i, base + (i + 1) % 4);
  }
  std::optional<Refusal> two = CheckBackend(
      halves, DefaultCostTable(), {1 << 20, rings, 8}, Backend::kNvshmem);
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(two->kind, RefusalKind::kHostGpusIdle);
  EXPECT_EQ(two->devices, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(NvshmemHostGpusIdle(halves, {{8, 9}, {9, 8}}, {0, 1, 2, 3, 8, 9})
                ->devices,
            (std::vector<int>{10, 11, 12, 13, 14, 15}));
  // Not a cost: the largest message is refused too.
  EXPECT_EQ(
      Decide(Hosts(1, 8), DefaultCostTable(), {int64_t{256} << 20, Ring(4), 4})
          .backend,
      Backend::kNccl);
}

// A put goes to its target id as the PE, a process: with a runtime's process
// map, id i must run in process i, and peer memory needs one process.
TEST(PeTest, TheProcessMapNamesThePes) {
  absl::StatusOr<Topology> dealt =
      Topology::Create(1, 1, 4, 0, {}, 0, {0, 2, 1, 3});
  ASSERT_TRUE(dealt.ok()) << dealt.status();
  std::optional<Refusal> refusal = CheckBackend(
      *dealt, DefaultCostTable(), {1 << 20, Ring(4), 4}, Backend::kNvshmem);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->kind, RefusalKind::kPlacedOffItsPe);
  absl::StatusOr<Topology> own =
      Topology::Create(1, 1, 4, 0, {}, 0, {0, 1, 2, 3});
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_FALSE(CheckBackend(*own, DefaultCostTable(), {1 << 20, Ring(4), 4},
                            Backend::kNvshmem));
  // Two processes on one host: peer memory's clique crosses them.
  absl::StatusOr<Topology> two =
      Topology::Create(1, 1, 4, 0, {}, 0, {0, 0, 1, 1});
  ASSERT_TRUE(two.ok()) << two.status();
  std::optional<Refusal> peer = CheckBackend(
      *two, DefaultCostTable(), {64 << 20, Ring(4), 4}, Backend::kPeer);
  ASSERT_TRUE(peer.has_value());
  EXPECT_EQ(peer->kind, RefusalKind::kCrossesProcesses);
  EXPECT_EQ(peer->count, 2);
}

// The emitter puts only into heap buffers no caller sees.
TEST(RuntimeRulesTest, DonatedOrReturnedDestinationRefusesNvshmem) {
  PermuteRequest request = {32 << 20, Ring(8), 8};
  EXPECT_EQ(Decide(Hosts(1, 8), DefaultCostTable(), request).backend,
            Backend::kNvshmem);
  request.destinations = {{/*allocation=*/3, /*parameter=*/-1, false}};
  EXPECT_EQ(Decide(Hosts(1, 8), DefaultCostTable(), request).backend,
            Backend::kNvshmem);
  request.destinations = {{3, -1, false}, {0, 1, true}};
  Decision donated = Decide(Hosts(1, 8), DefaultCostTable(), request);
  EXPECT_EQ(donated.backend, Backend::kNccl);
  ASSERT_TRUE(donated.refusals[1].has_value());
  EXPECT_EQ(donated.refusals[1]->kind, RefusalKind::kDestinationOffHeap);
  EXPECT_EQ(donated.refusals[1]->count, 0);
  EXPECT_EQ(donated.refusals[1]->total, 1);
  request.destinations = {{2, -1, true}};
  std::optional<Refusal> returned =
      CheckBackend(Hosts(1, 8), DefaultCostTable(), request, Backend::kNvshmem);
  ASSERT_TRUE(returned.has_value());
  EXPECT_EQ(returned->kind, RefusalKind::kDestinationOffHeap);
  EXPECT_EQ(returned->total, -1);
  EXPECT_EQ(returned->type, "returned");
}

TEST(PeTest, TheGroupMustBeTheProgram) {
  // 4 partitions x 2 replicas: the ring's ids name PEs 0..3 in both groups.
  PermuteRequest request = {1 << 20, Ring(8), 8};
  EXPECT_FALSE(CheckBackend(Hosts(1, 8), DefaultCostTable(), request,
                            Backend::kNvshmem));
  request.groups = 2;
  std::optional<Refusal> refusal =
      CheckBackend(Hosts(1, 8), DefaultCostTable(), request, Backend::kNvshmem);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->kind, RefusalKind::kSeveralGroups);
  EXPECT_EQ(refusal->count, 2);
}

TEST(PeTest, LogicalDeviceIMustBeDeviceI) {
  const Topology t = Hosts(1, 4, {3, 2, 1, 0});
  EXPECT_EQ(TeamDevices(t, 2), (std::vector<int>{3, 2}));
  // Every GPU of the host runs the program, in reverse order.
  std::optional<Refusal> moved = CheckBackend(
      t, DefaultCostTable(), {1 << 20, {{3, 2}, {2, 1}, {1, 0}, {0, 3}}, 4},
      Backend::kNvshmem);
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(moved->kind, RefusalKind::kPlacedOffItsPe);
  EXPECT_EQ(moved->devices, (std::vector<int>{0, 3}));
  EXPECT_FALSE(NvshmemPeMismatch(Hosts(1, 4, {0, 1, 2, 3}), 4, 1));
  std::optional<Refusal> outside = NvshmemHang({{3, 0}, {2, 3}}, {3, 2});
  ASSERT_TRUE(outside.has_value());
  EXPECT_EQ(outside->kind, RefusalKind::kEdgeOutsideTeam);
}

// Peer memory at the measured sizes: twice NCCL's time up to 4 MiB, about a
// quarter faster from 16 MiB; never across hosts.
TEST(DecideTest, PeerForLargeMessagesInsideOneHost) {
  const CostTable& table = DefaultCostTable();
  const std::vector<Backend> peer = {Backend::kPeer};
  EXPECT_EQ(Decide(Hosts(1, 2), table, {64 << 20, Ring(2), 2}, peer).backend,
            Backend::kPeer);
  EXPECT_EQ(Decide(Hosts(1, 2), table, {1 << 20, Ring(2), 2}, peer).backend,
            Backend::kNccl);
  Decision across = Decide(Hosts(2, 1), table, {64 << 20, Ring(2), 2}, peer);
  EXPECT_EQ(across.backend, Backend::kNccl);
  ASSERT_TRUE(across.refusals[2].has_value());
  EXPECT_EQ(across.refusals[2]->kind, RefusalKind::kLeavesHost);
  EXPECT_EQ(across.refusals[2]->count, 2);
  absl::StatusOr<Topology> processes = Topology::Create(1, 1, 2, 0, {}, 1);
  ASSERT_TRUE(processes.ok()) << processes.status();
  Decision apart = Decide(*processes, table, {64 << 20, Ring(2), 2}, peer);
  EXPECT_EQ(apart.backend, Backend::kNccl);
  EXPECT_EQ(apart.refusals[2]->kind, RefusalKind::kCrossesProcesses);
  // Edges inside one process are not enough: the thunk's clique is every
  // device of the program.
  absl::StatusOr<Topology> pairs = Topology::Create(1, 1, 4, 0, {}, 2);
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  Decision wide = Decide(*pairs, table, {64 << 20, Ring(2), 4}, peer);
  ASSERT_TRUE(wide.refusals[2].has_value());
  EXPECT_EQ(wide.refusals[2]->kind, RefusalKind::kCrossesProcesses);
  EXPECT_EQ(wide.refusals[2]->count, 2);  // Devices 2 and 3.
  EXPECT_EQ(Decide(*pairs, table, {64 << 20, Ring(2), 2}, peer).backend,
            Backend::kPeer);
}

// A permute of each device to itself is a local copy: no NVSHMEM heap.
TEST(DecideTest, LocalCopyStaysOnNccl) {
  const std::vector<std::pair<int, int>> self = {{0, 0}, {1, 1}};
  Decision d = Decide(Hosts(1, 2), DefaultCostTable(), {1024, self, 2});
  EXPECT_EQ(d.backend, Backend::kNccl);
  ASSERT_TRUE(d.refusals[1].has_value());
  EXPECT_EQ(d.refusals[1]->kind, RefusalKind::kLocalCopy);
}

// Over several alternatives the fastest that beats NCCL wins; ties go to the
// first.
TEST(DecideTest, FastestAlternativeWinsTiesToTheFirst) {
  const CostTable& table = DefaultCostTable();
  const PermuteRequest request = {64 << 20, Ring(2), 2};
  Decision d =
      Decide(Hosts(1, 2), table, request, {Backend::kNvshmem, Backend::kPeer});
  ASSERT_TRUE(d.us[1].has_value() && d.us[2].has_value());
  EXPECT_EQ(d.backend,
            *d.us[1] < *d.us[2] ? Backend::kNvshmem : Backend::kPeer);
  CostTable tied = table;
  tied.curves[3] = tied.curves[2];
  tied.links[3] = tied.links[2];
  EXPECT_EQ(
      Decide(Hosts(1, 2), tied, request, {Backend::kSymmetric, Backend::kPeer})
          .backend,
      Backend::kSymmetric);
}

// An estimated row (no points) is never cheaper than a measured faster class
// at the same size: 16 MiB between hosts of one NVLink domain was estimated at
// 43 us, half the 88 us measured inside a host.
TEST(EdgeTimeTest, EstimatesAreNeverBelowAMeasuredFasterClass) {
  const CostTable& table = DefaultCostTable();
  ASSERT_FALSE(
      table.curve(Backend::kNccl, LinkClass::kIntraHostNvlink).empty());
  ASSERT_TRUE(table.curve(Backend::kNccl, LinkClass::kNvlinkDomain).empty());
  for (int64_t bytes : {int64_t{1} << 10, int64_t{1} << 20, int64_t{16} << 20,
                        int64_t{1} << 30}) {
    for (int buffers : {1, 2, 4}) {
      const double nvlink = EdgeTimeUs(
          table, Backend::kNccl, LinkClass::kIntraHostNvlink, bytes, buffers);
      const double domain = EdgeTimeUs(
          table, Backend::kNccl, LinkClass::kNvlinkDomain, bytes, buffers);
      const double network = EdgeTimeUs(table, Backend::kNccl,
                                        LinkClass::kNetwork, bytes, buffers);
      EXPECT_GE(domain, nvlink) << bytes << " bytes, " << buffers;
      EXPECT_GE(network, domain) << bytes << " bytes, " << buffers;
    }
  }
  // A measured row keeps its measurement, even below a faster class's.
  CostTable measured = table;
  measured.curves[static_cast<int>(Backend::kNccl)][static_cast<int>(
      LinkClass::kNvlinkDomain)] = {{1, int64_t{16} << 20, 40.0}};
  EXPECT_DOUBLE_EQ(EdgeTimeUs(measured, Backend::kNccl,
                              LinkClass::kNvlinkDomain, int64_t{16} << 20),
                   40.0);
}

TEST(DecideTest, HeapLimitRefusesNvshmem) {
  CostTable table = DefaultCostTable();
  table.nvshmem_max_bytes = 1 << 20;
  Decision d = Decide(Hosts(1, 8), table, {32 << 20, Ring(8), 8});
  EXPECT_EQ(d.backend, Backend::kNccl);
  ASSERT_TRUE(d.refusals[1].has_value());
  EXPECT_EQ(d.refusals[1]->kind, RefusalKind::kExceedsHeap);
  // The heap holds operand and result: 32 MiB each need 64 MiB.
  table.nvshmem_max_bytes = (64 << 20) - 1;
  EXPECT_TRUE(Decide(Hosts(1, 8), table, {32 << 20, Ring(8), 8}).refusals[1]);
  table.nvshmem_max_bytes = 64 << 20;
  EXPECT_EQ(Decide(Hosts(1, 8), table, {32 << 20, Ring(8), 8}).backend,
            Backend::kNvshmem);
}

}  // namespace
}  // namespace backend_selection
}  // namespace gpu
}  // namespace xla
