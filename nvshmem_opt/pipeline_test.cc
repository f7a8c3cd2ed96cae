#include "nvshmem_opt/pipeline.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nvshmem_opt/input.h"
#include "tool_layer/backends.h"
#include "tool_layer/table_text.h"
#include "tool_layer/topology_spec.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/ir/hlo_opcode.h"
#include "xla/hlo/parser/hlo_parser.h"
#include "xla/service/gpu/backend_configs.pb.h"

namespace nvshmem_opt {
namespace pipeline_test {
namespace {

namespace core = ::xla::gpu::backend_selection;

std::string ReadWhole(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

// NVSHMEM beats NCCL inside an NVLink domain at every size (the fixture
// table): the tests check what the pipeline does with a decision, not the
// default table's calibration.
core::ToolCostTable FastNvshmemTable() {
  absl::StatusOr<core::ToolCostTable> table = core::ParseToolCostTable(
      ReadWhole(absl::StrCat(NVSHMEM_FIXTURES_DIR, "/fast_nvshmem.cost")),
      "fast_nvshmem.cost");
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

// A ring over 8 partitions, written with a comment and spacing of its own
// that XLA's printer would not keep.
constexpr char kRing8[] = R"(HloModule ring, num_partitions=8

ENTRY %e (p: f32[1024]) -> f32[1024] {
  // The ring's input.
  %p = f32[1024]{0}   parameter(0)
  %cp = f32[1024]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}
  ROOT %n = f32[1024]{0} negate(%cp)
}
)";

LoadedModule Load(const std::string& text) {
  absl::StatusOr<LoadedModule> loaded = LoadModule("in.hlo", text, {});
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? *std::move(loaded) : LoadedModule();
}

// Stages as the driver's hook sees them, with their exit codes.
struct Stages {
  std::vector<std::pair<std::string, int>> seen;
  StageHook Hook() {
    return
        [this](const char* stage, int code) { seen.emplace_back(stage, code); };
  }
};

TEST(DriverPassOptionsTest, EachMode) {
  const core::ToolCostTable table = core::DefaultToolCostTable();
  Plan::Options rewrite =
      DriverPassOptions(Topology(kOneHost), 0, table, "rewrite", false);
  EXPECT_FALSE(rewrite.decide_only);
  EXPECT_FALSE(rewrite.annotate);
  EXPECT_TRUE(rewrite.write_backend != nullptr);
  EXPECT_TRUE(rewrite.read_backend != nullptr);
  ASSERT_TRUE(rewrite.topology.has_value());
  EXPECT_EQ(rewrite.topology->num_devices(), 8);

  Plan::Options annotate =
      DriverPassOptions(std::nullopt, 4, table, "annotate", false);
  EXPECT_TRUE(annotate.decide_only);
  EXPECT_TRUE(annotate.annotate);
  EXPECT_EQ(annotate.devices_per_host, 4);
  EXPECT_FALSE(annotate.topology.has_value());

  Plan::Options explain =
      DriverPassOptions(std::nullopt, 0, table, "explain", false);
  EXPECT_TRUE(explain.decide_only);
  EXPECT_FALSE(explain.annotate);

  // --annotate with rewrite: both.
  Plan::Options both =
      DriverPassOptions(std::nullopt, 0, table, "rewrite", true);
  EXPECT_FALSE(both.decide_only);
  EXPECT_TRUE(both.annotate);
}

// Rewrite: the pass writes NVSHMEM, AsyncCollectiveCreator makes the permute a
// start and a done that keeps its name, and the result verifies.
TEST(RunPassTest, RewriteMakesTheDecidedPermuteAsync) {
  LoadedModule input = Load(kRing8);
  ASSERT_NE(input.module, nullptr);
  const Plan::Options options = DriverPassOptions(
      Topology(kOneHost), 0, FastNvshmemTable(), "rewrite", false);
  Stages stages;
  absl::StatusOr<PassRun> run =
      RunPass(options, input.module.get(), stages.Hook());
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(stages.seen, (std::vector<std::pair<std::string, int>>{
                             {"running the pass", 1},
                             {"making the permutes async", 1},
                             {"verifying the pass's output", 1}}));
  EXPECT_TRUE(run->changed);
  ASSERT_EQ(run->records.size(), 1);
  EXPECT_EQ(run->records[0].instruction, "cp");
  EXPECT_EQ(run->records[0].decision.backend, core::Backend::kNvshmem);

  const xla::HloInstruction* done =
      input.module->entry_computation()->root_instruction()->operand(0);
  ASSERT_EQ(done->opcode(), xla::HloOpcode::kCollectivePermuteDone);
  EXPECT_EQ(done->name(), "cp");
  const xla::HloInstruction* start = done->operand(0);
  ASSERT_EQ(start->opcode(), xla::HloOpcode::kCollectivePermuteStart);
  ASSERT_EQ(run->made.count("cp"), 1);
  EXPECT_EQ(run->made.at("cp"),
            (std::vector<std::string>{std::string(start->name()), "cp"}));
  auto config = start->backend_config<xla::gpu::GpuBackendConfig>();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->collective_backend_config().backend(),
            xla::gpu::CollectiveBackendConfig::NVSHMEM);
}

// NCCL decided (the default table, for a small message): still made async,
// with the DEFAULT backend written.
TEST(RunPassTest, NcclIsWrittenToo) {
  LoadedModule input = Load(kRing8);
  ASSERT_NE(input.module, nullptr);
  Stages stages;
  absl::StatusOr<PassRun> run =
      RunPass(DriverPassOptions(Topology("1x2x4"), 0,
                                core::DefaultToolCostTable(), "rewrite", false),
              input.module.get(), stages.Hook());
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->records.size(), 1);
  EXPECT_EQ(run->records[0].decision.backend, core::Backend::kNccl);
  const xla::HloInstruction* start = input.module->entry_computation()
                                         ->root_instruction()
                                         ->operand(0)
                                         ->operand(0);
  ASSERT_EQ(start->opcode(), xla::HloOpcode::kCollectivePermuteStart);
  EXPECT_EQ(start->raw_backend_config_string(),
            R"({"collective_backend_config":{"backend":"DEFAULT"}})");
}

// Explain decides on the module and leaves it as it was.
TEST(RunPassTest, ExplainLeavesTheModule) {
  LoadedModule input = Load(kRing8);
  ASSERT_NE(input.module, nullptr);
  const std::string before = input.module->ToString();
  Stages stages;
  absl::StatusOr<PassRun> run =
      RunPass(DriverPassOptions(Topology(kOneHost), 0, FastNvshmemTable(),
                                "explain", false),
              input.module.get(), stages.Hook());
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(input.module->ToString(), before);
  EXPECT_FALSE(run->changed);
  EXPECT_TRUE(run->made.empty());
  ASSERT_EQ(run->records.size(), 1);
  EXPECT_EQ(run->records[0].decision.backend, core::Backend::kNvshmem);
  // No async step when only deciding.
  EXPECT_EQ(stages.seen.size(), 2);
}

// A user's mark that names no mode fails, as the patched XLA's compile does;
// the message is one line and InvalidArgument (the input's fault).
TEST(RunPassTest, BadUserMarkIsTheInputsFault) {
  std::string text = kRing8;
  const std::string pairs =
      "source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}";
  text.replace(
      text.find(pairs), pairs.size(),
      pairs + R"(, frontend_attributes={_xla_collectives_mode="bogus"})");
  LoadedModule input = Load(text);
  ASSERT_NE(input.module, nullptr);
  Stages stages;
  absl::StatusOr<PassRun> run =
      RunPass(DriverPassOptions(Topology(kOneHost), 0, FastNvshmemTable(),
                                "rewrite", false),
              input.module.get(), stages.Hook());
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(run.status().message(), "%cp: "))
      << run.status();
  EXPECT_TRUE(absl::StrContains(run.status().message(), "bogus"))
      << run.status();
  EXPECT_FALSE(absl::StrContains(run.status().message(), "\n"));
}

