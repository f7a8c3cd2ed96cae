// Runs a libFuzzer harness once over each file named, without libFuzzer: the
// committed seeds replayed by a plain build (scripts/mutation_check_core.py),
// where a compile with clang and the sanitizers per mutant would cost minutes.
//
//   selection_seed_replay FILE_OR_DIR...
//
// A property violation aborts, as under libFuzzer; exit 2 when an input
// cannot be read.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool Replay(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "selection_seed_replay: %s: cannot be read\n",
                 path.c_str());
    return false;
  }
  const std::string data((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()),
                         data.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int files = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    std::error_code error;
    if (std::filesystem::is_directory(arg, error)) {
      std::vector<std::filesystem::path> paths;
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) paths.push_back(entry.path());
      }
      std::sort(paths.begin(), paths.end());
      for (const auto& path : paths) {
        if (!Replay(path)) return 2;
        ++files;
      }
    } else {
      if (!Replay(arg)) return 2;
      ++files;
    }
  }
  std::printf("%d inputs replayed\n", files);
  return 0;
}
