// nvshmem-opt: an hlo-opt-style driver for the NVSHMEM collective-permute
// rewriter. Reads HLO text or a serialized HloModuleProto, runs
// HloVerifier -> pass -> HloVerifier, and writes the result and, on request, a
// JSON report of every decision (optionally next to the decision of
// upstream's CollectiveBackendAssigner).
//
// Exit codes: 0 success, 1 the pass produced an invalid module (a bug),
// 2 unusable input (missing file, malformed HLO, bad flag or topology).

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "driver/alt_signal_stack.h"
#include "driver/backend_config_json.h"
#include "google/protobuf/util/json_util.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_backend_selection.h"
#include "plan/permute_plan.h"
#include "xla/hlo/ir/hlo_casting_utils.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/parser/hlo_parser.h"
#include "xla/hlo/transforms/collectives/async_collective_creator.h"
#include "xla/service/gpu/backend_configs.pb.h"
#include "xla/service/gpu/transforms/collectives/collective_backend_assigner.h"
#include "xla/service/hlo.pb.h"
#include "xla/service/hlo_verifier.h"
#include "xla/shape_util.h"
#include "xla/stream_executor/cuda/cuda_compute_capability.h"
#include "xla/stream_executor/device_description.h"

namespace {

namespace sel = xla::gpu::nvshmem_selection;
using Rewriter = nvshmem_plan::PlanningRewriter;

// GPUs per host when the topology is derived and --devices-per-host is not
// given: one HGX H100/H200 node. A module on fewer devices gets one host of
// its size, so that a 2-GPU program is not modeled as 8.
constexpr int kDefaultDevicesPerHost = 8;

constexpr char kUsage[] =
    "usage: nvshmem-opt INPUT [--topology=SPEC | --devices-per-host=N]\n"
    "         [-o OUT] [--cost-table=FILE]\n"
    "         [--mode=rewrite|annotate|explain] [--annotate] [--report=JSON]\n"
    "         [--backends=nccl,nvshmem|nccl,peer[,symmetric]]\n"
    "         [--compare-upstream] [--upstream-threshold-bytes=N] [--time]\n"
    "         [--num-partitions=N] [--num-replicas=N]\n"
    "         [--max-input-bytes=N (default 1 GiB; larger inputs are "
    "refused)]\n"
    "       nvshmem-opt --print-cost-table [--cost-table=FILE]\n"
    "INPUT is HLO text or a serialized HloModuleProto/HloProto; '-' reads "
    "stdin.\n"
    "Without --topology, the topology comes from the module, as the pass "
    "derives it\n"
    "inside XLA: hosts of N GPUs (--devices-per-host, default 8 = one HGX "
    "H100/H200\n"
    "node, or the module's device count when smaller), one NVLink domain "
    "each,\n"
    "holding every device (partitions x replicas), placed by the module's "
    "device\n"
    "assignment when it has one. The devices must fill whole hosts (a "
    "partial\n"
    "host needs a SPEC).\n"
    "SPEC overrides that: SLICESxHOSTSxGPUS[:nvlN][:map=D0,D1,...], e.g. "
    "1x2x4 or\n"
    "1x9x8:nvl72.\n"
    "Partition and replica counts come from the module (its header, a proto's "
    "device\n"
    "assignment, a Shardy mesh, the largest id its collectives name, the "
    "topology);\n"
    "--num-partitions and --num-replicas give them.\n"
    "rewrite writes each permute's backend (as XLA's "
    "CollectiveBackendAssigner\n"
    "does) and makes the permutes async (as XLA's AsyncCollectiveCreator "
    "does);\n"
    "annotate only records decisions in frontend attributes, which --annotate\n"
    "adds to rewrite; explain prints them. --backends names what the target "
    "XLA\n"
    "runs: nccl,nvshmem (default) or nccl,peer[,symmetric] (jax >= 0.10.2, "
    "written\n"
    "as collectives_mode).\n";

struct Flags {
  std::string input;
  std::string output;
  std::string topology;      // Empty: derived from the module.
  int devices_per_host = 0;  // 0: kDefaultDevicesPerHost (capped).
  std::string cost_table;
  std::string backends;  // Empty: the table's set (nccl,nvshmem by default).
  std::string mode = "rewrite";
  std::string report;
  bool compare_upstream = false;
  bool annotate = false;  // Decisions also in frontend attributes.
  int64_t upstream_threshold_bytes = xla::gpu::kDefaultThresholdInBytes;
  bool print_cost_table = false;
  int num_partitions = 0;  // 0: from the input (InferNumPartitions).
  int num_replicas = 0;
  bool time = false;
  int64_t max_input_bytes = int64_t{1} << 30;  // Larger inputs are refused.
};

// --- Guard around XLA's own code -------------------------------------------
//
// XLA's parser and verifier CHECK-fail (abort the process) on some malformed
// modules instead of returning an error, e.g. a computation whose parameter
// numbers skip one ("Check failed: param_no >= 0 && param_no <
// parameter_count", found by fuzz/driver_fuzzer). While XLA runs we park
// stderr in a memory file, and a SIGABRT/SIGSEGV/SIGBUS/SIGFPE handler turns
// such a death into our usual one line, quoting XLA's check:
//   nvshmem-opt: IN.hlo: XLA aborted while parsing the module: Check failed:
//   ...
// with exit code 2 while reading or verifying the input (unusable input) and
// 1 from then on (a bug). NVSHMEM_OPT_TF_LOGS=1 leaves stderr alone.
struct XlaGuard {
  const char* stage = nullptr;  // Null: not inside XLA.
  int exit_code = 2;
  int saved_stderr = -1;  // The real stderr while parked.
  int capture = -1;       // Memory file holding XLA's stderr.
  char input[512] = "";
};
XlaGuard g_guard;

// Async-signal-safe: only write/read/lseek/_exit and fixed buffers.
void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}
void WriteStr(int fd, const char* text) { WriteAll(fd, text, strlen(text)); }

