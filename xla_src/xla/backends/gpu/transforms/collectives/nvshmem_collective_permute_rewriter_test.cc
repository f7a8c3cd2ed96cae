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

// NVSHMEM wins every NVLink edge (no per-buffer cost): the tests check what
// the pass does with a decision, not the default table's calibration.
constexpr char kNvshmemFavouredCosts[] =
    "link nvshmem nvlink 1 450 0\n"
    "link nvshmem nvlink_domain 1 450 0\n";

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
                  const sel::CostTable& table = Table(kNvshmemFavouredCosts),
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

TEST_F(NvshmemCollectivePermuteRewriterTest, TwoHostRingIsNeverSplit) {
  // Even where the costs favour NVSHMEM on the NVLink edges, a split's
  // NVSHMEM half would leave devices 0 and 4 without a source, and XLA's
  // NVSHMEM permute would hang in its barrier: the whole ring stays NCCL.
  auto module = Parse(kKvLoopModule);
  std::string out = Run(module.get(), "1x2x4", Table(kSplitFriendlyCosts));
  ASSERT_EQ(last_records_.size(), 1u);
  EXPECT_EQ(last_records_[0].decision.plan, sel::Plan::kNccl);
  EXPECT_NE(last_records_[0].decision.reason.find("without a source"),
            std::string::npos)
      << last_records_[0].decision.reason;
  EXPECT_EQ(Count(out, R"("backend":"DEFAULT")"), 1) << out;
  EXPECT_EQ(Count(out, "nvshmem-start|select"), 0) << out;
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
  auto module = Parse(kKvStepModule);
  sel::CostTable table = Table(kNvshmemFavouredCosts);
  table.margin = 0.9;
  std::string out = Run(module.get(), "1x1x8", table);
  EXPECT_EQ(Count(out, R"("backend":"DEFAULT")"), 1) << out;
  EXPECT_NE(out.find("margin"), std::string::npos);
}

TEST_F(NvshmemCollectivePermuteRewriterTest, NonCyclicShiftKeepsNccl) {
  // lax.ppermute i -> i+1 without wrap-around: device 0 has no source, so an
  // NVSHMEM permute would hang (XLA's barrier spans all 8 devices).
  auto module = Parse(kShiftModule);
  std::string out = Run(module.get(), "1x1x8");
  EXPECT_EQ(Count(out, R"(source_target_pairs=\{\{0,1\},\{1,2\},\{2,3\},\{3,4\},)"
                       R"(\{4,5\},\{5,6\},\{6,7\}\}[^\n]*"backend":"DEFAULT")"),
            1)
      << out;
  EXPECT_EQ(Count(out, R"("backend":"NVSHMEM")"), 0) << out;
  ASSERT_EQ(last_records_.size(), 1u);
  EXPECT_NE(last_records_[0].decision.reason.find("(device 0) has no source"),
            std::string::npos)
      << last_records_[0].decision.reason;
  // Upstream's assigner gives it NVSHMEM: the permute that hangs.
  EXPECT_EQ(UpstreamBackend(*Parse(kShiftModule), 8, 8), "NVSHMEM");
}

TEST_F(NvshmemCollectivePermuteRewriterTest, TwoDevicePairKeepsNccl) {
  // Pairs {0,1} on two GPUs: the permute measured to hang on 2x H200.
  auto module = Parse(kShiftPairModule);
  std::string out = Run(module.get(), "1x1x2");
  EXPECT_EQ(Count(out, R"("backend":"DEFAULT")"), 1) << out;
  ASSERT_EQ(last_records_.size(), 1u);
  EXPECT_NE(last_records_[0].decision.reason.find("nvshmem refused"),
            std::string::npos)
      << last_records_[0].decision.reason;
  // The cyclic ring on one host still gets NVSHMEM.
  auto ring = Parse(kKvStepModule);
  std::string ring_out = Run(ring.get(), "1x1x8");
  EXPECT_EQ(Count(ring_out, R"("backend":"NVSHMEM")"), 1) << ring_out;
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
  // The optimized, scheduled module: the start keeps NCCL in place, and no
  // new instruction enters the schedule.
  auto module = Parse(kAsyncRingModule);
  ASSERT_TRUE(module->has_schedule());
  std::string out = Run(module.get(), "1x2x4", Table(kSplitFriendlyCosts));
  ASSERT_EQ(last_records_.size(), 1u);
  EXPECT_EQ(last_records_[0].decision.plan, sel::Plan::kNccl);
  EXPECT_EQ(Count(out, R"("backend":"DEFAULT")"), 1) << out;
  EXPECT_EQ(Count(out, "nvshmem-start"), 0) << out;
}

TEST_F(NvshmemCollectivePermuteRewriterTest, AnnotateOnlyRecordsWithoutRewriting) {
  auto module = Parse(kKvStepModule);
  std::string out =
      Run(module.get(), "1x1x8", Table(kNvshmemFavouredCosts),
          NvshmemCollectivePermuteRewriter::Mode::kAnnotateOnly);
  EXPECT_EQ(Count(out, "collective-permute-start"), 0) << out;
  EXPECT_EQ(Count(out, R"(collective-permute\([^\n]*_nvshmem_plan="nvshmem")"), 1)
      << out;
}

TEST_F(NvshmemCollectivePermuteRewriterTest, SecondRunChangesNothing) {
  for (const char* text : {kKvStepModule, kKvLoopModule, kAsyncRingModule,
                           kShiftModule, kSelfPermuteModule}) {
    for (const sel::CostTable& table :
         {Table(kNvshmemFavouredCosts), Table(kSplitFriendlyCosts)}) {
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
