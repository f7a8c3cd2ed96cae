#include "nvshmem_opt/input.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "xla/hlo/ir/hlo_casting_utils.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/parser/hlo_parser.h"
#include "xla/service/hlo.pb.h"

namespace nvshmem_opt {
namespace input_test {
namespace {

namespace core = ::xla::gpu::backend_selection;

// A fresh directory under the test's temporary directory, removed after.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = ::testing::TempDir() + "input_test.XXXXXX";
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

// The message of a failed read, or "" (and a test failure) when it read.
std::string ErrorOf(const absl::StatusOr<std::string>& read) {
  EXPECT_FALSE(read.ok());
  if (read.ok()) return "";
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(read.status().message());
}

// --- Reading, bounded -------------------------------------------------------

// Every byte, NULs and all, past the reader's 64 KiB chunk.
TEST(ReadInputTest, ReadsARegularFileWhole) {
  ScratchDir dir;
  std::string data(200000, 'x');
  data[7] = '\0';
  data[150000] = '\0';
  WriteFile(dir.Path("in"), data);
  absl::StatusOr<std::string> read = ReadInput(dir.Path("in"), 1 << 20);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, data);
}

// The limit is inclusive; one byte over is refused before reading, with the
// flag that sets it.
TEST(ReadInputTest, RefusesAFileOverTheLimit) {
  ScratchDir dir;
  WriteFile(dir.Path("ten"), "0123456789");
  WriteFile(dir.Path("eleven"), "0123456789a");
  EXPECT_TRUE(ReadInput(dir.Path("ten"), 10).ok());
  EXPECT_EQ(
      ErrorOf(ReadInput(dir.Path("eleven"), 10)),
      dir.Path("eleven") +
          ": input is 11 bytes, over the limit of 10 (--max-input-bytes)");
  // Another file's own limit names what sets it.
  EXPECT_EQ(ErrorOf(ReadBounded(dir.Path("eleven"), {4, "a test's limit"})),
            dir.Path("eleven") +
                ": input is 11 bytes, over the limit of 4 (a test's limit)");
}

TEST(ReadInputTest, MissingFile) {
  ScratchDir dir;
  EXPECT_EQ(ErrorOf(ReadInput(dir.Path("nope"), 100)),
            dir.Path("nope") + ": no such file");
}

TEST(ReadInputTest, DirectoryAndSocketAreNoFiles) {
  ScratchDir dir;
  ASSERT_EQ(mkdir(dir.Path("d").c_str(), 0755), 0);
  EXPECT_EQ(ErrorOf(ReadInput(dir.Path("d"), 100)),
            dir.Path("d") + ": is a directory, not a file");

  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address = {};
  address.sun_family = AF_UNIX;
  const std::string socket_path = dir.Path("s");
  ASSERT_LT(socket_path.size(), sizeof(address.sun_path));
  std::strcpy(address.sun_path, socket_path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
            0);
  EXPECT_EQ(ErrorOf(ReadInput(socket_path, 100)),
            socket_path + ": is a socket, not a file");
  close(fd);
}

TEST(ReadInputTest, BrokenSymlinks) {
  ScratchDir dir;
  ASSERT_EQ(symlink("nowhere", dir.Path("dangling").c_str()), 0);
  EXPECT_EQ(
      ErrorOf(ReadInput(dir.Path("dangling"), 100)),
      dir.Path("dangling") + ": a symbolic link to a file that does not exist");
  ASSERT_EQ(symlink("b", dir.Path("a").c_str()), 0);
  ASSERT_EQ(symlink("a", dir.Path("b").c_str()), 0);
  EXPECT_EQ(ErrorOf(ReadInput(dir.Path("a"), 100)),
            dir.Path("a") +
                ": cannot read: a symbolic link loop (too many levels of "
                "symbolic links)");
}

// A FIFO nobody writes to never hangs the driver: it is refused once silent
// for the timeout.
TEST(ReadInputTest, SilentFifoTimesOut) {
  ScratchDir dir;
  const std::string fifo = dir.Path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(ErrorOf(ReadInput(fifo, 100, /*timeout_s=*/0.2)),
            fifo +
                ": a FIFO silent for 0.2 s; nothing wrote to it "
                "(--input-timeout)");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// Opens `fifo` for writing (blocking until the reader opens it), writes
// `data`, waits `hold_ms`, closes.
std::thread FifoWriter(const std::string& fifo, const std::string& data,
                       int hold_ms = 0) {
  return std::thread([fifo, data, hold_ms] {
    const int fd = open(fifo.c_str(), O_WRONLY);
    if (fd < 0) return;
    if (write(fd, data.data(), data.size()) < 0) perror("write");
    if (hold_ms > 0) usleep(hold_ms * 1000);
    close(fd);
  });
}

TEST(ReadInputTest, ReadsAFifoToItsEnd) {
  ScratchDir dir;
  const std::string fifo = dir.Path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer = FifoWriter(fifo, "HloModule m\n");
  absl::StatusOr<std::string> read = ReadInput(fifo, 100, 10);
  writer.join();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "HloModule m\n");
}

// A FIFO's size is not known before: refused once past the limit, having
// held at most one byte more.
TEST(ReadInputTest, FifoOverTheLimit) {
  ScratchDir dir;
  const std::string fifo = dir.Path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer = FifoWriter(fifo, std::string(100, 'x'));
  const std::string message = ErrorOf(ReadInput(fifo, 10, 10));
  writer.join();
  EXPECT_EQ(message, fifo +
                         ": input is more than 10 bytes, over the limit of "
                         "10 (--max-input-bytes)");
}

// Silent after some bytes: the message says how many came.
TEST(ReadInputTest, FifoSilentAfterSomeBytes) {
  ScratchDir dir;
  const std::string fifo = dir.Path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer = FifoWriter(fifo, "12345", /*hold_ms=*/1500);
  const std::string message = ErrorOf(ReadInput(fifo, 100, 0.2));
  writer.join();
  EXPECT_EQ(message,
            fifo + ": a FIFO silent for 0.2 s after 5 bytes (--input-timeout)");
}

// Without a timeout of its own, a read takes --input-timeout from the bounds
// the driver set once.
TEST(ReadInputTest, TimeoutFromTheCurrentBounds) {
  ScratchDir dir;
  const std::string fifo = dir.Path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const InputBounds saved = CurrentInputBounds();
  EXPECT_EQ(saved.timeout_s, kDefaultInputTimeoutSeconds);
  SetInputBounds({1 << 20, 0.1});
  EXPECT_EQ(CurrentInputBounds().max_bytes, 1 << 20);
  const std::string message = ErrorOf(ReadInput(fifo, 100));
  SetInputBounds(saved);
  EXPECT_TRUE(absl::StrContains(message, "silent for 0.1 s")) << message;
}

// '-' is stdin, which is read and left open.
TEST(ReadInputTest, ReadsStdin) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const int saved_stdin = dup(0);
  ASSERT_GE(saved_stdin, 0);
  ASSERT_EQ(dup2(pipe_fds[0], 0), 0);
  close(pipe_fds[0]);
  const std::string data = "HloModule from_stdin\n";
  ASSERT_EQ(write(pipe_fds[1], data.data(), data.size()),
            static_cast<ssize_t>(data.size()));
  close(pipe_fds[1]);
  absl::StatusOr<std::string> read = ReadInput("-", 100, 5);
  ASSERT_EQ(dup2(saved_stdin, 0), 0);
  close(saved_stdin);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, data);
}

