#!/usr/bin/env python3
"""Mutation check of the selection core: each safety rule removed, one at a time.

    scripts/mutation_check_core.py [--keep] [--only NAME[,NAME...]] [--list]

For each mutant (a rule of the core, of the tools' layer over it, or of the
tools' pass, disabled or narrowed by replacing one exact text), a copy of the
working tree is mutated and rebuilt, and the tests at the rule's own layer run:

  ctest   the core's and the layer's googletests (the core's rules live there);
  seeds   the selection fuzzer's committed seeds (tests/fuzz/make_corpus.py),
          replayed by a plain build of the harness (tests/fuzz/seed_replay_main.cc);
  pytest  the tools' use of the rules: the binding's tests for a rule of the
          core or its layer, the driver's for a rule of the pass.

A mutant is killed when a test fails. The check fails unless every rule of the
core or its layer is killed by ctest and by pytest (no rule guarded by one
distant test alone), every rule of the pass by pytest, and every rule the
fuzzer has a property for by the seeds. Prints the kill table. The working tree is never
changed: the copy lives in build-mutants/ (--keep leaves it for a rerun).

Exit 0 all killed, 1 a mutant survived or the unmutated tree fails, 2 a
mutant's text is no longer in its file (the rule moved: update MUTANTS).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "build-mutants"
TREE = WORK / "tree"
BUILD = TREE / "build"  # tests/conftest.py finds build/ beside the tests.
CORE = "core/xla/backends/gpu/transforms/collectives/permute_backend_selection.cc"
TOPOLOGY = "core/xla/backends/gpu/transforms/collectives/cluster_topology.cc"
DECIDE = "core/tool_layer/decide.cc"
PLAN = "nvshmem_opt/plan/permute_plan.cc"

CORE_TESTS = [
  "cluster_topology_test",
  "backend_cost_table_test",
  "permute_backend_selection_test",
  "tool_layer_test",
]
CTEST_REGEX = "^(core_.*_test|tool_layer_test)$"


@dataclasses.dataclass(frozen=True)
class Mutant:
  name: str
  path: str
  original: str
  replacement: str
  layer: str = "ctest"  # Where the rule lives: "ctest" or "pytest".
  fuzzed: bool = False  # The selection fuzzer has a property for the rule.


MUTANTS = [
  Mutant(
    "element types",
    CORE,
    "    if (NvshmemPutsType(type)) continue;\n",
    "    continue;\n",
    fuzzed=True,
  ),
  Mutant(
    "memcpy_local_p2p", CORE, "  if (request.memcpy_local_p2p) {", "  if (false) {", fuzzed=True
  ),
  Mutant(
    "local copy",
    CORE,
    "  if (absl::c_all_of(edges, [](auto e) { return e.first == e.second; })) {",
    "  if (false) {",
    fuzzed=True,
  ),
  Mutant(
    "one host (NVSHMEM)",
    CORE,
    "  if (int off_host = EdgesLeavingHost(topology, edges)) {",
    "  if (int off_host = 0) {",
    fuzzed=True,
  ),
  Mutant(
    "heap fit",
    CORE,
    "  if (bytes <= table.nvshmem_max_bytes / 2) return std::nullopt;",
    "  return std::nullopt;",
    fuzzed=True,
  ),
  Mutant(
    "heap fit boundary",
    CORE,
    "  if (bytes <= table.nvshmem_max_bytes / 2) return std::nullopt;",
    "  if (bytes <= table.nvshmem_max_bytes / 2 + 1) return std::nullopt;",
    fuzzed=True,
  ),
  Mutant(
    "team within the topology",
    CORE,
    "  if (request.team_size > PlacedDevices(topology)) {",
    "  if (false) {",
    fuzzed=True,
  ),
  Mutant(
    "one group",
    CORE,
    "  if (groups > 1) return MakeRefusal(RefusalKind::kSeveralGroups, groups);\n",
    "",
    fuzzed=True,
  ),
  Mutant("id i on device i", CORE, "    if (pe == i) continue;", "    continue;", fuzzed=True),
  Mutant(
    "every GPU of a touched host in the program",
    CORE,
    "      if (!absl::c_binary_search(members, d)) refusal.devices.push_back(d);",
    "",
  ),
  Mutant(
    "destination off the heap",
    CORE,
    "    if (destination.parameter < 0 && !destination.returned) continue;",
    "    continue;",
  ),
  # Not the fuzzer's: in a selection, the host rule (every GPU of a touched host in the
  # program) refuses every edge outside a known team first, and an unknown team is the
  # whole topology; NvshmemHang's own tests hold it for its other callers.
  Mutant(
    "edge inside the team",
    CORE,
    "      if (!absl::c_binary_search(members, device)) {",
    "      if (false) {",
  ),
  Mutant(
    "a source for every device",
    CORE,
    "  if (refusal.devices.empty()) return std::nullopt;",
    "  return std::nullopt;",
    fuzzed=True,
  ),
  Mutant(
    "edges leaving a host",
    TOPOLOGY,
    "    if (topology.HostOf(src) != topology.HostOf(dst)) ++count;",
    "    if (topology.ProcessOf(src) != topology.ProcessOf(dst) &&\n"
    "        topology.gpus_per_process() == 1) ++count;",
    fuzzed=True,
  ),
  Mutant(
    "peer/symmetric inside a host",
    CORE,
    "  if (int n = EdgesLeavingHost(topology, request.device_edges)) {",
    "  if (int n = 0) {",
    fuzzed=True,
  ),
  Mutant(
    "peer/symmetric inside a process", CORE, "  if (outside > 0) {", "  if (false) {", fuzzed=True
  ),
  Mutant(
    "one GPU per process",
    DECIDE,
    "  if (backend == Backend::kNvshmem && topology.gpus_per_process() > 1) {",
    "  if (false) {",
    fuzzed=True,
  ),
  Mutant(
    "one GPU per process boundary",
    DECIDE,
    "  if (backend == Backend::kNvshmem && topology.gpus_per_process() > 1) {",
    "  if (backend == Backend::kNvshmem && topology.gpus_per_process() > 2) {",
    fuzzed=True,
  ),
  Mutant(
    "device map across processes",
    DECIDE,
    "  if (processes.size() <= 1 && hosts.size() <= 1) return std::nullopt;",
    "  return std::nullopt;",
    fuzzed=True,
  ),
  Mutant(
    "conditional branch",
    DECIDE,
    "    if (!decision.refused[b] && place == Place::kConditionalBranch) {",
    "    if (false) {",
    fuzzed=True,
  ),
  Mutant(
    "conditional branch for peer/symmetric",
    DECIDE,
    "    if (!decision.refused[b] && place == Place::kConditionalBranch) {",
    "    if (!decision.refused[b] && place == Place::kConditionalBranch &&\n"
    "        backend == Backend::kNvshmem) {",
    fuzzed=True,
  ),
  Mutant(
    "collectives group",
    DECIDE,
    "    } else if (!decision.refused[b] && place == Place::kCollectivesGroup &&",
    "    } else if (false &&",
    fuzzed=True,
  ),
  Mutant(
    "backends the XLA offers",
    DECIDE,
    "  if (!absl::c_linear_search(table.backends, backend)) {",
    "  if (false) {",
  ),
  Mutant(
    "a user's mark (decision)",
    DECIDE,
    "    if (!attribute.empty() && mode == attribute && decision.TimeUs(backend)) {",
    "    if (false) {",
  ),
  Mutant(
    "a user's mark (pass)",
    PLAN,
    "  if (!record.skipped && record.user_mark.empty() &&",
    "  if (!record.skipped &&",
    layer="pytest",
  ),
]

# The pytest files of the tools' use of the rules: through the binding (the
# core's and the layer's rules), through nvshmem-opt (the pass's).
PYTEST_FILES = {"ctest": ["tests/test_selection.py"], "pytest": ["tests/test_user_mark.py"]}


PYTEST_IN_COPY = """
import os, sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
import hlo_tools
assert hlo_tools.__file__.startswith(os.environ["PYTHONPATH"]), hlo_tools.__file__
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


