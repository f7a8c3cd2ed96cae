"""`hlo-tools verify` as the verify tests run it: the command in this process, its
checks by name, the driver's output to verify, a module edited in one place."""

import json
import subprocess
from pathlib import Path

from hlo_tools import cli
from hlo_tools.model import driver

from conftest import FIXTURES, NVSHMEM_OPT as DRIVER


def run(capsys, *argv):
  rc = cli.main(["verify", *map(str, argv)])
  out, err = capsys.readouterr()
  return rc, out, err


def checks(out):
  return {c["name"]: c for c in json.loads(out)["checks"]}


def edited(tmp_path, source, old, new, name="edited.hlo"):
  text = Path(source).read_text()
  assert old in text
  path = tmp_path / name
  path.write_text(text.replace(old, new))
  return path


def messages(check):
  return [(r["status"], r["message"]) for r in check.results]


def pass_output(tmp_path, fixture, topology, *extra):
  out = tmp_path / f"{fixture}.{topology}.nvshmem.hlo"
  # --annotate: the pass records its decision on each op (verify checks NCCL ones too).
  proc = subprocess.run(
    [
      str(DRIVER),
      str(FIXTURES / f"{fixture}.hlo"),
      f"--topology={topology}",
      "--annotate",
      "-o",
      str(out),
      *extra,
    ],
    capture_output=True,
    text=True,
    env=driver.driver_env(),
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  return out
