// Replica groups in the mesh form that jaxlib >= 0.10 prints and the
// TensorFlow wheel's XLA cannot parse, rewritten as the explicit list form
// both read:
//   replica_groups=mesh['cp'=4,'tp'=2] {'cp'}
//   replica_groups={{0,2,4,6},{1,3,5,7}}
// A mesh may carry device_ids (a list, or an iota "[4,16]T(1,0)") and axes
// may be sub-axes ('a':(2)4: 4 devices of 'a' with stride 2).
//
// Devices are the mesh's device ids laid out row-major over its axes; a group
// is every device that differs only along the chosen (sub-)axes, enumerated
// in the order the axes are listed.

#ifndef NVSHMEM_OPT_DRIVER_MESH_GROUPS_H_
#define NVSHMEM_OPT_DRIVER_MESH_GROUPS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace nvshmem_opt {

// The groups of one mesh form (the text after "replica_groups=", up to and
// including the closing '}' of the axis list); nullopt when it is not a
// well-formed mesh form. `length` gets how many characters it spans.
std::optional<std::vector<std::vector<int64_t>>> ExpandMeshGroups(
    absl::string_view text, size_t* length);

// Every "replica_groups=mesh[...] {...}" outside quoted strings, in explicit
// form; the rest of the text is unchanged and stays on the same lines.
// `rewritten` gets how many were rewritten.
std::string ExplicitReplicaGroups(const std::string& text, int* rewritten);

}  // namespace nvshmem_opt

#endif  // NVSHMEM_OPT_DRIVER_MESH_GROUPS_H_