class Stop(Exception):
  """Ends the check with a one-line message and an exit status."""

  def __init__(self, message: str, status: int) -> None:
    super().__init__(message)
    self.status = status


def run(cmd: list[str], log: Path, **kw: object) -> bool:
  with log.open("a") as out:
    out.write(f"\n$ {' '.join(cmd)}\n")
    out.flush()
    return (
      subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False, **kw).returncode == 0
    )  # type: ignore[call-overload]


def copy_tree() -> None:
  """The working tree's files (tracked and untracked, not ignored) into TREE."""
  listed = (
    subprocess.run(
      ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
      cwd=ROOT,
      capture_output=True,
      check=True,
    )
    .stdout.decode()
    .split("\0")
  )
  for relative in filter(None, listed):
    source, target = ROOT / relative, TREE / relative
    if not source.is_file():
      continue  # Deleted in the working tree.
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists() or target.read_bytes() != source.read_bytes():
      shutil.copy2(source, target)
  # The venv (protoc, the wheel's XLA, pytest) is the checkout's own.
  venv = TREE / ".venv"
  if not venv.exists():
    venv.symlink_to(ROOT / ".venv")


def configure(log: Path) -> None:
  if (BUILD / "CMakeCache.txt").exists():
    return
  # Unoptimised and without debug information: each mutant is a rebuild.
  ok = run(
    [
      "cmake",
      "-S",
      str(TREE),
      "-B",
      str(BUILD),
      f"-DPython3_EXECUTABLE={ROOT / '.venv/bin/python'}",
      "-DCMAKE_BUILD_TYPE=Release",
      "-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG",
      "-DCMAKE_UNITY_BUILD=ON",
    ],
    log,
  )
  if not ok:
    raise Stop(f"configuring {BUILD} failed (see {log})", 1)


