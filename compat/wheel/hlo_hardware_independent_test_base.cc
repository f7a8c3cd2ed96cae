// The stand-in test base and verified module (see
// compat/wheel/xla/hlo/testlib/hlo_hardware_independent_test_base.h).

#include "xla/hlo/testlib/hlo_hardware_independent_test_base.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xla/debug_options_flags.h"
#include "xla/hlo/testlib/verified_hlo_module.h"
#include "xla/shape_util.h"
#include "xla/tsl/platform/errors.h"
#include "xla/tsl/platform/statusor.h"

namespace xla {

absl::Status VerifiedHloModule::ParseHloStringAndVerifyModule(
    absl::string_view str, const HloParserOptions& options) {
  if (computation_count() != 0) {
    return absl::FailedPreconditionError("the module is not empty");
  }
  TF_RETURN_IF_ERROR(
      HloParser::CreateHloParserForTests(str, options)->Run(this));
  return Verify();
}

void VerifiedHloModule::VerifyOrAddFailure(absl::string_view message) {
  absl::Status status = Verify();
  if (!status.ok()) {
    ADD_FAILURE() << "HloVerifier failed on module " << name() << " ("
                  << message << "): " << status;
  }
}

absl::Status VerifiedHloModule::Verify() {
  if (computation_count() == 0) return absl::OkStatus();
  return verifier_.Run(this).status();
}

HloComputation* HloHardwareIndependentTestBase::FindComputation(
    HloModule* module, absl::string_view name) {
  for (HloComputation* computation : module->computations()) {
    if (computation->name() == name) return computation;
  }
  return nullptr;
}

HloInstruction* HloHardwareIndependentTestBase::FindInstruction(
    const HloModule* module, absl::string_view name) {
  for (const HloComputation* computation : module->computations()) {
    for (HloInstruction* instr : computation->instructions()) {
      if (instr->name() == name) return instr;
    }
  }
  return nullptr;
}

HloInstruction* HloHardwareIndependentTestBase::FindInstruction(
    const HloModule* module, HloOpcode opcode) {
  std::vector<HloInstruction*> found = FindInstructions(module, opcode);
  return found.empty() ? nullptr : found.front();
}

std::vector<HloInstruction*> HloHardwareIndependentTestBase::FindInstructions(
    const HloModule* module, HloOpcode opcode) {
  std::vector<HloInstruction*> found;
  for (const HloComputation* computation : module->computations()) {
    for (HloInstruction* instr : computation->instructions()) {
      if (instr->opcode() == opcode) found.push_back(instr);
    }
  }
  return found;
}

DeviceAssignment HloHardwareIndependentTestBase::GetDefaultDeviceAssignment(
    int64_t replica_count, int64_t num_partitions) {
  DeviceAssignment assignment(replica_count, num_partitions);
  assignment.FillIota(0);
  return assignment;
}

DebugOptions HloHardwareIndependentTestBase::GetDebugOptionsForTest() const {
  return GetDebugOptionsFromFlags();
}

HloModuleConfig HloHardwareIndependentTestBase::GetModuleConfigForTest(
    int64_t replica_count, int64_t num_partitions,
    std::optional<DeviceAssignment> device_assignment) const {
  HloModuleConfig config;
  config.set_debug_options(GetDebugOptionsForTest());
  config.set_replica_count(replica_count);
  config.set_num_partitions(num_partitions);
  config.set_static_device_assignment(
      device_assignment.has_value()
          ? *device_assignment
          : GetDefaultDeviceAssignment(replica_count, num_partitions));
  return config;
}

std::string HloHardwareIndependentTestBase::TestName() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info != nullptr ? info->name() : "unknown_test_name";
}

std::unique_ptr<VerifiedHloModule>
HloHardwareIndependentTestBase::CreateNewVerifiedModule(
    const std::string& name, int64_t replica_count) const {
  return std::make_unique<VerifiedHloModule>(
      name, GetModuleConfigForTest(replica_count), verifier_layout_sensitive_,
      allow_mixed_precision_in_hlo_verifier_, ShapeUtil::ByteSizeOfElements);
}

absl::StatusOr<std::unique_ptr<VerifiedHloModule>>
HloHardwareIndependentTestBase::ParseAndReturnVerifiedModule(
    absl::string_view hlo_text, int64_t replica_count, int64_t num_partitions,
    std::optional<DeviceAssignment> device_assignment) const {
  return ParseAndReturnVerifiedModule(
      hlo_text,
      GetModuleConfigForTest(replica_count, num_partitions, device_assignment));
}

absl::StatusOr<std::unique_ptr<VerifiedHloModule>>
HloHardwareIndependentTestBase::ParseAndReturnVerifiedModule(
    absl::string_view hlo_text, const HloModuleConfig& config,
    const HloParserOptions& parser_options) const {
  HloModuleConfig with_assignment = config;
  if (!config.has_static_device_assignment()) {
    with_assignment.set_static_device_assignment(GetDefaultDeviceAssignment(
        config.replica_count(), config.num_partitions()));
  }
  auto module = std::make_unique<VerifiedHloModule>(
      TestName(), with_assignment, verifier_layout_sensitive_,
      allow_mixed_precision_in_hlo_verifier_, ShapeUtil::ByteSizeOfElements);
  TF_RETURN_IF_ERROR(
      module->ParseHloStringAndVerifyModule(hlo_text, parser_options));
  return module;
}

absl::StatusOr<bool> HloHardwareIndependentTestBase::RunHloPass(
    HloPassInterface* hlo_pass, HloModule* module) {
  const std::string before = module->ToProto().ShortDebugString();
  TF_ASSIGN_OR_RETURN(bool changed, hlo_pass->Run(module));
  const std::string after = module->ToProto().ShortDebugString();
  if (changed) {
    EXPECT_NE(after, before) << hlo_pass->name() << " says it changed the "
                             << "module, which is the same";
  } else {
    EXPECT_EQ(after, before) << hlo_pass->name() << " says it did not change "
                             << "the module, which differs";
  }
  return changed;
}

}  // namespace xla
