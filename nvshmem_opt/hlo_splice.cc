#include "nvshmem_opt/hlo_splice.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace nvshmem_opt {
namespace {

// Index of the last character of the quoted string, /* comment */ or
// // comment (up to its line's end) that starts at i (the text's end when it
// never closes).
size_t SkipQuoted(absl::string_view s, size_t i) {
  if (s[i] == '"') {
    for (++i; i < s.size() && s[i] != '"'; ++i) {
      if (s[i] == '\\') ++i;
    }
    return std::min(i, s.size() - 1);
  }
  if (s[i + 1] == '/') {
    const size_t end = s.find_first_of("\r\n", i);
    return end == absl::string_view::npos ? s.size() - 1 : end - 1;
  }
  size_t end = s.find("*/", i + 2);
  return end == absl::string_view::npos ? s.size() - 1 : end + 1;
}

bool StartsQuoted(absl::string_view s, size_t i) {
  return s[i] == '"' || (s[i] == '/' && i + 1 < s.size() &&
                         (s[i + 1] == '*' || s[i + 1] == '/'));
}

// Index of the first character of `s` outside white space and comments, or
// npos.
size_t FirstSignificant(absl::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '"' && StartsQuoted(s, i)) {
      i = SkipQuoted(s, i);
    } else if (!std::isspace(static_cast<unsigned char>(s[i]))) {
      return i;
    }
  }
  return absl::string_view::npos;
}

// First name token of `text` after `skip` words ("ENTRY", "ROOT"), without
// '%'.
std::string LeadingName(absl::string_view text, absl::string_view skip) {
  size_t i = text.find_first_not_of(" \t");
  if (i == absl::string_view::npos) return "";
  if (text.substr(i, skip.size() + 1) == absl::StrCat(skip, " ")) {
    i = text.find_first_not_of(" \t", i + skip.size());
    if (i == absl::string_view::npos) return "";
  }
  if (text[i] == '%') ++i;
  size_t end = text.find_first_of(" =(\t", i);
  return std::string(text.substr(
      i, end == absl::string_view::npos ? absl::string_view::npos : end - i));
}

// The first character after position i that is not space or a comment.
char NextSignificant(absl::string_view s, size_t i) {
  for (++i; i < s.size(); ++i) {
    if (s[i] != '"' && StartsQuoted(s, i)) {
      i = SkipQuoted(s, i);
    } else if (!std::isspace(static_cast<unsigned char>(s[i]))) {
      return s[i];
    }
  }
  return 0;
}

// The attribute name of a "NAME=" that ends just before position i (white
// space allowed around '='), or "" when s[i] follows no such name.
absl::string_view KeyBefore(absl::string_view s, size_t i) {
  auto space = [&](size_t j) {
    return j > 0 && std::isspace(static_cast<unsigned char>(s[j - 1]));
  };
  size_t j = i;
  while (space(j)) --j;
  if (j == 0 || s[j - 1] != '=') return "";
  --j;
  while (space(j)) --j;
  const size_t end = j;
  while (j > 0 && (std::isalnum(static_cast<unsigned char>(s[j - 1])) ||
                   s[j - 1] == '_' || s[j - 1] == '.' || s[j - 1] == '-')) {
    --j;
  }
  return s.substr(j, end - j);
}

// Index of the '}' closing the JSON dict that opens at i, read as XLA's lexer
// reads one (HloLexer::LexJsonDict): braces counted, strings skipped, nothing
// else seen, so "(" or "[" inside is text (the text's end when it never
// closes).
size_t JsonDictEnd(absl::string_view s, size_t i) {
  int depth = 0;
  for (; i < s.size(); ++i) {
    if (s[i] == '"') {
      for (++i; i < s.size() && s[i] != '"'; ++i) {
        if (s[i] == '\\') ++i;
      }
    } else if (s[i] == '{') {
      ++depth;
    } else if (s[i] == '}' && --depth == 0) {
      return i;
    }
  }
  return s.size() - 1;
}

