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

#include "xla/backends/gpu/runtime/nvshmem_permute_support.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include "absl/status/status.h"
#include "absl/status/status_matchers.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "xla/debug_options_flags.h"
#include "xla/hlo/ir/hlo_casting_utils.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/ir/hlo_opcode.h"
#include "xla/hlo/testlib/hlo_hardware_independent_test_base.h"
#include "xla/service/buffer_assignment.h"
#include "xla/service/computation_placer.h"
#include "xla/tsl/platform/env.h"

namespace xla::gpu {
namespace {

using ::absl_testing::IsOk;
using ::absl_testing::StatusIs;
using ::testing::HasSubstr;

// A ring over four partitions; TYPE and PAIRS are filled in by each test.
constexpr absl::string_view kPermute = R"(
HloModule m

ENTRY e {
  p = TYPE[64] parameter(0)
  ROOT cp = TYPE[64] collective-permute(p), channel_id=1,
    source_target_pairs=PAIRS
})";

constexpr absl::string_view kRing = "{{0,1},{1,2},{2,3},{3,0}}";

// Sets xla_gpu_experimental_enable_nvshmem in the process's flags.
void SetNvshmemInXlaFlags(bool on) {
  tsl::setenv("XLA_FLAGS",
              on ? "--xla_gpu_experimental_enable_nvshmem=true"
                 : "--xla_gpu_experimental_enable_nvshmem=false",
              /*overwrite=*/1);
  ParseDebugOptionFlagsFromEnv(/*reset_envvar=*/true);
}

class NvshmemPermuteSupportTest : public HloHardwareIndependentTestBase {
 protected:
  static void SetUpTestSuite() { SetNvshmemInXlaFlags(true); }

  // Whether NVSHMEM can run the permute `hlo` of `replicas` x `partitions`.
  absl::Status CanRun(absl::string_view hlo, int64_t replicas = 1,
                      int64_t partitions = 4) {
    auto module = ParseAndReturnVerifiedModule(hlo, replicas, partitions);
    if (!module.ok()) {
      return module.status();
    }
    module_ = *std::move(module);
    module_->mutable_config()
        .mutable_debug_options()
        .set_xla_gpu_experimental_enable_nvshmem(true);
    return Recheck();
  }

  // The verdict on the last module parsed, after a test changed its config.
  absl::Status Recheck() {
    return CanRunNvshmemCollectivePermute(
        *Cast<HloCollectivePermuteInstruction>(
            FindInstruction(module_.get(), HloOpcode::kCollectivePermute)),
        module_->config());
  }

  absl::Status CanRun(absl::string_view type, absl::string_view pairs) {
    return CanRun(
        absl::StrReplaceAll(kPermute, {{"TYPE", type}, {"PAIRS", pairs}}));
  }

  std::unique_ptr<HloModule> module_;
};

TEST_F(NvshmemPermuteSupportTest, RingOfEveryPutTypeRuns) {
  for (absl::string_view type :
       {"f64", "f32", "f16", "bf16", "s32", "s64", "u32", "u64"}) {
    EXPECT_THAT(CanRun(type, kRing), IsOk()) << type;
  }
}

TEST_F(NvshmemPermuteSupportTest, TypesWithoutPutAreRefused) {
  for (absl::string_view type : {"pred", "s8", "u8", "s16", "u16", "f8e4m3fn",
                                 "f8e5m2", "c64", "c128"}) {
    EXPECT_THAT(CanRun(type, kRing),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr(absl::StrCat("is ", type, ":"))))
        << type;
  }
}

TEST_F(NvshmemPermuteSupportTest, CombinedPermuteWithOneBadBufferIsRefused) {
  constexpr absl::string_view kCombined = R"(
HloModule m

ENTRY e {
  k = bf16[64] parameter(0)
  v = f8e4m3fn[64] parameter(1)
  ROOT cp = (bf16[64], f8e4m3fn[64]) collective-permute(k, v), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
})";
  EXPECT_THAT(CanRun(kCombined), StatusIs(absl::StatusCode::kFailedPrecondition,
                                          HasSubstr("operand v is f8e4m3fn")));
  EXPECT_THAT(CanRun(absl::StrReplaceAll(kCombined, {{"f8e4m3fn", "f32"}})),
              IsOk());
}

