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

#include "xla/backends/gpu/transforms/collectives/permute_backend_assigner.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/permute_backend_selection.h"
#include "xla/hlo/ir/hlo_casting_utils.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/ir/hlo_opcode.h"
#include "xla/hlo/pass/hlo_pass_pipeline.h"
#include "xla/hlo/testlib/filecheck.h"
#include "xla/hlo/testlib/hlo_hardware_independent_test_base.h"
#include "xla/hlo/transforms/collectives/async_collective_creator.h"
#include "xla/service/computation_placer.h"
#include "xla/service/gpu/backend_configs.pb.h"
#include "xla/tsl/platform/env.h"
#include "xla/tsl/platform/statusor.h"
#include "xla/util.h"

namespace xla {
namespace gpu {
namespace {

namespace core = backend_selection;
using Rewriter = PermuteBackendAssigner;

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

// K and V rotated by one combined permute, as XLA's combiner leaves them.
constexpr char kKvStep[] = R"(
HloModule kv_step

ENTRY e {
  k = bf16[64,2,64] parameter(0)
  v = bf16[64,2,64] parameter(1)
  ROOT cp = (bf16[64,2,64], bf16[64,2,64]) collective-permute(k, v),
    channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}
}
)";

// NCCL wins everywhere.
constexpr char kNccLFavoured[] = R"table(
  links { backend: NCCL link_class: NVLINK latency_us: 0.1 bandwidth_gbps: 1e6 }
)table";

constexpr char kRing4[] = R"(
HloModule ring4

ENTRY e {
  p = f32[1024] parameter(0)
  ROOT cp = f32[1024] collective-permute(p), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}
)";

