// The series' side of the differential test: the pinned series' in-tree
// decision, given the facts its pass reads from a compiled module and the
// compiler (the program's ids and devices, the host size, the GPUs the process
// sees, the slice size, the flags).

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/status/statusor.h"
#include "tests/series_diff/diff_case.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_permute_decision.h"
#include "xla/primitive_util.h"
#include "xla/service/gpu/backend_configs.pb.h"
#include "xla/xla_data.pb.h"

namespace series_diff {

Answer SeriesDecide(const Case& c) {
  const xla::gpu::backend_selection::Topology& topology = *c.topology;
  xla::gpu::NvshmemPermuteFacts facts;
  facts.source_target_pairs = c.pairs;
  facts.num_devices = c.program_devices();
  facts.devices_per_host = c.series_devices_per_host >= 0
                               ? c.series_devices_per_host
                               : topology.gpus_per_host();
  facts.visible_devices_per_process = topology.gpus_per_process();
  for (const std::string& name : c.types) {
    absl::StatusOr<xla::PrimitiveType> type =
        xla::primitive_util::StringToPrimitiveType(name);
    if (!type.ok()) {
      // The grid's own type names: a bad one is a bug of this test.
      std::cerr << "series_diff: no XLA type " << name << "\n";
      std::abort();
    }
    facts.element_types.push_back(*type);
  }
  facts.bytes = c.bytes;
  facts.memcpy_local_p2p = c.memcpy_local_p2p;
  if (c.heap_bytes) facts.heap_bytes = *c.heap_bytes;
  facts.crossover_bytes = c.crossover_bytes;
  // The compiler's slice is the fast-interconnect domain, the tools' NVLink
  // domain.
  facts.part_of_job = xla::gpu::NvshmemPartOfJob(facts.num_devices,
                                                 c.slice_size(), c.job_devices);
  const xla::gpu::NvshmemPermuteDecision decision =
      xla::gpu::DecideNvshmemPermute(facts);
  return {decision.backend == xla::gpu::CollectiveBackendConfig::NVSHMEM,
          decision.reason};
}

}  // namespace series_diff
