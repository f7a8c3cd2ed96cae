// nvshmem-opt launcher: runs nvshmem-opt-xla (the driver, which links the
// TensorFlow wheel's XLA) with TensorFlow's start-up logging silenced, so
// stderr carries only the driver's own one-line messages.
//
// Those logs come from static initializers, before any code of ours runs, so
// the driver cannot silence them itself: we park stderr on /dev/null across
// exec and hand the real stderr over as a descriptor (NVSHMEM_OPT_STDERR_FD).
// NVSHMEM_OPT_TF_LOGS=1 keeps TensorFlow's logs.

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  (void)argc;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    std::fprintf(stderr, "nvshmem-opt: cannot locate itself\n");
    return 2;
  }
  self[n] = '\0';
  std::string driver(self);
  driver = driver.substr(0, driver.rfind('/') + 1) + "nvshmem-opt-xla";

  if (std::getenv("NVSHMEM_OPT_TF_LOGS") == nullptr) {
    setenv("TF_CPP_MIN_LOG_LEVEL", "3", 0);
    setenv("TF_ENABLE_ONEDNN_OPTS", "0", 0);
    int saved = dup(2);
    int null_fd = open("/dev/null", O_WRONLY);
    if (saved > 2 && null_fd >= 0) {
      setenv("NVSHMEM_OPT_STDERR_FD", std::to_string(saved).c_str(), 1);
      dup2(null_fd, 2);
      close(null_fd);
    }
  }
  argv[0] = const_cast<char*>(driver.c_str());
  execv(driver.c_str(), argv);
  // exec failed: restore stderr to say so.
  if (const char* fd = std::getenv("NVSHMEM_OPT_STDERR_FD"))
    dup2(std::atoi(fd), 2);
  std::fprintf(stderr, "nvshmem-opt: cannot run %s: %s\n", driver.c_str(),
               std::strerror(errno));
  return 2;
}
