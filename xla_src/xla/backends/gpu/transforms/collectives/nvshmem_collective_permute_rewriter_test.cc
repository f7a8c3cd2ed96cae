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

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_backend_selection.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/ir/hlo_opcode.h"
#include "xla/hlo/testlib/filecheck.h"
#include "xla/hlo/testlib/hlo_hardware_independent_test_base.h"
#include "xla/service/computation_placer.h"
#include "xla/service/gpu/backend_configs.pb.h"
#include "xla/tsl/platform/env.h"
#include "xla/tsl/platform/statusor.h"

namespace xla {
namespace gpu {
namespace {

// Real HLO: small JAX programs compiled by XLA for H200 topologies, taken
// where AsyncCollectiveCreator receives them.
#include "xla/backends/gpu/transforms/collectives/nvshmem_collective_permute_rewriter_test_modules.inc"

namespace sel = nvshmem_selection;
using Rewriter = NvshmemCollectivePermuteRewriter;

// NVSHMEM wins every NVLink edge: the tests check what the pass does with a
// decision, not the default table's calibration.
constexpr char kNvshmemFavoured[] = R"table(
  links {
    backend: NVSHMEM
    link_class: NVLINK
    latency_us: 1
    bandwidth_gbps: 450
    per_buffer_us: 0
  }
  links {
    backend: NVSHMEM
    link_class: NVLINK_DOMAIN
    latency_us: 1
    bandwidth_gbps: 450
    per_buffer_us: 0
  }
)table";

constexpr char kRing8[] = R"(
HloModule ring

ENTRY e {
  p = f32[1024] parameter(0)
  ROOT cp = f32[1024] collective-permute(p), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}
}
)";

constexpr char kRing4[] = R"(
HloModule ring4

ENTRY e {
  p = f32[1024] parameter(0)
  ROOT cp = f32[1024] collective-permute(p), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}
)";

class NvshmemCollectivePermuteRewriterTest
    : public HloHardwareIndependentTestBase {
 protected:
  // The pass on `spec` (empty: derived from `options`) with the favoured
  // table.
  static Rewriter MakePass(absl::string_view spec,
                           const Rewriter::Options& options = {}) {
    absl::StatusOr<sel::CostTable> table =
        sel::ParseCostTable(kNvshmemFavoured, "test");
    EXPECT_TRUE(table.ok()) << table.status();
    std::optional<sel::Topology> topology;
    if (!spec.empty()) {
      absl::StatusOr<sel::Topology> parsed = sel::Topology::Parse(spec);
      EXPECT_TRUE(parsed.ok()) << parsed.status();
      topology = *std::move(parsed);
    }
    return Rewriter(*std::move(table), std::move(topology), options);
  }

  // The collective_backend_config backend of `instr`.
  static CollectiveBackendConfig::CollectiveBackend BackendOf(
      const HloInstruction* instr) {
    absl::StatusOr<GpuBackendConfig> config =
        instr->backend_config<GpuBackendConfig>();
    EXPECT_TRUE(config.ok()) << config.status();
    return config->collective_backend_config().backend();
  }

  // Runs `pass` on `hlo` over `partitions`; the backend of its permute.
  CollectiveBackendConfig::CollectiveBackend PermuteBackend(
      absl::string_view hlo, int64_t partitions, Rewriter pass) {
    absl::StatusOr<std::unique_ptr<VerifiedHloModule>> module =
        ParseAndReturnVerifiedModule(hlo, 1, partitions);
    EXPECT_TRUE(module.ok()) << module.status();
    EXPECT_TRUE(RunHloPass(&pass, module->get()).ok());
    return BackendOf(
        FindInstruction(module->get(), HloOpcode::kCollectivePermute));
  }
};