// A topology too small for the module's devices is the input's fault.
TEST(RunPassTest, TopologyTooSmall) {
  LoadedModule input = Load(kRing8);
  ASSERT_NE(input.module, nullptr);
  Stages stages;
  absl::StatusOr<PassRun> run =
      RunPass(DriverPassOptions(Topology("1x1x4"), 0, FastNvshmemTable(),
                                "rewrite", false),
              input.module.get(), stages.Hook());
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument)
      << run.status();
}

// The output is the input's own text with only the permute's statement
// replaced: the comment and the spacing stay, and XLA reads it back.
TEST(OutputTextTest, SplicesTheAsyncPairIntoTheInputsText) {
  LoadedModule input = Load(kRing8);
  ASSERT_NE(input.module, nullptr);
  const Plan::Options options = DriverPassOptions(
      Topology(kOneHost), 0, FastNvshmemTable(), "rewrite", false);
  Stages stages;
  absl::StatusOr<PassRun> run =
      RunPass(options, input.module.get(), stages.Hook());
  ASSERT_TRUE(run.ok()) << run.status();
  absl::StatusOr<std::string> output =
      OutputText(input, *input.module, *run, options);
  ASSERT_TRUE(output.ok()) << output.status();

  std::vector<std::string> in = absl::StrSplit(kRing8, '\n');
  std::vector<std::string> out = absl::StrSplit(*output, '\n');
  ASSERT_EQ(out.size(), in.size() + 1);
  // Lines 1-5 as read (the comment, the odd spacing), the permute's line
  // replaced by two, the rest as read.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], in[i]) << i;
  EXPECT_TRUE(absl::StartsWith(out[5], "  %collective-permute-start"))
      << out[5];
  EXPECT_TRUE(absl::StrContains(
      out[5],
      R"(backend_config={"collective_backend_config":{"backend":"NVSHMEM"}})"))
      << out[5];
  EXPECT_TRUE(
      absl::StartsWith(out[6],
                       "  %cp = f32[1024]{0} "
                       "collective-permute-done(%collective-permute-start)"))
      << out[6];
  for (size_t i = 6; i < in.size(); ++i) EXPECT_EQ(out[i + 1], in[i]) << i;

  auto again = xla::ParseAndReturnUnverifiedModule(*output);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(Verify(again->get()).ok());
}

