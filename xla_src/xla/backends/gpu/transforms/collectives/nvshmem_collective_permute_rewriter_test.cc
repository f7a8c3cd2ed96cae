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

#include "xla/backends/gpu/transforms/collectives/nvshmem_collective_permute_rewriter.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/collective_backend_assigner.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_backend_selection.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/parser/hlo_parser.h"
#include "xla/hlo/testlib/filecheck.h"
#include "xla/service/computation_placer.h"
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
using Rewriter = NvshmemCollectivePermuteRewriter;

// NVSHMEM wins every NVLink edge (no per-buffer cost): the tests check what
// the pass does with a decision, not the default table's calibration.
constexpr char kNvshmemFavoured[] =
    "link nvshmem nvlink 1 450 0\n"
    "link nvshmem nvlink_domain 1 450 0\n";

constexpr char kRing8[] = R"(
HloModule ring, num_partitions=8

ENTRY e {
  p = f32[1024] parameter(0)
  ROOT cp = f32[1024] collective-permute(p), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}
}
)";

Rewriter::Options Opts(absl::string_view topology,
                       absl::string_view table = kNvshmemFavoured) {
  Rewriter::Options options;
  options.topology = std::string(topology);
  options.cost_table = std::string(table);
  return options;
}

class NvshmemCollectivePermuteRewriterTest : public ::testing::Test {
 protected:
  static std::unique_ptr<HloModule> Parse(absl::string_view text) {
    absl::StatusOr<std::unique_ptr<HloModule>> module =
        ParseAndReturnUnverifiedModule(text);
    EXPECT_TRUE(module.ok()) << module.status();
    return *std::move(module);
  }

  static void Verify(HloModule* module) {
    HloVerifier verifier(/*layout_sensitive=*/false,
                         /*allow_mixed_precision=*/true);
    absl::StatusOr<bool> result = verifier.Run(module);
    EXPECT_TRUE(result.ok()) << result.status();
  }

  // Runs the pass on `module`; returns whether it changed the module.
  bool Run(HloModule* module, Rewriter::Options options) {
    Verify(module);
    Rewriter pass(std::move(options));
    absl::StatusOr<bool> changed = pass.Run(module);
    EXPECT_TRUE(changed.ok()) << changed.status();
    Verify(module);
    records_ = pass.records();
    return changed.ok() && *changed;
  }

  // Runs the pass and FileChecks the printed result.
  void RunAndCheck(absl::string_view hlo, Rewriter::Options options,
                   absl::string_view pattern) {
    std::unique_ptr<HloModule> module = Parse(hlo);
    Run(module.get(), std::move(options));
    absl::StatusOr<bool> matched = RunFileCheck(module->ToString(), pattern);
    ASSERT_TRUE(matched.ok()) << matched.status();
    EXPECT_TRUE(*matched) << module->ToString();
  }

  // Upstream's CollectiveBackendAssigner on a copy (NVSHMEM enabled): the
  // backend it gives the module's permutes.
  static std::string UpstreamBackend(const HloModule& module, int gpus_per_host,
                                     int slice_size) {
    std::unique_ptr<HloModule> copy = module.Clone("");
    copy->mutable_config()
        .mutable_debug_options()
        .set_xla_gpu_experimental_enable_nvshmem(true);
    CollectiveBackendAssigner assigner(
        stream_executor::CudaComputeCapability(9, 0), gpus_per_host,
        slice_size);
    absl::StatusOr<bool> ran = assigner.Run(copy.get());
    EXPECT_TRUE(ran.ok()) << ran.status();
    return copy->ToString().find("\"backend\":\"NVSHMEM\"") != std::string::npos
               ? "NVSHMEM"
               : "DEFAULT";
  }

  const sel::Decision& OnlyDecision() {
    EXPECT_EQ(records_.size(), 1u);
    return records_.front().decision;
  }

  std::vector<Rewriter::OpRecord> records_;
};

// --- Small inline modules -------------------------------------------------

TEST_F(NvshmemCollectivePermuteRewriterTest,
       OneHostRingGetsNvshmemAndStaysSync) {
  // The backend goes on the sync permute; AsyncCollectiveCreator makes it
  // async later and copies the config.
  RunAndCheck(kRing8, Opts("1x1x8"), R"(
CHECK: %cp = f32[1024]{0} collective-permute(%p)
CHECK-SAME: "collective_backend_config":{{.*}}"backend":"NVSHMEM"
CHECK-NOT: collective-permute-start
CHECK-NOT: _nvshmem_plan
)");
  EXPECT_EQ(OnlyDecision().backend, sel::Backend::kNvshmem);
}

