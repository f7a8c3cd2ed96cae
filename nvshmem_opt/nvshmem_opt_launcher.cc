// nvshmem-opt launcher: runs nvshmem-opt-xla (the driver, which links the
// TensorFlow wheel's XLA) so that stderr carries only the driver's one-line
// messages, also when XLA dies.
//
// TensorFlow logs from static initializers, before any code of the driver
// runs, and XLA CHECK-fails (aborts) on some malformed modules instead of
// returning an error. So the driver runs as a child whose stderr is a memory
// file; it writes its own messages to the real stderr (NVSHMEM_OPT_STDERR_FD)
// and, before each stage that runs XLA, what a death there would mean
// (NVSHMEM_OPT_STAGE_FD: "exit code<TAB>input<TAB>stage"). When the child dies
// of SIGABRT/SIGSEGV/SIGBUS/SIGFPE/SIGILL, the launcher says so in one line,
// quoting XLA's fatal log line:
//   nvshmem-opt: IN.hlo: XLA aborted while parsing the module: Check failed:
//   ...
// and exits with the stage's code (2 while reading the input, 1 after: a bug).
// NVSHMEM_OPT_TF_LOGS=1 runs the driver directly, TensorFlow's logs shown.

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

// Up to `limit` bytes of a memory file, from its start.
std::string ReadAll(int fd, size_t limit) {
  std::string out;
  char buffer[4096];
  if (lseek(fd, 0, SEEK_SET) != 0) return out;
  ssize_t n;
  while (out.size() < limit && (n = read(fd, buffer, sizeof(buffer))) > 0) {
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

// XLA's fatal log line ("F0000 ... file.cc:185] Check failed: ...") or an
// uncaught exception's "what():  <message>", as one line; "" if none.
std::string FatalDetail(const std::string& log) {
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    const std::string line = log.substr(start, end - start);
    size_t what = line.find("what():  ");
    size_t bracket = line.find("] ");
    if (what != std::string::npos ||
        (line[0] == 'F' && bracket != std::string::npos)) {
      std::string detail =
          line.substr(what != std::string::npos ? what + 9 : bracket + 2);
      for (char& c : detail) {
        if (static_cast<unsigned char>(c) < 0x20) c = ' ';
      }
      detail = detail.substr(0, 1000);
      while (!detail.empty() && detail.back() == ' ') detail.pop_back();
      return detail;
    }
    start = end + 1;
  }
  return "";
}

// `text` with each byte outside printable ASCII as \xNN (a file name that
// is not UTF-8, say): the launcher links nothing to check UTF-8 with, and the
// line stays one line.
std::string Escaped(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char hex[5];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

// The address-space limit in words (" under ulimit -v N KiB"), or "".
std::string AddressSpaceLimit() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return "";
  }
  return " under ulimit -v " + std::to_string(limit.rlim_cur / 1024) + " KiB";
}