// Annotate: the statement keeps its place and gains the decision's
// attributes; still sync, no backend written.
TEST(OutputTextTest, AnnotatePatchesTheStatement) {
  LoadedModule input = Load(kRing8);
  ASSERT_NE(input.module, nullptr);
  const Plan::Options options = DriverPassOptions(
      Topology(kOneHost), 0, FastNvshmemTable(), "annotate", false);
  Stages stages;
  absl::StatusOr<PassRun> run =
      RunPass(options, input.module.get(), stages.Hook());
  ASSERT_TRUE(run.ok()) << run.status();
  absl::StatusOr<std::string> output =
      OutputText(input, *input.module, *run, options);
  ASSERT_TRUE(output.ok()) << output.status();
  std::vector<std::string> in = absl::StrSplit(kRing8, '\n');
  std::vector<std::string> out = absl::StrSplit(*output, '\n');
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (i != 5) EXPECT_EQ(out[i], in[i]) << i;
  }
  EXPECT_TRUE(absl::StartsWith(out[5], in[5] + ", frontend_attributes={"))
      << out[5];
  EXPECT_TRUE(absl::StrContains(out[5], R"(_nvshmem_plan="nvshmem")"))
      << out[5];
  EXPECT_FALSE(absl::StrContains(*output, "collective-permute-start"));
  EXPECT_FALSE(absl::StrContains(*output, "backend_config"));
}

// jaxlib 0.10's mesh replica groups, which the wheel parses only rewritten,
// reach the output as the input wrote them.
TEST(OutputTextTest, KeepsTheInputsOwnForms) {
  const std::string text = R"(HloModule m, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %e (p: f32[1024], q: f32[]) -> (f32[1024], f32[]) {
  %p = f32[1024]{0} parameter(0)
  %q = f32[] parameter(1)
  %ar = f32[] all-reduce(%q), channel_id=2, replica_groups=mesh['cp'=4,'tp'=2] {'cp'}, use_global_device_ids=true, to_apply=%add
  %cp = f32[1024]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}
  ROOT %t = (f32[1024]{0}, f32[]) tuple(%cp, %ar)
}
)";
  LoadedModule input = Load(text);
  ASSERT_NE(input.module, nullptr);
  const Plan::Options options = DriverPassOptions(
      Topology(kOneHost), 0, FastNvshmemTable(), "rewrite", false);
  Stages stages;
  absl::StatusOr<PassRun> run =
      RunPass(options, input.module.get(), stages.Hook());
  ASSERT_TRUE(run.ok()) << run.status();
  absl::StatusOr<std::string> output =
      OutputText(input, *input.module, *run, options);
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_TRUE(
      absl::StrContains(*output, "replica_groups=mesh['cp'=4,'tp'=2] {'cp'}"));
  EXPECT_TRUE(absl::StrContains(*output, "collective-permute-done"));
}

