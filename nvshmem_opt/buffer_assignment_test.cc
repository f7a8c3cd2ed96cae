#include "nvshmem_opt/buffer_assignment.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/parser/hlo_parser.h"

namespace nvshmem_opt {
namespace buffer_assignment_test {
namespace {

namespace core = ::xla::gpu::backend_selection;

std::string ReadFixture(const std::string& name) {
  std::ifstream file(absl::StrCat(NVSHMEM_FIXTURES_DIR, "/", name));
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

std::unique_ptr<xla::HloModule> Parse(const std::string& text) {
  absl::StatusOr<std::unique_ptr<xla::HloModule>> module =
      xla::ParseAndReturnUnverifiedModule(text);
  EXPECT_TRUE(module.ok()) << module.status();
  return module.ok() ? *std::move(module) : nullptr;
}

const xla::HloInstruction* Named(const xla::HloModule& module,
                                 const std::string& name) {
  for (const xla::HloComputation* computation : module.computations()) {
    for (const xla::HloInstruction* instr : computation->instructions()) {
      if (instr->name() == name) return instr;
    }
  }
  ADD_FAILURE() << "no instruction " << name;
  return nullptr;
}

// The destinations of permute `name` in `module_text` under `dump`.
std::vector<core::DestinationBuffer> Destinations(
    const std::string& module_text, const std::string& dump,
    const std::string& name) {
  std::unique_ptr<xla::HloModule> module = Parse(module_text);
  absl::StatusOr<BufferAssignment> assignment =
      ParseBufferAssignment(dump, "dump.txt");
  EXPECT_TRUE(assignment.ok()) << assignment.status();
  if (module == nullptr || !assignment.ok()) return {};
  const xla::HloInstruction* permute = Named(*module, name);
  if (permute == nullptr) return {};
  return DestinationsOf(*permute, *assignment);
}

TEST(BufferAssignmentPathTest, WhereXlaDumpsIt) {
  EXPECT_EQ(BufferAssignmentPath("d/module_0001.jit_f.sm_9.0a_gpu_after_"
                                 "optimizations.txt"),
            "d/module_0001.jit_f.sm_9.0a_gpu_after_optimizations-buffer-"
            "assignment.txt");
  EXPECT_EQ(BufferAssignmentPath("ring.after_optimizations.hlo"),
            "ring.after_optimizations-buffer-assignment.txt");
  EXPECT_EQ(BufferAssignmentPath("m"), "m-buffer-assignment.txt");
}

// XLA's dump of a ring into a donated buffer (input_output_alias): the
// permute's destination {1} is entry parameter 1's allocation.
TEST(ParseBufferAssignmentTest, RealDump) {
  absl::StatusOr<BufferAssignment> assignment = ParseBufferAssignment(
      ReadFixture(
          "donated_ring_1x1x8.after_optimizations-buffer-assignment.txt"),
      "dump.txt");
  ASSERT_TRUE(assignment.ok()) << assignment.status();
  const auto& start = assignment->at("collective-permute-start");
  ASSERT_EQ(start.size(), 2);
  const Allocation& destination = start.at({1});
  EXPECT_EQ(destination.number, 0);
  EXPECT_EQ(destination.parameter, 1);
  EXPECT_TRUE(destination.maybe_live_out);
  const Allocation& tuple = start.at({});
  EXPECT_EQ(tuple.number, 2);
  EXPECT_EQ(tuple.parameter, -1);
  EXPECT_FALSE(tuple.maybe_live_out);
  EXPECT_EQ(assignment->at("param.2").at({}).parameter, 0);
}

// Each malformed line is named by its number.
TEST(ParseBufferAssignmentTest, RefusesWhatIsNoDump) {
  absl::StatusOr<BufferAssignment> parsed =
      ParseBufferAssignment("HloModule m\n", "m-buffer-assignment.txt");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(),
            "m-buffer-assignment.txt:1: not an XLA buffer-assignment dump (no "
            "'BufferAssignment:' line)");

  parsed = ParseBufferAssignment(
      "BufferAssignment:\nallocation 0: size 4:\nallocation x: size 4:\n",
      "d.txt");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(),
            "d.txt:3: expected 'allocation N: size S, ...'");

  parsed = ParseBufferAssignment(
      "BufferAssignment:\nallocation 0: size 4, parameter -2:\n", "d.txt");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(),
            "d.txt:2: expected 'allocation N: size S, ...'");

  // A value outside an allocation.
  parsed = ParseBufferAssignment(
      "BufferAssignment:\n value: <0 p @0> (size=4,offset=0): f32[]\n",
      "d.txt");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(),
            "d.txt:2: expected ' value: <id name{index} @n>' under an "
            "allocation line");
}