TEST_F(NvshmemPermuteSupportTest, DeviceWithoutSourceIsRefused) {
  EXPECT_THAT(CanRun("f32", "{{0,1},{1,2},{2,3}}"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("id 0 receives nothing")));
  EXPECT_THAT(CanRun("f32", "{{0,1},{1,0},{2,3},{3,2}}"), IsOk());
}

TEST_F(NvshmemPermuteSupportTest, CrossReplicaPermuteCountsReplicas) {
  constexpr absl::string_view kCrossReplica = R"(
HloModule m

ENTRY e {
  p = f32[64] parameter(0)
  ROOT cp = f32[64] collective-permute(p),
    source_target_pairs={{0,1},{1,0}}
})";
  EXPECT_THAT(CanRun(kCrossReplica, /*replicas=*/2, /*partitions=*/1), IsOk());
  EXPECT_THAT(CanRun(kCrossReplica, /*replicas=*/4, /*partitions=*/1),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("id 2 receives nothing")));
}

TEST_F(NvshmemPermuteSupportTest, GroupSmallerThanProgramIsRefused) {
  EXPECT_THAT(
      CanRun(absl::StrReplaceAll(kPermute, {{"TYPE", "f32"}, {"PAIRS", kRing}}),
             /*replicas=*/2, /*partitions=*/4),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("group has 4 of the program's 8 devices")));
}

TEST_F(NvshmemPermuteSupportTest, MemcpyLocalP2pIsRefused) {
  ASSERT_THAT(CanRun("f32", kRing), IsOk());
  module_->mutable_config()
      .mutable_debug_options()
      .set_xla_gpu_use_memcpy_local_p2p(true);
  EXPECT_THAT(Recheck(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                  HasSubstr("xla_gpu_use_memcpy_local_p2p")));
}

TEST_F(NvshmemPermuteSupportTest, NvshmemOffIsRefused) {
  ASSERT_THAT(CanRun("f32", kRing), IsOk());
  module_->mutable_config()
      .mutable_debug_options()
      .set_xla_gpu_experimental_enable_nvshmem(false);
  EXPECT_THAT(Recheck(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("xla_gpu_experimental_enable_nvshmem")));
}

TEST_F(NvshmemPermuteSupportTest, NvshmemOffInXlaFlagsIsRefused) {
  ASSERT_THAT(CanRun("f32", kRing), IsOk());
  SetNvshmemInXlaFlags(false);
  absl::Status status = Recheck();
  SetNvshmemInXlaFlags(true);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition,
                               HasSubstr("not in XLA_FLAGS")));
}

TEST_F(NvshmemPermuteSupportTest, PermuteInCollectivesGroupIsRefused) {
  constexpr absl::string_view kGroup = R"(
HloModule m

group {
  p = f32[64] parameter(0)
  ROOT cp = f32[64] collective-permute(p), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}

ENTRY e {
  p = f32[64] parameter(0)
  start = ((f32[64]), f32[64]) async-start(p), calls=group
  ROOT done = f32[64] async-done(start)
})";
  EXPECT_THAT(CanRun(kGroup), StatusIs(absl::StatusCode::kFailedPrecondition,
                                       HasSubstr("collectives group")));
}

TEST_F(NvshmemPermuteSupportTest, PermuteUnderConditionalBranchIsRefused) {
  constexpr absl::string_view kBranch = R"(
HloModule m

ring {
  p = f32[64] parameter(0)
  ROOT cp = f32[64] collective-permute(p), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}

on_true {
  p = f32[64] parameter(0)
  ROOT c = f32[64] call(p), to_apply=ring
}

on_false {
  ROOT p = f32[64] parameter(0)
}

ENTRY e {
  b = pred[] parameter(0)
  p = f32[64] parameter(1)
  ROOT r = f32[64] conditional(b, p, p), true_computation=on_true,
    false_computation=on_false
})";
  EXPECT_THAT(CanRun(kBranch), StatusIs(absl::StatusCode::kFailedPrecondition,
                                        HasSubstr("conditional's branch")));
}

