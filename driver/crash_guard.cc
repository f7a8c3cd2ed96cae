#include "driver/crash_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "driver/alt_signal_stack.h"

namespace nvshmem_opt {
namespace {

struct Guard {
  const char* stage = nullptr;  // Null: not inside XLA.
  int exit_code = 2;
  int saved_stderr = -1;  // The real stderr while parked.
  int capture = -1;       // Memory file holding XLA's stderr.
  char input[512] = "";
};
Guard g_guard;

// Async-signal-safe: only write/read/lseek/_exit and fixed buffers.
void WriteStr(int fd, const char* text) {
  size_t size = strlen(text);
  while (size > 0) {
    ssize_t n = write(fd, text, size);
    if (n <= 0) return;
    text += n;
    size -= static_cast<size_t>(n);
  }
}

// XLA's fatal log line ("F0000 00:00:... file.cc:185] Check failed: ...") or
// an uncaught exception's "what():  <message>", as one line in `detail`.
void FindDetail(char* log, char* detail, size_t size) {
  for (char* line = log; *line != '\0';) {
    char* end = strchr(line, '\n');
    if (end != nullptr) *end = '\0';
    char* bracket = strstr(line, "] ");
    char* what = strstr(line, "what():  ");
    if ((line[0] == 'F' && bracket != nullptr) || what != nullptr) {
      size_t k = 0;
      for (const char* c = what != nullptr ? what + 9 : bracket + 2;
           *c != '\0' && k + 1 < size; ++c) {
        detail[k++] = static_cast<unsigned char>(*c) < 0x20 ? ' ' : *c;
      }
      while (k > 0 && detail[k - 1] == ' ') --k;
      detail[k] = '\0';
      return;
    }
    if (end == nullptr) return;
    line = end + 1;
  }
}

extern "C" void OnFatalSignal(int sig) {
  int fd = g_guard.saved_stderr >= 0 ? g_guard.saved_stderr : 2;
  static char log[16384];
  static char detail[1024];
  detail[0] = '\0';
  if (g_guard.capture >= 0 && lseek(g_guard.capture, 0, SEEK_SET) == 0) {
    ssize_t n = read(g_guard.capture, log, sizeof(log) - 1);
    log[n > 0 ? n : 0] = '\0';
    FindDetail(log, detail, sizeof(detail));
  }
  WriteStr(fd, "nvshmem-opt: ");
  WriteStr(fd, g_guard.input);
  WriteStr(fd, ": XLA ");
  WriteStr(fd, sig == SIGABRT ? "aborted" : "crashed");
  WriteStr(fd, " while ");
  WriteStr(fd, g_guard.stage != nullptr ? g_guard.stage : "running");
  if (detail[0] != '\0') {
    WriteStr(fd, ": ");
    WriteStr(fd, detail);
  } else if (sig != SIGABRT) {
    WriteStr(fd, sig == SIGSEGV  ? ": segmentation fault"
                 : sig == SIGBUS ? ": bus error"
                                 : ": arithmetic error");
  }
  WriteStr(fd, g_guard.exit_code == 2 ? " (the input is malformed)\n" : " (a bug)\n");
  _exit(g_guard.exit_code);
}

}  // namespace

void BeginXlaStage(const std::string& input, const char* stage, int exit_code) {
  static bool installed = false;
  if (!installed) {
    installed = true;
    HandleFatalSignals(OnFatalSignal);
    if (std::getenv("NVSHMEM_OPT_TF_LOGS") == nullptr) {
      g_guard.capture = memfd_create("nvshmem-opt-xla-log", 0);
    }
  }
  std::strncpy(g_guard.input, input.c_str(), sizeof(g_guard.input) - 1);
  g_guard.stage = stage;
  g_guard.exit_code = exit_code;
  if (g_guard.capture >= 0 && g_guard.saved_stderr < 0) {
    std::cerr.flush();
    if (ftruncate(g_guard.capture, 0) != 0) return;
    lseek(g_guard.capture, 0, SEEK_SET);
    g_guard.saved_stderr = dup(2);
    dup2(g_guard.capture, 2);
  }
}

void EndXlaStage() {
  if (g_guard.saved_stderr >= 0) {
    std::cerr.flush();
    dup2(g_guard.saved_stderr, 2);
    close(g_guard.saved_stderr);
    g_guard.saved_stderr = -1;
  }
  g_guard.stage = nullptr;
}

}  // namespace nvshmem_opt