def build(targets: list[str], log: Path) -> bool:
  return run(
    ["cmake", "--build", str(BUILD), f"-j{os.cpu_count() or 2}", "--target", *targets], log
  )


def tests_fail(layer: str, seeds: Path, log: Path) -> dict[str, bool]:
  """Which tests fail, by kind: ctest, the seeds and pytest for every mutant."""
  failed = {
    "ctest": not run(
      ["ctest", "--test-dir", str(BUILD), "-R", CTEST_REGEX, "--output-on-failure"], log
    ),
    "seeds": not run([str(BUILD / "selection_seed_replay"), str(seeds)], log),
  }
  # The copy's package and binding, and its driver for the tools: the venv's
  # editable install of the checkout finds `hlo_tools` before the path does, so
  # its finder goes first.
  env = dict(os.environ, PYTHONPATH=str(TREE), NVSHMEM_OPT=str(BUILD / "nvshmem-opt"))
  failed["pytest"] = not run(
    [
      str(ROOT / ".venv/bin/python"),
      "-c",
      PYTEST_IN_COPY,
      "-q",
      "-x",
      "-p",
      "no:cacheprovider",
      *PYTEST_FILES[layer],
    ],
    log,
    cwd=TREE,
    env=env,
  )
  return failed


def targets_for(layer: str) -> list[str]:
  targets = [*CORE_TESTS, "selection_seed_replay", "_selection_core"]
  if layer == "pytest":
    targets += ["nvshmem-opt", "nvshmem-opt-xla"]
  return targets


