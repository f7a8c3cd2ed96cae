/* Copyright 2026 The NVSHMEM ring-attention pass authors.

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

#include "xla/backends/gpu/transforms/collectives/nvshmem_collective_permute_rewriter.h"

#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <utility>

#include <gtest/gtest.h>
#include "absl/status/statusor.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/parser/hlo_parser.h"
#include "xla/backends/gpu/transforms/collectives/collective_backend_assigner.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_backend_selection.h"
#include "xla/service/hlo_verifier.h"
#include "xla/stream_executor/cuda/cuda_compute_capability.h"

namespace xla {
namespace gpu {
namespace {

// Real HLO: small JAX programs compiled by XLA for H200 topologies, taken
// where XLA's async-collective-creator receives them (see the generator named
// in the file).
#include "xla/backends/gpu/transforms/collectives/nvshmem_collective_permute_rewriter_test_modules.inc"

namespace sel = nvshmem_selection;

sel::Topology Topo(const std::string& spec) {
  std::string error;
  std::optional<sel::Topology> topology = sel::Topology::Parse(spec, &error);
  if (!topology) ADD_FAILURE() << error;
  return *topology;
}

sel::CostTable Table(const std::string& text) {
  std::string error;
  std::optional<sel::CostTable> table = sel::ParseCostTable(text, "test", &error);
  if (!table) ADD_FAILURE() << error;
  return *table;
}

// A fabric where NCCL's SM cost on NVLink, not the network, bounds the ring,
// so splitting the ring pays even for small messages.
constexpr char kSplitFriendlyCosts[] =
    "link nccl network 1 900\n"
    "sm_interference nccl 4\n"
    "split_overhead_us 0\n";

class NvshmemCollectivePermuteRewriterTest : public ::testing::Test {
 protected:
  std::unique_ptr<HloModule> Parse(const char* text) {
    absl::StatusOr<std::unique_ptr<HloModule>> module =
        ParseAndReturnUnverifiedModule(text);
    EXPECT_TRUE(module.ok()) << module.status();
    EXPECT_TRUE(Verify(module->get())) << "input must verify";
    return *std::move(module);
  }

  static bool Verify(HloModule* module) {
    HloVerifier verifier(/*layout_sensitive=*/false,
                         /*allow_mixed_precision=*/true);
    absl::StatusOr<bool> result = verifier.Run(module);
    if (!result.ok()) ADD_FAILURE() << result.status();
    return result.ok();
  }

  // Runs the pass; returns the printed module, checking the verifier.
  std::string Run(HloModule* module, const std::string& topology,
                  const sel::CostTable& table = sel::DefaultCostTable(),
                  NvshmemCollectivePermuteRewriter::Mode mode =
                      NvshmemCollectivePermuteRewriter::Mode::kRewrite,
                  bool expect_changed = true) {
    NvshmemCollectivePermuteRewriter pass({Topo(topology), table, mode});
    absl::StatusOr<bool> changed = pass.Run(module);
    EXPECT_TRUE(changed.ok()) << changed.status();
    if (changed.ok()) EXPECT_EQ(*changed, expect_changed);
    EXPECT_TRUE(Verify(module)) << "output must verify";
    last_records_ = pass.records();
    return module->ToString();
  }

  // Upstream XLA's CollectiveBackendAssigner on a copy, NVSHMEM enabled, with
  // one process per host; the backend it gives the module's permute.
  static std::string UpstreamBackend(const HloModule& module, int gpus_per_host,
                                     int slice_size) {
    std::unique_ptr<HloModule> copy = module.Clone("");
    copy->mutable_config()
        .mutable_debug_options()
        .set_xla_gpu_experimental_enable_nvshmem(true);
    CollectiveBackendAssigner assigner(stream_executor::CudaComputeCapability(9, 0),
                                       gpus_per_host, slice_size);
    absl::StatusOr<bool> ran = assigner.Run(copy.get());
    EXPECT_TRUE(ran.ok()) << ran.status();
    std::string text = copy->ToString();
    return text.find("\"backend\":\"NVSHMEM\"") != std::string::npos ? "NVSHMEM"
                                                                     : "DEFAULT";
  }

  static int Count(const std::string& text, const std::string& pattern) {
    std::regex re(pattern);
    return std::distance(std::sregex_iterator(text.begin(), text.end(), re),
                         std::sregex_iterator());
  }

  std::vector<NvshmemCollectivePermuteRewriter::OpRecord> last_records_;
};

