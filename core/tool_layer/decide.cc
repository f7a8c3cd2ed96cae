// The project's decision: the core's Choose over NVSHMEM, peer and symmetric
// (the core's rules for NVSHMEM, this layer's for the others), and the
// one-line reason the tools show.

#include "tool_layer/decide.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tool_layer/backends.h"
#include "tool_layer/topology_spec.h"

namespace xla::gpu::backend_selection {
namespace {

std::string Title(Backend backend) { return Info(backend).label; }

std::string Us(double us) { return absl::StrFormat("%.2f us", us); }

std::string Bytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrFormat("%.0f %s", value, kUnits[unit])
                   : absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

// Devices as runs: "4-7", "1, 3, 5-7".
std::string DeviceRuns(const std::vector<int>& devices) {
  std::vector<std::string> runs;
  for (size_t i = 0; i < devices.size();) {
    size_t j = i;
    while (j + 1 < devices.size() && devices[j + 1] == devices[j] + 1) ++j;
    runs.push_back(j == i ? absl::StrCat(devices[i])
                          : absl::StrCat(devices[i], "-", devices[j]));
    i = j + 1;
  }
  return absl::StrJoin(runs, ", ");
}

ToolRefusal RefusedByTool(Backend backend, ToolRule rule) {
  ToolRefusal refusal;
  refusal.backend = backend;
  refusal.tool_rule = rule;
  return refusal;
}

// The tools' own refusals: a backend the target XLA does not offer, and
// symmetric memory without NCCL signals (put + signal fails without them).
std::optional<ToolRefusal> OfferedAndSignaled(const ToolCostTable& table,
                                              Backend backend) {
  if (!absl::c_linear_search(table.backends, backend)) {
    ToolRefusal refusal = RefusedByTool(backend, ToolRule::kNotOffered);
    refusal.offered = table.backends;
    return refusal;
  }
  if (backend == Backend::kSymmetric && !table.symmetric_signals) {
    return RefusedByTool(backend, ToolRule::kNoSignals);
  }
  return std::nullopt;
}

}  // namespace

ToolRefusal AsToolRefusal(const Refusal& r, Backend backend,
                          int gpus_per_process) {
  ToolRefusal refusal;
  static_cast<Refusal&>(refusal) = r;
  refusal.backend = backend;
  refusal.gpus_per_process = gpus_per_process;
  return refusal;
}

std::optional<ToolRefusal> LayoutRefusal(const Topology& topology,
                                         const PermuteRequest& request,
                                         Backend backend) {
  // NCCL is where every refusal falls back to: it runs under any layout.
  if (backend == Backend::kNccl) return std::nullopt;
  if (backend == Backend::kNvshmem && topology.gpus_per_process() > 1) {
    ToolRefusal refusal =
        RefusedByTool(backend, ToolRule::kSeveralGpusPerProcess);
    refusal.count = refusal.gpus_per_process = topology.gpus_per_process();
    return refusal;
  }
  if (!topology.partition_to_device().empty()) return std::nullopt;
  // Peer and symmetric memory over more devices than a process drives: under
  // any order that many devices are outside the first device's process, so the
  // core's process rule refuses it whatever a map would say; that is the
  // reason (with one GPU per process, every edge leaves its process).
  const int per_process = topology.gpus_per_process();
  if (backend != Backend::kNvshmem && per_process > 0 &&
      request.team_size > per_process) {
    Refusal crosses;
    crosses.kind = RefusalKind::kCrossesProcesses;
    crosses.count = request.team_size - per_process;
    crosses.total = request.team_size;
    return AsToolRefusal(crosses, backend, per_process);
  }
  std::vector<int> processes, hosts;
  for (int device : TeamDevices(topology, request.team_size)) {
    processes.push_back(topology.ProcessOf(device));
    hosts.push_back(topology.HostOf(device));
  }
  for (std::vector<int>* ids : {&processes, &hosts}) {
    absl::c_sort(*ids);
    ids->erase(std::unique(ids->begin(), ids->end()), ids->end());
  }
  if (processes.size() <= 1 && hosts.size() <= 1) return std::nullopt;
  ToolRefusal refusal = RefusedByTool(backend, ToolRule::kPlacementUnknown);
  refusal.count = static_cast<int>(processes.size());
  refusal.total = static_cast<int>(hosts.size());
  refusal.gpus_per_process = topology.gpus_per_process();
  return refusal;
}

std::string RefusalText(const ToolRefusal& r) {
  const std::string refused =
      absl::StrCat(BackendName(r.backend), " refused: ");
  const std::string of_total = absl::StrCat(" of ", r.total, " edges ");
  if (r.tool_rule == ToolRule::kNotOffered) {
    return absl::StrCat(refused, "not offered by the target XLA (backends ",
                        BackendSetToString(r.offered), ")");
  }
  if (r.tool_rule == ToolRule::kInGroup) {
    return absl::StrCat(refused,
                        "in a collectives group, whose thunk needs NCCL "
                        "communicators; the patched XLA keeps NCCL there");
  }
  if (r.tool_rule == ToolRule::kUnderBranch) {
    return absl::StrCat(
        refused,
        "under a conditional's branch, where devices may run other permutes "
        "and a one-sided write lands in the sender's own buffer's place; the "
        "patched XLA keeps NCCL there");
  }
  if (r.tool_rule == ToolRule::kSeveralGpusPerProcess) {
    return absl::StrCat(
        refused, "a process drives ", r.count,
        " GPUs (gpus_per_process); the pinned XLA's pass keeps NCCL unless "
        "each process sees one GPU, and NVSHMEM's set-up stops a process "
        "that drives more");
  }
  if (r.tool_rule == ToolRule::kPlacementUnknown) {
    return absl::StrCat(
        refused,
        "the module does not say which device runs each of its ids "
        "(neither it nor a config beside it gives a device assignment), and "
        "the program spans ",
        r.count, r.count == 1 ? " process" : " processes", " (",
        r.gpus_per_process, r.gpus_per_process == 1 ? " GPU" : " GPUs",
        " each) on ", r.total, r.total == 1 ? " host" : " hosts",
        ", so the edges' hosts and processes are unknown: give the dump's "
        "folder, a .hlo.pb, or --topology=...:map=D0,D1,...");
  }
  if (r.tool_rule == ToolRule::kNoSignals) {
    return absl::StrCat(
        refused,
        "the runtime's NCCL is not known to support signals "
        "(symmetric_signals: false), and put + signal fails without them");
  }
  switch (r.kind) {
    case RefusalKind::kUnsupportedType:
      return absl::StrCat(refused, "element type ", Printable(r.type),
                          " is not one NVSHMEM puts (f64, f32, f16, bf16, s32, "
                          "s64, u32, u64); XLA's NVSHMEM permute would fail");
    case RefusalKind::kMemcpyLocalP2p:
      return absl::StrCat(refused,
                          "xla_gpu_use_memcpy_local_p2p is on, which XLA's "
                          "NVSHMEM permute refuses");
    case RefusalKind::kOutsideSharedMemory:
      return absl::StrCat(
          refused, r.count, of_total,
          "leave their host; XLA's NVSHMEM permute waits for data only in a "
          "barrier over NVSHMEM_TEAM_SHARED, one host's GPUs");
    case RefusalKind::kExceedsHeap:
      return absl::StrCat(refused, "operand and result, 2 x ", Bytes(r.bytes),
                          ", exceed the NVSHMEM symmetric heap (",
                          Bytes(r.limit), ")");
    case RefusalKind::kEdgeOutsideTeam:
      return absl::StrCat(refused, "edge (", r.devices[0], ", ", r.devices[1],
                          ") names device ", r.devices[2],
                          ", which is outside the team of ", r.total,
                          " devices");
    case RefusalKind::kDeviceWithoutSource: {
      constexpr size_t kListed = 4;
      const size_t listed = std::min(r.devices.size(), kListed);
      std::string devices =
          absl::StrJoin(r.devices.begin(), r.devices.begin() + listed, ", ");
      if (r.devices.size() > kListed) devices += ", ...";
      const bool one = r.count == 1;
      return absl::StrCat(
          refused, r.count, " of ", r.total, " devices of the program (",
          one ? "device " : "devices ", devices, ") ", one ? "has" : "have",
          " no source; a device without one skips the barrier over "
          "NVSHMEM_TEAM_SHARED, in which its host's devices with a source "
          "would hang, so the patched runtime runs such a permute on NCCL");
    }
    case RefusalKind::kTeamOutsideTopology:
      return absl::StrCat(refused, "the program's ", r.count,
                          " devices are more than the topology places (",
                          r.total, "); the team cannot be checked");
    case RefusalKind::kSeveralGroups:
      return absl::StrCat(
          refused, "its pairs apply to ", r.count,
          " groups (replicas with a channel id, else partitions), and XLA's "
          "NVSHMEM permute puts to a group's id as the PE: the groups would "
          "put to the same GPUs");
    case RefusalKind::kPlacedOffItsPe:
      return absl::StrCat(
          refused, "logical device ", r.devices[0], " runs on device ",
          r.devices[1], ", and XLA's NVSHMEM permute puts to logical id ",
          r.devices[0], " as the PE, which should be the process of device ",
          r.devices[0]);
    case RefusalKind::kLeavesHost:
      return absl::StrCat(
          refused, r.count, of_total, "leave their host; XLA runs ",
          Title(r.backend),
          " only inside one host and otherwise falls back to NCCL");
    case RefusalKind::kLocalCopy:
      return absl::StrCat(refused,
                          "every pair is a device to itself, which XLA "
                          "copies locally; the config would only place the "
                          "buffers on the symmetric heap, whose allocations "
                          "every process of the job must join");
    case RefusalKind::kHostGpusIdle: {
      const bool one = r.devices.size() == 1;
      return absl::StrCat(
          refused, "NVSHMEM's barrier spans NVSHMEM_TEAM_SHARED, all ", r.total,
          " GPUs of host ", r.count, "; ", one ? "GPU " : "GPUs ",
          DeviceRuns(r.devices), one ? " is" : " are",
          " not in the program, and with one process per GPU ",
          one ? "its PE never enters" : "their PEs never enter",
          " it: the permute would hang (a topology whose hosts hold only the "
          "program's GPUs, as --topology states it, says otherwise)");
    }
    case RefusalKind::kDestinationOffHeap:
      return absl::StrCat(
          refused,
          "XLA's buffer assignment puts its destination in allocation ",
          r.count,
          r.total >= 0
              ? absl::StrCat(", parameter ", r.total,
                             "'s buffer (a donated input), which the caller "
                             "allocated off the NVSHMEM heap")
              : std::string(", which the program returns (maybe-live-out), "
                            "and a returned buffer stays off the NVSHMEM heap"),
          "; the patched emitter puts only into heap buffers no caller sees "
          "and runs this permute on NCCL (CheckNvshmemDestination)");
    case RefusalKind::kCrossesProcesses:
      return absl::StrCat(
          refused, r.count, " of the program's ", r.total,
          " devices are outside its first device's process (",
          r.gpus_per_process, r.gpus_per_process == 1 ? " GPU" : " GPUs",
          " per process); XLA runs ", Title(r.backend),
          " only when every device of the permute's group is in one process "
          "and otherwise falls back to NCCL");
  }
  return refused;
}

namespace {

std::string GainText(double nccl_us, double us) {
  return absl::StrFormat("%.1f%%", 100.0 * (nccl_us - us) / nccl_us);
}

// Which model priced `backend` on the request's edges.
std::string ModelKind(const Topology& topology, const ToolCostTable& table,
                      const PermuteRequest& request, Backend backend) {
  size_t measured = 0;
  for (const auto& [src, dst] : request.device_edges) {
    if (HasMeasuredCurve(table, backend, topology.Classify(src, dst))) {
      ++measured;
    }
  }
  if (measured == request.device_edges.size()) return "measured curve";
  return measured == 0 ? "parametric" : "measured curve on some edges";
}

// "measured curve" when both compared backends are priced alike, else each.
std::string ModelNote(const Topology& topology, const ToolCostTable& table,
                      const PermuteRequest& request, Backend other) {
  const std::string nccl = ModelKind(topology, table, request, Backend::kNccl);
  const std::string alt = ModelKind(topology, table, request, other);
  if (nccl == alt) return nccl;
  return absl::StrCat("NCCL ", nccl, ", ", Title(other), " ", alt);
}

std::string DescribeDecision(const Topology& topology,
                             const ToolCostTable& table,
                             const PermuteRequest& request,
                             const ToolDecision& decision) {
  if (decision.verdict == Verdict::kNoEdges) {
    return "NCCL: no source-target pairs, nothing to move";
  }
  if (decision.verdict == Verdict::kZeroCost) {
    return "NCCL: modeled at 0 us, nothing to gain";
  }
  const double nccl_us = decision.nccl_us;
  const std::string size = Bytes(request.bytes);
  if (decision.verdict == Verdict::kAlternative) {
    const double us = decision.ChosenUs();
    return absl::StrCat(
        Title(decision.backend), ": all ", request.device_edges.size(),
        " edges stay in ", Info(decision.backend).edges_stay_in, "; ", size,
        " in ", Us(us), " vs NCCL ", Us(nccl_us), " (", GainText(nccl_us, us),
        " faster; ", ModelNote(topology, table, request, decision.backend),
        ")");
  }
  // NCCL kept: why each offered alternative is not taken.
  std::vector<std::string> notes;
  for (const std::optional<ToolRefusal>& refusal : decision.refused) {
    if (refusal && refusal->tool_rule != ToolRule::kNotOffered) {
      notes.push_back(RefusalText(*refusal));
    }
  }
  if (decision.verdict == Verdict::kWithinMargin) {
    const Backend best = *decision.fastest_alternative;
    const double best_us = *decision.TimeUs(best);
    notes.push_back(absl::StrFormat(
        "%s %s does not beat NCCL %s by the %.0f%% margin for %s (%s)",
        Title(best), Us(best_us), Us(nccl_us), table.core.margin * 100, size,
        ModelNote(topology, table, request, best)));
  }
  return absl::StrCat("NCCL: ", absl::StrJoin(notes, "; "));
}

}  // namespace

Place PlaceOf(bool under_conditional_branch, bool in_collectives_group) {
  if (under_conditional_branch) return Place::kConditionalBranch;
  return in_collectives_group ? Place::kCollectivesGroup : Place::kAnywhere;
}

ToolDecision Decide(const Topology& topology, const ToolCostTable& table,
                    const PermuteRequest& request, Place place) {
  ToolDecision decision;
  for (const auto& [src, dst] : request.device_edges) {
    ++decision.edges_by_class[static_cast<int>(topology.Classify(src, dst))];
  }
  // What only the tools know first (the offered set, NCCL signals); the core
  // decides over the rest.
  std::vector<Backend> candidates;
  for (int b = 1; b < kNumBackends; ++b) {
    const Backend backend = static_cast<Backend>(b);
    decision.refused[b] = OfferedAndSignaled(table, backend);
    // Where the permute sits needs no map: said before the layout's refusal.
    if (!decision.refused[b] && place == Place::kConditionalBranch) {
      decision.refused[b] = RefusedByTool(backend, ToolRule::kUnderBranch);
    } else if (!decision.refused[b] && place == Place::kCollectivesGroup &&
               backend == Backend::kNvshmem) {
      decision.refused[b] = RefusedByTool(backend, ToolRule::kInGroup);
    }
    if (!decision.refused[b] && !request.device_edges.empty()) {
      decision.refused[b] = LayoutRefusal(topology, request, backend);
    }
    if (!decision.refused[b]) candidates.push_back(backend);
  }
  static_cast<Decision&>(decision) =
      Decide(topology, table.core, request, candidates);
  if (request.device_edges.empty()) {
    decision.reason = DescribeDecision(topology, table, request, decision);
    return decision;
  }
  for (Backend backend : candidates) {
    const int b = static_cast<int>(backend);
    if (decision.refusals[b]) {
      decision.refused[b] = AsToolRefusal(*decision.refusals[b], backend,
                                          topology.gpus_per_process());
    } else if (!decision.fastest_alternative ||
               *decision.us[b] <
                   *decision.TimeUs(*decision.fastest_alternative)) {
      decision.fastest_alternative = backend;
    }
  }
  if (!decision.fastest_alternative) {
    decision.verdict = Verdict::kNoAlternative;
  } else if (!(decision.nccl_us > 0)) {
    decision.verdict = Verdict::kZeroCost;
  } else if (decision.backend != Backend::kNccl) {
    decision.verdict = Verdict::kAlternative;
  } else {
    decision.verdict = Verdict::kWithinMargin;
  }
  decision.reason = DescribeDecision(topology, table, request, decision);
  return decision;
}

std::optional<std::string> MarkWord(absl::string_view mark) {
  std::optional<std::string> word;
  for (absl::string_view part : absl::StrSplit(mark, ',')) {
    const std::string lower = absl::AsciiStrToLower(part);
    const bool known = absl::c_any_of(AllBackends(), [&](Backend backend) {
      const absl::string_view attribute = Info(backend).mode_attribute;
      return !attribute.empty() && lower == attribute;
    });
    if (!known || (word.has_value() && *word != lower)) return std::nullopt;
    word = lower;
  }
  return word;
}

void KeepUserMark(absl::string_view mark, ToolDecision& decision) {
  const std::string mode = MarkWord(mark).value_or(absl::AsciiStrToLower(mark));
  decision.backend = Backend::kNccl;
  for (Backend backend : AllBackends()) {
    const absl::string_view attribute = Info(backend).mode_attribute;
    if (!attribute.empty() && mode == attribute && decision.TimeUs(backend)) {
      decision.backend = backend;
    }
  }
  std::string why =
      absl::StrCat("marked by the user: ", mark, "; kept as marked");
  for (const std::optional<ToolRefusal>& refusal : decision.refused) {
    if (refusal && mode == Info(refusal->backend).mode_attribute) {
      absl::StrAppend(
          &why, ", though XLA keeps the flag's mode: ", RefusalText(*refusal));
    }
  }
  decision.reason = std::move(why);
}

absl::Status CheckUserMark(absl::string_view mark) {
  if (MarkWord(mark).has_value()) return absl::OkStatus();
  std::vector<std::string> known;
  for (Backend backend : AllBackends()) {
    const absl::string_view attribute = Info(backend).mode_attribute;
    if (!attribute.empty()) known.emplace_back(attribute);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "_xla_collectives_mode=\"", mark, "\" names no collectives mode (",
      absl::StrJoin(known, ", "),
      "); the patched XLA fails such a compile, and no XLA runs it"));
}

}  // namespace xla::gpu::backend_selection