// The child died of `sig`: one line, and the stage's exit code.
int ReportDeath(int sig, int log, int stage) {
  std::string record = ReadAll(stage, 8192);  // "code\tinput\tstage"
  int code = 1;
  std::string input = "?", where = "running";
  size_t tab1 = record.find('\t'), tab2 = record.rfind('\t');
  if (tab1 != std::string::npos && tab2 != tab1) {
    code = std::atoi(record.substr(0, tab1).c_str()) == 2 ? 2 : 1;
    input = record.substr(tab1 + 1, tab2 - tab1 - 1);
    where = record.substr(tab2 + 1);
  }
  std::string detail = FatalDetail(ReadAll(log, 1 << 20));
  if (detail.find("bad_alloc") != std::string::npos && record.empty()) {
    // Before the driver's first stage: TensorFlow's libraries and XLA's
    // start-up map about 1 GB of address space (VmSize 1,020,988 kB, measured
    // at start-up; it starts under ulimit -v 1100000, not under 1000000).
    std::fprintf(stderr,
                 "nvshmem-opt: out of memory while starting (%s%s): loading "
                 "TensorFlow's XLA maps about 1 GB of address space\n",
                 detail.c_str(), AddressSpaceLimit().c_str());
    return 2;
  }
  if (detail.find("bad_alloc") != std::string::npos) {
    // Out of memory is no bug of XLA's: the input needs more than it may take.
    std::fprintf(stderr,
                 "nvshmem-opt: %s: out of memory while %s (%s%s); the input "
                 "needs more memory than the process may take\n",
                 Escaped(input).c_str(), where.c_str(), detail.c_str(),
                 AddressSpaceLimit().c_str());
    return 2;
  }
  if (detail.empty() && sig != SIGABRT) {
    detail = sig == SIGSEGV  ? "segmentation fault"
             : sig == SIGBUS ? "bus error"
             : sig == SIGFPE ? "arithmetic error"
                             : "illegal instruction";
  }
  std::fprintf(stderr, "nvshmem-opt: %s: XLA %s while %s%s%s %s\n",
               Escaped(input).c_str(), sig == SIGABRT ? "aborted" : "crashed",
               where.c_str(), detail.empty() ? "" : ": ", detail.c_str(),
               code == 2 ? "(the input is malformed)" : "(a bug)");
  return code;
}

[[noreturn]] void Exec(const std::string& driver, char** argv) {
  argv[0] = const_cast<char*>(driver.c_str());
  execv(driver.c_str(), argv);
  const char* fd = std::getenv("NVSHMEM_OPT_STDERR_FD");
  if (fd != nullptr) dup2(std::atoi(fd), 2);
  std::fprintf(stderr, "nvshmem-opt: cannot run %s: %s\n", driver.c_str(),
               std::strerror(errno));
  _exit(2);
}

pid_t g_child = -1;

// Ctrl-C, kill and the like reach the driver too: it ends, then so does the
// launcher, by the same signal.
extern "C" void Forward(int sig) {
  if (g_child > 0) kill(g_child, sig);
}

}  // namespace

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
  if (std::getenv("NVSHMEM_OPT_TF_LOGS") != nullptr) Exec(driver, argv);

  setenv("TF_CPP_MIN_LOG_LEVEL", "3", 0);
  setenv("TF_ENABLE_ONEDNN_OPTS", "0", 0);
  const int log = memfd_create("nvshmem-opt-xla-log", 0);
  const int stage = memfd_create("nvshmem-opt-stage", 0);
  const int real = dup(2);
  if (log < 0 || stage < 0 || real < 0)
    Exec(driver, argv);  // Unguarded, still runs.
  setenv("NVSHMEM_OPT_STDERR_FD", std::to_string(real).c_str(), 1);
  setenv("NVSHMEM_OPT_STAGE_FD", std::to_string(stage).c_str(), 1);
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child == 0) {
    // The driver ends with the launcher (killed by a timeout, say).
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(2);
    dup2(log, 2);
    Exec(driver, argv);
  }
  g_child = child;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) signal(sig, Forward);
  int status = 0;
  while (child > 0 && waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (child < 0) Exec(driver, argv);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127 &&
      ReadAll(stage, 1).empty()) {
    // The dynamic loader could not start the driver (under a small ulimit -v
    // it cannot map TensorFlow's libraries): its message is in the log.
    std::string why = ReadAll(log, 4096);
    why = why.substr(0, why.find('\n'));
    std::fprintf(
        stderr, "nvshmem-opt: cannot start %s%s: %s\n", Escaped(driver).c_str(),
        AddressSpaceLimit().c_str(),
        why.empty() ? "it exited with status 127" : Escaped(why).c_str());
    return 2;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  const int sig = WTERMSIG(status);
  if (sig == SIGABRT || sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE ||
      sig == SIGILL) {
    return ReportDeath(sig, log, stage);
  }
  signal(sig, SIG_DFL);  // Interrupted or killed: end the same way.
  signal(SIGABRT, SIG_DFL);
  raise(sig);
  return 128 + sig;
}