class PermuteBackendAssignerTest : public HloHardwareIndependentTestBase {
 protected:
  // The pass with the favoured table on hosts of `devices_per_host` GPUs in
  // NVLink domains of `slice_size` devices (0: one host), as the compiler
  // describes the cluster.
  static Rewriter MakePass(const Rewriter::Options& options) {
    absl::StatusOr<core::CostTable> table =
        core::ParseCostTable(kNvshmemFavoured, "test");
    EXPECT_TRUE(table.ok()) << table.status();
    return Rewriter(*std::move(table), std::nullopt, options);
  }
  static Rewriter MakePass(int64_t devices_per_host, int64_t slice_size = 0) {
    Rewriter::Options options;
    options.num_devices_per_host = devices_per_host;
    options.slice_size = slice_size;
    return MakePass(options);
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

TEST_F(PermuteBackendAssignerTest, OneHostRingGetsNvshmemStaysSync) {
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          ParseAndReturnVerifiedModule(kRing8, 1, 8));
  Rewriter pass = MakePass(8);
  TF_ASSERT_OK_AND_ASSIGN(bool changed, RunHloPass(&pass, module.get()));
  EXPECT_TRUE(changed);
  TF_ASSERT_OK_AND_ASSIGN(bool matched, RunFileCheck(module->ToString(), R"(
CHECK: %cp = f32[1024]{0} collective-permute(%p)
CHECK-SAME: "collective_backend_config":{{.*}}"backend":"NVSHMEM"
CHECK-NOT: collective-permute-start
)"));
  EXPECT_TRUE(matched);
}

TEST_F(PermuteBackendAssignerTest, RingAcrossHostsKeepsDefault) {
  EXPECT_EQ(PermuteBackend(kRing8, 8, MakePass(4)),
            CollectiveBackendConfig::DEFAULT);
}

TEST_F(PermuteBackendAssignerTest, DeviceReceivingNothingKeeps) {
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
    EXPECT_EQ(PermuteBackend(hlo, 4, MakePass(4)),
              CollectiveBackendConfig::DEFAULT)
        << pairs;
  }
}

TEST_F(PermuteBackendAssignerTest, InPlacePermuteIsLeftAlone) {
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
  Rewriter pass = MakePass(4);
  EXPECT_FALSE(RunHloPass(&pass, module.get()).value());
}

TEST_F(PermuteBackendAssignerTest, AsyncStartIsUpdatedInPlace) {
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
  Rewriter pass = MakePass(8);
  EXPECT_TRUE(RunHloPass(&pass, module.get()).value());
  TF_ASSERT_OK_AND_ASSIGN(bool matched, RunFileCheck(module->ToString(), R"(
CHECK: %s = {{.*}} collective-permute-start(%p)
CHECK-SAME: "is_sync":true
CHECK-SAME: "backend":"NVSHMEM"
CHECK: %d = f32[64]{0} collective-permute-done(%s)
)"));
  EXPECT_TRUE(matched);
}

TEST_F(PermuteBackendAssignerTest, SecondRunChangesNothing) {
  for (int64_t per_host : {8, 4}) {
    TF_ASSERT_OK_AND_ASSIGN(auto module,
                            ParseAndReturnVerifiedModule(kRing8, 1, 8));
    Rewriter pass = MakePass(per_host);
    EXPECT_TRUE(RunHloPass(&pass, module.get()).value());
    EXPECT_FALSE(RunHloPass(&pass, module.get()).value()) << per_host;
  }
}

TEST_F(PermuteBackendAssignerTest, RequestNamesBytesTypesAndFlag) {
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          ParseAndReturnVerifiedModule(kKvStep, 1, 8));
  module->mutable_config()
      .mutable_debug_options()
      .set_xla_gpu_use_memcpy_local_p2p(true);
  TF_ASSERT_OK_AND_ASSIGN(core::Topology topology,
                          MakePass(8).TopologyFor(*module));
  auto* permute = Cast<HloCollectivePermuteInstruction>(
      FindInstruction(module.get(), HloOpcode::kCollectivePermute));
  TF_ASSERT_OK_AND_ASSIGN(core::PermuteRequest request,
                          Rewriter::RequestFor(*permute, topology));
  EXPECT_EQ(request.bytes, 2 * 64 * 2 * 64 * 2);
  EXPECT_EQ(request.buffers, 2);
  EXPECT_EQ(request.element_types, (std::vector<std::string>{"bf16", "bf16"}));
  EXPECT_EQ(request.device_edges.size(), 8);
  EXPECT_EQ(request.team_size, 8);
  EXPECT_EQ(request.groups, 1);
  EXPECT_TRUE(request.memcpy_local_p2p);
}

TEST_F(PermuteBackendAssignerTest, PartitionRingOverReplicasKeeps) {
  // 2 replicas x 4 partitions: the thunk would take partition ids as PEs
  // 0..3 in both replicas, so the ring stays on NCCL.
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          ParseAndReturnVerifiedModule(kRing4, 2, 4));
  Rewriter pass = MakePass(8);
  ASSERT_TRUE(RunHloPass(&pass, module.get()).ok());
  EXPECT_EQ(BackendOf(module->entry_computation()->root_instruction()),
            CollectiveBackendConfig::DEFAULT);
  TF_ASSERT_OK_AND_ASSIGN(core::Topology topology, pass.TopologyFor(*module));
  TF_ASSERT_OK_AND_ASSIGN(
      core::PermuteRequest request,
      Rewriter::RequestFor(*Cast<HloCollectivePermuteInstruction>(
                               module->entry_computation()->root_instruction()),
                           topology));
  EXPECT_EQ(request.groups, 2);
}

TEST_F(PermuteBackendAssignerTest, TypesNvshmemDoesNotPutKeep) {
  // NVSHMEM puts f64, f32, f16, bf16, s32, s64, u32 and u64 only; one buffer
  // of another type keeps the whole permute on NCCL.
  for (const auto& [types, backend] : std::vector<
           std::pair<std::string, CollectiveBackendConfig::CollectiveBackend>>{
           {"bf16,bf16", CollectiveBackendConfig::NVSHMEM},
           {"u64,s32", CollectiveBackendConfig::NVSHMEM},
           {"f8e4m3fn,f8e4m3fn", CollectiveBackendConfig::DEFAULT},
           {"bf16,s8", CollectiveBackendConfig::DEFAULT},
           {"pred,f32", CollectiveBackendConfig::DEFAULT}}) {
    const std::vector<std::string> t = absl::StrSplit(types, ',');
    const std::string hlo = absl::StrReplaceAll(R"(
HloModule kv

ENTRY e {
  k = A[64] parameter(0)
  v = B[64] parameter(1)
  ROOT cp = (A[64], B[64]) collective-permute(k, v), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}
)",
                                                {{"A", t[0]}, {"B", t[1]}});
    EXPECT_EQ(PermuteBackend(hlo, 4, MakePass(4)), backend) << types;
  }
}

