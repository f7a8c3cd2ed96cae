#include "nvshmem_opt/backend_config_json.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/parser/hlo_parser.h"
#include "xla/service/gpu/backend_configs.pb.h"

namespace nvshmem_opt {
namespace backend_config_json_test {
namespace {

namespace core = ::xla::gpu::backend_selection;

// A permute carrying `attributes` (", backend_config=..." etc.), as text.
std::unique_ptr<xla::HloModule> PermuteModule(absl::string_view attributes) {
  const std::string text = absl::StrCat(R"(HloModule m, num_partitions=2

ENTRY %e (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %cp = f32[8]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,0}})",
                                        attributes, "\n}\n");
  absl::StatusOr<std::unique_ptr<xla::HloModule>> module =
      xla::ParseAndReturnUnverifiedModule(text);
  EXPECT_TRUE(module.ok()) << module.status();
  return module.ok() ? *std::move(module) : nullptr;
}

xla::HloInstruction* Permute(xla::HloModule& module) {
  return module.entry_computation()->root_instruction();
}

// What jax 0.10.2's XLA writes on a permute after optimizations: fields the
// wheel's GpuBackendConfig does not know (collectives_mode, kernel_strategy).
constexpr char kJax0102Config[] =
    R"({"operation_queue_id":"0","collective_backend_config":{"is_sync":true,)"
    R"("is_pipelined":false,"backend":"DEFAULT","collectives_mode":)"
    R"("COLLECTIVES_MODE_INVALID","kernel_strategy":"KERNEL_STRATEGY_DEFAULT"},)"
    R"("force_earliest_schedule":false,"reification_cost":[],)"
    R"("device_type":"DEVICE_TYPE_INVALID"})";

TEST(CheckBackendConfigJsonTest, EmptyAndObjectsAreFine) {
  EXPECT_TRUE(CheckBackendConfigJson("").ok());
  EXPECT_TRUE(CheckBackendConfigJson("{}").ok());
  EXPECT_TRUE(CheckBackendConfigJson(kJax0102Config).ok());
  EXPECT_TRUE(
      CheckBackendConfigJson(R"( { "a" : [1, {"b": null}], "c": -1.5e3 } )")
          .ok());
}

// XLA's parser takes any brace-balanced text as a backend_config; the message
// says where it stops being JSON, 1-based.
TEST(CheckBackendConfigJsonTest, SaysWhereTheTextIsNotJson) {
  absl::Status status = CheckBackendConfigJson(R"({"a":1))");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "backend_config is not valid JSON: ')' at character 7 of it");

  status = CheckBackendConfigJson(R"({"a":)");
  EXPECT_EQ(status.message(),
            "backend_config is not valid JSON: the end (it stops early) of it");

  status = CheckBackendConfigJson("{\x01}");
  EXPECT_EQ(status.message(),
            "backend_config is not valid JSON: byte 0x01 at character 2 of it");

  status = CheckBackendConfigJson("[1]");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "backend_config is JSON but not an object ({...})");
}

// Absurd nesting is refused, not recursed into.
TEST(CheckBackendConfigJsonTest, DeepNestingIsRefused) {
  const std::string deep = absl::StrCat("{\"a\":", std::string(100, '['),
                                        std::string(100, ']'), "}");
  EXPECT_EQ(CheckBackendConfigJson(deep).code(),
            absl::StatusCode::kInvalidArgument);
}

// Only the backend changes: every field the wheel does not know, and the
// order of all of them, is kept.
TEST(SetBackendInJsonTest, KeepsFieldsTheWheelDoesNotKnow) {
  auto module =
      PermuteModule(absl::StrCat(", backend_config=", kJax0102Config));
  ASSERT_NE(module, nullptr);
  absl::StatusOr<bool> changed =
      SetBackendInJson(Permute(*module), core::Backend::kNvshmem);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(
      Permute(*module)->raw_backend_config_string(),
      R"({"operation_queue_id":"0","collective_backend_config":{"is_sync":true,)"
      R"("is_pipelined":false,"backend":"NVSHMEM","collectives_mode":)"
      R"("COLLECTIVES_MODE_INVALID","kernel_strategy":"KERNEL_STRATEGY_DEFAULT"},)"
      R"("force_earliest_schedule":false,"reification_cost":[],)"
      R"("device_type":"DEVICE_TYPE_INVALID"})");
  // NVSHMEM has no collectives mode attribute to write.
  EXPECT_FALSE(
      Permute(*module)->get_frontend_attribute("_xla_collectives_mode"));
}

