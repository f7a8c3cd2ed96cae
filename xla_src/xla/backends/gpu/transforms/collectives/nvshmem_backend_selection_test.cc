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

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
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

std::vector<std::pair<int, int>> Ring(int n) {
  std::vector<std::pair<int, int>> edges;
  for (int i = 0; i < n; ++i) edges.emplace_back(i, (i + 1) % n);
  return edges;
}

TEST(DecideTest, OneHostRingGoesToNvshmem) {
  Decision d =
      Decide(MustParse("1x1x8"), DefaultCostTable(), {32 << 20, Ring(8), 8});
  EXPECT_EQ(d.backend, Backend::kNvshmem);
  EXPECT_EQ(d.choice.verdict, Verdict::kAlternative);
  EXPECT_LT(*d.choice.candidate_us[0], d.choice.nccl_us);
}

TEST(DecideTest, SmallMessagesStayOnNccl) {
  Decision d =
      Decide(MustParse("1x1x8"), DefaultCostTable(), {1024, Ring(8), 8});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_EQ(d.choice.verdict, Verdict::kWithinMargin);
}

TEST(DecideTest, EmptyPermuteMovesNothing) {
  Decision d = Decide(MustParse("1x1x8"), DefaultCostTable(), {1024, {}, 8});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_EQ(d.choice.verdict, Verdict::kNoEdges);
}

TEST(DeadlockFreeTest, DeviceWithoutSourceRefusesNvshmem) {
  // A non-cyclic shift: device 0 receives nothing.
  std::vector<std::pair<int, int>> shift = Ring(8);
  shift.pop_back();
  Decision d =
      Decide(MustParse("1x1x8"), DefaultCostTable(), {32 << 20, shift, 8});
  EXPECT_EQ(d.backend, Backend::kNccl);
  EXPECT_EQ(d.choice.verdict, Verdict::kNoAlternative);
  ASSERT_TRUE(d.nvshmem_refusal.has_value());
  EXPECT_EQ(d.nvshmem_refusal->kind, RefusalKind::kDeviceWithoutSource);
  EXPECT_EQ(d.nvshmem_refusal->devices, std::vector<int>{0});
}

TEST(DeadlockFreeTest, TheTeamIsTheWholeProgram) {
  // A ring over half the program leaves the other half without a source.
  const Topology t = MustParse("1x1x8");
  EXPECT_FALSE(CheckNvshmem(t, DefaultCostTable(), {1 << 20, Ring(4), 4}));
  std::optional<Refusal> half =
      CheckNvshmem(t, DefaultCostTable(), {1 << 20, Ring(4), 8});
  ASSERT_TRUE(half.has_value());
  EXPECT_EQ(half->count, 4);
  // Unknown team: the whole topology.
  EXPECT_TRUE(CheckNvshmem(t, DefaultCostTable(), {1 << 20, Ring(4), 0}));
  std::optional<Refusal> big =
      CheckNvshmem(t, DefaultCostTable(), {1 << 20, Ring(8), 16});
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(big->kind, RefusalKind::kTeamOutsideTopology);
}

TEST(DeadlockFreeTest, TeamFollowsTheDeviceMap) {
  const Topology t = MustParse("1x1x4:map=3,2,1,0");
  EXPECT_EQ(TeamDevices(t, 2), (std::vector<int>{3, 2}));
  std::optional<Refusal> outside = NvshmemHang({{3, 0}, {2, 3}}, {3, 2});
  ASSERT_TRUE(outside.has_value());
  EXPECT_EQ(outside->kind, RefusalKind::kEdgeOutsideTeam);
}

TEST(DecideTest, HeapLimitRefusesNvshmem) {
  CostTable table = DefaultCostTable();
  table.nvshmem_max_bytes = 1 << 20;
  Decision d = Decide(MustParse("1x1x8"), table, {32 << 20, Ring(8), 8});
  EXPECT_EQ(d.backend, Backend::kNccl);
  ASSERT_TRUE(d.nvshmem_refusal.has_value());
  EXPECT_EQ(d.nvshmem_refusal->kind, RefusalKind::kExceedsHeap);
}

TEST(ChooseTest, FastestAllowedCandidateMustBeatTheMargin) {
  const Topology t = MustParse("1x1x2");
  const PermuteRequest request{1024, Ring(2), 2};
  auto flat = [](double us) { return [us](LinkClass) { return us; }; };
  Choice choice =
      Choose(t, request, flat(100),
             {{flat(10), false}, {flat(60), true}, {flat(50), true}}, 0.05);
  EXPECT_EQ(choice.chosen, 2u);
  EXPECT_FALSE(choice.candidate_us[0].has_value());
  EXPECT_EQ(choice.nccl_us, 100);
  Choice close = Choose(t, request, flat(100), {{flat(96), true}}, 0.05);
  EXPECT_EQ(close.verdict, Verdict::kWithinMargin);
  EXPECT_FALSE(close.chosen.has_value());
  Choice zero = Choose(t, request, flat(0), {{flat(0), true}}, 0.05);
  EXPECT_EQ(zero.verdict, Verdict::kZeroCost);
}

}  // namespace
}  // namespace nvshmem_selection
}  // namespace gpu
}  // namespace xla
