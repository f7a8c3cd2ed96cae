#include "nvshmem_opt/hlo_splice.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/ir/hlo_opcode.h"
#include "xla/hlo/parser/hlo_parser.h"

namespace nvshmem_opt {
namespace hlo_splice_test {
namespace {

// As XLA reads text, not as a line-based reader would: a comment holding a
// brace, a statement over two lines, a backend_config whose JSON strings hold
// brackets. (The raw strings' delimiter is "hlo": the JSON holds )".)
constexpr char kModule[] =
    R"hlo(HloModule m, num_partitions=2, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %e (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  // a comment with a brace }
  %cp = f32[8]{0} collective-permute(%p), channel_id=1,
      source_target_pairs={{0,1},{1,0}}, backend_config={"a":"b)","c":{"d":"}"}}
  ROOT %n = f32[8]{0} negate(%cp)
}
)hlo";

TEST(StatementLineTest, FindsEachStatementAsXlaReadsIt) {
  EXPECT_EQ(StatementLine(kModule, "add", "a"), 4);
  EXPECT_EQ(StatementLine(kModule, "add", "s"), 6);
  EXPECT_EQ(StatementLine(kModule, "e", "p"), 10);
  // The statement's first line, though it goes on over the next.
  EXPECT_EQ(StatementLine(kModule, "e", "cp"), 12);
  // After the JSON's ')' and '}' inside strings, the body still reads on.
  EXPECT_EQ(StatementLine(kModule, "e", "n"), 14);
}

TEST(StatementLineTest, ZeroWhenAbsent) {
  EXPECT_EQ(StatementLine(kModule, "e", "nope"), 0);
  // Names are per computation.
  EXPECT_EQ(StatementLine(kModule, "add", "p"), 0);
  EXPECT_EQ(StatementLine(kModule, "nope", "p"), 0);
}

// A frontend attribute's value that is a JSON dict is one token to XLA's
// lexer, whatever brackets its strings hold; so is a /* */ comment.
TEST(StatementLineTest, JsonDictInFrontendAttributes) {
  const std::string text = R"hlo(HloModule m

ENTRY %e (p: f32[]) -> f32[] {
  %p = f32[] parameter(0), frontend_attributes={_x={"k":"(["}} /* ( */
  %q = f32[] negate(%p)
  ROOT %r = f32[] negate(%q)
}
)hlo";
  EXPECT_EQ(StatementLine(text, "e", "q"), 5);
  EXPECT_EQ(StatementLine(text, "e", "r"), 6);
}

// A line that starts with a comma goes on the statement before it.
TEST(StatementLineTest, LeadingCommaContinuesTheStatement) {
  const std::string text = R"hlo(HloModule m

ENTRY %e (p: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  ROOT %n = f32[] negate(%p)
    , metadata={op_name="x"}
}
)hlo";
  EXPECT_EQ(StatementLine(text, "e", "n"), 5);
  EXPECT_EQ(AttributeValue("%n = f32[] negate(%p)\n    , "
                           "metadata={op_name=\"x\"}",
                           "metadata"),
            "{op_name=\"x\"}");
}

TEST(AttributeValueTest, ValuesOfOneStatement) {
  const std::string statement =
      R"hlo(%cp = f32[8]{0} collective-permute(%p), channel_id=1, )hlo"
      R"hlo(source_target_pairs={{0,1},{1,0}}, )hlo"
      R"hlo(backend_config={"a":"b)","c":{"d":"}"}})hlo";
  EXPECT_EQ(AttributeValue(statement, "channel_id"), "1");
  EXPECT_EQ(AttributeValue(statement, "source_target_pairs"), "{{0,1},{1,0}}");
  EXPECT_EQ(AttributeValue(statement, "backend_config"),
            R"hlo({"a":"b)","c":{"d":"}"}})hlo");
  EXPECT_EQ(AttributeValue(statement, "metadata"), "");
  // A key inside a value is not an attribute of the statement.
  EXPECT_EQ(AttributeValue(statement, "c"), "");
}

// The wheel's short mesh form holds commas that are not attributes'.
TEST(AttributeValueTest, ShortMeshFormIsOneValue) {
  EXPECT_EQ(AttributeValue("%ar = f32[] all-reduce(%x), "
                           "replica_groups=@mesh<a=4,b=2> {a}, to_apply=%add",
                           "replica_groups"),
            "@mesh<a=4,b=2> {a}");
}

