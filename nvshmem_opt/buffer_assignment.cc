#include "nvshmem_opt/buffer_assignment.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/ir/hlo_opcode.h"

namespace nvshmem_opt {

namespace core = ::xla::gpu::backend_selection;

namespace {

absl::Status Bad(absl::string_view path, int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", what));
}

// "allocation N: size S[, color C][, parameter P, shape ...][,
// maybe-live-out]:"
bool ParseAllocation(absl::string_view line, Allocation& allocation) {
  absl::string_view rest = line;
  if (!absl::ConsumePrefix(&rest, "allocation ")) return false;
  const size_t colon = rest.find(':');
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(rest.substr(0, colon), &allocation.number) ||
      allocation.number < 0) {
    return false;
  }
  rest.remove_prefix(colon + 1);
  if (!absl::StartsWith(rest, " size ")) return false;
  allocation.parameter = -1;
  for (absl::string_view field : absl::StrSplit(rest, ", ")) {
    if (absl::ConsumePrefix(&field, "parameter ") &&
        (!absl::SimpleAtoi(field, &allocation.parameter) ||
         allocation.parameter < 0)) {
      return false;
    }
  }
  allocation.maybe_live_out = absl::StrContains(line, ", maybe-live-out");
  return true;
}

// " value: <ID NAME[{I,J}][ (phi)] @N> ...": (NAME, index).
bool ParseValue(absl::string_view line, std::string& name,
                std::vector<int64_t>& index) {
  absl::string_view rest = line;
  if (!absl::ConsumePrefix(&rest, " value: <")) return false;
  const size_t space = rest.find(' ');
  if (space == absl::string_view::npos) return false;
  rest.remove_prefix(space + 1);
  const size_t end = rest.find_first_of("{ ");
  if (end == absl::string_view::npos || end == 0) return false;
  name = std::string(rest.substr(0, end));
  index.clear();
  if (rest[end] == '{') {
    const size_t close = rest.find('}', end);
    if (close == absl::string_view::npos) return false;
    const absl::string_view digits = rest.substr(end + 1, close - end - 1);
    if (!digits.empty()) {
      for (absl::string_view part : absl::StrSplit(digits, ',')) {
        int64_t i = 0;
        if (!absl::SimpleAtoi(part, &i) || i < 0) return false;
        index.push_back(i);
      }
    }
  }
  return true;
}

using Value = std::pair<std::string, std::vector<int64_t>>;

// The values the entry returns: its root's leaves through tuples,
// get-tuple-elements and bitcasts, which define no buffer of their own.
void LiveOut(const xla::HloInstruction* instr, std::vector<int64_t> index,
             int depth, std::set<Value>& out) {
  if (depth > 64) return;
  const xla::HloOpcode op = instr->opcode();
  if (op == xla::HloOpcode::kTuple && index.empty()) {
    for (int64_t k = 0; k < instr->operand_count(); ++k) {
      const xla::HloInstruction* operand = instr->operand(k);
      const xla::HloOpcode o = operand->opcode();
      if (o == xla::HloOpcode::kTuple ||
          o == xla::HloOpcode::kGetTupleElement ||
          o == xla::HloOpcode::kBitcast) {
        LiveOut(operand, {}, depth + 1, out);
      } else {
        out.insert({std::string(operand->name()), {}});
      }
      out.insert({std::string(instr->name()), {k}});
    }
    return;
  }
  if (op == xla::HloOpcode::kGetTupleElement) {
    index.insert(index.begin(), instr->tuple_index());
    LiveOut(instr->operand(0), std::move(index), depth + 1, out);
    return;
  }
  if (op == xla::HloOpcode::kBitcast) {
    LiveOut(instr->operand(0), std::move(index), depth + 1, out);
    return;
  }
  out.insert({std::string(instr->name()), std::move(index)});
}

// Values that hand a buffer on rather than define one.
bool Carries(xla::HloOpcode op) {
  return op == xla::HloOpcode::kWhile || op == xla::HloOpcode::kConditional ||
         op == xla::HloOpcode::kCall ||
         op == xla::HloOpcode::kCollectivePermuteDone ||
         op == xla::HloOpcode::kCollectivePermuteStart;
}

}  // namespace

