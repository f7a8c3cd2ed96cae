"""Mutants of the pinned series written by an independent reader, kept apart from
scripts/mutation_check_series.py until each is killed: on 2026-12-06, 12 of 21 were
killed and 9 survived (review-heap-start-exception, review-team-error-swallowed,
review-target-none-before-check, and the six review-wire-* patch mutants, whose lines no
check of tests/test_patches.py reads). Move an entry into the check once a test kills it."""

from mutation_check_series import Mutant

PENDING = [
  # nvshmem_permute_support.cc
  Mutant(
    "review-support-group-channel-swapped",
    "(argument) the group of a permute with a channel id is the partitions, else the replicas",
    "xla/backends/gpu/runtime/nvshmem_permute_support.cc",
    "                                 ? config.num_partitions()\n"
    "                                 : config.replica_count();",
    "                                 ? config.replica_count()\n"
    "                                 : config.num_partitions();",
  ),
  Mutant(
    "review-place-direct-callers-only",
    "(loop) a collectives group or conditional branch refused at any depth, "
    "not only the direct caller",
    "xla/backends/gpu/runtime/nvshmem_permute_support.cc",
    "      pending.push_back(caller->parent());\n",
    "",
  ),
  Mutant(
    "review-heap-start-exception",
    "a returned permute-start buffer (the async form the colorer sees) leaves the heap",
    "xla/backends/gpu/runtime/nvshmem_permute_support.cc",
    "                             HloOpcode::kCollectivePermuteStart,",
    "                             HloOpcode::kAllToAll,",
  ),
  Mutant(
    "review-destinations-param-and",
    "(&& for ||) a donated parameter destination refused whatever its colour and liveness",
    "xla/backends/gpu/runtime/nvshmem_permute_support.cc",
    "    if (allocation.is_entry_computation_parameter() ||",
    "    if (allocation.is_entry_computation_parameter() &&",
  ),
  # nvshmem_run_checks.cc
  Mutant(
    "review-pes-every-replica",
    "(loop bound) every replica of the assignment, the last included",
    "xla/backends/gpu/runtime/nvshmem_run_checks.cc",
    "    for (int r = 0; r < devices.replica_count(); ++r) {",
    "    for (int r = 0; r + 1 < devices.replica_count(); ++r) {",
  ),
  Mutant(
    "review-pes-transposed",
    "(argument) id r + p * replicas runs on devices(r, p), not devices(p, r)",
    "xla/backends/gpu/runtime/nvshmem_run_checks.cc",
    "job->find(GlobalDeviceId(devices(r, p)))",
    "job->find(GlobalDeviceId(devices(p, r)))",
  ),
  Mutant(
    "review-team-error-swallowed",
    "a failed team query (NVSHMEM not initialised) fails the check, not 'outside the team'",
    "xla/backends/gpu/runtime/nvshmem_run_checks.cc",
    "    TF_ASSIGN_OR_RETURN(bool source_in, in_team(pes[source]));",
    "    bool source_in = in_team(pes[source]).value_or(false);",
  ),
  Mutant(
    "review-target-none-before-check",
    "(order) a run without a target still fails under an assignment nobody checked",
    "xla/backends/gpu/runtime/nvshmem_run_checks.cc",
    "  if (!(record.devices == devices)) {\n"
    '    return FailedPrecondition("PEs not checked for this device assignment");\n'
    "  }\n"
    "  if (!target.has_value()) return std::nullopt;",
    "  if (!target.has_value()) return std::nullopt;\n"
    "  if (!(record.devices == devices)) {\n"
    '    return FailedPrecondition("PEs not checked for this device assignment");\n'
    "  }",
  ),
  Mutant(
    "review-job-fewer-devices",
    "(!= weakened to >) a program on fewer devices than the job's processes fails",
    "xla/backends/gpu/runtime/nvshmem_run_checks.cc",
    "  if (program_devices != processes) {",
    "  if (program_devices > processes) {",
  ),
  Mutant(
    "review-alloc-color-or",
    "(|| for &&) the guard counts only collective-memory allocations the run makes",
    "xla/backends/gpu/runtime/nvshmem_run_checks.cc",
    "    return allocation->color() == collective_color && allocation->size() > 0 &&",
    "    return allocation->color() == collective_color || allocation->size() > 0 &&",
  ),
  # nvshmem_permute_decision.cc
  Mutant(
    "review-decision-heap-one-copy",
    "(size) operand and result both count against the heap",
    "xla/backends/gpu/transforms/collectives/nvshmem_permute_decision.cc",
    "      facts.bytes > (facts.heap_bytes - facts.heap_used_bytes) / 2) {",
    "      facts.bytes > (facts.heap_bytes - facts.heap_used_bytes)) {",
  ),
  Mutant(
    "review-decision-crossover-of-one",
    "(index) the crossover of the permute's own buffer count",
    "xla/backends/gpu/transforms/collectives/nvshmem_permute_decision.cc",
    "                                : kNvshmemPermuteCrossoverBytes[buffers - 1];",
    "                                : kNvshmemPermuteCrossoverBytes[0];",
  ),
  # nvshmem_collective_permute_rewriter.cc
  Mutant(
    "review-pass-bytes-last-operand",
    "(size) a combined permute's bytes are every operand's",
    "xla/backends/gpu/transforms/collectives/nvshmem_collective_permute_rewriter.cc",
    "        facts.bytes += ShapeUtil::ByteSizeOfElements(operand->shape());",
    "        facts.bytes = ShapeUtil::ByteSizeOfElements(operand->shape());",
  ),
  Mutant(
    "review-pass-heap-one-copy",
    "(size) a permute given NVSHMEM takes operands and results on the heap",
    "xla/backends/gpu/transforms/collectives/nvshmem_collective_permute_rewriter.cc",
    "        program.heap_used_bytes += 2 * facts.bytes;  // Operands and results.",
    "        program.heap_used_bytes += facts.bytes;  // Operands and results.",
  ),
  Mutant(
    "review-pass-part-of-job-swapped",
    "(arguments swapped) NvshmemPartOfJob(devices, slice size, job devices)",
    "xla/backends/gpu/transforms/collectives/nvshmem_collective_permute_rewriter.cc",
    "      program.num_devices, options_.slice_size, options_.job_devices);",
    "      program.num_devices, options_.job_devices, options_.slice_size);",
  ),
  # Call sites in the committed patches (killed only by tests/test_patches.py).
  Mutant(
    "review-wire-done-looks-at-itself",
    "(argument) the done decides on its start's facts, so start and done agree",
    "patch:0001",
    "+      instr->opcode() == HloOpcode::kCollectivePermuteDone ? instr->operand(0)",
    "+      instr->opcode() == HloOpcode::kCollectivePermuteDone ? instr",
  ),
  Mutant(
    "review-wire-emitter-ignores-backend",
    "(|| weakened to &&) a permute the pass gave NCCL stays on NCCL",
    "patch:0001",
    "+  if (permute == nullptr || !IsNvshmemCollective(permute)) return false;",
    "+  if (permute == nullptr && !IsNvshmemCollective(permute)) return false;",
  ),
  Mutant(
    "review-wire-team-rank0",
    "(bound) team rank 0 is inside NVSHMEM_TEAM_SHARED (-1 is outside)",
    "patch:0002",
    "+                                   NVSHMEM_TEAM_SHARED) >= 0;",
    "+                                   NVSHMEM_TEAM_SHARED) > 0;",
  ),
  Mutant(
    "review-wire-team-world",
    "(argument) membership asked of NVSHMEM_TEAM_SHARED, the barrier's team",
    "patch:0002",
    "+                                   NVSHMEM_TEAM_SHARED) >= 0;",
    "+                                   NVSHMEM_TEAM_WORLD) >= 0;",
  ),
  Mutant(
    "review-wire-aot-job-devices",
    "(argument) ahead of time, the job's devices from the GpuTopology",
    "patch:0008",
    "+      rewriter_options.job_devices = options.gpu_topology->number_of_devices();",
    "+      rewriter_options.job_devices = 0;",
  ),
  Mutant(
    "review-wire-aot-gpus-per-process",
    "(argument) ahead of time, the GPUs each process drives from the GpuTopology",
    "patch:0008",
    "+          options.gpu_topology->num_devices_per_host();",
    "+          1;",
  ),
]
