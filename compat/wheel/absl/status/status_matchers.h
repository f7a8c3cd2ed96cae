// Out-of-tree build only: absl's Status test matchers, which the tensorflow
// wheel does not ship (it has no test headers). Same names and meaning as
// absl's: IsOk(), IsOkAndHolds(m), StatusIs(code) and StatusIs(code, m).
#ifndef WHEEL_COMPAT_ABSL_STATUS_STATUS_MATCHERS_H_
#define WHEEL_COMPAT_ABSL_STATUS_STATUS_MATCHERS_H_

#include <gmock/gmock.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace absl_testing {
namespace wheel_compat {

inline const absl::Status& StatusOf(const absl::Status& status) {
  return status;
}
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

}  // namespace wheel_compat

MATCHER(IsOk, negation ? "is not OK" : "is OK") {
  const absl::Status& status = wheel_compat::StatusOf(arg);
  if (!status.ok()) *result_listener << "status: " << status;
  return status.ok();
}

MATCHER_P(IsOkAndHolds, inner, "is OK and holds a matching value") {
  if (!arg.ok()) {
    *result_listener << "status: " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(inner, *arg, result_listener);
}

MATCHER_P(StatusIs, code, "has a matching status code") {
  const absl::Status& status = wheel_compat::StatusOf(arg);
  *result_listener << "status: " << status;
  return status.code() == code;
}

MATCHER_P2(StatusIs, code, message, "has a matching code and message") {
  const absl::Status& status = wheel_compat::StatusOf(arg);
  *result_listener << "status: " << status;
  return status.code() == code &&
         ::testing::ExplainMatchResult(message, std::string(status.message()),
                                       result_listener);
}

}  // namespace absl_testing

#endif  // WHEEL_COMPAT_ABSL_STATUS_STATUS_MATCHERS_H_
