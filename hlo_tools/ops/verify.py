"""Named checks on a module's collective-permutes (the checks:
hlo_tools.commands.verify's help): their names, their one run and its text; the
per-permute checks are in verify_structure, verify_choice and verify_runtime."""

from __future__ import annotations

from typing import Any

from hlo_tools import bounded_input
from hlo_tools.errors import InputError
from hlo_tools.model import backend_tables, decisions, driver, placement, program_mode, sources
from hlo_tools.model.driver_report import Report
from hlo_tools.model.options import Selection
from hlo_tools.model.topology import size_note
from hlo_tools.ops.verify_check import Check
from hlo_tools.ops.verify_choice import (
  check_backend_set,
  check_permute_mode,
  check_selection,
  check_user_mark,
)
from hlo_tools.ops.verify_runtime import (
  check_memory_space,
  check_nvshmem_heap,
  check_nvshmem_runtime,
  check_nvshmem_team,
  check_peer_safety,
)
from hlo_tools.ops.verify_structure import (
  check_backend_config,
  check_permutation,
  check_start_done,
  check_start_done_agree,
)

CHECKS = (
  "permutation",
  "start-done",
  "backend-config",
  "start-done-agree",
  "backend-set",
  "user-mark",
  "nvshmem-heap",
  "nvshmem-team",
  "nvshmem-runtime",
  "peer-safety",
  "selection",
  "memory-space",
  "hlo-verifier",
  "permute-mode",
)
# The checks of what a runtime can run at all (not of what the core would choose), and
# of what no tool may change (the user's mark).
SAFETY_CHECKS = (
  "permutation",
  "start-done",
  "start-done-agree",
  "backend-config",
  "user-mark",
  "nvshmem-heap",
  "nvshmem-team",
  "nvshmem-runtime",
  "peer-safety",
)


def ask_driver(
  path: str, selected: Selection, num_partitions: int | None = None
) -> driver.Answer | None:
  """nvshmem-opt's one run on the module, which both verifies it and decides each
  permute on XLA's parse; None when the driver is not built."""
  if driver.find_nvshmem_opt() is None:
    return None
  return driver.ask(
    path,
    selected.spec,
    selected.driver_table(),
    compare_upstream=False,
    num_partitions=num_partitions,
    backends=selected.backends and selected.table.backends,
    module_config=placement.config_path(path),
  )


def check_hlo_verifier(answer: driver.Answer | None) -> Check:
  """The check, from the driver's answer (ask_driver)."""
  check = Check("hlo-verifier")
  if answer is None:
    check.note = "skip: nvshmem-opt is not built (run scripts/setup.sh)"
    return check
  rc, _, message = answer
  if rc == -1:
    check.note = f"skip: could not run nvshmem-opt: {message}"
  elif rc == 0:
    check.results.append(
      {
        "status": "pass",
        "instruction": None,
        "computation": None,
        "line": None,
        "message": "HloVerifier accepts the module",
      }
    )
  elif rc == 2 and "HloVerifier rejects" not in message:
    # XLA could not load the module (or the driver refused an input beside it): no
    # check stands on a module XLA cannot load, so verify passes nothing (exit 2).
    raise InputError(message or "nvshmem-opt could not load the module (no message)")
  else:
    check.results.append(
      {
        "status": "fail",
        "instruction": None,
        "computation": None,
        "line": None,
        "message": f"nvshmem-opt exit {rc}: {message or '(no message)'}",
      }
    )
  return check


# ---------------------------------------------------------------------------------------


