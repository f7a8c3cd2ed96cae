// The project's decision: the core's Choose over NVSHMEM, peer and symmetric
// (the core's rules for NVSHMEM, this layer's for the others), and the
// one-line reason the tools show.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "extensions/backends.h"

namespace nvshmem_ext {
namespace {

constexpr const char* kBackendTitles[kNumBackends] = {"NCCL", "NVSHMEM", "peer",
                                                      "symmetric"};

std::string Title(Backend backend) {
  return kBackendTitles[static_cast<int>(backend)];
}

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

Refusal MakeRefusal(Backend backend, RefusalKind kind) {
  Refusal refusal;
  refusal.backend = backend;
  refusal.kind = kind;
  return refusal;
}

Refusal FromCore(const core::Refusal& r) {
  Refusal refusal = MakeRefusal(Backend::kNvshmem, RefusalKind::kExceedsHeap);
  switch (r.kind) {
    case core::RefusalKind::kExceedsHeap:
      break;
    case core::RefusalKind::kEdgeOutsideTeam:
      refusal.kind = RefusalKind::kEdgeOutsideTeam;
      break;
    case core::RefusalKind::kDeviceWithoutSource:
      refusal.kind = RefusalKind::kDeviceWithoutSource;
      break;
    case core::RefusalKind::kTeamOutsideTopology:
      refusal.kind = RefusalKind::kTeamOutsideTopology;
      break;
  }
  refusal.count = r.kind == core::RefusalKind::kEdgeOutsideTeam ? 0 : r.count;
  refusal.total = r.total;
  refusal.devices = r.devices;
  refusal.bytes = r.bytes;
  refusal.limit = r.limit;
  return refusal;
}

// Peer and symmetric memory run only among one process's GPUs of one host.
std::optional<Refusal> CheckOneProcess(const Topology& topology,
                                       const PermuteRequest& request,
                                       Backend backend) {
  const auto& edges = request.device_edges;
  auto count = [&](auto differ) {
    return static_cast<int>(
        absl::c_count_if(edges, [&](const std::pair<int, int>& e) {
          return differ(e.first) != differ(e.second);
        }));
  };
  const int off_host = count([&](int d) { return topology.HostOf(d); });
  const int off_process = count([&](int d) { return topology.ProcessOf(d); });
  if (off_host == 0 && off_process == 0) return std::nullopt;
  Refusal refusal =
      MakeRefusal(backend, off_host > 0 ? RefusalKind::kLeavesHost
                                        : RefusalKind::kCrossesProcesses);
  refusal.count = off_host > 0 ? off_host : off_process;
  refusal.total = static_cast<int>(edges.size());
  refusal.gpus_per_process = topology.gpus_per_process();
  return refusal;
}

}  // namespace

std::optional<Refusal> NvshmemHang(
    const std::vector<std::pair<int, int>>& device_edges,
    const std::vector<int>& team) {
  std::optional<core::Refusal> hang = core::NvshmemHang(device_edges, team);
  if (!hang) return std::nullopt;
  return FromCore(*hang);
}

std::optional<Refusal> CheckSafety(const Topology& topology,
                                   const CostTable& table,
                                   const PermuteRequest& request,
                                   Backend backend) {
  if (backend == Backend::kNccl) return std::nullopt;
  if (!absl::c_linear_search(table.backends, backend)) {
    Refusal refusal = MakeRefusal(backend, RefusalKind::kNotOffered);
    refusal.offered = table.backends;
    return refusal;
  }
  if (backend == Backend::kNvshmem) {
    std::optional<core::Refusal> refusal =
        core::CheckNvshmem(topology, table.core, request);
    if (!refusal) return std::nullopt;
    return FromCore(*refusal);
  }
  if (backend == Backend::kSymmetric && !table.symmetric_signals) {
    return MakeRefusal(backend, RefusalKind::kNoSignals);
  }
  return CheckOneProcess(topology, request, backend);
}

std::string RefusalText(const Refusal& r) {
  const std::string refused =
      absl::StrCat(BackendName(r.backend), " refused: ");
  const std::string of_total = absl::StrCat(" of ", r.total, " edges ");
  switch (r.kind) {
    case RefusalKind::kNotOffered:
      return absl::StrCat(refused, "not offered by the target XLA (backends ",
                          BackendSetToString(r.offered), ")");
    case RefusalKind::kExceedsHeap:
      return absl::StrCat(refused, Bytes(r.bytes),
                          " exceeds the NVSHMEM symmetric heap (",
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
          refused, r.count, " of ", r.total, " devices of the team (",
          one ? "device " : "devices ", devices, ") ", one ? "has" : "have",
          " no source; XLA's NVSHMEM permute would hang in its "
          "barrier");
    }
    case RefusalKind::kTeamOutsideTopology:
      return absl::StrCat(refused, "the program's ", r.count,
                          " devices are more than the topology places (",
                          r.total, "); the team cannot be checked");
    case RefusalKind::kNoSignals:
      return absl::StrCat(
          refused,
          "the runtime's NCCL is not known to support signals "
          "(symmetric_signals: false), and put + signal fails without them");
    case RefusalKind::kLeavesHost:
      return absl::StrCat(
          refused, r.count, of_total,
          "leave their host; XLA copies through peer memory only inside "
          "one host and otherwise falls back to NCCL");
    case RefusalKind::kCrossesProcesses:
      return absl::StrCat(
          refused, r.count, of_total, "join GPUs of different processes (",
          r.gpus_per_process, r.gpus_per_process == 1 ? " GPU" : " GPUs",
          " per process); XLA copies through peer memory only among one "
          "process's GPUs and otherwise falls back to NCCL");
  }
  return refused;
}