// The address space in use, from /proc (the test's own view, to set a limit).
int64_t MappedBytes() {
  int64_t pages = 0;
  std::ifstream statm("/proc/self/statm");
  statm >> pages;
  return pages * sysconf(_SC_PAGESIZE);
}

// Under ulimit -v the reader and the parser bound themselves by what the
// limit leaves, and say so; run in a child process, which the limit kills
// rather than this one.
TEST(AddressSpaceDeathTest, ReadAndParseStayWithinUlimitV) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ScratchDir dir;
  const std::string big = dir.Path("sparse");
  {
    const int fd = open(big.c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, int64_t{1} << 30), 0);  // 1 GiB, no blocks.
    close(fd);
  }
  // The child's statement: a lambda, whose commas no macro splits.
  auto child = [&] {
    // No limit: nothing to say, everything left.
    bool ok = AddressSpaceLeft() == std::numeric_limits<int64_t>::max() &&
              AddressSpaceText().empty();
    const rlim_t cap = MappedBytes() + (int64_t{256} << 20);
    const struct rlimit limit = {cap, cap};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(3);
    ok = ok && AddressSpaceLeft() <= (int64_t{256} << 20) &&
         absl::StartsWith(AddressSpaceText(), "ulimit -v ");
    absl::StatusOr<std::string> read = ReadInput(big, int64_t{2} << 30);
    ok = ok && !read.ok() &&
         absl::StrContains(read.status().message(),
                           "that the address-space limit leaves");
    absl::StatusOr<LoadedModule> parsed =
        ParseModule("big.hlo", std::string(20 << 20, ' '), {});
    ok = ok && !parsed.ok() &&
         absl::StrContains(parsed.status().message(),
                           "XLA's parser takes about 16 bytes of memory");
    fprintf(stderr, "%s\n%s\n", std::string(read.status().message()).c_str(),
            std::string(parsed.status().message()).c_str());
    fflush(stderr);
    _exit(ok ? 0 : 1);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0),
              "address-space limit leaves");
}