extern "C" void OnFatalSignal(int sig) {
  int fd = g_guard.saved_stderr >= 0 ? g_guard.saved_stderr : 2;
  // XLA's fatal log line: "F0000 00:00:... file.cc:185] Check failed: ...".
  static char log[16384];
  static char detail[1024];
  detail[0] = '\0';
  if (g_guard.capture >= 0 && lseek(g_guard.capture, 0, SEEK_SET) == 0) {
    ssize_t n = read(g_guard.capture, log, sizeof(log) - 1);
    log[n > 0 ? n : 0] = '\0';
    for (char* line = log; *line != '\0';) {
      char* end = strchr(line, '\n');
      if (end != nullptr) *end = '\0';
      // An uncaught exception (e.g. absl's BadStatusOrAccess) ends in
      // "terminate called ...\n  what():  <message>".
      char* bracket = strstr(line, "] ");
      char* what = strstr(line, "what():  ");
      if ((line[0] == 'F' && bracket != nullptr) || what != nullptr) {
        size_t k = 0;
        for (const char* c = what != nullptr ? what + 9 : bracket + 2;
             *c != '\0' && k + 1 < sizeof(detail);) {
          detail[k++] = static_cast<unsigned char>(*c) < 0x20 ? ' ' : *c;
          ++c;
        }
        while (k > 0 && detail[k - 1] == ' ') --k;
        detail[k] = '\0';
        break;
      }
      if (end == nullptr) break;
      line = end + 1;
    }
  }
  WriteStr(fd, "nvshmem-opt: ");
  WriteStr(fd, g_guard.input);
  WriteStr(fd, ": XLA ");
  WriteStr(fd, sig == SIGABRT ? "aborted" : "crashed");
  WriteStr(fd, " while ");
  WriteStr(fd, g_guard.stage != nullptr ? g_guard.stage : "running");
  if (detail[0] != '\0') {
    WriteStr(fd, ": ");
    WriteStr(fd, detail);
  } else if (sig != SIGABRT) {
    WriteStr(fd, sig == SIGSEGV  ? ": segmentation fault"
                 : sig == SIGBUS ? ": bus error"
                                 : ": arithmetic error");
  }
  WriteStr(fd, g_guard.exit_code == 2 ? " (the input is malformed)\n"
                                      : " (a bug)\n");
  _exit(g_guard.exit_code);
}

void EndXlaStage() {
  if (g_guard.saved_stderr >= 0) {
    std::cerr.flush();
    dup2(g_guard.saved_stderr, 2);
    close(g_guard.saved_stderr);
    g_guard.saved_stderr = -1;
  }
  g_guard.stage = nullptr;
}

void BeginXlaStage(const char* stage, int exit_code) {
  static bool installed = false;
  if (!installed) {
    installed = true;
    nvshmem_opt::HandleFatalSignals(OnFatalSignal);
    if (std::getenv("NVSHMEM_OPT_TF_LOGS") == nullptr) {
      g_guard.capture = memfd_create("nvshmem-opt-xla-log", 0);
    }
  }
  g_guard.stage = stage;
  g_guard.exit_code = exit_code;
  if (g_guard.capture >= 0 && g_guard.saved_stderr < 0) {
    std::cerr.flush();
    ftruncate(g_guard.capture, 0);
    lseek(g_guard.capture, 0, SEEK_SET);
    g_guard.saved_stderr = dup(2);
    dup2(g_guard.capture, 2);
  }
}

// An error line stays readable: XLA's verifier may quote a whole
// instruction (megabytes for a permute with a million pairs).
std::string CapLine(const std::string& text) {
  constexpr size_t kLimit = 400, kKept = 300;
  if (text.size() <= kLimit) return text;
  size_t cut = kKept;
  // Never cut a UTF-8 sequence in half.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return text.substr(0, cut) + "... (" + std::to_string(text.size() - cut) +
         " more characters)";
}

[[noreturn]] void Fail(int code, const std::string& message) {
  EndXlaStage();
  std::cerr << "nvshmem-opt: " << CapLine(message) << "\n";
  std::exit(code);
}

std::string OneLine(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

// An integer flag's value in [min, max], or a one-line error.
int64_t IntegerFlag(const std::string& name, const std::string& text,
                    int64_t min, int64_t max) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
    Fail(2, "--" + name + ": '" + text + "' is not " +
                (min == 0 ? "a non-negative" : "a positive") +
                " integer (at most " + std::to_string(max) + ")");
  }
  return value;
}