TEST_F(PermuteBackendAssignerTest, MemcpyLocalP2pKeeps) {
  // NVSHMEM's thunk refuses xla_gpu_use_memcpy_local_p2p at Initialize.
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          ParseAndReturnVerifiedModule(kRing8, 1, 8));
  module->mutable_config()
      .mutable_debug_options()
      .set_xla_gpu_use_memcpy_local_p2p(true);
  Rewriter pass = MakePass(8);
  ASSERT_TRUE(RunHloPass(&pass, module.get()).ok());
  EXPECT_EQ(BackendOf(module->entry_computation()->root_instruction()),
            CollectiveBackendConfig::DEFAULT);
}

TEST_F(PermuteBackendAssignerTest, NvshmemSetBeforeIsReplaced) {
  // As CollectiveBackendAssigner sets it for a shift, which would hang.
  constexpr char kShift[] = R"(
HloModule shift

ENTRY e {
  p = f32[1024] parameter(0)
  ROOT cp = f32[1024] collective-permute(p), channel_id=1,
    source_target_pairs={{0,1}},
    backend_config={"collective_backend_config":{"backend":"NVSHMEM"}}
}
)";
  EXPECT_EQ(PermuteBackend(kShift, 2, MakePass(2)),
            CollectiveBackendConfig::DEFAULT);
}

TEST_F(PermuteBackendAssignerTest, TopologyFromDevicesPerHost) {
  Rewriter::Options options;
  options.num_devices_per_host = 8;
  EXPECT_EQ(PermuteBackend(kRing8, 8, MakePass(options)),
            CollectiveBackendConfig::NVSHMEM);
  options.num_devices_per_host = 4;
  EXPECT_EQ(PermuteBackend(kRing8, 8, MakePass(options)),
            CollectiveBackendConfig::DEFAULT);
  // Two hosts of 4 in one NVLink domain of 8 (the slice size): still two
  // NVSHMEM_TEAM_SHARED teams as far as is established.
  options.slice_size = 8;
  EXPECT_EQ(PermuteBackend(kRing8, 8, MakePass(options)),
            CollectiveBackendConfig::DEFAULT);
  options.num_devices_per_host = 8;
  EXPECT_EQ(PermuteBackend(kRing8, 8, MakePass(options)),
            CollectiveBackendConfig::NVSHMEM);
}

TEST_F(PermuteBackendAssignerTest, SeveralGpusPerProcessKeep) {
  Rewriter::Options options;
  options.num_devices_per_host = 8;
  options.num_visible_devices_per_process = 8;
  EXPECT_EQ(PermuteBackend(kRing8, 8, MakePass(options)),
            CollectiveBackendConfig::DEFAULT);
  options.num_visible_devices_per_process = 1;
  EXPECT_EQ(PermuteBackend(kRing8, 8, MakePass(options)),
            CollectiveBackendConfig::NVSHMEM);
}

TEST_F(PermuteBackendAssignerTest, CollectivesGroupKeeps) {
  constexpr char kGroup[] = R"(
HloModule group

g {
  p = f32[1024] parameter(0)
  ROOT cp = f32[1024] collective-permute(p), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}

ENTRY e {
  p = f32[1024] parameter(0)
  ROOT c = f32[1024] call(p), to_apply=g,
    frontend_attributes={_collectives_group=""}
}
)";
  EXPECT_EQ(PermuteBackend(kGroup, 4, MakePass(4)),
            CollectiveBackendConfig::DEFAULT);
  EXPECT_EQ(PermuteBackend(kRing4, 4, MakePass(4)),
            CollectiveBackendConfig::NVSHMEM);
}

TEST_F(PermuteBackendAssignerTest, ConditionalBranchKeeps) {
  // Devices may take different branches, and the put would land at the
  // address of the sender's branch's buffer: NCCL under any branch, also
  // through a call.
  constexpr char kBranch[] = R"(
HloModule branch

inner {
  p = f32[1024] parameter(0)
  ROOT cp = f32[1024] collective-permute(p), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}

on_true {
  p = f32[1024] parameter(0)
  ROOT c = f32[1024] call(p), to_apply=inner
}

on_false {
  ROOT p = f32[1024] parameter(0)
}

ENTRY e {
  b = pred[] parameter(0)
  p = f32[1024] parameter(1)
  ROOT r = f32[1024] conditional(b, p, p), true_computation=on_true,
    false_computation=on_false
}
)";
  EXPECT_EQ(PermuteBackend(kBranch, 4, MakePass(4)),
            CollectiveBackendConfig::DEFAULT);
}

