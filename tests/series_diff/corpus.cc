// The selection fuzzer's seeds as cases of the differential test. A seed is a
// topology spec, a cost table and a request ("BYTES PARTITIONS REPLICAS
// CROSS SRC DST ..."), read as tests/fuzz/selection_fuzzer.cc reads it.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/fuzz/selection_request.h"
#include "tests/series_diff/diff_case.h"
#include "tool_layer/backends.h"
#include "tool_layer/table_text.h"
#include "tool_layer/topology_spec.h"

namespace series_diff {
namespace {

namespace core = ::xla::gpu::backend_selection;

// The heap bound of a table that is the default one but for that bound, or
// nullopt when it sets anything else the series' decision does not take.
std::optional<int64_t> DefaultTableHeap(const std::string& text) {
  absl::StatusOr<core::ToolCostTable> table =
      core::ParseToolCostTable(text, "seed");
  if (!table.ok()) return std::nullopt;
  core::ToolCostTable expected = core::DefaultToolCostTable();
  expected.core.nvshmem_max_bytes = table->core.nvshmem_max_bytes;
  if (core::CostTableToString(*table) != core::CostTableToString(expected)) {
    return std::nullopt;
  }
  return table->core.nvshmem_max_bytes;
}

// The seed's request, read as the fuzzer reads it, into `c`.
void ReadRequest(const std::string& text, Case& c) {
  fuzz::SeedRequest seed = fuzz::ReadSeedRequest(text);
  c.bytes = seed.bytes;
  c.partitions = seed.partitions;
  c.replicas = seed.replicas;
  c.channel = seed.cross;
  c.pairs = std::move(seed.pairs);
}

// One seed as a case, or nullopt with why not in `skip`.
std::optional<Case> SeedCase(const std::filesystem::path& path,
                             std::string& skip) {
  std::ifstream file(path);
  const std::string text((std::istreambuf_iterator<char>(file)),
                         std::istreambuf_iterator<char>());
  std::vector<std::string> sections = absl::StrSplit(text, "%%\n");
  if (sections.size() != 3) {
    skip = "not three sections";
    return std::nullopt;
  }
  Case c;
  c.source = absl::StrCat("selection-seed ", path.filename().string());
  std::string spec(absl::StripSuffix(sections[0], "\n"));
  std::optional<int64_t> heap = DefaultTableHeap(sections[1]);
  if (!heap) {
    skip = "a table entry the series' decision does not take";
    return std::nullopt;
  }
  if (*heap != core::DefaultToolCostTable().core.nvshmem_max_bytes) {
    c.heap_bytes = *heap;
  }
  ReadRequest(sections[2], c);
  // The device assignment a compiled module always has: XLA's default
  // placement where the spec states none.
  if (!absl::StrContains(spec, ":map=")) {
    std::vector<int> ids;
    for (int i = 0; i < c.program_devices(); ++i) ids.push_back(i);
    absl::StrAppend(&spec, ":map=", absl::StrJoin(ids, ","));
  }
  if (!core::ParseTopology(spec).ok()) {
    skip = "more devices than the topology";
    return std::nullopt;
  }
  c.spec = spec;
  c.topology = ParsedSpec(spec);
  c.pairs_name = "seed";
  c.types = {"bf16"};  // The fuzzer's requests name none; one put type.
  if (!core::EdgeIdsToDevices(*c.topology, c.pairs, c.channel, c.partitions,
                              c.replicas)
           .ok()) {
    skip = "pairs or program outside the topology (bad input to the tools)";
    return std::nullopt;
  }
  return c;
}

}  // namespace

std::vector<Case> CorpusCases(const std::string& dir,
                              std::map<std::string, int>* skipped) {
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<Case> cases;
  for (const auto& path : paths) {
    std::string skip;
    std::optional<Case> c = SeedCase(path, skip);
    if (c) {
      cases.push_back(*std::move(c));
    } else {
      ++(*skipped)[skip];
    }
  }
  return cases;
}

}  // namespace series_diff
