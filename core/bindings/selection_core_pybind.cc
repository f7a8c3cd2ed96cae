// Python bindings of the backend selection (the project's layer over the
// core, core/tool_layer/backends.h), so hlo_tools asks the very same code the
// XLA pass and nvshmem-opt run. Errors become ValueError with the core's
// one-line message.

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tool_layer/backends.h"
#include "tool_layer/decide.h"
#include "tool_layer/input_limits.h"
#include "tool_layer/partitions.h"
#include "tool_layer/table_text.h"
#include "tool_layer/topology_spec.h"
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace py = pybind11;
namespace core = ::xla::gpu::backend_selection;

namespace {

// The value, or ValueError with the status's one-line message.
template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  if (!value.ok()) throw py::value_error(std::string(value.status().message()));
  return *std::move(value);
}

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw py::value_error(std::string(status.message()));
}

core::Topology ParseTopology(const std::string& spec,
                             const std::optional<std::string>& backends) {
  if (!backends) return ValueOrThrow(core::ParseTopology(spec));
  return ValueOrThrow(core::ParseTopology(
      spec, ValueOrThrow(core::ParseBackendSet(*backends))));
}

core::Place PlaceOrThrow(const std::string& name) {
  if (name == "anywhere") return core::Place::kAnywhere;
  if (name == "group") return core::Place::kCollectivesGroup;
  if (name == "branch") return core::Place::kConditionalBranch;
  throw py::value_error("unknown place '" + name +
                        "' (anywhere, group, branch)");
}

core::ToolCostTable ParseTable(const std::string& text,
                               const std::string& source) {
  return ValueOrThrow(core::ParseToolCostTable(text, source));
}

core::LinkClass LinkClassOrThrow(const std::string& name) {
  std::optional<core::LinkClass> link_class = core::LinkClassFromName(name);
  if (!link_class) throw py::value_error("unknown link class '" + name + "'");
  return *link_class;
}

core::Backend BackendOrThrow(const std::string& name) {
  std::optional<core::Backend> backend = core::BackendFromName(name);
  if (!backend) throw py::value_error("unknown backend '" + name + "'");
  return *backend;
}

py::dict DecisionToDict(const core::ToolDecision& d) {
  py::dict out;
  // "plan" is the backend's name, as in the driver's JSON and the HLO
  // annotation.
  out["plan"] = core::BackendName(d.backend);
  out["chosen_us"] = d.ChosenUs();
  py::dict by_class;
  for (int c = 0; c < core::kNumLinkClasses; ++c) {
    by_class[core::LinkClassName(static_cast<core::LinkClass>(c))] =
        d.edges_by_class[c];
  }
  out["edges_by_class"] = by_class;
  out["reason"] = d.reason;
  out["backend"] = core::BackendName(d.backend);
  py::dict backend_us, refused;
  for (int b = 0; b < core::kNumBackends; ++b) {
    const auto backend = static_cast<core::Backend>(b);
    const char* name = core::BackendName(backend);
    const std::optional<double> us = d.TimeUs(backend);
    backend_us[name] =
        us ? py::object(py::float_(*us)) : py::object(py::none());
    if (d.refused[b]) refused[name] = core::RefusalText(*d.refused[b]);
  }
  out["backend_us"] = backend_us;
  out["refused"] = refused;
  return out;
}

