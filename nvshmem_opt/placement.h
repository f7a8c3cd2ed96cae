// Where the driver's topology and device placement come from, and how the
// report states them: the derived topology's hosts, the pass's own topology,
// a text module placed by XLA's config beside it.

#ifndef NVSHMEM_OPT_PLACEMENT_H_
#define NVSHMEM_OPT_PLACEMENT_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nvshmem_opt/flags.h"
#include "nvshmem_opt/module_config.h"
#include "nvshmem_opt/pipeline.h"
#include "nvshmem_opt/plan/permute_plan.h"
#include "tool_layer/backends.h"
#include "xla/hlo/ir/hlo_module.h"

namespace nvshmem_opt {

// GPUs per host of a derived topology: --devices-per-host, whose hosts the
// module's devices must fill, else 8 (one HGX node), which a smaller module
// uses part of.
int DevicesPerHost(const Flags& flags, const xla::HloModule& module);

// The topology the pass decides on, asked of the pass itself; said on stderr
// when derived.
xla::gpu::backend_selection::Topology ResolveTopology(
    const Flags& flags, const Plan& plan, const xla::HloModule& module);

// Where the topology came from: "flag", "module config" or "default".
std::string TopologySource(const Flags& flags, const xla::HloModule& module);

// The topology as a spec to decide on again (its process layout only where
// --topology states one).
std::string SpecToDecideAgain(
    const Flags& flags, const xla::gpu::backend_selection::Topology& topology);

// Where the device of each logical id came from, in words.
std::string PlacementText(const Flags& flags,
                          const xla::gpu::backend_selection::Topology& topology,
                          const std::string& config_path,
                          const std::optional<ModulePlacement>& read,
                          bool spec_states_map, bool proto_placed);

// Where the topology is derived with hosts of the default size: the other
// shapes (SxHxG) of hosts that hold its devices; {} otherwise.
std::vector<std::string> OtherHostShapes(
    const Flags& flags, const xla::gpu::backend_selection::Topology& topology);

// Places `module` by XLA's config beside a text input (or --module-config), or
// `given` by a proto's own device assignment; returns the config's path, ""
// when none was read. Exits 2 on a config that does not fit.
std::string PlaceTextModule(
    const Flags& flags, xla::HloModule& module,
    std::optional<xla::gpu::backend_selection::Topology>& given,
    std::optional<ModulePlacement>& read);

// (the config that states the flag the program was compiled with, that flag):
// the config placement read (`config_path`, `read`), else, beside a proto
// placed by its own device assignment, the config found for the flag alone (a
// proto carries no debug options); ("", "") where none states it. Exits 2 on a
// bad config.
std::pair<std::string, std::string> CompileFlag(
    const Flags& flags, bool text_input, const std::string& config_path,
    const std::optional<ModulePlacement>& read);

// What XLA's buffer assignment beside the input (BufferAssignmentPath) says of
// each permute's destinations, for the core's NVSHMEM rule; none where no
// dump lies beside it. Exits 2 naming the file on one that is not a dump.
nvshmem_plan::PermutePlan::DestinationReader DestinationReader(
    const Flags& flags);

}  // namespace nvshmem_opt

#endif  // NVSHMEM_OPT_PLACEMENT_H_