TEST_F(PermuteBackendAssignerTest, StepMeetsEveryPermuteWithItsFacts) {
  // A tool's step in place of the pass's own: it meets every permute in the
  // pass's order, the in-place one too, with the pass's request and place,
  // and what it returns is the pass's `changed`; the pass writes nothing.
  constexpr char kPlaces[] = R"(
HloModule places

g {
  p = f32[1024] parameter(0)
  ROOT cp.group = f32[1024] collective-permute(p), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}

on_true {
  p = f32[1024] parameter(0)
  ROOT cp.branch = f32[1024] collective-permute(p), channel_id=2,
    source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}

on_false {
  ROOT p = f32[1024] parameter(0)
}

ENTRY e {
  b = pred[] parameter(0)
  p = f32[1024] parameter(1)
  q = u32[4,1024] parameter(2)
  c0 = s32[] constant(0)
  i0 = (s32[], s32[]) tuple(c0, c0)
  offsets = ((s32[], s32[])) tuple(i0)
  cp.inplace = u32[4,1024] collective-permute(q, q, offsets, offsets),
    channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0}},
    slice_sizes={{1,1024}}
  cp.plain = f32[1024] collective-permute(p), channel_id=4,
    source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  c = f32[1024] call(cp.plain), to_apply=g,
    frontend_attributes={_collectives_group=""}
  r = f32[1024] conditional(b, c, c), true_computation=on_true,
    false_computation=on_false
  ROOT t = (f32[1024], u32[4,1024]) tuple(r, cp.inplace)
}
)";
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          ParseAndReturnVerifiedModule(kPlaces, 1, 4));
  // name -> (rewritable, under a branch, in a group, bytes, edges)
  std::vector<std::tuple<std::string, bool, bool, bool, int64_t, size_t>> met;
  Rewriter pass = MakePass(4);
  pass.set_permute_step([&](const core::Topology& topology,
                            Rewriter::PermuteSite& site) {
    EXPECT_EQ(topology.num_devices(), 4);
    met.emplace_back(std::string(site.permute->name()), site.rewritable,
                     site.under_conditional_branch, site.in_collectives_group,
                     site.request.bytes, site.request.device_edges.size());
    // The step changes cp.plain alone, and says so.
    if (site.permute->name() != "cp.plain") return absl::StatusOr<bool>(false);
    site.permute->set_frontend_attribute("_step", "seen");
    return absl::StatusOr<bool>(true);
  });
  TF_ASSERT_OK_AND_ASSIGN(bool changed, RunHloPass(&pass, module.get()));
  EXPECT_TRUE(changed);  // The step's answer for cp.plain.
  EXPECT_EQ(FindInstruction(module.get(), "cp.plain")
                ->get_frontend_attribute("_step")
                .value_or(""),
            "seen");
  using Met = std::tuple<std::string, bool, bool, bool, int64_t, size_t>;
  std::vector<Met> want = {
      Met{"cp.group", true, false, true, 4096, 4},
      Met{"cp.branch", true, true, false, 4096, 4},
      // Both buffers and the four s32 offsets.
      Met{"cp.inplace", false, false, false, 2 * 4 * 1024 * 4 + 4 * 4, 4},
      Met{"cp.plain", true, false, false, 4096, 4},
  };
  std::sort(met.begin(), met.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(met, want);
  for (const HloInstruction* instr :
       module->entry_computation()->instructions()) {
    if (instr->opcode() == HloOpcode::kCollectivePermute) {
      EXPECT_EQ(BackendOf(instr), CollectiveBackendConfig::DEFAULT)
          << instr->name();
    }
  }
}

