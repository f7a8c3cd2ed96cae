#include "nvshmem_opt/input.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "nvshmem_opt/backend_config_json.h"
#include "nvshmem_opt/hlo_splice.h"
#include "nvshmem_opt/readable_text.h"
#include "tool_layer/partitions.h"
#include "xla/hlo/ir/hlo_casting_utils.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/hlo/parser/hlo_parser.h"
#include "xla/service/hlo.pb.h"
#include "xla/service/hlo_verifier.h"
#include "xla/shape_util.h"

namespace nvshmem_opt {
namespace {

namespace core = ::xla::gpu::backend_selection;

// XLA's HLO parser recurses once per nested shape, tuple or brace and
// overflows the stack near 10,000 levels; real modules nest fewer than 10.
constexpr int kMaxNesting = 512;

// The 1-based line where nesting passes `limit`, or 0. Quoted strings and
// /* */ comments do not count.
int LineOverNestingLimit(const std::string& text, int limit) {
  int depth = 0, line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') {
          ++i;
        } else if (text[i] == '\n') {
          ++line;
        }
      }
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      size_t end = text.find("*/", i + 2);
      if (end == std::string::npos) end = text.size();
      line += static_cast<int>(
          std::count(text.begin() + i, text.begin() + end, '\n'));
      i = end + 1;
    } else if (c == '(' || c == '{' || c == '[') {
      if (++depth > limit) return line;
    } else if (c == ')' || c == '}' || c == ']') {
      --depth;
    }
  }
  return 0;
}

// Where XLA's lexer finds the first token: after white space (' ', \t, \r,
// \n) and comments (/* */, // to the line's end); data.size() when none.
size_t FirstToken(const std::string& data) {
  size_t i = 0;
  while (i < data.size()) {
    if (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' ||
        data[i] == '\n') {
      ++i;
    } else if (data.compare(i, 2, "/*") == 0) {
      const size_t end = data.find("*/", i + 2);
      if (end == std::string::npos) return data.size();
      i = end + 2;
    } else if (data.compare(i, 2, "//") == 0) {
      i = data.find('\n', i);
      if (i == std::string::npos) return data.size();
    } else {
      break;
    }
  }
  return i;
}

bool LooksLikeHloText(const std::string& data) {
  return data.compare(FirstToken(data), 9, "HloModule") == 0;
}

// 1-based line and column of byte `pos`.
std::string LineColumn(const std::string& data, size_t pos) {
  const size_t line_start = pos == 0 ? 0 : data.rfind('\n', pos - 1) + 1;
  return absl::StrCat(std::count(data.begin(), data.begin() + pos, '\n') + 1,
                      ":", pos - line_start + 1);
}

// Input that is neither: when it reads as text with 'HloModule' near its
// start, what stands before it, at its line and column.
std::string NotAModule(const std::string& path, const std::string& data) {
  const std::string generic =
      path +
      ": neither HLO text (starting with 'HloModule') nor a serialized "
      "HloModuleProto";
  const size_t at = FirstToken(data);
  if (at >= data.size() ||
      data.find("HloModule", at) > std::min<size_t>(data.size(), at + 256)) {
    return generic;
  }
  const unsigned char c = static_cast<unsigned char>(data[at]);
  std::string found = absl::StrCat("byte 0x", absl::Hex(c, absl::kZeroPad2));
  if (c >= 0x20 && c < 0x7f) {
    const size_t end = data.find_first_of(" \t\r\n", at);
    found =
        absl::StrCat("'", data.substr(at, std::min<size_t>(16, end - at)), "'");
  }
  return absl::StrCat(path, ":", LineColumn(data, at), ": ", found,
                      " before 'HloModule' (HLO text starts with it, after "
                      "white space and comments only); not a serialized "
                      "HloModuleProto either");
}

// XLA's parser reports "...\nLINE:COL: message\n<source line>\n^"; keep the
// located line so the user sees file:line:col: message.
std::string LocateParseError(const std::string& path,
                             const std::string& message) {
  static const std::regex located(R"((\d+):(\d+): (?:error: )?([^\n]*))");
  std::smatch match;
  if (std::regex_search(message, match, located)) {
    return path + ":" + match[1].str() + ":" + match[2].str() + ": " +
           match[3].str();
  }
  return path + ": " + OneLine(message);
}

