"""Where nvshmem-opt ran, explain and report take every decision from its JSON: the
binding's decisions (selection.decide and the core's rule functions) are never
called on that path. Without the driver, the same commands decide through the
binding (the path this test forbids is then the only one)."""

import os
import shutil
import sys

import pytest

from hlo_tools import cli, selection
from hlo_tools.model import driver

from conftest import FIXTURES

# The binding's entry points that decide or refuse a backend. (edge_time_us, the
# table's price of one edge, stays: explain breaks the driver's modeled time down
# by it, "priced by", and decides nothing with it.)
DECIDING = (
  "decide",
  "layout_refusal",
  "nvshmem_pe_reason",
  "nvshmem_heap_reason",
  "nvshmem_hang_reason",
)
MODULE = FIXTURES / "train_step_1x1x8.after_optimizations.hlo"

needs_driver = pytest.mark.skipif(driver.find_nvshmem_opt() is None, reason=driver.NOT_INSTALLED)


# The report's chart prices sizes the module does not have (a curve per backend
# around each permute's size): only the binding can answer those.
WHAT_IF = os.path.join("hlo_tools", "ops", "report", "chart.py")


def _forbid_binding(monkeypatch, calls):
  for name in DECIDING:
    real = getattr(selection, name)

    def refuse(*args, _name=name, _real=real, **kwargs):
      if sys._getframe(1).f_code.co_filename.endswith(WHAT_IF):  # the chart's own call
        return _real(*args, **kwargs)
      calls.append(_name)
      raise AssertionError(f"selection.{_name} called on the driver's path")

    monkeypatch.setattr(selection, name, refuse)


@needs_driver
@pytest.mark.parametrize("backends", ["nccl,nvshmem", "nccl,peer", "nccl,peer,symmetric"])
def test_explain_takes_every_decision_from_the_driver(monkeypatch, capsys, backends):
  calls: list[str] = []
  _forbid_binding(monkeypatch, calls)
  rc = cli.main(["explain", str(MODULE), "--topology=1x1x8", f"--backends={backends}"])
  out, err = capsys.readouterr()
  assert (rc, calls) == (0, []), err
  assert "%" in out


def test_without_the_driver_explain_decides_through_the_binding(monkeypatch, capsys):
  # The same forbidden calls are this path's: the test above could fail.
  monkeypatch.setenv("NVSHMEM_OPT", "/nonexistent/nvshmem-opt")
  calls: list[str] = []
  _forbid_binding(monkeypatch, calls)
  with pytest.raises(AssertionError, match="on the driver's path"):
    cli.main(["explain", str(MODULE), "--topology=1x1x8", "--backends=nccl,peer"])
  assert calls


@needs_driver
@pytest.mark.parametrize("backends", ["nccl,nvshmem", "nccl,peer,symmetric"])
def test_report_takes_every_decision_from_the_driver(monkeypatch, capsys, tmp_path, backends):
  dump_dir = tmp_path / "dump"
  shutil.copytree(FIXTURES / "ring_product_grad_1x2x4.passes", dump_dir)
  calls: list[str] = []
  _forbid_binding(monkeypatch, calls)
  rc = cli.main(["report", str(dump_dir), f"--out={tmp_path / 'r'}", f"--backends={backends}"])
  _, err = capsys.readouterr()
  assert (rc, calls) == (0, []), err
