// The pass's output as edits of the input's own text.
//
// Printing XLA's module would rewrite every instruction in the TensorFlow
// wheel's dialect of HLO text: a module from a newer jax (mesh replica
// groups, backend_config fields the wheel does not know) would come back in
// a form that jax no longer matches line for line. So only the statements of
// the permutes the pass changed are replaced or patched; every other byte of
// the input is kept.
//
// Statements are found as XLA's lexer reads text: brackets counted outside
// strings and comments (/* */ and //), and a JSON dict (backend_config={...},
// a frontend attribute's {...}) read as one token whose own brackets do not
// count: XLA accepts `{"a":"b)"}` and `{"a"):1}` there alike.

#ifndef NVSHMEM_OPT_DRIVER_HLO_SPLICE_H_
#define NVSHMEM_OPT_DRIVER_HLO_SPLICE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace nvshmem_opt {

struct StatementEdit {
  std::string computation;  // Names without '%'.
  std::string instruction;
  // Statements (as XLA prints an instruction) that take the instruction's
  // place, the last one the instruction's successor (keeping ROOT). Empty:
  // only `attributes` change.
  std::vector<std::string> statements;
  // key -> printed value, set on the statement (replaced or appended).
  std::vector<std::pair<std::string, std::string>> attributes;
};

// `text` with every edit applied; NotFound when an instruction's statement
// cannot be located (the caller falls back to printing the module).
absl::StatusOr<std::string> SpliceStatements(
    const std::string& text, const std::vector<StatementEdit>& edits);

// The 1-based line where the statement of `instruction` in `computation`
// starts in `text`, or 0 when it cannot be located.
int StatementLine(const std::string& text, const std::string& computation,
                  const std::string& instruction);

// The value of attribute `key` in one printed statement, or "" when absent.
std::string AttributeValue(const std::string& statement,
                           const std::string& key);

}  // namespace nvshmem_opt

#endif  // NVSHMEM_OPT_DRIVER_HLO_SPLICE_H_