TEST_F(NvshmemCollectivePermuteRewriterTest, RingAcrossHostsKeepsDefault) {
  RunAndCheck(kRing8, Opts("1x2x4"), R"(
CHECK: collective-permute(%p)
CHECK-SAME: "backend":"DEFAULT"
)");
  EXPECT_NE(OnlyDecision().reason.find("does not beat NCCL"), std::string::npos)
      << OnlyDecision().reason;
}

TEST_F(NvshmemCollectivePermuteRewriterTest, ShiftKeepsDefault) {
  // Device 0 receives nothing: XLA's NVSHMEM permute would hang in its
  // barrier over all 4 devices. Upstream's assigner gives it NVSHMEM.
  constexpr char kShift[] = R"(
HloModule shift, num_partitions=4

ENTRY e {
  p = f32[1024] parameter(0)
  ROOT cp = f32[1024] collective-permute(p), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3}}
}
)";
  RunAndCheck(kShift, Opts("1x1x4"), R"(
CHECK: collective-permute(%p)
CHECK-SAME: "backend":"DEFAULT"
)");
  EXPECT_NE(OnlyDecision().reason.find("(device 0) has no source"),
            std::string::npos)
      << OnlyDecision().reason;
  EXPECT_EQ(UpstreamBackend(*Parse(kShift), 4, 4), "NVSHMEM");
}

TEST_F(NvshmemCollectivePermuteRewriterTest, SubsetOfDevicesKeepsDefault) {
  // A cycle over devices 0 and 1 of a 4-device program: 2 and 3 take no
  // part, and would not reach the barrier either.
  constexpr char kPairSwap[] = R"(
HloModule swap, num_partitions=4

ENTRY e {
  p = f32[64] parameter(0)
  ROOT cp = f32[64] collective-permute(p), channel_id=1,
    source_target_pairs={{0,1},{1,0}}
}
)";
  RunAndCheck(kPairSwap, Opts("1x1x4"), R"(
CHECK: "backend":"DEFAULT"
)");
  EXPECT_NE(OnlyDecision().reason.find("no source"), std::string::npos);
}

TEST_F(NvshmemCollectivePermuteRewriterTest, AsyncStartIsUpdatedInPlace) {
  constexpr char kAsync[] = R"(
HloModule async, num_partitions=8

ENTRY e {
  p = f32[64] parameter(0)
  s = (f32[64], f32[64]) collective-permute-start(p), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}},
    backend_config={"collective_backend_config":{"is_sync":true,"backend":"DEFAULT"}}
  ROOT d = f32[64] collective-permute-done(s)
}
)";
  RunAndCheck(kAsync, Opts("1x1x8"), R"(
CHECK: %s = {{.*}} collective-permute-start(%p)
CHECK-SAME: "is_sync":true
CHECK-SAME: "backend":"NVSHMEM"
CHECK: %d = f32[64]{0} collective-permute-done(%s)
)");
  EXPECT_EQ(records_.front().form, "async");
}

TEST_F(NvshmemCollectivePermuteRewriterTest, AnnotateRecordsTheDecision) {
  Rewriter::Options options = Opts("1x1x8");
  options.annotate = true;
  RunAndCheck(kRing8, options, R"(
CHECK: collective-permute(%p)
CHECK-SAME: _nvshmem_plan="nvshmem"
CHECK-SAME: _nvshmem_reason="NVSHMEM:
CHECK-SAME: "backend":"NVSHMEM"
)");
}

TEST_F(NvshmemCollectivePermuteRewriterTest, DecideOnlyLeavesTheModule) {
  std::unique_ptr<HloModule> module = Parse(kRing8);
  const std::string before = module->ToString();
  Rewriter::Options options = Opts("1x1x8");
  options.decide_only = true;
  EXPECT_FALSE(Run(module.get(), options));
  EXPECT_EQ(module->ToString(), before);
  EXPECT_EQ(OnlyDecision().backend, sel::Backend::kNvshmem);
}

TEST_F(NvshmemCollectivePermuteRewriterTest, SecondRunChangesNothing) {
  for (absl::string_view topology : {"1x1x8", "1x2x4"}) {
    std::unique_ptr<HloModule> module = Parse(kRing8);
    EXPECT_TRUE(Run(module.get(), Opts(topology)));
    const std::string once = module->ToString();
    EXPECT_FALSE(Run(module.get(), Opts(topology)));
    EXPECT_EQ(module->ToString(), once);
  }
}

