#include "nvshmem_opt/flags.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <streambuf>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "xla/tsl/util/command_line_flags.h"

namespace nvshmem_opt {
namespace {

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
    "read.\n"
    "The target XLA is a stock one by default: it runs every permute in the\n"
    "program's one collectives mode, so a permute the core puts on peer or\n"
    "symmetric memory is written as NCCL, and stderr says so (hlo-tools\n"
    "explain gives the program's mode); --per-op-modes writes each permute's\n"
    "own mode, for an XLA with the series, which runs no NVSHMEM.\n";

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
      tsl::Flag("per-op-modes", &f.per_op_modes,
                "the target XLA runs each permute's own collectives_mode (the "
                "series for jax v0.11.0's XLA); default: a stock XLA, whose "
                "permutes all run the program's one mode, so peer and "
                "symmetric memory are written per program, not per op"),
      tsl::Flag("print-cost-table", &f.print_cost_table,
                "print the table and exit"),
      tsl::Flag(
          "print-readable", &f.print_readable,
          "print INPUT as this build's XLA reads it (newer jaxlib's forms in "
          "older ones) and exit"),
  };
}

}  // namespace

namespace {

// Collects what is written a line at a time and passes each on as Printable
// makes it, to the stream buffer it replaced.
class PrintableLines : public std::streambuf {
 public:
  explicit PrintableLines(std::streambuf* out) : out_(out) {}

 protected:
  // A newline that ends what one write gives ends the line; one inside it is
  // part of a value (a file name), written escaped with the rest.
  int overflow(int c) override {
    if (c == traits_type::eof()) return sync() == 0 ? 0 : traits_type::eof();
    if (c == '\n') return EndLine() ? c : traits_type::eof();
    line_.push_back(static_cast<char>(c));
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (n > 0 && s[n - 1] == '\n') {
      line_.append(s, n - 1);
      return EndLine() ? n : 0;
    }
    line_.append(s, n);
    return n;
  }
  // A line cut short (no newline yet) is kept until its end.
  int sync() override { return out_->pubsync(); }

 private:
  bool EndLine() {
    const std::string text = Printable(line_) + "\n";
    line_.clear();
    return out_->sputn(text.data(), text.size()) ==
               static_cast<std::streamsize>(text.size()) &&
           out_->pubsync() == 0;
  }

  std::streambuf* out_;
  std::string line_;
};

}  // namespace

void PrintableStderr() {
  static PrintableLines* lines = new PrintableLines(std::cerr.rdbuf());
  std::cerr.rdbuf(lines);
}

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

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  std::string error;
  const std::vector<tsl::Flag> list = FlagList(f, error);
  std::vector<std::string> args =
      CanonicalArgs(argc, argv,
                    {"annotate", "compare-upstream", "time", "print-cost-table",
                     "print-readable", "per-op-modes"});
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

}  // namespace nvshmem_opt