TEST(SpliceStatementsTest, NoEditsIsTheTextItself) {
  absl::StatusOr<std::string> out = SpliceStatements(kModule, {});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, kModule);
}

// A sync permute replaced by its start and done (what the driver writes for
// an async rewrite): the statements take its place at its indentation, and
// every other byte is kept.
TEST(SpliceStatementsTest, ReplacesAStatementByTwo) {
  const std::vector<StatementEdit> edits = {
      {"e",
       "cp",
       {"%cps = (f32[8]{0}, f32[8]{0}) collective-permute-start(%p), "
        "channel_id=1, source_target_pairs={{0,1},{1,0}}",
        "%cp = f32[8]{0} collective-permute-done(%cps)"},
       {}}};
  absl::StatusOr<std::string> out = SpliceStatements(kModule, edits);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(
      *out,
      R"hlo(HloModule m, num_partitions=2, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %e (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  // a comment with a brace }
  %cps = (f32[8]{0}, f32[8]{0}) collective-permute-start(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %cp = f32[8]{0} collective-permute-done(%cps)
  ROOT %n = f32[8]{0} negate(%cp)
}
)hlo");
  // And XLA reads the result as the async pair.
  auto module = xla::ParseAndReturnUnverifiedModule(*out);
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_EQ(
      (*module)->entry_computation()->root_instruction()->operand(0)->opcode(),
      xla::HloOpcode::kCollectivePermuteDone);
}

// The last statement replacing a ROOT is the new ROOT.
TEST(SpliceStatementsTest, RootStaysOnTheLastStatement) {
  const std::vector<StatementEdit> edits = {
      {"e",
       "n",
       {"%m = f32[8]{0} negate(%cp)", "%n = f32[8]{0} negate(%m)"},
       {}}};
  absl::StatusOr<std::string> out = SpliceStatements(kModule, edits);
  ASSERT_TRUE(out.ok()) << out.status();
  auto module = xla::ParseAndReturnUnverifiedModule(*out);
  ASSERT_TRUE(module.ok()) << module.status();
  const xla::HloInstruction* root =
      (*module)->entry_computation()->root_instruction();
  EXPECT_EQ(root->name(), "n");
  EXPECT_EQ(root->operand(0)->name(), "m");
}

// Attribute edits: a present value is replaced, an absent key appended.
TEST(SpliceStatementsTest, PatchesAttributes) {
  const std::vector<StatementEdit> edits = {
      {"e",
       "cp",
       {},
       {{"backend_config", R"hlo({"x":1})hlo"},
        {"frontend_attributes", R"hlo({_k="v"})hlo"}}}};
  absl::StatusOr<std::string> out = SpliceStatements(kModule, edits);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(
      *out,
      R"hlo(HloModule m, num_partitions=2, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %e (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  // a comment with a brace }
  %cp = f32[8]{0} collective-permute(%p), channel_id=1,
      source_target_pairs={{0,1},{1,0}}, backend_config={"x":1}, frontend_attributes={_k="v"}
  ROOT %n = f32[8]{0} negate(%cp)
}
)hlo");
}

// Several edits, in any order, each at its own place.
TEST(SpliceStatementsTest, SeveralEdits) {
  const std::vector<StatementEdit> edits = {
      {"e", "n", {}, {{"metadata", R"hlo({op_name="n"})hlo"}}},
      {"add", "s", {}, {{"metadata", R"hlo({op_name="s"})hlo"}}},
  };
  absl::StatusOr<std::string> out = SpliceStatements(kModule, edits);
  ASSERT_TRUE(out.ok()) << out.status();
  auto module = xla::ParseAndReturnUnverifiedModule(*out);
  ASSERT_TRUE(module.ok()) << module.status();
  const xla::HloInstruction* root =
      (*module)->entry_computation()->root_instruction();
  EXPECT_EQ(root->metadata().op_name(), "n");
  const xla::HloComputation* add = nullptr;
  for (const xla::HloComputation* c : (*module)->computations()) {
    if (c->name() == "add") add = c;
  }
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->root_instruction()->metadata().op_name(), "s");
}

// An instruction the text does not hold: NotFound, so that the caller prints
// the module instead.
TEST(SpliceStatementsTest, MissingStatementIsNotFound) {
  absl::StatusOr<std::string> out =
      SpliceStatements(kModule, {{"e", "nope", {}, {{"metadata", "{}"}}}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(out.status().message(), "no statement for e/nope");
}

}  // namespace
}  // namespace hlo_splice_test
}  // namespace nvshmem_opt