// A permute without a config gets the one field, in the JSON that the wheel's
// own GpuBackendConfig reads; writing it again changes nothing.
TEST(SetBackendInJsonTest, EmptyConfigAndIdempotence) {
  auto module = PermuteModule("");
  ASSERT_NE(module, nullptr);
  xla::HloInstruction* cp = Permute(*module);
  absl::StatusOr<bool> changed = SetBackendInJson(cp, core::Backend::kNvshmem);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(cp->raw_backend_config_string(),
            R"({"collective_backend_config":{"backend":"NVSHMEM"}})");
  auto config = cp->backend_config<xla::gpu::GpuBackendConfig>();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->collective_backend_config().backend(),
            xla::gpu::CollectiveBackendConfig::NVSHMEM);

  changed = SetBackendInJson(cp, core::Backend::kNvshmem);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(cp->raw_backend_config_string(),
            R"({"collective_backend_config":{"backend":"NVSHMEM"}})");
}

// Peer memory: DEFAULT with collectives_mode after the backend, and the mode
// attribute with the tools' own beside it (their choice, not a user's mark).
TEST(SetBackendInJsonTest, PeerWritesModeAndAttributes) {
  auto module = PermuteModule("");
  ASSERT_NE(module, nullptr);
  xla::HloInstruction* cp = Permute(*module);
  ASSERT_TRUE(SetBackendInJson(cp, core::Backend::kPeer).ok());
  EXPECT_EQ(cp->raw_backend_config_string(),
            R"({"collective_backend_config":{"backend":"DEFAULT",)"
            R"("collectives_mode":"COLLECTIVES_PEER_MEMORY"}})");
  EXPECT_EQ(cp->get_frontend_attribute("_xla_collectives_mode"), "peer");
  EXPECT_EQ(cp->get_frontend_attribute("_nvshmem_opt_mode"), "peer");

  // Back to NCCL: the mode reset to unset, the attribute to private (NCCL's
  // path), since one is there.
  absl::StatusOr<bool> changed = SetBackendInJson(cp, core::Backend::kNccl);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(cp->raw_backend_config_string(),
            R"({"collective_backend_config":{"backend":"DEFAULT",)"
            R"("collectives_mode":"COLLECTIVES_MODE_INVALID"}})");
  EXPECT_EQ(cp->get_frontend_attribute("_xla_collectives_mode"), "private");
  EXPECT_EQ(cp->get_frontend_attribute("_nvshmem_opt_mode"), "private");
}

// A config that omits the backend (proto3 JSON may leave out a default):
// the backend goes first and the mode right after it, before the fields that
// were there.
TEST(SetBackendInJsonTest, MissingFieldsGoInTheirPlace) {
  auto module = PermuteModule(
      R"(, backend_config={"operation_queue_id":"0","collective_backend_config":{"is_sync":true,"is_pipelined":false}})");
  ASSERT_NE(module, nullptr);
  xla::HloInstruction* cp = Permute(*module);
  ASSERT_TRUE(SetBackendInJson(cp, core::Backend::kPeer).ok());
  EXPECT_EQ(
      cp->raw_backend_config_string(),
      R"({"operation_queue_id":"0","collective_backend_config":)"
      R"({"backend":"DEFAULT","collectives_mode":)"
      R"("COLLECTIVES_PEER_MEMORY","is_sync":true,"is_pipelined":false}})");
}