def verify(
  path: str,
  selected: Selection,
  run_driver: bool = True,
  source: sources.Source | None = None,
  num_partitions: int | None = None,
  max_bytes: int = bounded_input.DEFAULT_MAX_INPUT_BYTES,
  only: tuple | None = None,
  verified_by: str | None = None,
  per_op_xla: bool = False,
  given: sources.Source | None = None,
  answer: driver.Answer | None = None,
  config_report: Report | None = None,
) -> dict:
  """The verify JSON object; raises InputError for unreadable input.

  selected: the topology, cost table and backend set, parsed once by the caller
  (options.load), placed on the module's own device map as the driver's JSON says
  (placement.settled; without a driver run, as placement's reader reads it).
  only: the names of the checks to run (e.g. SAFETY_CHECKS), else every one.
  verified_by: how XLA's verifier already accepted this module (nvshmem-opt's
  rewrite verifies the text it writes), in place of another driver run.
  per_op_xla: the target XLA runs each permute's own mode (the series for jax
  v0.11.0's XLA), else the flag's (every stock XLA).
  given: the Source this module was rewritten from, whose users' marks it must keep.
  answer: nvshmem-opt's run on this module when the caller already made it (the one
  that derived its topology), in place of another.
  config_report: the driver's JSON of the run that wrote this module (and its config
  beside it), whose facts of XLA's config are this module's, where none runs here."""
  source = source or sources.read_source(path, max_bytes=max_bytes)
  verifier = None
  if run_driver and not verified_by:  # the driver's one run places the module too
    answer = answer or ask_driver(path, selected, num_partitions)
    verifier = check_hlo_verifier(answer)
  report = answer.report if answer is not None else None
  selected = placement.settled(selected, path, report or config_report, max_bytes)
  topology, table, topology_spec = selected.topology, selected.table, selected.spec
  cost_table = selected.cost_table
  backend_set = backend_tables.backend_set(table)
  source = sources.resolve_partitions(source, topology, num_partitions)
  module = source.module
  decisions.require_devices(source, topology)
  sources.adopt_driver_partitions(source, report)
  # The driver's decisions: this run's, else those of the run that wrote the module.
  perms = decisions.analyze(source, topology, table, tolerant=True, report=report or config_report)
  checks = [
    check_permutation(perms, source),
    check_start_done(module),
    check_backend_config(perms),
    check_start_done_agree(perms, module),
    check_backend_set(perms, backend_set),
    check_user_mark(
      perms, given, per_op_xla, program_mode.compiled_flag(source, config_report or report)
    ),
    check_nvshmem_heap(perms, table),
    check_nvshmem_team(perms, topology, source),
    check_nvshmem_runtime(perms, topology, source, table),
    check_peer_safety(perms, source, topology, table),
    check_selection(perms, topology_spec, per_op_xla),
    check_memory_space(perms, source),
  ]
  if verified_by:
    accepted = Check("hlo-verifier")
    accepted.results.append(
      {
        "status": "pass",
        "instruction": None,
        "computation": None,
        "line": None,
        "message": verified_by,
      }
    )
    checks.append(accepted)
  elif verifier is not None:
    checks.append(verifier)
  else:
    skipped = Check("hlo-verifier")
    skipped.note = "skip: not requested"
    checks.append(skipped)
  checks.append(check_permute_mode(perms, source, per_op_xla, config_report or report))
  if only is not None:
    checks = [c for c in checks if c.name in only]
  for check in checks:
    if not check.results and check.note is None:
      check.note = "no collective-permutes" if not perms else "nothing to check"
  failed = [c.name for c in checks if c.status == "fail"]
  return {
    "file": source.label,
    "module": module.name,
    "topology": topology_spec,
    "cost_table": cost_table,
    "backends": table.backends,
    "collective_permutes": len(perms),
    "num_partitions": source.num_partitions,
    "num_partitions_from": source.partitions_from,
    "passed": not failed,
    "failed_checks": failed,
    "topology_note": size_note(
      topology_spec, topology, source.num_partitions * source.num_replicas
    ),
    "checks": [c.to_json() for c in checks],
  }


_MARK = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP", "not_applicable": "N/A "}


def format_text(result: dict[str, Any]) -> str:
  lines = []
  inferred = result.get("num_partitions_from", "module header")
  if inferred not in ("module header", "default"):
    lines.append(
      f"{result['file']}: num_partitions {result['num_partitions']} ({inferred}; "
      "the module header does not say)"
    )
  if result.get("topology_note"):
    lines.append(result["topology_note"])
  for check in result["checks"]:
    head = f"{_MARK[check['status']]} {check['name']}"
    if check["note"]:
      head += f": {check['note']}"
    lines.append(head)
    for r in check["results"]:
      where = (
        f"%{r['instruction']} ({r['computation']}) line {r['line']}: " if r["instruction"] else ""
      )
      lines.append(f"  {r['status']:<4} {where}{r['message']}")
  verdict = (
    "all checks pass" if result["passed"] else "FAILED: " + ", ".join(result["failed_checks"])
  )
  lines.append(
    f"{result['file']}: {verdict} (topology {result['topology']}, "
    f"backends {result['backends']}, "
    f"{result['collective_permutes']} collective-permute(s))"
  )
  return "\n".join(lines)
