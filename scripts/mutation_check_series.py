#!/usr/bin/env python3
"""Mutation check of the pinned series' safety rules (xla_patches/xla-3cc8846c_jax-0.9.1/src/).

    scripts/mutation_check_series.py [--only NAME,...] [--shard K/N] [--rev REV] [--list]
                                     [--no-build] [--keep]

Each mutant removes, inverts or adds one refusal of the series' decision or runtime support code.
For each, one at a time, on a scratch copy of the series' sources (the tree is never edited): the
mutated file is recompiled (over a precompiled header of what it includes from XLA), the series'
own tests (every test file the series adds, linked with the
wheel's XLA, compat/wheel/'s test base and FileCheck, and gmock from Debian's source, as
scripts/check_patches_upstream.sh builds them) and the differential test (series_decision_diff_test:
its objects from build/, the series' objects from the scratch copy) are relinked, and the series'
tests run, then the differential test where they miss the mutant (both for the unmutated series).
A mutant is killed when a test fails or runs past its time limit. Prints a kill table.

A mutant is (file, exact original text, replacement): an original text that is not in its file
exactly once is an error, so a rule that moved is noticed rather than silently untested.

--shard K/N: every Nth mutant from the Kth (scripts/test_long.sh runs 1/2 and 2/2 at once).
--rev REV: the series' sources as git commit REV holds them (default: the working tree).
--no-build: take build/series_decision_diff_test's objects as they are (else `cmake --build build
--target series_decision_diff_test` first). --keep: keep the scratch directory.
Exit 0 when every mutant is killed and the unmutated series passes both, 1 otherwise, 2 on bad usage
or a missing tool.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERIES = ROOT / "xla_patches" / "xla-3cc8846c_jax-0.9.1" / "src"
BUILD = ROOT / "build"
VENV_PY = ROOT / ".venv" / "bin" / "python"
GMOCK = Path("/usr/src/googletest/googlemock")
SUPPORT = "xla/backends/gpu/runtime/nvshmem_permute_support.cc"
RUN = "xla/backends/gpu/runtime/nvshmem_run_checks.cc"
DECISION = "xla/backends/gpu/transforms/collectives/nvshmem_permute_decision.cc"
PASS = "xla/backends/gpu/transforms/collectives/nvshmem_collective_permute_rewriter.cc"
TIMEOUT_S = 300
NOT_RUN = "(not run: killed first)"


@dataclass(frozen=True)
class Mutant:
  name: str
  rule: str  # The rule it breaks, in words.
  path: str  # Under SERIES.
  original: str
  replacement: str


# The series' safety rules, each broken alone. Where the decision and the runtime's rules both hold
# a rule, each copy is a mutant of its own. Not here: the runtime's in-place rule, which no test can
# kill: XLA's verifier requires an in-place permute's offsets be tuples (hlo_verifier.cc
# CheckBufferOffset), and the type rule refuses any operand of a type NVSHMEM does not put, tuples
# included; the differential test's in-place cases keep NCCL either way.
MUTANTS = [
  # The decision (nvshmem_permute_decision.cc): 0001's rules as the pass decides them.
  Mutant(
    "decision-types",
    "NVSHMEM puts only its eight types",
    DECISION,
    "    if (!absl::c_linear_search(kPut, type)) {",
    "    if (false) {",
  ),
  Mutant(
    "decision-memcpy-p2p",
    "xla_gpu_use_memcpy_local_p2p fails the thunk",
    DECISION,
    '  if (facts.memcpy_local_p2p) return "xla_gpu_use_memcpy_local_p2p is set";',
    "",
  ),
  Mutant(
    "decision-one-gpu-per-process",
    "one GPU per process",
    DECISION,
    "  if (facts.visible_devices_per_process != 1) {",
    "  if (false) {",
  ),
  Mutant(
    "decision-part-of-job",
    "the program is the whole job",
    DECISION,
    "  if (!facts.part_of_job.empty()) return facts.part_of_job;",
    "",
  ),
  Mutant(
    "part-of-job-aot",
    "ahead of time, the program has the job's devices",
    DECISION,
    "  if (job_devices > 0 && num_devices != job_devices) {",
    "  if (false) {",
  ),
  Mutant(
    "part-of-job-slices",
    "in a JIT compile, whole slices",
    DECISION,
    '  if (slice_size <= 0 || num_devices % slice_size == 0) return "";',
    '  return "";',
  ),
  Mutant(
    "part-of-job-refuses-8",
    "(added) NVSHMEM refused to every program of 8+ devices",
    DECISION,
    "  if (job_devices > 0 && num_devices != job_devices) {",
    '  if (num_devices >= 8) return "mutant";\n'
    "  if (job_devices > 0 && num_devices != job_devices) {",
  ),
  Mutant(
    "decision-hosts",
    "every pair inside a host",
    DECISION,
    "    if (source / per_host != target / per_host) {",
    "    if (false) {",
  ),
  Mutant(
    "decision-leaves-device",
    "a pair leaves its device",
    DECISION,
    '  if (!leaves_device) return "no pair leaves its device";',
    "",
  ),
  Mutant(
    "decision-source-for-every-id",
    "every device a target",
    DECISION,
    "    if (!receives[id]) return",
    "    if (false) return",
  ),
  Mutant(
    "decision-heap-fit",
    "operand and result fit the heap with the rest",
    DECISION,
    "      facts.bytes > (facts.heap_bytes - facts.heap_used_bytes) / 2) {",
    "      false) {",
  ),
  Mutant(
    "decision-heap-fit-alone",
    "the heap's other buffers count",
    DECISION,
    "      facts.bytes > (facts.heap_bytes - facts.heap_used_bytes) / 2) {",
    "      facts.bytes > facts.heap_bytes / 2) {",
  ),
  # The pass (nvshmem_collective_permute_rewriter.cc): the heap's peak.
  Mutant(
    "pass-heap-earlier-permutes",
    "permutes given NVSHMEM before on the heap",
    PASS,
    "        program.heap_used_bytes += 2 * facts.bytes;  // Operands and results.",
    "",
  ),
  # The runtime's rules (nvshmem_permute_support.cc): 0001's at compile time and the emitter,
  # and the thunk's and the executable's at run time.
  Mutant(
    "support-nvshmem-on",
    "NVSHMEM on in the module's options",
    SUPPORT,
    "  if (!options.xla_gpu_experimental_enable_nvshmem()) {",
    "  if (false) {",
  ),
  Mutant(
    "support-memcpy-p2p",
    "xla_gpu_use_memcpy_local_p2p fails the thunk",
    SUPPORT,
    "  if (options.xla_gpu_use_memcpy_local_p2p()) {",
    "  if (false) {",
  ),
  Mutant(
    "support-collectives-group-async",
    "not in a collectives group (wrapped)",
    SUPPORT,
    "      if (callee->IsAsyncComputation() ||",
    "      if (false ||",
  ),
  Mutant(
    "support-collectives-group-call",
    "not in a collectives group (still a call)",
    SUPPORT,
    "          (caller->opcode() == HloOpcode::kCall &&",
    "          (false &&",
  ),
  Mutant(
    "support-conditional-branch",
    "not under a conditional's branch",
    SUPPORT,
    "      if (caller->opcode() == HloOpcode::kConditional) {",
    "      if (false) {",
  ),
  Mutant(
    "support-types",
    "NVSHMEM puts only its eight types",
    SUPPORT,
    "    if (!absl::c_linear_search(kPut, type)) {",
    "    if (false) {",
  ),
  Mutant(
    "support-group-is-program",
    "the permute's group is every device",
    SUPPORT,
    "  if (group_size != config.replica_count() * config.num_partitions()) {",
    "  if (false) {",
  ),
  Mutant(
    "support-source-for-every-id",
    "every id has one source",
    SUPPORT,
    "    if (sources[id] != 1) {",
    "    if (false) {",
  ),
  Mutant(
    "pass-other-nvshmem-to-nccl",
    "every NVSHMEM collective other than a permute goes to NCCL (returned heap buffers)",
    PASS,
    "      } else if (IsNvshmem(*instr)) {",
    "      } else if (false) {",
  ),
  Mutant(
    "pass-user-buffers",
    "NCCL user buffers fail the compile",
    PASS,
    "  if (debug.xla_gpu_enable_nccl_user_buffers() ||",
    "  if (false ||",
  ),
  Mutant(
    "pass-symmetric-buffers",
    "NCCL symmetric buffers fail the compile",
    PASS,
    "      debug.xla_gpu_experimental_enable_nccl_symmetric_buffers()) {",
    "      false) {",
  ),
  # The emitter's destination check (nvshmem_permute_support.cc), every destination.
  Mutant(
    "destinations-color",
    "destinations on the heap (XLA's collective memory)",
    SUPPORT,
    "               allocation.maybe_live_out() ||\n"
    "               allocation.color() != collective_color) {",
    "               allocation.maybe_live_out()) {",
  ),
  Mutant(
    "destinations-live-out",
    "destinations on the heap (never a returned buffer)",
    SUPPORT,
    "               allocation.maybe_live_out() ||\n"
    "               allocation.color() != collective_color) {",
    "               allocation.color() != collective_color) {",
  ),
  Mutant(
    "destinations-parameter",
    "destinations on the heap (never a donated parameter)",
    SUPPORT,
    "               allocation.is_entry_computation_parameter() ||",
    "               false ||",
  ),
  Mutant(
    "destinations-loop-bound",
    "(loop) every destination, the last included",
    SUPPORT,
    "  for (int64_t i = 0; runnable.ok() && i < permute->operand_count(); ++i) {",
    "  for (int64_t i = 0; runnable.ok() && i + 1 < permute->operand_count(); ++i) {",
  ),
  Mutant(
    "destinations-index",
    "(argument) destination i of a combined permute",
    SUPPORT,
    "slice(permute, combined ? ShapeIndex{1, i} : ShapeIndex{1})",
    "slice(permute, combined ? ShapeIndex{1, 0} : ShapeIndex{1})",
  ),
  # The colorer's rule (nvshmem_permute_support.cc).
  Mutant(
    "heap-lives-out",
    "a buffer that does not outlive the run may be on the heap",
    SUPPORT,
    "  return !lives_out || absl::c_any_of(values, [&](const HloValue* value) {",
    "  return absl::c_any_of(values, [&](const HloValue* value) {",
  ),
  Mutant(
    "heap-permute-exception",
    "a returned permute buffer leaves the heap",
    SUPPORT,
    "           !HloPredicateIsOp<HloOpcode::kCollectivePermute,",
    "           !HloPredicateIsOp<HloOpcode::kAllToAll,",
  ),
  Mutant(
    "heap-defining-collective",
    "a returned buffer an NVSHMEM all-reduce defines stays on the heap",
    SUPPORT,
    "    return needs_heap(value->instruction()) ||",
    "    return false ||",
  ),
  Mutant(
    "heap-using-collective",
    "a returned buffer an NVSHMEM all-reduce uses stays on the heap",
    SUPPORT,
    "             return needs_heap(use.instruction);",
    "             return false;",
  ),
  # The run-time rules (nvshmem_run_checks.cc): the guard, the thunk's Initialize and runs.
  Mutant(
    "alloc-color",
    "the guard counts collective memory only",
    RUN,
    "    return allocation->color() == collective_color && allocation->size() > 0 &&",
    "    return allocation->size() > 0 &&",
  ),
  Mutant(
    "alloc-empty",
    "the guard counts no empty allocation",
    RUN,
    "    return allocation->color() == collective_color && allocation->size() > 0 &&",
    "    return allocation->color() == collective_color &&",
  ),
  Mutant(
    "alloc-parameter",
    "the guard counts no entry parameter (the caller's)",
    RUN,
    "           !allocation->is_entry_computation_parameter() &&",
    "",
  ),
  Mutant(
    "alloc-constant",
    "the guard counts no constant",
    RUN,
    "           !allocation->is_constant() && !allocation->is_thread_local();",
    "           !allocation->is_thread_local();",
  ),
  Mutant(
    "alloc-thread-local",
    "the guard counts no thread-local allocation",
    RUN,
    "           !allocation->is_constant() && !allocation->is_thread_local();",
    "           !allocation->is_constant();",
  ),
  Mutant(
    "alloc-any",
    "(loop) any allocation the run makes",
    RUN,
    "  return absl::c_any_of(allocations, [&](const BufferAllocation* allocation) {",
    "  return absl::c_all_of(allocations, [&](const BufferAllocation* allocation) {",
  ),
  Mutant(
    "record-cache",
    "(check-then-record) one check per device assignment",
    RUN,
    "  if (record.devices == devices) return absl::OkStatus();",
    "",
  ),
  Mutant(
    "record-cache-any",
    "(check-then-record) another assignment is checked again",
    RUN,
    "  if (record.devices == devices) return absl::OkStatus();",
    "  if (record.devices.has_value()) return absl::OkStatus();",
  ),
  Mutant(
    "record-before-check",
    "(check-then-record) recorded only when every check passes",
    RUN,
    "  for (const auto& [source, target] : pairs) {",
    "  record = {devices, pes};\n  for (const auto& [source, target] : pairs) {",
  ),
  Mutant(
    "record-job-null",
    "NVSHMEM not set up with the job fails",
    RUN,
    "  if (job == nullptr) {",
    "  if (false) {",
  ),
  Mutant(
    "pes-one-each",
    "no two ids in one process",
    RUN,
    "      if (it == job->end() || !taken.insert(it->second.value()).second) {",
    "      if (it == job->end()) {",
  ),
  Mutant(
    "pes-translated",
    "an id's PE is its device's process, not the id",
    RUN,
    "      pes.push_back(it->second.value());",
    "      pes.push_back(pes.size());",
  ),
  Mutant(
    "pes-replicas-first",
    "(loops) id r + p * replicas, every row and column",
    RUN,
    "  for (int p = 0; p < devices.computation_count(); ++p) {\n"
    "    for (int r = 0; r < devices.replica_count(); ++r) {",
    "  for (int r = 0; r < devices.replica_count(); ++r) {\n"
    "    for (int p = 0; p < devices.computation_count(); ++p) {",
  ),
  Mutant(
    "pes-every-partition",
    "(loop bound) every partition of the assignment",
    RUN,
    "  for (int p = 0; p < devices.computation_count(); ++p) {",
    "  for (int p = 0; p + 1 < devices.computation_count(); ++p) {",
  ),
  Mutant(
    "pairs-no-pe-low",
    "a pair with a negative id has no PE",
    RUN,
    "    if (std::min(source, target) < 0 ||",
    "    if (false ||",
  ),
  Mutant(
    "pairs-no-pe-high",
    "a pair beyond the program's ids has no PE",
    RUN,
    "        std::max(source, target) >= static_cast<int64_t>(pes.size())) {",
    "        false) {",
  ),
  Mutant(
    "pairs-inside-team",
    "at run time, each pair inside NVSHMEM_TEAM_SHARED",
    RUN,
    "    if (source_in != target_in) {",
    "    if (false) {",
  ),
  Mutant(
    "pairs-target-asked",
    "(argument) the target's PE is asked about",
    RUN,
    "    TF_ASSIGN_OR_RETURN(bool target_in, in_team(pes[target]));",
    "    TF_ASSIGN_OR_RETURN(bool target_in, in_team(pes[source]));",
  ),
  Mutant(
    "pairs-team-of-pe",
    "(argument) team membership of the PE, not the id",
    RUN,
    "    TF_ASSIGN_OR_RETURN(bool source_in, in_team(pes[source]));",
    "    TF_ASSIGN_OR_RETURN(bool source_in, in_team(source));",
  ),
  Mutant(
    "target-checked-assignment",
    "a run puts only under the device assignment checked",
    RUN,
    "  if (!(record.devices == devices)) {",
    "  if (false) {",
  ),
  Mutant(
    "target-translated",
    "a run puts to its target's PE",
    RUN,
    "  return record.pes[*target];",
    "  return *target;",
  ),
  Mutant(
    "target-no-pe",
    "a target beyond the program's ids has no PE",
    RUN,
    "  if (*target < 0 || *target >= static_cast<int64_t>(record.pes.size())) {",
    "  if (*target < 0) {",
  ),
  Mutant(
    "job-one-gpu-per-process",
    "at run time, one GPU per process",
    RUN,
    "  if (devices_per_process != 1) {",
    "  if (false) {",
  ),
  Mutant(
    "job-whole",
    "at run time, the program is the NVSHMEM job",
    RUN,
    "  if (program_devices != processes) {",
    "  if (false) {",
  ),
  Mutant(
    "job-no-assignment",
    "at run time, a run without a device assignment is one device",
    RUN,
    "  const int64_t program_devices = devices ? devices->num_elements() : 1;",
    "  const int64_t program_devices = devices ? devices->num_elements() : processes;",
  ),
  # The call sites (the upstream files' lines in the committed patches, which need the pin's LLVM
  # or MLIR to compile): each killed by tests/test_patches.py, run offline on a scratch copy.
  Mutant(
    "wire-emitter-index",
    "(argument) the emitter looks up destination i",
    "patch:0001",
    "+        return assignment.GetUniqueSlice(permute, index);",
    "+        return assignment.GetUniqueSlice(permute, ShapeIndex{1});",
  ),
  Mutant(
    "wire-emitter-color",
    "(argument) destinations in collective memory",
    "patch:0001",
    "+      static_cast<int64_t>(MemorySpaceColor::kCollective));",
    "+      static_cast<int64_t>(MemorySpaceColor::kDefault));",
  ),
  Mutant(
    "wire-initialize-checks",
    "(call) Initialize checks the PEs",
    "patch:0002",
    "+  return CheckPes(*params.collective_params->device_assn);",
    "+  return absl::OkStatus();",
  ),
  Mutant(
    "wire-checkpes-job",
    "(argument) the job's device_to_process",
    "patch:0002",
    "+      devices, job ? &job->device_to_process : nullptr, pairs_,",
    "+      devices, nullptr, pairs_,",
  ),
  Mutant(
    "wire-checkpes-team",
    "(argument) team membership from NVSHMEM_TEAM_SHARED",
    "patch:0002",
    "+      [&](int64_t pe) { return comm->IsBarrierPeer(RankId(pe)); }, pes_);",
    "+      [&](int64_t pe) { return absl::StatusOr<bool>(true); }, pes_);",
  ),
  Mutant(
    "wire-run-target-pe",
    "(argument) a run puts to its own target's PE",
    "patch:0002",
    "+        NvshmemTargetPe(pes_, *params.collective_params->device_assn,\n"
    "+                        source_target.target));",
    "+        NvshmemTargetPe(pes_, *params.collective_params->device_assn,\n"
    "+                        std::optional<int64_t>(0)));",
  ),
  Mutant(
    "wire-sync-on-main-stream",
    "(stream) a sync NVSHMEM collective on the collective stream",
    "patch:0002",
    "+    TF_RETURN_IF_ERROR(RunNvshmemCollective(params, *async_stream));",
    "+    TF_RETURN_IF_ERROR(RunNvshmemCollective(params, *params.stream));",
  ),
  Mutant(
    "wire-sync-main-waits",
    "(stream) the main stream waits for the collective stream after it",
    "patch:0002",
    "+    TF_RETURN_IF_ERROR(params.stream->WaitFor(async_stream));",
    "+    TF_RETURN_IF_ERROR(absl::OkStatus());",
  ),
  Mutant(
    "wire-guard-allocations",
    "(argument) the guard counts collective memory",
    "patch:0003",
    "+      RunAllocatesHeap(allocation_ptrs_, /*collective memory*/ 1);",
    "+      RunAllocatesHeap(allocation_ptrs_, /*collective memory*/ 0);",
  ),
  Mutant(
    "wire-guard-devices",
    "(argument) the guard counts the run's device assignment",
    "patch:0003",
    "+        nvshmem_job_.get(), run_options->run_options().device_assignment()));",
    "+        nvshmem_job_.get(), nullptr));",
  ),
  Mutant(
    "wire-guard-skipped",
    "(call) the guard runs before the allocations",
    "patch:0003",
    "+  if (allocates_collective_memory_) {",
    "+  if (false) {",
  ),
  Mutant(
    "wire-colorer-lives-out",
    "(argument) the colorer asks whether the buffer lives out",
    "patch:0004",
    "+                           alias_analysis->BufferLivesOut(buffer),",
    "+                           false,",
  ),
  Mutant(
    "wire-colorer-rule",
    "(call) the colorer applies the heap rule",
    "patch:0004",
    "+        use_nvshmem &&\n+        NvshmemHeapMayHold(",
    "+        use_nvshmem ||\n+        NvshmemHeapMayHold(",
  ),
  Mutant(
    "wire-jit-job-devices",
    "(argument) in a JIT compile, the job's devices",
    "patch:0008",
    "+            job->num_processes * job->device_count_per_process;",
    "+            job->num_processes;",
  ),
  # Written by an independent reader of the series (2026-12-06).
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
    "               allocation.is_entry_computation_parameter() ||",
    "               allocation.is_entry_computation_parameter() &&",
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
  # The emitter's choice, now the runtime's rule in nvshmem_permute_support.cc.
  Mutant(
    "review-wire-done-looks-at-itself",
    "(argument) the done decides on its start's facts, so start and done agree",
    "xla/backends/gpu/runtime/nvshmem_permute_support.cc",
    "      instr.opcode() == HloOpcode::kCollectivePermuteDone ? instr.operand(0)",
    "      instr.opcode() == HloOpcode::kCollectivePermuteDone ? &instr",
  ),
  Mutant(
    "review-wire-emitter-ignores-backend",
    "(|| weakened to &&) a permute the pass gave NCCL stays on NCCL",
    "xla/backends/gpu/runtime/nvshmem_permute_support.cc",
    "  if (!backend.ok() || backend->collective_backend_config().backend() !=",
    "  if (!backend.ok() && backend->collective_backend_config().backend() !=",
  ),
  Mutant(
    "runs-permute-not-a-permute",
    "an instruction that is not a permute (or a done of one) stays off NVSHMEM",
    "xla/backends/gpu/runtime/nvshmem_permute_support.cc",
    "  if (permute == nullptr) return false;",
    "",
  ),
  Mutant(
    "runs-permute-skips-rules",
    "the emitter applies the runtime's rules, not the pass's mark alone",
    "xla/backends/gpu/runtime/nvshmem_permute_support.cc",
    "  absl::Status runnable = CanRunNvshmemCollectivePermute(*permute, config);",
    "  absl::Status runnable = absl::OkStatus();",
  ),
  Mutant(
    "runs-permute-lookup-error",
    "a destination the assignment cannot find keeps NCCL",
    "xla/backends/gpu/runtime/nvshmem_permute_support.cc",
    "      runnable = destination.status();",
    "      continue;",
  ),
  # Call sites in the committed patches (killed only by tests/test_patches.py).
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


class Fail(Exception):
  """An error reported in one line."""


def tf_dir() -> Path:
  out = subprocess.run(
    [
      str(VENV_PY),
      "-c",
      "import importlib.util as u, os; print(os.path.dirname(u.find_spec('tensorflow').origin))",
    ],
    capture_output=True,
    text=True,
    check=False,
  )
  path = Path(out.stdout.strip())
  if out.returncode or not (path / "include" / "absl").is_dir():
    raise Fail(f"the tensorflow wheel's headers not found in {VENV_PY.parent.parent}")
  return path


@dataclass
class Builder:
  """Compiles and links the two test binaries from a scratch copy of the series."""

  work: Path
  tf: Path
  jobs: int
  objects: dict[str, Path] = field(default_factory=dict)
  pch: dict[str, Path] = field(default_factory=dict)

  @property
  def src(self) -> Path:
    return self.work / "src"

  def flags(self) -> list[str]:
    inc = self.tf / "include"
    return [
      "-std=c++17",
      "-O0",
      "-DNDEBUG",
      "-w",
      "-I",
      str(self.src),
      "-isystem",
      str(ROOT / "compat" / "wheel"),
      "-isystem",
      str(inc),
      "-isystem",
      str(inc / "external" / "highwayhash"),
      "-isystem",
      str(inc / "external" / "farmhash_archive" / "src"),
      "-isystem",
      str(GMOCK / "include"),
      "-I",
      str(GMOCK),
    ]

  def outside_includes(self, source: Path, seen: set[Path] | None = None) -> list[str]:
    """The #include lines of `source` and of the series headers it includes, less those headers:
    what no mutant changes."""
    seen = set() if seen is None else seen
    lines: list[str] = []
    for line in source.read_text().splitlines():
      m = re.match(r'#include "([^"]+)"', line)
      if m and (self.src / m.group(1)).is_file():
        header = self.src / m.group(1)
        if header not in seen:
          seen.add(header)
          lines += [l for l in self.outside_includes(header, seen) if l not in lines]
      elif line.startswith("#include ") and line not in lines:
        lines.append(line)
    return lines

  def precompile(self, key: str) -> None:
    """A precompiled header of what `key` includes from outside the series: a mutant's recompile
    then parses only the file itself (about 20 s to a few, each)."""
    header = self.work / "pch" / (key.replace("/", "_") + ".h")
    header.parent.mkdir(exist_ok=True)
    header.write_text("\n".join(self.outside_includes(self.src / key)) + "\n")
    cmd = ["g++", *self.flags(), "-x", "c++-header", str(header), "-o", f"{header}.gch"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode:
      lines = [l for l in r.stderr.splitlines() if "error" in l][:10]
      raise Fail(f"precompiling the headers of {key} failed:\n" + "\n".join(lines))
    self.pch[key] = header

  def compile(self, source: Path, key: str) -> None:
    obj = self.work / "obj" / (key.replace("/", "_") + ".o")
    obj.parent.mkdir(exist_ok=True)
    pch = ["-include", str(self.pch[key]), "-Winvalid-pch"] if key in self.pch else []
    cmd = ["g++", *self.flags(), *pch, "-c", str(source), "-o", str(obj)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode:
      lines = [l for l in r.stderr.splitlines() if "error" in l][:10]
      raise Fail(f"compile {key} failed:\n" + "\n".join(lines))
    self.objects[key] = obj

  def series_sources(self) -> list[str]:
    return sorted(str(p.relative_to(self.src)) for p in self.src.rglob("*.cc"))

  def compile_all(self, mutated: set[str]) -> None:
    """Every object, those of the files in `mutated` over their precompiled headers."""
    jobs = {key: self.src / key for key in self.series_sources()}
    for extra in (
      "compat/wheel/filecheck.cc",
      "compat/wheel/hlo_hardware_independent_test_base.cc",
    ):
      jobs[extra] = ROOT / extra
    jobs["gmock-all.cc"] = GMOCK / "src" / "gmock-all.cc"
    with concurrent.futures.ThreadPoolExecutor(self.jobs) as pool:
      for f in [pool.submit(self.precompile, key) for key in sorted(mutated)]:
        f.result()
      for f in [pool.submit(self.compile, src, key) for key, src in jobs.items()]:
        f.result()

  def link(self, diff_link: str, tag: str, diff_too: bool = True) -> tuple[Path, Path]:
    """The series' tests and (`diff_too`) the differential test, linked at once from the
    current objects."""
    series = [str(self.objects[k]) for k in self.series_sources() if not k.endswith("_test.cc")]
    gtests = self.work / f"series_tests_{tag}"
    tests_cmd = [
      "g++",
      *[str(o) for o in self.objects.values()],
      "-o",
      str(gtests),
      str(self.tf / "libtensorflow_cc.so.2"),
      str(self.tf / "libtensorflow_framework.so.2"),
      f"-Wl,-rpath,{self.tf}",
      "-lgtest",
      "-lgtest_main",
      "-pthread",
    ]
    diff = self.work / f"diff_test_{tag}"
    args = shlex.split(diff_link)
    out = args.index("-o")
    args[out + 1] = str(diff)
    lib = [i for i, a in enumerate(args) if a.endswith("libseries_nvshmem_pass.a")]
    if len(lib) != 1:
      raise Fail(
        "build/CMakeFiles/series_decision_diff_test.dir/link.txt does not name "
        "libseries_nvshmem_pass.a once"
      )
    args[lib[0] : lib[0] + 1] = series
    links = [
      subprocess.Popen(tests_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ]
    if diff_too:
      links.append(
        subprocess.Popen(
          args, cwd=BUILD, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
      )
    for what, proc in zip(("the series' tests", "series_decision_diff_test"), links):
      output, _ = proc.communicate()
      if proc.returncode:
        raise Fail(f"linking {what} failed: " + output[-2000:])
    return gtests, diff


def run_test(cmd: list[str], log: Path) -> tuple[bool, str]:
  """(passed, what failed) of one gtest binary."""
  try:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
  except subprocess.TimeoutExpired:
    log.write_text("timed out\n")
    return False, f"timed out after {TIMEOUT_S} s"
  log.write_text(r.stdout + r.stderr)
  if r.returncode == 0:
    return True, ""
  failed = sorted(set(re.findall(r"^\[  FAILED  \] (\S+?)(?: \(|,|$)", r.stdout, re.M)))
  if failed:
    more = f" +{len(failed) - 2}" if len(failed) > 2 else ""
    return False, ", ".join(f.split(".")[-1] for f in failed[:2]) + more
  return False, f"exit {r.returncode}" if r.returncode > 0 else f"signal {-r.returncode}"


def copy_series(dest: Path, rev: str | None) -> None:
  """The series' sources from the working tree, or as commit `rev` holds them."""
  if rev is None:
    shutil.copytree(SERIES, dest)
    return
  prefix = str(SERIES.relative_to(ROOT))
  archive = subprocess.run(
    ["git", "-C", str(ROOT), "archive", "--format=tar", rev, prefix],
    capture_output=True,
    check=False,
  )
  if archive.returncode:
    raise Fail(f"git archive {rev} {prefix}: {archive.stderr.decode().strip()}")
  unpack = dest.parent / "rev"
  unpack.mkdir()
  subprocess.run(["tar", "-x", "-C", str(unpack)], input=archive.stdout, check=True)
  shutil.move(str(unpack / prefix), dest)


