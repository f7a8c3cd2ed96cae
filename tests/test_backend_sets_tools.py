"""explain, verify, report and diff over a backend set (--backends), on real modules.

The module is a ring-attention forward that jax (0.10.2, deviceless GPU compile)
builds for two H200s, with K and V blocks of 16 MiB each: big enough for the measured
2x H200 table of jax 0.11.2 (peer memory from 16 MiB on) to choose peer memory.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hlo_tools import cli
from hlo_tools.hlo import reader
from hlo_tools.model import backend_tables, driver
from hlo_tools.model.collectives import collective_permutes
from hlo_tools.ops import report, verify
from hlo_tools.ops.report.cases import Case
from hlo_tools.ops.report.text import summary_text

REPO = Path(__file__).resolve().parents[1]
DRIVER = REPO / "build" / "nvshmem-opt"
H200_TABLE = REPO / "core" / "tables" / "h200x2_nvlink_cost_table_jax0112.txtpb"
JAX0112 = (
  REPO / "tests" / "fixtures" / "jax0112" / "h200_jax0112_ppermute_loop.after_optimizations.hlo"
)
PEER = "COLLECTIVES_PEER_MEMORY"
SYMMETRIC = "COLLECTIVES_SYMMETRIC_MEMORY"
PEER_SET = ["--backends=nccl,peer", f"--cost-table={H200_TABLE}"]


def run(capsys, command, *argv):
  rc = cli.main([command, *map(str, argv)])
  out, err = capsys.readouterr()
  return rc, out, err


def checks(out):
  return {c["name"]: c for c in json.loads(out)["checks"]}


def nvshmem_opt(*argv):
  proc = subprocess.run(
    [str(DRIVER), *map(str, argv)],
    capture_output=True,
    text=True,
    env=driver.driver_env(),
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  return proc


@pytest.fixture(scope="module")
def ring2(tmp_path_factory):
  """A jax ring-attention module for 1x1x2 with 16 MiB permutes, as XLA optimizes it."""
  out = tmp_path_factory.mktemp("ring2") / "dump"
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "hlo_tools.cli",
      "dump",
      f"--out={out}",
      "--topology=1x1x2",
      "--seq_len=16384",
      "--num_heads=8",
      "--num_kv_heads=8",
      "--head_dim=128",
      "--nocausal",
      "--quiet",
    ],
    capture_output=True,
    text=True,
    check=False,
    cwd=REPO,
    timeout=300,
  )
  assert proc.returncode == 0, proc.stderr
  module = out / "after_optimizations.hlo"
  perms = collective_permutes(reader.parse_hlo_file(module))
  assert perms and all(p.bytes_per_device >= 16 << 20 for p in perms)
  # jax 0.10.2 writes collectives_mode on every permute; XLA's default is no mode.
  assert {p.collectives_mode for p in perms} == {backend_tables.NO_MODE}
  return module


@pytest.fixture(scope="module")
def peer_output(ring2, tmp_path_factory):
  out = tmp_path_factory.mktemp("peer") / "ring2.peer.hlo"
  nvshmem_opt(ring2, "--topology=1x1x2", *PEER_SET, "--per-op-modes", "-o", out)
  return out


def flipped(tmp_path, path, old, new, count=1):
  text = path.read_text()
  assert text.count(old) >= count
  out = tmp_path / f"flipped.{path.name}"
  out.write_text(text.replace(old, new, count))
  return out


def test_peer_output_explained_and_verified(capsys, ring2, peer_output):
  rc, out, _ = run(capsys, "explain", peer_output, "--topology=1x1x2", *PEER_SET, "--format=json")
  assert rc == 0
  result = json.loads(out)
  assert result["backends"] == "nccl,peer" and result["collectives"]
  for e in result["collectives"]:
    assert e["current_collectives_mode"] == PEER and e["current_plan"] == "peer"
    assert e["choice"] == {"plan": "peer", "backend": "DEFAULT"}
    assert e["choice_collectives_mode"] == PEER
    assert list(e["backends"]) == ["nccl", "peer"]
    assert e["backends"]["peer"]["us"] < e["backends"]["nccl"]["us"]
    assert e["backends"]["peer"]["refused"] is None
  rc, out, _ = run(capsys, "explain", peer_output, "--topology=1x1x2", *PEER_SET)
  # nvshmem-opt writes its choice as the mode attribute too (what the patched XLA
  # reads), and says it is its own: the tools decide it again, no user's mark.
  assert ("choice        peer (backend DEFAULT, collectives_mode COLLECTIVES_PEER_MEMORY") in out
  assert "marked by the user" not in out
  assert f"now DEFAULT, collectives_mode {PEER} (peer)" in out
  # A mode per permute runs only on an XLA with the series (a stock one runs the flag's).
  rc, out, _ = run(
    capsys, "verify", peer_output, "--topology=1x1x2", *PEER_SET, "--per-op-modes", "--format=json"
  )
  assert rc == 0, out
  by_name = checks(out)
  assert list(by_name) == list(verify.CHECKS)
  for name in ("backend-config", "backend-set", "peer-safety", "selection"):
    assert by_name[name]["status"] == "pass", by_name[name]
  # The input: XLA left NCCL; explain shows what the pass will choose.
  rc, out, _ = run(capsys, "explain", ring2, "--topology=1x1x2", *PEER_SET, "--format=json")
  assert {e["current_plan"] for e in json.loads(out)["collectives"]} == {"nccl"}
  assert {e["choice"]["plan"] for e in json.loads(out)["collectives"]} == {"peer"}


def test_hand_flipped_mode_fails_verify_naming_the_op(capsys, tmp_path, peer_output):
  # A mode the set does not offer: the first permute flipped to symmetric memory.
  path = flipped(tmp_path, peer_output, PEER, SYMMETRIC)
  rc, out, _ = run(
    capsys, "verify", path, "--topology=1x1x2", *PEER_SET, "--format=json", "--no-hlo-verifier"
  )
  assert rc == 1
  result = json.loads(out)
  assert {"backend-set", "peer-safety", "selection"} <= set(result["failed_checks"])
  failed = [r for r in checks(out)["selection"]["results"] if r["status"] == "fail"]
  assert len(failed) == 1 and failed[0]["instruction"].startswith("collective-permute-start")
  # The attribute is nvshmem-opt's own choice, not a user's mark: the core decides.
  assert failed[0]["line"] > 0 and "the core decides peer" in failed[0]["message"]
  [bad] = [r for r in checks(out)["backend-set"]["results"] if r["status"] == "fail"]
  assert bad["instruction"] == failed[0]["instruction"]
  assert "symmetric, which the backend set nccl,peer does not contain" in bad["message"]
  rc, out, _ = run(capsys, "verify", path, "--topology=1x1x2", *PEER_SET, "--no-hlo-verifier")
  assert rc == 1 and f"%{bad['instruction']}" in out and "FAIL selection" in out


def test_flip_back_to_nccl_fails_where_the_pass_recorded_peer(capsys, tmp_path, ring2):
  annotated = tmp_path / "annotated.hlo"
  nvshmem_opt(ring2, "--topology=1x1x2", *PEER_SET, "--per-op-modes", "--annotate", "-o", annotated)
  path = flipped(tmp_path, annotated, PEER, backend_tables.NO_MODE)
  # On the series' XLA, which runs each op's mode (a stock one runs the program's).
  rc, out, _ = run(
    capsys,
    "verify",
    path,
    "--topology=1x1x2",
    *PEER_SET,
    "--per-op-modes",
    "--format=json",
    "--no-hlo-verifier",
  )
  assert rc == 1 and json.loads(out)["failed_checks"] == ["selection"]
  [bad] = [r for r in checks(out)["selection"]["results"] if r["status"] == "fail"]
  assert "backend DEFAULT (nccl), the core decides peer" in bad["message"]
  assert "_nvshmem_plan says peer" not in bad["message"]


def test_peer_where_its_safety_rule_refuses(capsys, peer_output):
  # The same module checked for two hosts of one GPU: peer memory needs one host.
  rc, out, _ = run(
    capsys,
    "verify",
    peer_output,
    "--topology=1x2x1",
    *PEER_SET,
    "--format=json",
    "--no-hlo-verifier",
  )
  assert rc == 1
  safety = checks(out)["peer-safety"]
  assert safety["status"] == "fail"
  assert all(
    "peer refused: 2 of 2 edges leave their host" in r["message"] for r in safety["results"]
  )
  # And for the pinned XLA's set, peer memory is no backend at all.
  rc, out, _ = run(
    capsys,
    "verify",
    peer_output,
    "--topology=1x1x2",
    f"--cost-table={H200_TABLE}",
    "--backends=nccl,nvshmem",
    "--format=json",
    "--no-hlo-verifier",
  )
  assert rc == 1 and "backend-set" in json.loads(out)["failed_checks"]


def test_default_set_is_the_tables(capsys, ring2):
  # No --backends: the table's set, as for nvshmem-opt (the measured table says nccl,peer).
  rc, out, _ = run(
    capsys, "explain", ring2, "--topology=1x1x2", f"--cost-table={H200_TABLE}", "--format=json"
  )
  assert rc == 0 and json.loads(out)["backends"] == "nccl,peer"
  rc, out, _ = run(capsys, "explain", ring2, "--topology=1x1x2", "--format=json")
  result = json.loads(out)
  assert result["backends"] == "nccl,nvshmem"
  for e in result["collectives"]:
    assert e["choice_collectives_mode"] is None and list(e["backends"]) == ["nccl", "nvshmem"]
  rc, out, _ = run(capsys, "explain", ring2, "--topology=1x1x2")
  assert "modeled       nccl " in out and ", nvshmem " in out and "split" not in out


@pytest.mark.parametrize("command", ["explain", "verify"])
def test_bad_backend_set_exits_2(capsys, command):
  rc, out, err = run(capsys, command, JAX0112, "--topology=1x1x1", "--backends=nccl,warp")
  assert rc == 2 and out == ""
  [line] = err.strip().splitlines()
  assert "--backends" in line and "warp" in line


def test_newer_xla_module_modes(capsys, tmp_path):
  # jax 0.11.2's text: the mode is read; a hand-written peer mode is checked like any.
  [perm] = collective_permutes(reader.parse_hlo_file(JAX0112))
  assert (
    perm.collectives_mode == backend_tables.NO_MODE and backend_tables.op_backend(perm) == "nccl"
  )
  path = flipped(
    tmp_path,
    JAX0112,
    f'"collectives_mode":"{backend_tables.NO_MODE}"',
    f'"collectives_mode":"{PEER}"',
  )
  rc, out, _ = run(capsys, "explain", path, "--topology=1x1x1", *PEER_SET, "--format=json")
  [e] = json.loads(out)["collectives"]
  assert rc == 0 and e["current_plan"] == "peer" and e["choice"]["plan"] == "nccl"
  rc, out, _ = run(
    capsys, "verify", path, "--topology=1x1x1", *PEER_SET, "--format=json", "--no-hlo-verifier"
  )
  # A stock XLA would not run that op's own peer mode either.
  assert rc == 1 and json.loads(out)["failed_checks"] == ["selection", "permute-mode"]
  [r] = checks(out)["selection"]["results"]
  assert r["instruction"] == "collective-permute-start" and "the core decides nccl" in r["message"]
  path = flipped(
    tmp_path,
    JAX0112,
    f'"collectives_mode":"{backend_tables.NO_MODE}"',
    '"collectives_mode":"COLLECTIVES_MAGIC"',
  )
  rc, out, _ = run(
    capsys, "verify", path, "--topology=1x1x1", *PEER_SET, "--format=json", "--no-hlo-verifier"
  )
  assert rc == 1 and "backend-config" in json.loads(out)["failed_checks"]


def test_report_passes_the_set_and_shows_the_mode(tmp_path, ring2):
  data = report.build(
    [Case(id="ring2", title="ring on 1x1x2", topology="1x1x2", config=None, path=str(ring2))],
    tmp_path / "r",
    cost_table=str(H200_TABLE),
    progress=False,
    backends="nccl,peer",
    per_op_xla=True,
  )
  assert data["backends"] == "nccl,peer"
  assert data["summary"]["verify_passed"], data["summary"]["failed_checks"]
  rows = data["summary"]["comparison"]
  assert rows and all(r["plan"] == "peer" and r["collectives_mode"] == PEER for r in rows)
  assert all("peer memory wins" in r["verdict"] for r in rows)
  summary = summary_text(data)
  assert "backends nccl,peer" in summary and f"peer ({PEER})" in summary
  rewritten = list((tmp_path / "r").rglob("*.nvshmem.hlo"))
  assert rewritten and all(PEER in p.read_text() for p in rewritten)
  page = (tmp_path / "r" / "index.html").read_text()
  assert PEER in page
  # The page speaks of the set the target XLA offers: peer memory, never NVSHMEM
  # (upstream's own answer, a column of its own, aside).
  assert "NCCL or peer memory" in page and "NVSHMEM collective-permute report" not in page
  prose = re.sub(r"<td>NVSHMEM<br>|<td>NVSHMEM</td>|<svg.*?</svg>", "", page, flags=re.S)
  prose = prose[: prose.index("<h2>Files</h2>")]
  assert "NVSHMEM" not in re.sub(r"<table class=\"verify\">.*?</table>", "", prose, flags=re.S)
  assert "peer memory (whole permute)" in page and "NVSHMEM (whole permute)" not in page
  assert summary.startswith("Collective-permute report: NCCL or peer memory")
