// The fuzz harness's fatal-signal handling: XLA dies of these signals on some
// malformed modules, and a stack overflow (deep recursion in XLA's parser)
// leaves no stack to run a handler on. (nvshmem-opt itself needs none: its
// launcher watches the driver from another process.)

#ifndef FUZZ_ALT_SIGNAL_STACK_H_
#define FUZZ_ALT_SIGNAL_STACK_H_

#include <signal.h>

namespace nvshmem_opt {

// The signals XLA dies of: CHECK failures, bad pointers, bus and arithmetic
// errors.
inline constexpr int kFatalSignals[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE};
inline constexpr int kNumFatalSignals = 4;

// Runs `handler` on each of kFatalSignals, on an alternate signal stack of
// this thread's (a static one, unless one is set up already, as under ASan).
// The previous actions go to `previous` when it is not null.
void HandleFatalSignals(void (*handler)(int),
                        struct sigaction* previous = nullptr);

// Puts back the actions HandleFatalSignals saved.
void RestoreFatalSignals(const struct sigaction* previous);

}  // namespace nvshmem_opt

#endif  // FUZZ_ALT_SIGNAL_STACK_H_