// A shape's dimension XLA's parser refuses without a message of its own (it
// checks Shape::IsValidDimensionSize and returns false: hlo_parser.cc:7022 at
// 3cc8846c), so that its error is empty or names only the enclosing
// attribute: a negative size ('?' is the unbounded one). The first one's line
// and "LINE:COL: ..." (0 and "" where the text has none).
std::pair<int, std::string> InvalidDimension(const std::string& text) {
  for (size_t open = text.find('['); open != std::string::npos;
       open = text.find('[', open + 1)) {
    // An element type before it: a lower-case word starting with a letter.
    size_t type = open;
    while (type > 0 && (absl::ascii_islower(text[type - 1]) ||
                        absl::ascii_isdigit(text[type - 1]))) {
      --type;
    }
    if (type == open || !absl::ascii_islower(text[type])) continue;
    const size_t close = text.find_first_of("[]\n", open + 1);
    if (close == std::string::npos || text[close] != ']') continue;
    for (absl::string_view item : absl::StrSplit(
             absl::string_view(text).substr(open + 1, close - open - 1), ',')) {
      item = absl::StripAsciiWhitespace(item);
      absl::ConsumePrefix(&item, "<=");
      item = absl::StripLeadingAsciiWhitespace(item);
      int64_t size = 0;
      if (absl::StartsWith(item, "-") && absl::SimpleAtoi(item, &size) &&
          size < 0) {
        const int line = static_cast<int>(
            std::count(text.begin(), text.begin() + type, '\n') + 1);
        return {line, absl::StrCat(LineColumn(text, type), ": shape ",
                                   text.substr(type, close + 1 - type),
                                   " has dimension ", item,
                                   "; a dimension is 0 or more ('?' for "
                                   "unbounded)")};
      }
    }
  }
  return {0, ""};
}

// The one-line message for XLA's parse error `message` on `text` (as parsed).
std::string ParseFailure(const std::string& path, const std::string& text,
                         const std::string& message) {
  // The parser reads in order: a bad dimension at or before the line of its
  // error is the reason, which its message lacks ("...as a HloModule:" and
  // nothing, or "error parsing attribute X").
  static const std::regex located(R"((\d+):\d+: )");
  std::smatch at;
  const int error_line = std::regex_search(message, at, located)
                             ? std::atoi(at[1].str().c_str())
                             : 0;
  const bool empty =
      absl::StripAsciiWhitespace(message.substr(message.find(':') + 1)).empty();
  if (empty || error_line > 0) {
    const auto [line, dimension] = InvalidDimension(text);
    if (line > 0 && (empty || line <= error_line)) {
      return path + ":" + dimension;
    }
  }
  if (empty) {
    return path +
           ": XLA's parser refuses the module without saying why (it does so "
           "for a shape it cannot make)";
  }
  return LocateParseError(path, message);
}