TEST_F(NvshmemCollectivePermuteRewriterTest, OneHostRingGetsNvshmemStaysSync) {
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          ParseAndReturnVerifiedModule(kRing8, 1, 8));
  Rewriter pass = MakePass("1x1x8");
  TF_ASSERT_OK_AND_ASSIGN(bool changed, RunHloPass(&pass, module.get()));
  EXPECT_TRUE(changed);
  TF_ASSERT_OK_AND_ASSIGN(bool matched, RunFileCheck(module->ToString(), R"(
CHECK: %cp = f32[1024]{0} collective-permute(%p)
CHECK-SAME: "collective_backend_config":{{.*}}"backend":"NVSHMEM"
CHECK-NOT: collective-permute-start
)"));
  EXPECT_TRUE(matched);
}

TEST_F(NvshmemCollectivePermuteRewriterTest, RingAcrossHostsKeepsDefault) {
  EXPECT_EQ(PermuteBackend(kRing8, 8, MakePass("1x2x4")),
            CollectiveBackendConfig::DEFAULT);
}

TEST_F(NvshmemCollectivePermuteRewriterTest, DeviceReceivingNothingKeeps) {
  // A shift (device 0 receives nothing) and a swap over two of four devices:
  // XLA's NVSHMEM permute would wait forever in its barrier.
  for (absl::string_view pairs : {"{0,1},{1,2},{2,3}", "{0,1},{1,0}"}) {
    const std::string hlo = absl::StrCat(R"(
HloModule m

ENTRY e {
  p = f32[1024] parameter(0)
  ROOT cp = f32[1024] collective-permute(p), channel_id=1,
    source_target_pairs={)",
                                         pairs, "}\n}\n");
    EXPECT_EQ(PermuteBackend(hlo, 4, MakePass("1x1x4")),
              CollectiveBackendConfig::DEFAULT)
        << pairs;
  }
}

TEST_F(NvshmemCollectivePermuteRewriterTest, InPlacePermuteIsLeftAlone) {
  // Four sources, but devices 2 and 3 receive nothing: the decision is NCCL,
  // and the pass leaves in-place permutes unchanged anyway.
  constexpr char kInPlace[] = R"(
HloModule m

ENTRY e {
  p0 = u32[4,1024] parameter(0)
  p1 = u32[4,1024] parameter(1)
  c0 = s32[] constant(0)
  c1 = s32[] constant(1)
  c2 = s32[] constant(2)
  i0 = (s32[], s32[]) tuple(c0, c0)
  i1 = (s32[], s32[]) tuple(c1, c0)
  i2 = (s32[], s32[]) tuple(c2, c0)
  offsets = ((s32[], s32[]), (s32[], s32[]), (s32[], s32[]))
    tuple(i0, i1, i2)
  ROOT cp = u32[4,1024] collective-permute(p0, p1, offsets, offsets),
    channel_id=1, source_target_pairs={{0,1},{1,0},{2,0},{3,0}},
    slice_sizes={{1,1024},{1,1024},{1,1024}}
}
)";
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          ParseAndReturnVerifiedModule(kInPlace, 1, 4));
  Rewriter pass = MakePass("1x1x4");
  TF_ASSERT_OK_AND_ASSIGN(auto decisions, pass.Decide(*module));
  ASSERT_EQ(decisions.size(), 1);
  EXPECT_FALSE(decisions[0].rewritable);
  EXPECT_EQ(decisions[0].decision.backend, sel::Backend::kNccl);
  EXPECT_TRUE(decisions[0].decision.nvshmem_refusal.has_value());
  EXPECT_FALSE(RunHloPass(&pass, module.get()).value());
}

