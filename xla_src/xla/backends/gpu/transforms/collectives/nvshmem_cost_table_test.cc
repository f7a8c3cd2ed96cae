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
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_cost_table.pb.h"
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

TEST(CostTableTest, ParsesOverridesAndKeepsDefaults) {
  CostTable table = TableWith(R"table(
    # A comment.
    links { backend: NCCL link_class: NETWORK latency_us: 12.5 }
    margin: 0.1
    sm_interference { backend: NCCL fraction: 0.2 }
    nvshmem_max_bytes: 2147483648
  )table");
  const LinkCost& network = table.link(Backend::kNccl, LinkClass::kNetwork);
  EXPECT_DOUBLE_EQ(network.latency_us, 12.5);
  EXPECT_DOUBLE_EQ(network.bandwidth_gbps,
                   DefaultCostTable()
                       .link(Backend::kNccl, LinkClass::kNetwork)
                       .bandwidth_gbps);
  EXPECT_DOUBLE_EQ(table.margin, 0.1);
  EXPECT_DOUBLE_EQ(table.sm_interference[0], 0.2);
  EXPECT_EQ(table.nvshmem_max_bytes, int64_t{2147483648});
  EXPECT_FALSE(
      table.curve(Backend::kNvshmem, LinkClass::kIntraHostNvlink).empty());
}

TEST(CostTableTest, RejectsBadEntriesNamingTheirLine) {
  struct Case {
    const char* text;
    int line;
  };
  for (const Case& bad : {
           Case{"links { backend: NCCL link_class: WARP }", 1},
           Case{"\nlinks { backend: GLOO link_class: NVLINK }", 2},
           Case{"links { link_class: NVLINK }", 1},
           Case{"links { backend: NCCL }", 1},
           Case{"margin: 1.5", 1},
           Case{"margin: nan", 1},
           Case{"bogus: 1", 1},
           Case{"links { backend: NCCL link_class: NVLINK bandwidth_gbps: 0 }",
                1},
           Case{"links {\n backend: NCCL\n link_class: NVLINK\n"
                " points { buffers: 0 bytes: 1024 us: 5 }\n}",
                4},
           Case{"links { backend: NCCL link_class: NVLINK\n"
                " points { buffers: 1 bytes: 1024 us: 0 } }",
                2},
           Case{"links { backend: NCCL link_class: NVLINK\n"
                " points { buffers: 1 bytes: 1024 us: 5 }\n"
                " points { buffers: 1 bytes: 1024 us: 6 } }",
                3},
           Case{"links { backend: NCCL link_class: NVLINK }\n\n"
                "links { backend: NCCL link_class: NVLINK }",
                3},
           Case{"nvshmem_transport: UDP", 1},
           Case{"nvshmem_transport: 7", 1},
           Case{"link nccl nvlink 1 2", 1},
           // A bad number names its own line inside the entry.
           Case{"links {\n  backend: NCCL\n  link_class: NVLINK\n"
                "  latency_us: -1\n}",
                4},
           Case{"sm_interference {\n  backend: NCCL\n  fraction: -0.5\n}", 3},
           // Bad values are reported once read, at the next token: here on
           // the next line.
           Case{"links { backend: NCCL link_class: WARP\n}", 1},
           Case{"\nnvshmem_transport: ROCE\n\n", 2},
           Case{"margin: 0.1\nnvshmem_max_bytes: 99999999999999999999\n", 2},
       }) {
    absl::StatusOr<CostTable> table = ParseCostTable(bad.text, "t");
    ASSERT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument)
        << bad.text;
    EXPECT_TRUE(absl::StartsWith(table.status().message(),
                                 absl::StrCat("t:", bad.line, ": ")))
        << bad.text << " -> " << table.status();
  }
  // The parser quotes the bad token; a control character in it is escaped.
  absl::StatusOr<CostTable> control = ParseCostTable("links \x7f", "t");
  EXPECT_EQ(control.status().message(),
            "t:1: Expected \"{\", found \"\\x7f\".");
}

TEST(CostTableTest, AppliedProtoChangesNothingOnError) {
  NvshmemCostTableProto proto;
  proto.set_margin(0.2);
  NvshmemCostTableProto::Link* link = proto.add_links();
  link->set_backend(NvshmemCostTableProto::NCCL);
  link->set_link_class(NvshmemCostTableProto::NVLINK);
  link->add_points()->set_buffers(1);  // No bytes.
  CostTable table = DefaultCostTable();
  CostTableEntry bad;
  EXPECT_FALSE(ApplyCostTableProto(proto, &table, &bad).ok());
  EXPECT_EQ(bad.field_number, NvshmemCostTableProto::kLinksFieldNumber);
  EXPECT_EQ(bad.index, 0);
  EXPECT_EQ(bad.point, 0);
  EXPECT_DOUBLE_EQ(table.margin, DefaultCostTable().margin);
}

TEST(CostTableTest, TransportPicksTheNetworkRow) {
  CostTable ibgda = TableWith("nvshmem_transport: IBGDA");
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

}  // namespace
}  // namespace nvshmem_selection
}  // namespace gpu
}  // namespace xla
