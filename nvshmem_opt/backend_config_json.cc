#include "nvshmem_opt/backend_config_json.h"

#include <cctype>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "tool_layer/decide.h"

namespace nvshmem_opt {
namespace {

namespace core = ::xla::gpu::backend_selection;

// --- Order-preserving JSON, just enough to set two fields -----------------

struct JsonValue {
  enum class Kind { kScalar, kArray, kObject } kind = Kind::kScalar;
  std::string scalar;  // Raw token: number, true/false/null or quoted string.
  std::vector<JsonValue> items;
  std::vector<std::pair<std::string, JsonValue>> members;  // Raw quoted keys.
};

class JsonReader {
 public:
  explicit JsonReader(absl::string_view text) : text_(text) {}

  std::optional<JsonValue> ReadDocument() {
    std::optional<JsonValue> value = ReadValue(0);
    SkipSpace();
    if (!value || pos_ != text_.size()) return std::nullopt;
    return value;
  }

  // Where a failed ReadDocument stopped, said for a user: "')' at character
  // 96" (1-based), or "the end" when the text ends early.
  std::string ErrorPlace() const {
    if (pos_ >= text_.size()) return "the end (it stops early)";
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    const std::string shown =
        c >= 0x20 && c < 0x7f
            ? absl::StrCat("'", std::string(1, c), "'")
            : absl::StrCat("byte 0x", absl::Hex(c, absl::kZeroPad2));
    return absl::StrCat(shown, " at character ", pos_ + 1);
  }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t' ||
            text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  std::optional<std::string> ReadString() {
    if (pos_ >= text_.size() || text_[pos_] != '"') return std::nullopt;
    size_t start = pos_++;
    while (pos_ < text_.size()) {
      char c = text_[pos_++];
      if (c == '\\') {
        if (pos_ >= text_.size()) return std::nullopt;
        ++pos_;
      } else if (c == '"') {
        return std::string(text_.substr(start, pos_ - start));
      }
    }
    return std::nullopt;
  }

  std::optional<JsonValue> ReadValue(int depth) {
    if (depth > 64) return std::nullopt;  // Refuse absurd nesting.
    SkipSpace();
    if (pos_ >= text_.size()) return std::nullopt;
    JsonValue value;
    char c = text_[pos_];
    if (c == '{') {
      value.kind = JsonValue::Kind::kObject;
      ++pos_;
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return value;
      }
      while (true) {
        SkipSpace();
        std::optional<std::string> key = ReadString();
        if (!key) return std::nullopt;
        SkipSpace();
        if (pos_ >= text_.size() || text_[pos_] != ':') return std::nullopt;
        ++pos_;
        std::optional<JsonValue> member = ReadValue(depth + 1);
        if (!member) return std::nullopt;
        value.members.emplace_back(*std::move(key), *std::move(member));
        SkipSpace();
        if (pos_ < text_.size() && text_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < text_.size() && text_[pos_] == '}') {
          ++pos_;
          return value;
        }
        return std::nullopt;
      }
    }
    if (c == '[') {
      value.kind = JsonValue::Kind::kArray;
      ++pos_;
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return value;
      }
      while (true) {
        std::optional<JsonValue> item = ReadValue(depth + 1);
        if (!item) return std::nullopt;
        value.items.push_back(*std::move(item));
        SkipSpace();
        if (pos_ < text_.size() && text_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < text_.size() && text_[pos_] == ']') {
          ++pos_;
          return value;
        }
        return std::nullopt;
      }
    }
    if (c == '"') {
      std::optional<std::string> s = ReadString();
      if (!s) return std::nullopt;
      value.scalar = *std::move(s);
      return value;
    }
    size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) ||
            text_[pos_] == '-' || text_[pos_] == '+' || text_[pos_] == '.')) {
      ++pos_;
    }
    if (pos_ == start) return std::nullopt;
    value.scalar = std::string(text_.substr(start, pos_ - start));
    return value;
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

void WriteJson(const JsonValue& value, std::string* out) {
  switch (value.kind) {
    case JsonValue::Kind::kScalar:
      *out += value.scalar;
      return;
    case JsonValue::Kind::kArray:
      *out += '[';
      for (size_t i = 0; i < value.items.size(); ++i) {
        if (i > 0) *out += ',';
        WriteJson(value.items[i], out);
      }
      *out += ']';
      return;
    case JsonValue::Kind::kObject:
      *out += '{';
      for (size_t i = 0; i < value.members.size(); ++i) {
        if (i > 0) *out += ',';
        *out += value.members[i].first;
        *out += ':';
        WriteJson(value.members[i].second, out);
      }
      *out += '}';
      return;
  }
}

JsonValue* FindMember(JsonValue& object, absl::string_view key) {
  std::string quoted = absl::StrCat("\"", key, "\"");
  for (auto& [name, member] : object.members) {
    if (name == quoted) return &member;
  }
  return nullptr;
}

JsonValue& GetOrAddObject(JsonValue& object, absl::string_view key) {
  if (JsonValue* member = FindMember(object, key)) return *member;
  JsonValue empty;
  empty.kind = JsonValue::Kind::kObject;
  object.members.emplace_back(absl::StrCat("\"", key, "\""), std::move(empty));
  return object.members.back().second;
}