// --- Text and names ---------------------------------------------------------

// A file name that is not UTF-8 is printed escaped; valid UTF-8 and tabs stay.
TEST(PrintableTest, EscapesWhatIsNotValidUtf8) {
  EXPECT_EQ(Printable("plain.hlo"), "plain.hlo");
  EXPECT_EQ(Printable("caf\xc3\xa9\t.hlo"), "caf\xc3\xa9\t.hlo");
  EXPECT_EQ(Printable("a\xff"
                      "b"),
            "a\\xffb");
  EXPECT_EQ(Printable("new\nline\x7f"), "new\\x0aline\\x7f");
  // Overlong (C0 AF) and a UTF-16 surrogate (ED A0 80): byte by byte.
  EXPECT_EQ(Printable("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(Printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  // Cut short at the end.
  EXPECT_EQ(Printable("x\xe2\x82"), "x\\xe2\\x82");
}

TEST(OneLineTest, NewlinesBecomeSpaces) {
  EXPECT_EQ(OneLine("a\nb\r\nc"), "a b  c");
}

// --- Parsing ----------------------------------------------------------------

constexpr char kRing[] = R"(HloModule ring, num_partitions=4

ENTRY %e (p: f32[1024]) -> f32[1024] {
  %p = f32[1024]{0} parameter(0)
  ROOT %cp = f32[1024]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}
)";

// As jax.jit(f).lower(...).as_text(dialect="hlo") prints it: no count.
constexpr char kLoweredRing[] = R"(HloModule ring

ENTRY %e (p: f32[1024]) -> f32[1024] {
  %p = f32[1024]{0} parameter(0)
  ROOT %cp = f32[1024]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}
)";

std::string ParseError(const std::string& data,
                       const LoadOptions& options = {}) {
  absl::StatusOr<LoadedModule> loaded = ParseModule("in.hlo", data, options);
  EXPECT_FALSE(loaded.ok());
  if (loaded.ok()) return "";
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(loaded.status().message());
}

TEST(ParseModuleTest, TextStatingItsPartitions) {
  absl::StatusOr<LoadedModule> loaded = ParseModule("in.hlo", kRing, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->module->config().num_partitions(), 4);
  EXPECT_EQ(loaded->module->config().replica_count(), 1);
  EXPECT_EQ(loaded->text, kRing);  // Kept as read, for the splice.
  EXPECT_EQ(loaded->partitions_note, "");
  EXPECT_EQ(loaded->partitions_from, "");
  EXPECT_EQ(loaded->rewritten_for_xla, 0);
}