// jaxlib 0.11.2's compact tuple operands: the spliced statements name them
// as the input does (%t#1), not as the wheel's parse (%t__cgte_1).
TEST(OutputTextTest, CompactTupleOperandsWrittenBack) {
  const std::string text = R"(HloModule m, num_partitions=8

ENTRY %e (t: (s32[], f32[1024])) -> f32[1024] {
  %t = (s32[], f32[1024]{0}) parameter(0)
  %cp = f32[1024]{0} collective-permute(%t#1), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}
  ROOT %n = f32[1024]{0} negate(%cp)
}
)";
  LoadedModule input = Load(text);
  ASSERT_NE(input.module, nullptr);
  const Plan::Options options = DriverPassOptions(
      Topology(kOneHost), 0, FastNvshmemTable(), "rewrite", false);
  Stages stages;
  absl::StatusOr<PassRun> run =
      RunPass(options, input.module.get(), stages.Hook());
  ASSERT_TRUE(run.ok()) << run.status();
  absl::StatusOr<std::string> output =
      OutputText(input, *input.module, *run, options);
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_TRUE(absl::StrContains(*output, "collective-permute-start(%t#1)"))
      << *output;
  EXPECT_FALSE(absl::StrContains(*output, "__cgte_")) << *output;
}

// A proto has no text of its own: the output is XLA's printing of the module.
TEST(OutputTextTest, ProtoInputIsPrinted) {
  LoadedModule text_input = Load(kRing8);
  ASSERT_NE(text_input.module, nullptr);
  absl::StatusOr<LoadedModule> input =
      LoadModule("in.pb", text_input.module->ToProto().SerializeAsString(), {});
  ASSERT_TRUE(input.ok()) << input.status();
  ASSERT_TRUE(input->text.empty());
  const Plan::Options options = DriverPassOptions(
      Topology(kOneHost), 0, FastNvshmemTable(), "rewrite", false);
  Stages stages;
  absl::StatusOr<PassRun> run =
      RunPass(options, input->module.get(), stages.Hook());
  ASSERT_TRUE(run.ok()) << run.status();
  absl::StatusOr<std::string> output =
      OutputText(*input, *input->module, *run, options);
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_TRUE(absl::StartsWith(*output, "HloModule ring")) << *output;
  EXPECT_FALSE(absl::StrContains(*output, "// The ring's input."));
  auto again = xla::ParseAndReturnUnverifiedModule(*output);
  ASSERT_TRUE(again.ok()) << again.status();
  const xla::HloInstruction* root =
      (*again)->entry_computation()->root_instruction();
  EXPECT_EQ(root->operand(0)->opcode(), xla::HloOpcode::kCollectivePermuteDone);
}

// Upstream's CollectiveBackendAssigner at the pin: NVSHMEM on every permute
// when each process sees one GPU, DEFAULT otherwise; a backend already in the
// input is not its answer.
TEST(UpstreamDecisionsTest, AsUpstreamDecides) {
  LoadedModule input = Load(kRing8);
  ASSERT_NE(input.module, nullptr);
  absl::StatusOr<std::map<std::string, std::string>> one_gpu =
      UpstreamDecisions(*input.module, Topology("1x1x8:gpus_per_process=1"),
                        16 << 20);
  ASSERT_TRUE(one_gpu.ok()) << one_gpu.status();
  EXPECT_EQ(*one_gpu, (std::map<std::string, std::string>{{"cp", "NVSHMEM"}}));

  // The input already says NVSHMEM, with fields the wheel's proto lacks.
  std::string text = kRing8;
  const std::string pairs =
      "source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}";
  text.replace(
      text.find(pairs), pairs.size(),
      pairs +
          R"(, backend_config={"collective_backend_config":{"backend":"NVSHMEM","collectives_mode":"COLLECTIVES_MODE_INVALID"}})");
  LoadedModule marked = Load(text);
  ASSERT_NE(marked.module, nullptr);
  absl::StatusOr<std::map<std::string, std::string>> four_gpus =
      UpstreamDecisions(*marked.module, Topology("1x2x4:gpus_per_process=4"),
                        16 << 20);
  ASSERT_TRUE(four_gpus.ok()) << four_gpus.status();
  EXPECT_EQ(*four_gpus,
            (std::map<std::string, std::string>{{"cp", "DEFAULT"}}));
  // On a copy: the module keeps its own config.
  EXPECT_TRUE(
      absl::StrContains(marked.module->ToString(), "COLLECTIVES_MODE_INVALID"));
}

}  // namespace
}  // namespace pipeline_test
}  // namespace nvshmem_opt
