// How a selection seed's third section reads as a request: the selection
// fuzzer and the differential test of the pinned series read seeds alike.
#ifndef NVSHMEM_FUZZ_SELECTION_REQUEST_H_
#define NVSHMEM_FUZZ_SELECTION_REQUEST_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

namespace fuzz {

struct SeedRequest {
  int64_t bytes = 0;
  int partitions = 1;
  int replicas = 1;
  bool cross = true;  // Channel ids: pairs name replicas.
  std::vector<std::pair<int64_t, int64_t>> pairs;
};

// "BYTES PARTITIONS REPLICAS CROSS SRC DST ...". Counts read as themselves
// (1..511 partitions, 1..63 replicas); 0 and out-of-range values fold into
// range, so any bytes are a request. Small numbers keep each run fast.
inline SeedRequest ReadSeedRequest(std::string_view text) {
  std::istringstream in{std::string(text)};
  long long bytes = 0, partitions = 1, replicas = 1, cross = 1;
  in >> bytes >> partitions >> replicas >> cross;
  SeedRequest r;
  r.bytes = bytes < 0 ? -(bytes + 1) : bytes;
  r.partitions = static_cast<int>(std::max(1LL, std::llabs(partitions % 512)));
  r.replicas = static_cast<int>(std::max(1LL, std::llabs(replicas % 64)));
  r.cross = cross != 0;
  long long src, dst;
  while (r.pairs.size() < 256 && in >> src >> dst)
    r.pairs.emplace_back(src, dst);
  return r;
}

}  // namespace fuzz

#endif  // NVSHMEM_FUZZ_SELECTION_REQUEST_H_