// NCCL writes no mode and no attribute where none was.
TEST(SetBackendInJsonTest, NcclAddsNoMode) {
  auto module = PermuteModule("");
  ASSERT_NE(module, nullptr);
  xla::HloInstruction* cp = Permute(*module);
  ASSERT_TRUE(SetBackendInJson(cp, core::Backend::kNccl).ok());
  EXPECT_EQ(cp->raw_backend_config_string(),
            R"({"collective_backend_config":{"backend":"DEFAULT"}})");
  EXPECT_FALSE(cp->get_frontend_attribute("_xla_collectives_mode"));
}

// White space goes; members stay in their order.
TEST(SetBackendInJsonTest, SymmetricOnSpacedConfig) {
  auto module = PermuteModule(
      R"(, backend_config={ "collective_backend_config" : { "backend" : "DEFAULT" } , "x" : [1, 2] })");
  ASSERT_NE(module, nullptr);
  xla::HloInstruction* cp = Permute(*module);
  ASSERT_TRUE(SetBackendInJson(cp, core::Backend::kSymmetric).ok());
  EXPECT_EQ(cp->raw_backend_config_string(),
            R"({"collective_backend_config":{"backend":"DEFAULT",)"
            R"("collectives_mode":"COLLECTIVES_SYMMETRIC_MEMORY"},"x":[1,2]})");
  EXPECT_EQ(cp->get_frontend_attribute("_xla_collectives_mode"), "symmetric");
}

// Configs this cannot edit: an error naming the op, and the config as it was.
TEST(SetBackendInJsonTest, RefusesConfigsItCannotEdit) {
  auto module = PermuteModule(R"(, backend_config={"a":1,})");
  ASSERT_NE(module, nullptr);
  absl::StatusOr<bool> changed =
      SetBackendInJson(Permute(*module), core::Backend::kNvshmem);
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(changed.status().message(),
            "cp: backend_config is not valid JSON: '}' at character 8 of it");
  EXPECT_EQ(Permute(*module)->raw_backend_config_string(), R"({"a":1,})");

  module = PermuteModule(R"(, backend_config={"collective_backend_config":3})");
  ASSERT_NE(module, nullptr);
  changed = SetBackendInJson(Permute(*module), core::Backend::kNvshmem);
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().message(),
            "cp: collective_backend_config is not an object");
}

std::optional<core::Backend> BackendOf(absl::string_view attributes) {
  auto module = PermuteModule(attributes);
  if (module == nullptr) return std::nullopt;
  return BackendInJson(*Permute(*module));
}

// The backend as the runtime reads it from the config.
TEST(BackendInJsonTest, ReadsEachBackend) {
  EXPECT_EQ(BackendOf(""), core::Backend::kNccl);
  EXPECT_EQ(BackendOf(absl::StrCat(", backend_config=", kJax0102Config)),
            core::Backend::kNccl);
  EXPECT_EQ(BackendOf(R"(, backend_config={"operation_queue_id":"0"})"),
            core::Backend::kNccl);
  EXPECT_EQ(
      BackendOf(
          R"(, backend_config={"collective_backend_config":{"backend":"NVSHMEM"}})"),
      core::Backend::kNvshmem);
  EXPECT_EQ(
      BackendOf(
          R"(, backend_config={"collective_backend_config":{"backend":"DEFAULT","collectives_mode":"COLLECTIVES_PEER_MEMORY"}})"),
      core::Backend::kPeer);
  EXPECT_EQ(
      BackendOf(
          R"(, backend_config={"collective_backend_config":{"collectives_mode":"COLLECTIVES_SYMMETRIC_MEMORY"}})"),
      core::Backend::kSymmetric);
}

// Private memory is no backend of the core's; a config that is not JSON names
// none.
TEST(BackendInJsonTest, NoneForUnknownModesAndBadJson) {
  EXPECT_EQ(
      BackendOf(
          R"(, backend_config={"collective_backend_config":{"collectives_mode":"COLLECTIVES_PRIVATE_MEMORY"}})"),
      std::nullopt);
  EXPECT_EQ(BackendOf(R"(, backend_config={"a":1,})"), std::nullopt);
}

}  // namespace
}  // namespace backend_config_json_test
}  // namespace nvshmem_opt
