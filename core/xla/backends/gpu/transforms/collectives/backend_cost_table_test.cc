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

#include "xla/backends/gpu/transforms/collectives/backend_cost_table.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "xla/backends/gpu/transforms/collectives/backend_cost_table.pb.h"
#include "xla/backends/gpu/transforms/collectives/cluster_topology.h"

namespace xla {
namespace gpu {
namespace backend_selection {
namespace {

CostTable TableWith(const std::string& text) {
  absl::StatusOr<CostTable> table = ParseCostTable(text, "t");
  EXPECT_TRUE(table.ok()) << table.status();
  return table.value_or(DefaultCostTable());
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

TEST(CostTableTest, RejectsBadEntriesNamingThem) {
  struct Case {
    const char* text;
    const char* message;  // The start of the message.
  };
  for (const Case& bad : {
           Case{"\nlinks { backend: GLOO link_class: NVLINK }", "t:2: "},
           Case{"bogus: 1", "t:1: "},
           Case{"links { link_class: NVLINK }", "t: links #1: "},
           Case{"links { backend: NCCL }", "t: links #1: "},
           Case{"margin: 1.5", "t: margin: "},
           Case{"margin: nan", "t: margin: "},
           Case{"links { backend: NCCL link_class: NVLINK bandwidth_gbps: 0 }",
                "t: links #1: bandwidth_gbps must be"},
           Case{"links { backend: NCCL link_class: NVLINK\n"
                " points { buffers: 0 bytes: 1024 us: 5 } }",
                "t: links #1: buffers must be"},
           Case{"links { backend: NCCL link_class: NVLINK\n"
                " points { buffers: 1 bytes: 1024 us: 0 } }",
                "t: links #1: us must be"},
           Case{"links { backend: NCCL link_class: NVLINK\n"
                " points { buffers: 1 bytes: 1024 us: 5 }\n"
                " points { buffers: 1 bytes: 1024 us: 6 } }",
                "t: links #1: a second point"},
           Case{"links { backend: NCCL link_class: NVLINK }\n"
                "links { backend: NCCL link_class: NVLINK }",
                "t: links #2: a second entry"},
           Case{"links { backend: NCCL link_class: NETWORK }\n"
                "links { backend: NVSHMEM link_class: NETWORK }",
                "t: links #2: NVSHMEM has no network row"},
           Case{"sm_interference { backend: NCCL fraction: -0.5 }",
                "t: sm_interference #1: fraction must be"},
           Case{"nvshmem_max_bytes: -1", "t: nvshmem_max_bytes: "},
       }) {
    absl::StatusOr<CostTable> table = ParseCostTable(bad.text, "t");
    ASSERT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument)
        << bad.text;
    EXPECT_TRUE(absl::StartsWith(table.status().message(), bad.message))
        << bad.text << " -> " << table.status();
  }
}

TEST(CostTableTest, DefaultHasTheMeasuredCurvesAndNoNvshmemNetworkRow) {
  const CostTable& table = DefaultCostTable();
  for (Backend backend : {Backend::kNccl, Backend::kNvshmem, Backend::kPeer}) {
    const std::vector<CurvePoint>& curve =
        table.curve(backend, LinkClass::kIntraHostNvlink);
    ASSERT_EQ(curve.size(), 30);
    EXPECT_EQ(curve.back().bytes, int64_t{256} << 20);
  }
  EXPECT_DOUBLE_EQ(
      table.curve(Backend::kNccl, LinkClass::kIntraHostNvlink)[5].us, 12.7499);
  // NVSHMEM's measured 18.4228 us and 16.5555 us, plus one more buffer (a put
  // and the barrier the thunk now enters before its puts).
  const LinkCost& nvshmem =
      table.link(Backend::kNvshmem, LinkClass::kIntraHostNvlink);
  EXPECT_DOUBLE_EQ(nvshmem.per_buffer_us, 16.0292);
  EXPECT_DOUBLE_EQ(
      table.curve(Backend::kNvshmem, LinkClass::kIntraHostNvlink)[5].us,
      18.4228 + 16.0292);
  EXPECT_DOUBLE_EQ(nvshmem.latency_us, 16.5555 + 16.0292);
  EXPECT_TRUE(table.curve(Backend::kNvshmem, LinkClass::kNetwork).empty());
  // Symmetric memory was never measured: NCCL's numbers.
  EXPECT_EQ(table.curve(Backend::kSymmetric, LinkClass::kIntraHostNvlink)[5].us,
            table.curve(Backend::kNccl, LinkClass::kIntraHostNvlink)[5].us);
  EXPECT_EQ(table.link(Backend::kPeer, LinkClass::kNetwork).latency_us,
            table.link(Backend::kNccl, LinkClass::kNetwork).latency_us);
}

TEST(CostTableTest, ReadsPeerAndSymmetricEntries) {
  absl::StatusOr<CostTable> table = ParseCostTable(
      "links { backend: SYMMETRIC link_class: NETWORK latency_us: 3 }", "t");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->link(Backend::kSymmetric, LinkClass::kNetwork).latency_us,
            3);
  EXPECT_STREQ(BackendName(Backend::kPeer), "peer");
}

TEST(CostTableTest, AppliedProtoChangesNothingOnError) {
  BackendCostTableProto proto;
  proto.set_margin(0.2);
  BackendCostTableProto::Link* link = proto.add_links();
  link->set_backend(BackendCostTableProto::NCCL);
  link->set_link_class(BackendCostTableProto::NVLINK);
  link->add_points()->set_buffers(1);  // No bytes.
  CostTable table = DefaultCostTable();
  CostTableEntry bad;
  EXPECT_FALSE(ApplyCostTableProto(proto, &table, &bad).ok());
  EXPECT_EQ(bad.field_number, BackendCostTableProto::kLinksFieldNumber);
  EXPECT_EQ(bad.index, 0);
  EXPECT_EQ(bad.point, 0);
  EXPECT_DOUBLE_EQ(table.margin, DefaultCostTable().margin);
}

}  // namespace
}  // namespace backend_selection
}  // namespace gpu
}  // namespace xla