TEST_F(NvshmemPermuteSupportTest, IdsOnOtherDevicesAreRefused) {
  ASSERT_THAT(CanRun("f32", kRing), IsOk());
  for (const auto& [devices, runs] :
       std::vector<std::pair<std::vector<int64_t>, bool>>{
           {{0, 1, 2, 3}, true},
           {{1, 0, 2, 3}, false},
           {{4, 5, 6, 7}, false}}) {
    DeviceAssignment assignment(1, 4);
    for (int p = 0; p < 4; ++p) assignment(0, p) = devices[p];
    module_->mutable_config().set_static_device_assignment(assignment);
    absl::Status status = Recheck();
    if (runs) {
      EXPECT_THAT(status, IsOk());
    } else {
      EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition,
                                   HasSubstr("id 0 runs on device")));
    }
  }
}

TEST(CheckNvshmemDestinationTest, OnlyXlaAllocatedCollectiveMemoryPasses) {
  constexpr int64_t kCollective = 1;
  EXPECT_THAT(CheckNvshmemDestination(BufferAllocation(0, 256, kCollective),
                                      kCollective),
              IsOk());
  EXPECT_THAT(CheckNvshmemDestination(BufferAllocation(0, 256, 0), kCollective),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("memory space 0")));
  BufferAllocation donated(0, 256, kCollective);
  donated.set_entry_computation_parameter(
      2, {}, /*parameter_aliased_with_output=*/true);
  EXPECT_THAT(CheckNvshmemDestination(donated, kCollective),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("parameter 2's buffer")));
}

TEST(CheckCollectiveMemoryFreedEachRunTest, NoHeapBufferOutlivesTheRun) {
  constexpr int64_t kCollective = 1;
  std::vector<BufferAllocation> allocations = {
      BufferAllocation(0, 256, 0), BufferAllocation(1, 256, kCollective),
      BufferAllocation(2, 256, kCollective)};
  allocations[0].set_maybe_live_out(true);  // The default memory's output.
  EXPECT_THAT(CheckCollectiveMemoryFreedEachRun(allocations, kCollective),
              IsOk());
  allocations[2].set_maybe_live_out(true);
  EXPECT_THAT(CheckCollectiveMemoryFreedEachRun(allocations, kCollective),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("allocation 2 of the NVSHMEM heap")));
}

TEST(CheckIdIsOwnPeTest, OnlyTheSameNumberPasses) {
  EXPECT_THAT(CheckIdIsOwnPe(3, 3), IsOk());
  EXPECT_THAT(CheckIdIsOwnPe(0, 8),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("id 0, which is NVSHMEM PE 8")));
}

// PEs 0 and 1 share this PE's memory domain; 2 and 3 another one.
absl::StatusOr<bool> InTeamOfZeroAndOne(int64_t pe) { return pe < 2; }

TEST(CheckBarrierTeamInsideGroupTest, EveryTeamPeMustBeAnId) {
  EXPECT_THAT(CheckBarrierTeamInsideGroup(4, 2, InTeamOfZeroAndOne), IsOk());
  // A group of ids 0..0: PE 1 shares the barrier and never runs the permute.
  EXPECT_THAT(
      CheckBarrierTeamInsideGroup(1, 2, InTeamOfZeroAndOne),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("2 PEs, 1 of them among the permute's 1 ids")));
}

TEST(CheckPairsInsideBarrierTeamTest, PairsInsideEachTeamPass) {
  std::vector<std::pair<int64_t, int64_t>> pairs = {
      {0, 1}, {1, 0}, {2, 3}, {3, 2}};
  EXPECT_THAT(CheckPairsInsideBarrierTeam(pairs, InTeamOfZeroAndOne), IsOk());
}

TEST(CheckPairsInsideBarrierTeamTest, PairLeavingTheTeamFails) {
  std::vector<std::pair<int64_t, int64_t>> ring = {
      {0, 1}, {1, 2}, {2, 3}, {3, 0}};
  EXPECT_THAT(CheckPairsInsideBarrierTeam(ring, InTeamOfZeroAndOne),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("pair 1 -> 2 crosses NVSHMEM_TEAM_SHARED")));
}

TEST(CheckPairsInsideBarrierTeamTest, QueryErrorIsReturned) {
  std::vector<std::pair<int64_t, int64_t>> pairs = {{0, 1}};
  EXPECT_THAT(CheckPairsInsideBarrierTeam(
                  pairs,
                  [](int64_t) -> absl::StatusOr<bool> {
                    return absl::FailedPreconditionError("not initialized");
                  }),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("not initialized")));
}

}  // namespace
}  // namespace xla::gpu
