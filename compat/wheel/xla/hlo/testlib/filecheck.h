// Out-of-tree stand-in for XLA's xla/hlo/testlib/filecheck.h, which the
// tensorflow wheel does not ship: the same function, running LLVM's FileCheck
// binary ($FILECHECK, else the first of Debian's
// /usr/lib/llvm-*/bin/FileCheck). Only the CMake build uses it; in an XLA tree
// the test links XLA's own.

#ifndef XLA_HLO_TESTLIB_FILECHECK_H_
#define XLA_HLO_TESTLIB_FILECHECK_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace xla {

// Runs FileCheck with `pattern` over `input`; true when every check matched.
// An error when FileCheck cannot run.
absl::StatusOr<bool> RunFileCheck(const std::string& input,
                                  absl::string_view pattern);

}  // namespace xla

#endif  // XLA_HLO_TESTLIB_FILECHECK_H_
