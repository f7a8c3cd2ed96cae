// nvshmem-opt: an hlo-opt-style driver for the NVSHMEM collective-permute
// rewriter. Reads HLO text or a serialized HloModuleProto, runs
// HloVerifier -> pass -> AsyncCollectiveCreator -> HloVerifier (the library
// in input.h and pipeline.h), and writes the result and, on request, a JSON
// report of every decision (optionally next to the decision of upstream's
// CollectiveBackendAssigner).
//
// Exit codes: 0 success, 1 the pass produced an invalid module (a bug),
// 2 unusable input (missing file, malformed HLO, bad flag or topology).

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ext/stdio_filebuf.h>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nvshmem_opt/input.h"
#include "nvshmem_opt/module_config.h"
#include "nvshmem_opt/output_file.h"
#include "nvshmem_opt/pipeline.h"
#include "nvshmem_opt/readable_text.h"
#include "nvshmem_opt/report.h"
#include "extensions/backends.h"
#include "xla/service/computation_placer.h"
#include "xla/service/gpu/transforms/collectives/collective_backend_assigner.h"
#include "xla/tsl/util/command_line_flags.h"

namespace {

namespace ext = nvshmem_ext;
using nvshmem_opt::Rewriter;

// GPUs per host when the topology is derived and --devices-per-host is not
// given: one HGX H100/H200 node, capped at the module's device count.
constexpr int kDefaultDevicesPerHost = 8;

// The project's version (pyproject.toml), which hlo-tools --version prints too.
constexpr char kVersion[] = "0.1.0";

constexpr char kUsage[] =
    "usage: nvshmem-opt INPUT [flags]   (INPUT: HLO text or a serialized\n"
    "         HloModuleProto/HloProto; '-' reads stdin; -o OUT = "
    "--output=OUT)\n"
    "       nvshmem-opt --print-cost-table [--cost-table=FILE]\n"
    "Without --topology, the topology is the one the pass derives inside XLA:\n"
    "hosts of --devices-per-host GPUs (one NVLink domain each) holding every\n"
    "device (partitions x replicas), placed by the module's device assignment\n"
    "when it has one. A SPEC is\n"
    "SLICESxHOSTSxGPUS[:nvlN][:gpus_per_process=N][:map=D0,D1,...], e.g.\n"
    "1x2x4, 1x9x8:nvl72 or 1x2x8:gpus_per_process=8 (:gpus_per_process: the\n"
    "GPUs each process drives; :map: the device of each logical id). A "
    ".hlo.pb\n"
    "is placed by the device assignment it carries, else, like text, by XLA's\n"
    "config beside it. Partitions and replicas come from the module (its\n"
    "header, a proto's device assignment, a Shardy mesh, the ids its "
    "collectives\n"
    "name, the topology) unless given.\n"
    "rewrite writes each permute's backend (as CollectiveBackendAssigner "
    "does)\n"
    "and makes the permutes async (as AsyncCollectiveCreator does); annotate\n"
    "records decisions in frontend attributes; explain prints them. Only the\n"
    "permutes' statements change: the rest of HLO text input is written as "
    "read.\n";

struct Flags {
  std::string input, output, topology, cost_table, backends, report;
  std::string module_config;  // "": the one found beside a text input.
  std::string mode = "rewrite";
  int devices_per_host = 0;  // 0: kDefaultDevicesPerHost (capped).
  bool compare_upstream = false, annotate = false, print_cost_table = false,
       time = false;
  bool print_readable = false;
  int64_t upstream_threshold_bytes = xla::gpu::kDefaultThresholdInBytes;
  int num_partitions = 0, num_replicas = 0;    // 0: from the input.
  int64_t max_input_bytes = int64_t{1} << 30;  // Larger inputs are refused.
  // A FIFO, pipe or device silent this long is refused.
  double input_timeout = nvshmem_opt::kDefaultInputTimeoutSeconds;
};

std::string CapLine(const std::string& text) {
  // XLA's verifier may quote a whole instruction (megabytes of pairs).
  constexpr size_t kLimit = 400, kKept = 300;
  if (text.size() <= kLimit) return text;
  size_t cut = kKept;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
    --cut;
  return text.substr(0, cut) + "... (" + std::to_string(text.size() - cut) +
         " more characters)";
}

[[noreturn]] void Fail(int code, const std::string& message) {
  std::cerr << "nvshmem-opt: " << CapLine(message) << "\n";
  std::exit(code);
}

// Exit 2 for InvalidArgument (the input), else 1 (a bug).
template <typename T>
T OrFail(absl::StatusOr<T> value, const std::string& prefix = "") {
  if (value.ok()) return *std::move(value);
  const bool input =
      value.status().code() == absl::StatusCode::kInvalidArgument;
  Fail(input ? 2 : 1, prefix + std::string(value.status().message()));
}

// argv in the form tsl::Flags reads: "--name=value" ('_' as '-'; "--name
// value" and "-o OUT" joined; switches as "--name=true").
std::vector<std::string> CanonicalArgs(
    int argc, char** argv, const std::vector<std::string>& switches) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") return {"--help"};
    if (arg == "--version") return {"--version"};
    if (arg == "-o") {
      if (i + 1 >= argc) Fail(2, "-o needs a file name");
      args.push_back(absl::StrCat("--output=", argv[++i]));
      continue;
    }
    if (arg.size() < 3 || arg.rfind("--", 0) != 0) {
      args.push_back(arg);
      continue;
    }
    size_t eq = arg.find('=');
    std::string name = arg.substr(2, eq == std::string::npos ? eq : eq - 2);
    std::replace(name.begin(), name.end(), '_', '-');
    if (std::find(switches.begin(), switches.end(), name) != switches.end()) {
      if (eq != std::string::npos) Fail(2, "--" + name + " takes no value");
      args.push_back("--" + name + "=true");
    } else if (eq != std::string::npos) {
      args.push_back("--" + name + arg.substr(eq));
    } else if (name.find_first_not_of("abcdefghijklmnopqrstuvwxyz-") !=
                   std::string::npos ||
               i + 1 >= argc) {
      args.push_back(
          arg);  // Unknown, or a flag without its value (said below).
    } else {
      args.push_back("--" + name + "=" + argv[++i]);
    }
  }
  return args;
}

