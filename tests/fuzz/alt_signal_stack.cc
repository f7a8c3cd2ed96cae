#include "tests/fuzz/alt_signal_stack.h"

#include <signal.h>

namespace nvshmem_opt {

void HandleFatalSignals(void (*handler)(int), struct sigaction* previous) {
  stack_t current = {};
  sigaltstack(nullptr, &current);
  if (current.ss_flags & SS_DISABLE) {
    static char alt_stack[1 << 16];
    stack_t stack = {};
    stack.ss_sp = alt_stack;
    stack.ss_size = sizeof(alt_stack);
    sigaltstack(&stack, nullptr);
  }
  struct sigaction action = {};
  action.sa_handler = handler;
  action.sa_flags = SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < kNumFatalSignals; ++i) {
    sigaction(kFatalSignals[i], &action,
              previous != nullptr ? &previous[i] : nullptr);
  }
}

void RestoreFatalSignals(const struct sigaction* previous) {
  for (int i = 0; i < kNumFatalSignals; ++i) {
    sigaction(kFatalSignals[i], &previous[i], nullptr);
  }
}

}  // namespace nvshmem_opt