// Without num_partitions the parser assumes 1, which no SPMD permute fits:
// the count comes from the ids the permute names, and the user is told.
TEST(ParseModuleTest, InfersPartitionsOfLoweredText) {
  absl::StatusOr<LoadedModule> loaded = ParseModule("in.hlo", kLoweredRing, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->module->config().num_partitions(), 4);
  EXPECT_EQ(loaded->partitions_from,
            "the largest partition id its collectives name");
  EXPECT_EQ(loaded->partitions_note,
            "in.hlo: the module's header gives no num_partitions (jax-lowered "
            "text?); using 4 from the largest partition id its collectives "
            "name (--num-partitions=N overrides)");
}

// The topology given, where the text gives no count: its devices.
TEST(ParseModuleTest, InfersPartitionsFromTheTopology) {
  absl::StatusOr<core::Topology> topology =
      core::Topology::Create(1, 1, 8, 8, {});
  ASSERT_TRUE(topology.ok()) << topology.status();
  absl::StatusOr<LoadedModule> loaded =
      ParseModule("in.hlo", kLoweredRing, {0, 0, &*topology});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->module->config().num_partitions(), 8);
  EXPECT_EQ(loaded->partitions_from, "the topology's 8 devices");
}

// Real lowered text from jax: a Shardy mesh of 8 in its frontend attributes.
TEST(ParseModuleTest, InfersPartitionsFromAShardyMesh) {
  const std::string path = Fixture("ring_1x2x4.lowered.hlo");
  absl::StatusOr<LoadedModule> loaded = ParseModule(path, ReadWhole(path), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->module->config().num_partitions(), 8);
  EXPECT_EQ(loaded->partitions_from,
            "the Shardy mesh in its frontend attributes");
}

// --num-partitions is for a module that gives no count; it never overrides
// one the module states.
TEST(ParseModuleTest, PartitionFlag) {
  absl::StatusOr<LoadedModule> loaded =
      ParseModule("in.hlo", kLoweredRing, {8, 2, nullptr});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->module->config().num_partitions(), 8);
  EXPECT_EQ(loaded->module->config().replica_count(), 2);
  EXPECT_EQ(loaded->partitions_note, "");

  EXPECT_EQ(ParseError(kRing, {8, 0, nullptr}),
            "in.hlo: --num-partitions=8 contradicts the module's header "
            "(num_partitions=4); the flag is for a module that gives no count");
  // The same count as the header's is no contradiction.
  EXPECT_TRUE(ParseModule("in.hlo", kRing, {4, 0, nullptr}).ok());
}

// XLA's parse error as file:line:col: message, on one line.
TEST(ParseModuleTest, ParseErrorNamesFileAndLine) {
  const std::string message = ParseError(R"(HloModule m

ENTRY %e (p: f32[8]) -> f32[8] {
  ROOT %p = f32[8]{0} parameter(0), bogus_attribute=1
}
)");
  EXPECT_TRUE(absl::StartsWith(message, "in.hlo:4:")) << message;
  EXPECT_FALSE(absl::StrContains(message, "\n")) << message;
}

TEST(ParseModuleTest, NeitherTextNorProto) {
  EXPECT_EQ(ParseError(""), "in.hlo: empty file");
  EXPECT_EQ(ParseError("hello"),
            "in.hlo: neither HLO text (starting with 'HloModule') nor a "
            "serialized HloModuleProto");
  // Valid protobuf wire format, but no module in it.
  EXPECT_EQ(ParseError("\x08\x96\x01"),
            "in.hlo: neither HLO text (starting with 'HloModule') nor a "
            "serialized HloModuleProto");
}

