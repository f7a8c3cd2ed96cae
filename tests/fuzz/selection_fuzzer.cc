// libFuzzer harness for the backend-selection core alone (no XLA):
// ParseTopology, ParseToolCostTable, EdgeIdsToDevices and Decide.
//
// Input: text sections separated by a line "%%":
//   topology spec
//   %%
//   cost table text
//   %%
//   request: BYTES NUM_PARTITIONS NUM_REPLICAS CROSS(0|1) SRC DST SRC DST ...
//   %%                                   (optional from here)
//   facts: words among types=T,T,... team=N memcpy branch group
// tests/fuzz/make_corpus.py writes seeds in this form; libFuzzer mutates
// freely.
//
// Properties checked (a violation aborts):
//   * rejected specs/tables/requests get a non-empty, one-line error
//     (tables: "<source>:<line>: ...");
//   * accepted specs and tables round-trip through ToString/CostTableToString;
//   * measured curves are exact at their points, times never NaN or < 0;
//   * no decision plans what its runtime cannot run, each rule restated here
//     from the runtime's facts rather than asked of the core: NVSHMEM only
//     for put types, without memcpy_local_p2p, not for a local copy, inside
//     a host, within half the heap, one GPU per process, a team the topology
//     places, one group, logical id i on device i, every member a source and
//     every edge inside the team, never in a collectives group; peer and
//     symmetric only inside a host and one process; no one-sided backend
//     under a conditional's branch, nor where no map says the team's place;
//   * a decision is consistent: edge counts add up, the chosen time is the
//     chosen backend's, numbers are not NaN, the reason is one non-empty line.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/fuzz/selection_request.h"
#include "tool_layer/backends.h"
#include "tool_layer/decide.h"
#include "tool_layer/table_text.h"
#include "tool_layer/topology_spec.h"

namespace core = ::xla::gpu::backend_selection;

