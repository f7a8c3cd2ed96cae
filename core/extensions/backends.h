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

#ifndef NVSHMEM_EXTENSIONS_BACKENDS_H_
#define NVSHMEM_EXTENSIONS_BACKENDS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_backend_selection.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_cost_table.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_topology.h"

// In the core's namespace. Where the core has a type of the kind (the cost
// table, a refusal, a decision), this layer's is the core's with what the
// tools add: ToolCostTable, ToolRefusal, ToolDecision.
namespace xla::gpu::nvshmem_selection {

// User text echoed in an error message: one line, cut short.
std::string Printable(absl::string_view s);
// Digits only, no sign or blanks, no overflow.
std::optional<int64_t> ParseCount(absl::string_view s);

// Names in cost tables and reports: same_device, nvlink, nvlink_domain,
// network.
const char* LinkClassName(LinkClass link_class);
std::optional<LinkClass> LinkClassFromName(absl::string_view name);

// The core's topology, written as a spec:
//   SLICESxHOSTSxGPUS[:OPTION]... with options
//   nvlN | nvl=N           NVLink domain of N GPUs (default: one host)
//   gpus_per_process=N     GPUs that share a process (default: see
//                          DefaultGpusPerProcess)
//   processes=P0,P1,...    the process of each device of the topology (a
//                          runtime's facts: jax's process_index of each
//                          device), in place of gpus_per_process
//   map=D0,D1,...          physical device of each logical device, where
//                          logical device r + p * num_replicas is (replica
//                          r, partition p) as XLA places them by default
// Examples: "1x2x4", "1x9x8:nvl72". Errors are InvalidArgument,
// "topology spec '<spec>': ...".
absl::StatusOr<Topology> ParseTopology(absl::string_view spec);
std::string TopologySpec(const Topology& topology);

// The process layout a spec leaves unstated, one fact for every backend: one
// GPU per process where the target XLA offers NVSHMEM (the pinned XLA runs it
// only so: its pass keeps NCCL when a process sees more GPUs), else one
// process per host (jax's default on a host, the layout peer memory needs).
int DefaultGpusPerProcess(const std::vector<Backend>& offered,
                          int gpus_per_host);
// A spec with the layout default of the `offered` backend set.
absl::StatusOr<Topology> ParseTopology(absl::string_view spec,
                                       const std::vector<Backend>& offered);
// Whether a spec states its process layout (gpus_per_process=N).
bool SpecStatesProcesses(absl::string_view spec);
// The process layout in words, with why where it is the default:
// "processes of 1 GPU (the default where the target XLA offers NVSHMEM ...)".
std::string ProcessLayoutText(const Topology& topology, bool stated,
                              const std::vector<Backend>& offered);
// `topology` with the layout default of `offered` where it has one host per
// process by default (a topology derived from a module states none).
Topology WithDefaultProcesses(const Topology& topology,
                              const std::vector<Backend>& offered);

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

double EdgeTimeUs(const ToolCostTable& table, Backend backend,
                  LinkClass link_class, int64_t bytes, int buffers = 1);
bool HasMeasuredCurve(const ToolCostTable& table, Backend backend,
                      LinkClass link_class);

// Why a backend may not run a permute: one of the core's rules (its
// RefusalKind and details), or a rule only the tools know.
enum class ToolRule {
  kNone,                   // The core's rule.
  kNotOffered,             // The target XLA does not offer it (`offered`).
  kNoSignals,              // Symmetric memory without NCCL signals.
  kInGroup,                // NVSHMEM in a collectives group.
  kUnderBranch,            // Under a conditional's branch.
  kSeveralGpusPerProcess,  // NVSHMEM where a process drives `count` GPUs.
  kPlacementUnknown,       // No map, and the program spans `count` processes
                      // over `total` hosts: where each device runs decides.
};
struct ToolRefusal : Refusal {
  Backend backend = Backend::kNccl;
  ToolRule tool_rule = ToolRule::kNone;
  int gpus_per_process = 0;
  std::vector<Backend> offered;
};

std::string RefusalText(const ToolRefusal& refusal);

// What the program's layout refuses a one-sided backend, or nullopt: NVSHMEM
// where a process drives several GPUs, and any of them where no map says
// which device runs each logical device while the program spans several
// processes or hosts (then every edge's class and process, and NVSHMEM's PE
// for each id, rest on the unknown order).
std::optional<ToolRefusal> LayoutRefusal(const Topology& topology,
                                         const PermuteRequest& request,
                                         Backend backend);

// A refusal of the core's (NvshmemHang, NvshmemPeMismatch, ...) as the tools
// say it: of `backend`, in a layout of `gpus_per_process` GPUs per process.
ToolRefusal AsToolRefusal(const Refusal& refusal,
                          Backend backend = Backend::kNvshmem,
                          int gpus_per_process = 0);

enum class Verdict {
  kNoEdges,        // Nothing to move: NCCL.
  kNoAlternative,  // No alternative allowed: NCCL.
  kZeroCost,       // NCCL modeled at 0: NCCL.
  kWithinMargin,   // The fastest alternative does not beat NCCL by the margin.
  kAlternative,    // The fastest alternative wins.
};

// The core's decision (backend, NCCL's time, each alternative's time or
// refusal) with what the tools add: the verdict, every backend's refusal
// including the tools' own rules, the edge counts and the one-line reason.
struct ToolDecision : Decision {
  Verdict verdict = Verdict::kNoEdges;
  std::optional<Backend> fastest_alternative;
  std::array<std::optional<ToolRefusal>, kNumBackends> refused;
  std::array<int, kNumLinkClasses> edges_by_class = {0, 0, 0, 0};
  std::string reason;  // One line.