// Brackets of a statement or header, counted as XLA's lexer sees them: a
// backend_config={...} and a frontend attribute's {...} value are JSON dicts,
// one token each, whatever brackets they hold.
class BracketDepth {
 public:
  int depth() const { return depth_; }
  // Steps over the JSON dict opening at i, if one does: returns its last
  // index, else i.
  size_t SkipJson(absl::string_view s, size_t i) const {
    if (s[i] != '{') return i;
    const absl::string_view key = KeyBefore(s, i);
    if (key == "backend_config" ||
        (depth_ == frontend_depth_ && !key.empty())) {
      return JsonDictEnd(s, i);
    }
    return i;
  }
  void Open(absl::string_view s, size_t i) {
    ++depth_;
    if (s[i] == '{' && KeyBefore(s, i) == "frontend_attributes")
      frontend_depth_ = depth_;
  }
  void Close() {
    if (depth_ == 0) return;
    if (depth_-- == frontend_depth_) frontend_depth_ = -1;
  }

 private:
  int depth_ = 0;
  int frontend_depth_ = -1;  // Inside frontend_attributes={...}: its depth.
};

struct Span {
  size_t begin = 0, end = 0;  // [begin, end): the statement without newline.
};
using StatementIndex = std::map<std::pair<std::string, std::string>, Span>;

// Top level: computation headers, each opening a body. In a body, a
// statement ends at a newline outside brackets and strings.
StatementIndex IndexStatements(absl::string_view s) {
  StatementIndex index;
  std::string computation;
  bool in_body = false;
  BracketDepth brackets;
  char last = 0;  // The statement's last character outside comments.
  size_t line = 0, begin = absl::string_view::npos;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (StartsQuoted(s, i)) {
      if (in_body && begin == absl::string_view::npos && s[i] == '"') begin = i;
      if (s[i] == '"') last = '"';
      i = SkipQuoted(s, i);
      continue;
    }
    if (const size_t end = brackets.SkipJson(s, i); end != i) {
      last = '}';
      i = end;
      continue;
    }
    if (!in_body) {
      if (c == '\n' && brackets.depth() == 0) line = i + 1;
      if (c == '(' || c == '[') brackets.Open(s, i);
      if (c == ')' || c == ']' || c == '}') brackets.Close();
      if (c != '{') continue;
      // A body opens at a '{' after white space outside brackets; layouts
      // ("f32[4]{0}") and the module header's values follow other characters.
      absl::string_view head = s.substr(line, i - line);
      const size_t first = FirstSignificant(head);
      if (brackets.depth() == 0 && i > line &&
          std::isspace(static_cast<unsigned char>(s[i - 1])) &&
          first != absl::string_view::npos &&
          head.substr(first).rfind("HloModule", 0) != 0) {
        computation = LeadingName(head.substr(first), "ENTRY");
        in_body = true;
        begin = absl::string_view::npos;
        last = 0;
      } else {
        brackets.Open(s, i);
      }
      continue;
    }
    auto close = [&](size_t end) {
      if (begin == absl::string_view::npos) return;
      absl::string_view text = s.substr(begin, end - begin);
      while (!text.empty() &&
             std::isspace(static_cast<unsigned char>(text.back()))) {
        text.remove_suffix(1);
      }
      index[{computation, LeadingName(text, "ROOT")}] = {begin,
                                                         begin + text.size()};
      begin = absl::string_view::npos;
    };
    if (brackets.depth() == 0 && c == '}') {
      close(i);
      in_body = false;
      line = i + 1;  // A header may follow on the same line.
      continue;
    }
    // A statement goes on over a line break after or before a comma.
    if (brackets.depth() == 0 && c == '\n' && last != ',' &&
        NextSignificant(s, i) != ',') {
      close(i);
      last = 0;
      continue;
    }
    if (!std::isspace(static_cast<unsigned char>(c))) {
      if (begin == absl::string_view::npos) begin = i;
      last = c;
    }
    if (c == '(' || c == '[' || c == '{') brackets.Open(s, i);
    if (c == ')' || c == ']' || c == '}') brackets.Close();
  }
  return index;
}