namespace {

std::string GainText(double nccl_us, double us) {
  return absl::StrFormat("%.1f%%", 100.0 * (nccl_us - us) / nccl_us);
}

// Which model priced `backend` on the request's edges.
std::string ModelKind(const Topology& topology, const CostTable& table,
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
std::string ModelNote(const Topology& topology, const CostTable& table,
                      const PermuteRequest& request, Backend other) {
  const std::string nccl = ModelKind(topology, table, request, Backend::kNccl);
  const std::string alt = ModelKind(topology, table, request, other);
  if (nccl == alt) return nccl;
  return absl::StrCat("NCCL ", nccl, ", ", Title(other), " ", alt);
}

// Where the chosen backend's edges run.
std::string WhereText(const CostTable& table, const Decision& decision) {
  const int network =
      decision.edges_by_class[static_cast<int>(LinkClass::kNetwork)];
  if (decision.backend != Backend::kNvshmem) return " edges stay in one host";
  if (network == 0) return " edges stay in an NVLink domain";
  return absl::StrCat(" edges, ", network, " across the network (",
                      NvshmemTransportName(table.core.nvshmem_transport), ")");
}

std::string DescribeDecision(const Topology& topology, const CostTable& table,
                             const PermuteRequest& request,
                             const Decision& decision) {
  if (decision.verdict == Verdict::kNoEdges) {
    return "NCCL: no source-target pairs, nothing to move";
  }
  if (decision.verdict == Verdict::kZeroCost) {
    return "NCCL: modeled at 0 us, nothing to gain";
  }
  const double nccl_us = *decision.backend_us[static_cast<int>(Backend::kNccl)];
  const std::string size = Bytes(request.bytes);
  if (decision.verdict == Verdict::kAlternative) {
    const double us = decision.chosen_us;
    return absl::StrCat(
        Title(decision.backend), ": all ", request.device_edges.size(),
        WhereText(table, decision), "; ", size, " in ", Us(us), " vs NCCL ",
        Us(nccl_us), " (", GainText(nccl_us, us), " faster; ",
        ModelNote(topology, table, request, decision.backend), ")");
  }
  // NCCL kept: why each offered alternative is not taken.
  std::vector<std::string> notes;
  for (const std::optional<Refusal>& refusal : decision.refused) {
    if (refusal && refusal->kind != RefusalKind::kNotOffered) {
      notes.push_back(RefusalText(*refusal));
    }
  }
  if (decision.verdict == Verdict::kWithinMargin) {
    const Backend best = *decision.fastest_alternative;
    const double best_us = *decision.backend_us[static_cast<int>(best)];
    notes.push_back(absl::StrFormat(
        "%s %s does not beat NCCL %s by the %.0f%% margin for %s (%s)",
        Title(best), Us(best_us), Us(nccl_us), table.core.margin * 100, size,
        ModelNote(topology, table, request, best)));
  }
  return absl::StrCat("NCCL: ", absl::StrJoin(notes, "; "));
}

}  // namespace

Decision Decide(const Topology& topology, const CostTable& table,
                const PermuteRequest& request) {
  Decision decision;
  for (const auto& [src, dst] : request.device_edges) {
    ++decision.edges_by_class[static_cast<int>(topology.Classify(src, dst))];
  }
  auto time_on = [&](Backend backend) -> core::EdgeTimeFn {
    return [&table, &request, backend](LinkClass link_class) {
      return EdgeTimeUs(table, backend, link_class, request.bytes,
                        request.buffers);
    };
  };
  // Candidates in backend order: ties go to the first, as they always did.
  std::vector<core::Candidate> candidates;
  if (!request.device_edges.empty()) {
    for (int b = 1; b < kNumBackends; ++b) {
      const Backend backend = static_cast<Backend>(b);
      decision.refused[b] = CheckSafety(topology, table, request, backend);
      candidates.push_back({time_on(backend), !decision.refused[b]});
    }
  }
  const core::Choice choice =
      core::Choose(topology, request, time_on(Backend::kNccl), candidates,
                   table.core.margin);
  decision.verdict = choice.verdict;
  decision.backend_us[0] = choice.nccl_us;
  decision.chosen_us = choice.nccl_us;
  for (size_t i = 0; i < choice.candidate_us.size(); ++i) {
    decision.backend_us[i + 1] = choice.candidate_us[i];
  }
  if (choice.fastest) {
    decision.fastest_alternative = static_cast<Backend>(*choice.fastest + 1);
  }
  if (choice.chosen) {
    decision.backend = static_cast<Backend>(*choice.chosen + 1);
    decision.chosen_us = *choice.candidate_us[*choice.chosen];
  }
  decision.reason = DescribeDecision(topology, table, request, decision);
  return decision;
}

}  // namespace nvshmem_ext