void BindTopology(py::module_& m) {
  py::class_<core::Topology>(m, "Topology")
      .def_static("parse", &ParseTopology, py::arg("spec"),
                  py::arg("backends") = py::none())
      // From facts, not a spec: a runtime's (jax's devices: each one's
      // process_index, the process of every device of the cluster) or the
      // driver's report (`placed`).
      .def_static(
          "create",
          [](int slices, int hosts_per_slice, int gpus_per_host,
             int nvlink_domain_size, std::vector<int> partition_to_device,
             std::vector<int> device_to_process, int gpus_per_process) {
            return ValueOrThrow(core::Topology::Create(
                slices, hosts_per_slice, gpus_per_host, nvlink_domain_size,
                std::move(partition_to_device), gpus_per_process,
                std::move(device_to_process)));
          },
          py::arg("slices"), py::arg("hosts_per_slice"),
          py::arg("gpus_per_host"), py::arg("nvlink_domain_size") = 0,
          py::arg("partition_to_device") = std::vector<int>{},
          py::arg("device_to_process") = std::vector<int>{},
          py::arg("gpus_per_process") = 0)
      .def_property_readonly("slices", &core::Topology::slices)
      .def_property_readonly("hosts_per_slice",
                             &core::Topology::hosts_per_slice)
      .def_property_readonly("gpus_per_host", &core::Topology::gpus_per_host)
      .def_property_readonly("gpus_per_process",
                             &core::Topology::gpus_per_process)
      .def_property_readonly("nvlink_domain_size",
                             &core::Topology::nvlink_domain_size)
      .def_property_readonly("num_devices", &core::Topology::num_devices)
      .def_property_readonly("partition_to_device",
                             &core::Topology::partition_to_device)
      .def_property_readonly("device_to_process",
                             &core::Topology::device_to_process)
      .def(
          "classify",
          [](const core::Topology& t, int src, int dst) {
            if (src < 0 || dst < 0 || src >= t.num_devices() ||
                dst >= t.num_devices()) {
              throw py::value_error("device outside the topology");
            }
            return std::string(core::LinkClassName(t.Classify(src, dst)));
          },
          py::arg("src_device"), py::arg("dst_device"))
      .def("__str__", &core::TopologySpec)
      .def("__repr__", [](const core::Topology& t) {
        return "Topology('" + core::TopologySpec(t) + "')";
      });
}

void BindCostTable(py::module_& m) {
  py::class_<core::ToolCostTable>(m, "CostTable")
      .def_static("default", &core::DefaultToolCostTable)
      .def_static("parse", &ParseTable, py::arg("text"),
                  py::arg("source") = "<string>")
      .def("__str__", &core::CostTableToString)
      .def("copy", [](const core::ToolCostTable& t) { return t; })
      // Setters keep the ranges ParseToolCostTable enforces.
      .def_property(
          "margin", [](const core::ToolCostTable& t) { return t.core.margin; },
          [](core::ToolCostTable& t, double v) {
            if (!(v >= 0 && v < 1))
              throw py::value_error("margin must be in [0, 1)");
            t.core.margin = v;
          })
      .def_property(
          "nvshmem_max_bytes",
          [](const core::ToolCostTable& t) { return t.core.nvshmem_max_bytes; },
          [](core::ToolCostTable& t, int64_t v) {
            if (v < 0) throw py::value_error("nvshmem_max_bytes must be >= 0");
            t.core.nvshmem_max_bytes = v;
          })
      .def("link",
           [](const core::ToolCostTable& t, const std::string& backend,
              const std::string& link_class) {
             const core::LinkCost& cost =
                 t.link(BackendOrThrow(backend), LinkClassOrThrow(link_class));
             return std::make_pair(cost.latency_us, cost.bandwidth_gbps);
           })
      // The measured curve as [(buffers, bytes, us)], sorted; empty when the
      // pair uses the parametric model.
      .def("points",
           [](const core::ToolCostTable& t, const std::string& backend,
              const std::string& link_class) {
             std::vector<std::tuple<int, int64_t, double>> out;
             for (const core::CurvePoint& p : t.curve(
                      BackendOrThrow(backend), LinkClassOrThrow(link_class))) {
               out.emplace_back(p.buffers, p.bytes, p.us);
             }
             return out;
           })
      .def("has_measured_curve",
           [](const core::ToolCostTable& t, const std::string& backend,
              const std::string& link_class) {
             return core::HasMeasuredCurve(t, BackendOrThrow(backend),
                                           LinkClassOrThrow(link_class));
           })
      .def("sm_interference",
           [](const core::ToolCostTable& t, const std::string& backend) {
             return t.sm_interference(BackendOrThrow(backend));
           })
      .def("per_buffer_us",
           [](const core::ToolCostTable& t, const std::string& backend,
              const std::string& link_class) {
             return t
                 .link(BackendOrThrow(backend), LinkClassOrThrow(link_class))
                 .per_buffer_us;
           })
      // A row and its measured points [(buffers, bytes, us)] (none: the
      // parametric model), checked as a table's text is.
      .def(
          "set_link",
          [](core::ToolCostTable& t, const std::string& backend,
             const std::string& link_class, double latency_us,
             double bandwidth_gbps, double per_buffer_us,
             const std::vector<std::tuple<int, int64_t, double>>& points) {
            std::vector<core::CurvePoint> curve;
            for (const auto& [buffers, bytes, us] : points) {
              curve.push_back({buffers, bytes, us});
            }
            ThrowIfError(core::SetLink(
                &t, BackendOrThrow(backend), LinkClassOrThrow(link_class),
                {latency_us, bandwidth_gbps, per_buffer_us}, curve));
          },
          py::arg("backend"), py::arg("link_class"), py::arg("latency_us"),
          py::arg("bandwidth_gbps"), py::arg("per_buffer_us"),
          py::arg("points") = std::vector<std::tuple<int, int64_t, double>>())
      .def("set_sm_interference",
           [](core::ToolCostTable& t, const std::string& backend,
              double fraction) {
             ThrowIfError(core::SetSmInterference(&t, BackendOrThrow(backend),
                                                  fraction));
           })
      // The backend set as "nccl,peer"; set it from the same text.
      .def_property(
          "backends",
          [](const core::ToolCostTable& t) {
            return core::BackendSetToString(t.backends);
          },
          [](core::ToolCostTable& t, const std::string& text) {
            t.backends = ValueOrThrow(core::ParseBackendSet(text));
          })
      .def_readwrite("symmetric_signals",
                     &core::ToolCostTable::symmetric_signals);
}

