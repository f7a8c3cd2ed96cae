// The tools' cost table as text (table_text.cc): CostTableProto
// (cost_table.proto) in text format read onto the defaults and printed back,
// and the checked setters of its rows for tools that build tables.

#ifndef NVSHMEM_TOOL_LAYER_TABLE_TEXT_H_
#define NVSHMEM_TOOL_LAYER_TABLE_TEXT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tool_layer/backends.h"
#include "xla/backends/gpu/transforms/collectives/backend_cost_table.h"
#include "xla/backends/gpu/transforms/collectives/cluster_topology.h"

namespace xla::gpu::backend_selection {

// The core's defaults, planning over NCCL and NVSHMEM.
ToolCostTable DefaultToolCostTable();

absl::StatusOr<ToolCostTable> ParseToolCostTable(absl::string_view text,
                                                 absl::string_view source_name);
std::string CostTableToString(const ToolCostTable& table);

// Sets one (backend, link class) row of `table` and its measured points (none:
// the parametric model), or a backend's SM interference, checked as the same
// entry of a table's text is: InvalidArgument naming the bad field, and
// `table` unchanged. For tools that build tables (calibrate).
absl::Status SetLink(ToolCostTable* table, Backend backend,
                     LinkClass link_class, const LinkCost& cost,
                     const std::vector<CurvePoint>& points);
absl::Status SetSmInterference(ToolCostTable* table, Backend backend,
                               double fraction);

}  // namespace xla::gpu::backend_selection

#endif  // NVSHMEM_TOOL_LAYER_TABLE_TEXT_H_