// Later sections list values in other forms; they are not read.
TEST(ParseBufferAssignmentTest, ValuesWithIndicesAndPhis) {
  absl::StatusOr<BufferAssignment> parsed = ParseBufferAssignment(
      "BufferAssignment:\n"
      "allocation 3: size 8, maybe-live-out:\n"
      " value: <7 w{1,0} (phi) @0> (size=8,offset=0): f32[2]\n"
      "\n"
      "Total bytes used: 8\n"
      "Used values:\n"
      "<7 w{1,0} (phi) @0>\n",
      "d.txt");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 1);
  const Allocation& allocation = parsed->at("w").at({1, 0});
  EXPECT_EQ(allocation.number, 3);
  EXPECT_EQ(allocation.parameter, -1);
  EXPECT_TRUE(allocation.maybe_live_out);
}

// Real modules and dumps: a destination that is an entry parameter (donated),
// and one the program returns. Both are what the pinned emitter refuses for
// NVSHMEM.
TEST(DestinationsOfTest, DonatedAndReturnedFixtures) {
  std::vector<core::DestinationBuffer> donated = Destinations(
      ReadFixture("donated_ring_1x1x8.after_optimizations.hlo"),
      ReadFixture(
          "donated_ring_1x1x8.after_optimizations-buffer-assignment.txt"),
      "collective-permute-start");
  ASSERT_EQ(donated.size(), 1);
  EXPECT_EQ(donated[0].allocation, 0);
  EXPECT_EQ(donated[0].parameter, 1);
  EXPECT_FALSE(donated[0].returned);  // A parameter's, whatever else.

  std::vector<core::DestinationBuffer> returned = Destinations(
      ReadFixture("returned_ring_1x1x8.after_optimizations.hlo"),
      ReadFixture(
          "returned_ring_1x1x8.after_optimizations-buffer-assignment.txt"),
      "collective-permute-start");
  ASSERT_EQ(returned.size(), 1);
  EXPECT_EQ(returned[0].allocation, 0);
  EXPECT_EQ(returned[0].parameter, -1);
  EXPECT_TRUE(returned[0].returned);
}

constexpr char kNegatedRing[] = R"(HloModule m, num_partitions=2

ENTRY %e (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  %cps = (f32[8]{0}, f32[8]{0}) collective-permute-start(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %cpd = f32[8]{0} collective-permute-done(%cps)
  ROOT %n = f32[8]{0} negate(%cpd)
}
)";

// The returned allocation also holds the destination, but what the program
// returns is another buffer reusing it (the negate): not the destination.
TEST(DestinationsOfTest, AnotherValueReusingTheAllocationIsNotReturned) {
  std::vector<core::DestinationBuffer> destinations =
      Destinations(kNegatedRing, R"(BufferAssignment:
allocation 0: size 32, output shape is |f32[8]|, maybe-live-out:
 value: <2 cps{1} @0> (size=32,offset=0): f32[8]{0}
 value: <4 n @0> (size=32,offset=0): f32[8]{0}
allocation 1: size 32, parameter 0, shape |f32[8]| at ShapeIndex {}:
 value: <0 p @0> (size=32,offset=0): f32[8]{0}
allocation 2: size 16, preallocated-temp:
 value: <1 cps{} @0> (size=16,offset=0): (f32[8]{0}, f32[8]{0})
)",
                   "cps");
  ASSERT_EQ(destinations.size(), 1);
  EXPECT_EQ(destinations[0].allocation, 0);
  EXPECT_EQ(destinations[0].parameter, -1);
  EXPECT_FALSE(destinations[0].returned);
}

// Nothing known: a permute the dump does not place, and a synchronous one.
TEST(DestinationsOfTest, EmptyWhereNothingIsKnown) {
  EXPECT_TRUE(Destinations(kNegatedRing, "BufferAssignment:\n", "cps").empty());
  EXPECT_TRUE(Destinations(R"(HloModule m, num_partitions=2

ENTRY %e (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %cp = f32[8]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}
}
)",
                           R"(BufferAssignment:
allocation 0: size 32, maybe-live-out:
 value: <1 cp @0> (size=32,offset=0): f32[8]{0}
)",
                           "cp")
                  .empty());
}

// A combined permute's destination is a tuple: each leaf is a destination,
// the tuple itself none.
TEST(DestinationsOfTest, CombinedPermuteHasADestinationPerOperand) {
  std::vector<core::DestinationBuffer> destinations =
      Destinations(R"(HloModule m, num_partitions=2

ENTRY %e (k: f32[8], v: f32[4]) -> (f32[8], f32[4]) {
  %k = f32[8]{0} parameter(0)
  %v = f32[4]{0} parameter(1)
  %cps = ((f32[8]{0}, f32[4]{0}), (f32[8]{0}, f32[4]{0})) collective-permute-start(%k, %v), channel_id=1, source_target_pairs={{0,1},{1,0}}
  ROOT %cpd = (f32[8]{0}, f32[4]{0}) collective-permute-done(%cps)
}
)",
                   R"(BufferAssignment:
allocation 0: size 32, maybe-live-out:
 value: <3 cps{1,0} @0> (size=32,offset=0): f32[8]{0}
allocation 1: size 16, maybe-live-out:
 value: <4 cps{1,1} @0> (size=16,offset=0): f32[4]{0}
allocation 2: size 16, preallocated-temp:
 value: <5 cps{1} @0> (size=16,offset=0): (f32[8]{0}, f32[4]{0})
 value: <6 cps{} @0> (size=16,offset=0): ((f32[8]{0}, f32[4]{0}), (f32[8]{0}, f32[4]{0}))
)",
                   "cps");
  ASSERT_EQ(destinations.size(), 2);
  EXPECT_EQ(destinations[0].allocation, 0);
  EXPECT_EQ(destinations[1].allocation, 1);
  // The done, returned, hands both on.
  EXPECT_TRUE(destinations[0].returned);
  EXPECT_TRUE(destinations[1].returned);
}

