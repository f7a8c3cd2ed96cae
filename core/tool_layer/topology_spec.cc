// The topology spec grammar, one for every command and the driver. The XLA
// pass takes no spec: it builds its topology from the compiler's cluster
// description, so the grammar lives here, beside the tools.

#include "tool_layer/topology_spec.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace xla::gpu::backend_selection {
namespace {

// What follows SLICESxHOSTSxGPUS.
struct SpecOptions {
  int nvlink_domain_size = 0;  // 0: one host.
  int gpus_per_process = 0;    // 0: one host.
  std::vector<int> map;
  std::vector<int> processes;  // Of each device; empty: gpus_per_process.
};

// "nvlN", "nvl=N" or "gpus_per_process=N", each once: the N, else an error.
absl::StatusOr<int> CountOption(absl::string_view section,
                                absl::string_view value, bool given,
                                absl::string_view expected) {
  std::optional<int64_t> n = ParseCount(value);
  if (given || !n || *n < 1 || *n > kMaxDevices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad option '", Printable(section), "' (expected ", expected, ")"));
  }
  return static_cast<int>(*n);
}

absl::Status ParseMap(absl::string_view list, std::vector<int>* map,
                      absl::string_view what = "device",
                      absl::string_view in = "map") {
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    std::optional<int64_t> value = ParseCount(absl::StripAsciiWhitespace(item));
    if (!value || *value > kMaxDevices) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad ", what, " '", Printable(item), "' in ", in));
    }
    map->push_back(static_cast<int>(*value));
  }
  return absl::OkStatus();
}

absl::StatusOr<SpecOptions> ParseOptions(
    const std::vector<absl::string_view>& sections) {
  SpecOptions options;
  bool have_map = false;
  for (size_t i = 1; i < sections.size(); ++i) {
    absl::string_view value = sections[i];
    if (absl::ConsumePrefix(&value, "nvl")) {
      absl::ConsumePrefix(&value, "=");
      absl::StatusOr<int> n =
          CountOption(sections[i], value, options.nvlink_domain_size != 0,
                      "nvlN or nvl=N once, N GPUs");
      if (!n.ok()) return n.status();
      options.nvlink_domain_size = *n;
    } else if (absl::ConsumePrefix(&value, "gpus_per_process=")) {
      absl::StatusOr<int> n =
          CountOption(sections[i], value, options.gpus_per_process != 0,
                      "gpus_per_process=N once, N GPUs");
      if (!n.ok()) return n.status();
      options.gpus_per_process = *n;
    } else if (absl::ConsumePrefix(&value, "map=")) {
      if (have_map) return absl::InvalidArgumentError("map given twice");
      have_map = true;
      absl::Status status = ParseMap(value, &options.map);
      if (!status.ok()) return status;
    } else if (absl::ConsumePrefix(&value, "processes=")) {
      if (!options.processes.empty()) {
        return absl::InvalidArgumentError("processes given twice");
      }
      absl::Status status =
          ParseMap(value, &options.processes, "process", "processes");
      if (!status.ok()) return status;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown option '", Printable(value),
          "' (known: nvlN, gpus_per_process=N, processes=..., map=...)"));
    }
  }
  return options;
}

absl::StatusOr<Topology> ParseSpec(absl::string_view spec,
                                   const std::vector<Backend>* offered) {
  const std::vector<absl::string_view> sections = absl::StrSplit(spec, ':');
  const std::vector<absl::string_view> dims = absl::StrSplit(sections[0], 'x');
  if (dims.size() != 3) {
    return absl::InvalidArgumentError(
        "expected SLICESxHOSTSxGPUS such as 1x2x4, optionally followed by "
        ":nvlN and :map=D0,D1,...");
  }
  int values[3];
  for (int i = 0; i < 3; ++i) {
    std::optional<int64_t> value = ParseCount(dims[i]);
    const bool digits =
        !dims[i].empty() && absl::c_all_of(dims[i], absl::ascii_isdigit);
    if (!digits || (value && *value < 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", Printable(dims[i]), "' is not a positive whole number"));
    }
    if (!value || *value > kMaxDevices) {
      return absl::InvalidArgumentError(absl::StrCat("'", Printable(dims[i]),
                                                     "' is too large (max ",
                                                     kMaxDevices, " devices)"));
    }
    values[i] = static_cast<int>(*value);
  }
  absl::StatusOr<SpecOptions> options = ParseOptions(sections);
  if (!options.ok()) return options.status();
  if (options->gpus_per_process == 0 && options->processes.empty() &&
      offered != nullptr) {
    options->gpus_per_process = DefaultGpusPerProcess(*offered, values[2]);
  }
  return Topology::Create(values[0], values[1], values[2],
                          options->nvlink_domain_size, std::move(options->map),
                          options->gpus_per_process,
                          std::move(options->processes));
}

}  // namespace

