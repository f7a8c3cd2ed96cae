#include "nvshmem_opt/module_config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace nvshmem_opt {
namespace module_config_test {
namespace {

class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = ::testing::TempDir() + "module_config_test.XXXXXX";
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

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

std::string Fixture(const std::string& name) {
  return absl::StrCat(NVSHMEM_FIXTURES_DIR, "/", name);
}

TEST(SidecarConfigPathTest, StemLessItsModuleSuffix) {
  EXPECT_EQ(SidecarConfigPath("a/m.hlo"), "a/m.config.pbtxt");
  EXPECT_EQ(SidecarConfigPath("a/m.hlo.pb"), "a/m.config.pbtxt");
  EXPECT_EQ(SidecarConfigPath("m.txt"), "m.config.pbtxt");
  EXPECT_EQ(SidecarConfigPath("m.pb"), "m.config.pbtxt");
  EXPECT_EQ(SidecarConfigPath("after_optimizations"),
            "after_optimizations.config.pbtxt");
}

// The fixtures keep their config as a sidecar.
TEST(FindModuleConfigTest, Sidecar) {
  EXPECT_EQ(FindModuleConfig(Fixture("shift_1x2x4.before_async.hlo")),
            Fixture("shift_1x2x4.before_async.config.pbtxt"));
}

// XLA's own dump: module_NNNN.NAME.<stage>.txt beside
// module_NNNN.NAME.config.pbtxt, the stage's name holding dots.
TEST(FindModuleConfigTest, ConfigOfAnXlaDump) {
  const std::string dump = Fixture("training_script_1x1x8.xla_dump/");
  EXPECT_EQ(
      FindModuleConfig(
          dump +
          "module_0669.jit_train_step.sm_9.0a_gpu_after_optimizations.txt"),
      dump + "module_0669.jit_train_step.config.pbtxt");
}

TEST(FindModuleConfigTest, NoneFound) {
  ScratchDir dir;
  WriteFile(dir.Path("m.hlo"), "HloModule m\n");
  EXPECT_EQ(FindModuleConfig(dir.Path("m.hlo")), "");
  EXPECT_EQ(FindModuleConfig("-"), "");  // stdin has no directory.
  // A directory by the config's name is not a config.
  ASSERT_EQ(mkdir(dir.Path("m.config.pbtxt").c_str(), 0755), 0);
  EXPECT_EQ(FindModuleConfig(dir.Path("m.hlo")), "");
}

// Something by a config's name that is no regular file is refused, naming
// it: read, a FIFO would stall; skipped, the module would lose its placement.
TEST(CheckConfigBesideTest, RefusesWhatIsNoRegularFile) {
  ScratchDir dir;
  const std::string module = dir.Path("m.hlo");
  const std::string config = dir.Path("m.config.pbtxt");
  const std::string tail =
      "; the module config beside a module is read only from a regular file "
      "(give --module-config=PATH to read another)";
  EXPECT_TRUE(CheckConfigBeside(module).ok());

  ASSERT_EQ(mkfifo(config.c_str(), 0600), 0);
  absl::Status status = CheckConfigBeside(module);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), config + ": a FIFO, not a regular file" + tail);
  ASSERT_EQ(unlink(config.c_str()), 0);

  ASSERT_EQ(mkdir(config.c_str(), 0755), 0);
  EXPECT_EQ(CheckConfigBeside(module).message(),
            config + ": a directory, not a file" + tail);
  ASSERT_EQ(rmdir(config.c_str()), 0);

  ASSERT_EQ(symlink("nowhere", config.c_str()), 0);
  EXPECT_EQ(CheckConfigBeside(module).message(),
            config + ": a symbolic link to a file that does not exist" + tail);
  ASSERT_EQ(unlink(config.c_str()), 0);

  WriteFile(config, "");
  EXPECT_TRUE(CheckConfigBeside(module).ok());
}

// A real config of XLA (1x2x4, devices placed out of order).
TEST(ReadModulePlacementTest, XlaConfig) {
  const std::string path = Fixture("perm_ring_1x2x4.before_async.config.pbtxt");
  absl::StatusOr<ModulePlacement> placement =
      ReadModulePlacement(path, 1 << 20);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement->replicas, 1);
  EXPECT_EQ(placement->partitions, 8);
  EXPECT_EQ(placement->devices, (std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7}));
  EXPECT_EQ(placement->collective_permute_mode, "COLLECTIVES_PRIVATE_MEMORY");
  EXPECT_EQ(placement->text, ReadFile(path));
}

// Logical device r + p * replicas, as the core's topology maps them; no
// debug_options, no mode.
TEST(ReadModulePlacementTest, ReplicasAndPartitions) {
  ScratchDir dir;
  WriteFile(dir.Path("c.pbtxt"), R"(replica_count: 2
num_partitions: 2
static_device_assignment {
  replica_count: 2
  computation_count: 2
  computation_devices {
    replica_device_ids: 3
    replica_device_ids: 2
  }
  computation_devices {
    replica_device_ids: 1
    replica_device_ids: 0
  }
}
)");
  absl::StatusOr<ModulePlacement> placement =
      ReadModulePlacement(dir.Path("c.pbtxt"), 1 << 20);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement->replicas, 2);
  EXPECT_EQ(placement->partitions, 2);
  EXPECT_EQ(placement->devices, (std::vector<int>{3, 2, 1, 0}));
  EXPECT_EQ(placement->collective_permute_mode, "");
}

