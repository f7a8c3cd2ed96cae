#include "nvshmem_opt/readable_text.h"

#include <cctype>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nvshmem_opt/mesh_groups.h"

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

constexpr char kCompact[] = "__cgte_";

bool NameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
         c == '-';
}

// The shape text after "%name = " on a statement line, or "" (a tuple's
// parentheses balanced).
std::string StatementShape(const std::string& line, size_t after_eq) {
  size_t i = after_eq;
  while (i < line.size() && line[i] == ' ') ++i;
  if (i >= line.size()) return "";
  if (line[i] != '(') {
    const size_t end = line.find(' ', i);
    return end == std::string::npos ? "" : line.substr(i, end - i);
  }
  int depth = 0;
  for (size_t j = i; j < line.size(); ++j) {
    if (line[j] == '(' || line[j] == '[' || line[j] == '{') ++depth;
    if (line[j] == ')' || line[j] == ']' || line[j] == '}') --depth;
    if (depth == 0) return line.substr(i, j - i + 1);
  }
  return "";
}

// Element `k` of a tuple shape's text "(A, (B, C), D)", or "".
std::string TupleElement(const std::string& shape, int k) {
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')')
    return "";
  int depth = 0, index = 0;
  size_t start = 1;
  for (size_t j = 1; j < shape.size(); ++j) {
    const char c = shape[j];
    const bool last = j == shape.size() - 1;
    if (!last && (c == '(' || c == '[' || c == '{')) ++depth;
    if (!last && (c == ')' || c == ']' || c == '}')) --depth;
    if (last || (c == ',' && depth == 0)) {
      if (index == k) {
        const size_t from = shape.find_first_not_of(' ', start);
        return from >= j ? "" : shape.substr(from, j - from);
      }
      ++index;
      start = j + 1;
    }
  }
  return "";
}

// Operands %t#K#L... as %t__cgte_K__cgte_L, each defined once per computation
// at the start of the line of its first use. Lines stay where they were.
std::string CompactTupleElements(const std::string& text, int* rewritten) {
  // A module whose own names hold the infix is left as it is: its names could
  // not be told from the ones made here on the way back.
  if (!UsesCompactTupleElements(text)) return text;
  std::string out;
  std::map<std::string, std::string> shapes;  // This computation's names.
  std::set<std::string> defined;
  size_t line_start = 0;
  while (line_start <= text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text.size();
    const std::string line = text.substr(line_start, line_end - line_start);
    size_t first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line[first] == '}') {
      shapes.clear();
      defined.clear();
    }
    // The statement's own name and shape: "[ROOT ]%name = shape ...".
    size_t eq = line.find(" = ");
    if (first != std::string::npos && eq != std::string::npos) {
      size_t name_at = line.compare(first, 5, "ROOT ") == 0 ? first + 5 : first;
      if (name_at < line.size() && line[name_at] == '%') ++name_at;
      shapes[line.substr(name_at, eq - name_at)] = StatementShape(line, eq + 3);
    }
    std::string prefix, body;
    bool quoted = false;
    for (size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (c == '"' && (i == 0 || line[i - 1] != '\\')) quoted = !quoted;
      if (quoted || c != '%') {
        body += c;
        continue;
      }
      size_t j = i + 1;
      while (j < line.size() && NameChar(line[j])) ++j;
      std::string name = line.substr(i + 1, j - i - 1);
      if (j >= line.size() || line[j] != '#' || name.empty()) {
        body.append(line, i, j - i);
        i = j - 1;
        continue;
      }
      std::string current = name, shape = shapes[name];
      while (j < line.size() && line[j] == '#') {
        size_t k = j + 1;
        while (k < line.size() &&
               std::isdigit(static_cast<unsigned char>(line[k]))) {
          ++k;
        }
        if (k == j + 1) break;
        const std::string index = line.substr(j + 1, k - j - 1);
        const std::string element = absl::StrCat(current, kCompact, index);
        const std::string element_shape = TupleElement(shape, std::stoi(index));
        if (!defined.count(element) && !element_shape.empty()) {
          absl::StrAppend(&prefix, "%", element, " = ", element_shape,
                          " get-tuple-element(%", current, "), index=", index,
                          " ");
          defined.insert(element);
          shapes[element] = element_shape;
          ++*rewritten;
        }
        current = element;
        shape = element_shape;
        j = k;
      }
      absl::StrAppend(&body, "%", current);
      i = j - 1;
    }
    if (!prefix.empty()) {
      // Before the statement, after its indentation.
      const size_t indent = first == std::string::npos ? 0 : first;
      out.append(body, 0, indent);
      out += prefix;
      out.append(body, indent, std::string::npos);
    } else {
      out += body;
    }
    if (line_end == text.size()) break;
    out += '\n';
    line_start = line_end + 1;
  }
  return out;
}

}  // namespace

std::string ReadableText(const std::string& text, int* rewritten) {
  int groups = 0, shapes = 0, elements = 0;
  std::string out = PermuteStartShapes(
      ExplicitReplicaGroups(CompactTupleElements(text, &elements), &groups),
      &shapes);
  *rewritten = groups + shapes + elements;
  return out;
}

bool UsesCompactTupleElements(const std::string& text) {
  return text.find('#') != std::string::npos &&
         text.find(kCompact) == std::string::npos;
}

std::string CompactTupleElementNames(const std::string& statement) {
  std::string out = statement;
  for (size_t at = out.find(kCompact); at != std::string::npos;
       at = out.find(kCompact, at)) {
    out.replace(at, sizeof(kCompact) - 1, "#");
  }
  return out;
}

}  // namespace nvshmem_opt