void BindNames(py::module_& m) {
  // How far an input is read (tool_layer/input_limits.h): the driver's
  // defaults.
  m.attr("DEFAULT_MAX_INPUT_BYTES") = core::kDefaultMaxInputBytes;
  m.attr("DEFAULT_INPUT_TIMEOUT_S") = core::kDefaultInputTimeoutSeconds;
  m.attr("SIDE_MAX_BYTES") = core::kSideInputMaxBytes;
  m.def("link_classes", []() {
    std::vector<std::string> names;
    for (int c = 0; c < core::kNumLinkClasses; ++c) {
      names.push_back(core::LinkClassName(static_cast<core::LinkClass>(c)));
    }
    return names;
  });

  m.def("backend_names", []() {
    std::vector<std::string> names;
    for (int b = 0; b < core::kNumBackends; ++b) {
      names.push_back(core::BackendName(static_cast<core::Backend>(b)));
    }
    return names;
  });

  // Each backend's record (core/tool_layer/backends.h BackendInfo), in core
  // order.
  m.def("backend_info", []() {
    py::list records;
    for (int b = 0; b < core::kNumBackends; ++b) {
      const core::BackendInfo& info = core::Info(static_cast<core::Backend>(b));
      py::dict record;
      record["name"] = info.name;
      record["label"] = info.label;
      record["config_backend"] = info.config_backend;
      record["collectives_mode"] = info.collectives_mode;
      record["mode_attribute"] = info.mode_attribute;
      record["runtime"] = info.runtime;
      record["rule"] = info.rule;
      record["curve"] = info.curve;
      records.append(record);
    }
    return records;
  });
}