absl::Status Bad(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// A serialized HloModuleProto (or HloProto). Its partition and replica
// counts are in its device assignment when it has one.
absl::StatusOr<std::unique_ptr<xla::HloModule>> ModuleFromProto(
    const std::string& path, const std::string& data) {
  xla::HloModuleProto proto;
  xla::HloProto wrapper;
  if (wrapper.ParseFromString(data) && wrapper.has_hlo_module() &&
      !wrapper.hlo_module().name().empty()) {
    proto = wrapper.hlo_module();
  } else if (!proto.ParseFromString(data) || proto.name().empty() ||
             proto.computations_size() == 0) {
    return Bad(NotAModule(path, data));
  }
  absl::StatusOr<xla::HloModuleConfig> config =
      xla::HloModule::CreateModuleConfigFromProto(proto, xla::DebugOptions());
  if (!config.ok()) {
    return Bad(path +
               ": bad HloModuleProto: " + OneLine(config.status().ToString()));
  }
  int replicas = 1, partitions = 1;
  if (config->has_static_device_assignment()) {
    replicas = config->static_device_assignment().replica_count();
    partitions = config->static_device_assignment().computation_count();
  }
  config->set_replica_count(replicas);
  config->set_num_partitions(partitions);
  absl::StatusOr<std::unique_ptr<xla::HloModule>> module =
      xla::HloModule::CreateFromProto(proto, *config);
  if (!module.ok()) {
    return Bad(path +
               ": bad HloModuleProto: " + OneLine(module.status().ToString()));
  }
  return module;
}

// --- Partition count of modules that do not state it ------------------------
//
// jax.jit(f).lower(...).as_text(dialect="hlo") prints no num_partitions in the
// header, and XLA's parser then assumes 1, which no SPMD permute fits.

// Devices of the largest Shardy mesh in the module's frontend attributes
// (xla.sdy.meshes={mesh = #sdy.mesh<["cp"=8]>}), or 0 without one.
int64_t SdyMeshDevices(const xla::HloModule& module) {
  const auto& map = module.frontend_attributes().map();
  auto it = map.find("xla.sdy.meshes");
  if (it == map.end()) return 0;
  static const std::regex mesh_re(R"(#sdy\.mesh<\[([^\]]*)\])");
  static const std::regex axis_re(R"(=\s*(\d{1,7}))");
  int64_t largest = 0;
  const std::sregex_iterator end;
  for (std::sregex_iterator m(it->second.begin(), it->second.end(), mesh_re);
       m != end; ++m) {
    const std::string axes = (*m)[1].str();
    int64_t devices = 1;
    for (std::sregex_iterator a(axes.begin(), axes.end(), axis_re); a != end;
         ++a) {
      devices = std::min<int64_t>(devices * std::stoll((*a)[1].str()), 1 << 24);
    }
    largest = std::max(largest, devices);
  }
  return largest;
}

// One more than the largest partition id that a collective with a channel
// (cross-partition) names in its pairs or groups; 0 when none does.
int64_t PartitionIdsUsed(const xla::HloModule& module) {
  int64_t used = 0;
  for (const xla::HloComputation* computation : module.computations()) {
    for (const xla::HloInstruction* instr : computation->instructions()) {
      const auto* channel = xla::DynCast<xla::HloChannelInstruction>(instr);
      if (channel == nullptr || !channel->channel_id().has_value()) continue;
      if (const auto* cp =
              xla::DynCast<xla::HloCollectivePermuteInstruction>(instr)) {
        for (const auto& [src, dst] : cp->source_target_pairs()) {
          used = std::max({used, src + 1, dst + 1});
        }
      } else if (const auto* collective =
                     xla::DynCast<xla::HloCollectiveInstruction>(instr)) {
        for (const xla::ReplicaGroup& group : collective->replica_groups()) {
          for (int64_t id : group.replica_ids()) used = std::max(used, id + 1);
        }
      }
    }
  }
  return used;
}

// Where the driver settles partition and replica counts: the options, else
// what the input states (a text header's num_partitions, a proto's device
// assignment), else InferPartitions (core/tool_layer/partitions.h, the rule the
// Python tools share). Returns a note for the user when it was inferred.
std::string SettlePartitions(const std::string& path, bool text,
                             const LoadOptions& options,
                             const std::string& header, xla::HloModule* module,
                             std::string* inferred_from) {
  xla::HloModuleConfig& config = module->mutable_config();
  if (options.num_replicas > 0) config.set_replica_count(options.num_replicas);
  if (options.num_partitions > 0) {
    config.set_num_partitions(options.num_partitions);
    return "";
  }
  const bool stated = text ? header.find("num_partitions=") != std::string::npos
                           : config.has_static_device_assignment();
  if (stated || config.num_partitions() != 1) return "";
  if (!text && options.topology != nullptr) {  // A proto fills the topology.
    config.set_num_partitions(std::max<int64_t>(
        1, options.topology->num_devices() / config.replica_count()));
    return "";
  }
  core::ModuleDevices devices;
  devices.ids_used = PartitionIdsUsed(*module);
  devices.mesh_devices = SdyMeshDevices(*module);
  devices.topology_devices =
      options.topology != nullptr ? options.topology->num_devices() : 0;
  devices.replicas = config.replica_count();
  const core::PartitionCount count = core::InferPartitions(devices);
  if (count.from.empty()) return "";
  config.set_num_partitions(count.partitions);
  *inferred_from = count.from;
  return absl::StrCat(path, ": ",
                      text ? "the module's header gives no num_partitions "
                             "(jax-lowered text?)"
                           : "the serialized module gives no num_partitions",
                      "; using ", count.partitions, " from ", count.from,
                      " (--num-partitions=N overrides)");
}

// Each permute's backend_config as the pass will edit it: JSON (XLA's parser
// takes any brace-balanced text). The message names the statement's line.
absl::Status CheckPermuteConfigs(const std::string& path,
                                 const LoadedModule& loaded) {
  for (const xla::HloComputation* computation : loaded.module->computations()) {
    for (const xla::HloInstruction* instr : computation->instructions()) {
      if (instr->opcode() != xla::HloOpcode::kCollectivePermute &&
          instr->opcode() != xla::HloOpcode::kCollectivePermuteStart) {
        continue;
      }
      absl::Status status =
          CheckBackendConfigJson(instr->raw_backend_config_string());
      if (status.ok()) continue;
      const int line =
          StatementLine(loaded.text, std::string(computation->name()),
                        std::string(instr->name()));
      return Bad(absl::StrCat(path, line > 0 ? absl::StrCat(":", line) : "",
                              ": ", instr->name(), ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string OneLine(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

namespace {

InputBounds& Bounds() {
  static InputBounds bounds;
  return bounds;
}

// The length of the valid UTF-8 sequence at text[i], 0 where there is none
// (a stray continuation byte, a cut or overlong sequence, a surrogate).
size_t Utf8Length(const std::string& text, size_t i) {
  const unsigned char c = static_cast<unsigned char>(text[i]);
  size_t n = 0;
  unsigned char low = 0x80, high = 0xBF;  // Allowed range of the 2nd byte.
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) low = 0xA0;
    if (c == 0xED) high = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) low = 0x90;
    if (c == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const unsigned char b = static_cast<unsigned char>(text[i + k]);
    if (b < (k == 1 ? low : 0x80) || b > (k == 1 ? high : 0xBF)) return 0;
  }
  return n;
}

}  // namespace

void SetInputBounds(const InputBounds& bounds) { Bounds() = bounds; }
const InputBounds& CurrentInputBounds() { return Bounds(); }

std::string Printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t n = Utf8Length(text, i);
    if (n == 0 || (n == 1 && ((c < 0x20 && c != '\t') || c == 0x7f))) {
      out += absl::StrCat("\\x", absl::Hex(c, absl::kZeroPad2));
      ++i;
    } else {
      out.append(text, i, n);
      i += n;
    }
  }
  return out;
}

int64_t AddressSpaceLeft() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return std::numeric_limits<int64_t>::max();
  }
  // VmSize, in pages, is statm's first field.
  int64_t pages = 0;
  std::ifstream statm("/proc/self/statm");
  if (!(statm >> pages)) return std::numeric_limits<int64_t>::max();
  const int64_t mapped = pages * sysconf(_SC_PAGESIZE);
  const int64_t cap = static_cast<int64_t>(
      std::min<rlim_t>(limit.rlim_cur, std::numeric_limits<int64_t>::max()));
  return std::max<int64_t>(0, cap - mapped);
}

std::string AddressSpaceText() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return "";
  }
  return absl::StrCat("ulimit -v ", limit.rlim_cur / 1024, " KiB, ",
                      AddressSpaceLeft() / 1024, " KiB of it unmapped");
}