TEST_F(NvshmemCollectivePermuteRewriterTest, TopologyFromDevicesPerHost) {
  // No spec: hosts of N GPUs holding the module's 8 partitions.
  Rewriter::Options options = Opts("");
  options.devices_per_host = 8;
  RunAndCheck(kRing8, options, R"(CHECK: "backend":"NVSHMEM")");
  options.devices_per_host = 4;
  RunAndCheck(kRing8, options, R"(CHECK: "backend":"DEFAULT")");
}

TEST_F(NvshmemCollectivePermuteRewriterTest, TopologyFromDeviceAssignment) {
  // A 4-device ring on hosts of 4 GPUs: one host, unless the module's device
  // assignment spreads it over two.
  constexpr char kRing4[] = R"(
HloModule ring4, num_partitions=4

ENTRY e {
  p = f32[1024] parameter(0)
  ROOT cp = f32[1024] collective-permute(p), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}
)";
  Rewriter::Options options = Opts("");
  options.devices_per_host = 4;
  for (const auto& [devices, backend] :
       std::vector<std::pair<std::vector<int>, std::string>>{
           {{}, "NVSHMEM"},
           {{4, 5, 6, 7}, "NVSHMEM"},
           {{0, 4, 1, 5}, "DEFAULT"}}) {
    std::unique_ptr<HloModule> module = Parse(kRing4);
    if (!devices.empty()) {
      DeviceAssignment assignment(1, 4);
      for (int p = 0; p < 4; ++p) assignment(0, p) = devices[p];
      module->mutable_config().set_static_device_assignment(assignment);
    }
    Run(module.get(), options);
    EXPECT_NE(module->ToString().find("\"backend\":\"" + backend + "\""),
              std::string::npos)
        << backend << ": " << OnlyDecision().reason;
  }
}

TEST_F(NvshmemCollectivePermuteRewriterTest, BadOptionsAreInvalidArgument) {
  Rewriter::Options no_topology = Opts("");
  Rewriter::Options bad_spec = Opts("1x2");
  Rewriter::Options bad_table = Opts("1x1x8", "link nccl warp 1 2\n");
  Rewriter::Options bad_set = Opts("1x1x8");
  bad_set.backends = "nvshmem,peer";
  Rewriter::Options missing_file = Opts("1x1x8", "");
  missing_file.cost_table_path = "/nonexistent/costs.txt";
  for (const Rewriter::Options& options :
       {no_topology, bad_spec, bad_table, bad_set, missing_file}) {
    std::unique_ptr<HloModule> module = Parse(kRing8);
    Rewriter pass(options);
    absl::StatusOr<bool> changed = pass.Run(module.get());
    ASSERT_FALSE(changed.ok());
    EXPECT_EQ(changed.status().code(), absl::StatusCode::kInvalidArgument)
        << changed.status();
  }
}

TEST_F(NvshmemCollectivePermuteRewriterTest, TopologyTooSmallIsAnError) {
  std::unique_ptr<HloModule> module = Parse(kRing8);
  Rewriter pass(Opts("1x1x4"));
  absl::StatusOr<bool> changed = pass.Run(module.get());
  ASSERT_FALSE(changed.ok());
  EXPECT_NE(changed.status().message().find("needs 8 devices"),
            absl::string_view::npos)
      << changed.status();
}

TEST_F(NvshmemCollectivePermuteRewriterTest, PeerBackendGoesThroughTheWriter) {
  // This XLA's proto has no collectives_mode: the default writer refuses
  // peer, and a writer for a newer XLA receives it.
  Rewriter::Options options = Opts("1x1x8", "link peer nvlink 1 450\n");
  options.backends = "nccl,peer";
  {
    std::unique_ptr<HloModule> module = Parse(kRing8);
    Rewriter pass(options);
    absl::StatusOr<bool> changed = pass.Run(module.get());
    ASSERT_FALSE(changed.ok());
    EXPECT_NE(changed.status().message().find("cannot express peer"),
              absl::string_view::npos)
        << changed.status();
  }
  std::vector<sel::Backend> written;
  options.write_backend = [&](HloInstruction*, sel::Backend backend) {
    written.push_back(backend);
    return absl::StatusOr<bool>(true);
  };
  std::unique_ptr<HloModule> module = Parse(kRing8);
  EXPECT_TRUE(Run(module.get(), options));
  EXPECT_EQ(written, std::vector<sel::Backend>{sel::Backend::kPeer});
  EXPECT_EQ(OnlyDecision().backend, sel::Backend::kPeer);
}

