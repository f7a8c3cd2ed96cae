// Runs LLVM's FileCheck for the out-of-tree build (see
// compat/wheel/xla/hlo/testlib/filecheck.h).

#include "xla/hlo/testlib/filecheck.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace xla {
namespace {

std::string FileCheckBinary() {
  if (const char* path = std::getenv("FILECHECK")) return path;
  glob_t found;
  std::string path;
  if (glob("/usr/lib/llvm-*/bin/FileCheck", 0, nullptr, &found) == 0 &&
      found.gl_pathc > 0) {
    path = found.gl_pathv[0];
  }
  globfree(&found);
  return path;
}

// A file holding `text`, removed when this goes away.
class TempFile {
 public:
  explicit TempFile(absl::string_view text) {
    char name[] = "/tmp/filecheck-XXXXXX";
    int fd = mkstemp(name);
    if (fd < 0) return;
    close(fd);
    path_ = name;
    std::ofstream(path_, std::ios::binary) << text;
  }
  ~TempFile() {
    if (!path_.empty()) std::remove(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

absl::StatusOr<bool> RunFileCheck(const std::string& input,
                                  absl::string_view pattern) {
  const std::string binary = FileCheckBinary();
  if (binary.empty()) {
    return absl::FailedPreconditionError(
        "FileCheck not found: install llvm-14-tools or set FILECHECK");
  }
  TempFile input_file(input), pattern_file(pattern);
  if (input_file.path().empty() || pattern_file.path().empty()) {
    return absl::InternalError("cannot write FileCheck's temporary files");
  }
  const std::string command = "'" + binary + "' '" + pattern_file.path() +
                              "' --input-file='" + input_file.path() + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError("cannot run " + binary);
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) {
    output.append(buffer, n);
  }
  const int status = pclose(pipe);
  if (status != 0) std::cerr << output;  // FileCheck says what did not match.
  return status == 0;
}

}  // namespace xla