TEST_F(PermuteBackendAssignerTest, TopologyFromDeviceAssignment) {
  // Hosts of 4 GPUs: the module's devices decide whether a 4-device ring
  // stays on one host, and NVSHMEM puts to partition p as PE p, the process
  // of device p: any other placement keeps NCCL.
  Rewriter::Options options;
  options.num_devices_per_host = 4;
  for (const auto& [devices, backend] :
       std::vector<std::pair<std::vector<int>,
                             CollectiveBackendConfig::CollectiveBackend>>{
           {{0, 1, 2, 3}, CollectiveBackendConfig::NVSHMEM},
           {{4, 5, 6, 7}, CollectiveBackendConfig::DEFAULT},
           {{1, 0, 2, 3}, CollectiveBackendConfig::DEFAULT},
           {{0, 4, 1, 5}, CollectiveBackendConfig::DEFAULT}}) {
    DeviceAssignment assignment(1, 4);
    for (int p = 0; p < 4; ++p) assignment(0, p) = devices[p];
    TF_ASSERT_OK_AND_ASSIGN(
        auto module, ParseAndReturnVerifiedModule(kRing4, 1, 4, assignment));
    Rewriter pass = MakePass(options);
    ASSERT_TRUE(RunHloPass(&pass, module.get()).ok());
    EXPECT_EQ(BackendOf(module->entry_computation()->root_instruction()),
              backend);
  }
}

TEST_F(PermuteBackendAssignerTest, TopologyTooSmallIsAnError) {
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          ParseAndReturnVerifiedModule(kRing8, 1, 8));
  // A topology given to the constructor (as a tool does) that is smaller than
  // the module.
  TF_ASSERT_OK_AND_ASSIGN(core::Topology four,
                          core::Topology::Create(1, 1, 4, 0, {}));
  Rewriter pass(core::DefaultCostTable(), four, {});
  EXPECT_EQ(RunHloPass(&pass, module.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(PermuteBackendAssignerTest, CreateReadsTheCostTableFile) {
  std::string path = ::testing::TempDir() + "/favoured_costs.txtpb";
  ASSERT_TRUE(
      tsl::WriteStringToFile(tsl::Env::Default(), path, kNvshmemFavoured).ok());
  Rewriter::Options options;
  options.num_devices_per_host = 8;
  options.cost_table_path = path;
  TF_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Rewriter> pass,
                          Rewriter::Create(options));
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          ParseAndReturnVerifiedModule(kRing8, 1, 8));
  EXPECT_TRUE(RunHloPass(pass.get(), module.get()).value());
  EXPECT_EQ(BackendOf(module->entry_computation()->root_instruction()),
            CollectiveBackendConfig::NVSHMEM);
}

TEST_F(PermuteBackendAssignerTest, CreateRejectsBadOptions) {
  Rewriter::Options negative, bad_slice, missing_file;
  negative.num_devices_per_host = -1;
  bad_slice.num_devices_per_host = 4;
  bad_slice.slice_size = 6;
  missing_file.cost_table_path = ::testing::TempDir() + "/no_such_table.txtpb";
  for (const auto& [options, code] :
       std::vector<std::pair<Rewriter::Options, absl::StatusCode>>{
           {negative, absl::StatusCode::kInvalidArgument},
           {bad_slice, absl::StatusCode::kInvalidArgument},
           {missing_file, absl::StatusCode::kNotFound}}) {
    EXPECT_EQ(Rewriter::Create(options).status().code(), code);
  }
}

TEST_F(PermuteBackendAssignerTest, CombinedKvStepOnOneHost) {
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          ParseAndReturnVerifiedModule(kKvStep, 1, 8));
  Rewriter pass = MakePass(8);
  EXPECT_TRUE(RunHloPass(&pass, module.get()).value());
  TF_ASSERT_OK_AND_ASSIGN(bool matched, RunFileCheck(module->ToString(), R"(
CHECK: collective-permute(%k, %v)
CHECK-SAME: "backend":"NVSHMEM"
)"));
  EXPECT_TRUE(matched);
}

