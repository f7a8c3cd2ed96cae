#include "nvshmem_opt/plan/permute_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "tool_layer/backends.h"
#include "tool_layer/decide.h"
#include "tool_layer/table_text.h"
#include "tool_layer/topology_spec.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/parser/hlo_parser.h"

namespace nvshmem_plan {
namespace permute_plan_test {
namespace {

namespace core = ::xla::gpu::backend_selection;
using OpRecord = PermutePlan::OpRecord;

std::unique_ptr<xla::HloModule> Parse(absl::string_view text) {
  absl::StatusOr<std::unique_ptr<xla::HloModule>> module =
      xla::ParseAndReturnUnverifiedModule(text);
  EXPECT_TRUE(module.ok()) << module.status();
  return module.ok() ? *std::move(module) : nullptr;
}

// NVSHMEM beats NCCL inside an NVLink domain at every size (the fixture
// table), so that what refuses it is a rule, never the cost.
core::ToolCostTable FastNvshmemTable() {
  std::ifstream file(absl::StrCat(NVSHMEM_FIXTURES_DIR, "/fast_nvshmem.cost"));
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<core::ToolCostTable> table =
      core::ParseToolCostTable(text.str(), "fast_nvshmem.cost");
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? *table : core::DefaultToolCostTable();
}

core::Topology Topology(const std::string& spec) {
  absl::StatusOr<core::Topology> topology = core::ParseTopology(
      spec, {core::Backend::kNccl, core::Backend::kNvshmem});
  EXPECT_TRUE(topology.ok()) << topology.status();
  return *topology;
}

// One host of 8 GPUs, one process each, logical id i on GPU i: with the map
// the one-sided backends know where each id runs (without one, a program over
// several processes has them refused).
constexpr char kOneHost[] = "1x1x8:map=0,1,2,3,4,5,6,7";

// A ring over 8 partitions of TYPE[1024]; ATTRS follow its pairs.
constexpr char kRingTemplate[] = R"(HloModule ring, num_partitions=8

ENTRY %e (p: TYPE[1024]) -> TYPE[1024] {
  %p = TYPE[1024]{0} parameter(0)
  ROOT %cp = TYPE[1024]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}ATTRS
}
)";

std::string Ring(absl::string_view type = "f32", absl::string_view attrs = "") {
  return absl::StrReplaceAll(kRingTemplate, {{"TYPE", type}, {"ATTRS", attrs}});
}

// Each call of the writer: (instruction, backend).
struct Written {
  std::vector<std::pair<std::string, core::Backend>> calls;
  absl::StatusOr<bool> result = true;
  PermutePlan::BackendWriter Writer() {
    return [this](xla::HloInstruction* instr, core::Backend backend) {
      calls.emplace_back(std::string(instr->name()), backend);
      return result;
    };
  }
};

PermutePlan::Options OptionsOn(const std::string& spec,
                               core::ToolCostTable table, Written* written) {
  PermutePlan::Options options;
  options.topology = Topology(spec);
  options.table = std::move(table);
  if (written != nullptr) options.write_backend = written->Writer();
  return options;
}

// Without a writer, a plan that writes cannot run.
TEST(PermutePlanTest, WritingNeedsAWriter) {
  auto module = Parse(Ring());
  ASSERT_NE(module, nullptr);
  PermutePlan plan(OptionsOn(kOneHost, FastNvshmemTable(), nullptr));
  absl::StatusOr<bool> ran = plan.Run(module.get());
  ASSERT_FALSE(ran.ok());
  EXPECT_EQ(ran.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ran.status().message(), "no backend writer");
  EXPECT_FALSE(plan.TopologyFor(*module).ok());
}

// Given, the topology is the options'; derived, the pass's own, with the
// backend set's process layout (1 GPU per process where NVSHMEM is offered,
// a process per host for peer memory).
TEST(PermutePlanTest, TopologyFor) {
  auto module = Parse(Ring());
  ASSERT_NE(module, nullptr);
  PermutePlan::Options options;
  options.decide_only = true;
  options.topology = Topology("1x1x8");
  absl::StatusOr<core::Topology> given =
      PermutePlan(options).TopologyFor(*module);
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(core::TopologySpec(*given), "1x1x8:gpus_per_process=1");

  options.topology.reset();
  options.devices_per_host = 4;
  absl::StatusOr<core::Topology> derived =
      PermutePlan(options).TopologyFor(*module);
  ASSERT_TRUE(derived.ok()) << derived.status();
  EXPECT_EQ(derived->hosts_per_slice(), 2);
  EXPECT_EQ(derived->gpus_per_host(), 4);
  EXPECT_EQ(derived->gpus_per_process(), 1);

  options.table.backends = {core::Backend::kNccl, core::Backend::kPeer};
  derived = PermutePlan(options).TopologyFor(*module);
  ASSERT_TRUE(derived.ok()) << derived.status();
  EXPECT_EQ(derived->gpus_per_process(), 4);
}

// What the pass saw of the permute, and the backend it wrote.
TEST(PermutePlanTest, RecordsAndWritesTheDecision) {
  auto module = Parse(Ring());
  ASSERT_NE(module, nullptr);
  Written written;
  PermutePlan plan(OptionsOn(kOneHost, FastNvshmemTable(), &written));
  absl::StatusOr<bool> changed = plan.Run(module.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(written.calls, (std::vector<std::pair<std::string, core::Backend>>{
                               {"cp", core::Backend::kNvshmem}}));
  ASSERT_EQ(plan.records().size(), 1);
  const OpRecord& r = plan.records()[0];
  EXPECT_EQ(r.computation, "e");
  EXPECT_EQ(r.instruction, "cp");
  EXPECT_EQ(r.form, "sync");
  EXPECT_EQ(r.bytes, 4096);  // f32[1024] from each source.
  EXPECT_EQ(r.buffers, 1);
  ASSERT_EQ(r.pairs.size(), 8);
  EXPECT_EQ(r.pairs[7], std::make_pair(int64_t{7}, int64_t{0}));
  ASSERT_EQ(r.edges.size(), 8);
  for (const auto& [src, dst, link_class] : r.edges) {
    EXPECT_EQ(link_class, core::LinkClass::kIntraHostNvlink) << src << dst;
  }
  EXPECT_TRUE(r.loops.empty());
  EXPECT_FALSE(r.skipped);
  EXPECT_EQ(r.user_mark, "");
  EXPECT_EQ(r.decision.backend, core::Backend::kNvshmem);
  EXPECT_FALSE(r.decision.reason.empty());
}

// Without a map, a program over several processes (one GPU each here) does
// not say which device runs each id: every edge's host and process, and
// NVSHMEM's PE for each id, are unknown, so the one-sided backends are
// refused however cheap.
TEST(PermutePlanTest, WithoutAMapThePlacementIsUnknown) {
  auto module = Parse(Ring());
  ASSERT_NE(module, nullptr);
  PermutePlan::Options options =
      OptionsOn("1x1x8", FastNvshmemTable(), nullptr);
  options.decide_only = true;
  PermutePlan plan(options);
  ASSERT_TRUE(plan.Run(module.get()).ok());
  const core::ToolDecision& d = plan.records()[0].decision;
  EXPECT_EQ(d.backend, core::Backend::kNccl);
  const auto& refused = d.refused[static_cast<int>(core::Backend::kNvshmem)];
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->tool_rule, core::ToolRule::kPlacementUnknown);
}

// The writer's answer is the pass's: unchanged config, unchanged module; an
// error stops the run.
TEST(PermutePlanTest, WritersAnswerIsThePasss) {
  auto module = Parse(Ring());
  ASSERT_NE(module, nullptr);
  Written unchanged;
  unchanged.result = false;
  absl::StatusOr<bool> changed =
      PermutePlan(OptionsOn(kOneHost, FastNvshmemTable(), &unchanged))
          .Run(module.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(unchanged.calls.size(), 1);

  Written failing;
  failing.result = absl::InvalidArgumentError("cp: not JSON");
  changed = PermutePlan(OptionsOn(kOneHost, FastNvshmemTable(), &failing))
                .Run(module.get());
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().message(), "cp: not JSON");
}

// Deciding only: the writer is never called and the module stays as it was.
TEST(PermutePlanTest, DecideOnly) {
  auto module = Parse(Ring());
  ASSERT_NE(module, nullptr);
  const std::string before = module->ToString();
  Written written;
  PermutePlan::Options options =
      OptionsOn(kOneHost, FastNvshmemTable(), &written);
  options.decide_only = true;
  PermutePlan plan(options);
  absl::StatusOr<bool> changed = plan.Run(module.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_TRUE(written.calls.empty());
  EXPECT_EQ(module->ToString(), before);
  ASSERT_EQ(plan.records().size(), 1);
  EXPECT_EQ(plan.records()[0].decision.backend, core::Backend::kNvshmem);
}

// Annotating writes the decision into frontend attributes, once: a second
// run changes nothing.
TEST(PermutePlanTest, AnnotateWritesAttributesOnce) {
  auto module = Parse(Ring());
  ASSERT_NE(module, nullptr);
  PermutePlan::Options options =
      OptionsOn(kOneHost, FastNvshmemTable(), nullptr);
  options.decide_only = true;
  options.annotate = true;
  PermutePlan plan(options);
  absl::StatusOr<bool> changed = plan.Run(module.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  const xla::HloInstruction* cp =
      module->entry_computation()->root_instruction();
  EXPECT_EQ(cp->get_frontend_attribute(std::string(kNvshmemPlanAttr)),
            "nvshmem");
  EXPECT_EQ(cp->get_frontend_attribute(std::string(kNvshmemReasonAttr)),
            plan.records()[0].decision.reason);
  const std::optional<std::string> modeled =
      cp->get_frontend_attribute(std::string(kNvshmemModeledAttr));
  ASSERT_TRUE(modeled.has_value());
  EXPECT_TRUE(absl::StartsWith(*modeled, "nccl=")) << *modeled;
  EXPECT_TRUE(absl::StrContains(*modeled, ",nvshmem=")) << *modeled;

  changed = plan.Run(module.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
}

// A user's _xla_collectives_mode is law: no backend written over it. The
// tools' own earlier choice (the same value in _nvshmem_opt_mode) is decided
// again; a mark naming no mode fails.
TEST(PermutePlanTest, UserMarks) {
  auto marked = Parse(
      Ring("f32", R"(, frontend_attributes={_xla_collectives_mode="peer"})"));
  ASSERT_NE(marked, nullptr);
  Written written;
  PermutePlan plan(OptionsOn(kOneHost, FastNvshmemTable(), &written));
  ASSERT_TRUE(plan.Run(marked.get()).ok());
  EXPECT_TRUE(written.calls.empty());
  ASSERT_EQ(plan.records().size(), 1);
  EXPECT_EQ(plan.records()[0].user_mark, "peer");

  auto tools_own = Parse(Ring(
      "f32",
      R"(, frontend_attributes={_nvshmem_opt_mode="peer",_xla_collectives_mode="peer"})"));
  ASSERT_NE(tools_own, nullptr);
  ASSERT_TRUE(plan.Run(tools_own.get()).ok());
  EXPECT_EQ(written.calls.size(), 1);
  EXPECT_EQ(plan.records()[0].user_mark, "");

  auto bogus = Parse(
      Ring("f32", R"(, frontend_attributes={_xla_collectives_mode="bogus"})"));
  ASSERT_NE(bogus, nullptr);
  absl::StatusOr<bool> ran = plan.Run(bogus.get());
  ASSERT_FALSE(ran.ok());
  EXPECT_EQ(ran.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(ran.status().message(), "%cp: "))
      << ran.status();
}

// The backend a permute already carries, and why its runtime may not run it
// where it sits (NVSHMEM across hosts); NCCL is never refused. The map says
// where each id runs, so that only the host rule can refuse.
TEST(PermutePlanTest, CurrentBackendAndItsRefusal) {
  auto module = Parse(Ring());
  ASSERT_NE(module, nullptr);
  const std::string two_hosts = "1x2x4:map=0,1,2,3,4,5,6,7";
  PermutePlan::Options options =
      OptionsOn(two_hosts, FastNvshmemTable(), nullptr);
  options.decide_only = true;
  options.read_backend = [](const xla::HloInstruction&) {
    return std::optional<core::Backend>(core::Backend::kNvshmem);
  };
  PermutePlan across_hosts(options);
  ASSERT_TRUE(across_hosts.Run(module.get()).ok());
  const OpRecord& r = across_hosts.records()[0];
  EXPECT_EQ(r.current, core::Backend::kNvshmem);
  ASSERT_TRUE(r.current_refusal.has_value());
  EXPECT_EQ(r.current_refusal->tool_rule, core::ToolRule::kNone);
  EXPECT_EQ(r.current_refusal->kind, core::RefusalKind::kOutsideSharedMemory);

  options.topology = Topology(kOneHost);
  PermutePlan one_host(options);
  ASSERT_TRUE(one_host.Run(module.get()).ok());
  EXPECT_EQ(one_host.records()[0].current, core::Backend::kNvshmem);
  EXPECT_FALSE(one_host.records()[0].current_refusal.has_value());

  options.read_backend = [](const xla::HloInstruction&) {
    return std::optional<core::Backend>(core::Backend::kNccl);
  };
  options.topology = Topology(two_hosts);
  PermutePlan nccl(options);
  ASSERT_TRUE(nccl.Run(module.get()).ok());
  EXPECT_EQ(nccl.records()[0].current, core::Backend::kNccl);
  EXPECT_FALSE(nccl.records()[0].current_refusal.has_value());
}

// A destination that is an entry parameter's buffer (XLA's buffer
// assignment): the pinned emitter refuses it, so NVSHMEM is refused however
// cheap.
TEST(PermutePlanTest, DestinationsRefuseNvshmem) {
  auto module = Parse(Ring());
  ASSERT_NE(module, nullptr);
  PermutePlan::Options options =
      OptionsOn(kOneHost, FastNvshmemTable(), nullptr);
  options.decide_only = true;
  options.read_destinations = [](const xla::HloInstruction&) {
    core::DestinationBuffer donated;
    donated.allocation = 0;
    donated.parameter = 1;
    return std::vector<core::DestinationBuffer>{donated};
  };
  PermutePlan plan(options);
  ASSERT_TRUE(plan.Run(module.get()).ok());
  const core::ToolDecision& d = plan.records()[0].decision;
  EXPECT_EQ(d.backend, core::Backend::kNccl);
  const auto& refused = d.refused[static_cast<int>(core::Backend::kNvshmem)];
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->tool_rule, core::ToolRule::kNone);
  EXPECT_EQ(refused->kind, core::RefusalKind::kDestinationOffHeap);
}

// NVSHMEM puts only some element types (no 8-bit ones).
TEST(PermutePlanTest, ElementTypeNvshmemDoesNotPut) {
  auto module = Parse(Ring("s8"));
  ASSERT_NE(module, nullptr);
  PermutePlan::Options options =
      OptionsOn(kOneHost, FastNvshmemTable(), nullptr);
  options.decide_only = true;
  PermutePlan plan(options);
  ASSERT_TRUE(plan.Run(module.get()).ok());
  const core::ToolDecision& d = plan.records()[0].decision;
  EXPECT_EQ(plan.records()[0].bytes, 1024);
  EXPECT_EQ(d.backend, core::Backend::kNccl);
  const auto& refused = d.refused[static_cast<int>(core::Backend::kNvshmem)];
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->tool_rule, core::ToolRule::kNone);
  EXPECT_EQ(refused->kind, core::RefusalKind::kUnsupportedType);
}

// Under a conditional's branch devices may run other permutes: no one-sided
// backend there.
TEST(PermutePlanTest, UnderABranch) {
  auto module = Parse(R"(HloModule m, num_partitions=8

%ring (rp: f32[1024]) -> f32[1024] {
  %rp = f32[1024]{0} parameter(0)
  ROOT %cp = f32[1024]{0} collective-permute(%rp), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}
}

%skip (sp: f32[1024]) -> f32[1024] {
  ROOT %sp = f32[1024]{0} parameter(0)
}

ENTRY %e (p: f32[1024], c: pred[]) -> f32[1024] {
  %p = f32[1024]{0} parameter(0)
  %c = pred[] parameter(1)
  ROOT %branched = f32[1024]{0} conditional(%c, %p, %p), true_computation=%ring, false_computation=%skip
}
)");
  ASSERT_NE(module, nullptr);
  PermutePlan::Options options =
      OptionsOn(kOneHost, FastNvshmemTable(), nullptr);
  options.decide_only = true;
  PermutePlan plan(options);
  ASSERT_TRUE(plan.Run(module.get()).ok());
  ASSERT_EQ(plan.records().size(), 1);
  const core::ToolDecision& d = plan.records()[0].decision;
  EXPECT_EQ(plan.records()[0].computation, "ring");
  EXPECT_EQ(d.backend, core::Backend::kNccl);
  const auto& refused = d.refused[static_cast<int>(core::Backend::kNvshmem)];
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->tool_rule, core::ToolRule::kUnderBranch);
}