absl::StatusOr<std::string> ReadInput(const std::string& path,
                                      int64_t max_bytes, double timeout_s) {
  return ReadBounded(path, {max_bytes, "--max-input-bytes", timeout_s});
}

absl::StatusOr<std::string> ReadBounded(const std::string& path,
                                        const InputLimit& limit) {
  const std::string& name = path;
  // Room for the buffer while it grows (the old and the new one at once).
  const std::string address_space = AddressSpaceText();
  const int64_t room = AddressSpaceLeft() / 2;
  const int64_t bound = std::min(limit.max_bytes, room);
  auto too_big = [&](const std::string& size) {
    if (bound < limit.max_bytes) {
      return Bad(absl::StrCat(
          name, ": input is ", size, " bytes, over the ", bound,
          " that the address-space limit leaves "
          "for reading it (",
          address_space, "; ", limit.set_by, " allows ", limit.max_bytes, ")"));
    }
    return Bad(absl::StrCat(name, ": input is ", size,
                            " bytes, over the limit of ", limit.max_bytes, " (",
                            limit.set_by, ")"));
  };
  struct stat info;
  int fd = 0;  // stdin for '-'
  if (path == "-") {
    if (fstat(0, &info) != 0) return Bad(name + ": cannot read stdin");
  } else {
    if (stat(path.c_str(), &info) != 0) {
      const int error = errno;
      if (error == ELOOP) {
        return Bad(name +
                   ": cannot read: a symbolic link loop (too many levels of "
                   "symbolic links)");
      }
      struct stat link;
      if (error == ENOENT && lstat(path.c_str(), &link) == 0 &&
          S_ISLNK(link.st_mode)) {
        return Bad(name + ": a symbolic link to a file that does not exist");
      }
      if (error == ENOENT) return Bad(name + ": no such file");
      return Bad(name + ": cannot read: " + std::strerror(error));
    }
    if (S_ISDIR(info.st_mode))
      return Bad(name + ": is a directory, not a file");
    if (S_ISSOCK(info.st_mode)) return Bad(name + ": is a socket, not a file");
    if (S_ISREG(info.st_mode) && info.st_size > bound) {
      return too_big(std::to_string(info.st_size));
    }
    // Not blocking: a FIFO no writer has opened would block open() itself.
    fd = open(path.c_str(),
              O_RDONLY | O_CLOEXEC | (S_ISREG(info.st_mode) ? 0 : O_NONBLOCK));
    if (fd < 0) {
      return Bad(name + ": cannot open for reading: " + std::strerror(errno));
    }
  }
  // A FIFO, pipe or device may never end: each wait for its next bytes is
  // bounded. A FIFO without a writer polls as silent, not as ended.
  const bool polled = !S_ISREG(info.st_mode) && !S_ISBLK(info.st_mode);
  const double timeout_s =
      limit.timeout_s >= 0 ? limit.timeout_s : Bounds().timeout_s;
  const int timeout_ms = static_cast<int>(std::min(timeout_s * 1000, 2e9));
  // Blocks that are never copied while reading, each reserved exactly (a
  // fresh string's reserve is; a full one's may double, past the bound):
  // an input over the bound costs the bound, no more.
  std::vector<std::string> blocks;
  int64_t total = 0;
  absl::Status status = absl::OkStatus();
  try {
    std::vector<char> chunk(1 << 16);
    while (true) {
      if (polled) {
        struct pollfd waiter = {fd, POLLIN | POLLPRI, 0};
        const int ready = poll(&waiter, 1, timeout_ms);
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0) {
          status = Bad(absl::StrCat(
              name, ": ", S_ISFIFO(info.st_mode) ? "a FIFO" : "an input",
              " silent for ", timeout_s, " s",
              total == 0 ? (S_ISFIFO(info.st_mode) && path != "-"
                                ? "; nothing wrote to it"
                                : "")
                         : absl::StrCat(" after ", total, " bytes"),
              " (--input-timeout)"));
          break;
        }
      }
      // At most one byte past the bound: enough to know it is over.
      const size_t want = static_cast<size_t>(
          std::min<int64_t>(chunk.size(), bound + 1 - total));
      const ssize_t n = read(fd, chunk.data(), want);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n < 0) {
        status = Bad(name + ": read error: " + std::strerror(errno));
        break;
      }
      if (n == 0) break;
      if (blocks.empty() ||
          blocks.back().size() + n > blocks.back().capacity()) {
        // A regular file's size is known: one block. Else each block is as
        // large as all before it.
        const int64_t size = S_ISREG(info.st_mode) && blocks.empty()
                                 ? info.st_size + 1
                                 : std::max<int64_t>(total, int64_t{1} << 16);
        blocks.emplace_back();
        blocks.back().reserve(static_cast<size_t>(
            std::max<int64_t>(n, std::min(size, bound + 1 - total))));
      }
      blocks.back().append(chunk.data(), static_cast<size_t>(n));
      total += n;
      if (total > bound) {
        status = too_big("more than " + std::to_string(bound));
        break;
      }
    }
  } catch (const std::bad_alloc&) {
    status = Bad(absl::StrCat(
        name, ": out of memory after reading ", total, " bytes",
        AddressSpaceText().empty() ? "" : " (" + AddressSpaceText() + ")"));
  }
  std::string data;
  if (status.ok() && blocks.size() == 1) {
    data = std::move(blocks[0]);
  } else if (status.ok()) {
    try {
      data.reserve(static_cast<size_t>(total));
      for (std::string& block : blocks) {
        data.append(block);
        std::string().swap(block);
      }
    } catch (const std::bad_alloc&) {
      status = Bad(absl::StrCat(
          name, ": out of memory holding its ", total, " bytes",
          AddressSpaceText().empty() ? "" : " (" + AddressSpaceText() + ")"));
    }
  }
  if (path != "-") close(fd);
  if (!status.ok()) return status;
  return data;
}

