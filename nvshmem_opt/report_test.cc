#include "nvshmem_opt/report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "nvshmem_opt/input.h"
#include "nvshmem_opt/pipeline.h"
#include "tool_layer/backends.h"
#include "tool_layer/table_text.h"
#include "tool_layer/topology_spec.h"

namespace nvshmem_opt {
namespace report_test {
namespace {

namespace core = ::xla::gpu::backend_selection;
using google::protobuf::Struct;
using google::protobuf::Value;

core::Topology Topology(const std::string& spec) {
  absl::StatusOr<core::Topology> topology = core::ParseTopology(
      spec, {core::Backend::kNccl, core::Backend::kNvshmem});
  EXPECT_TRUE(topology.ok()) << topology.status();
  return *topology;
}

// One decision as the pass records it, written out by hand: NVSHMEM chosen at
// 5 us over NCCL's 10, peer refused as not offered, inside two loops.
PassRun HandMadeRun() {
  Plan::OpRecord r;
  r.computation = "body";
  r.instruction = "cp";
  r.form = "sync";
  r.bytes = 4096;
  r.pairs = {{0, 1}, {1, 0}};
  r.buffers = 1;
  r.edges = {{0, 1, core::LinkClass::kIntraHostNvlink},
             {1, 0, core::LinkClass::kIntraHostNvlink}};
  r.loops = {{"inner", "body.outer", 8}, {"outer", "main", std::nullopt}};
  r.decision.backend = core::Backend::kNvshmem;
  r.decision.nccl_us = 10;
  r.decision.us[static_cast<int>(core::Backend::kNvshmem)] = 5;
  // A time the model could not give a finite number for: JSON has no NaN.
  r.decision.us[static_cast<int>(core::Backend::kSymmetric)] =
      std::numeric_limits<double>::quiet_NaN();
  core::ToolRefusal refusal;
  refusal.backend = core::Backend::kPeer;
  refusal.tool_rule = core::ToolRule::kNotOffered;
  refusal.offered = {core::Backend::kNccl, core::Backend::kNvshmem};
  r.decision.refused[static_cast<int>(core::Backend::kPeer)] = refusal;
  r.decision.edges_by_class = {0, 2, 0, 0};
  r.decision.reason = "NVSHMEM: the reason, in one line";
  r.current = core::Backend::kNccl;
  PassRun run;
  run.records = {r};
  run.changed = true;
  run.pass_us = 12.5;
  run.made["cp"] = {"collective-permute-start", "cp"};
  return run;
}

ReportHeader Header(const core::Topology* placed) {
  ReportHeader header;
  header.input = "in.hlo";
  header.topology = "1x1x2";
  header.topology_source = "flag";
  header.partition_to_device = {1, 0};
  header.mode = "rewrite";
  header.num_partitions = 2;
  header.num_replicas = 1;
  header.partitions_from = "the largest partition id its collectives name";
  header.processes = "processes of 1 GPU";
  header.placement = "the topology's map";
  header.spec = "1x1x2:map=1,0";
  header.collective_permute_mode = "COLLECTIVES_PRIVATE_MEMORY";
  header.placed = placed;
  header.other_host_shapes = {"1x2x1"};
  return header;
}

Struct Parsed(const std::string& json) {
  Struct parsed;
  const auto status =
      google::protobuf::util::JsonStringToMessage(json, &parsed);
  EXPECT_TRUE(status.ok()) << status << "\n" << json;
  return parsed;
}

const Value& Field(const Struct& s, const std::string& key) {
  static const Value* const kMissing = new Value;
  auto it = s.fields().find(key);
  if (it == s.fields().end()) {
    ADD_FAILURE() << "no field " << key;
    return *kMissing;
  }
  return it->second;
}

// The report's first decision (an empty one, and a failure, when none).
const Struct& FirstDecision(const Struct& report) {
  static const Struct* const kEmpty = new Struct;
  const auto& decisions = Field(report, "decisions").list_value();
  if (decisions.values_size() == 0) {
    ADD_FAILURE() << "no decisions";
    return *kEmpty;
  }
  return decisions.values(0).struct_value();
}

TEST(ReportJsonTest, HeaderFields) {
  const core::Topology placed = Topology("1x1x2:map=1,0");
  absl::StatusOr<std::string> json =
      ReportJson(Header(&placed), HandMadeRun(), nullptr);
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct report = Parsed(*json);
  EXPECT_EQ(Field(report, "input").string_value(), "in.hlo");
  EXPECT_EQ(Field(report, "topology").string_value(), "1x1x2");
  EXPECT_EQ(Field(report, "topology_source").string_value(), "flag");
  EXPECT_EQ(Field(report, "mode").string_value(), "rewrite");
  EXPECT_EQ(Field(report, "spec").string_value(), "1x1x2:map=1,0");
  EXPECT_EQ(Field(report, "placement").string_value(), "the topology's map");
  EXPECT_EQ(Field(report, "collective_permute_mode").string_value(),
            "COLLECTIVES_PRIVATE_MEMORY");
  EXPECT_EQ(Field(report, "module_config").string_value(), "");
  EXPECT_TRUE(Field(report, "changed").bool_value());
  EXPECT_EQ(Field(report, "pass_us").number_value(), 12.5);
  const auto& map = Field(report, "partition_to_device").list_value();
  ASSERT_EQ(map.values_size(), 2);
  EXPECT_EQ(map.values(0).number_value(), 1);
  EXPECT_EQ(map.values(1).number_value(), 0);
  const Struct& topology = Field(report, "placed").struct_value();
  EXPECT_EQ(Field(topology, "gpus_per_host").number_value(), 2);
  EXPECT_EQ(Field(topology, "hosts_per_slice").number_value(), 1);
  const auto& shapes = Field(report, "other_host_shapes").list_value();
  ASSERT_EQ(shapes.values_size(), 1);
  EXPECT_EQ(shapes.values(0).string_value(), "1x2x1");
  // Counts are JSON numbers, not the quoted int64 of protobuf's default.
  EXPECT_TRUE(absl::StrContains(*json, R"("num_partitions":2)")) << *json;
  EXPECT_TRUE(absl::StrContains(*json, R"("bytes":4096)")) << *json;
}

TEST(ReportJsonTest, DecisionFields) {
  absl::StatusOr<std::string> json =
      ReportJson(Header(nullptr), HandMadeRun(), nullptr);
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct report = Parsed(*json);
  // No placed topology given: none written.
  EXPECT_EQ(report.fields().count("placed"), 0);
  ASSERT_EQ(Field(report, "decisions").list_value().values_size(), 1);
  const Struct& d = FirstDecision(report);
  EXPECT_EQ(Field(d, "computation").string_value(), "body");
  EXPECT_EQ(Field(d, "instruction").string_value(), "cp");
  EXPECT_EQ(Field(d, "form").string_value(), "sync");
  EXPECT_EQ(Field(d, "bytes").number_value(), 4096);
  EXPECT_EQ(Field(d, "plan").string_value(), "nvshmem");
  EXPECT_EQ(Field(d, "backend").string_value(), "NVSHMEM");
  // NVSHMEM writes no collectives_mode.
  EXPECT_EQ(Field(d, "collectives_mode").kind_case(), Value::kNullValue);
  EXPECT_FALSE(Field(d, "skipped").bool_value());
  EXPECT_EQ(Field(d, "reason").string_value(),
            "NVSHMEM: the reason, in one line");
  EXPECT_EQ(Field(d, "current_plan").string_value(), "nccl");
  EXPECT_EQ(Field(d, "current_refused").kind_case(), Value::kNullValue);
  // Pairs and edges as lists.
  const auto& pairs = Field(d, "pairs").list_value();
  ASSERT_EQ(pairs.values_size(), 2);
  const auto& second = pairs.values(1).list_value();
  ASSERT_EQ(second.values_size(), 2);
  EXPECT_EQ(second.values(0).number_value(), 1);
  EXPECT_EQ(second.values(1).number_value(), 0);
  const auto& edges = Field(d, "edges").list_value();
  ASSERT_EQ(edges.values_size(), 2);
  const auto& edge = edges.values(0).list_value();
  ASSERT_EQ(edge.values_size(), 3);
  EXPECT_EQ(edge.values(2).string_value(), "nvlink");
  // Loops innermost first; an unknown trip count is null.
  const auto& loops = Field(d, "loops").list_value();
  ASSERT_EQ(loops.values_size(), 2);
  EXPECT_EQ(Field(loops.values(0).struct_value(), "while_loop").string_value(),
            "inner");
  EXPECT_EQ(Field(loops.values(0).struct_value(), "trip_count").number_value(),
            8);
  EXPECT_EQ(Field(loops.values(1).struct_value(), "trip_count").kind_case(),
            Value::kNullValue);
  // The async pair the rewrite made.
  const auto& made = Field(d, "new_instructions").list_value();
  ASSERT_EQ(made.values_size(), 2);
  EXPECT_EQ(made.values(0).string_value(), "collective-permute-start");
  // No upstream asked: no field.
  EXPECT_EQ(d.fields().count("upstream"), 0);
}

// Every backend of the core has an entry, null where refused, not offered or
// not finite; the refusals say why, by backend.
TEST(ReportJsonTest, ModelTimesAndRefusals) {
  absl::StatusOr<std::string> json =
      ReportJson(Header(nullptr), HandMadeRun(), nullptr);
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct report = Parsed(*json);
  const Struct& d = FirstDecision(report);
  const Struct& times = Field(d, "modeled_us").struct_value();
  EXPECT_EQ(times.fields_size(), 5);  // Four backends and the chosen one.
  EXPECT_EQ(Field(times, "nccl").number_value(), 10);
  EXPECT_EQ(Field(times, "nvshmem").number_value(), 5);
  EXPECT_EQ(Field(times, "chosen").number_value(), 5);
  EXPECT_EQ(Field(times, "peer").kind_case(), Value::kNullValue);
  EXPECT_EQ(Field(times, "symmetric").kind_case(), Value::kNullValue);
  const Struct& refused = Field(d, "refused").struct_value();
  ASSERT_EQ(refused.fields_size(), 1);
  EXPECT_FALSE(Field(refused, "peer").string_value().empty());
  const Struct& edges = Field(d, "edges_by_class").struct_value();
  EXPECT_EQ(edges.fields_size(), 4);
  EXPECT_EQ(Field(edges, "nvlink").number_value(), 2);
  EXPECT_EQ(Field(edges, "network").number_value(), 0);
}

TEST(ReportJsonTest, UpstreamBesideOurs) {
  const std::map<std::string, std::string> upstream = {{"cp", "NVSHMEM"}};
  absl::StatusOr<std::string> json =
      ReportJson(Header(nullptr), HandMadeRun(), &upstream);
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct report = Parsed(*json);
  EXPECT_EQ(Field(FirstDecision(report), "upstream").string_value(), "NVSHMEM");

  // Asked, but upstream named no such permute: null.
  const std::map<std::string, std::string> other = {{"other", "DEFAULT"}};
  json = ReportJson(Header(nullptr), HandMadeRun(), &other);
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct unnamed = Parsed(*json);
  EXPECT_EQ(Field(FirstDecision(unnamed), "upstream").kind_case(),
            Value::kNullValue);
}

// A run of the real pass, reported: the fields the pass filled in.
TEST(ReportJsonTest, ReportOfARealRun) {
  absl::StatusOr<LoadedModule> input =
      LoadModule("in.hlo", R"(HloModule ring, num_partitions=4

ENTRY %e (p: bf16[2048]) -> bf16[2048] {
  %p = bf16[2048]{0} parameter(0)
  ROOT %cp = bf16[2048]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}
)",
                 {});
  ASSERT_TRUE(input.ok()) << input.status();
  const core::Topology topology = Topology("1x2x2");
  absl::StatusOr<PassRun> run =
      RunPass(DriverPassOptions(topology, 0, core::DefaultToolCostTable(),
                                "explain", false),
              input->module.get(), [](const char*, int) {});
  ASSERT_TRUE(run.ok()) << run.status();
  absl::StatusOr<std::string> json =
      ReportJson(Header(&topology), *run, nullptr);
  ASSERT_TRUE(json.ok()) << json.status();
  const Struct report = Parsed(*json);
  const Struct& d = FirstDecision(report);
  EXPECT_EQ(Field(d, "instruction").string_value(), "cp");
  EXPECT_EQ(Field(d, "bytes").number_value(), 4096);  // 2048 bf16.
  EXPECT_EQ(Field(d, "pairs").list_value().values_size(), 4);
  // Hosts of 2: 1->2 and 3->0 cross the network, 0->1 and 2->3 do not.
  const Struct& edges = Field(d, "edges_by_class").struct_value();
  EXPECT_EQ(Field(edges, "network").number_value(), 2);
  EXPECT_EQ(Field(edges, "nvlink").number_value(), 2);
  // NVSHMEM cannot leave a host: refused, with a reason.
  EXPECT_EQ(Field(d, "plan").string_value(), "nccl");
  EXPECT_FALSE(Field(Field(d, "refused").struct_value(), "nvshmem")
                   .string_value()
                   .empty());
  EXPECT_EQ(Field(Field(d, "modeled_us").struct_value(), "nvshmem").kind_case(),
            Value::kNullValue);
}

TEST(ExplainTextTest, NothingToDecide) {
  EXPECT_EQ(ExplainText(PassRun(), nullptr),
            "no collective-permutes, nothing for the pass to decide\n");
}

TEST(ExplainTextTest, OneLinePerDecisionAndItsReason) {
  EXPECT_EQ(ExplainText(HandMadeRun(), nullptr),
            "body/cp (sync, 4096 bytes, 2 pairs): nvshmem\n"
            "    NVSHMEM: the reason, in one line\n");
  const std::map<std::string, std::string> upstream = {{"cp", "DEFAULT"}};
  EXPECT_EQ(ExplainText(HandMadeRun(), &upstream),
            "body/cp (sync, 4096 bytes, 2 pairs): nvshmem [upstream: DEFAULT]\n"
            "    NVSHMEM: the reason, in one line\n");
}

}  // namespace
}  // namespace report_test
}  // namespace nvshmem_opt
