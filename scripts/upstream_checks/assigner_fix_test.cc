// Runs CollectiveBackendAssigner as patched by the series (0004), compiled from
// the patched XLA tree against the tensorflow wheel's XLA libraries; the
// binary's own RunImpl replaces the wheel's. scripts/check_patches_upstream.sh
// builds and runs it. Each process drives one device, the case in which the
// unpatched assigner gives NVSHMEM to every collective-permute.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "xla/backends/gpu/transforms/collectives/collective_backend_assigner.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/parser/hlo_parser.h"
#include "xla/service/gpu/backend_configs.pb.h"
#include "xla/stream_executor/cuda/cuda_compute_capability.h"

namespace xla::gpu {
namespace {

// The backend the assigner gives a permute with `pairs` among `partitions`.
std::string AssignedBackend(const std::string& pairs, int partitions) {
  const std::string text = R"(
    HloModule m
    ENTRY main {
      p0 = u32[1024,1024] parameter(0)
      ROOT result = u32[1024,1024] collective-permute(p0), channel_id=1,
        source_target_pairs=)" +
                           pairs + "\n    }\n";
  absl::StatusOr<std::unique_ptr<HloModule>> module =
      ParseAndReturnUnverifiedModule(text);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return "parse error";
  (*module)->mutable_config().set_num_partitions(partitions);
  CollectiveBackendAssigner assigner(se::CudaComputeCapability(9, 0),
                                     /*num_visible_devices_per_process=*/1);
  absl::StatusOr<bool> changed = assigner.Run(module->get());
  EXPECT_TRUE(changed.ok()) << changed.status();
  absl::StatusOr<GpuBackendConfig> config =
      (*module)
          ->entry_computation()
          ->root_instruction()
          ->backend_config<GpuBackendConfig>();
  EXPECT_TRUE(config.ok()) << config.status();
  return CollectiveBackendConfig::CollectiveBackend_Name(
      config->collective_backend_config().backend());
}

TEST(CollectiveBackendAssignerFix, DeviceWithoutSourceKeepsDefault) {
  EXPECT_EQ(AssignedBackend("{{0,1},{1,2},{2,3}}", 4), "DEFAULT");
  EXPECT_EQ(AssignedBackend("{{0,1},{1,0}}", 4), "DEFAULT");
  EXPECT_EQ(AssignedBackend("{{0,1}}", 2), "DEFAULT");
  // Ids beyond the config's count are devices too (as the verifier counts).
  EXPECT_EQ(AssignedBackend("{{0,1}}", 1), "DEFAULT");
}

TEST(CollectiveBackendAssignerFix, EveryDeviceSendingKeepsNvshmem) {
  EXPECT_EQ(AssignedBackend("{{0,1},{1,2},{2,3},{3,0}}", 4), "NVSHMEM");
  EXPECT_EQ(AssignedBackend("{{0,1},{1,0}}", 1), "NVSHMEM");
}

}  // namespace
}  // namespace xla::gpu