  // A backend's modeled time: NCCL's always, another's unless refused.
  std::optional<double> TimeUs(Backend backend) const {
    if (backend == Backend::kNccl) return nccl_us;
    return us[static_cast<int>(backend)];
  }
  double ChosenUs() const { return *TimeUs(backend); }
};

// Where a permute sits, as far as the patched XLAs' rules go: NVSHMEM's thunk
// cannot run in a collectives group, and no one-sided backend under a
// conditional's branch, where devices may run other permutes.
enum class Place { kAnywhere, kCollectivesGroup, kConditionalBranch };

// The core's rule over NVSHMEM, peer and symmetric: the fastest allowed
// alternative when it beats NCCL by the margin (ties to the first).
ToolDecision Decide(const Topology& topology, const ToolCostTable& table,
                    const PermuteRequest& request,
                    Place place = Place::kAnywhere);

// A user's _xla_collectives_mode mark is law: the decision becomes the mark's
// backend (peer or symmetric where the core models it, else NCCL, private's
// path: where the permute cannot run the mode, XLA keeps the flag's, private by
// default), and the reason says so.
void KeepUserMark(absl::string_view mark, ToolDecision& decision);

// The frontend attribute that names a permute's mode (the patched XLA's
// assigner reads it), and the one the tools write beside it with the same value
// when the mode is their own choice: an _xla_collectives_mode that the second
// matches is the tools' choice, which a later run decides again; any other is
// the user's mark, which is law.
inline constexpr absl::string_view kModeAttribute = "_xla_collectives_mode";
inline constexpr absl::string_view kToolsModeAttribute = "_nvshmem_opt_mode";

// The mode word a mark names, lower case, as the patched assigner parses it:
// comma-joined parts (a combiner joins its permutes' values), each a backend's
// mode attribute in any case, all the same; nullopt where none or two.
std::optional<std::string> MarkWord(absl::string_view mark);

// InvalidArgument, naming the value, for a mark that names no collectives mode
// (MarkWord): the patched XLA's assigner fails such a compile, and no XLA runs
// it, so every tool refuses it too.
absl::Status CheckUserMark(absl::string_view mark);

}  // namespace xla::gpu::nvshmem_selection

#endif  // NVSHMEM_EXTENSIONS_BACKENDS_H_
