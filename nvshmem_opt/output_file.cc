#include "nvshmem_opt/output_file.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace nvshmem_opt {
namespace {

absl::Status Error(const std::string& path, const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// All of `data` to `fd`, through short writes and signals.
bool WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// A device, FIFO or socket: written as it is. No O_TRUNC (a device may
// refuse it) and no O_CREAT (it exists). A FIFO waits for its reader, but
// not forever: opened without blocking (ENXIO while no reader has it open)
// and each write polled, a FIFO nobody reads is refused after the input
// timeout instead of hanging the run.
absl::Status WriteInPlace(const std::string& path, const std::string& real,
                          absl::string_view data, double timeout_s) {
  const int timeout_ms = static_cast<int>(std::min(timeout_s * 1000, 2e9));
  int fd = -1;
  for (int waited = 0;; waited += 50) {
    fd = open(real.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0 || errno != ENXIO) break;
    if (waited >= timeout_ms) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": nothing reads this FIFO (waited ", timeout_s, " s)"));
    }
    usleep(50 * 1000);
  }
  if (fd < 0) return Error(path, "cannot open for writing");
  bool ok = true;
  while (ok && !data.empty()) {
    struct pollfd waiter = {fd, POLLOUT, 0};
    const int ready = poll(&waiter, 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": its reader stopped reading (waited ", timeout_s, " s)"));
    }
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    ok = n > 0;
    if (ok) data.remove_prefix(static_cast<size_t>(n));
  }
  const int saved = errno;
  if (close(fd) != 0 && ok) return Error(path, "write failed");
  errno = saved;
  return ok ? absl::OkStatus() : Error(path, "write failed");
}

// The mode a new file gets from open(..., 0666): the umask applied.
mode_t NewFileMode() {
  const mode_t mask = umask(0);
  umask(mask);
  return 0666 & ~mask;
}

// A temporary file beside `real`, synced, renamed over it. `old` is the
// replaced file's status, or null for a new file.
absl::Status WriteReplacing(const std::string& path, const std::string& real,
                            const struct stat* old, absl::string_view data) {
  const std::string dir = DirName(real);
  std::string name = real + ".tmp.XXXXXX";
  std::vector<char> temp(name.begin(), name.end());
  temp.push_back('\0');
  const int fd = mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no such directory ", dir));
  }
  if (fd < 0) return Error(path, "cannot create a file in its directory");
  const std::string tmp(temp.data());
  bool ok = WriteAll(fd, data);
  if (ok && old != nullptr &&
      (old->st_uid != geteuid() || old->st_gid != getegid())) {
    (void)fchown(fd, old->st_uid, old->st_gid);  // Where we may (root).
  }
  ok = ok && fchmod(fd, old ? old->st_mode & 07777 : NewFileMode()) == 0;
  ok = ok && fsync(fd) == 0;
  const int saved = errno;
  ok = close(fd) == 0 && ok;
  if (!ok) {
    unlink(tmp.c_str());
    errno = saved;
    return Error(path, "write failed");
  }
  if (rename(tmp.c_str(), real.c_str()) != 0) {
    const absl::Status status = Error(path, "cannot move the written file in");
    unlink(tmp.c_str());
    return status;
  }
  // The rename itself survives a crash once the directory is synced.
  if (const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveOutputPath(const std::string& path, std::string* real) {
  std::string current = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat info;
    if (lstat(current.c_str(), &info) != 0 || !S_ISLNK(info.st_mode)) {
      *real = current;
      return absl::OkStatus();
    }
    std::vector<char> target(PATH_MAX + 1);
    const ssize_t n = readlink(current.c_str(), target.data(), PATH_MAX);
    if (n < 0) return Error(path, "cannot read the symlink");
    std::string next(target.data(), static_cast<size_t>(n));
    if (next.empty() || next[0] != '/') {
      next = DirName(current) + "/" + next;
    }
    current = std::move(next);
  }
  return absl::InvalidArgumentError(path + ": too many levels of symlinks");
}

absl::Status WriteOutput(const std::string& path, absl::string_view data,
                         double timeout_s) {
  if (path == "-") {
    std::cout.write(data.data(), static_cast<std::streamsize>(data.size()));
    std::cout.flush();
    return std::cout ? absl::OkStatus()
                     : absl::InvalidArgumentError("stdout: write failed");
  }
  std::string real;
  if (absl::Status status = ResolveOutputPath(path, &real); !status.ok()) {
    return status;
  }
  struct stat info;
  if (stat(real.c_str(), &info) != 0) {
    if (errno != ENOENT) return Error(path, "cannot write");
    return WriteReplacing(path, real, nullptr, data);
  }
  if (S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(path + ": is a directory, not a file");
  }
  if (!S_ISREG(info.st_mode)) return WriteInPlace(path, real, data, timeout_s);
  return WriteReplacing(path, real, &info, data);
}

}  // namespace nvshmem_opt
