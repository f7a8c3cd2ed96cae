// Out-of-tree stand-in for XLA's
// xla/hlo/testlib/hlo_hardware_independent_test_base.h, which the tensorflow
// wheel does not ship: the part of its API that the pass tests use, with the
// same names, signatures and behaviour (modules parsed and verified with a
// default device assignment; RunHloPass checks the pass's "changed" against
// the module). Only the CMake build uses it; in an XLA tree the test links
// XLA's own.

#ifndef XLA_HLO_TESTLIB_HLO_HARDWARE_INDEPENDENT_TEST_BASE_H_
#define XLA_HLO_TESTLIB_HLO_HARDWARE_INDEPENDENT_TEST_BASE_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/ir/hlo_opcode.h"
#include "xla/hlo/parser/hlo_parser.h"
#include "xla/hlo/pass/hlo_pass_interface.h"
#include "xla/hlo/testlib/verified_hlo_module.h"
#include "xla/service/computation_placer.h"
#include "xla/service/hlo_module_config.h"
#include "xla/xla.pb.h"

namespace xla {

class HloHardwareIndependentTestBase : public ::testing::Test {
 public:
  static HloComputation* FindComputation(HloModule* module,
                                         absl::string_view name);
  static HloInstruction* FindInstruction(const HloModule* module,
                                         absl::string_view name);
  static HloInstruction* FindInstruction(const HloModule* module,
                                         HloOpcode opcode);
  static std::vector<HloInstruction*> FindInstructions(const HloModule* module,
                                                       HloOpcode opcode);

 protected:
  explicit HloHardwareIndependentTestBase(
      bool verifier_layout_sensitive = false,
      bool allow_mixed_precision_in_hlo_verifier = true)
      : verifier_layout_sensitive_(verifier_layout_sensitive),
        allow_mixed_precision_in_hlo_verifier_(
            allow_mixed_precision_in_hlo_verifier) {}

  static DeviceAssignment GetDefaultDeviceAssignment(int64_t replica_count,
                                                     int64_t num_partitions);

  absl::StatusOr<std::unique_ptr<VerifiedHloModule>>
  ParseAndReturnVerifiedModule(
      absl::string_view hlo_text, int64_t replica_count = 1,
      int64_t num_partitions = 1,
      std::optional<DeviceAssignment> device_assignment = std::nullopt) const;
  absl::StatusOr<std::unique_ptr<VerifiedHloModule>>
  ParseAndReturnVerifiedModule(
      absl::string_view hlo_text, const HloModuleConfig& config,
      const HloParserOptions& parser_options = HloParserOptions()) const;

  std::unique_ptr<VerifiedHloModule> CreateNewVerifiedModule(
      const std::string& name = TestName(), int64_t replica_count = 1) const;

  static absl::StatusOr<bool> RunHloPass(HloPassInterface* hlo_pass,
                                         HloModule* module);
  static absl::StatusOr<bool> RunHloPass(HloPassInterface& hlo_pass,
                                         HloModule* module) {
    return RunHloPass(&hlo_pass, module);
  }
  static absl::StatusOr<bool> RunHloPass(HloPassInterface&& hlo_pass,
                                         HloModule* module) {
    return RunHloPass(&hlo_pass, module);
  }

  virtual DebugOptions GetDebugOptionsForTest() const;

  HloModuleConfig GetModuleConfigForTest(
      int64_t replica_count = 1, int64_t num_partitions = 1,
      std::optional<DeviceAssignment> device_assignment = std::nullopt) const;

  static std::string TestName();

 private:
  bool verifier_layout_sensitive_;
  bool allow_mixed_precision_in_hlo_verifier_;
};

}  // namespace xla

#endif  // XLA_HLO_TESTLIB_HLO_HARDWARE_INDEPENDENT_TEST_BASE_H_