def patch_file(where: str) -> Path | None:
  """The committed patch `patch:NNNN` names."""
  found = sorted(SERIES.parent.glob(f"{where.split(':')[1]}-*.patch"))
  return found[0] if len(found) == 1 else None


def check_texts(mutants: list[Mutant], src: Path) -> list[str]:
  errors = []
  for m in mutants:
    path = patch_file(m.path) if m.path.startswith("patch:") else src / m.path
    if path is None or not path.is_file():
      errors.append(f"{m.name}: {m.path}: no such file")
      continue
    n = path.read_text().count(m.original)
    if n != 1:
      errors.append(
        f"{m.name}: {m.path}: the original text occurs {n} times, not once: {m.original.strip()!r}"
      )
  return errors


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--only", default="", help="comma-separated mutant names")
  parser.add_argument("--list", action="store_true", help="list the mutants and exit")
  parser.add_argument("--rev", help="take the series' sources from this git commit")
  parser.add_argument("--no-build", action="store_true")
  parser.add_argument("--keep", action="store_true")
  parser.add_argument("--jobs", type=int, default=2)
  parser.add_argument(
    "--shard", default="1/1", help="K/N: every Nth mutant from the Kth (for N machines or lanes)"
  )
  args = parser.parse_args()
  mutants = MUTANTS
  shard = re.fullmatch(r"([1-9][0-9]*)/([1-9][0-9]*)", args.shard)
  if not shard or int(shard.group(1)) > int(shard.group(2)):
    print(f"mutation_check_series: --shard {args.shard}: want K/N, 1 <= K <= N", file=sys.stderr)
    return 2
  if args.only:
    names = args.only.split(",")
    unknown = sorted(set(names) - {m.name for m in MUTANTS})
    if unknown:
      print(f"mutation_check_series: unknown mutant {', '.join(unknown)}", file=sys.stderr)
      return 2
    mutants = [m for m in MUTANTS if m.name in names]
  k, n = int(shard.group(1)), int(shard.group(2))
  mutants = mutants[k - 1 :: n]
  if args.list:
    for m in mutants:
      print(f"{m.name:34} {m.path.rsplit('/', 1)[-1]:34} {m.rule}")
    return 0
  for tool in ("g++", "cmake"):
    if shutil.which(tool) is None:
      print(f"mutation_check_series: {tool} not found", file=sys.stderr)
      return 2
  if not (GMOCK / "src" / "gmock-all.cc").is_file():
    print(
      f"mutation_check_series: {GMOCK}: gmock source not found (Debian googletest)", file=sys.stderr
    )
    return 2
  start = time.monotonic()
  try:
    tf = tf_dir()
    if not args.no_build:
      r = subprocess.run(
        [
          "cmake",
          "--build",
          str(BUILD),
          "-j",
          str(args.jobs),
          "--target",
          "series_decision_diff_test",
        ],
        capture_output=True,
        text=True,
        check=False,
      )
      if r.returncode:
        raise Fail(
          "cmake --build build --target series_decision_diff_test failed:\n" + r.stdout[-3000:]
        )
    link_txt = BUILD / "CMakeFiles" / "series_decision_diff_test.dir" / "link.txt"
    if not link_txt.is_file():
      raise Fail(f"{link_txt}: missing (configure build/ with scripts/setup.sh)")
    diff_link = link_txt.read_text().strip()
    work = Path(tempfile.mkdtemp(prefix="series-mutants."))
    try:
      builder = Builder(work, tf, args.jobs)
      copy_series(builder.src, args.rev)
      errors = check_texts(mutants, builder.src)
      if errors:
        for e in errors:
          print(f"mutation_check_series: {e}", file=sys.stderr)
        print(
          "mutation_check_series: FAIL: mutants whose text is gone (update MUTANTS to the code)"
        )
        return 1
      return run(mutants, builder, diff_link, start)
    finally:
      if args.keep:
        print(f"scratch: {work}")
      else:
        shutil.rmtree(work, ignore_errors=True)
  except Fail as e:
    print(f"mutation_check_series: {e}", file=sys.stderr)
    print("mutation_check_series: FAIL")
    return 1


