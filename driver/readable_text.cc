#include "driver/readable_text.h"

#include <string>

#include "driver/mesh_groups.h"

namespace nvshmem_opt {
namespace {

constexpr char kStart[] = " collective-permute-start(";

// In a statement "NAME = ((T), R) collective-permute-start(...", the span of
// "(T)" when T is one shape (no comma outside its brackets), else npos.
size_t OneOperandTuple(const std::string& text, size_t line, size_t end,
                       size_t* close) {
  size_t eq = text.find(" = ((", line);
  if (eq == std::string::npos || eq >= end) return std::string::npos;
  const size_t open = eq + 4;
  int depth = 0;
  for (size_t i = open; i < end; ++i) {
    char c = text[i];
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (depth == 1 && c == ',') return std::string::npos;  // Several operands.
    if (depth == 0) {
      *close = i;
      return text.compare(i + 1, 2, ", ") == 0 ? open : std::string::npos;
    }
  }
  return std::string::npos;
}

std::string PermuteStartShapes(const std::string& text, int* rewritten) {
  std::string out;
  size_t copied = 0;
  for (size_t at = text.find(kStart); at != std::string::npos;
       at = text.find(kStart, at + 1)) {
    const size_t line = text.rfind('\n', at) == std::string::npos
                            ? 0
                            : text.rfind('\n', at) + 1;
    if (line < copied) continue;
    size_t close = 0;
    const size_t open = OneOperandTuple(text, line, at, &close);
    if (open == std::string::npos) continue;
    out.append(text, copied, open - copied);
    out.append(text, open + 1, close - open - 1);
    copied = close + 1;
    ++*rewritten;
  }
  if (copied == 0) return text;
  out.append(text, copied, std::string::npos);
  return out;
}

}  // namespace

std::string ReadableText(const std::string& text, int* rewritten) {
  int groups = 0, shapes = 0;
  std::string out =
      PermuteStartShapes(ExplicitReplicaGroups(text, &groups), &shapes);
  *rewritten = groups + shapes;
  return out;
}

}  // namespace nvshmem_opt