TEST_F(NvshmemCollectivePermuteRewriterTest, OneHostRingBecomesNvshmemStartDone) {
  auto module = Parse(kKvStepModule);
  std::string out = Run(module.get(), "1x1x8");
  EXPECT_EQ(Count(out, R"(collective-permute\()"), 0) << out;
  EXPECT_EQ(Count(out, R"(collective-permute-start\(%param\.2, %param\.3\))"), 1)
      << out;
  EXPECT_EQ(Count(out, R"("backend":"NVSHMEM")"), 1) << out;
  EXPECT_EQ(Count(out, R"(_nvshmem_plan="nvshmem")"), 1) << out;
  // Combined K/V: the start carries both operands and both results.
  EXPECT_EQ(Count(out, R"(\(\(bf16\[64,2,64\]\{2,1,0\}, bf16\[64,2,64\]\{2,1,0\}\), )"
                       R"(\(bf16\[64,2,64\]\{2,1,0\}, bf16\[64,2,64\]\{2,1,0\}\)\) )"
                       R"(collective-permute-start)"),
            1)
      << out;
  // Users read the done now.
  EXPECT_EQ(Count(out, R"(get-tuple-element\(%collective-permute-done\))"), 2)
      << out;
  ASSERT_EQ(last_records_.size(), 1u);
  EXPECT_EQ(last_records_[0].bytes, 2 * 64 * 2 * 64 * 2);
  EXPECT_EQ(UpstreamBackend(*Parse(kKvStepModule), 8, 8), "NVSHMEM")
      << "upstream agrees: all pairs are intra-node";
}

TEST_F(NvshmemCollectivePermuteRewriterTest, TwoHostRingInWhileBodyStaysNccl) {
  // Default costs: the two network edges bound NCCL and a split alike, and
  // the split pays a second launch, so NCCL (DEFAULT) it is.
  auto module = Parse(kKvLoopModule);
  std::string out = Run(module.get(), "1x2x4");
  EXPECT_EQ(Count(out, R"("backend":"DEFAULT")"), 1) << out;
  EXPECT_EQ(Count(out, R"(_nvshmem_plan="nccl")"), 1) << out;
  EXPECT_NE(out.find("2 of 8 edges cross the network"), std::string::npos);
  // The permute sits in the while body; so do its start and done.
  std::smatch body;
  ASSERT_TRUE(std::regex_search(out, body,
                                std::regex(R"(\n%region_0[^\n]*\{\n(?:  [^\n]*\n)*\})")))
      << out;
  EXPECT_EQ(Count(body.str(), R"( collective-permute-start\()"), 1) << body.str();
  EXPECT_EQ(Count(body.str(), R"( collective-permute-done\()"), 1) << body.str();
  EXPECT_EQ(UpstreamBackend(*Parse(kKvLoopModule), 4, 4), "DEFAULT");
}

TEST_F(NvshmemCollectivePermuteRewriterTest, TwoHostRingSplitsWhenItPays) {
  auto module = Parse(kKvLoopModule);
  std::string out = Run(module.get(), "1x2x4", Table(kSplitFriendlyCosts));
  ASSERT_EQ(last_records_.size(), 1u);
  EXPECT_EQ(last_records_[0].decision.plan, sel::Plan::kSplit)
      << last_records_[0].decision.reason;
  // NVSHMEM carries the six NVLink edges, NCCL the two that cross hosts.
  EXPECT_EQ(Count(out, R"(collective-permute\.nvshmem-start = [^\n]*)"
                       R"(source_target_pairs=\{\{0,1\},\{1,2\},\{2,3\},\{4,5\},)"
                       R"(\{5,6\},\{6,7\}\}[^\n]*"backend":"NVSHMEM")"),
            1)
      << out;
  EXPECT_EQ(Count(out, R"(collective-permute\.nccl-start = [^\n]*channel_id=2, )"
                       R"(source_target_pairs=\{\{3,4\},\{7,0\}\}[^\n]*)"
                       R"("backend":"DEFAULT")"),
            1)
      << out;
  // Devices 0 and 4 receive over the network; the rest over NVLink.
  EXPECT_EQ(Count(out, R"(pred\[8\]\{0\} constant\(\{0, 1, 1, 1, 0, 1, 1, 1\}\))"), 1)
      << out;
  EXPECT_EQ(Count(out, R"(device_id = u32\[\] partition-id\(\))"), 1) << out;
  EXPECT_EQ(Count(out, R"(\.combined = bf16\[64,2,64\]\{2,1,0\} select\()"), 2)
      << out;
}

