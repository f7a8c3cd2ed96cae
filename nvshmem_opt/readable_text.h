// HLO text of newer jaxlib in the forms the TensorFlow wheel's XLA reads.
// Each rewrite keeps every line where it was, so the parser's line numbers
// are the input's, and changes only what the older XLA spells differently:
//   * replica_groups=mesh[...] {...} (jaxlib >= 0.10) as explicit lists
//     (mesh_groups.h);
//   * a one-operand collective-permute-start's shape ((T), T) (jaxlib 0.11)
//     as (T, T);
//   * an operand %t#K (jaxlib 0.11.2: XLA's compact get-tuple-element) as
//     %t__cgte_K, defined on the line of its first use in its computation by
//     a get-tuple-element statement (XLA reads statements, not lines).
// The driver parses the result but writes back the input's own text
// (hlo_splice.h), so nothing rewritten here reaches its output.

#ifndef NVSHMEM_OPT_DRIVER_READABLE_TEXT_H_
#define NVSHMEM_OPT_DRIVER_READABLE_TEXT_H_

#include <string>

namespace nvshmem_opt {

// `rewritten` gets how many places changed.
std::string ReadableText(const std::string& text, int* rewritten);

// A statement of the module read from ReadableText's form, printed by the
// wheel's XLA, in the input's own form: %t__cgte_K back to %t#K. Only for
// an input that uses '#' operands and no name of its own with the infix.
std::string CompactTupleElementNames(const std::string& statement);
bool UsesCompactTupleElements(const std::string& text);

}  // namespace nvshmem_opt

#endif  // NVSHMEM_OPT_DRIVER_READABLE_TEXT_H_