// Sets the flag `name`; `take` yields its value, `no_value` checks it has
// none. False for an unknown name.
bool SetFlag(Flags& flags, const std::string& name,
             const std::function<std::string()>& take,
             const std::function<void()>& no_value) {
  const std::map<std::string, std::string*> strings = {
      {"topology", &flags.topology}, {"cost-table", &flags.cost_table},
      {"backends", &flags.backends}, {"mode", &flags.mode},
      {"report", &flags.report},     {"output", &flags.output}};
  const std::map<std::string, bool*> switches = {
      {"annotate", &flags.annotate},
      {"compare-upstream", &flags.compare_upstream},
      {"print-cost-table", &flags.print_cost_table},
      {"time", &flags.time}};
  constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
  if (auto it = strings.find(name); it != strings.end()) {
    *it->second = take();
  } else if (auto it = switches.find(name); it != switches.end()) {
    no_value();
    *it->second = true;
  } else if (name == "upstream-threshold-bytes") {
    flags.upstream_threshold_bytes = IntegerFlag(name, take(), 0, kMaxInt64);
  } else if (name == "devices-per-host") {
    flags.devices_per_host = IntegerFlag(name, take(), 1, 1 << 20);
  } else if (name == "num-partitions") {
    flags.num_partitions = IntegerFlag(name, take(), 1, 1 << 20);
  } else if (name == "num-replicas") {
    flags.num_replicas = IntegerFlag(name, take(), 1, 1 << 20);
  } else if (name == "max-input-bytes") {
    flags.max_input_bytes = IntegerFlag(name, take(), 1, kMaxInt64);
  } else {
    return false;
  }
  return true;
}

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (arg == "-o") {
      if (i + 1 >= argc) Fail(2, "-o needs a file name");
      flags.output = argv[++i];
      continue;
    }
    if (arg.size() < 2 || arg.rfind("--", 0) != 0) {
      positional.push_back(arg);
      continue;
    }
    // --name=value or --name value; '_' and '-' are the same in names.
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    std::replace(name.begin(), name.end(), '_', '-');
    auto take = [&]() -> std::string {
      if (value) return *value;
      if (i + 1 >= argc) Fail(2, "--" + name + " needs a value");
      return argv[++i];
    };
    auto no_value = [&]() {
      if (value) Fail(2, "--" + name + " takes no value");
    };
    if (!SetFlag(flags, name, take, no_value)) {
      Fail(2, "unknown flag '" + arg + "' (see --help)");
    }
  }
  if (flags.mode != "rewrite" && flags.mode != "annotate" &&
      flags.mode != "explain") {
    Fail(2, "unknown --mode '" + flags.mode +
                "' (expected rewrite, annotate or explain)");
  }
  if (flags.print_cost_table) return flags;
  if (positional.size() != 1) {
    Fail(2, std::string(positional.empty() ? "no INPUT given"
                                           : "more than one INPUT given") +
                " (see --help)");
  }
  flags.input = positional[0];
  if (!flags.topology.empty() && flags.devices_per_host > 0) {
    Fail(2,
         "--devices-per-host and --topology: give one (the spec says how many "
         "GPUs a host has)");
  }
  return flags;
}

