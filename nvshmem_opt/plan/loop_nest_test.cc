#include "nvshmem_opt/plan/loop_nest.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/parser/hlo_parser.h"

namespace nvshmem_plan {
namespace loop_nest_test {
namespace {

std::unique_ptr<xla::HloModule> Parse(absl::string_view text) {
  absl::StatusOr<std::unique_ptr<xla::HloModule>> module =
      xla::ParseAndReturnUnverifiedModule(text);
  EXPECT_TRUE(module.ok()) << module.status();
  return module.ok() ? *std::move(module) : nullptr;
}

const xla::HloComputation& Computation(const xla::HloModule& module,
                                       absl::string_view name) {
  for (const xla::HloComputation* computation : module.computations()) {
    if (computation->name() == name) return *computation;
  }
  ADD_FAILURE() << "no computation " << name;
  return *module.entry_computation();
}

// (while, computation holding it, trip count) of each loop, innermost first.
struct Loop {
  std::string while_name, computation;
  std::optional<int64_t> trip_count;
  bool operator==(const Loop& other) const {
    return while_name == other.while_name && computation == other.computation &&
           trip_count == other.trip_count;
  }
};
std::ostream& operator<<(std::ostream& out, const Loop& loop) {
  return out << loop.while_name << " in " << loop.computation << " x"
             << (loop.trip_count ? absl::StrCat(*loop.trip_count) : "?");
}

std::vector<Loop> LoopsOf(const xla::HloModule& module,
                          absl::string_view computation) {
  std::vector<Loop> loops;
  for (const EnclosingLoop& loop :
       LoopNests(module).Of(Computation(module, computation))) {
    loops.push_back({loop.while_name, loop.computation, loop.trip_count});
  }
  return loops;
}

// A counted loop: i from 0 while i < LIMIT, the permute in its body.
// CONFIG is the while's backend_config attribute, or nothing.
constexpr char kCountedLoop[] = R"(HloModule m, num_partitions=2

%cond (c: (s32[], f32[8])) -> pred[] {
  %c = (s32[], f32[8]{0}) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %limit = s32[] constant(LIMIT)
  ROOT %lt = pred[] compare(%ci, %limit), direction=LT
}

%body (b: (s32[], f32[8])) -> (s32[], f32[8]) {
  %b = (s32[], f32[8]{0}) parameter(0)
  %bi = s32[] get-tuple-element(%b), index=0
  %x = f32[8]{0} get-tuple-element(%b), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%bi, %one)
  %cp = f32[8]{0} collective-permute(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  ROOT %r = (s32[], f32[8]{0}) tuple(%next, %cp)
}

ENTRY %e (p: f32[8]) -> (s32[], f32[8]) {
  %p = f32[8]{0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]{0}) tuple(%zero, %p)
  ROOT %w = (s32[], f32[8]{0}) while(%init), condition=%cond, body=%body CONFIG
}
)";

std::string CountedLoop(int limit, absl::string_view config) {
  return absl::StrReplaceAll(
      kCountedLoop, {{"LIMIT", absl::StrCat(limit)}, {" CONFIG", config}});
}

// known_trip_count in the while's backend config is the count, over what the
// analysis would find (the condition says 6).
TEST(LoopNestsTest, KnownTripCountFromTheBackendConfig) {
  auto module = Parse(
      CountedLoop(6, R"(, backend_config={"known_trip_count":{"n":"8"}})"));
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(LoopsOf(*module, "body"), (std::vector<Loop>{{"w", "e", 8}}));
}

// A newer XLA's fields in the config (dynamic_variables, ...) do not hide
// the count.
TEST(LoopNestsTest, UnknownConfigFieldsAreSkipped) {
  auto module = Parse(CountedLoop(
      6,
      R"(, backend_config={"dynamic_variables":[],"known_trip_count":{"n":"5"},"known_init_step":{"init":"0","step":"1"},"some_future_field":{"x":1}})"));
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(LoopsOf(*module, "body"), (std::vector<Loop>{{"w", "e", 5}}));
}

// Without a config, XLA's loop analysis counts a canonical loop.
TEST(LoopNestsTest, AnalysisCountsACanonicalLoop) {
  auto module = Parse(CountedLoop(6, ""));
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(LoopsOf(*module, "body"), (std::vector<Loop>{{"w", "e", 6}}));
  // An empty known_trip_count (n = 0) is no count: the analysis again.
  module = Parse(CountedLoop(3, R"(, backend_config={"known_trip_count":{}})"));
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(LoopsOf(*module, "body"), (std::vector<Loop>{{"w", "e", 3}}));
}

// A bound that is the entry's parameter: neither knows the count.
TEST(LoopNestsTest, UnknownTripCount) {
  auto module = Parse(R"(HloModule m, num_partitions=2

%cond (c: (s32[], s32[], f32[8])) -> pred[] {
  %c = (s32[], s32[], f32[8]{0}) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %cn = s32[] get-tuple-element(%c), index=1
  ROOT %lt = pred[] compare(%ci, %cn), direction=LT
}

%body (b: (s32[], s32[], f32[8])) -> (s32[], s32[], f32[8]) {
  %b = (s32[], s32[], f32[8]{0}) parameter(0)
  %bi = s32[] get-tuple-element(%b), index=0
  %bn = s32[] get-tuple-element(%b), index=1
  %x = f32[8]{0} get-tuple-element(%b), index=2
  %one = s32[] constant(1)
  %next = s32[] add(%bi, %one)
  %cp = f32[8]{0} collective-permute(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  ROOT %r = (s32[], s32[], f32[8]{0}) tuple(%next, %bn, %cp)
}

ENTRY %e (p: f32[8], n: s32[]) -> (s32[], s32[], f32[8]) {
  %p = f32[8]{0} parameter(0)
  %n = s32[] parameter(1)
  %zero = s32[] constant(0)
  %init = (s32[], s32[], f32[8]{0}) tuple(%zero, %n, %p)
  ROOT %w = (s32[], s32[], f32[8]{0}) while(%init), condition=%cond, body=%body
}
)");
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(LoopsOf(*module, "body"),
            (std::vector<Loop>{{"w", "e", std::nullopt}}));
}

// Outside any loop, and the loop's condition (run, but not by the body).
TEST(LoopNestsTest, NoLoop) {
  auto module = Parse(CountedLoop(6, ""));
  ASSERT_NE(module, nullptr);
  EXPECT_TRUE(LoopsOf(*module, "e").empty());
  EXPECT_TRUE(LoopsOf(*module, "cond").empty());
}

// A permute in a computation called from a branch inside an inner loop,
// itself in an outer loop's body: both loops, innermost first, each with the
// computation that holds it.
TEST(LoopNestsTest, NestedLoopsThroughCallsAndBranches) {
  auto module = Parse(R"(HloModule m, num_partitions=2

%ring (rp: f32[8]) -> f32[8] {
  %rp = f32[8]{0} parameter(0)
  ROOT %cp = f32[8]{0} collective-permute(%rp), channel_id=1, source_target_pairs={{0,1},{1,0}}
}

%branch (bp: f32[8]) -> f32[8] {
  %bp = f32[8]{0} parameter(0)
  ROOT %called = f32[8]{0} call(%bp), to_apply=%ring
}

%other (op: f32[8]) -> f32[8] {
  ROOT %op = f32[8]{0} parameter(0)
}

%inner_cond (ic: (s32[], f32[8])) -> pred[] {
  %ic = (s32[], f32[8]{0}) parameter(0)
  %ici = s32[] get-tuple-element(%ic), index=0
  %ilimit = s32[] constant(4)
  ROOT %ilt = pred[] compare(%ici, %ilimit), direction=LT
}

%inner_body (ib: (s32[], f32[8])) -> (s32[], f32[8]) {
  %ib = (s32[], f32[8]{0}) parameter(0)
  %ibi = s32[] get-tuple-element(%ib), index=0
  %ix = f32[8]{0} get-tuple-element(%ib), index=1
  %ione = s32[] constant(1)
  %inext = s32[] add(%ibi, %ione)
  %flag = pred[] constant(true)
  %branched = f32[8]{0} conditional(%flag, %ix, %ix), true_computation=%branch, false_computation=%other
  ROOT %ir = (s32[], f32[8]{0}) tuple(%inext, %branched)
}

%outer_cond (oc: (s32[], f32[8])) -> pred[] {
  %oc = (s32[], f32[8]{0}) parameter(0)
  %oci = s32[] get-tuple-element(%oc), index=0
  %olimit = s32[] constant(3)
  ROOT %olt = pred[] compare(%oci, %olimit), direction=LT
}

%outer_body (ob: (s32[], f32[8])) -> (s32[], f32[8]) {
  %ob = (s32[], f32[8]{0}) parameter(0)
  %obi = s32[] get-tuple-element(%ob), index=0
  %ox = f32[8]{0} get-tuple-element(%ob), index=1
  %oone = s32[] constant(1)
  %onext = s32[] add(%obi, %oone)
  %izero = s32[] constant(0)
  %iinit = (s32[], f32[8]{0}) tuple(%izero, %ox)
  %inner = (s32[], f32[8]{0}) while(%iinit), condition=%inner_cond, body=%inner_body, backend_config={"known_trip_count":{"n":"4"}}
  %iy = f32[8]{0} get-tuple-element(%inner), index=1
  ROOT %or = (s32[], f32[8]{0}) tuple(%onext, %iy)
}

ENTRY %e (p: f32[8]) -> (s32[], f32[8]) {
  %p = f32[8]{0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]{0}) tuple(%zero, %p)
  ROOT %outer = (s32[], f32[8]{0}) while(%init), condition=%outer_cond, body=%outer_body, backend_config={"known_trip_count":{"n":"3"}}
}
)");
  ASSERT_NE(module, nullptr);
  const std::vector<Loop> expected = {{"inner", "outer_body", 4},
                                      {"outer", "e", 3}};
  EXPECT_EQ(LoopsOf(*module, "ring"), expected);
  EXPECT_EQ(LoopsOf(*module, "inner_body"), expected);
  EXPECT_EQ(LoopsOf(*module, "outer_body"),
            (std::vector<Loop>{{"outer", "e", 3}}));
}

// Real ring attention (jax, XLA's before-async stage): the permute rotating K
// and V runs in the fori_loop's body, 8 trips.
TEST(LoopNestsTest, RingAttentionFixture) {
  std::ifstream file(
      absl::StrCat(NVSHMEM_FIXTURES_DIR, "/ring_1x1x8.before_async.hlo"));
  std::stringstream text;
  text << file.rdbuf();
  auto module = Parse(text.str());
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(LoopsOf(*module, "region_0.5_spmd"),
            (std::vector<Loop>{{"while.71", "main.8_spmd", 8}}));
}

}  // namespace
}  // namespace loop_nest_test
}  // namespace nvshmem_plan
