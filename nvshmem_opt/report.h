// The driver's JSON report (one object per decision, optionally next to
// upstream's choice) and the text that --mode=explain prints. The JSON is
// built as a google.protobuf.Struct and written by protobuf's JSON printer.

#ifndef NVSHMEM_OPT_DRIVER_REPORT_H_
#define NVSHMEM_OPT_DRIVER_REPORT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nvshmem_opt/pipeline.h"
#include "tool_layer/backends.h"

namespace nvshmem_opt {

struct ReportHeader {
  std::string input;
  std::string topology;         // The spec decisions were made on.
  std::string topology_source;  // "flag", "module config" or "default".
  std::vector<int> partition_to_device;
  std::string mode;
  int64_t num_partitions = 1;
  int64_t num_replicas = 1;
  std::string partitions_from;  // What num_partitions was inferred from.
  std::string processes;        // ProcessLayoutText.
  std::string placement;        // Where the device map came from.
  std::string spec;             // The topology to decide on again.
  std::string module_config;    // The config read ("": none).
  std::string collective_permute_mode;  // Its flag ("": not given).
  // The topology decided on (`placed` in report.proto).
  const xla::gpu::backend_selection::Topology* placed = nullptr;
  std::vector<std::string> other_host_shapes;  // See report.proto.
};

// upstream: upstream's backend by instruction name, or null when not asked.
absl::StatusOr<std::string> ReportJson(
    const ReportHeader& header, const PassRun& run,
    const std::map<std::string, std::string>* upstream);

std::string ExplainText(const PassRun& run,
                        const std::map<std::string, std::string>* upstream);

}  // namespace nvshmem_opt

#endif  // NVSHMEM_OPT_DRIVER_REPORT_H_