def run(mutants: list[Mutant], b: Builder, diff_link: str, start: float) -> int:
  corpus = b.work / "corpus"
  r = subprocess.run(
    [str(VENV_PY), str(ROOT / "tests" / "fuzz" / "make_corpus.py"), str(corpus)],
    cwd=ROOT,
    capture_output=True,
    text=True,
    check=False,
  )
  if r.returncode:
    raise Fail("tests/fuzz/make_corpus.py failed: " + r.stderr[-1000:])
  file_mutants = [m for m in mutants if not m.path.startswith("patch:")]

  def recompiled(m: Mutant) -> list[str]:
    if m.path.endswith(".cc"):
      return [m.path]
    return [k for k in b.series_sources() if Path(m.path).name in (b.src / k).read_text()]

  b.compile_all({k for m in file_mutants for k in recompiled(m) if not k.endswith("_test.cc")})
  gtests, diff = b.link(diff_link, "base")
  logs = b.work / "logs"
  logs.mkdir()
  # The unmutated objects, put back after each mutant rather than recompiled.
  saved = b.work / "obj-unmutated"
  shutil.copytree(b.work / "obj", saved)

  def both(tag: str) -> tuple[tuple[bool, str], tuple[bool, str]]:
    # One core each.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
      series = pool.submit(run_test, [str(gtests)], logs / f"{tag}.series.log")
      diff_result = run_test([str(diff), f"--corpus={corpus}"], logs / f"{tag}.diff.log")
      return series.result(), diff_result

  def first_kill(tag: str) -> tuple[tuple[bool, str], tuple[bool, str]]:
    # The series' tests take a fraction of a second, the differential test half a minute: it
    # is linked and run only for a mutant the series' tests miss.
    gtests, _ = b.link(diff_link, "mutant", diff_too=False)
    series = run_test([str(gtests)], logs / f"{tag}.series.log")
    if not series[0]:
      return series, (True, NOT_RUN)
    _, diff = b.link(diff_link, "mutant")
    return series, run_test([str(diff), f"--corpus={corpus}"], logs / f"{tag}.diff.log")

  base = both("base")
  print(
    f"unmutated: the series' tests {'pass' if base[0][0] else 'FAIL: ' + base[0][1]}; "
    f"series_decision_diff_test {'passes' if base[1][0] else 'FAILS: ' + base[1][1]} "
    f"({time.monotonic() - start:.0f} s)",
    flush=True,
  )
  if not (base[0][0] and base[1][0]):
    raise Fail("the unmutated series fails its tests; no mutant can be judged")
  rows = []
  for m in file_mutants:
    t0 = time.monotonic()
    path = b.src / m.path
    original = path.read_text()
    path.write_text(original.replace(m.original, m.replacement, 1))
    keys = recompiled(m)
    try:
      for key in keys:
        b.compile(b.src / key, key)
      series_result, diff_result = first_kill(m.name)
    finally:
      path.write_text(original)
      for key in keys:
        shutil.copy(saved / b.objects[key].name, b.objects[key])
    killed = not series_result[0] or not diff_result[0]
    rows.append((m, series_result, diff_result, killed))
    print(
      f"  {m.name}: {'killed' if killed else 'SURVIVED'} ({time.monotonic() - t0:.0f} s)",
      flush=True,
    )
  rows += run_patch_mutants([m for m in mutants if m.path.startswith("patch:")], b.work)
  print_table(rows)
  survived = [m.name for m, _, _, killed in rows if not killed]
  total = time.monotonic() - start
  if survived:
    print(
      f"mutation_check_series: FAIL: {len(survived)} of {len(rows)} mutants survived "
      f"({', '.join(survived)}); {total:.0f} s"
    )
    return 1
  print(f"mutation_check_series: OK: {len(rows)} of {len(rows)} mutants killed; {total:.0f} s")
  return 0


