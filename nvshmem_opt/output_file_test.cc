#include "nvshmem_opt/output_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"

namespace nvshmem_opt {
namespace output_file_test {
namespace {

class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = ::testing::TempDir() + "output_file_test.XXXXXX";
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    EXPECT_NE(mkdtemp(name.data()), nullptr);
    path_ = name.data();
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string Path(const std::string& name) const { return path_ + "/" + name; }
  // The names in it, sorted: no temporary file may be left behind.
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

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

struct stat Lstat(const std::string& path) {
  struct stat info = {};
  EXPECT_EQ(lstat(path.c_str(), &info), 0) << path;
  return info;
}

TEST(WriteOutputTest, NewFileGetsTheUmasksMode) {
  ScratchDir dir;
  const mode_t saved = umask(022);
  absl::Status status = WriteOutput(dir.Path("out.hlo"), "HloModule m\n");
  umask(saved);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(ReadFile(dir.Path("out.hlo")), "HloModule m\n");
  EXPECT_EQ(Lstat(dir.Path("out.hlo")).st_mode & 07777, 0644);
  EXPECT_EQ(dir.Names(), std::vector<std::string>{"out.hlo"});
}

// An existing file is replaced by a rename, never rewritten in place: a
// reader holding the old file (here a hard link to it) sees all of the old
// bytes, the name all of the new ones, and the mode is kept.
TEST(WriteOutputTest, ReplacesAnExistingFileAtomically) {
  ScratchDir dir;
  const std::string out = dir.Path("out.hlo");
  WriteFile(out, "old contents\n");
  ASSERT_EQ(chmod(out.c_str(), 0600), 0);
  ASSERT_EQ(link(out.c_str(), dir.Path("reader").c_str()), 0);
  const ino_t old_inode = Lstat(out).st_ino;

  absl::Status status = WriteOutput(out, "new\n");
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(ReadFile(out), "new\n");
  EXPECT_EQ(ReadFile(dir.Path("reader")), "old contents\n");
  EXPECT_NE(Lstat(out).st_ino, old_inode);
  EXPECT_EQ(Lstat(out).st_mode & 07777, 0600);
  EXPECT_EQ(dir.Names(), (std::vector<std::string>{"out.hlo", "reader"}));
}

// A write that fails part way (here the file size limit, EFBIG) leaves the
// existing file whole and no temporary file beside it. In a child process:
// the limit is the process's.
TEST(WriteOutputDeathTest, FailedWriteLeavesTheOldFileWhole) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ScratchDir dir;
  const std::string out = dir.Path("out.hlo");
  WriteFile(out, "old contents\n");
  // The child's statement: a lambda, whose commas no macro splits.
  auto child = [&] {
    signal(SIGXFSZ, SIG_IGN);
    const struct rlimit limit = {4096, 4096};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(3);
    absl::Status status = WriteOutput(out, std::string(1 << 20, 'x'));
    const bool ok = !status.ok() &&
                    absl::StrContains(status.message(), "write failed") &&
                    ReadFile(out) == "old contents\n" &&
                    dir.Names() == std::vector<std::string>{"out.hlo"};
    fprintf(stderr, "%s\n", status.ToString().c_str());
    fflush(stderr);
    _exit(ok ? 0 : 1);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "write failed");
}

// -o /dev/null writes to the device and leaves it a device: a rename over
// it would replace /dev/null with a regular file for the whole machine.
TEST(WriteOutputTest, DevNullStaysADevice) {
  absl::Status status = WriteOutput("/dev/null", "HloModule m\n");
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(S_ISCHR(Lstat("/dev/null").st_mode));
  EXPECT_FALSE(std::filesystem::exists("/dev/null.tmp"));
}

// A symlink stays a link; the file it names is replaced, in the link
// target's directory (a relative target read from the link's).
TEST(WriteOutputTest, WritesThroughSymlinks) {
  ScratchDir dir;
  ASSERT_EQ(mkdir(dir.Path("real").c_str(), 0755), 0);
  WriteFile(dir.Path("real/out.hlo"), "old\n");
  ASSERT_EQ(symlink("real/out.hlo", dir.Path("link").c_str()), 0);
  absl::Status status = WriteOutput(dir.Path("link"), "new\n");
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(S_ISLNK(Lstat(dir.Path("link")).st_mode));
  EXPECT_EQ(ReadFile(dir.Path("real/out.hlo")), "new\n");
  EXPECT_EQ(dir.Names(), (std::vector<std::string>{"link", "real"}));

  // A dangling link creates the file it names.
  ASSERT_EQ(symlink("real/made.hlo", dir.Path("dangling").c_str()), 0);
  status = WriteOutput(dir.Path("dangling"), "made\n");
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(ReadFile(dir.Path("real/made.hlo")), "made\n");
  EXPECT_TRUE(S_ISLNK(Lstat(dir.Path("dangling")).st_mode));
}

TEST(WriteOutputTest, RefusesWhatItCannotWrite) {
  ScratchDir dir;
  absl::Status status = WriteOutput(dir.path(), "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), dir.path() + ": is a directory, not a file");

  status = WriteOutput(dir.Path("missing/out.hlo"), "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), dir.Path("missing/out.hlo") +
                                  ": no such directory " + dir.Path("missing"));

  ASSERT_EQ(symlink("b", dir.Path("a").c_str()), 0);
  ASSERT_EQ(symlink("a", dir.Path("b").c_str()), 0);
  status = WriteOutput(dir.Path("a"), "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), dir.Path("a") + ": too many levels of symlinks");
}

// A FIFO gets the bytes as they are, and one nobody reads does not hang the
// run.
TEST(WriteOutputTest, Fifo) {
  ScratchDir dir;
  const std::string fifo = dir.Path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  absl::Status status = WriteOutput(fifo, "x", /*timeout_s=*/0.2);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            fifo + ": nothing reads this FIFO (waited 0.2 s)");

  std::string received;
  std::thread reader([&] {
    std::ifstream in(fifo, std::ios::binary);  // Blocks until the writer.
    std::stringstream buffer;
    buffer << in.rdbuf();
    received = buffer.str();
  });
  status = WriteOutput(fifo, "HloModule m\n", /*timeout_s=*/10);
  reader.join();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(received, "HloModule m\n");
  EXPECT_TRUE(S_ISFIFO(Lstat(fifo).st_mode));
}

// '-' is stdout.
TEST(WriteOutputTest, DashIsStdout) {
  ScratchDir dir;
  std::cout.flush();  // What gtest printed goes to the real stdout.
  fflush(stdout);
  const int saved = dup(1);
  ASSERT_GE(saved, 0);
  const int fd = open(dir.Path("stdout").c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(dup2(fd, 1), 1);
  close(fd);
  absl::Status status = WriteOutput("-", "to stdout\n");
  std::cout.flush();
  ASSERT_EQ(dup2(saved, 1), 1);
  close(saved);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(ReadFile(dir.Path("stdout")), "to stdout\n");
}

TEST(ResolveOutputPathTest, FollowsLinksToTheirEnd) {
  ScratchDir dir;
  std::string real;
  ASSERT_TRUE(ResolveOutputPath(dir.Path("plain"), &real).ok());
  EXPECT_EQ(real, dir.Path("plain"));

  // two -> one (relative), one -> /abs/target.
  ASSERT_EQ(symlink(dir.Path("target").c_str(), dir.Path("one").c_str()), 0);
  ASSERT_EQ(symlink("one", dir.Path("two").c_str()), 0);
  ASSERT_TRUE(ResolveOutputPath(dir.Path("two"), &real).ok());
  EXPECT_EQ(real, dir.Path("target"));
}

}  // namespace
}  // namespace output_file_test
}  // namespace nvshmem_opt