std::string Printable(absl::string_view s) {
  constexpr size_t kMaxEchoed = 256;
  std::string out;
  for (char c : s.substr(0, kMaxEchoed)) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", byte);
    } else {
      out += c;
    }
  }
  if (s.size() > kMaxEchoed) out += "...";
  return out;
}

std::optional<int64_t> ParseCount(absl::string_view s) {
  int64_t value = 0;
  if (s.empty() || !absl::c_all_of(s, absl::ascii_isdigit) ||
      !absl::SimpleAtoi(s, &value)) {
    return std::nullopt;
  }
  return value;
}

int DefaultGpusPerProcess(const std::vector<Backend>& offered,
                          int gpus_per_host) {
  return absl::c_linear_search(offered, Backend::kNvshmem) ? 1 : gpus_per_host;
}

bool SpecStatesProcesses(absl::string_view spec) {
  return absl::StrContains(spec, ":gpus_per_process=") ||
         absl::StrContains(spec, ":processes=");
}

std::string ProcessLayoutText(const Topology& topology, bool stated,
                              const std::vector<Backend>& offered) {
  const int n = topology.gpus_per_process();
  std::string text =
      absl::StrCat("processes of ", n, n == 1 ? " GPU" : " GPUs");
  if (stated) return absl::StrCat(text, " (stated)");
  const bool nvshmem = absl::c_linear_search(offered, Backend::kNvshmem);
  return absl::StrCat(
      text,
      nvshmem ? " (the default where the target XLA offers NVSHMEM, which its "
                "pass runs only with one GPU per process)"
              : " (the default: one process per host, as jax runs a host's "
                "GPUs)",
      "; :gpus_per_process=N states the job's layout");
}

Topology WithDefaultProcesses(const Topology& t,
                              const std::vector<Backend>& offered) {
  const int per_process = DefaultGpusPerProcess(offered, t.gpus_per_host());
  // A process map is the runtime's own fact: no default replaces it.
  if (per_process == t.gpus_per_process() || !t.device_to_process().empty()) {
    return t;
  }
  // The same cluster with another divisor of a host: Create cannot refuse it.
  return *Topology::Create(t.slices(), t.hosts_per_slice(), t.gpus_per_host(),
                           t.nvlink_domain_size(), t.partition_to_device(),
                           per_process);
}

absl::StatusOr<Topology> ParseTopology(absl::string_view spec) {
  return ParseTopology(spec, {});
}

absl::StatusOr<Topology> ParseTopology(absl::string_view spec,
                                       const std::vector<Backend>& offered) {
  absl::StatusOr<Topology> topology =
      ParseSpec(spec, offered.empty() ? nullptr : &offered);
  if (!topology.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology spec '", Printable(spec),
                     "': ", topology.status().message()));
  }
  return topology;
}

std::string TopologySpec(const Topology& t) {
  std::string spec = absl::StrCat(t.slices(), "x", t.hosts_per_slice(), "x",
                                  t.gpus_per_host());
  if (t.nvlink_domain_size() != t.gpus_per_host()) {
    absl::StrAppend(&spec, ":nvl", t.nvlink_domain_size());
  }
  if (!t.device_to_process().empty()) {
    absl::StrAppend(&spec,
                    ":processes=", absl::StrJoin(t.device_to_process(), ","));
  } else if (t.gpus_per_process() != t.gpus_per_host()) {
    absl::StrAppend(&spec, ":gpus_per_process=", t.gpus_per_process());
  }
  if (!t.partition_to_device().empty()) {
    absl::StrAppend(&spec,
                    ":map=", absl::StrJoin(t.partition_to_device(), ","));
  }
  return spec;
}

}  // namespace xla::gpu::backend_selection
