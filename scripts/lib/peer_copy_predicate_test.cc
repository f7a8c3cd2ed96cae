// The predicate by which a collectives-mode series' CollectivePermuteThunk
// skips the first-call rendezvous (MayCopyToPeers), and the series' own test
// of it, run against the XLA of a tensorflow wheel
// (scripts/check_series_upstream.sh builds it).
//
// The thunk's headers reach LLVM and MLIR (thunk.h includes
// ir_emission_utils.h), which no wheel carries, so the patched
// collective_permute_thunk.h and collective_permute_thunk_test.cc cannot be
// compiled whole here. The script cuts the predicate from the first
// (may_copy_to_peers.inc) and the test from the second
// (peer_copy_test.inc); they are compiled here in a class that holds only
// the predicate, with the real GpuCliqueKey and DebugOptions of the wheel.

#include <gtest/gtest.h>

#include <vector>

#include "xla/backends/gpu/collectives/gpu_clique_key.h"
#include "xla/runtime/device_id.h"
#include "xla/xla.pb.h"

namespace xla::gpu {

class CollectivePermuteThunk {
 public:
  using CollectivesMode = DebugOptions::CollectivesMode;
#include "may_copy_to_peers.inc"
};

namespace {
#include "peer_copy_test.inc"
}  // namespace

}  // namespace xla::gpu