absl::StatusOr<JsonValue> ParseBackendConfig(const xla::HloInstruction* instr) {
  const std::string& raw = instr->raw_backend_config_string();
  if (raw.empty()) {
    JsonValue empty;
    empty.kind = JsonValue::Kind::kObject;
    return empty;
  }
  if (absl::Status status = CheckBackendConfigJson(raw); !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(instr->name(), ": ", status.message()));
  }
  return *JsonReader(raw).ReadDocument();
}

// Sets `key` of `object` to the quoted `value`, adding it after `after` (or
// first) when absent. Returns whether anything changed.
bool SetString(JsonValue& object, absl::string_view key,
               absl::string_view value, absl::string_view after) {
  std::string quoted = absl::StrCat("\"", value, "\"");
  if (JsonValue* existing = FindMember(object, key)) {
    if (existing->kind == JsonValue::Kind::kScalar &&
        existing->scalar == quoted) {
      return false;
    }
    *existing = JsonValue();
    existing->scalar = quoted;
    return true;
  }
  JsonValue scalar;
  scalar.scalar = quoted;
  auto position = object.members.begin();
  std::string quoted_after = absl::StrCat("\"", after, "\"");
  for (auto it = object.members.begin(); it != object.members.end(); ++it) {
    if (it->first == quoted_after) position = it + 1;
  }
  object.members.insert(position,
                        {absl::StrCat("\"", key, "\""), std::move(scalar)});
  return true;
}

}  // namespace

absl::Status CheckBackendConfigJson(absl::string_view raw) {
  if (raw.empty()) return absl::OkStatus();
  JsonReader reader(raw);
  std::optional<JsonValue> value = reader.ReadDocument();
  if (!value) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backend_config is not valid JSON: ", reader.ErrorPlace(), " of it"));
  }
  if (value->kind != JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError(
        "backend_config is JSON but not an object ({...})");
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> SetBackendInJson(xla::HloInstruction* instr,
                                      core::Backend backend) {
  absl::StatusOr<JsonValue> config = ParseBackendConfig(instr);
  if (!config.ok()) return config.status();
  JsonValue& collective = GetOrAddObject(*config, "collective_backend_config");
  if (collective.kind != JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError(absl::StrCat(
        instr->name(), ": collective_backend_config is not an object"));
  }
  const core::BackendInfo& info = core::Info(backend);
  bool changed = SetString(collective, "backend", info.config_backend, "");
  const absl::string_view mode = info.collectives_mode;
  if (!mode.empty()) {
    changed |= SetString(collective, "collectives_mode", mode, "backend");
  } else if (backend == core::Backend::kNccl &&
             FindMember(collective, "collectives_mode") != nullptr) {
    changed |= SetString(collective, "collectives_mode",
                         "COLLECTIVES_MODE_INVALID", "backend");
  }
  // The same choice as the attribute that the patched assigner of jax
  // v0.11.0's XLA reads; NCCL only replaces one already there. The tools'
  // attribute beside it says the choice is theirs, not a user's mark (the
  // planner never writes over a user's mark), so that a later run decides it
  // again.
  const std::string mode_attr(core::kModeAttribute);
  const std::string tools_attr(core::kToolsModeAttribute);
  std::optional<std::string> asked = instr->get_frontend_attribute(mode_attr);
  const std::string value = info.mode_attribute;
  const bool write =
      !value.empty() && (backend != core::Backend::kNccl || asked.has_value());
  if (write &&
      (asked != value || instr->get_frontend_attribute(tools_attr) != value)) {
    instr->set_frontend_attribute(mode_attr, value);
    instr->set_frontend_attribute(tools_attr, value);
    changed = true;
  }
  if (!changed) return false;
  std::string out;
  WriteJson(*config, &out);
  instr->set_raw_backend_config_string(out);
  return true;
}

std::optional<core::Backend> BackendInJson(const xla::HloInstruction& instr) {
  absl::StatusOr<JsonValue> config = ParseBackendConfig(&instr);
  if (!config.ok()) return std::nullopt;
  JsonValue* collective = FindMember(*config, "collective_backend_config");
  if (collective == nullptr || collective->kind != JsonValue::Kind::kObject) {
    return core::Backend::kNccl;
  }
  const JsonValue* backend = FindMember(*collective, "backend");
  if (backend != nullptr && backend->scalar == "\"NVSHMEM\"") {
    return core::Backend::kNvshmem;
  }
  const JsonValue* mode = FindMember(*collective, "collectives_mode");
  if (mode == nullptr || mode->scalar == "\"COLLECTIVES_MODE_INVALID\"") {
    return core::Backend::kNccl;
  }
  for (int b = 0; b < core::kNumBackends; ++b) {
    const auto candidate = static_cast<core::Backend>(b);
    const absl::string_view written = core::Info(candidate).collectives_mode;
    if (!written.empty() && mode->scalar == absl::StrCat("\"", written, "\"")) {
      return candidate;
    }
  }
  return std::nullopt;
}

}  // namespace nvshmem_opt
