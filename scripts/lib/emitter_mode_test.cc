// What a collectives-mode series adds to XLA's thunk emitter, run against the
// XLA of a tensorflow wheel (scripts/check_series_upstream.sh builds it).
//
// thunk_emitter.cc needs the commit's LLVM and MLIR, which no wheel carries,
// so the emitter cannot be compiled whole. The script cuts what the series
// adds to it into three files: the new function (emitter_function.inc), the
// new statements at the call (emitter_statements.inc) and the changed
// arguments of the thunk's construction (emitter_arguments.inc). Here they
// are compiled with the names the emitter gives them. A module is legalized by
// the series' CollectiveBackendAssigner (the patched source, linked in), and
// each permute gets the mode that the emitter's lines pass as the thunk's
// collectives_mode (the constructor's argument before the last,
// collective_permute_thunk.h). The thunk's own headers reach LLVM and MLIR
// (thunk.h includes ir_emission_utils.h), which no wheel carries:
// CollectiveThunk is reduced here to its CollectivesMode, IrEmitterContext to
// its debug_options(), and the thunk is not built.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
// As XLA's build, for the unqualified macros older commits use.
#define ABSL_DEFINE_UNQUALIFIED_STATUS_MACROS 1
#include "absl/status/status_macros.h"
#include "xla/backends/gpu/transforms/collectives/collective_backend_assigner.h"
#include "xla/hlo/ir/hlo_casting_utils.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/parser/hlo_parser.h"
#include "xla/service/gpu/backend_configs.pb.h"
#include "xla/tsl/platform/statusor.h"
#include "xla/xla.pb.h"

namespace xla::gpu {

struct CollectiveThunk {
  using CollectivesMode = DebugOptions::CollectivesMode;
};

namespace {
#include "emitter_function.inc"
}  // namespace

struct IrEmitterContext {
  DebugOptions options;
  const DebugOptions& debug_options() const { return options; }
};

// The emitter's lines, where EmitCollective has `inst` for the permute (at
// older commits, EmitCollectivePermute has `instr` and `async_start`).
absl::StatusOr<CollectiveThunk::CollectivesMode> Emit(
    const HloCollectivePermuteInstruction* inst,
    const IrEmitterContext* ir_emitter_context_) {
  const HloCollectivePermuteInstruction* instr = inst;
  const HloInstruction* async_start = inst;
  int info = 0;
  int64_t replica_count = inst->GetModule()->config().replica_count();
  int64_t partition_count = inst->GetModule()->config().num_partitions();
  std::vector<int> buffers;
#include "emitter_statements.inc"
  // The changed arguments end before connected_components_enabled: their
  // last is the thunk's collectives_mode.
  auto arguments = std::make_tuple(
#include "emitter_arguments.inc"
      0);
  return std::get<std::tuple_size_v<decltype(arguments)> - 2>(arguments);
}

absl::StatusOr<DebugOptions::CollectivesMode> ThunkMode(
    HloModule* module, const char* name, DebugOptions::CollectivesMode flag) {
  IrEmitterContext context{module->config().debug_options()};
  context.options.set_xla_gpu_collective_permute_mode(flag);
  auto* permute = Cast<HloCollectivePermuteInstruction>(
      module->entry_computation()->GetInstructionWithName(name));
  return Emit(permute, &context);
}

constexpr char kRing[] = R"(
HloModule m, replica_count=2

ENTRY main {
  p = f32[8] parameter(0)
  marked = f32[8] collective-permute(p), source_target_pairs={{0,1},{1,0}},
    frontend_attributes={_xla_collectives_mode="peer"}
  plain = f32[8] collective-permute(p), source_target_pairs={{0,1},{1,0}}
  ROOT t = (f32[8], f32[8]) tuple(marked, plain)
})";

TEST(EmitterModeTest, MarkedPermuteThunkTakesItsOwnMode) {
  for (auto flag : {DebugOptions::COLLECTIVES_SYMMETRIC_MEMORY,
                    DebugOptions::COLLECTIVES_PRIVATE_MEMORY}) {
    auto module = ParseAndReturnUnverifiedModule(kRing);
    ASSERT_TRUE(module.ok()) << module.status();
    (*module)
        ->mutable_config()
        .mutable_debug_options()
        .set_xla_gpu_collective_permute_mode(flag);
    ASSERT_TRUE(CollectiveBackendAssigner().Run(module->get()).ok());
    auto marked = ThunkMode(module->get(), "marked", flag);
    auto plain = ThunkMode(module->get(), "plain", flag);
    ASSERT_TRUE(marked.ok() && plain.ok());
    EXPECT_EQ(*marked, DebugOptions::COLLECTIVES_PEER_MEMORY);
    EXPECT_EQ(*plain, flag);
  }
}

TEST(EmitterModeTest, UnparsableBackendConfigIsAnError) {
  auto module = ParseAndReturnUnverifiedModule(R"(
HloModule m, replica_count=2

ENTRY main {
  p = f32[8] parameter(0)
  ROOT cp = f32[8] collective-permute(p), source_target_pairs={{0,1},{1,0}},
    backend_config="{not json"
})");
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_FALSE(
      ThunkMode(module->get(), "cp", DebugOptions::COLLECTIVES_PEER_MEMORY)
          .ok());
}

}  // namespace xla::gpu
