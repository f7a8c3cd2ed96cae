// The tools' layer over the core's backends (NCCL, NVSHMEM, and peer and
// symmetric memory, the permute paths of XLA newer than the pin: jax >=
// 0.10.2, collectives_mode). The pass at the pin decides NCCL or NVSHMEM,
// the one at jax 0.11.0's XLA NCCL or peer; the tools (nvshmem-opt, the
// Python binding, the fuzzers) decide over a set of them through this layer,
// which adds what only a tool knows (the offered set, NCCL signals, the
// spec grammar, one-line reasons) to the core's rules, time model and margin.
//
//   peer       every edge inside one host and one process (the topology's
//              gpus_per_process): XLA copies into the target's buffer with
//              CUDA peer access among the calling process's devices, and
//              otherwise falls back to NCCL.
//   symmetric  as peer, and the runtime's NCCL supports signals
//              (symmetric_signals: true): put + signal fails without them.
//
// The cost table is CostTableProto (cost_table.proto) in text format: the
// core's entries, plus PEER and SYMMETRIC ones, `backends` and
// `symmetric_signals`, which are this layer's.
//
// Each unit has its header: this one (the backend records, the backend set,
// ToolCostTable and its edge times, which the others share), topology_spec.h
// (the spec grammar), table_text.h (the table's text), decide.h (the decision,
// its refusals and reason, a user's mark) and partitions.h (a module's
// partition count).

#ifndef NVSHMEM_TOOL_LAYER_BACKENDS_H_
#define NVSHMEM_TOOL_LAYER_BACKENDS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/backend_cost_table.h"
#include "xla/backends/gpu/transforms/collectives/cluster_topology.h"
#include "xla/backends/gpu/transforms/collectives/permute_backend_selection.h"

// In the core's namespace. Where the core has a type of the kind (the cost
// table, a refusal, a decision), this layer's is the core's with what the
// tools add: ToolCostTable (here), ToolRefusal and ToolDecision (decide.h).
namespace xla::gpu::backend_selection {

// Names in cost tables and reports: same_device, nvlink, nvlink_domain,
// network.
const char* LinkClassName(LinkClass link_class);
std::optional<LinkClass> LinkClassFromName(absl::string_view name);

// Everything the tools say or write about a backend, in one place: its name,
// how people call it, what choosing it writes into a collective-permute, and
// the XLA that runs it. Python reads the same records through the binding.
struct BackendInfo {
  const char* name;   // In backend sets, tables and reports: "peer".
  const char* label;  // For people: "peer memory".
  // collective_backend_config.backend, and .collectives_mode ("": none; the
  // driver then clears a mode already there).
  const char* config_backend;
  const char* collectives_mode;
  // The _xla_collectives_mode frontend attribute ("": none; NCCL writes
  // "private" only over an attribute already there).
  const char* mode_attribute;
  const char* runtime;  // The XLA that runs it.
  // Where its runtime keeps a permute's edges, as a reason says it: "one
  // host" (CheckBackend's rule; "": NCCL, any devices).
  const char* edges_stay_in;
  // What its runtime needs of a permute, with the code that says so; where
  // its built-in curve was measured.
  const char* rule;
  const char* curve;
};
const BackendInfo& Info(Backend backend);

// Every backend of the core, in its order.
std::vector<Backend> AllBackends();
std::optional<Backend> BackendFromName(absl::string_view name);

// "nccl,nvshmem", "nccl,peer", "nccl,peer,symmetric": NCCL always, NVSHMEM
// never with peer/symmetric (no XLA offers both).
absl::StatusOr<std::vector<Backend>> ParseBackendSet(absl::string_view text);
std::string BackendSetToString(const std::vector<Backend>& backends);

// The core's table and what the tools plan over.
struct ToolCostTable {
  CostTable core;
  std::vector<Backend> backends = {Backend::kNccl, Backend::kNvshmem};
  bool symmetric_signals = false;

  const LinkCost& link(Backend backend, LinkClass link_class) const;
  LinkCost& link(Backend backend, LinkClass link_class);
  const std::vector<CurvePoint>& curve(Backend backend,
                                       LinkClass link_class) const;
  double sm_interference(Backend backend) const;
};

double EdgeTimeUs(const ToolCostTable& table, Backend backend,
                  LinkClass link_class, int64_t bytes, int buffers = 1);
bool HasMeasuredCurve(const ToolCostTable& table, Backend backend,
                      LinkClass link_class);

}  // namespace xla::gpu::backend_selection

#endif  // NVSHMEM_TOOL_LAYER_BACKENDS_H_