def check(mutants: list[Mutant], log: Path) -> list[tuple[Mutant, dict[str, bool], str]]:
  for m in mutants:
    count = (ROOT / m.path).read_text().count(m.original)
    if count != 1:
      raise Stop(
        f"{m.path}: the text of mutant '{m.name}' occurs {count} times, "
        "not once; the rule moved: update MUTANTS",
        2,
      )
  copy_tree()
  configure(log)
  seeds = WORK / "seeds"
  shutil.rmtree(seeds, ignore_errors=True)
  if not run(
    [str(ROOT / ".venv/bin/python"), str(TREE / "tests/fuzz/make_corpus.py"), str(seeds)], log
  ):
    raise Stop(f"writing the seeds failed (see {log})", 1)
  seeds = seeds / "selection"
  layers = sorted({m.layer for m in mutants})
  for layer in layers:
    # tests/conftest.py fails every test without the driver: the ctest layer's
    # pytest files need it built once (its mutants leave the driver as it is).
    if not build(targets_for("pytest"), log):
      raise Stop(f"the unmutated tree does not build (see {log})", 1)
    baseline = tests_fail(layer, seeds, log)
    if any(baseline.values()):
      failing = ", ".join(k for k, v in baseline.items() if v)
      raise Stop(f"the unmutated tree fails {failing} (see {log})", 1)
  rows = []
  for m in mutants:
    path = TREE / m.path
    original = path.read_text()
    t0 = time.monotonic()
    try:
      path.write_text(original.replace(m.original, m.replacement))
      if not build(targets_for(m.layer), log):
        raise Stop(f"mutant '{m.name}' does not compile (see {log}): fix its text", 2)
      failed = tests_fail(m.layer, seeds, log)
    finally:
      path.write_text(original)
    rows.append((m, failed, f"{time.monotonic() - t0:.0f} s"))
    print(
      f"  {m.name}: {'killed' if any(failed.values()) else 'SURVIVED'} ({rows[-1][2]})", flush=True
    )
  return rows


def table(rows: list[tuple[Mutant, dict[str, bool], str]]) -> tuple[str, bool]:
  lines = [f"{'mutant':40} {'file':24} {'ctest':8} {'seeds':8} {'pytest':8} verdict", "-" * 100]
  ok = True
  for m, failed, _ in rows:

    def cell(kind: str) -> str:  # called in this iteration only
      if kind not in failed:  # noqa: B023
        return "-"
      return "killed" if failed[kind] else "missed"  # noqa: B023

    problems = []
    for kind in ("ctest", "pytest") if m.layer == "ctest" else ("pytest",):
      if not failed[kind]:
        problems.append(f"survives {kind}")
    if m.fuzzed and not failed["seeds"]:
      problems.append("the seeds miss a rule the fuzzer checks")
    ok = ok and not problems
    lines.append(
      f"{m.name:40} {Path(m.path).name:24} {cell('ctest'):8} "
      f"{cell('seeds'):8} {cell('pytest'):8} "
      f"{'; '.join(problems) if problems else 'ok'}"
    )
  return "\n".join(lines), ok


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--only", help="comma-separated mutant names")
  parser.add_argument("--list", action="store_true", help="list the mutants")
  parser.add_argument("--keep", action="store_true", help="keep build-mutants/ for a faster rerun")
  args = parser.parse_args(argv)
  mutants = MUTANTS
  if args.list:
    for m in MUTANTS:
      print(f"{m.name}: {m.path} ({m.layer})")
    return 0
  if args.only:
    names = [n.strip() for n in args.only.split(",")]
    unknown = [n for n in names if n not in {m.name for m in MUTANTS}]
    if unknown:
      print(f"mutation_check_core: unknown mutant {unknown[0]!r} (--list)", file=sys.stderr)
      return 2
    mutants = [m for m in MUTANTS if m.name in names]
  WORK.mkdir(exist_ok=True)
  log = WORK / "mutation_check.log"
  log.write_text("")
  start = time.monotonic()
  print(f"== mutation check of the core: {len(mutants)} mutants (log: {log})", flush=True)
  try:
    rows = check(mutants, log)
  except Stop as e:
    print(f"mutation_check_core: {e}", file=sys.stderr)
    return e.status
  finally:
    if not args.keep:
      shutil.rmtree(TREE, ignore_errors=True)
  text, ok = table(rows)
  print(text)
  print(
    f"== mutation check: {'every mutant killed' if ok else 'FAIL'}, "
    f"{time.monotonic() - start:.0f} s"
  )
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
