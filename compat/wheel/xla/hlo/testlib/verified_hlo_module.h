// Out-of-tree stand-in for XLA's xla/hlo/testlib/verified_hlo_module.h, which
// the tensorflow wheel does not ship: an HloModule that the HLO verifier
// checks when it is parsed and again when it goes away. Only the CMake build
// uses it; in an XLA tree the test links XLA's own.

#ifndef XLA_HLO_TESTLIB_VERIFIED_HLO_MODULE_H_
#define XLA_HLO_TESTLIB_VERIFIED_HLO_MODULE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/parser/hlo_parser.h"
#include "xla/service/hlo_module_config.h"
#include "xla/service/hlo_verifier.h"
#include "xla/shape.h"

namespace xla {

class VerifiedHloModule : public HloModule {
 public:
  VerifiedHloModule(const std::string& name, const HloModuleConfig& config,
                    bool verifier_layout_sensitive,
                    bool allow_mixed_precision_in_hlo_verifier,
                    std::function<int64_t(const Shape&)> shape_size_function,
                    HloPredicate instruction_can_change_layout_func = {})
      : HloModule(name, config),
        verifier_(verifier_layout_sensitive,
                  allow_mixed_precision_in_hlo_verifier,
                  instruction_can_change_layout_func, shape_size_function) {}

  ~VerifiedHloModule() override { VerifyOrAddFailure("in destructor"); }

  // Parses `str` into this (empty) module, then verifies it.
  absl::Status ParseHloStringAndVerifyModule(
      absl::string_view str,
      const HloParserOptions& options = HloParserOptions());

  // Verifies the module; a gtest failure when the verifier rejects it.
  void VerifyOrAddFailure(absl::string_view message);

  absl::Status Verify();

 private:
  HloVerifier verifier_;
};

}  // namespace xla

#endif  // XLA_HLO_TESTLIB_VERIFIED_HLO_MODULE_H_
