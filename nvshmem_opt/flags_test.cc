#include "nvshmem_opt/flags.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace nvshmem_opt {
namespace flags_test {
namespace {

// argv as main gets it: the program's name first.
Flags Parse(std::initializer_list<std::string> args) {
  std::vector<std::string> strings = {"nvshmem-opt"};
  strings.insert(strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  return ParseFlags(static_cast<int>(strings.size()), argv.data());
}

TEST(ParseFlagsTest, Defaults) {
  const Flags f = Parse({"in.hlo"});
  EXPECT_EQ(f.input, "in.hlo");
  EXPECT_EQ(f.output, "");
  EXPECT_EQ(f.mode, "rewrite");
  EXPECT_EQ(f.topology, "");
  EXPECT_EQ(f.devices_per_host, 0);
  EXPECT_EQ(f.num_partitions, 0);
  EXPECT_EQ(f.num_replicas, 0);
  EXPECT_FALSE(f.annotate);
  EXPECT_FALSE(f.per_op_modes);
  EXPECT_FALSE(f.print_cost_table);
  // Upstream's own default bound, 16 MiB.
  EXPECT_EQ(f.upstream_threshold_bytes, int64_t{16} << 20);
  EXPECT_EQ(f.max_input_bytes, int64_t{1} << 30);
  EXPECT_EQ(f.input_timeout, 60);
}

// Every flag, in the forms users type: --name=value, --name value, '_' for
// '-', -o OUT, switches without a value; flags on both sides of the input.
TEST(ParseFlagsTest, EveryFlagInEveryForm) {
  const Flags f = Parse({"--topology",
                         "1x2x4",
                         "in.hlo",
                         "-o",
                         "out.hlo",
                         "--cost_table=t.cost",
                         "--mode=annotate",
                         "--annotate",
                         "--compare-upstream",
                         "--time",
                         "--report=r.json",
                         "--module-config=c.pbtxt",
                         "--backends=nccl,peer",
                         "--per_op_modes",
                         "--upstream-threshold-bytes=0",
                         "--num-partitions=8",
                         "--num_replicas",
                         "2",
                         "--max-input-bytes=1024",
                         "--input-timeout=0.5",
                         "--print-readable"});
  EXPECT_EQ(f.input, "in.hlo");
  EXPECT_EQ(f.output, "out.hlo");
  EXPECT_EQ(f.topology, "1x2x4");
  EXPECT_EQ(f.cost_table, "t.cost");
  EXPECT_EQ(f.mode, "annotate");
  EXPECT_TRUE(f.annotate);
  EXPECT_TRUE(f.compare_upstream);
  EXPECT_TRUE(f.time);
  EXPECT_EQ(f.report, "r.json");
  EXPECT_EQ(f.module_config, "c.pbtxt");
  EXPECT_EQ(f.backends, "nccl,peer");
  EXPECT_TRUE(f.per_op_modes);
  EXPECT_EQ(f.upstream_threshold_bytes, 0);
  EXPECT_EQ(f.num_partitions, 8);
  EXPECT_EQ(f.num_replicas, 2);
  EXPECT_EQ(f.max_input_bytes, 1024);
  EXPECT_EQ(f.input_timeout, 0.5);
  EXPECT_TRUE(f.print_readable);
  EXPECT_FALSE(f.print_cost_table);
}

TEST(ParseFlagsTest, DevicesPerHost) {
  EXPECT_EQ(Parse({"in.hlo", "--devices_per_host", "4"}).devices_per_host, 4);
}

// --print-cost-table needs no input.
TEST(ParseFlagsTest, PrintCostTableNeedsNoInput) {
  const Flags f = Parse({"--print-cost-table", "--cost-table=t.cost"});
  EXPECT_TRUE(f.print_cost_table);
  EXPECT_EQ(f.input, "");
  EXPECT_EQ(f.cost_table, "t.cost");
}

// A bad command line: one line on stderr, exit 2. Each in a child process
// (the driver exits); the threadsafe style re-runs the binary for it, as
// TensorFlow's libraries have started threads.
class ParseFlagsDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(ParseFlagsDeathTest, InputCount) {
  EXPECT_EXIT(Parse({}), ::testing::ExitedWithCode(2),
              "nvshmem-opt: no INPUT given \\(see --help\\)");
  EXPECT_EXIT(Parse({"a.hlo", "b.hlo"}), ::testing::ExitedWithCode(2),
              "nvshmem-opt: more than one INPUT given");
}

TEST_F(ParseFlagsDeathTest, Mode) {
  EXPECT_EXIT(Parse({"in.hlo", "--mode=bogus"}), ::testing::ExitedWithCode(2),
              "unknown --mode 'bogus' \\(expected rewrite, annotate or "
              "explain\\)");
  EXPECT_EXIT(Parse({"in.hlo", "--mode=explain", "-o", "out.hlo"}),
              ::testing::ExitedWithCode(2),
              "--mode=explain writes no module: drop -o");
}

TEST_F(ParseFlagsDeathTest, Numbers) {
  EXPECT_EXIT(Parse({"in.hlo", "--num-partitions=0"}),
              ::testing::ExitedWithCode(2),
              "--num-partitions: '0' is not a positive integer \\(at most "
              "1048576\\)");
  EXPECT_EXIT(Parse({"in.hlo", "--devices-per-host=abc"}),
              ::testing::ExitedWithCode(2),
              "--devices-per-host: 'abc' is not a positive integer");
  EXPECT_EXIT(Parse({"in.hlo", "--upstream-threshold-bytes=-1"}),
              ::testing::ExitedWithCode(2),
              "--upstream-threshold-bytes: '-1' is not a non-negative integer");
  EXPECT_EXIT(Parse({"in.hlo", "--input-timeout=0"}),
              ::testing::ExitedWithCode(2),
              "--input-timeout: '0' is not a number of seconds above 0");
  // The first bad flag is the one named.
  EXPECT_EXIT(Parse({"in.hlo", "--num-replicas=x", "--num-partitions=0"}),
              ::testing::ExitedWithCode(2), "nvshmem-opt: --num-replicas: 'x'");
}

TEST_F(ParseFlagsDeathTest, UnknownOrIncompleteFlags) {
  EXPECT_EXIT(Parse({"in.hlo", "--bogus=1"}), ::testing::ExitedWithCode(2),
              "unknown flag '--bogus=1' \\(see --help\\)");
  EXPECT_EXIT(Parse({"in.hlo", "--topology"}), ::testing::ExitedWithCode(2),
              "nvshmem-opt: --topology needs a value");
  EXPECT_EXIT(Parse({"in.hlo", "-o"}), ::testing::ExitedWithCode(2),
              "nvshmem-opt: -o needs a file name");
  EXPECT_EXIT(Parse({"in.hlo", "--annotate=true"}),
              ::testing::ExitedWithCode(2),
              "nvshmem-opt: --annotate takes no value");
}

TEST_F(ParseFlagsDeathTest, TopologyAndDevicesPerHost) {
  EXPECT_EXIT(Parse({"in.hlo", "--topology=1x2x4", "--devices-per-host=4"}),
              ::testing::ExitedWithCode(2),
              "--devices-per-host and --topology: give one");
}

// --help and --version print on stdout and succeed.
TEST_F(ParseFlagsDeathTest, HelpAndVersionExitZero) {
  EXPECT_EXIT(Parse({"--help"}), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(Parse({"in.hlo", "-h"}), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(Parse({"--version"}), ::testing::ExitedWithCode(0), "");
}

TEST(CapLineTest, CutsLongTextOnACharacter) {
  EXPECT_EQ(CapLine("short"), "short");
  EXPECT_EQ(CapLine(std::string(400, 'a')), std::string(400, 'a'));
  EXPECT_EQ(CapLine(std::string(500, 'a')),
            std::string(300, 'a') + "... (200 more characters)");
  // A two-byte character across the cut: cut before it, never inside.
  EXPECT_EQ(CapLine(std::string(299, 'a') + "\xc3\xa9" + std::string(200, 'b')),
            std::string(299, 'a') + "... (202 more characters)");
}

class FailDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(FailDeathTest, FailPrintsOneLineAndExits) {
  EXPECT_EXIT(Fail(3, "boom"), ::testing::ExitedWithCode(3),
              "nvshmem-opt: boom");
}

// InvalidArgument is the input's fault (2); anything else a bug (1).
TEST_F(FailDeathTest, OrFailExitCodes) {
  EXPECT_EQ(OrFail(absl::StatusOr<int>(7)), 7);
  EXPECT_EXIT(OrFail(absl::StatusOr<int>(absl::InvalidArgumentError("bad"))),
              ::testing::ExitedWithCode(2), "nvshmem-opt: bad");
  EXPECT_EXIT(
      OrFail(absl::StatusOr<int>(absl::InternalError("oops")), "in.hlo: "),
      ::testing::ExitedWithCode(1), "nvshmem-opt: in.hlo: oops");
}

// After PrintableStderr a line written to std::cerr is escaped as a file
// name is, and stays one line. (Installed once per process: this is the only
// test that calls it, and its buffer lives as long as the process.)
TEST(PrintableStderrTest, EscapesEachLine) {
  static std::stringbuf* captured = new std::stringbuf;
  std::streambuf* saved = std::cerr.rdbuf(captured);
  PrintableStderr();
  std::cerr << "bad name: a\xff.hlo\n";
  std::cerr << std::string("two\nlines\n");
  std::cerr.flush();
  std::cerr.rdbuf(saved);
  EXPECT_EQ(captured->str(), "bad name: a\\xff.hlo\ntwo\\x0alines\n");
}

}  // namespace
}  // namespace flags_test
}  // namespace nvshmem_opt
