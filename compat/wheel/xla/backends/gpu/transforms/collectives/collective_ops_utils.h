// Out-of-tree build only: the tensorflow wheel's XLA keeps these helpers under
// xla/service/gpu/transforms/collectives/, where the pinned XLA has them under
// xla/backends/gpu/transforms/collectives/. Inside an XLA tree the real header
// is found first.
#ifndef WHEEL_COMPAT_XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_COLLECTIVE_OPS_UTILS_H_
#define WHEEL_COMPAT_XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_COLLECTIVE_OPS_UTILS_H_

#include "xla/service/gpu/transforms/collectives/collective_ops_utils.h"  // IWYU pragma: export

#endif  // WHEEL_COMPAT_XLA_BACKENDS_GPU_TRANSFORMS_COLLECTIVES_COLLECTIVE_OPS_UTILS_H_