// Something before 'HloModule' is located and named.
TEST(ParseModuleTest, TextBeforeHloModule) {
  EXPECT_EQ(ParseError("/* c */ junk HloModule m\n"),
            "in.hlo:1:9: 'junk' before 'HloModule' (HLO text starts with it, "
            "after white space and comments only); not a serialized "
            "HloModuleProto either");
  EXPECT_EQ(ParseError("\n\x01HloModule m\n"),
            "in.hlo:2:1: byte 0x01 before 'HloModule' (HLO text starts with "
            "it, after white space and comments only); not a serialized "
            "HloModuleProto either");
}

// Refused before XLA's parser, whose recursion would overflow the stack.
TEST(ParseModuleTest, NestingTooDeep) {
  EXPECT_EQ(ParseError("HloModule m\n" + std::string(600, '(')),
            "in.hlo:2: nesting deeper than 512 levels (shapes, tuples or "
            "braces); refused before XLA's parser, which would overflow its "
            "stack");
}

// A negative dimension, which XLA's parser refuses without saying why.
TEST(ParseModuleTest, NegativeDimension) {
  EXPECT_EQ(ParseError(R"(HloModule m

ENTRY %e (p: f32[-1]) -> f32[-1] {
  ROOT %p = f32[-1]{0} parameter(0)
}
)"),
            "in.hlo:3:14: shape f32[-1] has dimension -1; a dimension is 0 or "
            "more ('?' for unbounded)");
}

// A serialized HloModuleProto: no text kept (the output is XLA's printing),
// and without a device assignment the count is inferred as for text.
TEST(ParseModuleTest, SerializedModuleProto) {
  auto parsed = xla::ParseAndReturnUnverifiedModule(kRing);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const std::string bytes = (*parsed)->ToProto().SerializeAsString();
  absl::StatusOr<LoadedModule> loaded = ParseModule("in.pb", bytes, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->text, "");
  EXPECT_EQ(loaded->module->name(), "ring");
  EXPECT_EQ(loaded->module->config().num_partitions(), 4);
  EXPECT_EQ(loaded->partitions_note,
            "in.pb: the serialized module gives no num_partitions; using 4 "
            "from the largest partition id its collectives name "
            "(--num-partitions=N overrides)");
}

// XLA's own dump (--xla_dump_hlo_as_proto): an HloProto whose device
// assignment gives the count.
TEST(ParseModuleTest, XlaDumpedHloProto) {
  const std::string path = Fixture(
      "training_script_pb_1x1x8.xla_dump/"
      "module_0669.jit_train_step.sm_9.0a_gpu_after_optimizations.hlo.pb");
  const std::string bytes = ReadWhole(path);
  ASSERT_FALSE(bytes.empty());
  absl::StatusOr<LoadedModule> loaded = ParseModule(path, bytes, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->text, "");
  EXPECT_TRUE(loaded->module->config().has_static_device_assignment());
  EXPECT_EQ(loaded->module->config().num_partitions(), 8);
  EXPECT_EQ(loaded->partitions_note, "");
  // A count other than its device assignment's is the flag's mistake.
  absl::StatusOr<LoadedModule> contradicted =
      ParseModule(path, bytes, {4, 0, nullptr});
  ASSERT_FALSE(contradicted.ok());
  EXPECT_TRUE(absl::StrContains(contradicted.status().message(),
                                "contradicts the module's device assignment "
                                "(num_partitions=8)"))
      << contradicted.status();
}

// jaxlib 0.10's mesh replica groups are parsed in the wheel's form; the text
// is kept as read.
TEST(ParseModuleTest, MeshReplicaGroupsAreReadable) {
  const std::string text = R"(HloModule m, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %e (p: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  ROOT %ar = f32[] all-reduce(%p), channel_id=1, replica_groups=mesh['cp'=4,'tp'=2] {'cp'}, use_global_device_ids=true, to_apply=%add
}
)";
  absl::StatusOr<LoadedModule> loaded = ParseModule("in.hlo", text, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->rewritten_for_xla, 1);
  EXPECT_EQ(loaded->text, text);
  const auto* all_reduce = xla::Cast<xla::HloAllReduceInstruction>(
      loaded->module->entry_computation()->root_instruction());
  std::vector<std::string> groups;
  for (const xla::ReplicaGroup& group : all_reduce->replica_groups()) {
    groups.push_back(absl::StrJoin(group.replica_ids(), ","));
  }
  EXPECT_EQ(groups, (std::vector<std::string>{"0,2,4,6", "1,3,5,7"}));
}

