#include "tool_layer/backends.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "tool_layer/topology_spec.h"

namespace xla::gpu::backend_selection {
namespace {

constexpr const char* kLinkClassNames[kNumLinkClasses] = {
    "same_device", "nvlink", "nvlink_domain", "network"};

constexpr BackendInfo kBackends[kNumBackends] = {
    {"nccl", "NCCL", "DEFAULT", "", "private", "every XLA", "",
     "NCCL: any permute; a device without a source gets zeros.",
     "2x H200 NVLink, XLA of jax 0.9.1 (one process per GPU)"},
    {"nvshmem", "NVSHMEM", "NVSHMEM", "", "", "XLA up to jax 0.10.1",
     "one host",
     "NVSHMEM (pinned XLA 3cc8846c): element types F64, F32, F16, BF16, "
     "S32, S64, U32, U64 only (nvshmem_communicator.cc:367, else "
     "'Invalid NVSHMEM send type' at :442); every edge inside one host, "
     "since the receive side waits with "
     "nvshmemx_barrier_on_stream(NVSHMEM_TEAM_SHARED) (:179), the PEs of "
     "one shared-memory domain, so a receiver on another host does not "
     "wait for the put; every device of that team needs a source, or the "
     "barrier, entered only by devices with one, hangs (the patched "
     "emitter asks it of every device of the program); the pairs must be "
     "one group and logical device i device i, since the thunk puts to an "
     "id as the PE (:185), process i (nvshmem.cc:104); the message must "
     "fit the symmetric heap; xla_gpu_use_memcpy_local_p2p must be off "
     "(InvalidArgument at nvshmem_collective_permute_thunk.cc:118; a "
     "flag, not visible in the HLO); each process must drive one GPU "
     "(LOG(FATAL) at nvshmem.cc:76; the XLA pass keeps NCCL when a process "
     "sees more); xla_gpu_experimental_enable_nvshmem must be in XLA_FLAGS "
     "too, which NVSHMEM's set-up reads (cuda_platform.cc:127), and the "
     "destination must be XLA's collective memory, never a donated "
     "parameter (the caller's, outside the heap), and no buffer of that "
     "memory may be live out (a put lands at the sender's heap offset, and "
     "each process frees an output when its caller does): the patched "
     "emitter keeps NCCL otherwise. Some pair must leave its device: "
     "with none the emitter copies locally (thunk_emitter.cc:1529) while "
     "the config still places the buffers on the heap, whose set-up and "
     "allocations every process of the job joins, so the program must "
     "span the job.",
     "2x H200 NVLink, XLA of jax 0.9.1 (one process per GPU)"},
    {"peer", "peer memory", "DEFAULT", "COLLECTIVES_PEER_MEMORY", "peer",
     "XLA of jax >= 0.10.2", "one process",
     "peer memory (XLA of jax 0.10.2, 5a9e73cb): every device of the "
     "permute driven by one process (GpuCliqueKey::is_local, "
     "gpu_clique_key.h:98, tested at collective_permute_thunk.cc:317) "
     "with peer access enabled (:320), else XLA runs NCCL (:329); the "
     "clique is every device of the group unless "
     "xla_gpu_collective_permute_connected_components is set, so the core "
     "prices it only for a program inside one process. Any element type "
     "(a byte copy, :456); a device without a source gets zeros (:472), "
     "so no source is needed for every device. Never under a "
     "conditional's branch: the copy goes to the peer's copy of the "
     "sender's own destination (collective_memory.cc FindPeerAddress, at "
     "131bf41a), which a device on the other branch does not read.",
     "2x H200 NVLink, XLA of jax 0.11.2 (one process for both GPUs)"},
    {"symmetric", "symmetric memory", "DEFAULT", "COLLECTIVES_SYMMETRIC_MEMORY",
     "symmetric", "XLA of jax >= 0.10.2", "one process",
     "symmetric memory (XLA of jax 0.10.2, 5a9e73cb): every device of "
     "the permute driven by one process "
     "(collective_permute_thunk.cc:309, else NCCL at :329) and an NCCL "
     "with one-sided signals (nccl_communicator.cc:870; "
     "symmetric_signals in the cost table); the core prices it only "
     "for a program inside one process. Any element type (a byte put, "
     ":559); a device without a source gets zeros (:570). Never under a "
     "conditional's branch: the put goes to the peer's window of the "
     "sender's own destination (collective_memory.cc FindSymmetricMemory, "
     "at 131bf41a).",
     "none: NCCL's numbers (it did not run without NCCL signals)"}};

}  // namespace

const char* LinkClassName(LinkClass link_class) {
  return kLinkClassNames[static_cast<int>(link_class)];
}

std::optional<LinkClass> LinkClassFromName(absl::string_view name) {
  for (int i = 0; i < kNumLinkClasses; ++i) {
    if (name == kLinkClassNames[i]) return static_cast<LinkClass>(i);
  }
  return std::nullopt;
}

const BackendInfo& Info(Backend backend) {
  return kBackends[static_cast<int>(backend)];
}

std::vector<Backend> AllBackends() {
  std::vector<Backend> all;
  for (int b = 0; b < kNumBackends; ++b) all.push_back(static_cast<Backend>(b));
  return all;
}

std::optional<Backend> BackendFromName(absl::string_view name) {
  for (Backend backend : AllBackends()) {
    if (name == BackendName(backend)) return backend;
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<Backend>> ParseBackendSet(absl::string_view text) {
  std::vector<Backend> backends;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    std::optional<Backend> backend = BackendFromName(item);
    if (!backend) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown backend '", Printable(item), "' in backend set (",
          absl::StrJoin(
              AllBackends(), ", ",
              [](std::string* out, Backend b) { out->append(BackendName(b)); }),
          ")"));
    }
    if (absl::c_linear_search(backends, *backend)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "backend '", BackendName(*backend), "' named twice in backend set"));
    }
    backends.push_back(*backend);
  }
  auto has = [&](Backend b) { return absl::c_linear_search(backends, b); };
  if (!has(Backend::kNccl)) {
    return absl::InvalidArgumentError(
        absl::StrCat("backend set '", Printable(text),
                     "' lacks nccl, the default every XLA runs"));
  }
  // One XLA runs every backend of a set: NCCL, which all run, and others of
  // one runtime.
  for (Backend a : backends) {
    for (Backend b : backends) {
      if (a != Backend::kNccl && b != Backend::kNccl &&
          absl::string_view(Info(a).runtime) != Info(b).runtime) {
        return absl::InvalidArgumentError(absl::StrCat(
            "backend set '", Printable(text), "' mixes ", BackendName(a), " (",
            Info(a).runtime, ") with ", BackendName(b), " (", Info(b).runtime,
            "); no XLA offers both"));
      }
    }
  }
  absl::c_sort(backends);  // Canonical order, so that text round-trips.
  return backends;
}

std::string BackendSetToString(const std::vector<Backend>& backends) {
  return absl::StrJoin(backends, ",", [](std::string* out, Backend backend) {
    out->append(BackendName(backend));
  });
}

const LinkCost& ToolCostTable::link(Backend b, LinkClass c) const {
  return core.link(b, c);
}
LinkCost& ToolCostTable::link(Backend b, LinkClass c) {
  return core.links[static_cast<int>(b)][static_cast<int>(c)];
}
const std::vector<CurvePoint>& ToolCostTable::curve(Backend b,
                                                    LinkClass c) const {
  return core.curve(b, c);
}
double ToolCostTable::sm_interference(Backend b) const {
  return core.sm_interference[static_cast<int>(b)];
}

double EdgeTimeUs(const ToolCostTable& table, Backend backend,
                  LinkClass link_class, int64_t bytes, int buffers) {
  return EdgeTimeUs(table.core, backend, link_class, bytes, buffers);
}

bool HasMeasuredCurve(const ToolCostTable& table, Backend backend,
                      LinkClass link_class) {
  return !table.curve(backend, link_class).empty();
}

}  // namespace xla::gpu::backend_selection
