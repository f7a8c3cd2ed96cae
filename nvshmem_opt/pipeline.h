// What nvshmem-opt runs on a loaded module: the pass, then (when rewriting)
// XLA's AsyncCollectiveCreator as the compiler does after it, then the
// verifier; upstream's CollectiveBackendAssigner on a copy for comparison;
// and the output as the input's text with the changed permutes spliced in.
//
// Errors: InvalidArgument when the input is at fault (exit 2), Internal when
// the pass or XLA produced something invalid (a bug, exit 1). Messages are
// one line, without the input's path (the caller prefixes it).

#ifndef NVSHMEM_OPT_DRIVER_PIPELINE_H_
#define NVSHMEM_OPT_DRIVER_PIPELINE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nvshmem_opt/input.h"
#include "nvshmem_opt/plan/permute_plan.h"
#include "tool_layer/backends.h"
#include "xla/backends/gpu/transforms/collectives/permute_backend_assigner.h"
#include "xla/hlo/ir/hlo_module.h"

namespace nvshmem_opt {

// The pass (PermuteBackendAssigner) with the tools' step: records,
// annotations, the layer's backends (nvshmem_opt/plan/permute_plan.h).
using Plan = nvshmem_plan::PermutePlan;

struct PassRun {
  std::vector<Plan::OpRecord> records;
  bool changed = false;
  double pass_us = 0;
  // Start and done names by permute, from AsyncCollectiveCreator. The done
  // keeps the permute's name, so that its users read as before.
  std::map<std::string, std::vector<std::string>> made;
};

// The pass's options for the driver's flags (mode: rewrite, annotate or
// explain). Modules from newer jax carry backend_config fields this XLA
// lacks, so the backend is written into the JSON text itself
// (backend_config_json.h).
// Each op's current backend is read from the same JSON text.
Plan::Options DriverPassOptions(
    std::optional<xla::gpu::backend_selection::Topology> topology,
    int devices_per_host, xla::gpu::backend_selection::ToolCostTable table,
    const std::string& mode, bool annotate);

// Called as each XLA stage starts ("running the pass", ...), with the exit
// code a crash there would mean.
using StageHook = std::function<void(const char* stage, int exit_code)>;

// The pass on `target`; unless it only decides, AsyncCollectiveCreator on
// the permutes it decided; then the verifier. `plan` is the driver's one
// plan, the same that resolved the topology (its inputs parsed once).
absl::StatusOr<PassRun> RunPass(Plan& plan, const Plan::Options& options,
                                xla::HloModule* target, const StageHook& stage);
// The same with a plan of its own, built from `options`.
absl::StatusOr<PassRun> RunPass(const Plan::Options& options,
                                xla::HloModule* target, const StageHook& stage);

// Upstream's backend for each collective-permute, by instruction name, on a
// copy with NVSHMEM enabled (upstream assigns backends only then).
absl::StatusOr<std::map<std::string, std::string>> UpstreamDecisions(
    const xla::HloModule& module,
    const xla::gpu::backend_selection::Topology& topology,
    int64_t threshold_bytes);

// The module to write: the input's own text with the statements of the
// permutes the pass changed replaced (a proto's input: XLA's printing). The
// result is parsed and verified again; a failure is Internal.
absl::StatusOr<std::string> OutputText(const LoadedModule& input,
                                       const xla::HloModule& output,
                                       const PassRun& run,
                                       const Plan::Options& options);

}  // namespace nvshmem_opt

#endif  // NVSHMEM_OPT_DRIVER_PIPELINE_H_