TEST_F(PermuteBackendAssignerTest, LoopPermuteStaysInsideAHost) {
  // The permute inside a while body: NCCL across two hosts, and across two
  // hosts of one NVLink domain, which NVSHMEM_TEAM_SHARED is not known to
  // span; NVSHMEM on one host.
  constexpr char kLoop[] = R"(
HloModule loop

body {
  p = (s32[], bf16[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  next = s32[] add(i, one)
  kv = bf16[64] get-tuple-element(p), index=1
  cp = bf16[64] collective-permute(kv), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}
  ROOT t = (s32[], bf16[64]) tuple(next, cp)
}

cond {
  p = (s32[], bf16[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(8)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY e {
  zero = s32[] constant(0)
  kv = bf16[64] parameter(0)
  init = (s32[], bf16[64]) tuple(zero, kv)
  ROOT w = (s32[], bf16[64]) while(init), condition=cond, body=body
}
)";
  // Hosts of 4, alone or in an NVLink domain of 8; one host of 8.
  for (const auto& [per_host, slice, backend] :
       std::vector<std::tuple<int64_t, int64_t,
                              CollectiveBackendConfig::CollectiveBackend>>{
           {4, 0, CollectiveBackendConfig::DEFAULT},
           {4, 8, CollectiveBackendConfig::DEFAULT},
           {8, 0, CollectiveBackendConfig::NVSHMEM}}) {
    TF_ASSERT_OK_AND_ASSIGN(auto module,
                            ParseAndReturnVerifiedModule(kLoop, 1, 8));
    Rewriter pass = MakePass(per_host, slice);
    ASSERT_TRUE(RunHloPass(&pass, module.get()).ok());
    EXPECT_EQ(BackendOf(FindInstruction(module.get(), "cp")), backend)
        << per_host << " " << slice;
  }
}

TEST_F(PermuteBackendAssignerTest, RingsInsideEachHostGetNvshmem) {
  // Two hosts of 4, a ring inside each: every NVSHMEM_TEAM_SHARED team has a
  // source for each member.
  constexpr char kTwoRings[] = R"(
HloModule rings

ENTRY e {
  p = f32[1024] parameter(0)
  ROOT cp = f32[1024] collective-permute(p), channel_id=1,
    source_target_pairs={{0,1},{1,2},{2,3},{3,0},{4,5},{5,6},{6,7},{7,4}}
}
)";
  EXPECT_EQ(PermuteBackend(kTwoRings, 8, MakePass(4)),
            CollectiveBackendConfig::NVSHMEM);
}

TEST_F(PermuteBackendAssignerTest, AsTheCompilerRunsIt) {
  // The GPU compiler's order: the pass from its options, then
  // AsyncCollectiveCreator, which carries the backend onto the start; an
  // all-reduce keeps the backend CollectiveBackendAssigner gave it.
  constexpr char kStep[] = R"(
HloModule step

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY e {
  p = f32[1024] parameter(0)
  ar = f32[1024] all-reduce(p), channel_id=1, replica_groups={{0,1,2,3}},
    use_global_device_ids=true, to_apply=add,
    backend_config={"collective_backend_config":{"backend":"NVSHMEM"}}
  ROOT cp = f32[1024] collective-permute(ar), channel_id=2,
    source_target_pairs={{0,1},{1,2},{2,3},{3,0}},
    backend_config={"collective_backend_config":{"backend":"NVSHMEM"}}
}
)";
  std::string path = ::testing::TempDir() + "/compiler_costs.txtpb";
  ASSERT_TRUE(
      tsl::WriteStringToFile(tsl::Env::Default(), path, kNccLFavoured).ok());
  Rewriter::Options options;
  options.num_devices_per_host = 4;
  options.cost_table_path = path;
  TF_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Rewriter> rewriter,
                          Rewriter::Create(options));
  HloPassPipeline pipeline("post-fusion");
  pipeline.AddPass(std::move(rewriter));
  AsyncCollectiveCreator::CollectiveCreatorConfig config;
  config.convert_collective_permute = HloPredicateTrue;
  pipeline.AddPass<AsyncCollectiveCreator>(config);
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          ParseAndReturnVerifiedModule(kStep, 1, 4));
  EXPECT_TRUE(RunHloPass(&pipeline, module.get()).value());
  TF_ASSERT_OK_AND_ASSIGN(bool matched, RunFileCheck(module->ToString(), R"(
CHECK: %ar = {{.*}} all-reduce(%p)
CHECK-SAME: "backend":"NVSHMEM"
CHECK: collective-permute-start(%ar)
CHECK-SAME: "backend":"DEFAULT"
)"));
  EXPECT_TRUE(matched);
}

}  // namespace
}  // namespace gpu
}  // namespace xla