// Inputs above max_bytes are refused: XLA holds a module in memory several
// times its text size (see docs/reliability.md). Regular files are checked
// before reading; anything else (stdin, pipes, /dev/zero) is read in chunks
// and refused as soon as it passes the limit.
std::string ReadFileOrDie(const std::string& path,
                          int64_t max_bytes = int64_t{1} << 30) {
  auto too_big = [&](const std::string& size) {
    Fail(2, path + ": input is " + size + " bytes, over the limit of " +
                std::to_string(max_bytes) + " (--max-input-bytes)");
  };
  std::ifstream file;
  if (path != "-") {
    struct stat info;
    if (stat(path.c_str(), &info) != 0) Fail(2, path + ": no such file");
    if (S_ISDIR(info.st_mode)) Fail(2, path + ": is a directory, not a file");
    if (S_ISREG(info.st_mode) && info.st_size > max_bytes) {
      too_big(std::to_string(info.st_size));
    }
    file.open(path, std::ios::binary);
    if (!file) Fail(2, path + ": cannot open for reading");
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::string data;
  std::vector<char> chunk(1 << 16);
  while (in.read(chunk.data(), chunk.size()) || in.gcount() > 0) {
    data.append(chunk.data(), static_cast<size_t>(in.gcount()));
    if (static_cast<int64_t>(data.size()) > max_bytes) {
      too_big("more than " + std::to_string(max_bytes));
    }
  }
  if (in.bad()) Fail(2, path + ": read error");
  return data;
}

// XLA's HLO parser recurses once per nested shape, tuple or brace and
// overflows the stack near 10,000 levels; real modules nest fewer than 10.
// Returns the 1-based line where nesting passes `limit`, or 0. Quoted
// strings and /* */ comments do not count.
int LineOverNestingLimit(const std::string& text, int limit) {
  int depth = 0, line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\')
          ++i;
        else if (text[i] == '\n')
          ++line;
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
constexpr int kMaxNesting = 512;

bool LooksLikeHloText(const std::string& data) {
  size_t i = data.find_first_not_of(" \t\r\n");
  return i != std::string::npos && data.compare(i, 9, "HloModule") == 0;
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

// A serialized HloModuleProto (or HloProto) as a module. The proto records
// how many partitions/replicas it runs on only in its device assignment, when
// it has one; else flags or the topology say, and without either
// InferNumPartitions does.
absl::StatusOr<std::unique_ptr<xla::HloModule>> ModuleFromProto(
    const std::string& path, const std::string& data, const Flags& flags,
    const sel::Topology* topology) {
  xla::HloModuleProto proto;
  xla::HloProto wrapper;
  if (wrapper.ParseFromString(data) && wrapper.has_hlo_module() &&
      !wrapper.hlo_module().name().empty()) {
    proto = wrapper.hlo_module();
  } else if (!proto.ParseFromString(data) || proto.name().empty() ||
             proto.computations_size() == 0) {
    return absl::InvalidArgumentError(
        path +
        ": neither HLO text (starting with 'HloModule') nor a serialized "
        "HloModuleProto");
  }
  absl::StatusOr<xla::HloModuleConfig> config =
      xla::HloModule::CreateModuleConfigFromProto(proto, xla::DebugOptions());
  if (!config.ok()) {
    return absl::InvalidArgumentError(
        path + ": bad HloModuleProto: " + OneLine(config.status().ToString()));
  }
  int replicas = 1, partitions = 1;
  if (config->has_static_device_assignment()) {
    replicas = config->static_device_assignment().replica_count();
    partitions = config->static_device_assignment().computation_count();
  }
  if (flags.num_replicas > 0) replicas = flags.num_replicas;
  if (flags.num_partitions > 0) {
    partitions = flags.num_partitions;
  } else if (topology != nullptr && !config->has_static_device_assignment()) {
    partitions = std::max(1, topology->num_devices() / replicas);
  }
  config->set_replica_count(replicas);
  config->set_num_partitions(partitions);
  absl::StatusOr<std::unique_ptr<xla::HloModule>> module =
      xla::HloModule::CreateFromProto(proto, *config);
  if (!module.ok()) {
    return absl::InvalidArgumentError(
        path + ": bad HloModuleProto: " + OneLine(module.status().ToString()));
  }
  return module;
}

// The input's bytes as a module, or InvalidArgument with the one-line
// message. Never exits, so that fuzz/driver_fuzzer runs exactly this path;
// the caller guards it (BeginXlaStage) against XLA's own CHECK failures.
// Checks that XLA's parser lacks come first.
absl::StatusOr<std::unique_ptr<xla::HloModule>> ParseInput(
    const std::string& path, const std::string& data, const Flags& flags,
    const sel::Topology* topology) {
  if (data.empty()) return absl::InvalidArgumentError(path + ": empty file");
  if (!LooksLikeHloText(data)) {
    return ModuleFromProto(path, data, flags, topology);
  }
  if (int line = LineOverNestingLimit(data, kMaxNesting); line > 0) {
    return absl::InvalidArgumentError(
        path + ":" + std::to_string(line) + ": nesting deeper than " +
        std::to_string(kMaxNesting) +
        " levels (shapes, tuples or braces); refused before XLA's parser, "
        "which would overflow its stack");
  }
  absl::StatusOr<std::unique_ptr<xla::HloModule>> module =
      xla::ParseAndReturnUnverifiedModule(data);
  if (module.ok()) return module;
  std::string message =
      LocateParseError(path, std::string(module.status().message()));
  // jaxlib 0.10 prints GSPMD replica groups in a newer form.
  if (data.find("replica_groups=mesh[") != std::string::npos) {
    message +=
        " (the module uses jaxlib 0.10's replica_groups=mesh[...] "
        "syntax, which this XLA cannot read; hlo-tools can)";
  }
  return absl::InvalidArgumentError(message);
}

std::unique_ptr<xla::HloModule> LoadModule(const std::string& path,
                                           const Flags& flags,
                                           const sel::Topology* topology,
                                           std::string* text) {
  *text = ReadFileOrDie(path, flags.max_input_bytes);
  std::strncpy(g_guard.input, path.c_str(), sizeof(g_guard.input) - 1);
  BeginXlaStage("parsing the module", 2);
  absl::StatusOr<std::unique_ptr<xla::HloModule>> module =
      ParseInput(path, *text, flags, topology);
  if (!module.ok()) Fail(2, std::string(module.status().message()));
  EndXlaStage();
  return *std::move(module);
}

// --- Partition count of jax-lowered modules ----------------------------------
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
  for (std::sregex_iterator m(it->second.begin(), it->second.end(), mesh_re),
       end;
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

// Whether the input states its partition count: a text header's
// num_partitions, a proto's device assignment.
bool StatesPartitions(const std::string& data, const xla::HloModule& module) {
  if (!LooksLikeHloText(data)) {
    return module.config().has_static_device_assignment();
  }
  return data.substr(0, data.find('\n')).find("num_partitions=") !=
         std::string::npos;
}

// Sets num_partitions of a module that does not state it, from the module's
// mesh or else the topology when given or else the ids its collectives name
// (never fewer than those), and says so on stderr.
void InferNumPartitions(const std::string& data, const Flags& flags,
                        const sel::Topology* topology, xla::HloModule* module) {
  if (flags.num_partitions > 0 || module->config().num_partitions() != 1 ||
      StatesPartitions(data, *module)) {
    return;
  }
  const int64_t used = PartitionIdsUsed(*module);
  const int64_t mesh = SdyMeshDevices(*module);
  if (used <= 1 && mesh <= 1) return;
  const int replicas = module->config().replica_count();
  int64_t partitions = used;
  std::string from = "the largest partition id its collectives name";
  if (mesh > 1) {
    partitions = mesh;
    from = "the sdy mesh in its frontend_attributes";
  } else if (topology != nullptr) {
    partitions = topology->num_devices() / replicas;
    from = absl::StrCat("the topology's ", topology->num_devices(), " devices");
  }
  if (partitions < used) {
    partitions = used;
    from = "the largest partition id its collectives name";
  }
  module->mutable_config().set_num_partitions(partitions);
  std::cerr << "nvshmem-opt: " << flags.input << ": "
            << (LooksLikeHloText(data)
                    ? "the module's header gives no num_partitions "
                      "(jax-lowered text?)"
                    : "the serialized module gives no num_partitions")
            << "; using " << partitions << " from " << from
            << " (--num-partitions=N overrides)\n";
}

absl::Status Verify(xla::HloModule* module) {
  xla::HloVerifier verifier(/*layout_sensitive=*/false,
                            /*allow_mixed_precision=*/true);
  if (absl::Status status = verifier.Run(module).status(); !status.ok()) {
    return status;
  }
  // The layout-insensitive verifier accepts invalid layouts such as
  // {2,2,0}, on which XLA later throws (uncaught) while building tuple
  // shapes, e.g. in HloModule::Clone (found by fuzz/driver_fuzzer).
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

// Writes next to the destination and renames, so readers never see half a
// file and a crash leaves the old file (or none) in place.
void WriteAtomically(const std::string& path, const std::string& contents) {
  std::string temp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream file(temp, std::ios::binary | std::ios::trunc);
    if (!file) Fail(2, path + ": cannot write");
    file << contents;
    file.flush();
    if (!file) {
      std::remove(temp.c_str());
      Fail(2, path + ": write failed");
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    Fail(2, path + ": cannot move the written file into place");
  }
}

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  if (stat(a.c_str(), &sa) != 0 || stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
          out += buffer;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.6g", v);
  return buffer;
}

// Upstream's assigner parses backend configs strictly, and HLO from a newer
// jax carries fields this XLA does not know; drop those on the copy it sees,
// and start it from the DEFAULT backend.
absl::Status NormalizeBackendConfigs(xla::HloModule* module) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  for (xla::HloComputation* computation : module->computations()) {
    for (xla::HloInstruction* instr : computation->instructions()) {
      if (instr->opcode() != xla::HloOpcode::kCollectivePermute &&
          instr->opcode() != xla::HloOpcode::kCollectivePermuteStart) {
        continue;
      }
      xla::gpu::GpuBackendConfig config;
      const std::string& raw = instr->raw_backend_config_string();
      if (!raw.empty()) {
        absl::Status status =
            google::protobuf::util::JsonStringToMessage(raw, &config, options);
        if (!status.ok()) return status;
      }
      // Upstream's assigner only ever sets NVSHMEM; a backend already in the
      // input (e.g. from an earlier run of ours) would come back as its answer.
      config.mutable_collective_backend_config()->set_backend(
          xla::gpu::CollectiveBackendConfig::DEFAULT);
      if (absl::Status status = instr->set_backend_config(config);
          !status.ok()) {
        return status;
      }
    }
  }
  return absl::OkStatus();
}

// Upstream's choice for each collective-permute, by instruction name.
absl::StatusOr<std::map<std::string, std::string>> UpstreamDecisions(
    const xla::HloModule& module, const sel::Topology& topology,
    int64_t threshold_bytes) {
  std::unique_ptr<xla::HloModule> copy = module.Clone("");
  // Upstream assigns backends only when NVSHMEM is enabled.
  copy->mutable_config()
      .mutable_debug_options()
      .set_xla_gpu_experimental_enable_nvshmem(true);
  if (absl::Status status = NormalizeBackendConfigs(copy.get()); !status.ok()) {
    return status;
  }
  // Upstream models one NVLink island per "slice" of slice_size devices; the
  // closest thing in our topology is the NVLink domain.
  xla::gpu::CollectiveBackendAssigner assigner(
      stream_executor::CudaComputeCapability(9, 0),
      /*num_visible_devices_per_process=*/topology.gpus_per_host(),
      /*slice_size=*/topology.nvlink_domain_size(), threshold_bytes);
  absl::StatusOr<bool> ran = assigner.Run(copy.get());
  if (!ran.ok()) return ran.status();
  std::map<std::string, std::string> decisions;
  for (xla::HloComputation* computation : copy->computations()) {
    for (xla::HloInstruction* instr : computation->instructions()) {
      if (instr->opcode() != xla::HloOpcode::kCollectivePermute &&
          instr->opcode() != xla::HloOpcode::kCollectivePermuteStart) {
        continue;
      }
      auto config = instr->backend_config<xla::gpu::GpuBackendConfig>();
      std::string backend = "DEFAULT";
      if (config.ok() && config->has_collective_backend_config()) {
        backend = xla::gpu::CollectiveBackendConfig::CollectiveBackend_Name(
            config->collective_backend_config().backend());
      }
      decisions[std::string(instr->name())] = backend;
    }
  }
  return decisions;
}

// What XLA's compiler does after the pass: AsyncCollectiveCreator turns each
// sync permute the pass wrote into a start/done pair carrying its config.
// Returns the new start and done names by the permute's name.
absl::StatusOr<std::map<std::string, std::vector<std::string>>> MakeAsync(
    xla::HloModule* module, const std::vector<Rewriter::OpRecord>& records) {
  std::map<std::string, const Rewriter::OpRecord*> by_name;
  for (const Rewriter::OpRecord& r : records) {
    if (r.form == "sync" && !r.skipped) by_name[r.instruction] = &r;
  }
  // The start keeps the permute's operands: that is how it is found again.
  using Key = std::pair<const xla::HloComputation*,
                        std::vector<const xla::HloInstruction*>>;
  std::map<Key, std::string> names;
  absl::flat_hash_set<const xla::HloInstruction*> convert;
  for (xla::HloComputation* computation : module->computations()) {
    for (xla::HloInstruction* instr : computation->instructions()) {
      if (instr->opcode() == xla::HloOpcode::kCollectivePermute &&
          by_name.count(std::string(instr->name())) > 0) {
        convert.insert(instr);
        names[{computation,
               {instr->operands().begin(), instr->operands().end()}}] =
            std::string(instr->name());
      }
    }
  }
  xla::AsyncCollectiveCreator::CollectiveCreatorConfig config;
  config.convert_collective_permute = [&](const xla::HloInstruction* instr) {
    return convert.contains(instr);
  };
  absl::StatusOr<bool> ran = xla::AsyncCollectiveCreator(config).Run(module);
  if (!ran.ok()) return ran.status();
  std::map<std::string, std::vector<std::string>> made;
  for (xla::HloComputation* computation : module->computations()) {
    for (xla::HloInstruction* instr : computation->instructions()) {
      if (instr->opcode() != xla::HloOpcode::kCollectivePermuteStart) continue;
      auto it = names.find(
          {computation, {instr->operands().begin(), instr->operands().end()}});
      if (it == names.end()) continue;
      std::vector<std::string>& entry = made[it->second];
      entry.push_back(std::string(instr->name()));
      for (const xla::HloInstruction* user : instr->users()) {
        entry.push_back(std::string(user->name()));
      }
    }
  }
  return made;
}

// The topology decisions are made on, and whether --topology gave it or the
// pass derived it from the module.
struct TopologyUsed {
  sel::Topology topology;
  bool derived = false;
};

// A decision's modeled times (null: the backend is refused or not offered)
// and its edges by link class, as JSON members.
std::string ModelJson(const sel::Decision& d) {
  std::string out = "\"modeled_us\": {";
  for (int b = 0; b < sel::kNumBackends; ++b) {
    out += JsonString(sel::BackendName(static_cast<sel::Backend>(b))) + ": " +
           (d.backend_us[b] < 0 ? std::string("null")
                                : JsonNumber(d.backend_us[b])) +
           ", ";
  }
  out += "\"chosen\": " + JsonNumber(d.chosen_us);
  out += "}, \"edges_by_class\": {";
  for (int c = 0; c < sel::kNumLinkClasses; ++c) {
    if (c > 0) out += ", ";
    out += JsonString(sel::LinkClassName(static_cast<sel::LinkClass>(c))) +
           ": " + std::to_string(d.edges_by_class[c]);
  }
  return out + "}";
}

// One permute's record as a JSON object.
std::string RecordJson(
    const Rewriter::OpRecord& r,
    const std::map<std::string, std::vector<std::string>>& made,
    const std::map<std::string, std::string>* upstream) {
  const sel::Decision& d = r.decision;
  std::string out = "{\"computation\": " + JsonString(r.computation);
  out += ", \"instruction\": " + JsonString(r.instruction);
  out += ", \"form\": " + JsonString(r.form);
  out += ", \"bytes\": " + std::to_string(r.bytes);
  out += ", \"pairs\": [";
  for (size_t p = 0; p < r.pairs.size(); ++p) {
    if (p > 0) out += ", ";
    out += "[" + std::to_string(r.pairs[p].first) + ", " +
           std::to_string(r.pairs[p].second) + "]";
  }
  out += "], \"plan\": " + JsonString(sel::BackendName(d.backend));
  // As XLA writes it: collective_backend_config.backend, and for the peer
  // and symmetric backends of newer XLA, collectives_mode.
  out +=
      ", \"backend\": " +
      JsonString(d.backend == sel::Backend::kNvshmem ? "NVSHMEM" : "DEFAULT");
  out += ", \"collectives_mode\": " +
         std::string(d.backend == sel::Backend::kPeer
                         ? "\"COLLECTIVES_PEER_MEMORY\""
                     : d.backend == sel::Backend::kSymmetric
                         ? "\"COLLECTIVES_SYMMETRIC_MEMORY\""
                         : "null");
  out += ", \"skipped\": " + std::string(r.skipped ? "true" : "false");
  out += ", \"reason\": " + JsonString(d.reason);
  out += ", " + ModelJson(d) + ", \"new_instructions\": [";
  if (auto it = made.find(r.instruction); it != made.end()) {
    for (size_t n = 0; n < it->second.size(); ++n) {
      out += (n > 0 ? ", " : "") + JsonString(it->second[n]);
    }
  }
  out += "]";
  if (upstream != nullptr) {
    auto it = upstream->find(r.instruction);
    out +=
        ", \"upstream\": " +
        (it == upstream->end() ? std::string("null") : JsonString(it->second));
  }
  return out + "}";
}

std::string RecordsToJson(
    const Flags& flags, const TopologyUsed& topology,
    const std::vector<Rewriter::OpRecord>& records,
    const std::map<std::string, std::vector<std::string>>& made,
    const std::map<std::string, std::string>* upstream, bool changed,
    double pass_us) {
  std::string out = "{\n";
  out += "  \"input\": " + JsonString(flags.input) + ",\n";
  out += "  \"topology\": " + JsonString(topology.topology.ToString()) + ",\n";
  out += "  \"topology_source\": " +
         JsonString(topology.derived ? "derived" : "given") + ",\n";
  out += "  \"mode\": " + JsonString(flags.mode) + ",\n";
  out += "  \"changed\": " + std::string(changed ? "true" : "false") + ",\n";
  out += "  \"pass_us\": " + JsonNumber(pass_us) + ",\n";
  out += "  \"decisions\": [";
  for (size_t i = 0; i < records.size(); ++i) {
    out += (i == 0 ? "\n    " : ",\n    ") +
           RecordJson(records[i], made, upstream);
  }
  out += "\n  ]\n}\n";
  return out;
}

void PrintExplain(const std::vector<Rewriter::OpRecord>& records,
                  const std::map<std::string, std::string>* upstream) {
  for (const Rewriter::OpRecord& r : records) {
    const sel::Decision& d = r.decision;
    std::cout << r.computation << "/" << r.instruction << " (" << r.form << ", "
              << r.bytes << " bytes, " << r.pairs.size()
              << " pairs): " << sel::BackendName(d.backend);
    if (upstream != nullptr) {
      auto it = upstream->find(r.instruction);
      if (it != upstream->end())
        std::cout << " [upstream: " << it->second << "]";
    }
    std::cout << "\n    " << d.reason << "\n";
  }
}

}  // namespace

// The launcher (nvshmem_opt_launcher.cc) parks stderr on /dev/null while
// TensorFlow's libraries log from their static initializers, and passes the
// real stderr as a descriptor; take it back before saying anything.
void RestoreStderr() {
  const char* fd = std::getenv("NVSHMEM_OPT_STDERR_FD");
  if (fd == nullptr) return;
  int saved = std::atoi(fd);
  if (saved > 2) {
    dup2(saved, 2);
    close(saved);
  }
  unsetenv("NVSHMEM_OPT_STDERR_FD");
}

// The cost table of --cost-table (its text kept for the pass) with the
// backend set of --backends.
sel::CostTable LoadCostTable(const Flags& flags, std::string* text) {
  sel::CostTable table = sel::DefaultCostTable();
  if (!flags.cost_table.empty()) {
    *text = ReadFileOrDie(flags.cost_table, flags.max_input_bytes);
    absl::StatusOr<sel::CostTable> parsed =
        sel::ParseCostTable(*text, flags.cost_table);
    if (!parsed.ok()) Fail(2, std::string(parsed.status().message()));
    table = *std::move(parsed);
  }
  if (!flags.backends.empty()) {
    absl::StatusOr<std::vector<sel::Backend>> backends =
        sel::ParseBackendSet(flags.backends);
    if (!backends.ok()) {
      Fail(2, absl::StrCat("--backends: ", backends.status().message()));
    }
    table.backends = *std::move(backends);
  }
  return table;
}

// The input module with its partition and replica counts settled, verified.
std::unique_ptr<xla::HloModule> LoadVerifiedModule(
    const Flags& flags, const sel::Topology* topology) {
  std::string data;
  std::unique_ptr<xla::HloModule> module =
      LoadModule(flags.input, flags, topology, &data);
  InferNumPartitions(data, flags, topology, module.get());
  data = std::string();
  if (flags.num_partitions > 0) {
    module->mutable_config().set_num_partitions(flags.num_partitions);
  }
  if (flags.num_replicas > 0) {
    module->mutable_config().set_replica_count(flags.num_replicas);
  }
  BeginXlaStage("verifying the input", 2);
  if (absl::Status status = Verify(module.get()); !status.ok()) {
    Fail(2, flags.input + ": HloVerifier rejects the input: " +
                OneLine(std::string(status.message())));
  }
  EndXlaStage();
  return module;
}

// --topology, parsed, or nullopt when the topology is to be derived.
std::optional<sel::Topology> GivenTopology(const Flags& flags) {
  if (flags.topology.empty()) return std::nullopt;
  absl::StatusOr<sel::Topology> topology = sel::Topology::Parse(flags.topology);
  if (!topology.ok()) Fail(2, std::string(topology.status().message()));
  return *std::move(topology);
}

// GPUs per host of a derived topology: --devices-per-host, else
// kDefaultDevicesPerHost but no more than the module's devices. Those must
// fill whole hosts: a partial host is a placement only a spec can state.
int DevicesPerHost(const Flags& flags, const xla::HloModule& module) {
  const int64_t devices = int64_t{module.config().num_partitions()} *
                          module.config().replica_count();
  const int64_t per_host =
      flags.devices_per_host > 0
          ? flags.devices_per_host
          : std::min<int64_t>(kDefaultDevicesPerHost, devices);
  if (devices % per_host != 0) {
    Fail(2,
         absl::StrCat(flags.input, ": its ", devices,
                      " devices (partitions x replicas) do not fill hosts of ",
                      per_host, " GPUs (--devices-per-host",
                      flags.devices_per_host > 0 ? "" : ", default 8",
                      "); give --devices-per-host=N or --topology=SPEC"));
  }
  return static_cast<int>(per_host);
}

// The pass's options from the flags; `devices_per_host` is used only
// without --topology.
Rewriter::Options PassOptions(const Flags& flags,
                              const std::string& cost_table_text,
                              int devices_per_host) {
  Rewriter::Options options;
  options.topology = flags.topology;
  options.devices_per_host = devices_per_host;
  options.cost_table = cost_table_text;
  options.backends = flags.backends;
  options.annotate = flags.annotate || flags.mode == "annotate";
  options.decide_only = flags.mode != "rewrite";
  // Modules from newer jax carry backend_config fields this XLA lacks.
  options.write_backend = nvshmem_opt::SetBackendInJson;
  return options;
}

// The topology the pass will decide on, asked of the pass itself so that the
// report and upstream's assigner see the very same one; says on stderr when
// it was derived.
TopologyUsed ResolveTopology(const Flags& flags,
                             const Rewriter::Options& options,
                             const xla::HloModule& module) {
  absl::StatusOr<sel::Topology> topology =
      Rewriter(options).TopologyFor(module);
  if (!topology.ok()) {
    Fail(2, absl::StrCat(flags.input, ": ", topology.status().message()));
  }
  TopologyUsed used{*std::move(topology), flags.topology.empty()};
  if (used.derived) {
    std::cerr << "nvshmem-opt: " << flags.input << ": no --topology; using "
              << used.topology.ToString() << " (" << used.topology.num_devices()
              << " devices in hosts of " << options.devices_per_host << " GPUs"
              << (module.config().has_static_device_assignment()
                      ? ", placed by the module's device assignment"
                      : "")
              << "; --devices-per-host=N or --topology=SPEC overrides)\n";
  }
  return used;
}

std::optional<std::map<std::string, std::string>> UpstreamOrNothing(
    const Flags& flags, const xla::HloModule& module,
    const sel::Topology& topology) {
  if (!flags.compare_upstream) return std::nullopt;
  BeginXlaStage("running upstream's CollectiveBackendAssigner", 2);
  auto decisions =
      UpstreamDecisions(module, topology, flags.upstream_threshold_bytes);
  if (!decisions.ok()) {
    Fail(2, flags.input + ": upstream CollectiveBackendAssigner failed: " +
                OneLine(decisions.status().ToString()));
  }
  return *std::move(decisions);
}

struct PassRun {
  std::vector<Rewriter::OpRecord> records;
  bool changed = false;
  double pass_us = 0;
  // Start and done names by permute, from AsyncCollectiveCreator.
  std::map<std::string, std::vector<std::string>> made;
};

// The pass on `target`, then (when rewriting) XLA's AsyncCollectiveCreator,
// then the verifier. Failures from here on are ours: exit 1 (2 where the
// pass blames its input).
PassRun RunPass(const Flags& flags, const Rewriter::Options& options,
                xla::HloModule* target) {
  Rewriter pass(options);
  BeginXlaStage("running the pass", 1);
  auto begin = std::chrono::steady_clock::now();
  absl::StatusOr<bool> changed = pass.Run(target);
  PassRun run;
  run.pass_us = std::chrono::duration<double, std::micro>(
                    std::chrono::steady_clock::now() - begin)
                    .count();
  if (!changed.ok()) {
    // InvalidArgument: the input does not fit (topology, backend_config).
    bool bad_input =
        changed.status().code() == absl::StatusCode::kInvalidArgument;
    Fail(bad_input ? 2 : 1,
         flags.input + ": " + OneLine(std::string(changed.status().message())) +
             (bad_input ? "" : " (a bug)"));
  }
  run.changed = *changed;
  run.records = pass.records();
  if (flags.mode == "rewrite") {
    BeginXlaStage("making the permutes async", 1);
    auto async = MakeAsync(target, run.records);
    if (!async.ok()) {
      Fail(1, flags.input + ": AsyncCollectiveCreator failed (a bug): " +
                  OneLine(async.status().ToString()));
    }
    run.made = *std::move(async);
    run.changed |= !run.made.empty();
  }
  BeginXlaStage("verifying the pass's output", 1);
  if (absl::Status status = Verify(target); !status.ok()) {
    Fail(1, flags.input + ": HloVerifier rejects the pass's output (a bug): " +
                OneLine(std::string(status.message())));
  }
  EndXlaStage();
  return run;
}

// The report, the explanation or the module, each where the flags say.
void WriteResults(const Flags& flags, const TopologyUsed& topology,
                  const PassRun& run, const xla::HloModule& module,
                  const std::map<std::string, std::string>* upstream) {
  if (!flags.report.empty()) {
    std::string json = RecordsToJson(flags, topology, run.records, run.made,
                                     upstream, run.changed, run.pass_us);
    if (flags.report == "-") {
      std::cout << json;
    } else {
      if (SameFile(flags.input, flags.report)) {
        Fail(2, flags.report + ": refusing to overwrite the input");
      }
      WriteAtomically(flags.report, json);
    }
  }
  if (flags.mode == "explain") {
    if (flags.report != "-") PrintExplain(run.records, upstream);
    return;
  }
  BeginXlaStage("printing the module", 1);
  std::string text = module.ToString();
  EndXlaStage();
  if (flags.output.empty() || flags.output == "-") {
    if (flags.report != "-") std::cout << text;
  } else {
    WriteAtomically(flags.output, text);
  }
}

int main(int argc, char** argv) {
  RestoreStderr();
  Flags flags = ParseFlags(argc, argv);
  std::string cost_table_text;
  sel::CostTable table = LoadCostTable(flags, &cost_table_text);
  if (flags.print_cost_table) {
    std::cout << sel::CostTableToString(table);
    return 0;
  }
  std::optional<sel::Topology> given = GivenTopology(flags);
  if (!flags.output.empty() && flags.output != "-" &&
      SameFile(flags.input, flags.output)) {
    Fail(2, flags.output + ": refusing to overwrite the input");
  }
  std::unique_ptr<xla::HloModule> module =
      LoadVerifiedModule(flags, given ? &*given : nullptr);
  const Rewriter::Options options = PassOptions(
      flags, cost_table_text, given ? 0 : DevicesPerHost(flags, *module));
  const TopologyUsed topology = ResolveTopology(flags, options, *module);
  std::optional<std::map<std::string, std::string>> upstream =
      UpstreamOrNothing(flags, *module, topology.topology);
  // Explain leaves the module alone: decide on a copy.
  std::unique_ptr<xla::HloModule> copy =
      flags.mode == "explain" ? module->Clone("") : nullptr;
  PassRun run = RunPass(flags, options, copy ? copy.get() : module.get());
  if (flags.time) {
    std::cerr << "nvshmem-opt: pass took " << run.pass_us << " us\n";
  }
  WriteResults(flags, topology, run, *module, upstream ? &*upstream : nullptr);
  return 0;
}
