// The while loops around a computation, as XLA's parse of the module sees
// them: how often a permute runs per execution of the module.
#ifndef NVSHMEM_PLAN_LOOP_NEST_H_
#define NVSHMEM_PLAN_LOOP_NEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_module.h"

namespace nvshmem_plan {

struct EnclosingLoop {
  std::string while_name;
  std::string computation;  // The computation holding the while.
  // known_trip_count from its backend config, else XLA's loop analysis;
  // nullopt when neither knows.
  std::optional<int64_t> trip_count;
};

// The module's call graph upwards, built once for all its permutes.
class LoopNests {
 public:
  explicit LoopNests(const xla::HloModule& module);
  // Every while whose body reaches `computation` through calls, innermost
  // first; the innermost is found breadth-first up the call graph.
  std::vector<EnclosingLoop> Of(const xla::HloComputation& computation) const;

 private:
  const xla::HloInstruction* EnclosingWhile(
      const xla::HloComputation* start) const;

  absl::flat_hash_map<const xla::HloComputation*,
                      std::vector<const xla::HloInstruction*>>
      callers_;
  // Each while's count, worked out once however many permutes it encloses.
  mutable absl::flat_hash_map<const xla::HloInstruction*,
                              std::optional<int64_t>>
      trip_counts_;
};

}  // namespace nvshmem_plan

#endif  // NVSHMEM_PLAN_LOOP_NEST_H_