void BindModel(py::module_& m) {
  // The pinned runtime's put list, asked of the core so the tools hold no copy.
  m.def(
      "nvshmem_puts_type",
      [](const std::string& type) { return core::NvshmemPutsType(type); },
      py::arg("element_type"));

  m.def(
      "edge_time_us",
      [](const core::ToolCostTable& table, const std::string& backend,
         const std::string& link_class, int64_t bytes, int buffers) {
        if (buffers < 1) throw py::value_error("buffers must be >= 1");
        return core::EdgeTimeUs(table, BackendOrThrow(backend),
                                LinkClassOrThrow(link_class), bytes, buffers);
      },
      py::arg("table"), py::arg("backend"), py::arg("link_class"),
      py::arg("bytes"), py::arg("buffers") = 1);

  m.def(
      "edge_ids_to_devices",
      [](const core::Topology& topology,
         const std::vector<std::pair<int64_t, int64_t>>& pairs,
         bool cross_partition, int num_partitions, int num_replicas) {
        return ValueOrThrow(core::EdgeIdsToDevices(
            topology, pairs, cross_partition, num_partitions, num_replicas));
      },
      py::arg("topology"), py::arg("pairs"), py::arg("cross_partition"),
      py::arg("num_partitions"), py::arg("num_replicas"));
}