// K and V rotated together (a combined permute), already async as XLA's
// later stages leave it, in a counted loop: two buffers, their bytes summed,
// and the loop around it.
TEST(PermutePlanTest, CombinedAsyncPermuteInALoop) {
  auto module = Parse(R"(HloModule m, num_partitions=2

%cond (c: (s32[], f32[8], f32[4])) -> pred[] {
  %c = (s32[], f32[8]{0}, f32[4]{0}) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %limit = s32[] constant(5)
  ROOT %lt = pred[] compare(%ci, %limit), direction=LT
}

%body (b: (s32[], f32[8], f32[4])) -> (s32[], f32[8], f32[4]) {
  %b = (s32[], f32[8]{0}, f32[4]{0}) parameter(0)
  %bi = s32[] get-tuple-element(%b), index=0
  %k = f32[8]{0} get-tuple-element(%b), index=1
  %v = f32[4]{0} get-tuple-element(%b), index=2
  %one = s32[] constant(1)
  %next = s32[] add(%bi, %one)
  %cps = ((f32[8]{0}, f32[4]{0}), (f32[8]{0}, f32[4]{0})) collective-permute-start(%k, %v), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %cpd = (f32[8]{0}, f32[4]{0}) collective-permute-done(%cps)
  %k2 = f32[8]{0} get-tuple-element(%cpd), index=0
  %v2 = f32[4]{0} get-tuple-element(%cpd), index=1
  ROOT %r = (s32[], f32[8]{0}, f32[4]{0}) tuple(%next, %k2, %v2)
}

ENTRY %e (k0: f32[8], v0: f32[4]) -> (s32[], f32[8], f32[4]) {
  %k0 = f32[8]{0} parameter(0)
  %v0 = f32[4]{0} parameter(1)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]{0}, f32[4]{0}) tuple(%zero, %k0, %v0)
  ROOT %w = (s32[], f32[8]{0}, f32[4]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"5"}}
}
)");
  ASSERT_NE(module, nullptr);
  Written written;
  PermutePlan plan(OptionsOn("1x1x2", FastNvshmemTable(), &written));
  ASSERT_TRUE(plan.Run(module.get()).ok());
  ASSERT_EQ(plan.records().size(), 1);
  const OpRecord& r = plan.records()[0];
  EXPECT_EQ(r.instruction, "cps");
  EXPECT_EQ(r.form, "async");
  EXPECT_EQ(r.buffers, 2);
  EXPECT_EQ(r.bytes, 48);  // 32 + 16 from each source.
  ASSERT_EQ(r.loops.size(), 1);
  EXPECT_EQ(r.loops[0].while_name, "w");
  EXPECT_EQ(r.loops[0].computation, "e");
  EXPECT_EQ(r.loops[0].trip_count, 5);
  EXPECT_EQ(written.calls.size(), 1);
}

}  // namespace
}  // namespace permute_plan_test
}  // namespace nvshmem_plan
