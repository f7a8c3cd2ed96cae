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

#include "xla/backends/gpu/transforms/collectives/cluster_topology.h"

#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace xla {
namespace gpu {
namespace backend_selection {
namespace {

Topology MustCreate(int slices, int hosts, int gpus, int nvlink_domain = 0,
                    std::vector<int> map = {}) {
  absl::StatusOr<Topology> topology =
      Topology::Create(slices, hosts, gpus, nvlink_domain, std::move(map));
  EXPECT_TRUE(topology.ok()) << topology.status();
  return topology.ok() ? *topology : *Topology::Create(1, 1, 1, 0, {});
}

TEST(TopologyTest, CreatesShapesDomainsAndMaps) {
  Topology t = MustCreate(2, 2, 4);
  EXPECT_EQ(t.num_devices(), 16);
  EXPECT_EQ(t.nvlink_domain_size(), 4);
  EXPECT_EQ(MustCreate(1, 9, 8, 72).nvlink_domain_size(), 72);
  Topology mapped = MustCreate(1, 2, 2, 0, {0, 2, 1, 3});
  EXPECT_EQ(mapped.MapLogicalDevice(1), 2);
  EXPECT_FALSE(mapped.MapLogicalDevice(4).has_value());
}

TEST(TopologyTest, ProcessesDivideAHost) {
  EXPECT_EQ(MustCreate(1, 2, 4).gpus_per_process(), 4);
  absl::StatusOr<Topology> pairs = Topology::Create(1, 2, 4, 0, {}, 2);
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  EXPECT_EQ(pairs->ProcessOf(3), 1);
  EXPECT_EQ(pairs->ProcessOf(4), 2);
  EXPECT_FALSE(Topology::Create(1, 2, 4, 0, {}, 3).ok());
}

TEST(TopologyTest, ClassifiesEveryLinkClass) {
  Topology t = MustCreate(2, 2, 4, 8);  // Two NVL8 domains of two hosts.
  EXPECT_EQ(t.Classify(3, 3), LinkClass::kSameDevice);
  EXPECT_EQ(t.Classify(0, 3), LinkClass::kIntraHostNvlink);
  EXPECT_EQ(t.Classify(3, 4), LinkClass::kNvlinkDomain);
  EXPECT_EQ(t.Classify(7, 8), LinkClass::kNetwork);
}

TEST(TopologyTest, RejectsInconsistentShapes) {
  struct Shape {
    int slices, hosts, gpus, nvlink_domain;
    std::vector<int> map;
  };
  for (const Shape& bad : std::vector<Shape>{{1, 0, 4, 0, {}},
                                             {1, 2, 4, 6, {}},
                                             {1, 2, 4, 16, {}},
                                             {1, 1, 2, 0, {0, 0}},
                                             {1, 1, 2, 0, {0, 5}},
                                             {1, 2000000, 8, 0, {}}}) {
    EXPECT_EQ(Topology::Create(bad.slices, bad.hosts, bad.gpus,
                               bad.nvlink_domain, bad.map)
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << bad.hosts << "x" << bad.gpus;
  }
}

// A runtime's own facts: the process of each device (jax's process_index).
TEST(TopologyTest, TakesEachDevicesProcess) {
  absl::StatusOr<Topology> t =
      Topology::Create(1, 2, 4, 0, {}, 0, {0, 0, 0, 0, 1, 1, 1, 1});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ProcessOf(3), 0);
  EXPECT_EQ(t->ProcessOf(4), 1);
  EXPECT_EQ(t->gpus_per_process(), 4);  // The most one process drives.
  // Processes dealt round-robin over the hosts.
  absl::StatusOr<Topology> dealt =
      Topology::Create(1, 2, 2, 0, {}, 0, {0, 2, 1, 3});
  ASSERT_TRUE(dealt.ok()) << dealt.status();
  EXPECT_EQ(dealt->ProcessOf(1), 2);
  EXPECT_EQ(dealt->gpus_per_process(), 1);
  for (const std::vector<int>& bad :
       std::vector<std::vector<int>>{{0, 0, 0}, {0, 0, 0, 9}, {0, 0, -1, 1}}) {
    EXPECT_FALSE(Topology::Create(1, 1, 4, 0, {}, 0, bad).ok());
  }
  EXPECT_FALSE(Topology::Create(1, 1, 2, 0, {}, 1, {0, 1}).ok());  // Both.
}

TEST(EdgeIdsTest, ExpandsPartitionsAndReplicas) {
  Topology t = MustCreate(1, 2, 4);
  auto edges = EdgeIdsToDevices(t, {{0, 1}, {1, 0}}, /*cross_partition=*/true,
                                /*num_partitions=*/2, /*num_replicas=*/4);
  ASSERT_TRUE(edges.ok()) << edges.status();
  ASSERT_EQ(edges->size(), 8u);  // Replica r, partition p -> r + 4 p.
  EXPECT_EQ((*edges)[0], std::make_pair(0, 4));
  EXPECT_EQ((*edges)[3], std::make_pair(5, 1));
  auto replicas = EdgeIdsToDevices(t, {{0, 3}}, false, 2, 4);
  ASSERT_TRUE(replicas.ok()) << replicas.status();
  EXPECT_EQ((*replicas)[1], std::make_pair(4, 7));
  EXPECT_FALSE(EdgeIdsToDevices(t, {{0, 9}}, true, 8, 1).ok());
  EXPECT_FALSE(EdgeIdsToDevices(t, {{0, 1}}, true, 16, 1).ok());
}

TEST(TopologyTest, CountsEdgesLeavingTheirHost) {
  absl::StatusOr<Topology> t = Topology::Create(1, 2, 4, 0, {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(EdgesLeavingHost(*t, {{0, 3}, {3, 4}, {7, 0}, {5, 5}}), 2);
}

}  // namespace
}  // namespace backend_selection
}  // namespace gpu
}  // namespace xla