std::string BufferAssignmentPath(const std::string& module_path) {
  absl::string_view stem = module_path;
  if (!absl::ConsumeSuffix(&stem, ".txt")) absl::ConsumeSuffix(&stem, ".hlo");
  return absl::StrCat(stem, "-buffer-assignment.txt");
}

absl::StatusOr<BufferAssignment> ParseBufferAssignment(absl::string_view text,
                                                       absl::string_view path) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (lines.empty() ||
      absl::StripAsciiWhitespace(lines[0]) != "BufferAssignment:") {
    return Bad(path, 1,
               "not an XLA buffer-assignment dump (no 'BufferAssignment:' "
               "line)");
  }
  BufferAssignment assignment;
  bool in_allocation = false;
  Allocation current;
  for (size_t i = 1; i < lines.size(); ++i) {
    const absl::string_view line = lines[i];
    const int lineno = static_cast<int>(i + 1);
    if (absl::StartsWith(line, "allocation ")) {
      if (!ParseAllocation(line, current)) {
        return Bad(path, lineno, "expected 'allocation N: size S, ...'");
      }
      in_allocation = true;
    } else if (absl::StartsWith(line, " value: ")) {
      std::string name;
      std::vector<int64_t> index;
      if (!in_allocation || !ParseValue(line, name, index)) {
        return Bad(path, lineno,
                   "expected ' value: <id name{index} @n>' under an "
                   "allocation line");
      }
      assignment[name].emplace(std::move(index), current);
    } else {
      in_allocation = false;  // Later sections list values in other forms.
    }
  }
  return assignment;
}

std::vector<core::DestinationBuffer> DestinationsOf(
    const xla::HloInstruction& permute, const BufferAssignment& assignment) {
  std::vector<core::DestinationBuffer> out;
  auto held = assignment.find(std::string(permute.name()));
  if (permute.opcode() != xla::HloOpcode::kCollectivePermuteStart ||
      held == assignment.end()) {
    return out;
  }
  const xla::HloComputation* entry = permute.GetModule()->entry_computation();
  std::set<Value> live_out;
  absl::flat_hash_map<std::string, xla::HloOpcode> entry_opcodes;
  if (entry != nullptr && entry->root_instruction() != nullptr) {
    LiveOut(entry->root_instruction(), {}, 0, live_out);
    for (const xla::HloInstruction* instr : entry->instructions()) {
      entry_opcodes[std::string(instr->name())] = instr->opcode();
    }
  }
  auto returned = [&](const Allocation& allocation) {
    if (!allocation.maybe_live_out) return false;
    // The permute's own done, returned: it defines no buffer of its own and
    // hands on the destination.
    for (const xla::HloInstruction* user : permute.users()) {
      if (user->opcode() == xla::HloOpcode::kCollectivePermuteDone &&
          user->parent() == entry &&
          live_out.count({std::string(user->name()), {}}) != 0) {
        return true;
      }
    }
    for (const auto& [name, index] : live_out) {
      auto it = assignment.find(name);
      auto carrier = entry_opcodes.find(name);
      if (it == assignment.end() || carrier == entry_opcodes.end() ||
          !Carries(carrier->second)) {
        continue;
      }
      // A carrier returned whole (a loop as the root) returns each of its
      // leaves: every index under the returned one.
      for (const auto& [at, held_there] : it->second) {
        if (held_there.number == allocation.number &&
            at.size() >= index.size() &&
            std::equal(index.begin(), index.end(), at.begin())) {
          return true;
        }
      }
    }
    return false;
  };
  for (const auto& [index, allocation] : held->second) {
    if (index.empty() || index[0] != 1) continue;
    std::vector<int64_t> child = index;
    child.push_back(0);
    if (held->second.count(child) != 0)
      continue;  // A combined permute's tuple.
    core::DestinationBuffer destination;
    destination.allocation = allocation.number;
    destination.parameter = allocation.parameter;
    destination.returned = allocation.parameter < 0 && returned(allocation);
    out.push_back(destination);
  }
  return out;
}

}  // namespace nvshmem_opt
