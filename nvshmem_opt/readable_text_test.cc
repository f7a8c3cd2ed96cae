#include "nvshmem_opt/readable_text.h"

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/ir/hlo_opcode.h"
#include "xla/hlo/parser/hlo_parser.h"
#include "xla/service/hlo_verifier.h"

namespace nvshmem_opt {
namespace readable_text_test {
namespace {

std::string ReadFixture(const std::string& name) {
  std::ifstream file(absl::StrCat(NVSHMEM_FIXTURES_DIR, "/", name));
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

// Text in the wheel's own forms comes back as it is.
TEST(ReadableTextTest, TextInTheWheelsFormIsUnchanged) {
  const std::string text = R"(HloModule m, num_partitions=2

ENTRY %e (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %cp = f32[8]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}
}
)";
  int rewritten = -1;
  EXPECT_EQ(ReadableText(text, &rewritten), text);
  EXPECT_EQ(rewritten, 0);
}

// jaxlib 0.11 prints a one-operand collective-permute-start as ((T), T); the
// wheel reads (T, T). A start of several operands is a real tuple: kept.
TEST(ReadableTextTest, OneOperandPermuteStartShape) {
  const std::string one =
      "  %cps = ((f32[8]{0}), f32[8]{0}) collective-permute-start(%p), "
      "channel_id=1, source_target_pairs={{0,1},{1,0}}\n";
  int rewritten = 0;
  EXPECT_EQ(ReadableText(one, &rewritten),
            "  %cps = (f32[8]{0}, f32[8]{0}) collective-permute-start(%p), "
            "channel_id=1, source_target_pairs={{0,1},{1,0}}\n");
  EXPECT_EQ(rewritten, 1);

  const std::string two =
      "  %cps = ((f32[8]{0}, f32[4]{0}), (f32[8]{0}, f32[4]{0})) "
      "collective-permute-start(%p, %q), channel_id=1, "
      "source_target_pairs={{0,1},{1,0}}\n";
  EXPECT_EQ(ReadableText(two, &rewritten), two);
  EXPECT_EQ(rewritten, 0);
}

// jaxlib 0.11.2's %t#K operands become get-tuple-elements defined on the line
// of their first use, so every line keeps its number.
TEST(ReadableTextTest, CompactTupleElementsOnTheirOwnLine) {
  const std::string text = R"(HloModule m

ENTRY %e (p: (f32[4], s32[])) -> f32[4] {
  %p = (f32[4]{0}, s32[]) parameter(0)
  %n = f32[4]{0} negate(%p#0)
  ROOT %a = f32[4]{0} add(%n, %p#0)
}
)";
  int rewritten = 0;
  const std::string readable = ReadableText(text, &rewritten);
  // One definition, at its first use; the second use names it.
  EXPECT_EQ(readable, R"(HloModule m

ENTRY %e (p: (f32[4], s32[])) -> f32[4] {
  %p = (f32[4]{0}, s32[]) parameter(0)
  %p__cgte_0 = f32[4]{0} get-tuple-element(%p), index=0 %n = f32[4]{0} negate(%p__cgte_0)
  ROOT %a = f32[4]{0} add(%n, %p__cgte_0)
}
)");
  EXPECT_EQ(rewritten, 1);

  // What the rewrite is for: the wheel's parser reads it, as the tuple's
  // element 0.
  auto module = xla::ParseAndReturnUnverifiedModule(readable);
  ASSERT_TRUE(module.ok()) << module.status();
  const xla::HloInstruction* negate =
      (*module)->entry_computation()->root_instruction()->operand(0);
  ASSERT_EQ(negate->operand(0)->opcode(), xla::HloOpcode::kGetTupleElement);
  EXPECT_EQ(negate->operand(0)->tuple_index(), 0);
}

// %t#1#0: element 0 of element 1, each level defined once.
TEST(ReadableTextTest, NestedCompactTupleElements) {
  const std::string text = R"(HloModule m

ENTRY %e (p: ((f32[2], s32[]), f32[4])) -> f32[2] {
  %p = ((f32[2]{0}, s32[]), f32[4]{0}) parameter(0)
  ROOT %n = f32[2]{0} negate(%p#0#0)
}
)";
  int rewritten = 0;
  const std::string readable = ReadableText(text, &rewritten);
  EXPECT_EQ(rewritten, 2);
  auto module = xla::ParseAndReturnUnverifiedModule(readable);
  ASSERT_TRUE(module.ok()) << module.status() << "\n" << readable;
  const xla::HloInstruction* element =
      (*module)->entry_computation()->root_instruction()->operand(0);
  EXPECT_EQ(element->shape().ToString(), "f32[2]");
  EXPECT_EQ(element->operand(0)->shape().ToString(), "(f32[2], s32[])");
}

// Definitions are per computation: a second computation using the same
// element defines its own.
TEST(ReadableTextTest, CompactTupleElementsPerComputation) {
  const std::string text = R"(HloModule m

%f (q: (f32[4], s32[])) -> f32[4] {
  %q = (f32[4]{0}, s32[]) parameter(0)
  ROOT %n = f32[4]{0} negate(%q#0)
}

ENTRY %e (q: (f32[4], s32[])) -> f32[4] {
  %q = (f32[4]{0}, s32[]) parameter(0)
  ROOT %c = f32[4]{0} call(%q), to_apply=%f
  %u = f32[4]{0} negate(%q#0)
}
)";
  int rewritten = 0;
  const std::string readable = ReadableText(text, &rewritten);
  EXPECT_EQ(rewritten, 2);
  EXPECT_EQ(absl::c_count(readable, '\n'), absl::c_count(text, '\n'));
  auto module = xla::ParseAndReturnUnverifiedModule(readable);
  EXPECT_TRUE(module.ok()) << module.status() << "\n" << readable;
}

// Real jaxlib 0.11.2 output (a ppermute loop, its start of one operand as
// ((T), T)): the wheel's parser reads the shape as dumped, but its verifier
// refuses the start; the readable form, on the input's lines, verifies.
TEST(ReadableTextTest, MakesJax0112HloValidForTheWheel) {
  const std::string text =
      ReadFixture("jax0112/h200_jax0112_ppermute_loop.after_optimizations.hlo");
  ASSERT_FALSE(text.empty());
  auto as_dumped = xla::ParseAndReturnUnverifiedModule(text);
  EXPECT_FALSE(as_dumped.ok() &&
               xla::HloVerifier(/*layout_sensitive=*/false,
                                /*allow_mixed_precision=*/true)
                   .Run(as_dumped->get())
                   .ok());
  int rewritten = 0;
  const std::string readable = ReadableText(text, &rewritten);
  EXPECT_EQ(rewritten, 1);
  EXPECT_EQ(absl::c_count(readable, '\n'), absl::c_count(text, '\n'));
  auto module = xla::ParseAndReturnUnverifiedModule(readable);
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<bool> verified =
      xla::HloVerifier(false, true).Run(module->get());
  EXPECT_TRUE(verified.ok()) << verified.status();
}

TEST(ReadableTextTest, UsesCompactTupleElements) {
  EXPECT_TRUE(UsesCompactTupleElements("negate(%p#0)"));
  EXPECT_FALSE(UsesCompactTupleElements("negate(%p)"));
  // A module whose own names hold the infix cannot be told apart on the way
  // back: left as it is.
  EXPECT_FALSE(UsesCompactTupleElements("%x__cgte_1 = f32[] negate(%p#0)"));
  int rewritten = 0;
  const std::string own = "  %x__cgte_1 = f32[] negate(%p#0)\n";
  EXPECT_EQ(ReadableText(own, &rewritten), own);
  EXPECT_EQ(rewritten, 0);
}

// The way back, for statements the pass printed.
TEST(ReadableTextTest, CompactTupleElementNames) {
  EXPECT_EQ(CompactTupleElementNames(
                "%s = f32[4]{0} collective-permute-start(%t__cgte_1__cgte_0)"),
            "%s = f32[4]{0} collective-permute-start(%t#1#0)");
  EXPECT_EQ(CompactTupleElementNames("%s = f32[] negate(%t)"),
            "%s = f32[] negate(%t)");
}

}  // namespace
}  // namespace readable_text_test
}  // namespace nvshmem_opt