// The flags, writing into `f`; a bad integer's message goes to `error`.
std::vector<tsl::Flag> FlagList(Flags& f, std::string& error) {
  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
  // An integer flag in [min, max]; the first bad value is the error.
  auto integer = [&](const char* name, auto* dst, int64_t min, int64_t max,
                     const char* usage) {
    return tsl::Flag(
        name, std::function<bool(std::string)>([=, &error](std::string text) {
          int64_t v = 0;
          if (!absl::SimpleAtoi(text, &v) || v < min || v > max) {
            if (error.empty()) {
              error = absl::StrCat("--", name, ": '", text, "' is not ",
                                   min == 0 ? "a non-negative" : "a positive",
                                   " integer (at most ", max, ")");
            }
          } else {
            *dst = static_cast<std::remove_pointer_t<decltype(dst)>>(v);
          }
          return true;
        }),
        *dst == 0 ? "" : std::to_string(*dst), usage);
  };
  return {
      tsl::Flag("output", &f.output, "where the module goes (default stdout)"),
      tsl::Flag("topology", &f.topology,
                "SLICESxHOSTSxGPUS[:nvlN][:gpus_per_process=N][:map=...]"),
      integer("devices-per-host", &f.devices_per_host, 1, 1 << 20,
              "GPUs per host of the derived topology (default 8, at most the "
              "module's)"),
      tsl::Flag("cost-table", &f.cost_table,
                "cost table file ('-': its text on stdin)"),
      tsl::Flag("mode", &f.mode, "rewrite|annotate|explain"),
      tsl::Flag("annotate", &f.annotate,
                "rewrite, and record decisions in attributes"),
      tsl::Flag("report", &f.report, "JSON report file ('-': stdout)"),
      tsl::Flag("module-config", &f.module_config,
                "XLA's module config (config.pbtxt) with the text module's "
                "device assignment (default: the one beside the input)"),
      tsl::Flag("backends", &f.backends,
                "nccl,nvshmem (default) | nccl,peer[,symmetric]"),
      tsl::Flag("compare-upstream", &f.compare_upstream,
                "add upstream's assignment"),
      integer("upstream-threshold-bytes", &f.upstream_threshold_bytes, 0,
              kMax64,
              "upstream assigner's size bound: NVSHMEM only below it; at the "
              "pin it bounds all-reduces only (collective_backend_assigner.cc, "
              "use_nvshmem), never a collective-permute"),
      tsl::Flag("time", &f.time, "say how long the pass took"),
      integer("num-partitions", &f.num_partitions, 1, 1 << 20,
              "default: the module's"),
      integer("num-replicas", &f.num_replicas, 1, 1 << 20,
              "default: the module's"),
      integer("max-input-bytes", &f.max_input_bytes, 1, kMax64,
              "larger inputs are refused"),
      tsl::Flag(
          "input-timeout",
          std::function<bool(std::string)>([&f, &error](std::string text) {
            double v = 0;
            if (!absl::SimpleAtod(text, &v) || !(v > 0) || v > 1e6) {
              if (error.empty()) {
                error = absl::StrCat("--input-timeout: '", text,
                                     "' is not a number of seconds "
                                     "above 0 (at most 1000000)");
              }
            } else {
              f.input_timeout = v;
            }
            return true;
          }),
          absl::StrCat(nvshmem_opt::kDefaultInputTimeoutSeconds),
          "seconds a FIFO, pipe or device may stay silent"),
      tsl::Flag("print-cost-table", &f.print_cost_table,
                "print the table and exit"),
      tsl::Flag(
          "print-readable", &f.print_readable,
          "print INPUT as this build's XLA reads it (newer jaxlib's forms in "
          "older ones) and exit"),
  };
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  std::string error;
  const std::vector<tsl::Flag> list = FlagList(f, error);
  std::vector<std::string> args =
      CanonicalArgs(argc, argv,
                    {"annotate", "compare-upstream", "time", "print-cost-table",
                     "print-readable"});
  const std::string usage = tsl::Flags::Usage("nvshmem-opt", list);
  if (args == std::vector<std::string>{"--help"}) {
    std::cout << kUsage << usage;
    std::exit(0);
  }
  if (args == std::vector<std::string>{"--version"}) {
    std::cout << "nvshmem-opt " << kVersion
              << " (XLA of the TensorFlow wheel it links)\n";
    std::exit(0);
  }
  tsl::Flags::Parse(args, list);  // Leaves what it does not know in `args`.
  std::vector<std::string> positional;
  for (const std::string& arg : args) {
    if (arg.size() < 3 || arg.rfind("--", 0) != 0) {
      positional.push_back(arg);
    } else if (error.empty()) {
      error = usage.find("\t" + arg + "=") != std::string::npos
                  ? arg + " needs a value"
                  : "unknown flag '" + arg + "' (see --help)";
    }
  }
  if (!error.empty()) Fail(2, error);
  if (f.mode != "rewrite" && f.mode != "annotate" && f.mode != "explain") {
    Fail(2, "unknown --mode '" + f.mode +
                "' (expected rewrite, annotate or explain)");
  }
  if (f.mode == "explain" && !f.output.empty()) {
    Fail(2,
         "--mode=explain writes no module: drop -o (--report=FILE saves the "
         "decisions)");
  }
  if (f.print_cost_table) return f;
  if (positional.size() != 1) {
    Fail(2, positional.empty() ? "no INPUT given (see --help)"
                               : "more than one INPUT given");
  }
  f.input = positional[0];
  if (!f.topology.empty() && f.devices_per_host > 0) {
    Fail(2,
         "--devices-per-host and --topology: give one (the spec says how many "
         "GPUs a "
         "host has)");
  }
  return f;
}

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  if (stat(a.c_str(), &sa) != 0 || stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// Every file the driver writes goes through WriteOutput (output_file.h):
// regular files atomically, devices and FIFOs in place, '-' to stdout.
void Write(const Flags& flags, const std::string& path,
           const std::string& text) {
  if (path != "-" && SameFile(flags.input, path))
    Fail(2, path + ": refusing to overwrite the input");
  if (absl::Status status =
          nvshmem_opt::WriteOutput(path, text, flags.input_timeout);
      !status.ok())
    Fail(2, std::string(status.message()));
}

// Under the launcher (nvshmem_opt_launcher.cc) stderr is a memory file that
// keeps TensorFlow's and XLA's logs: the driver's own lines go to the real
// stderr it passes, and each stage that runs XLA is recorded for it, with the
// exit code a death there means (2: the input is at fault, 1: a bug).
int g_stage_fd = -1;
void UseLauncherFds() {
  if (const char* fd = std::getenv("NVSHMEM_OPT_STDERR_FD")) {
    static __gnu_cxx::stdio_filebuf<char> real(std::atoi(fd), std::ios::out);
    std::cerr.rdbuf(&real);
  }
  if (const char* fd = std::getenv("NVSHMEM_OPT_STAGE_FD"))
    g_stage_fd = std::atoi(fd);
}
void Stage(const std::string& input, const char* stage, int code) {
  const std::string record = absl::StrCat(code, "\t", input, "\t", stage);
  if (g_stage_fd >= 0 &&
      pwrite(g_stage_fd, record.data(), record.size(), 0) >= 0) {
    if (ftruncate(g_stage_fd, record.size()) != 0) g_stage_fd = -1;
  }
}

// The cost table of --cost-table ('-': stdin) with the backend set of
// --backends, parsed once for the whole run.
ext::CostTable LoadCostTable(const Flags& flags) {
  ext::CostTable table = ext::DefaultCostTable();
  if (!flags.cost_table.empty()) {
    if (flags.cost_table == "-" && flags.input == "-")
      Fail(2, "INPUT and --cost-table cannot both be '-' (stdin)");
    const std::string text = OrFail(nvshmem_opt::ReadInput(
        flags.cost_table, flags.max_input_bytes, flags.input_timeout));
    table = OrFail(ext::ParseCostTable(text, flags.cost_table));
  }
  if (!flags.backends.empty()) {
    table.backends =
        OrFail(ext::ParseBackendSet(flags.backends), "--backends: ");
  }
  return table;
}

// The input, parsed and verified, its partitions settled: the same path as
// the fuzz harness's (input.h LoadModule).
nvshmem_opt::LoadedModule Load(const Flags& flags,
                               const ext::Topology* topology) {
  std::string data = OrFail(nvshmem_opt::ReadInput(
      flags.input, flags.max_input_bytes, flags.input_timeout));
  nvshmem_opt::LoadedModule loaded = OrFail(nvshmem_opt::LoadModule(
      flags.input, std::move(data),
      {flags.num_partitions, flags.num_replicas, topology},
      [&](const char* stage) { Stage(flags.input, stage, 2); }));
  if (!loaded.partitions_note.empty()) {
    std::cerr << "nvshmem-opt: " << loaded.partitions_note << "\n";
  }
  return loaded;
}

// GPUs per host of a derived topology: --devices-per-host, else
// kDefaultDevicesPerHost but no more than the module's devices, which must
// fill whole hosts (a partial host is a placement only a spec can state).
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

// The topology the pass decides on, asked of the pass itself so that the
// report and upstream's assigner see the same one; said when derived.
ext::Topology ResolveTopology(const Flags& flags, const Rewriter& pass,
                              const xla::HloModule& module) {
  ext::Topology topology = OrFail(pass.TopologyFor(module), flags.input + ": ");
  if (flags.topology.empty()) {
    std::cerr << "nvshmem-opt: " << flags.input << ": no --topology; using "
              << ext::TopologySpec(topology) << " (" << topology.num_devices()
              << " devices in hosts of " << topology.gpus_per_host() << " GPUs"
              << (module.config().has_static_device_assignment()
                      ? ", placed by the module's device assignment"
                      : "")
              << "; " << topology.gpus_per_process() << " GPUs per process"
              << "; --devices-per-host=N or --topology=SPEC overrides)\n";
  }
  return topology;
}

// Where the topology came from: the flag, else the pass's default shape,
// placed by the module's device assignment where it has one.
std::string TopologySource(const Flags& flags, const xla::HloModule& module) {
  if (!flags.topology.empty()) return "flag";
  return module.config().has_static_device_assignment() ? "module config"
                                                        : "default";
}

// The topology as a spec to decide on again: its process layout only where
// --topology states one, so that the backend set's default applies again.
std::string SpecToDecideAgain(const Flags& flags,
                              const ext::Topology& topology) {
  if (ext::SpecStatesProcesses(flags.topology)) {
    // TopologySpec leaves out a process per host, which the spec stated.
    const bool per_host =
        topology.gpus_per_process() == topology.gpus_per_host();
    return absl::StrCat(
        ext::TopologySpec(topology),
        per_host ? absl::StrCat(":gpus_per_process=", topology.gpus_per_host())
                 : "");
  }
  return ext::TopologySpec(OrFail(ext::Topology::Create(
      topology.slices(), topology.hosts_per_slice(), topology.gpus_per_host(),
      topology.nvlink_domain_size(), topology.partition_to_device(),
      topology.gpus_per_host())));
}

// Where the device of each logical id came from: a config's map (also where
// the spec states the same one), else the spec's, else the module's own.
std::string PlacementText(
    const Flags& flags, const ext::Topology& topology,
    const std::string& config_path,
    const std::optional<nvshmem_opt::ModulePlacement>& read,
    bool spec_states_map, bool proto_placed) {
  if (topology.partition_to_device().empty()) return "unknown";
  if (!config_path.empty() &&
      (flags.topology.empty() ||
       (read && topology.partition_to_device() == read->devices))) {
    return absl::StrCat("the module's device assignment (", config_path, ")");
  }
  if (!flags.topology.empty() && !spec_states_map && proto_placed) {
    return "the module's device assignment (the proto's)";
  }
  return flags.topology.empty() ? "the module's device assignment"
                                : "the topology's map";
}

// --topology as the tools state it again: as given, with the config's map
// where the spec states none and the config placed the module.
std::string PlacedSpec(
    const Flags& flags, const std::string& spec, const ext::Topology& topology,
    bool spec_states_map,
    const std::optional<nvshmem_opt::ModulePlacement>& read) {
  if (flags.topology.empty()) return spec;
  if (!spec_states_map && !read && !topology.partition_to_device().empty()) {
    // Placed by a proto's own device assignment.
    return absl::StrCat(flags.topology, ":map=",
                        absl::StrJoin(topology.partition_to_device(), ","));
  }
  if (spec_states_map || !read ||
      topology.partition_to_device() != read->devices) {
    return flags.topology;
  }
  return absl::StrCat(flags.topology,
                      ":map=", absl::StrJoin(read->devices, ","));
}

// The input's config beside a regular output file, so that what reads the
// output (verify, explain) places its ids as the pass did. Never beside a
// device or FIFO, and never over a config that is not a regular file.
void WriteOutputConfig(
    const Flags& flags,
    const std::optional<nvshmem_opt::ModulePlacement>& read) {
  if (!read || flags.output.empty() || flags.output == "-") return;
  struct stat out, config;
  if (stat(flags.output.c_str(), &out) != 0 || !S_ISREG(out.st_mode)) return;
  const std::string path = nvshmem_opt::SidecarConfigPath(flags.output);
  if (lstat(path.c_str(), &config) == 0 && !S_ISREG(config.st_mode)) return;
  if (SameFile(flags.module_config.empty()
                   ? nvshmem_opt::FindModuleConfig(flags.input)
                   : flags.module_config,
               path)) {
    return;  // The output's config is the input's own.
  }
  Write(flags, path, read->text);
}

// XLA's config beside a text module (or --module-config): its device
// assignment becomes the module's, and the map of a topology given without
// one. Returns the config's path, "" when none was read.
std::string PlaceTextModule(const Flags& flags, xla::HloModule& module,
                            std::optional<ext::Topology>& given,
                            std::optional<nvshmem_opt::ModulePlacement>& read) {
  if (module.config().has_static_device_assignment()) {
    // A proto carries its compile's device assignment: it places the ids of a
    // topology given without a map, as a config beside text does.
    const xla::DeviceAssignment& assignment =
        module.config().static_device_assignment();
    const int replicas = assignment.replica_count();
    const int partitions = assignment.computation_count();
    if (given && given->partition_to_device().empty() &&
        given->num_devices() >= int64_t{replicas} * partitions) {
      std::vector<int> devices(int64_t{replicas} * partitions);
      for (int p = 0; p < partitions; ++p) {
        for (int r = 0; r < replicas; ++r) {
          devices[r + p * replicas] = static_cast<int>(assignment(r, p));
        }
      }
      given = OrFail(
          ext::Topology::Create(
              given->slices(), given->hosts_per_slice(), given->gpus_per_host(),
              given->nvlink_domain_size(), devices, given->gpus_per_process()),
          flags.input +
              ": the proto's device assignment does not fit "
              "--topology: ");
    }
    return "";
  }
  const std::string path = flags.module_config.empty()
                               ? nvshmem_opt::FindModuleConfig(flags.input)
                               : flags.module_config;
  if (path.empty()) return "";
  // A config is tens of KB: its own bound, whatever --max-input-bytes allows.
  constexpr int64_t kMaxConfigBytes = int64_t{64} << 20;
  read = OrFail(nvshmem_opt::ReadModulePlacement(path, kMaxConfigBytes));
  if (read->replicas != module.config().replica_count() ||
      read->partitions != module.config().num_partitions()) {
    Fail(2, absl::StrCat(path, ": its device assignment places ",
                         read->replicas, " replicas x ", read->partitions,
                         " partitions, the module has ",
                         module.config().replica_count(), " x ",
                         module.config().num_partitions()));
  }
  xla::DeviceAssignment assignment(read->replicas, read->partitions);
  for (int p = 0; p < read->partitions; ++p) {
    for (int r = 0; r < read->replicas; ++r) {
      assignment(r, p) = read->devices[r + p * read->replicas];
    }
  }
  module.mutable_config().set_static_device_assignment(assignment);
  // A topology too small for the module fails later, with the module's count.
  if (given && given->partition_to_device().empty() &&
      given->num_devices() >= int64_t{read->replicas} * read->partitions) {
    given = OrFail(ext::Topology::Create(
                       given->slices(), given->hosts_per_slice(),
                       given->gpus_per_host(), given->nvlink_domain_size(),
                       read->devices, given->gpus_per_process()),
                   path + ": its device assignment does not fit --topology: ");
  }
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  UseLauncherFds();
  const Flags flags = ParseFlags(argc, argv);
  const ext::CostTable table = LoadCostTable(flags);
  if (flags.print_cost_table) {
    std::cout << ext::CostTableToString(table);
    return 0;
  }
  std::optional<ext::Topology> given;
  if (!flags.topology.empty())
    given = OrFail(ext::ParseTopology(flags.topology, table.backends));
  if (!flags.output.empty() && flags.output != "-" &&
      SameFile(flags.input, flags.output)) {
    Fail(2, flags.output + ": refusing to overwrite the input");
  }
  if (flags.print_readable) {
    int rewritten = 0;
    std::cout << nvshmem_opt::ReadableText(
        OrFail(nvshmem_opt::ReadInput(flags.input, flags.max_input_bytes,
                                      flags.input_timeout)),
        &rewritten);
    return 0;
  }
  nvshmem_opt::LoadedModule input = Load(flags, given ? &*given : nullptr);
  std::optional<nvshmem_opt::ModulePlacement> placement;
  const bool spec_states_map = given && !given->partition_to_device().empty();
  const std::string config_path =
      PlaceTextModule(flags, *input.module, given, placement);
  // One rewriter, on the spec and table parsed above, resolves the topology
  // and runs the pass.
  const Rewriter::Options options = nvshmem_opt::DriverPassOptions(
      given, given ? 0 : DevicesPerHost(flags, *input.module), table,
      flags.mode, flags.annotate);
  Rewriter pass(options);
  const ext::Topology topology = ResolveTopology(flags, pass, *input.module);
  std::optional<std::map<std::string, std::string>> upstream;
  if (flags.compare_upstream) {
    Stage(flags.input, "running upstream's CollectiveBackendAssigner", 2);
    upstream =
        OrFail(nvshmem_opt::UpstreamDecisions(*input.module, topology,
                                              flags.upstream_threshold_bytes),
               flags.input + ": upstream CollectiveBackendAssigner failed: ");
  }
  // Explain leaves the module alone: decide on a copy.
  std::unique_ptr<xla::HloModule> copy =
      flags.mode == "explain" ? input.module->Clone("") : nullptr;
  auto stage = [&](const char* name, int code) {
    Stage(flags.input, name, code);
  };
  const nvshmem_opt::PassRun run =
      OrFail(nvshmem_opt::RunPass(
                 pass, options, copy ? copy.get() : input.module.get(), stage),
             flags.input + ": ");
  if (flags.time)
    std::cerr << "nvshmem-opt: pass took " << run.pass_us << " us\n";
  const auto* upstream_ptr = upstream ? &*upstream : nullptr;
  if (!flags.report.empty()) {
    const std::string spec = SpecToDecideAgain(flags, topology);
    const std::string json = OrFail(nvshmem_opt::ReportJson(
        {flags.input, ext::TopologySpec(topology),
         TopologySource(flags, *input.module), topology.partition_to_device(),
         flags.mode, input.module->config().num_partitions(),
         input.module->config().replica_count(), input.partitions_from,
         ext::ProcessLayoutText(topology,
                                ext::SpecStatesProcesses(flags.topology),
                                table.backends),
         PlacementText(
             flags, topology, config_path, placement, spec_states_map,
             input.text.empty() &&
                 input.module->config().has_static_device_assignment()),
         spec, PlacedSpec(flags, spec, topology, spec_states_map, placement),
         config_path, placement ? placement->collective_permute_mode : ""},
        run, upstream_ptr));
    Write(flags, flags.report, json + "\n");
  }
  if (flags.mode == "explain") {
    if (flags.report != "-")
      std::cout << nvshmem_opt::ExplainText(run, upstream_ptr);
    return 0;
  }
  Stage(flags.input, "printing the module", 1);
  const std::string text =
      OrFail(nvshmem_opt::OutputText(input, *input.module, run, options),
             flags.input + ": ");
  const bool to_stdout = flags.output.empty() || flags.output == "-";
  if (to_stdout && flags.report == "-") return 0;  // stdout has the report.
  Write(flags, to_stdout ? "-" : flags.output, text);
  WriteOutputConfig(flags, placement);
  return 0;
}