def run_patch_mutants(mutants: list[Mutant], work: Path) -> list:
  """Each call-site mutant on a scratch copy of the series and its offline tests."""
  if not mutants:
    return []
  repo = work / "patch-repo"
  for part in ("tests/test_patches.py", "scripts", "docs/patch_series.md", "WORKSPACE", "BUILD"):
    dest = repo / part
    dest.parent.mkdir(parents=True, exist_ok=True)
    (shutil.copytree if (ROOT / part).is_dir() else shutil.copy)(ROOT / part, dest)
  shutil.copytree(SERIES.parent, repo / SERIES.parent.relative_to(ROOT))
  (repo / ".venv").symlink_to(ROOT / ".venv")
  env = {k: v for k, v in os.environ.items() if k != "XLA_PIN"}
  cmd = [
    str(VENV_PY),
    "-m",
    "pytest",
    "-q",
    "-x",
    "-p",
    "no:cacheprovider",
    "tests/test_patches.py",
  ]
  base = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, check=False)
  if base.returncode:
    raise Fail("tests/test_patches.py fails on the unmutated copy: " + base.stdout[-1500:])
  rows = []
  for m in mutants:
    t0 = time.monotonic()
    if m.original.count("\n") != m.replacement.count("\n"):
      raise Fail(f"{m.name}: a patch mutant keeps the patch's line count (its hunks' sizes)")
    path = repo / patch_file(m.path).relative_to(ROOT)
    original = path.read_text()
    path.write_text(original.replace(m.original, m.replacement, 1))
    try:
      r = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, check=False)
    finally:
      path.write_text(original)
    failed = re.findall(r"^FAILED \S+::(\S+)", r.stdout, re.M)
    result = (
      r.returncode == 0,
      "test_patches.py " + (failed[0] if failed else f"exit {r.returncode}"),
    )
    rows.append((m, result, (True, ""), r.returncode != 0))
    print(
      f"  {m.name}: {'killed' if r.returncode else 'SURVIVED'} ({time.monotonic() - t0:.0f} s)",
      flush=True,
    )
  return rows


def print_table(rows: list[tuple[Mutant, tuple[bool, str], tuple[bool, str], bool]]) -> None:
  def cell(result: tuple[bool, str]) -> str:
    if result[1] == NOT_RUN:
      return NOT_RUN
    return "-" if result[0] else "KILLS: " + result[1]

  head = ("mutant", "rule broken", "file", "series' tests", "series_decision_diff_test")
  table = [head] + [
    (m.name, m.rule, m.path.rsplit("/", 1)[-1], cell(s), cell(d)) for m, s, d, _ in rows
  ]
  widths = [max(len(r[i]) for r in table) for i in range(len(head))]
  print("kill table:")
  for i, r in enumerate(table):
    print("  " + " | ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    if i == 0:
      print("  " + "-+-".join("-" * w for w in widths))


if __name__ == "__main__":
  sys.exit(main())
