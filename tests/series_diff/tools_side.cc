// The tools' side of the differential test: the core with its project layer,
// called exactly as nvshmem-opt and the binding call it.

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/series_diff/diff_case.h"
#include "tool_layer/backends.h"
#include "tool_layer/decide.h"
#include "tool_layer/table_text.h"
#include "tool_layer/topology_spec.h"

namespace series_diff {

namespace core = ::xla::gpu::backend_selection;

std::shared_ptr<const core::Topology> ParsedSpec(const std::string& spec) {
  static auto* cache =
      new std::map<std::string, std::shared_ptr<const core::Topology>>();
  auto it = cache->find(spec);
  if (it != cache->end()) return it->second;
  absl::StatusOr<core::Topology> topology = core::ParseTopology(
      spec, {core::Backend::kNccl, core::Backend::kNvshmem});
  if (!topology.ok()) {
    // The grid's own specs: a bad one is a bug of this test.
    std::cerr << "series_diff: " << topology.status().message() << "\n";
    std::abort();
  }
  auto parsed = std::make_shared<const core::Topology>(*std::move(topology));
  cache->emplace(spec, parsed);
  return parsed;
}

int Case::ProcessOf(int device) const {
  if (!round_robin) return topology->ProcessOf(device);
  const int per_host = topology->gpus_per_host();
  const int hosts = topology->num_devices() / per_host;
  return device / per_host + device % per_host * hosts;
}

std::string Case::Describe() const {
  std::string pair_text;
  for (size_t i = 0; i < pairs.size() && i < 12; ++i) {
    absl::StrAppend(&pair_text, i ? "," : "", "{", pairs[i].first, ",",
                    pairs[i].second, "}");
  }
  if (pairs.size() > 12) absl::StrAppend(&pair_text, ",...");
  return absl::StrCat(
      source, ": ", spec, round_robin ? " processes-round-robin" : "",
      " program ", partitions, "p x ", replicas, "r",
      channel ? " channel" : " no-channel", " pairs ", pairs_name, " {",
      pair_text, "} types (", absl::StrJoin(types, ","), ") bytes ", bytes,
      memcpy_local_p2p ? " memcpy_local_p2p" : "", in_place ? " in-place" : "",
      heap_bytes ? absl::StrCat(" heap ", *heap_bytes) : "",
      crossover_bytes ? absl::StrCat(" crossover ", crossover_bytes) : "",
      job_devices ? absl::StrCat(" aot-job ", job_devices) : "",
      series_devices_per_host == 0 ? " no-host-flag" : "",
      series_devices_per_host > 0
          ? absl::StrCat(" host-flag ", series_devices_per_host)
          : "",
      series_slice_size == 0 ? " no-slice" : "");
}

Answer ToolsDecide(const Case& c) {
  if (c.in_place) {
    // The tools' pass leaves an in-place permute to XLA (RunImpl skips it).
    return {false, "NCCL: the tools' pass does not rewrite in-place permutes"};
  }
  core::ToolCostTable table = core::DefaultToolCostTable();
  if (c.heap_bytes) table.core.nvshmem_max_bytes = *c.heap_bytes;
  absl::StatusOr<std::vector<std::pair<int, int>>> edges =
      core::EdgeIdsToDevices(*c.topology, c.pairs, c.channel, c.partitions,
                             c.replicas);
  if (!edges.ok()) {
    return {false, absl::StrCat("bad input: ", edges.status().message())};
  }
  core::PermuteRequest request;
  request.bytes = c.bytes;
  request.device_edges = *std::move(edges);
  request.team_size = c.program_devices();
  request.buffers = c.buffer_count();
  request.element_types = c.types;
  request.memcpy_local_p2p = c.memcpy_local_p2p;
  request.groups = c.groups();
  const core::ToolDecision decision =
      core::Decide(*c.topology, table, request, c.place);
  Answer answer = {decision.backend == core::Backend::kNvshmem,
                   decision.reason};
  const std::optional<core::ToolRefusal>& refused =
      decision.refused[static_cast<int>(core::Backend::kNvshmem)];
  if (refused && refused->tool_rule == core::ToolRule::kNone) {
    answer.refusal = refused->kind;
  } else if (refused) {
    answer.tool_rule = refused->tool_rule;
  }
  answer.within_margin = decision.verdict == core::Verdict::kWithinMargin;
  return answer;
}

}  // namespace series_diff
