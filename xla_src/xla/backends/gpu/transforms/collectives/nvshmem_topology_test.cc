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

#include "xla/backends/gpu/transforms/collectives/nvshmem_topology.h"

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

std::vector<std::pair<int, int>> Ring(int n) {
  std::vector<std::pair<int, int>> edges;
  for (int i = 0; i < n; ++i) edges.emplace_back(i, (i + 1) % n);
  return edges;
}

TEST(TopologyTest, ParsesShapesDomainsAndMaps) {
  Topology t = MustParse("2x2x4");
  EXPECT_EQ(t.num_devices(), 16);
  EXPECT_EQ(t.nvlink_domain_size(), 4);
  EXPECT_EQ(t.ToString(), "2x2x4");

  Topology nvl72 = MustParse("1x9x8:nvl72");
  EXPECT_EQ(nvl72.nvlink_domain_size(), 72);
  EXPECT_EQ(nvl72.ToString(), "1x9x8:nvl72");
  EXPECT_EQ(MustParse("1x9x8:nvl=72").ToString(), "1x9x8:nvl72");

  Topology mapped = MustParse("1x2x2:map=0,2,1,3");
  EXPECT_EQ(mapped.MapLogicalDevice(1), 2);
  EXPECT_EQ(mapped.ToString(), "1x2x2:map=0,2,1,3");
}

TEST(TopologyTest, ClassifiesEveryLinkClass) {
  Topology t = MustParse("2x2x4:nvl8");  // Two NVL8 domains of two hosts.
  EXPECT_EQ(t.Classify(3, 3), LinkClass::kSameDevice);
  EXPECT_EQ(t.Classify(0, 3), LinkClass::kIntraHostNvlink);
  EXPECT_EQ(t.Classify(3, 4), LinkClass::kNvlinkDomain);
  EXPECT_EQ(t.Classify(7, 8), LinkClass::kNetwork);
  EXPECT_EQ(MustParse("1x2x4").Classify(3, 4), LinkClass::kNetwork);
}

TEST(TopologyTest, RejectsMalformedSpecsWithClearErrors) {
  EXPECT_NE(ParseError("").find("expected SLICESxHOSTSxGPUS"),
            std::string::npos);
  EXPECT_NE(ParseError("1x2").find("expected SLICESxHOSTSxGPUS"),
            std::string::npos);
  EXPECT_NE(ParseError("1x0x4").find("'0' is not a positive whole number"),
            std::string::npos);
  EXPECT_NE(ParseError("1x-2x4").find("not a positive"), std::string::npos);
  EXPECT_NE(ParseError("1x2x4x").find("expected"), std::string::npos);
  EXPECT_NE(ParseError("1x2x4:nvl6").find("whole number of hosts"),
            std::string::npos);
  EXPECT_NE(ParseError("1x2x4:nvl16").find("divides a slice"),
            std::string::npos);
  EXPECT_NE(ParseError("1x2x4:fast").find("unknown option 'fast'"),
            std::string::npos);
  EXPECT_NE(ParseError("1x1x2:map=0,0").find("twice"), std::string::npos);
  EXPECT_NE(ParseError("1x1x2:map=0,5").find("outside"), std::string::npos);
  EXPECT_NE(ParseError("1x1x2:map=0,x").find("bad device"), std::string::npos);
  EXPECT_NE(ParseError("9999x9999x9999").find("at most"), std::string::npos);
  EXPECT_EQ(ParseError("1x0x4").rfind("topology spec '1x0x4': ", 0), 0u);
}

TEST(TopologyTest, GpusPerProcessOption) {
  EXPECT_EQ(MustParse("1x2x4").gpus_per_process(), 4);
  const Topology t = MustParse("1x2x4:gpus_per_process=2");
  EXPECT_EQ(t.gpus_per_process(), 2);
  EXPECT_EQ(t.ProcessOf(3), 1);
  EXPECT_EQ(t.ToString(), "1x2x4:gpus_per_process=2");
  EXPECT_EQ(MustParse("1x2x4:gpus_per_process=4").ToString(), "1x2x4");
  for (const char* bad :
       {"1x2x4:gpus_per_process=3", "1x2x4:gpus_per_process=0",
        "1x2x4:gpus_per_process=8",
        "1x2x4:gpus_per_process=1:gpus_per_process=1"}) {
    EXPECT_FALSE(Topology::Parse(bad).ok()) << bad;
  }
}

TEST(EdgeIdsTest, ExpandsPartitionsAndReplicas) {
  std::string error;
  Topology t = MustParse("1x2x4");
  auto edges = EdgeIdsToDevices(t, {{0, 1}, {1, 0}}, /*cross_partition=*/true,
                                /*num_partitions=*/2, /*num_replicas=*/4);
  ASSERT_TRUE(edges.ok()) << edges.status();
  // Replica r, partition p -> device r + 4 p.
  ASSERT_EQ(edges->size(), 8u);
  EXPECT_EQ((*edges)[0], std::make_pair(0, 4));
  EXPECT_EQ((*edges)[3], std::make_pair(5, 1));

  auto replicas =
      EdgeIdsToDevices(t, {{0, 3}}, /*cross_partition=*/false, 2, 4);
  ASSERT_TRUE(replicas.ok()) << replicas.status();
  EXPECT_EQ((*replicas)[1], std::make_pair(4, 7));

  error = ErrorOf(EdgeIdsToDevices(t, {{0, 9}}, true, 8, 1));
  EXPECT_FALSE(error.empty());
  EXPECT_NE(error.find("outside 0..7"), std::string::npos) << error;
  error = ErrorOf(EdgeIdsToDevices(t, {{0, 1}}, true, 16, 1));
  EXPECT_FALSE(error.empty());
  EXPECT_NE(error.find("needs 16 devices"), std::string::npos) << error;
}
TEST(TopologyTest, MapLogicalDeviceIsNoneOutsideTheMap) {
  const Topology mapped = MustParse("1x1x4:map=3,2,1,0");
  EXPECT_EQ(mapped.MapLogicalDevice(0), 3);
  EXPECT_FALSE(mapped.MapLogicalDevice(4).has_value());
  EXPECT_FALSE(mapped.MapLogicalDevice(-1).has_value());
  // Without a map every logical device is its own physical one.
  EXPECT_EQ(MustParse("1x1x4").MapLogicalDevice(2), 2);
}

}  // namespace
}  // namespace nvshmem_selection
}  // namespace gpu
}  // namespace xla