TEST_F(NvshmemCollectivePermuteRewriterTest, AsyncStartIsUpdatedInPlace) {
  constexpr char kAsync[] = R"(
HloModule async

ENTRY e {
  p = f32[64] parameter(0)
  s = (f32[64], f32[64]) collective-permute-start(p), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}},
    backend_config={"collective_backend_config":{"is_sync":true}}
  ROOT d = f32[64] collective-permute-done(s)
}
)";
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          ParseAndReturnVerifiedModule(kAsync, 1, 8));
  Rewriter pass = MakePass("1x1x8");
  EXPECT_TRUE(RunHloPass(&pass, module.get()).value());
  TF_ASSERT_OK_AND_ASSIGN(bool matched, RunFileCheck(module->ToString(), R"(
CHECK: %s = {{.*}} collective-permute-start(%p)
CHECK-SAME: "is_sync":true
CHECK-SAME: "backend":"NVSHMEM"
CHECK: %d = f32[64]{0} collective-permute-done(%s)
)"));
  EXPECT_TRUE(matched);
}

TEST_F(NvshmemCollectivePermuteRewriterTest, SecondRunChangesNothing) {
  for (absl::string_view spec : {"1x1x8", "1x2x4"}) {
    TF_ASSERT_OK_AND_ASSIGN(auto module,
                            ParseAndReturnVerifiedModule(kRing8, 1, 8));
    Rewriter pass = MakePass(spec);
    EXPECT_TRUE(RunHloPass(&pass, module.get()).value());
    EXPECT_FALSE(RunHloPass(&pass, module.get()).value()) << spec;
  }
}

TEST_F(NvshmemCollectivePermuteRewriterTest, DecideChangesNothing) {
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          ParseAndReturnVerifiedModule(kRing8, 1, 8));
  const std::string before = module->ToString();
  TF_ASSERT_OK_AND_ASSIGN(auto decisions, MakePass("1x1x8").Decide(*module));
  ASSERT_EQ(decisions.size(), 1);
  EXPECT_EQ(decisions[0].decision.backend, sel::Backend::kNvshmem);
  EXPECT_EQ(decisions[0].request.bytes, 1024 * 4);
  EXPECT_EQ(module->ToString(), before);
}

TEST_F(NvshmemCollectivePermuteRewriterTest, TopologyFromDevicesPerHost) {
  Rewriter::Options options;
  options.num_devices_per_host = 8;
  EXPECT_EQ(PermuteBackend(kRing8, 8, MakePass("", options)),
            CollectiveBackendConfig::NVSHMEM);
  options.num_devices_per_host = 4;
  EXPECT_EQ(PermuteBackend(kRing8, 8, MakePass("", options)),
            CollectiveBackendConfig::DEFAULT);
  // Two hosts of 4 in one NVLink domain of 8 (the slice size).
  options.slice_size = 8;
  EXPECT_EQ(PermuteBackend(kRing8, 8, MakePass("", options)),
            CollectiveBackendConfig::NVSHMEM);
}

TEST_F(NvshmemCollectivePermuteRewriterTest, TopologyFromDeviceAssignment) {
  // Hosts of 4 GPUs: the module's devices decide whether a 4-device ring
  // stays on one host.
  Rewriter::Options options;
  options.num_devices_per_host = 4;
  for (const auto& [devices, backend] :
       std::vector<std::pair<std::vector<int>,
                             CollectiveBackendConfig::CollectiveBackend>>{
           {{4, 5, 6, 7}, CollectiveBackendConfig::NVSHMEM},
           {{0, 4, 1, 5}, CollectiveBackendConfig::DEFAULT}}) {
    DeviceAssignment assignment(1, 4);
    for (int p = 0; p < 4; ++p) assignment(0, p) = devices[p];
    TF_ASSERT_OK_AND_ASSIGN(
        auto module, ParseAndReturnVerifiedModule(kRing4, 1, 4, assignment));
    Rewriter pass = MakePass("", options);
    ASSERT_TRUE(RunHloPass(&pass, module.get()).ok());
    EXPECT_EQ(BackendOf(module->entry_computation()->root_instruction()),
              backend);
  }
}