TEST_F(NvshmemCollectivePermuteRewriterTest, NvlinkDomainAcrossHostsAllowsNvshmem) {
  // Two hosts in one NVLink domain (an NVL72-style rack, here of 8 GPUs).
  auto module = Parse(kKvLoopModule);
  std::string out = Run(module.get(), "1x2x4:nvl8");
  EXPECT_EQ(Count(out, R"("backend":"NVSHMEM")"), 1) << out;
  ASSERT_EQ(last_records_.size(), 1u);
  EXPECT_EQ(last_records_[0].decision.edges_by_class[static_cast<int>(
                sel::LinkClass::kNvlinkDomain)],
            2);
  // Upstream agrees when told the slice is the whole domain (it checks that
  // the module's device count fits the slice), and not when it is a host.
  EXPECT_EQ(UpstreamBackend(*Parse(kKvLoopModule), 4, 8), "NVSHMEM");
  EXPECT_EQ(UpstreamBackend(*Parse(kKvLoopModule), 4, 4), "DEFAULT");
}

TEST_F(NvshmemCollectivePermuteRewriterTest, HugeMessageStaysOnNccl) {
  // 2 GiB per device does not fit NVSHMEM's default 1 GiB symmetric heap;
  // upstream (no size threshold for permutes since XLA PR #30718) would still
  // pick NVSHMEM.
  auto module = Parse(kHugeRingModule);
  std::string out = Run(module.get(), "1x1x8");
  EXPECT_EQ(Count(out, R"("backend":"DEFAULT")"), 1) << out;
  EXPECT_NE(out.find("exceeds the NVSHMEM symmetric heap"), std::string::npos);
  EXPECT_EQ(UpstreamBackend(*Parse(kHugeRingModule), 8, 8), "NVSHMEM");
}

TEST_F(NvshmemCollectivePermuteRewriterTest, SmallGainBelowMarginKeepsNccl) {
  auto module = Parse(kShiftModule);
  sel::CostTable table = sel::DefaultCostTable();
  table.margin = 0.5;
  std::string out = Run(module.get(), "1x1x8", table);
  EXPECT_EQ(Count(out, R"("backend":"DEFAULT")"), 1) << out;
  EXPECT_NE(out.find("margin"), std::string::npos);
}

TEST_F(NvshmemCollectivePermuteRewriterTest, NonCyclicShift) {
  auto module = Parse(kShiftModule);
  std::string out = Run(module.get(), "1x1x8");
  EXPECT_EQ(Count(out, R"(source_target_pairs=\{\{0,1\},\{1,2\},\{2,3\},\{3,4\},)"
                       R"(\{4,5\},\{5,6\},\{6,7\}\}[^\n]*"backend":"NVSHMEM")"),
            1)
      << out;
  // Split on two hosts: one pair crosses, and device 0 receives nothing in
  // either part (it gets zeros, as from the original permute).
  auto two_hosts = Parse(kShiftModule);
  std::string split = Run(two_hosts.get(), "1x2x4", Table(kSplitFriendlyCosts));
  EXPECT_EQ(Count(split, R"(nccl-start = [^\n]*source_target_pairs=\{\{3,4\}\})"), 1)
      << split;
  EXPECT_EQ(Count(split, R"(constant\(\{0, 1, 1, 1, 0, 1, 1, 1\}\))"), 1) << split;
}

TEST_F(NvshmemCollectivePermuteRewriterTest, DegenerateSelfPermute) {
  auto module = Parse(kSelfPermuteModule);
  std::string out = Run(module.get(), "1x1x4");
  ASSERT_EQ(last_records_.size(), 1u);
  EXPECT_EQ(last_records_[0].decision.edges_by_class[static_cast<int>(
                sel::LinkClass::kSameDevice)],
            4);
  EXPECT_EQ(Count(out, R"(collective-permute-start\()"), 1) << out;
}

TEST_F(NvshmemCollectivePermuteRewriterTest, AlreadyAsyncGetsBackendInPlace) {
  auto module = Parse(kAsyncRingModule);
  std::string before = module->ToString();
  std::string out = Run(module.get(), "1x1x8");
  EXPECT_EQ(Count(out, R"(collective-permute-start = )"), 1) << out;
  EXPECT_EQ(Count(out, R"("backend":"NVSHMEM")"), 1) << out;
  ASSERT_EQ(last_records_.size(), 1u);
  EXPECT_EQ(last_records_[0].form, "async");
  EXPECT_TRUE(last_records_[0].new_instructions.empty());
  // Fields this XLA does not know (from jax 0.10's newer proto) survive.
  if (before.find("collectives_mode") != std::string::npos) {
    EXPECT_NE(out.find("collectives_mode"), std::string::npos);
  }
}