void BindDecide(py::module_& m) {
  m.def(
      "place_of",
      [](bool under_conditional_branch, bool in_collectives_group) {
        switch (core::PlaceOf(under_conditional_branch, in_collectives_group)) {
          case core::Place::kConditionalBranch:
            return std::string("branch");
          case core::Place::kCollectivesGroup:
            return std::string("group");
          case core::Place::kAnywhere:
            break;
        }
        return std::string("anywhere");
      },
      py::arg("under_conditional_branch"), py::arg("in_collectives_group"));
  m.def(
      "decide",
      [](const core::Topology& topology, const core::ToolCostTable& table,
         int64_t bytes, const std::vector<std::pair<int, int>>& device_edges,
         int team_size, int buffers,
         const std::vector<std::string>& element_types, bool memcpy_local_p2p,
         int groups, const std::string& place,
         const std::optional<std::string>& mark,
         const std::vector<std::tuple<int64_t, int64_t, bool>>& destinations) {
        if (team_size < 0) throw py::value_error("team_size must be >= 0");
        if (groups < 1) throw py::value_error("groups must be >= 1");
        if (buffers < 1) throw py::value_error("buffers must be >= 1");
        if (bytes < 0) throw py::value_error("bytes must be >= 0");
        for (const auto& [src, dst] : device_edges) {
          if (src < 0 || dst < 0 || src >= topology.num_devices() ||
              dst >= topology.num_devices()) {
            throw py::value_error("edge (" + std::to_string(src) + ", " +
                                  std::to_string(dst) +
                                  ") names a device outside topology " +
                                  core::TopologySpec(topology));
          }
        }
        core::PermuteRequest request{bytes,   device_edges,  team_size,
                                     buffers, element_types, memcpy_local_p2p,
                                     groups};
        for (const auto& [allocation, parameter, returned] : destinations) {
          request.destinations.push_back({allocation, parameter, returned});
        }
        core::ToolDecision decision =
            core::Decide(topology, table, request, PlaceOrThrow(place));
        if (mark) {
          if (absl::Status bad = core::CheckUserMark(*mark); !bad.ok()) {
            throw py::value_error(std::string(bad.message()));
          }
          core::KeepUserMark(*mark, decision);
        }
        return DecisionToDict(decision);
      },
      py::arg("topology"), py::arg("table"), py::arg("bytes"),
      py::arg("device_edges"), py::arg("team_size") = 0, py::arg("buffers") = 1,
      py::arg("element_types") = std::vector<std::string>{},
      py::arg("memcpy_local_p2p") = false, py::arg("groups") = 1,
      py::arg("place") = "anywhere", py::arg("mark") = py::none(),
      py::arg("destinations") =
          std::vector<std::tuple<int64_t, int64_t, bool>>{});

  m.def(
      "layout_refusal",
      [](const core::Topology& topology, int team_size,
         const std::string& backend) -> std::optional<std::string> {
        core::PermuteRequest request;
        request.team_size = team_size;
        std::optional<core::ToolRefusal> refusal =
            core::LayoutRefusal(topology, request, BackendOrThrow(backend));
        if (!refusal) return std::nullopt;
        return core::RefusalText(*refusal);
      },
      py::arg("topology"), py::arg("team_size"), py::arg("backend"));

  m.def(
      "process_layout_text",
      [](const core::Topology& topology, bool stated,
         const std::string& backends) {
        return core::ProcessLayoutText(
            topology, stated, ValueOrThrow(core::ParseBackendSet(backends)));
      },
      py::arg("topology"), py::arg("stated"), py::arg("backends"));

  m.def(
      "team_devices",
      [](const core::Topology& topology, int team_size) {
        return core::TeamDevices(topology, team_size);
      },
      py::arg("topology"), py::arg("team_size"));

  // None when NVSHMEM's PEs are the permute's devices.
  m.def(
      "nvshmem_pe_reason",
      [](const core::Topology& topology, int team_size,
         int groups) -> std::optional<std::string> {
        std::optional<core::Refusal> mismatch =
            core::NvshmemPeMismatch(topology, team_size, groups);
        if (!mismatch) return std::nullopt;
        return core::RefusalText(core::AsToolRefusal(*mismatch));
      },
      py::arg("topology"), py::arg("team_size"), py::arg("groups"));

  // None when operand and result of `bytes` fit NVSHMEM's heap.
  m.def(
      "nvshmem_heap_reason",
      [](const core::ToolCostTable& table,
         int64_t bytes) -> std::optional<std::string> {
        std::optional<core::Refusal> heap =
            core::NvshmemHeapOverflow(table.core, bytes);
        if (!heap) return std::nullopt;
        return core::RefusalText(core::AsToolRefusal(*heap));
      },
      py::arg("table"), py::arg("bytes"));

  // None when an NVSHMEM permute over these edges is safe.
  m.def(
      "nvshmem_hang_reason",
      [](const std::vector<std::pair<int, int>>& device_edges,
         const std::vector<int>& team) -> std::optional<std::string> {
        std::optional<core::Refusal> hang =
            core::NvshmemHang(device_edges, team);
        if (!hang) return std::nullopt;
        return core::RefusalText(core::AsToolRefusal(*hang));
      },
      py::arg("device_edges"), py::arg("team"));

  // None when every GPU of each host the edges touch is in `team`.
  m.def(
      "nvshmem_host_reason",
      [](const core::Topology& topology,
         const std::vector<std::pair<int, int>>& device_edges,
         const std::vector<int>& team) -> std::optional<std::string> {
        std::optional<core::Refusal> idle =
            core::NvshmemHostGpusIdle(topology, device_edges, team);
        if (!idle) return std::nullopt;
        return core::RefusalText(core::AsToolRefusal(*idle));
      },
      py::arg("topology"), py::arg("device_edges"), py::arg("team"));

  // (partitions, what they were inferred from, or "" when nothing was).
  m.def(
      "infer_partitions",
      [](int64_t ids_used, int64_t mesh_devices, int64_t topology_devices,
         int64_t replicas) {
        const core::PartitionCount count = core::InferPartitions(
            {ids_used, mesh_devices, topology_devices, replicas});
        return std::make_pair(count.partitions, count.from);
      },
      py::arg("ids_used"), py::arg("mesh_devices"), py::arg("topology_devices"),
      py::arg("replicas"));
}

}  // namespace

PYBIND11_MODULE(_selection_core, m) {
  m.doc() = "Backend-selection core of the NVSHMEM collective-permute pass";
  BindTopology(m);
  BindCostTable(m);
  BindNames(m);
  BindModel(m);
  BindDecide(m);
}
