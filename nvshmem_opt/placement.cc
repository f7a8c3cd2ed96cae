#include "nvshmem_opt/placement.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nvshmem_opt/buffer_assignment.h"
#include "nvshmem_opt/input.h"
#include "tool_layer/input_limits.h"
#include "tool_layer/topology_spec.h"
#include "xla/service/computation_placer.h"

namespace nvshmem_opt {

namespace core = ::xla::gpu::backend_selection;

namespace {

// A config is tens of KB: its own bound, whatever --max-input-bytes allows.
constexpr int64_t kMaxConfigBytes = core::kSideInputMaxBytes;
// GPUs per host when the topology is derived and --devices-per-host is not
// given: one HGX H100/H200 node. A program of fewer devices runs on part of
// such a host, where NVSHMEM's team is the whole host: a host of only the
// program's GPUs is the user's to state.
constexpr int kDefaultDevicesPerHost = 8;
// GPUs per host of the other shapes a derived topology's devices may fill
// (HGX boards of 8 and 4 GPUs, and pairs), each of which can change choices.
constexpr int kOtherHostSizes[] = {8, 4, 2};

}  // namespace

// GPUs per host of a derived topology: --devices-per-host, whose hosts the
// module's devices must fill, else kDefaultDevicesPerHost (a program on part
// of its hosts leaves their other GPUs idle, which the core's NVSHMEM rule
// reads).
int DevicesPerHost(const Flags& flags, const xla::HloModule& module) {
  const int64_t devices = int64_t{module.config().num_partitions()} *
                          module.config().replica_count();
  if (flags.devices_per_host <= 0) return kDefaultDevicesPerHost;
  if (devices % flags.devices_per_host != 0) {
    Fail(2,
         absl::StrCat(flags.input, ": its ", devices,
                      " devices (partitions x replicas) do not fill hosts "
                      "of ",
                      flags.devices_per_host,
                      " GPUs (--devices-per-host); give --devices-per-host=N "
                      "or --topology=SPEC"));
  }
  return flags.devices_per_host;
}

namespace {

// `topology` with logical devices placed on `devices`, its processes kept.
absl::StatusOr<core::Topology> PlacedBy(const core::Topology& topology,
                                        std::vector<int> devices) {
  const bool mapped = !topology.device_to_process().empty();
  return core::Topology::Create(
      topology.slices(), topology.hosts_per_slice(), topology.gpus_per_host(),
      topology.nvlink_domain_size(), std::move(devices),
      mapped ? 0 : topology.gpus_per_process(), topology.device_to_process());
}

// Where a derived topology's hosts hold more GPUs than the program: said, with
// how to state hosts of only the program's GPUs.
std::string IdleNote(const Flags& flags, const core::Topology& topology,
                     const xla::HloModule& module) {
  const int64_t devices = int64_t{module.config().num_partitions()} *
                          module.config().replica_count();
  if (flags.devices_per_host > 0 || devices >= topology.num_devices()) {
    return "";
  }
  const std::string state = devices < topology.gpus_per_host()
                                ? absl::StrCat("--devices-per-host=", devices,
                                               " or --topology=1x1x", devices)
                                : "--devices-per-host=N or --topology=SPEC";
  return absl::StrCat("; the program's ", devices, " devices leave ",
                      topology.num_devices() - devices,
                      " GPUs of its hosts idle, which NVSHMEM's team would "
                      "wait for: ",
                      state, " states hosts of only the program's GPUs");
}

}  // namespace

// The topology the pass decides on, asked of the pass itself so that the
// report and upstream's assigner see the same one; said when derived.
core::Topology ResolveTopology(const Flags& flags, const Plan& plan,
                               const xla::HloModule& module) {
  core::Topology topology =
      OrFail(plan.TopologyFor(module), flags.input + ": ");
  if (flags.topology.empty()) {
    std::cerr << "nvshmem-opt: " << flags.input << ": no --topology; using "
              << core::TopologySpec(topology) << " (" << topology.num_devices()
              << " devices in hosts of " << topology.gpus_per_host() << " GPUs"
              << (module.config().has_static_device_assignment()
                      ? ", placed by the module's device assignment"
                      : "")
              << "; " << topology.gpus_per_process() << " GPUs per process"
              << "; --devices-per-host=N or --topology=SPEC overrides"
              << IdleNote(flags, topology, module) << ")\n";
  }
  return topology;
}

// Where the topology came from: the flag, else the pass's default shape,
// placed by the module's device assignment where it has one.
std::string TopologySource(const Flags& flags, const xla::HloModule& module) {
  if (!flags.topology.empty()) return "flag";
  return module.config().has_static_device_assignment() ? "module config"
                                                        : "default";
}

// The topology as a spec to decide on again: its process layout only where
// --topology states one, so that the backend set's default applies again.
std::string SpecToDecideAgain(const Flags& flags,
                              const core::Topology& topology) {
  if (core::SpecStatesProcesses(flags.topology)) {
    // TopologySpec leaves out a process per host, which the spec stated.
    const bool per_host =
        topology.device_to_process().empty() &&
        topology.gpus_per_process() == topology.gpus_per_host();
    return absl::StrCat(
        core::TopologySpec(topology),
        per_host ? absl::StrCat(":gpus_per_process=", topology.gpus_per_host())
                 : "");
  }
  return core::TopologySpec(OrFail(core::Topology::Create(
      topology.slices(), topology.hosts_per_slice(), topology.gpus_per_host(),
      topology.nvlink_domain_size(), topology.partition_to_device(),
      topology.gpus_per_host())));
}

// Where the device of each logical id came from: a config's map (also where
// the spec states the same one), else the spec's, else the module's own.
std::string PlacementText(const Flags& flags, const core::Topology& topology,
                          const std::string& config_path,
                          const std::optional<ModulePlacement>& read,
                          bool spec_states_map, bool proto_placed) {
  if (topology.partition_to_device().empty()) return "unknown";
  if (!config_path.empty() &&
      (flags.topology.empty() ||
       (read && topology.partition_to_device() == read->devices))) {
    return absl::StrCat("the module's device assignment (", config_path, ")");
  }
  if (!flags.topology.empty() && !spec_states_map && proto_placed) {
    return "the module's device assignment (the proto's)";
  }
  if (flags.topology.empty()) return "the module's device assignment";
  if (!config_path.empty() && read) {
    // The user's map wins, but never silently over the order XLA compiled for.
    return absl::StrCat(
        "the topology's map, over the module's device assignment (",
        config_path, ": ", absl::StrJoin(read->devices, ","), ")");
  }
  return "the topology's map";
}

// --topology as the tools state it again: as given, with the config's map
// where the spec states none and the config placed the module.
std::vector<std::string> OtherHostShapes(const Flags& flags,
                                         const core::Topology& topology) {
  if (!flags.topology.empty() || flags.devices_per_host > 0) return {};
  const int total = topology.num_devices();
  const std::string own =
      absl::StrCat(topology.slices(), "x", topology.hosts_per_slice(), "x",
                   topology.gpus_per_host());
  std::vector<std::string> shapes;
  for (int gpus : kOtherHostSizes) {
    if (total % gpus != 0 || total <= gpus) continue;
    std::string shape = absl::StrCat("1x", total / gpus, "x", gpus);
    if (shape != own) shapes.push_back(std::move(shape));
  }
  return shapes;
}

// XLA's config beside a text module (or --module-config): its device
// assignment becomes the module's, and the map of a topology given without
// one. Returns the config's path, "" when none was read.
std::string PlaceTextModule(const Flags& flags, xla::HloModule& module,
                            std::optional<core::Topology>& given,
                            std::optional<ModulePlacement>& read) {
  if (module.config().has_static_device_assignment()) {
    // A proto carries its compile's device assignment: it places the ids of a
    // topology given without a map, as a config beside text does.
    const xla::DeviceAssignment& assignment =
        module.config().static_device_assignment();
    const int replicas = assignment.replica_count();
    const int partitions = assignment.computation_count();
    if (given && given->partition_to_device().empty() &&
        given->num_devices() >= int64_t{replicas} * partitions) {
      std::vector<int> devices(int64_t{replicas} * partitions);
      for (int p = 0; p < partitions; ++p) {
        for (int r = 0; r < replicas; ++r) {
          devices[r + p * replicas] = static_cast<int>(assignment(r, p));
        }
      }
      given = OrFail(PlacedBy(*given, devices),
                     flags.input +
                         ": the proto's device assignment does not fit "
                         "--topology: ");
    }
    return "";
  }
  const std::string path = flags.module_config.empty()
                               ? FindModuleConfig(flags.input)
                               : flags.module_config;
  if (path.empty()) return "";
  read = OrFail(ReadModulePlacement(path, kMaxConfigBytes));
  if (read->replicas != module.config().replica_count() ||
      read->partitions != module.config().num_partitions()) {
    Fail(2, absl::StrCat(path, ": its device assignment places ",
                         read->replicas, " replicas x ", read->partitions,
                         " partitions, the module has ",
                         module.config().replica_count(), " x ",
                         module.config().num_partitions()));
  }
  xla::DeviceAssignment assignment(read->replicas, read->partitions);
  for (int p = 0; p < read->partitions; ++p) {
    for (int r = 0; r < read->replicas; ++r) {
      assignment(r, p) = read->devices[r + p * read->replicas];
    }
  }
  module.mutable_config().set_static_device_assignment(assignment);
  // A topology too small for the module fails later, with the module's count.
  if (given && given->partition_to_device().empty() &&
      given->num_devices() >= int64_t{read->replicas} * read->partitions) {
    given = OrFail(PlacedBy(*given, read->devices),
                   path + ": its device assignment does not fit --topology: ");
  }
  return path;
}

std::pair<std::string, std::string> CompileFlag(
    const Flags& flags, bool text_input, const std::string& config_path,
    const std::optional<ModulePlacement>& read) {
  if (!config_path.empty() || text_input) {
    return {config_path, read ? read->collective_permute_mode : ""};
  }
  const std::string path = flags.module_config.empty()
                               ? FindModuleConfig(flags.input)
                               : flags.module_config;
  if (path.empty()) return {"", ""};
  return {path, OrFail(ReadModulePlacement(path, kMaxConfigBytes))
                    .collective_permute_mode};
}

nvshmem_plan::PermutePlan::DestinationReader DestinationReader(
    const Flags& flags) {
  if (flags.input.empty() || flags.input == "-") return nullptr;
  const std::string path = BufferAssignmentPath(flags.input);
  struct stat link, info;
  if (path == flags.input || lstat(path.c_str(), &link) != 0) return nullptr;
  // Something else at its name is refused, not skipped: skipped, a donated
  // destination would lose the fact that refuses it NVSHMEM.
  constexpr char kWhat[] = "the buffer assignment beside the module";
  if (stat(path.c_str(), &info) != 0) {
    Fail(2, absl::StrCat(path, ": ", kWhat, ": ",
                         errno == ELOOP ? "a symbolic link loop"
                                        : "a symbolic link to a file that "
                                          "does not exist"));
  }
  if (!S_ISREG(info.st_mode)) {
    const char* kind = S_ISFIFO(info.st_mode)   ? "a FIFO"
                       : S_ISDIR(info.st_mode)  ? "a directory"
                       : S_ISSOCK(info.st_mode) ? "a socket"
                                                : "a device";
    Fail(2,
         absl::StrCat(path, ": ", kWhat, " is ", kind, ", not a regular file"));
  }
  // The input's own bound: a dump grows with the module.
  const std::string text = OrFail(ReadInput(path, flags.max_input_bytes));
  auto assignment = std::make_shared<const BufferAssignment>(
      OrFail(ParseBufferAssignment(text, path)));
  return [assignment](const xla::HloInstruction& permute) {
    return DestinationsOf(permute, *assignment);
  };
}

}  // namespace nvshmem_opt