absl::StatusOr<LoadedModule> ParseModule(const std::string& path,
                                         std::string data,
                                         const LoadOptions& options) {
  if (data.empty()) return Bad(path + ": empty file");
  // Refused before XLA allocates: a parser out of memory aborts the process.
  const int64_t left = AddressSpaceLeft();
  if (static_cast<int64_t>(data.size()) > left / kParseBytesPerInputByte) {
    return Bad(absl::StrCat(
        path, ": ", data.size(), " bytes of module; XLA's parser takes about ",
        kParseBytesPerInputByte, " bytes of memory a byte, more than the ",
        "address-space limit leaves (", AddressSpaceText(), ")"));
  }
  LoadedModule loaded;
  const bool text = LooksLikeHloText(data);
  if (!text) {
    absl::StatusOr<std::unique_ptr<xla::HloModule>> module =
        ModuleFromProto(path, data);
    if (!module.ok()) return module.status();
    loaded.module = *std::move(module);
  } else {
    if (int line = LineOverNestingLimit(data, kMaxNesting); line > 0) {
      return Bad(
          absl::StrCat(path, ":", line, ": nesting deeper than ", kMaxNesting,
                       " levels (shapes, tuples or braces); refused before "
                       "XLA's parser, which would overflow its stack"));
    }
    // Same lines, so the parser's line numbers are the input's.
    std::string readable = ReadableText(data, &loaded.rewritten_for_xla);
    absl::StatusOr<std::unique_ptr<xla::HloModule>> module =
        xla::ParseAndReturnUnverifiedModule(readable);
    if (!module.ok()) {
      std::string message =
          ParseFailure(path, readable, std::string(module.status().message()));
      if (readable.find("replica_groups=mesh[") != std::string::npos) {
        message +=
            " (replica_groups=mesh[...] in a form nvshmem-opt cannot expand)";
      }
      return Bad(message);
    }
    loaded.module = *std::move(module);
    loaded.text = std::move(data);
  }
  const size_t header = text ? FirstToken(loaded.text) : 0;
  const std::string header_line =
      text ? loaded.text.substr(header, loaded.text.find('\n', header) - header)
           : "";
  // A count the module states is the module's: the flag is for one that does
  // not (jax-lowered text), and a different one is the flag's mistake.
  const xla::HloModuleConfig& parsed = loaded.module->config();
  const bool stated =
      text ? header_line.find("num_partitions=") != std::string::npos
           : parsed.has_static_device_assignment();
  if (options.num_partitions > 0 && stated &&
      parsed.num_partitions() != options.num_partitions) {
    return Bad(absl::StrCat(path, ": --num-partitions=", options.num_partitions,
                            " contradicts the module's ",
                            text ? "header" : "device assignment",
                            " (num_partitions=", parsed.num_partitions(),
                            "); the flag is for a module that gives no count"));
  }
  loaded.partitions_note =
      SettlePartitions(path, text, options, header_line, loaded.module.get(),
                       &loaded.partitions_from);
  return loaded;
}

