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

#include <cmath>
#include <cstdint>
#include <string>

#include <gtest/gtest.h>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_topology.h"

namespace xla {
namespace gpu {
namespace nvshmem_selection {
namespace {

CostTable TableWith(const std::string& text) {
  absl::StatusOr<CostTable> table = ParseCostTable(text, "t");
  EXPECT_TRUE(table.ok()) << table.status();
  return table.value_or(DefaultCostTable());
}

// NVSHMEM on NVLink measured at 1 and 4 buffers; the link row extrapolates.
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

TEST(CostTableTest, ParsesOverridesAndKeepsDefaults) {
  CostTable table = TableWith(
      "# comment\nlink nccl network 12.5 45\nmargin 0.1\n"
      "sm_interference nccl 0.2\nnvshmem_max_bytes 2147483648\n");
  EXPECT_DOUBLE_EQ(table.link(Backend::kNccl, LinkClass::kNetwork).latency_us,
                   12.5);
  EXPECT_DOUBLE_EQ(table.margin, 0.1);
  EXPECT_DOUBLE_EQ(table.sm_interference[0], 0.2);
  EXPECT_EQ(table.nvshmem_max_bytes, int64_t{2147483648});
  EXPECT_FALSE(
      table.curve(Backend::kNvshmem, LinkClass::kIntraHostNvlink).empty());
}

TEST(CostTableTest, RejectsBadEntries) {
  for (const char* bad :
       {"link nccl warp 1 2\n", "link gloo nvlink 1 2\n", "margin 1.5\n",
        "margin nan\n", "bogus 1\n", "point nccl nvlink 1 1024\n",
        "point nccl nvlink 0 1024 5\n", "point nccl nvlink 1 1024 0\n",
        "point nccl nvlink 1 1024 5\npoint nccl nvlink 1 1024 6\n",
        "nvshmem_transport udp\n"}) {
    EXPECT_EQ(ParseCostTable(bad, "t").status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(CostTableTest, TransportPicksTheNetworkRow) {
  CostTable ibgda = TableWith("nvshmem_transport ibgda\n");
  EXPECT_LT(ibgda.link(Backend::kNvshmem, LinkClass::kNetwork).latency_us,
            DefaultCostTable()
                .link(Backend::kNvshmem, LinkClass::kNetwork)
                .latency_us);
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

TEST(MeasuredCurveTest, ALinkLineAloneDropsTheInheritedCurve) {
  CostTable parametric = TableWith("link nvshmem nvlink 5 450 1\n");
  EXPECT_TRUE(
      parametric.curve(Backend::kNvshmem, LinkClass::kIntraHostNvlink).empty());
  EXPECT_NEAR(EdgeTimeUs(parametric, Backend::kNvshmem,
                         LinkClass::kIntraHostNvlink, 450000, 3),
              5 + 2 + 1, 1e-9);
}

}  // namespace
}  // namespace nvshmem_selection
}  // namespace gpu
}  // namespace xla
