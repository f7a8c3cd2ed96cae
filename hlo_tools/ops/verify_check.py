"""Check, one named check of verify: its per-instruction results and its overall status."""

from __future__ import annotations

from typing import Any

from hlo_tools.hlo.ir import HloInstruction


class Check:
  """One named check: its per-instruction results and an overall status."""

  def __init__(self, name: str) -> None:
    self.name = name
    self.results: list[dict[str, Any]] = []
    self.note: str | None = None  # set when the whole check does not apply or was skipped

  def add(self, status: str, instr: HloInstruction | None, message: str) -> None:
    self.results.append(
      {
        "status": status,
        "instruction": instr.name if instr is not None else None,
        "computation": instr.computation.name if instr is not None else None,
        "line": instr.line if instr is not None else None,
        "message": message,
      }
    )

  @property
  def status(self) -> str:
    statuses = {r["status"] for r in self.results}
    if "fail" in statuses:
      return "fail"
    if "pass" in statuses:
      return "pass"
    if self.note is not None and self.note.startswith("skip"):
      return "skip"
    if "skip" in statuses:
      return "skip"
    return "not_applicable"

  def to_json(self) -> dict[str, Any]:
    return {"name": self.name, "status": self.status, "note": self.note, "results": self.results}