// Top-level ", key=value" attributes of one statement: key -> value span.
// The wheel's short mesh form "@mesh<a=4,b=2>" counts as a bracket.
std::vector<std::tuple<std::string, size_t, size_t>> Attributes(
    absl::string_view s) {
  std::vector<std::tuple<std::string, size_t, size_t>> out;
  BracketDepth brackets;
  bool in_mesh = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (StartsQuoted(s, i)) {
      i = SkipQuoted(s, i);
      continue;
    }
    if (const size_t end = brackets.SkipJson(s, i); end != i) {
      i = end;
      continue;
    }
    if (c == '<' && i >= 5 && s.substr(i - 5, 5) == "@mesh") in_mesh = true;
    if (c == '>' && in_mesh) in_mesh = false;
    if (in_mesh) continue;
    if (c == '(' || c == '[' || c == '{') brackets.Open(s, i);
    if (c == ')' || c == ']' || c == '}') brackets.Close();
    if (brackets.depth() != 0 || c != ',') continue;
    size_t key = i + 1;
    while (key < s.size() && std::isspace(static_cast<unsigned char>(s[key])))
      ++key;
    size_t k = key;
    while (k < s.size() && (std::isalnum(static_cast<unsigned char>(s[k])) ||
                            s[k] == '_' || s[k] == '-' || s[k] == '.')) {
      ++k;
    }
    if (k == key || k >= s.size() || s[k] != '=') continue;
    if (!out.empty()) std::get<2>(out.back()) = i;
    out.emplace_back(std::string(s.substr(key, k - key)), k + 1, s.size());
  }
  return out;
}

// The statement with `attributes` set.
std::string Patch(
    absl::string_view statement,
    const std::vector<std::pair<std::string, std::string>>& attributes) {
  std::string out(statement);
  for (const auto& [key, value] : attributes) {
    bool found = false;
    for (const auto& [name, begin, end] : Attributes(out)) {
      if (name != key) continue;
      out.replace(begin, end - begin, value);
      found = true;
      break;
    }
    if (!found) absl::StrAppend(&out, ", ", key, "=", value);
  }
  return out;
}

}  // namespace

int StatementLine(const std::string& text, const std::string& computation,
                  const std::string& instruction) {
  const StatementIndex index = IndexStatements(text);
  auto it = index.find({computation, instruction});
  if (it == index.end()) return 0;
  return 1 + static_cast<int>(std::count(
                 text.begin(), text.begin() + it->second.begin, '\n'));
}

std::string AttributeValue(const std::string& statement,
                           const std::string& key) {
  for (const auto& [name, begin, end] : Attributes(statement)) {
    if (name == key) return statement.substr(begin, end - begin);
  }
  return "";
}

absl::StatusOr<std::string> SpliceStatements(
    const std::string& text, const std::vector<StatementEdit>& edits) {
  if (edits.empty()) return text;
  const StatementIndex index = IndexStatements(text);
  std::vector<std::pair<Span, std::string>> replacements;
  for (const StatementEdit& edit : edits) {
    auto it = index.find({edit.computation, edit.instruction});
    if (it == index.end()) {
      return absl::NotFoundError(absl::StrCat(
          "no statement for ", edit.computation, "/", edit.instruction));
    }
    const Span span = it->second;
    absl::string_view original(text.data() + span.begin, span.end - span.begin);
    std::string replacement;
    if (edit.statements.empty()) {
      replacement = Patch(original, edit.attributes);
    } else {
      const size_t line = text.rfind('\n', span.begin);
      const std::string indent =
          text.substr(line == std::string::npos ? 0 : line + 1,
                      span.begin - (line == std::string::npos ? 0 : line + 1));
      const bool root = original.rfind("ROOT ", 0) == 0;
      for (size_t k = 0; k < edit.statements.size(); ++k) {
        if (k > 0) absl::StrAppend(&replacement, "\n", indent);
        if (root && k + 1 == edit.statements.size()) replacement += "ROOT ";
        replacement += Patch(edit.statements[k], edit.attributes);
      }
    }
    replacements.emplace_back(span, std::move(replacement));
  }
  std::sort(replacements.begin(), replacements.end(),
            [](const auto& a, const auto& b) {
              return a.first.begin > b.first.begin;
            });
  std::string out = text;
  for (const auto& [span, replacement] : replacements) {
    out.replace(span.begin, span.end - span.begin, replacement);
  }
  return out;
}

}  // namespace nvshmem_opt
