// The command line's guard around XLA's own code. XLA's parser and verifier
// CHECK-fail (abort the process) on some malformed modules instead of
// returning an error. While a guarded stage runs, XLA's stderr is parked in a
// memory file, and a fatal signal becomes nvshmem-opt's usual one line,
// quoting XLA's check:
//   nvshmem-opt: IN.hlo: XLA aborted while parsing the module: Check failed: ...
// with the stage's exit code (2 while reading the input, 1 after: a bug).
// NVSHMEM_OPT_TF_LOGS=1 leaves stderr alone. Not part of the library: the
// fuzz harness has its own guard (it carries on with the next input).

#ifndef NVSHMEM_OPT_DRIVER_CRASH_GUARD_H_
#define NVSHMEM_OPT_DRIVER_CRASH_GUARD_H_

#include <string>

namespace nvshmem_opt {

// `stage` must outlive the stage (a string literal).
void BeginXlaStage(const std::string& input, const char* stage, int exit_code);
// Puts stderr back.
void EndXlaStage();

}  // namespace nvshmem_opt

#endif  // NVSHMEM_OPT_DRIVER_CRASH_GUARD_H_
