#include "nvshmem_opt/placement.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nvshmem_opt/flags.h"
#include "nvshmem_opt/module_config.h"
#include "nvshmem_opt/pipeline.h"
#include "tool_layer/backends.h"
#include "tool_layer/table_text.h"
#include "tool_layer/topology_spec.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/parser/hlo_parser.h"
#include "xla/service/computation_placer.h"

namespace nvshmem_opt {
namespace placement_test {
namespace {

namespace core = ::xla::gpu::backend_selection;

class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = ::testing::TempDir() + "placement_test.XXXXXX";
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    EXPECT_NE(mkdtemp(name.data()), nullptr);
    path_ = name.data();
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string Path(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}

std::string Fixture(const std::string& name) {
  return absl::StrCat(NVSHMEM_FIXTURES_DIR, "/", name);
}

std::string ReadWhole(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
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

// A ring of `partitions` partitions.
std::unique_ptr<xla::HloModule> Ring(int partitions) {
  std::string pairs;
  for (int i = 0; i < partitions; ++i) {
    absl::StrAppend(&pairs, i > 0 ? "," : "", "{", i, ",", (i + 1) % partitions,
                    "}");
  }
  return Parse(absl::StrCat("HloModule ring, num_partitions=", partitions,
                            R"(

ENTRY %e (p: f32[1024]) -> f32[1024] {
  %p = f32[1024]{0} parameter(0)
  ROOT %cp = f32[1024]{0} collective-permute(%p), channel_id=1, source_target_pairs={)",
                            pairs, "}\n}\n"));
}

core::Topology Topology(const std::string& spec) {
  absl::StatusOr<core::Topology> topology = core::ParseTopology(
      spec, {core::Backend::kNccl, core::Backend::kNvshmem});
  EXPECT_TRUE(topology.ok()) << topology.status();
  return *topology;
}

Flags FlagsFor(const std::string& input, const std::string& topology = "",
               int devices_per_host = 0) {
  Flags flags;
  flags.input = input;
  flags.topology = topology;
  flags.devices_per_host = devices_per_host;
  return flags;
}

class PlacementDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// Without the flag: hosts of 8 GPUs (one HGX node), which a smaller program
// uses part of; with it, hosts the program's devices must fill.
TEST(DevicesPerHostTest, DefaultAndFlag) {
  auto module = Ring(4);
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(DevicesPerHost(FlagsFor("in.hlo"), *module), 8);
  EXPECT_EQ(DevicesPerHost(FlagsFor("in.hlo", "", 2), *module), 2);
}

TEST_F(PlacementDeathTest, DevicesPerHostMustFillHosts) {
  auto module = Ring(8);
  ASSERT_NE(module, nullptr);
  EXPECT_EXIT(DevicesPerHost(FlagsFor("in.hlo", "", 3), *module),
              ::testing::ExitedWithCode(2),
              "in.hlo: its 8 devices \\(partitions x replicas\\) do not fill "
              "hosts of 3 GPUs \\(--devices-per-host\\)");
}

TEST(TopologySourceTest, FlagConfigOrDefault) {
  auto module = Ring(4);
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(TopologySource(FlagsFor("in.hlo", "1x1x4"), *module), "flag");
  EXPECT_EQ(TopologySource(FlagsFor("in.hlo"), *module), "default");
  module->mutable_config().set_static_device_assignment(
      xla::DeviceAssignment(1, 4));
  EXPECT_EQ(TopologySource(FlagsFor("in.hlo"), *module), "module config");
  EXPECT_EQ(TopologySource(FlagsFor("in.hlo", "1x1x4"), *module), "flag");
}

// The spec to decide on again states a process layout only where --topology
// did, so that the backend set's default applies again.
TEST(SpecToDecideAgainTest, ProcessLayoutOnlyWhereStated) {
  EXPECT_EQ(SpecToDecideAgain(FlagsFor("in.hlo", "1x2x4:gpus_per_process=4"),
                              Topology("1x2x4:gpus_per_process=4")),
            "1x2x4:gpus_per_process=4");
  EXPECT_EQ(SpecToDecideAgain(FlagsFor("in.hlo", "1x2x4:gpus_per_process=1"),
                              Topology("1x2x4:gpus_per_process=1")),
            "1x2x4:gpus_per_process=1");
  // Not stated: the layout (1 GPU per process, NVSHMEM's default) left out;
  // the map kept.
  EXPECT_EQ(SpecToDecideAgain(FlagsFor("in.hlo"),
                              Topology("1x2x4:map=0,4,1,5,2,6,3,7")),
            "1x2x4:map=0,4,1,5,2,6,3,7");
  EXPECT_EQ(SpecToDecideAgain(FlagsFor("in.hlo", "1x9x8:nvl72"),
                              Topology("1x9x8:nvl72")),
            "1x9x8:nvl72");
}

// Where the device of each logical id came from, in each case the report
// tells apart.
TEST(PlacementTextTest, EachSource) {
  const core::Topology unmapped = Topology("1x1x4");
  const core::Topology mapped = Topology("1x1x4:map=3,2,1,0");
  ModulePlacement read;
  read.replicas = 1;
  read.partitions = 4;
  read.devices = {3, 2, 1, 0};
  const std::optional<ModulePlacement> none;

  EXPECT_EQ(PlacementText(FlagsFor("in.hlo"), unmapped, "", none, false, false),
            "unknown");
  EXPECT_EQ(
      PlacementText(FlagsFor("in.hlo"), mapped, "c.pbtxt", read, false, false),
      "the module's device assignment (c.pbtxt)");
  // The spec states the config's own map: still the config's.
  EXPECT_EQ(PlacementText(FlagsFor("in.hlo", "1x1x4:map=3,2,1,0"), mapped,
                          "c.pbtxt", read, true, false),
            "the module's device assignment (c.pbtxt)");
  EXPECT_EQ(
      PlacementText(FlagsFor("in.hlo", "1x1x4"), mapped, "", none, false, true),
      "the module's device assignment (the proto's)");
  EXPECT_EQ(PlacementText(FlagsFor("in.hlo"), mapped, "", none, false, false),
            "the module's device assignment");
  // The user's map wins, never silently over the order XLA compiled for.
  read.devices = {0, 1, 2, 3};
  EXPECT_EQ(PlacementText(FlagsFor("in.hlo", "1x1x4:map=3,2,1,0"), mapped,
                          "c.pbtxt", read, true, false),
            "the topology's map, over the module's device assignment "
            "(c.pbtxt: 0,1,2,3)");
  EXPECT_EQ(PlacementText(FlagsFor("in.hlo", "1x1x4:map=3,2,1,0"), mapped, "",
                          none, true, false),
            "the topology's map");
}

// A derived topology on hosts of the default size: the other host shapes
// that hold its devices, each of which can change choices.
TEST(OtherHostShapesTest, OnlyForADerivedTopology) {
  EXPECT_EQ(OtherHostShapes(FlagsFor("in.hlo"), Topology("1x1x8")),
            (std::vector<std::string>{"1x2x4", "1x4x2"}));
  EXPECT_EQ(OtherHostShapes(FlagsFor("in.hlo"), Topology("1x2x8")),
            (std::vector<std::string>{"1x4x4", "1x8x2"}));
  EXPECT_EQ(OtherHostShapes(FlagsFor("in.hlo"), Topology("1x1x2")),
            std::vector<std::string>{});
  EXPECT_TRUE(
      OtherHostShapes(FlagsFor("in.hlo", "1x1x8"), Topology("1x1x8")).empty());
  EXPECT_TRUE(
      OtherHostShapes(FlagsFor("in.hlo", "", 8), Topology("1x1x8")).empty());
}

// A text module placed by XLA's config beside it: the device assignment
// becomes the module's, and the map of a topology given without one.
TEST(PlaceTextModuleTest, ConfigBesideTheInput) {
  const std::string input = Fixture("perm_ring_1x2x4.before_async.hlo");
  auto module = Parse(ReadWhole(input));
  ASSERT_NE(module, nullptr);
  std::optional<core::Topology> given = Topology("1x2x4");
  std::optional<ModulePlacement> read;
  const std::string path =
      PlaceTextModule(FlagsFor(input, "1x2x4"), *module, given, read);
  EXPECT_EQ(path, Fixture("perm_ring_1x2x4.before_async.config.pbtxt"));
  ASSERT_TRUE(read.has_value());
  const std::vector<int> devices = {0, 4, 1, 5, 2, 6, 3, 7};
  EXPECT_EQ(read->devices, devices);
  ASSERT_TRUE(module->config().has_static_device_assignment());
  const xla::DeviceAssignment& assignment =
      module->config().static_device_assignment();
  for (int p = 0; p < 8; ++p) EXPECT_EQ(assignment(0, p), devices[p]) << p;
  ASSERT_TRUE(given.has_value());
  EXPECT_EQ(given->partition_to_device(), devices);
}

// --module-config names another config than the one beside the input; a
// topology with its own map keeps it.
TEST(PlaceTextModuleTest, FlagNamesTheConfig) {
  const std::string input = Fixture("perm_ring_1x2x4.before_async.hlo");
  auto module = Parse(ReadWhole(input));
  ASSERT_NE(module, nullptr);
  Flags flags = FlagsFor(input, "1x2x4:map=7,6,5,4,3,2,1,0");
  flags.module_config = Fixture("ring_1x2x4.before_async.config.pbtxt");
  std::optional<core::Topology> given = Topology(flags.topology);
  std::optional<ModulePlacement> read;
  EXPECT_EQ(PlaceTextModule(flags, *module, given, read), flags.module_config);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->devices, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(given->partition_to_device(),
            (std::vector<int>{7, 6, 5, 4, 3, 2, 1, 0}));
}

TEST(PlaceTextModuleTest, NoConfig) {
  ScratchDir dir;
  const std::string input = dir.Path("m.hlo");
  WriteFile(input, "");
  auto module = Ring(4);
  ASSERT_NE(module, nullptr);
  std::optional<core::Topology> given;
  std::optional<ModulePlacement> read;
  EXPECT_EQ(PlaceTextModule(FlagsFor(input), *module, given, read), "");
  EXPECT_FALSE(read.has_value());
  EXPECT_FALSE(module->config().has_static_device_assignment());
}

// A proto carries its compile's device assignment: it places a topology
// given without a map.
TEST(PlaceTextModuleTest, ProtosOwnDeviceAssignment) {
  auto module = Ring(4);
  ASSERT_NE(module, nullptr);
  xla::DeviceAssignment assignment(1, 4);
  for (int p = 0; p < 4; ++p) assignment(0, p) = 3 - p;
  module->mutable_config().set_static_device_assignment(assignment);
  std::optional<core::Topology> given = Topology("1x1x4");
  std::optional<ModulePlacement> read;
  EXPECT_EQ(
      PlaceTextModule(FlagsFor("in.hlo.pb", "1x1x4"), *module, given, read),
      "");
  EXPECT_FALSE(read.has_value());
  EXPECT_EQ(given->partition_to_device(), (std::vector<int>{3, 2, 1, 0}));
}

TEST_F(PlacementDeathTest, ConfigThatDoesNotFitTheModule) {
  auto module = Ring(4);
  ASSERT_NE(module, nullptr);
  Flags flags = FlagsFor("in.hlo");
  flags.module_config = Fixture("ring_1x2x4.before_async.config.pbtxt");
  std::optional<core::Topology> given;
  std::optional<ModulePlacement> read;
  EXPECT_EXIT(PlaceTextModule(flags, *module, given, read),
              ::testing::ExitedWithCode(2),
              "ring_1x2x4.before_async.config.pbtxt: its device assignment "
              "places 1 replicas x 8 partitions, the module has 1 x 4");
}

// The compile's xla_gpu_collective_permute_mode: the placement's config for
// text, the config found beside a proto (which carries no debug options).
TEST(CompileFlagTest, FromTheConfigRead) {
  ModulePlacement read;
  read.collective_permute_mode = "COLLECTIVES_PEER_MEMORY";
  EXPECT_EQ(CompileFlag(FlagsFor("in.hlo"), true, "c.pbtxt", read),
            std::make_pair(std::string("c.pbtxt"),
                           std::string("COLLECTIVES_PEER_MEMORY")));
  EXPECT_EQ(CompileFlag(FlagsFor("in.hlo"), true, "", std::nullopt),
            std::make_pair(std::string(), std::string()));
}

TEST(CompileFlagTest, BesideAProto) {
  ScratchDir dir;
  WriteFile(dir.Path("m.config.pbtxt"), R"(debug_options {
  xla_gpu_collective_permute_mode: COLLECTIVES_SYMMETRIC_MEMORY
}
static_device_assignment {
  replica_count: 1
  computation_count: 1
  computation_devices {
    replica_device_ids: 0
  }
}
)");
  EXPECT_EQ(
      CompileFlag(FlagsFor(dir.Path("m.hlo.pb")), false, "", std::nullopt),
      std::make_pair(dir.Path("m.config.pbtxt"),
                     std::string("COLLECTIVES_SYMMETRIC_MEMORY")));
  EXPECT_EQ(
      CompileFlag(FlagsFor(dir.Path("other.hlo.pb")), false, "", std::nullopt),
      std::make_pair(std::string(), std::string()));
}

// XLA's buffer assignment beside the module gives each permute's
// destinations; none lies beside stdin or a module without one.
TEST(DestinationReaderTest, ReadsTheDumpBesideTheModule) {
  EXPECT_EQ(DestinationReader(FlagsFor("-")), nullptr);
  EXPECT_EQ(DestinationReader(FlagsFor(Fixture("ring_1x1x8.before_async.hlo"))),
            nullptr);

  const std::string input =
      Fixture("donated_ring_1x1x8.after_optimizations.hlo");
  Flags flags = FlagsFor(input);
  nvshmem_plan::PermutePlan::DestinationReader reader =
      DestinationReader(flags);
  ASSERT_NE(reader, nullptr);
  auto module = Parse(ReadWhole(input));
  ASSERT_NE(module, nullptr);
  const xla::HloInstruction* start =
      module->entry_computation()->GetInstructionWithName(
          "collective-permute-start");
  ASSERT_NE(start, nullptr);
  std::vector<core::DestinationBuffer> destinations = reader(*start);
  ASSERT_EQ(destinations.size(), 1);
  EXPECT_EQ(destinations[0].allocation, 0);
  EXPECT_EQ(destinations[0].parameter, 1);
}

// Something at the dump's name that is not one is refused, not skipped: a
// donated destination would lose the fact that refuses it NVSHMEM.
TEST_F(PlacementDeathTest, RefusesWhatIsNoDump) {
  ScratchDir dir;
  const std::string input = dir.Path("m.hlo");
  const std::string dump = dir.Path("m-buffer-assignment.txt");
  ASSERT_EQ(mkfifo(dump.c_str(), 0600), 0);
  EXPECT_EXIT(DestinationReader(FlagsFor(input)), ::testing::ExitedWithCode(2),
              "m-buffer-assignment.txt: the buffer assignment beside the "
              "module is a FIFO, not a regular file");
  ASSERT_EQ(unlink(dump.c_str()), 0);

  ASSERT_EQ(symlink("nowhere", dump.c_str()), 0);
  EXPECT_EXIT(DestinationReader(FlagsFor(input)), ::testing::ExitedWithCode(2),
              "m-buffer-assignment.txt: the buffer assignment beside the "
              "module: a symbolic link to a file that does not exist");
  ASSERT_EQ(unlink(dump.c_str()), 0);

  WriteFile(dump, "HloModule m\n");
  EXPECT_EXIT(DestinationReader(FlagsFor(input)), ::testing::ExitedWithCode(2),
              "m-buffer-assignment.txt:1: not an XLA buffer-assignment dump");
}

// The topology the pass decides on, asked of the pass; a derived one is said
// on stderr with how to override it.
TEST(ResolveTopologyTest, GivenOrDerived) {
  auto module = Ring(8);
  ASSERT_NE(module, nullptr);
  const core::ToolCostTable table = core::DefaultToolCostTable();

  Plan given(DriverPassOptions(Topology("1x2x4"), 0, table, "explain", false));
  ::testing::internal::CaptureStderr();
  core::Topology topology =
      ResolveTopology(FlagsFor("in.hlo", "1x2x4"), given, *module);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(topology.hosts_per_slice(), 2);
  EXPECT_EQ(topology.gpus_per_host(), 4);

  Plan derived(DriverPassOptions(std::nullopt, 4, table, "explain", false));
  ::testing::internal::CaptureStderr();
  topology = ResolveTopology(FlagsFor("in.hlo", "", 4), derived, *module);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(topology.hosts_per_slice(), 2);
  EXPECT_EQ(topology.gpus_per_host(), 4);
  EXPECT_TRUE(absl::StrContains(said, "in.hlo: no --topology; using 1x2x4"))
      << said;
  EXPECT_TRUE(absl::StrContains(said, "(8 devices in hosts of 4 GPUs")) << said;
  EXPECT_FALSE(absl::StrContains(said, "idle")) << said;
}

// Hosts of the default size around a smaller program: the idle GPUs are
// said, with the flags that state hosts of only the program's GPUs.
TEST(ResolveTopologyTest, SaysWhenHostsAreIdle) {
  auto module = Ring(4);
  ASSERT_NE(module, nullptr);
  Plan derived(DriverPassOptions(std::nullopt, 8, core::DefaultToolCostTable(),
                                 "explain", false));
  ::testing::internal::CaptureStderr();
  const core::Topology topology =
      ResolveTopology(FlagsFor("in.hlo"), derived, *module);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(topology.num_devices(), 8);
  EXPECT_TRUE(absl::StrContains(
      said,
      "the program's 4 devices leave 4 GPUs of its hosts idle, which "
      "NVSHMEM's team would wait for: --devices-per-host=4 or "
      "--topology=1x1x4 states hosts of only the program's GPUs"))
      << said;
}

}  // namespace
}  // namespace placement_test
}  // namespace nvshmem_opt