TEST_F(NvshmemCollectivePermuteRewriterTest, ScheduledModuleIsNeverSplit) {
  // The optimized module is scheduled: a split would place its new starts and
  // dones back to back, losing the overlap, so the pass keeps NCCL.
  auto module = Parse(kAsyncRingModule);
  ASSERT_TRUE(module->has_schedule());
  std::string out = Run(module.get(), "1x2x4", Table(kSplitFriendlyCosts));
  ASSERT_EQ(last_records_.size(), 1u);
  EXPECT_EQ(last_records_[0].decision.plan, sel::Plan::kNccl);
  EXPECT_NE(last_records_[0].decision.reason.find("already scheduled"),
            std::string::npos);
  EXPECT_EQ(Count(out, R"("backend":"DEFAULT")"), 1) << out;
  EXPECT_EQ(Count(out, "nvshmem-start"), 0) << out;
}

// Hand-written: work pinned between a start and its done with control edges,
// as XLA's schedulers and pipeliners leave it; none of the JAX programs we can
// compile here produces this pattern.
constexpr char kPinnedStartDone[] = R"(
HloModule pinned, num_partitions=8

ENTRY e {
  p = f32[16] parameter(0)
  q = f32[16] parameter(1)
  s = (f32[16], f32[16]) collective-permute-start(p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}
  a = f32[16] add(q, q), control-predecessors={s}
  d = f32[16] collective-permute-done(s), control-predecessors={a}
  ROOT t = (f32[16], f32[16]) tuple(d, a)
}
)";

TEST_F(NvshmemCollectivePermuteRewriterTest, SplitKeepsWorkPinnedBetweenStartAndDone) {
  auto module = Parse(kPinnedStartDone);
  std::string out = Run(module.get(), "1x2x4", Table(kSplitFriendlyCosts));
  ASSERT_EQ(last_records_.size(), 1u);
  ASSERT_EQ(last_records_[0].decision.plan, sel::Plan::kSplit);
  EXPECT_EQ(Count(out, R"(%a = [^\n]*control-predecessors=\{%s\.nvshmem-start, %s\.nccl-start\})"), 1)
      << out;
  EXPECT_EQ(Count(out, R"(done\(%s\.n[a-z]+-start\), control-predecessors=\{%a\})"), 2)
      << out;
}

TEST_F(NvshmemCollectivePermuteRewriterTest, AnnotateOnlyRecordsWithoutRewriting) {
  auto module = Parse(kKvStepModule);
  std::string out =
      Run(module.get(), "1x1x8", sel::DefaultCostTable(),
          NvshmemCollectivePermuteRewriter::Mode::kAnnotateOnly);
  EXPECT_EQ(Count(out, "collective-permute-start"), 0) << out;
  EXPECT_EQ(Count(out, R"(collective-permute\([^\n]*_nvshmem_plan="nvshmem")"), 1)
      << out;
}

TEST_F(NvshmemCollectivePermuteRewriterTest, SecondRunChangesNothing) {
  for (const char* text : {kKvStepModule, kKvLoopModule, kAsyncRingModule,
                           kShiftModule, kSelfPermuteModule}) {
    for (const sel::CostTable& table :
         {sel::DefaultCostTable(), Table(kSplitFriendlyCosts)}) {
      auto module = Parse(text);
      std::string once = Run(module.get(), "1x2x4", table);
      std::string twice = Run(module.get(), "1x2x4", table,
                              NvshmemCollectivePermuteRewriter::Mode::kRewrite,
                              /*expect_changed=*/false);
      EXPECT_EQ(once, twice);
    }
  }
}

TEST_F(NvshmemCollectivePermuteRewriterTest, TopologyTooSmallIsAnError) {
  auto module = Parse(kKvLoopModule);
  NvshmemCollectivePermuteRewriter pass({Topo("1x1x4"), sel::DefaultCostTable(),
                                         NvshmemCollectivePermuteRewriter::Mode::kRewrite});
  absl::StatusOr<bool> changed = pass.Run(module.get());
  ASSERT_FALSE(changed.ok());
  EXPECT_NE(std::string(changed.status().message()).find("needs 8 devices"),
            std::string::npos)
      << changed.status();
}

}  // namespace
}  // namespace gpu
}  // namespace xla
