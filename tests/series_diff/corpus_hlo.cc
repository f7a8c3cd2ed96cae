// The driver fuzzer's module seeds (real HLO from JAX and the pass's test
// modules, each under a topology its leading comment names) as cases: each
// collective-permute's facts, read as the pass reads them
// (NvshmemCollectivePermuteRewriter::RequestFor), on that topology.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/series_diff/diff_case.h"
#include "tool_layer/decide.h"
#include "tool_layer/topology_spec.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/parser/hlo_parser.h"
#include "xla/primitive_util.h"
#include "xla/shape_util.h"
#include "xla/side_effect_util.h"

namespace series_diff {
namespace {

// The seed's topology (driver_fuzzer's default without a comment), or
// nullopt when its comment asks for another cost table.
std::optional<std::string> SeedTopology(const std::string& data) {
  if (!absl::StartsWith(data, "/* driver_fuzzer ")) return "1x2x4";
  const std::string comment = data.substr(0, data.find("*/"));
  if (absl::StrContains(comment, "--slow-network")) return std::nullopt;
  const size_t at = comment.find("--topology=");
  if (at == std::string::npos) return "1x2x4";
  const size_t start = at + 11;
  return comment.substr(start, comment.find(' ', start) - start);
}

// Where a permute of `computation` sits, as the tools' pass finds it: under a
// conditional's branch, in a call marked as a collectives group, or anywhere.
xla::gpu::backend_selection::Place PlaceOf(
    const xla::HloComputation& computation) {
  std::vector<const xla::HloComputation*> pending = {&computation};
  std::set<const xla::HloComputation*> seen;
  bool in_group = false;
  while (!pending.empty()) {
    const xla::HloComputation* callee = pending.back();
    pending.pop_back();
    if (!seen.insert(callee).second) continue;
    for (const xla::HloInstruction* caller : callee->caller_instructions()) {
      if (caller->opcode() == xla::HloOpcode::kConditional) {
        return xla::gpu::backend_selection::Place::kConditionalBranch;
      }
      in_group |= caller->opcode() == xla::HloOpcode::kCall &&
                  caller->frontend_attributes().map().contains(
                      xla::kCollectivesGroupAttr);
      pending.push_back(caller->parent());
    }
  }
  return in_group ? xla::gpu::backend_selection::Place::kCollectivesGroup
                  : xla::gpu::backend_selection::Place::kAnywhere;
}

// One permute's facts, as RequestFor reads them, on `spec`.
Case PermuteCase(const xla::HloCollectivePermuteInstruction& permute,
                 const std::string& name, const std::string& spec,
                 const std::shared_ptr<const std::string>& text) {
  const xla::HloModuleConfig& config = permute.GetModule()->config();
  Case c;
  c.source = absl::StrCat("module-seed ", name, " ", permute.name());
  c.spec = spec;
  c.topology = ParsedSpec(spec);
  c.partitions = static_cast<int>(config.num_partitions());
  c.replicas = static_cast<int>(config.replica_count());
  c.channel = permute.channel_id().has_value();
  c.pairs_name = permute.name();
  c.module_text = text;
  c.place = PlaceOf(*permute.parent());
  c.permute_name = permute.name();
  c.pairs = permute.source_target_pairs();
  c.buffers = static_cast<int>(permute.operand_count());
  c.memcpy_local_p2p = config.debug_options().xla_gpu_use_memcpy_local_p2p();
  for (const xla::HloInstruction* operand : permute.operands()) {
    xla::ShapeUtil::ForEachSubshape(
        operand->shape(), [&](const xla::Shape& subshape, const auto&) {
          if (!subshape.IsArray()) return;
          c.bytes += xla::ShapeUtil::ByteSizeOfElements(subshape);
          c.types.push_back(xla::primitive_util::LowercasePrimitiveTypeName(
              subshape.element_type()));
        });
  }
  return c;
}

// The permutes of one seed, or why none are compared.
std::vector<Case> SeedCases(const std::filesystem::path& path,
                            const std::string& data, std::string& skip) {
  const std::optional<std::string> topology = SeedTopology(data);
  if (!topology) {
    skip = "a slow-network cost table the series' decision does not take";
    return {};
  }
  const std::shared_ptr<const xla::gpu::backend_selection::Topology> parsed =
      ParsedSpec(*topology);
  absl::StatusOr<std::unique_ptr<xla::HloModule>> module =
      xla::ParseAndReturnUnverifiedModule(data);
  if (!module.ok()) {
    skip = "a module the wheel's XLA parser does not read";
    return {};
  }
  const xla::HloModuleConfig& config = (*module)->config();
  const int64_t devices = config.num_partitions() * config.replica_count();
  std::string spec = *topology;
  if (!absl::StrContains(spec, ":map=")) {
    // XLA's default placement, which a compiled module's assignment states.
    std::vector<int64_t> ids(devices);
    for (int64_t i = 0; i < devices; ++i) ids[i] = i;
    absl::StrAppend(&spec, ":map=", absl::StrJoin(ids, ","));
  }
  if (devices > parsed->num_devices() ||
      !xla::gpu::backend_selection::ParseTopology(spec).ok()) {
    skip = "a program larger than its topology";
    return {};
  }
  std::vector<Case> cases;
  const auto text = std::make_shared<const std::string>(data);
  for (const xla::HloComputation* computation :
       (*module)->MakeNonfusionComputations()) {
    if (computation->IsAsyncComputation()) continue;
    for (const xla::HloInstruction* instr : computation->instructions()) {
      const auto* permute =
          xla::DynCast<xla::HloCollectivePermuteInstruction>(instr);
      if (permute == nullptr || permute->inplace()) continue;
      cases.push_back(
          PermuteCase(*permute, path.filename().string(), spec, text));
    }
  }
  if (cases.empty()) skip = "no collective-permute";
  return cases;
}

}  // namespace

std::vector<Case> HloCorpusCases(const std::string& dir,
                                 std::map<std::string, int>* skipped) {
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    // Regression inputs stress XLA's parser (some abort it): no permutes.
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && !absl::StartsWith(name, "regression.")) {
      paths.push_back(entry.path());
    }
  }
  std::sort(paths.begin(), paths.end());
  std::vector<Case> cases;
  std::set<std::string> seen;  // Module text and topology: once each.
  for (const auto& path : paths) {
    std::ifstream file(path);
    std::optional<std::string> data;
    if (file) {
      data.emplace((std::istreambuf_iterator<char>(file)),
                   std::istreambuf_iterator<char>());
    }
    std::string skip;
    if (data) {
      const std::optional<std::string> topology = SeedTopology(*data);
      const std::string body = data->substr(data->find('\n') + 1);
      if (topology && !seen.insert(*topology + "\n" + body).second) continue;
      std::vector<Case> seed = SeedCases(path, *data, skip);
      cases.insert(cases.end(), seed.begin(), seed.end());
    } else {
      skip = "unreadable";
    }
    if (!skip.empty()) ++(*skipped)[skip];
  }
  return cases;
}

}  // namespace series_diff
