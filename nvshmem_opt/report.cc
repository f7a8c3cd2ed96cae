#include "nvshmem_opt/report.h"

#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "nvshmem_opt/report.pb.h"
#include "tool_layer/decide.h"

namespace nvshmem_opt {
namespace {

namespace core = ::xla::gpu::backend_selection;
using google::protobuf::Value;

Value Null() {
  Value v;
  v.set_null_value(google::protobuf::NULL_VALUE);
  return v;
}
Value Str(const std::string& s) {
  Value v;
  v.set_string_value(s);
  return v;
}
// A modeled time, null where the backend is refused or not offered, or the
// model gave no finite number (JSON has no nan/inf).
Value Time(const std::optional<double>& us) {
  if (!us.has_value() || !std::isfinite(*us)) return Null();
  Value v;
  v.set_number_value(*us);
  return v;
}
// The same for a core that marks a refused backend with a negative time.
Value Time(double us) {
  return us < 0 ? Null() : Time(std::optional<double>(us));
}

// One entry per backend and per link class of the core, by name: a backend or
// link class added to the core reaches the report without a change here.
void FillModel(const core::ToolDecision& d, Decision* out) {
  auto& times = *out->mutable_modeled_us()->mutable_fields();
  for (int b = 0; b < core::kNumBackends; ++b) {
    const auto backend = static_cast<core::Backend>(b);
    times[core::BackendName(backend)] = Time(d.TimeUs(backend));
  }
  times["chosen"].set_number_value(std::isfinite(d.ChosenUs()) ? d.ChosenUs()
                                                               : 0);
  auto& refused = *out->mutable_refused()->mutable_fields();
  for (int b = 0; b < core::kNumBackends; ++b) {
    if (d.refused[b].has_value()) {
      refused[core::BackendName(static_cast<core::Backend>(b))]
          .set_string_value(core::RefusalText(*d.refused[b]));
    }
  }
  auto& edges = *out->mutable_edges_by_class()->mutable_fields();
  for (int c = 0; c < core::kNumLinkClasses; ++c) {
    edges[core::LinkClassName(static_cast<core::LinkClass>(c))]
        .set_number_value(d.edges_by_class[c]);
  }
}

void FillDecision(const Plan::OpRecord& r, const PassRun& run,
                  const std::map<std::string, std::string>* upstream,
                  Decision* out) {
  const core::ToolDecision& d = r.decision;
  out->set_computation(r.computation);
  out->set_instruction(r.instruction);
  out->set_form(r.form);
  out->set_bytes(r.bytes);
  out->set_buffers(r.buffers);
  for (const auto& [src, dst, link_class] : r.edges) {
    google::protobuf::ListValue* edge = out->add_edges();
    edge->add_values()->set_number_value(src);
    edge->add_values()->set_number_value(dst);
    edge->add_values()->set_string_value(core::LinkClassName(link_class));
  }
  for (const nvshmem_plan::EnclosingLoop& loop : r.loops) {
    Loop* out_loop = out->add_loops();
    out_loop->set_while_loop(loop.while_name);
    out_loop->set_computation(loop.computation);
    if (loop.trip_count) {
      out_loop->mutable_trip_count()->set_number_value(
          static_cast<double>(*loop.trip_count));
    } else {
      *out_loop->mutable_trip_count() = Null();
    }
  }
  for (const auto& [src, dst] : r.pairs) {
    google::protobuf::ListValue* pair = out->add_pairs();
    pair->add_values()->set_number_value(static_cast<double>(src));
    pair->add_values()->set_number_value(static_cast<double>(dst));
  }
  out->set_plan(core::BackendName(d.backend));
  const core::BackendInfo& info = core::Info(d.backend);
  out->set_backend(info.config_backend);
  *out->mutable_collectives_mode() =
      *info.collectives_mode != '\0' ? Str(info.collectives_mode) : Null();
  out->set_skipped(r.skipped);
  out->set_user_mark(r.user_mark);
  *out->mutable_current_plan() =
      r.current ? Str(core::BackendName(*r.current)) : Null();
  *out->mutable_current_refused() =
      r.current_refusal ? Str(core::RefusalText(*r.current_refusal)) : Null();
  out->set_reason(d.reason);
  FillModel(d, out);
  if (auto it = run.made.find(r.instruction); it != run.made.end()) {
    for (const std::string& name : it->second) out->add_new_instructions(name);
  }
  if (upstream != nullptr) {
    auto it = upstream->find(r.instruction);
    *out->mutable_upstream() = it == upstream->end() ? Null() : Str(it->second);
  }
}

}  // namespace

absl::StatusOr<std::string> ReportJson(
    const ReportHeader& header, const PassRun& run,
    const std::map<std::string, std::string>* upstream) {
  Report report;
  report.set_input(header.input);
  report.set_topology(header.topology);
  report.set_topology_source(header.topology_source);
  for (int device : header.partition_to_device) {
    report.add_partition_to_device(device);
  }
  report.set_mode(header.mode);
  report.set_num_partitions(header.num_partitions);
  report.set_num_replicas(header.num_replicas);
  report.set_partitions_from(header.partitions_from);
  report.set_processes(header.processes);
  report.set_placement(header.placement);
  report.set_spec(header.spec);
  if (header.placed != nullptr) {
    const auto& t = *header.placed;
    PlacedTopology* placed = report.mutable_placed();
    placed->set_slices(t.slices());
    placed->set_hosts_per_slice(t.hosts_per_slice());
    placed->set_gpus_per_host(t.gpus_per_host());
    placed->set_nvlink_domain_size(t.nvlink_domain_size());
    placed->set_gpus_per_process(t.gpus_per_process());
    for (int p : t.device_to_process()) placed->add_device_to_process(p);
  }
  for (const std::string& shape : header.other_host_shapes) {
    report.add_other_host_shapes(shape);
  }
  report.set_module_config(header.module_config);
  report.set_collective_permute_mode(header.collective_permute_mode);
  report.set_changed(run.changed);
  report.set_pass_us(run.pass_us);
  for (const Plan::OpRecord& r : run.records) {
    FillDecision(r, run, upstream, report.add_decisions());
  }
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_fields_with_no_presence = true;  // false, 0 and [] too.
  options.unquote_int64_if_possible = true;             // bytes as a number.
  std::string json;
  if (absl::Status status =
          google::protobuf::util::MessageToJsonString(report, &json, options);
      !status.ok()) {
    return absl::InternalError("cannot write the JSON report (a bug): " +
                               std::string(status.message()));
  }
  return json;
}

std::string ExplainText(const PassRun& run,
                        const std::map<std::string, std::string>* upstream) {
  std::ostringstream out;
  if (run.records.empty()) {
    // Silence would read as a failure to look; say there was nothing to decide.
    out << "no collective-permutes, nothing for the pass to decide\n";
  }
  for (const Plan::OpRecord& r : run.records) {
    const core::ToolDecision& d = r.decision;
    out << r.computation << "/" << r.instruction << " (" << r.form << ", "
        << r.bytes << " bytes, " << r.pairs.size()
        << " pairs): " << core::BackendName(d.backend);
    if (upstream != nullptr) {
      auto it = upstream->find(r.instruction);
      if (it != upstream->end()) out << " [upstream: " << it->second << "]";
    }
    out << "\n    " << d.reason << "\n";
  }
  return out.str();
}

}  // namespace nvshmem_opt