TEST_F(NvshmemCollectivePermuteRewriterTest, TopologyTooSmallIsAnError) {
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          ParseAndReturnVerifiedModule(kRing8, 1, 8));
  Rewriter pass = MakePass("1x1x4");
  EXPECT_EQ(RunHloPass(&pass, module.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(NvshmemCollectivePermuteRewriterTest, CreateReadsTheCostTableFile) {
  std::string path = ::testing::TempDir() + "/favoured_costs.txtpb";
  ASSERT_TRUE(
      tsl::WriteStringToFile(tsl::Env::Default(), path, kNvshmemFavoured).ok());
  Rewriter::Options options;
  options.topology_spec = "1x1x8";
  options.cost_table_path = path;
  TF_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Rewriter> pass,
                          Rewriter::Create(options));
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          ParseAndReturnVerifiedModule(kRing8, 1, 8));
  EXPECT_TRUE(RunHloPass(pass.get(), module.get()).value());
  EXPECT_EQ(BackendOf(module->entry_computation()->root_instruction()),
            CollectiveBackendConfig::NVSHMEM);
}

TEST_F(NvshmemCollectivePermuteRewriterTest, CreateRejectsBadOptions) {
  Rewriter::Options bad_spec, negative, bad_slice, missing_file;
  bad_spec.topology_spec = "1x2";
  negative.num_devices_per_host = -1;
  bad_slice.num_devices_per_host = 4;
  bad_slice.slice_size = 6;
  missing_file.cost_table_path = ::testing::TempDir() + "/no_such_table.txtpb";
  for (const auto& [options, code] :
       std::vector<std::pair<Rewriter::Options, absl::StatusCode>>{
           {bad_spec, absl::StatusCode::kInvalidArgument},
           {negative, absl::StatusCode::kInvalidArgument},
           {bad_slice, absl::StatusCode::kInvalidArgument},
           {missing_file, absl::StatusCode::kNotFound}}) {
    EXPECT_EQ(Rewriter::Create(options).status().code(), code);
  }
}

TEST_F(NvshmemCollectivePermuteRewriterTest, RealKvStepOnOneHost) {
  // K and V rotated by one combined permute of two buffers.
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          ParseAndReturnVerifiedModule(kKvStepModule, 1, 8));
  Rewriter pass = MakePass("1x1x8");
  EXPECT_TRUE(RunHloPass(&pass, module.get()).value());
  TF_ASSERT_OK_AND_ASSIGN(bool matched, RunFileCheck(module->ToString(), R"(
CHECK: collective-permute(%param.2, %param.3)
CHECK-SAME: "backend":"NVSHMEM"
)"));
  EXPECT_TRUE(matched);
}

TEST_F(NvshmemCollectivePermuteRewriterTest, RealKvLoopAcrossTwoHosts) {
  // The permute inside the while body: NCCL across two hosts, NVSHMEM when
  // one NVLink domain spans both.
  for (const auto& [spec, backend] :
       std::vector<std::pair<absl::string_view,
                             CollectiveBackendConfig::CollectiveBackend>>{
           {"1x2x4", CollectiveBackendConfig::DEFAULT},
           {"1x2x4:nvl8", CollectiveBackendConfig::NVSHMEM}}) {
    TF_ASSERT_OK_AND_ASSIGN(auto module,
                            ParseAndReturnVerifiedModule(kKvLoopModule, 1, 8));
    Rewriter pass = MakePass(spec);
    ASSERT_TRUE(RunHloPass(&pass, module.get()).ok());
    const HloInstruction* permute =
        FindInstruction(module.get(), HloOpcode::kCollectivePermute);
    ASSERT_NE(permute, nullptr);
    EXPECT_NE(permute->parent(), module->entry_computation());
    EXPECT_EQ(BackendOf(permute), backend) << spec;
  }
}

TEST_F(NvshmemCollectivePermuteRewriterTest, RealShiftOnTwoDevicesKeeps) {
  // lax.ppermute with pairs {0,1}, measured to hang on NVSHMEM on two H200.
  EXPECT_EQ(PermuteBackend(kShiftPairModule, 2, MakePass("1x1x2")),
            CollectiveBackendConfig::DEFAULT);
}

}  // namespace
}  // namespace gpu
}  // namespace xla