namespace {

[[noreturn]] void Violation(const std::string& what) {
  std::fprintf(stderr, "PROPERTY VIOLATED: %s\n", what.c_str());
  std::abort();
}

void CheckOneLine(const std::string& message, const char* what) {
  if (message.empty()) Violation(std::string(what) + ": empty message");
  for (unsigned char c : message) {
    if (c < 0x20 || c == 0x7f) {
      Violation(std::string(what) +
                ": control character in message: " + message);
    }
  }
}

std::vector<std::string> Sections(std::string_view text) {
  std::vector<std::string> sections(1);
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    std::string_view line = text.substr(start, end == std::string_view::npos
                                                   ? std::string_view::npos
                                                   : end - start);
    if (line == "%%") {
      sections.emplace_back();
    } else {
      sections.back().append(line);
      if (end != std::string_view::npos) sections.back() += '\n';
    }
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return sections;
}

// A measured curve is exact at its points (where no interference is added)
// and never yields a negative or NaN time.
void CheckCurves(const core::ToolCostTable& table) {
  for (int b = 0; b < core::kNumBackends; ++b) {
    for (int c = 0; c < core::kNumLinkClasses; ++c) {
      const auto backend = static_cast<core::Backend>(b);
      const auto link_class = static_cast<core::LinkClass>(c);
      for (const core::CurvePoint& p : table.curve(backend, link_class)) {
        for (int buffers : {1, p.buffers, p.buffers + 3}) {
          const double us =
              core::EdgeTimeUs(table, backend, link_class, p.bytes, buffers);
          if (std::isnan(us) || us < 0) {
            Violation("curve time NaN or negative");
          }
        }
        if (table.sm_interference(backend) == 0 &&
            core::EdgeTimeUs(table, backend, link_class, p.bytes, p.buffers) !=
                p.us) {
          Violation("curve not exact at a measured point");
        }
      }
    }
  }
}

// A rejected spec says why on one line; an accepted one prints back to itself.
std::optional<core::Topology> CheckTopology(const std::string& spec) {
  absl::StatusOr<core::Topology> topology = core::ParseTopology(spec);
  if (!topology.ok()) {
    const std::string error(topology.status().message());
    CheckOneLine(error, "topology error");
    if (error.rfind("topology spec '", 0) != 0) {
      Violation("topology error: " + error);
    }
    return std::nullopt;
  }
  absl::StatusOr<core::Topology> again =
      core::ParseTopology(core::TopologySpec(*topology));
  if (!again.ok() ||
      core::TopologySpec(*again) != core::TopologySpec(*topology)) {
    Violation("topology does not round-trip: " + core::TopologySpec(*topology));
  }
  return *std::move(topology);
}

// A rejected table names its line; an accepted one round-trips in print.
std::optional<core::ToolCostTable> CheckTable(const std::string& text) {
  absl::StatusOr<core::ToolCostTable> table =
      core::ParseToolCostTable(text, "costs.txt");
  if (!table.ok()) {
    const std::string error(table.status().message());
    CheckOneLine(error, "cost table error");
    if (error.rfind("costs.txt:", 0) != 0) {
      Violation("cost table error: " + error);
    }
    return std::nullopt;
  }
  const std::string printed = core::CostTableToString(*table);
  absl::StatusOr<core::ToolCostTable> again =
      core::ParseToolCostTable(printed, "printed");
  if (!again.ok()) {
    Violation("printed cost table rejected: " +
              std::string(again.status().message()));
  }
  if (core::CostTableToString(*again) != printed) {
    Violation("cost table does not round-trip:\n" + printed);
  }
  CheckCurves(*table);
  return *std::move(table);
}

// A decision never plans a hanging or refused backend, and its numbers and
// reason are sane.
// The program's devices, from the topology's map alone: logical id i runs on
// the map's device i, or on device i without a map.
std::vector<int> ProgramDevices(const core::Topology& topology, int team_size) {
  const std::vector<int>& map = topology.partition_to_device();
  const int placed =
      map.empty() ? topology.num_devices() : static_cast<int>(map.size());
  const int n = team_size <= 0 ? placed : std::min(team_size, placed);
  std::vector<int> devices;
  for (int i = 0; i < n; ++i) devices.push_back(map.empty() ? i : map[i]);
  return devices;
}

// NVSHMEM's rules at the pinned runtime, restated.
void CheckNvshmemPlan(const core::Topology& topology,
                      const core::ToolCostTable& table,
                      const core::PermuteRequest& request, core::Place place,
                      const std::string& reason) {
  auto fail = [&](const char* what) {
    Violation(std::string("NVSHMEM planned ") + what + ": " + reason);
  };
  static const std::set<std::string> kPut = {"f64", "f32", "f16", "bf16",
                                             "s32", "s64", "u32", "u64"};
  for (const std::string& type : request.element_types) {
    if (!kPut.count(type)) fail("for a type NVSHMEM does not put");
  }
  if (request.memcpy_local_p2p) fail("with memcpy_local_p2p on");
  if (place == core::Place::kCollectivesGroup) fail("in a collectives group");
  if (topology.gpus_per_process() > 1) fail("with several GPUs per process");
  if (request.bytes > table.core.nvshmem_max_bytes / 2) {
    fail("over half the heap");
  }
  const std::vector<int>& map = topology.partition_to_device();
  const int placed =
      map.empty() ? topology.num_devices() : static_cast<int>(map.size());
  if (request.team_size > placed) fail("for a team the topology lacks");
  if (request.groups > 1) fail("off its PEs (several groups)");
  bool all_local = true;
  std::set<int> targets;
  const std::vector<int> program = ProgramDevices(topology, request.team_size);
  const std::set<int> members(program.begin(), program.end());
  for (const auto& [src, dst] : request.device_edges) {
    // Inside a host (NVSHMEM_TEAM_SHARED), inside the team.
    if (topology.HostOf(src) != topology.HostOf(dst)) fail("across hosts");
    if (!members.count(src) || !members.count(dst)) {
      fail("for an edge outside the team");
    }
    all_local = all_local && src == dst;
    targets.insert(dst);
  }
  if (all_local) fail("for a local copy");
  for (int i = 0; i < static_cast<int>(program.size()); ++i) {
    if (!targets.count(program[i])) fail("where a device has no source");
    // The PE is the process: device i, or as the topology's process map says.
    const int pe = topology.device_to_process().empty()
                       ? program[i]
                       : topology.ProcessOf(program[i]);
    if (pe != i) fail("off its PEs");
  }
  // NVSHMEM_TEAM_SHARED is every GPU of a host (one process each): all of a
  // touched host's GPUs run the program, where the program is known.
  if (request.team_size > 0) {
    const int per_host = topology.gpus_per_host();
    for (const auto& [src, dst] : request.device_edges) {
      for (int device : {src, dst}) {
        const int first = topology.HostOf(device) * per_host;
        for (int d = first; d < first + per_host; ++d) {
          if (!members.count(d)) fail("on part of a host");
        }
      }
    }
  }
}

// Peer and symmetric memory: every edge in one host, the team in one process.
void CheckPeerPlan(const core::Topology& topology,
                   const core::PermuteRequest& request,
                   const std::string& reason) {
  for (const auto& [src, dst] : request.device_edges) {
    if (topology.HostOf(src) != topology.HostOf(dst)) {
      Violation("peer/symmetric planned across hosts: " + reason);
    }
  }
  const std::vector<int> program = ProgramDevices(topology, request.team_size);
  for (int device : program) {
    if (topology.ProcessOf(device) != topology.ProcessOf(program.front())) {
      Violation("peer/symmetric planned across processes: " + reason);
    }
  }
}

void CheckDecision(const core::Topology& topology,
                   const core::ToolCostTable& table,
                   const core::PermuteRequest& request, core::Place place) {
  const core::ToolDecision decision =
      core::Decide(topology, table, request, place);
  if (decision.backend != core::Backend::kNccl) {
    if (place == core::Place::kConditionalBranch) {
      Violation("a one-sided backend planned under a branch: " +
                decision.reason);
    }
    // No map: the team's hosts and processes are known only when it is one.
    const std::vector<int> program =
        ProgramDevices(topology, request.team_size);
    if (topology.partition_to_device().empty()) {
      for (int device : program) {
        if (topology.ProcessOf(device) != topology.ProcessOf(program.front()) ||
            topology.HostOf(device) != topology.HostOf(program.front())) {
          Violation(
              "a one-sided backend planned with the team's place "
              "unknown: " +
              decision.reason);
        }
      }
    }
  }
  if (decision.backend == core::Backend::kNvshmem) {
    CheckNvshmemPlan(topology, table, request, place, decision.reason);
  } else if (decision.backend != core::Backend::kNccl) {
    CheckPeerPlan(topology, request, decision.reason);
  }
  CheckOneLine(decision.reason, "decision reason");
  int counted = 0;
  for (int c : decision.edges_by_class) counted += c;
  if (counted != static_cast<int>(request.device_edges.size())) {
    Violation("edge counts");
  }
  for (int b = 0; b < core::kNumBackends; ++b) {
    const std::optional<double> v =
        decision.TimeUs(static_cast<core::Backend>(b));
    if (v && std::isnan(*v)) {
      Violation("NaN time in a decision: " + decision.reason);
    }
  }
  for (const std::optional<core::ToolRefusal>& refusal : decision.refused) {
    if (refusal) CheckOneLine(core::RefusalText(*refusal), "refusal");
  }
  if (!decision.TimeUs(decision.backend)) {
    Violation("the chosen backend has no modeled time");
  }
  if (std::isnan(decision.ChosenUs()) ||
      decision.reason.find("nan") != std::string::npos) {
    Violation("NaN in a decision: " + decision.reason);
  }
  // The production rules, asked directly: the offered set and the core's.
  if (decision.backend != core::Backend::kNccl &&
      (std::find(table.backends.begin(), table.backends.end(),
                 decision.backend) == table.backends.end() ||
       core::CheckBackend(topology, table.core, request, decision.backend))) {
    Violation("a refused backend was chosen: " + decision.reason);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> sections = Sections(text);
  while (sections.size() < 4) sections.emplace_back();
  std::string spec = sections[0];
  if (!spec.empty() && spec.back() == '\n') spec.pop_back();
  const std::optional<core::Topology> topology = CheckTopology(spec);
  const std::optional<core::ToolCostTable> table = CheckTable(sections[1]);
  if (!topology || !table) return 0;

  const fuzz::SeedRequest seed = fuzz::ReadSeedRequest(sections[2]);
  const int64_t bytes = seed.bytes;
  const int partitions = seed.partitions, replicas = seed.replicas;
  const bool cross = seed.cross;
  const std::vector<std::pair<int64_t, int64_t>>& pairs = seed.pairs;

  absl::StatusOr<std::vector<std::pair<int, int>>> edges =
      core::EdgeIdsToDevices(*topology, pairs, cross, partitions, replicas);
  if (!edges.ok()) {
    CheckOneLine(std::string(edges.status().message()), "request error");
    return 0;
  }
  for (const auto& [s, d] : *edges) {
    if (s < 0 || d < 0 || s >= topology->num_devices() ||
        d >= topology->num_devices()) {
      Violation("edge outside the topology");
    }
  }
  core::PermuteRequest request = {bytes, *std::move(edges),
                                  partitions * replicas};
  request.groups = cross ? replicas : partitions;
  // The op's facts beyond its pairs: element types, the flag, where it sits.
  core::Place place = core::Place::kAnywhere;
  std::istringstream facts(sections[3]);
  for (std::string word; facts >> word && request.element_types.size() < 16;) {
    if (word.rfind("types=", 0) == 0) {
      std::istringstream types(word.substr(6));
      for (std::string type; std::getline(types, type, ',');) {
        request.element_types.push_back(type);
      }
    } else if (word.rfind("team=", 0) == 0) {
      // A program with more devices than its pairs name (the driver's
      // partitions x replicas), possibly more than the topology places.
      request.team_size = std::atoi(word.c_str() + 5) % 4096;
    } else if (word == "memcpy") {
      request.memcpy_local_p2p = true;
    } else if (word == "branch") {
      place = core::Place::kConditionalBranch;
    } else if (word == "group") {
      place = core::Place::kCollectivesGroup;
    }
  }
  request.buffers = std::max<int>(1, request.element_types.size());
  CheckDecision(*topology, *table, request, place);
  return 0;
}
