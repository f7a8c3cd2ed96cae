#include "nvshmem_opt/module_config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
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
#include "absl/strings/numbers.h"
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
                                        absl::string_view name,
                                        int* found_line = nullptr) {
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
      if (found_line != nullptr) *found_line = line;
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

namespace {

// The paths a config of `module_path` may have, in the order they are tried:
// its sidecar, then XLA's config of the dumped module the file belongs to.
std::vector<std::string> ConfigCandidates(const std::string& module_path) {
  if (module_path.empty() || module_path == "-") return {};
  std::vector<std::string> candidates = {SidecarConfigPath(module_path)};
  // module_0001.jit_f.sm_9.0a_gpu_after_optimizations.txt: names hold dots,
  // so every prefix ending before a dot is tried, the longest first.
  const size_t slash = module_path.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  if (module_path.compare(base, 7, "module_") != 0) return candidates;
  const size_t first_dot = module_path.find('.', base);
  for (size_t cut = module_path.rfind('.');
       cut != std::string::npos && cut > first_dot;
       cut = module_path.rfind('.', cut - 1)) {
    candidates.push_back(absl::StrCat(module_path.substr(0, cut), kSuffix));
  }
  return candidates;
}

}  // namespace

std::string FindModuleConfig(const std::string& module_path) {
  for (const std::string& candidate : ConfigCandidates(module_path)) {
    if (IsFile(candidate)) return candidate;
  }
  return "";
}

absl::Status CheckConfigBeside(const std::string& module_path) {
  for (const std::string& candidate : ConfigCandidates(module_path)) {
    struct stat link;
    if (lstat(candidate.c_str(), &link) != 0) continue;
    if (IsFile(candidate)) return absl::OkStatus();  // The one read.
    // Something by a config's name that is no file: read as one, a FIFO
    // would stall the run; skipped, the module would lose its placement.
    struct stat target;
    std::string what = "not a regular file";
    if (stat(candidate.c_str(), &target) != 0) {
      what = errno == ELOOP ? "a symbolic link loop"
                            : "a symbolic link to a file that does not exist";
    } else if (S_ISFIFO(target.st_mode)) {
      what = "a FIFO, not a regular file";
    } else if (S_ISDIR(target.st_mode)) {
      what = "a directory, not a file";
    } else if (S_ISCHR(target.st_mode) || S_ISBLK(target.st_mode)) {
      what = "a device, not a regular file";
    } else if (S_ISSOCK(target.st_mode)) {
      what = "a socket, not a file";
    }
    return Bad(candidate, 0,
               absl::StrCat(what,
                            "; the module config beside a module is "
                            "read only from a regular file (give "
                            "--module-config=PATH to read another)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModulePlacement> ReadModulePlacement(const std::string& path,
                                                    int64_t max_bytes) {
  // A config is tens of KB: its own limit, whatever --max-input-bytes says.
  absl::StatusOr<std::string> text = ReadBounded(
      path, {max_bytes,
             absl::StrCat("a module config's own limit, ",
                          max_bytes % (1 << 20) == 0
                              ? absl::StrCat(max_bytes >> 20, " MiB")
                              : absl::StrCat(max_bytes, " bytes"),
                          ", fixed; --max-input-bytes bounds the module and "
                          "the cost table")});
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
  // The config's own counts, where given, are its device assignment's, as
  // the tools' reader checks them (hlo_tools/hlo/module_config.py).
  for (const auto& [name, want] :
       {std::pair<const char*, int>{"replica_count", placement.replicas},
        {"num_partitions", placement.partitions}}) {
    int line = 0;
    absl::StatusOr<std::string> given =
        DebugOption(path, *text, 1, name, &line);
    if (!given.ok()) return given.status();
    if (given->empty()) continue;
    int64_t count = 0;
    if (!absl::SimpleAtoi(*given, &count)) {
      return Bad(path, line,
                 absl::StrCat("'", name, "' ", *given,
                              " is not an integer that fits in 64 bits"));
    }
    if (count > 0 && count != want) {
      return Bad(path, line,
                 absl::StrCat(name, " ", count,
                              " differs from the device assignment's ", want,
                              " (line ", block->second, ")"));
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