// Fields a newer XLA added outside the device assignment need not parse.
TEST(ReadModulePlacementTest, OtherBlocksAreNotRead) {
  ScratchDir dir;
  WriteFile(dir.Path("c.pbtxt"), R"(a_field_of_a_newer_xla {
  whatever: "this XLA does not know"
}
static_device_assignment {
  replica_count: 1
  computation_count: 1
  computation_devices {
    replica_device_ids: 5
  }
}
)");
  absl::StatusOr<ModulePlacement> placement =
      ReadModulePlacement(dir.Path("c.pbtxt"), 1 << 20);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement->devices, std::vector<int>{5});
}

// Each bad config: InvalidArgument naming the file and, where it has one,
// the line.
class BadConfigTest : public ::testing::Test {
 protected:
  std::string Error(const std::string& text, int64_t max_bytes = 1 << 20) {
    WriteFile(path_, text);
    absl::StatusOr<ModulePlacement> placement =
        ReadModulePlacement(path_, max_bytes);
    EXPECT_FALSE(placement.ok());
    if (placement.ok()) return "";
    EXPECT_EQ(placement.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(placement.status().message());
  }
  ScratchDir dir_;
  const std::string path_ = dir_.Path("c.pbtxt");
};

TEST_F(BadConfigTest, NoDeviceAssignment) {
  EXPECT_EQ(Error("replica_count: 1\n"),
            path_ + ": no static_device_assignment in the module config");
}

TEST_F(BadConfigTest, BlockNotClosed) {
  EXPECT_EQ(Error("num_partitions: 1\nstatic_device_assignment {\n"
                  "  replica_count: 1\n"),
            path_ + ":2: the static_device_assignment block is not closed");
}

TEST_F(BadConfigTest, CountsDoNotMatchTheDevices) {
  EXPECT_EQ(Error(R"(static_device_assignment {
  replica_count: 1
  computation_count: 2
  computation_devices {
    replica_device_ids: 0
  }
}
)"),
            path_ +
                ":1: the device assignment's counts (1 replicas, 2 "
                "computations) do not match its 1 computation_devices");
  EXPECT_EQ(Error(R"(static_device_assignment {
  replica_count: 1
  computation_count: 1
  computation_devices {
    replica_device_ids: 0
    replica_device_ids: 1
  }
}
)"),
            path_ + ":1: computation 0 names 2 devices for 1 replicas");
}

TEST_F(BadConfigTest, DeviceNamedTwice) {
  EXPECT_EQ(Error(R"(static_device_assignment {
  replica_count: 1
  computation_count: 2
  computation_devices {
    replica_device_ids: 3
  }
  computation_devices {
    replica_device_ids: 3
  }
}
)"),
            path_ +
                ":1: device 3 is negative, too large or named twice in the "
                "device assignment");
}

// The config's own counts must be its device assignment's.
TEST_F(BadConfigTest, TopLevelCountDiffers) {
  EXPECT_EQ(Error(R"(replica_count: 2
static_device_assignment {
  replica_count: 1
  computation_count: 1
  computation_devices {
    replica_device_ids: 0
  }
}
)"),
            path_ +
                ":1: replica_count 2 differs from the device assignment's "
                "1 (line 2)");
  EXPECT_EQ(Error(R"(num_partitions: many
static_device_assignment {
  replica_count: 1
  computation_count: 1
  computation_devices {
    replica_device_ids: 0
  }
}
)"),
            path_ +
                ":1: 'num_partitions' many is not an integer that fits "
                "in 64 bits");
}

// The text format's own error, at the file's line.
TEST_F(BadConfigTest, TextFormatErrorHasTheFilesLine) {
  const std::string message = Error(R"(# a comment
static_device_assignment {
  replica_count: x
  computation_count: 1
}
)");
  EXPECT_TRUE(absl::StartsWith(message, path_ + ":3: ")) << message;
}

TEST_F(BadConfigTest, ModeGivenTwice) {
  EXPECT_EQ(Error(R"(debug_options {
  xla_gpu_collective_permute_mode: COLLECTIVES_PRIVATE_MEMORY
  xla_gpu_collective_permute_mode: COLLECTIVES_PEER_MEMORY
}
static_device_assignment {
  replica_count: 1
  computation_count: 1
  computation_devices {
    replica_device_ids: 0
  }
}
)"),
            path_ + ":3: xla_gpu_collective_permute_mode is given twice");
}

// A config's own size limit, not --max-input-bytes, and a missing file.
TEST_F(BadConfigTest, TooLargeOrMissing) {
  EXPECT_EQ(Error(std::string(11, '#'), 10),
            path_ +
                ": input is 11 bytes, over the limit of 10 (a module "
                "config's own limit, 10 bytes, fixed; --max-input-bytes "
                "bounds the module and the cost table)");
  absl::StatusOr<ModulePlacement> missing =
      ReadModulePlacement(dir_.Path("none"), 1 << 20);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), dir_.Path("none") + ": no such file");
}

}  // namespace
}  // namespace module_config_test
}  // namespace nvshmem_opt