// The permute inside a loop whose result the entry returns, its elements
// through get-tuple-elements of the loop: the destination's allocation holds
// the loop's returned element, so it is returned.
constexpr char kLoopRing[] = R"(HloModule m, num_partitions=2

%cond (c: (s32[], f32[8])) -> pred[] {
  %c = (s32[], f32[8]{0}) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %limit = s32[] constant(4)
  ROOT %lt = pred[] compare(%ci, %limit), direction=LT
}

%body (b: (s32[], f32[8])) -> (s32[], f32[8]) {
  %b = (s32[], f32[8]{0}) parameter(0)
  %bi = s32[] get-tuple-element(%b), index=0
  %x = f32[8]{0} get-tuple-element(%b), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%bi, %one)
  %cps = (f32[8]{0}, f32[8]{0}) collective-permute-start(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %cpd = f32[8]{0} collective-permute-done(%cps)
  ROOT %r = (s32[], f32[8]{0}) tuple(%next, %cpd)
}

ENTRY %e (p: f32[8]) -> (s32[], f32[8]) {
  %p = f32[8]{0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]{0}) tuple(%zero, %p)
  %w = (s32[], f32[8]{0}) while(%init), condition=%cond, body=%body
  %w0 = s32[] get-tuple-element(%w), index=0
  %w1 = f32[8]{0} get-tuple-element(%w), index=1
  ROOT %out = (s32[], f32[8]{0}) tuple(%w0, %w1)
}
)";

// The loop's dump, in the form XLA writes (phi values of the while).
constexpr char kLoopDump[] = R"(BufferAssignment:
allocation 0: size 32, maybe-live-out:
 value: <3 cps{1} @0> (size=32,offset=0): f32[8]{0}
 value: <9 w{1} (phi) @0> (size=32,offset=0): f32[8]{0}
allocation 1: size 32, parameter 0, shape |f32[8]| at ShapeIndex {}:
 value: <0 p @0> (size=32,offset=0): f32[8]{0}
allocation 2: size 4, maybe-live-out:
 value: <8 w{0} (phi) @0> (size=4,offset=0): s32[]
allocation 3: size 16, preallocated-temp:
 value: <7 w{} (phi) @0> (size=16,offset=0): (s32[], f32[8]{0})
 value: <4 cps{} @0> (size=16,offset=0): (f32[8]{0}, f32[8]{0})
allocation 4: size 16, output shape is |(s32[], f32[8])|, maybe-live-out:
 value: <10 out{} @0> (size=16,offset=0): (s32[], f32[8]{0})
)";

TEST(DestinationsOfTest, ReturnedThroughALoop) {
  std::vector<core::DestinationBuffer> destinations =
      Destinations(kLoopRing, kLoopDump, "cps");
  ASSERT_EQ(destinations.size(), 1);
  EXPECT_EQ(destinations[0].allocation, 0);
  EXPECT_TRUE(destinations[0].returned);
}

// The same loop returned as the entry's root itself (as XLA's tuple
// simplifier leaves tuple(gte(w, 0), gte(w, 1))): every element of the loop
// is returned, the destination's (w{1}, allocation 0) among them, not only the
// loop's own tuple table (w{}, allocation 3). hlo_tools/model/runtime_rules.py
// holds the same rule.
TEST(DestinationsOfTest, ReturnedByALoopThatIsTheRoot) {
  std::string text = kLoopRing;
  const std::string tail =
      R"(  %w = (s32[], f32[8]{0}) while(%init), condition=%cond, body=%body
  %w0 = s32[] get-tuple-element(%w), index=0
  %w1 = f32[8]{0} get-tuple-element(%w), index=1
  ROOT %out = (s32[], f32[8]{0}) tuple(%w0, %w1)
)";
  const size_t at = text.find(tail);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, tail.size(),
               "  ROOT %w = (s32[], f32[8]{0}) while(%init), "
               "condition=%cond, body=%body\n");
  std::vector<core::DestinationBuffer> destinations =
      Destinations(text, kLoopDump, "cps");
  ASSERT_EQ(destinations.size(), 1);
  EXPECT_EQ(destinations[0].allocation, 0);
  EXPECT_TRUE(destinations[0].returned);
}

}  // namespace
}  // namespace buffer_assignment_test
}  // namespace nvshmem_opt
