// Writing a collective-permute's backend choice into its backend_config for
// the out-of-tree build, whose XLA (the tensorflow wheel's) is older than the
// modules it reads.
//
// HLO from jax >= 0.10.2 carries fields this XLA's GpuBackendConfig does not
// know ("collectives_mode", "kernel_strategy", ...); parsing it through the
// proto fails, and re-printing it would drop them. So this edits the JSON text
// itself, keeping every other field and the key order. Not part of the XLA
// patch: an XLA built from source knows every field of its own modules and
// uses the pass's default writer (backend_config<GpuBackendConfig>()).

#ifndef NVSHMEM_OPT_DRIVER_BACKEND_CONFIG_JSON_H_
#define NVSHMEM_OPT_DRIVER_BACKEND_CONFIG_JSON_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tool_layer/backends.h"
#include "xla/hlo/ir/hlo_instruction.h"

namespace nvshmem_opt {

// OK when `raw`, a backend_config as read, is empty or a JSON object this
// file can edit; else InvalidArgument naming where it goes wrong
// ("backend_config is not valid JSON: ')' at character 96 of it"). XLA's
// parser takes any brace-balanced text there; the GPU compiler and the pass
// need JSON.
absl::Status CheckBackendConfigJson(absl::string_view raw);

// Sets collective_backend_config.backend ("DEFAULT" or "NVSHMEM") and, for
// the peer and symmetric backends of jax >= 0.10.2's XLA, collectives_mode
// (COLLECTIVES_PEER_MEMORY / COLLECTIVES_SYMMETRIC_MEMORY; NCCL resets a
// present mode to COLLECTIVES_MODE_INVALID, i.e. unset), and the frontend
// attribute _xla_collectives_mode (peer, symmetric; NCCL: private where the op
// has one). Returns whether the text changed; InvalidArgument when the config
// is not a JSON object.
absl::StatusOr<bool> SetBackendInJson(
    xla::HloInstruction* instr, xla::gpu::backend_selection::Backend backend);

// The backend the op's config selects, as the runtime reads it: NVSHMEM by
// collective_backend_config.backend, peer or symmetric memory by its
// collectives_mode, NCCL otherwise; nullopt for a config that is no JSON
// object or a mode no backend of the core writes (private memory).
std::optional<xla::gpu::backend_selection::Backend> BackendInJson(
    const xla::HloInstruction& instr);

}  // namespace nvshmem_opt

#endif  // NVSHMEM_OPT_DRIVER_BACKEND_CONFIG_JSON_H_