absl::StatusOr<LoadedModule> LoadModule(const std::string& path,
                                        std::string data,
                                        const LoadOptions& options,
                                        const LoadHook& stage) {
  if (stage) stage("parsing the module");
  absl::StatusOr<LoadedModule> loaded =
      ParseModule(path, std::move(data), options);
  if (!loaded.ok()) return loaded.status();
  if (stage) stage("verifying the input");
  if (absl::Status status = Verify(loaded->module.get()); !status.ok()) {
    return Bad(path + ": HloVerifier rejects the input: " +
               OneLine(std::string(status.message())));
  }
  if (absl::Status status = CheckPermuteConfigs(path, *loaded); !status.ok())
    return status;
  return loaded;
}

absl::Status Verify(xla::HloModule* module) {
  xla::HloVerifier verifier(/*layout_sensitive=*/false,
                            /*allow_mixed_precision=*/true);
  if (absl::Status status = verifier.Run(module).status(); !status.ok())
    return status;
  // The layout-insensitive verifier accepts invalid layouts such as {2,2,0},
  // on which XLA later throws (uncaught) while building tuple shapes, e.g. in
  // HloModule::Clone (found by tests/fuzz/driver_fuzzer).
  for (const xla::HloComputation* computation : module->computations()) {
    for (const xla::HloInstruction* instr : computation->instructions()) {
      absl::Status status =
          xla::ShapeUtil::ValidateShapeWithOptionalLayout(instr->shape());
      if (!status.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(instr->name(), ": ", status.message()));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace nvshmem_opt