// --- Real modules from JAX ------------------------------------------------

TEST_F(NvshmemCollectivePermuteRewriterTest, RealKvStepOnOneHost) {
  // K and V rotated by one combined permute (two buffers).
  RunAndCheck(kKvStepModule, Opts("1x1x8"), R"(
CHECK: collective-permute(%param.2, %param.3)
CHECK-SAME: "backend":"NVSHMEM"
)");
  EXPECT_EQ(records_.front().bytes, 2 * 64 * 2 * 64 * 2);
  EXPECT_EQ(UpstreamBackend(*Parse(kKvStepModule), 8, 8), "NVSHMEM");
}

TEST_F(NvshmemCollectivePermuteRewriterTest, RealKvLoopAcrossTwoHosts) {
  RunAndCheck(kKvLoopModule, Opts("1x2x4"), R"(
CHECK: %region_0
CHECK: collective-permute(
CHECK-SAME: "backend":"DEFAULT"
)");
  EXPECT_NE(OnlyDecision().reason.find("does not beat NCCL"),
            std::string::npos)
      << OnlyDecision().reason;
  // One NVLink domain across both hosts (NVL72-style) allows NVSHMEM.
  RunAndCheck(kKvLoopModule, Opts("1x2x4:nvl8"),
              R"(CHECK: "backend":"NVSHMEM")");
}

TEST_F(NvshmemCollectivePermuteRewriterTest, RealShiftsKeepDefault) {
  // lax.ppermute i -> i+1 without wrap-around, on 8 devices and on 2 (the
  // permute measured to hang on two H200).
  RunAndCheck(kShiftModule, Opts("1x1x8"), R"(CHECK: "backend":"DEFAULT")");
  EXPECT_NE(OnlyDecision().reason.find("nvshmem refused"), std::string::npos);
  RunAndCheck(kShiftPairModule, Opts("1x1x2"), R"(CHECK: "backend":"DEFAULT")");
  EXPECT_NE(OnlyDecision().reason.find("(device 0) has no source"),
            std::string::npos)
      << OnlyDecision().reason;
  EXPECT_EQ(UpstreamBackend(*Parse(kShiftPairModule), 2, 2), "NVSHMEM");
}

TEST_F(NvshmemCollectivePermuteRewriterTest, RealHugeMessageKeepsDefault) {
  // 2 GiB per device does not fit NVSHMEM's default 1 GiB symmetric heap.
  RunAndCheck(kHugeRingModule, Opts("1x1x8"), R"(CHECK: "backend":"DEFAULT")");
  EXPECT_NE(OnlyDecision().reason.find("symmetric heap"), std::string::npos);
}

TEST_F(NvshmemCollectivePermuteRewriterTest, RealNewerXlaConfigIsNotDropped) {
  // An already-async start compiled by a newer XLA (jax 0.10.2): its
  // backend_config has fields this XLA's proto lacks (collectives_mode). The
  // proto writer refuses it instead of silently dropping them; a writer that
  // keeps unknown fields (the out-of-tree driver's) is the way to edit it.
  std::unique_ptr<HloModule> module = Parse(kAsyncRingModule);
  ASSERT_NE(module->ToString().find("collectives_mode"), std::string::npos);
  const std::string before = module->ToString();
  Rewriter pass(Opts("1x1x8"));
  EXPECT_FALSE(pass.Run(module.get()).ok());
  EXPECT_EQ(module->ToString(), before);
  // Deciding alone works, and sees the start as async.
  Rewriter::Options decide = Opts("1x1x8");
  decide.decide_only = true;
  EXPECT_FALSE(Run(module.get(), decide));
  EXPECT_EQ(records_.front().form, "async");
  EXPECT_EQ(OnlyDecision().backend, sel::Backend::kNvshmem);
}

TEST_F(NvshmemCollectivePermuteRewriterTest, RealSelfPermute) {
  RunAndCheck(kSelfPermuteModule, Opts("1x1x4"),
              R"(CHECK: collective-permute()");
  EXPECT_EQ(OnlyDecision()
                .edges_by_class[static_cast<int>(sel::LinkClass::kSameDevice)],
            4);
}

}  // namespace
}  // namespace gpu
}  // namespace xla