// --- Loading: parse, verify, check permute configs --------------------------

TEST(LoadModuleTest, StagesInOrder) {
  std::vector<std::string> stages;
  absl::StatusOr<LoadedModule> loaded = LoadModule(
      "in.hlo", kRing, {}, [&](const char* stage) { stages.push_back(stage); });
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(stages, (std::vector<std::string>{"parsing the module",
                                              "verifying the input"}));
}

TEST(LoadModuleTest, VerifierRejection) {
  absl::StatusOr<LoadedModule> loaded = LoadModule("in.hlo", R"(HloModule m

ENTRY %e (p: f32[8], q: f32[4]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  %q = f32[4]{0} parameter(1)
  ROOT %a = f32[8]{0} add(%p, %q)
}
)",
                                                   {});
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(loaded.status().message(),
                               "in.hlo: HloVerifier rejects the input: "))
      << loaded.status();
  EXPECT_FALSE(absl::StrContains(loaded.status().message(), "\n"));
}

// A permute's backend_config must be JSON the pass can edit; the message
// names the statement's line.
TEST(LoadModuleTest, PermuteConfigThatIsNotJson) {
  absl::StatusOr<LoadedModule> loaded =
      LoadModule("in.hlo", R"(HloModule m, num_partitions=2

ENTRY %e (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %cp = f32[8]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}, backend_config={"a":1,}
}
)",
                 {});
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().message(),
            "in.hlo:5: cp: backend_config is not valid JSON: '}' at "
            "character 8 of it");
}

// The layout-insensitive verifier takes an invalid layout on a
// get-tuple-element, on which XLA later throws (HloModule::Clone); Verify
// refuses it, naming the instruction. (The driver fuzzer's find:
// tests/fuzz/regressions/invalid_layout_clone_crash.hlo.)
TEST(VerifyTest, RefusesAnInvalidLayout) {
  auto module =
      xla::ParseAndReturnUnverifiedModule(R"(HloModule kv, num_partitions=8

ENTRY %main (k: bf16[64,2,64], v: bf16[64,2,64]) -> (bf16[64,2,64], bf16[64,2,64]) {
  %k = bf16[64,2,64]{2,1,0} parameter(0)
  %v = bf16[64,2,64]{2,1,0} parameter(1)
  %cp = (bf16[64,2,64]{2,1,0}, bf16[64,2,64]{2,1,0}) collective-permute(%k, %v), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}
  %gte.0 = bf16[64,2,64]{2,2,0} get-tuple-element(%cp), index=0
  %gte.1 = bf16[64,2,64]{2,1,0} get-tuple-element(%cp), index=1
  ROOT %t = (bf16[64,2,64]{2,1,0}, bf16[64,2,64]{2,1,0}) tuple(%gte.0, %gte.1)
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  absl::Status status = Verify(module->get());
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(
      status.message(),
      "gte.0: layout minor_to_major field has duplicate values: {2, 2, 0}"))
      << status;

  // The same layout on a parameter: XLA's own verifier refuses it.
  module = xla::ParseAndReturnUnverifiedModule(R"(HloModule m

ENTRY %e (p: f32[2,3,4]) -> f32[2,3,4] {
  ROOT %p = f32[2,3,4]{2,2,0} parameter(0)
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_EQ(Verify(module->get()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(VerifyTest, AcceptsAValidModule) {
  auto module = xla::ParseAndReturnUnverifiedModule(kRing);
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_TRUE(Verify(module->get()).ok());
}

}  // namespace
}  // namespace input_test
}  // namespace nvshmem_opt
