#include "nvshmem_opt/plan/loop_nest.h"

#include <deque>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "google/protobuf/util/json_util.h"
#include "xla/hlo/analysis/while_loop_analysis.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/ir/hlo_opcode.h"
#include "xla/xla_data.pb.h"

namespace nvshmem_plan {
namespace {

std::optional<int64_t> TripCount(const xla::HloInstruction& loop) {
  // Fields of a newer XLA than the wheel's (dynamic_variables) are skipped, not
  // an error that would hide the count; an empty known_trip_count is no count.
  xla::WhileLoopBackendConfig config;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (google::protobuf::util::JsonStringToMessage(
          loop.raw_backend_config_string(), &config, options)
          .ok() &&
      config.known_trip_count().n() > 0) {
    return config.known_trip_count().n();
  }
  return xla::ComputeWhileLoopTripCount(&loop);
}

}  // namespace

LoopNests::LoopNests(const xla::HloModule& module) {
  for (const xla::HloComputation* computation : module.computations()) {
    for (const xla::HloInstruction* instr : computation->instructions()) {
      for (const xla::HloComputation* callee : instr->called_computations()) {
        callers_[callee].push_back(instr);
      }
    }
  }
}

// The innermost while whose body reaches `start`, or null.
const xla::HloInstruction* LoopNests::EnclosingWhile(
    const xla::HloComputation* start) const {
  std::set<const xla::HloComputation*> seen = {start};
  std::deque<const xla::HloComputation*> todo = {start};
  while (!todo.empty()) {
    const xla::HloComputation* computation = todo.front();
    todo.pop_front();
    auto it = callers_.find(computation);
    if (it == callers_.end()) continue;
    for (const xla::HloInstruction* caller : it->second) {
      if (caller->opcode() == xla::HloOpcode::kWhile &&
          caller->while_body() == computation) {
        return caller;
      }
      if (seen.insert(caller->parent()).second)
        todo.push_back(caller->parent());
    }
  }
  return nullptr;
}

std::vector<EnclosingLoop> LoopNests::Of(
    const xla::HloComputation& computation) const {
  std::vector<EnclosingLoop> loops;
  std::set<const xla::HloInstruction*> seen;
  for (const xla::HloInstruction* loop = EnclosingWhile(&computation);
       loop != nullptr && seen.insert(loop).second;
       loop = EnclosingWhile(loop->parent())) {
    auto [it, added] = trip_counts_.try_emplace(loop);
    if (added) it->second = TripCount(*loop);
    loops.push_back({std::string(loop->name()),
                     std::string(loop->parent()->name()), it->second});
  }
  return loops;
}

}  // namespace nvshmem_plan
