#include "nvshmem_opt/module_config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "nvshmem_opt/input.h"
#include "xla/xla_data.pb.h"

namespace nvshmem_opt {
namespace {

constexpr absl::string_view kSuffix = ".config.pbtxt";
constexpr int kMaxDevices = 1 << 20;

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

absl::Status Bad(const std::string& path, int line, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, line > 0 ? absl::StrCat(":", line) : "", ": ", what));
}

// Text format errors with the file's line (the block starts at `first_line`).
class Collector : public google::protobuf::io::ErrorCollector {
 public:
  Collector(std::string path, int first_line)
      : path_(std::move(path)), first_line_(first_line) {}
  void RecordError(int line, google::protobuf::io::ColumnNumber,
                   absl::string_view message) override {
    if (status_.ok()) status_ = Bad(path_, first_line_ + line, message);
  }
  absl::Status status() const { return status_; }

 private:
  std::string path_;
  int first_line_;
  absl::Status status_;
};

// The body of the top-level block `name` and its first line, nullopt where
// the config has none: the rest of the config is left unread (a newer XLA's
// fields need not parse).
absl::StatusOr<std::optional<std::pair<std::string, int>>> TopBlock(
    const std::string& path, const std::string& text, absl::string_view name) {
  const std::string padded = "\n" + text;
  const std::string head = absl::StrCat("\n", name, " {");
  const size_t at = padded.find(head);
  if (at == std::string::npos) return std::nullopt;
  const size_t open = at + head.size();
  const int line = 1 + static_cast<int>(std::count(
                           padded.begin() + 1, padded.begin() + open, '\n'));
  int depth = 1;
  for (size_t i = open; i < padded.size(); ++i) {
    if (padded[i] == '{') ++depth;
    if (padded[i] == '}' && --depth == 0) {
      return std::make_pair(padded.substr(open, i - open), line);
    }
  }
  return Bad(path, line, absl::StrCat("the ", name, " block is not closed"));
}

// The value of the debug option `name` at the top of debug_options' body
// ("": not given), as XLA writes it: one `name: VALUE` line; `line` is the
// body's first line in `path`. The wheel's DebugOptions predates the field, so
// it is read as text; given twice, it is an error, as for a proto's parser.
absl::StatusOr<std::string> DebugOption(const std::string& path,
                                        absl::string_view body, int line,
                                        absl::string_view name) {
  int depth = 0;
  std::optional<std::string> value;
  for (absl::string_view text : absl::StrSplit(body, '\n')) {
    absl::string_view field = absl::StripAsciiWhitespace(text);
    if (depth == 0 && absl::ConsumePrefix(&field, name) &&
        absl::ConsumePrefix(&field, ":")) {
      if (value.has_value()) {
        return Bad(path, line, absl::StrCat(name, " is given twice"));
      }
      field = absl::StripAsciiWhitespace(field);
      value = std::string(field.substr(0, field.find_first_of(" \t#")));
    }
    depth += static_cast<int>(std::count(text.begin(), text.end(), '{')) -
             static_cast<int>(std::count(text.begin(), text.end(), '}'));
    ++line;
  }
  return value.value_or("");
}

}  // namespace

std::string SidecarConfigPath(const std::string& module_path) {
  std::string stem = module_path;
  for (absl::string_view suffix : {".hlo.pb", ".hlo", ".txt", ".pb"}) {
    if (absl::EndsWith(stem, suffix)) {
      stem.resize(stem.size() - suffix.size());
      break;
    }
  }
  return absl::StrCat(stem, kSuffix);
}

std::string FindModuleConfig(const std::string& module_path) {
  if (module_path.empty() || module_path == "-") return "";
  const std::string sidecar = SidecarConfigPath(module_path);
  if (IsFile(sidecar)) return sidecar;
  // module_0001.jit_f.sm_9.0a_gpu_after_optimizations.txt: names hold dots,
  // so every prefix ending before a dot is tried, the longest first.
  const size_t slash = module_path.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  if (module_path.compare(base, 7, "module_") != 0) return "";
  const size_t first_dot = module_path.find('.', base);
  for (size_t cut = module_path.rfind('.');
       cut != std::string::npos && cut > first_dot;
       cut = module_path.rfind('.', cut - 1)) {
    const std::string candidate =
        absl::StrCat(module_path.substr(0, cut), kSuffix);
    if (IsFile(candidate)) return candidate;
  }
  return "";
}

absl::StatusOr<ModulePlacement> ReadModulePlacement(const std::string& path,
                                                    int64_t max_bytes) {
  absl::StatusOr<std::string> text = ReadInput(path, max_bytes);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::optional<std::pair<std::string, int>>> found =
      TopBlock(path, *text, "static_device_assignment");
  if (!found.ok()) return found.status();
  if (!found->has_value()) {
    return Bad(path, 0, "no static_device_assignment in the module config");
  }
  const std::optional<std::pair<std::string, int>>& block = *found;
  xla::DeviceAssignmentProto proto;
  google::protobuf::TextFormat::Parser parser;
  Collector errors(path, block->second);  // Body line 0 is the block's own.
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(block->first, &proto)) {
    return errors.status().ok()
               ? Bad(path, block->second, "bad device assignment")
               : errors.status();
  }
  ModulePlacement placement;
  placement.replicas = proto.replica_count();
  placement.partitions = proto.computation_count();
  if (placement.replicas < 1 || placement.partitions < 1 ||
      int64_t{placement.replicas} * placement.partitions > kMaxDevices ||
      proto.computation_devices_size() != placement.partitions) {
    return Bad(
        path, block->second,
        absl::StrCat("the device assignment's counts (", placement.replicas,
                     " replicas, ", placement.partitions,
                     " computations) do not match its ",
                     proto.computation_devices_size(), " computation_devices"));
  }
  placement.devices.resize(int64_t{placement.replicas} * placement.partitions);
  absl::flat_hash_set<int64_t> seen;
  for (int p = 0; p < placement.partitions; ++p) {
    const auto& ids = proto.computation_devices(p).replica_device_ids();
    if (ids.size() != placement.replicas) {
      return Bad(
          path, block->second,
          absl::StrCat("computation ", p, " names ", ids.size(),
                       " devices for ", placement.replicas, " replicas"));
    }
    for (int r = 0; r < placement.replicas; ++r) {
      if (ids[r] < 0 || ids[r] >= kMaxDevices || !seen.insert(ids[r]).second) {
        return Bad(path, block->second,
                   absl::StrCat("device ", ids[r],
                                " is negative, too large or "
                                "named twice in the device assignment"));
      }
      placement.devices[r + p * placement.replicas] = static_cast<int>(ids[r]);
    }
  }
  absl::StatusOr<std::optional<std::pair<std::string, int>>> debug =
      TopBlock(path, *text, "debug_options");
  if (!debug.ok()) return debug.status();
  if (debug->has_value()) {
    absl::StatusOr<std::string> mode =
        DebugOption(path, (*debug)->first, (*debug)->second,
                    "xla_gpu_collective_permute_mode");
    if (!mode.ok()) return mode.status();
    placement.collective_permute_mode = *std::move(mode);
  }
  placement.text = std::move(*text);
  return placement;
}

}  // namespace nvshmem_opt
