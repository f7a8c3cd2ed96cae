"""A user's _xla_collectives_mode mark is the permute's choice, in every tool.

tests/fixtures/marked_ring_1x1x8.* is a deviceless H200 compile (jax 0.10.2) of a
32 MiB-per-device ring in a 7-trip loop whose ppermute sits inside
`set_xla_metadata(_xla_collectives_mode="private")`; after optimizations both the
start and the done carry the mark. Peer memory is modeled faster than NCCL there, so
a tool that re-decided the permute would choose peer: explain must say the user's
mark and no other choice, nvshmem-opt must leave the permute as it is, the report
must count no saving for it, and verify must fail a module where the start and the
done disagree or a plan overrides the mark.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hlo_tools import cli
from hlo_tools.model import description, driver, modes, options, sources
from hlo_tools.ops import report, verify
from hlo_tools.ops.report.cases import Case
from hlo_tools.ops.report.text import step_line, step_saving

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
AFTER = FIXTURES / "marked_ring_1x1x8.after_optimizations.hlo"
BEFORE = FIXTURES / "marked_ring_1x1x8.before_async.hlo"
MARK = '_xla_collectives_mode="private"'
NO_MODE = '"collectives_mode":"COLLECTIVES_MODE_INVALID"'
PEER_MODE = '"collectives_mode":"COLLECTIVES_PEER_MEMORY"'


def _lines(text, opcode):
  return [l for l in text.splitlines() if f" {opcode}(" in l]


def _verify(capsys, path, *flags):
  rc = cli.main(
    ["verify", str(path), "--topology=1x1x8", "--backends=nccl,peer", "--format=json", *flags]
  )
  result = json.loads(capsys.readouterr().out)
  return rc, result, {c["name"]: c for c in result["checks"]}


def _edited(tmp_path, name, start=None, done=None):
  """The fixture with its start line and/or done line edited (old, new)."""
  text = AFTER.read_text()
  lines = text.split("\n")
  for opcode, edit in (("collective-permute-start", start), ("collective-permute-done", done)):
    if edit is None:
      continue
    [i] = [i for i, l in enumerate(lines) if f" {opcode}(" in l]
    assert edit[0] in lines[i], (opcode, edit)
    lines[i] = lines[i].replace(*edit)
  path = tmp_path / name
  path.write_text("\n".join(lines))
  return path


def test_the_fixture_is_marked_and_peer_would_win():
  text = AFTER.read_text()
  [start] = _lines(text, "collective-permute-start")
  [done] = _lines(text, "collective-permute-done")
  assert MARK in start and MARK in done and NO_MODE in start
  # Without the mark the core chooses peer memory for this permute.
  unmarked = description.describe(
    str(AFTER),
    options.load("1x1x8", backends="nccl,peer"),
    use_driver=False,
    source=sources.read_text("m.hlo", text.replace(MARK, 'x="y"')),
  )
  assert [e["choice"]["plan"] for e in unmarked["collectives"]] == ["peer"]


@pytest.mark.parametrize("path", [AFTER, BEFORE], ids=["after_optimizations", "before_async"])
@pytest.mark.parametrize("backends", ["nccl,peer", "nccl,nvshmem"])
def test_explain_says_the_mark_and_no_other_choice(capsys, path, backends):
  assert cli.main(["explain", str(path), "--topology=1x1x8", f"--backends={backends}"]) == 0
  out = capsys.readouterr().out
  choices = [l.strip() for l in out.splitlines() if l.strip().startswith("choice")]
  assert choices == [
    "choice        marked by the user: private -> nccl (backend DEFAULT, "
    + choices[0].split("(backend DEFAULT, ")[1]
  ], out
  reasons = [l.strip() for l in out.splitlines() if l.strip().startswith("reason")]
  assert reasons == ["reason        marked by the user: private; kept as marked"], out
  assert "choice        peer" not in out and "choice        nvshmem" not in out


@pytest.mark.parametrize("backends", ["nccl,peer", "nccl,nvshmem"])
def test_binding_and_driver_keep_the_mark_alike(backends):
  with_driver = description.describe(str(AFTER), options.load("1x1x8", backends=backends))
  binding = description.describe(
    str(AFTER), options.load("1x1x8", backends=backends), use_driver=False
  )
  for result, by in ((with_driver, "nvshmem-opt"), (binding, "core binding")):
    [e] = result["collectives"]
    assert e["decided_by"] == by and e["user_mark"] == "private"
    assert e["choice"] == {"plan": "nccl", "backend": "DEFAULT"}
    assert e["reason"] == "marked by the user: private; kept as marked"
    assert e["modeled_us"]["chosen"] == e["modeled_us"]["nccl"]


def test_nvshmem_opt_leaves_a_marked_permute_as_it_is(tmp_path, capsys):
  # --backends=nccl,peer, where peer wins the unmarked permute: start and done keep
  # the user's mark and the start's config names no mode.
  out = tmp_path / "out.hlo"
  proc = subprocess.run(
    [
      str(REPO / "build" / "nvshmem-opt"),
      str(AFTER),
      "--topology=1x1x8",
      "--backends=nccl,peer",
      "-o",
      str(out),
    ],
    capture_output=True,
    text=True,
    env=driver.driver_env(),
    timeout=300,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  text = out.read_text()
  [start] = _lines(text, "collective-permute-start")
  [done] = _lines(text, "collective-permute-done")
  assert MARK in start and MARK in done, start
  assert NO_MODE in start and PEER_MODE not in start
  rc, result, _ = _verify(capsys, out)
  assert rc == 0 and result["passed"], result["failed_checks"]


@pytest.mark.parametrize("mark", ["private", "Peer"])
def test_nvshmem_opt_writes_nothing_over_a_mark(tmp_path, mark):
  # The pass's own rule: a marked permute keeps its config, whatever the decision
  # (NCCL for "private", peer for "Peer", peer for the unmarked permute).
  marked = tmp_path / "marked.hlo"
  marked.write_text(AFTER.read_text().replace(MARK, f'_xla_collectives_mode="{mark}"'))
  out = tmp_path / "out.hlo"
  proc = subprocess.run(
    [
      str(REPO / "build" / "nvshmem-opt"),
      str(marked),
      "--topology=1x1x8",
      "--backends=nccl,peer",
      "-o",
      str(out),
    ],
    capture_output=True,
    text=True,
    env=driver.driver_env(),
    timeout=300,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  for opcode in ("collective-permute-start", "collective-permute-done"):
    assert _lines(out.read_text(), opcode) == _lines(marked.read_text(), opcode), opcode


def test_report_counts_no_saving_for_a_mark(tmp_path):
  case = Case(id="marked", title="marked ring", topology="1x1x8", path=str(AFTER), label=str(AFTER))
  data = report.build([case], tmp_path / "r", progress=False, backends="nccl,peer")
  assert data["summary"]["verify_passed"], data["summary"]["failed_checks"]
  [row] = data["summary"]["comparison"]
  assert row["plan"] == "nccl" and row["user_mark"] == "private"
  assert row["saved_us_per_run"] == row["saved_us_per_step"] == 0 and row["verdict"].startswith(
    "marked by the user: private"
  )
  assert step_saving([row])[0] == 0
  line = step_line([row])
  assert "save 0.00 us of modeled permute time" in line
  assert "%collective-permute-start nccl saves 0.00 us (marked by the user) x7 trips" in line


def test_verify_fails_a_start_rewritten_apart_from_its_done(tmp_path, capsys):
  # What a rewrite of the start alone leaves: the start says peer, the done private.
  path = _edited(tmp_path, "split.hlo", start=(MARK, '_xla_collectives_mode="peer"'))
  path.write_text(path.read_text().replace(NO_MODE, PEER_MODE, 1))
  rc, result, checks = _verify(capsys, path)
  assert rc == 1 and "start-done-agree" in result["failed_checks"]
  [r] = checks["start-done-agree"]["results"]
  assert r["status"] == "fail" and "'peer'" in r["message"] and "'private'" in r["message"]
  assert r["line"] == 20


def test_verify_fails_a_done_config_that_differs(tmp_path, capsys):
  path = _edited(
    tmp_path,
    "done_config.hlo",
    done=(
      "), frontend_attributes=",
      '), backend_config={"collective_backend_config":{"backend":"NVSHMEM"}}, frontend_attributes=',
    ),
  )
  rc, result, checks = _verify(capsys, path)
  assert rc == 1 and "start-done-agree" in result["failed_checks"]
  [r] = checks["start-done-agree"]["results"]
  assert "('DEFAULT', 'COLLECTIVES_MODE_INVALID')" in r["message"]
  assert "('NVSHMEM', 'COLLECTIVES_MODE_INVALID')" in r["message"]


def test_verify_fails_a_plan_that_overrides_the_mark(tmp_path, capsys):
  # Both ops still marked private, but the start's config chooses peer memory.
  path = _edited(tmp_path, "override.hlo", start=(NO_MODE, PEER_MODE))
  rc, result, checks = _verify(capsys, path)
  assert rc == 1
  assert {"user-mark", "selection"} <= set(result["failed_checks"])
  [r] = checks["user-mark"]["results"]
  assert "marked 'private'" in r["message"] and "runs peer, not nccl" in r["message"]
  [r] = checks["selection"]["results"]
  assert "the user's mark keeps nccl -> DEFAULT" in r["message"], r
  # The unedited fixture passes the same checks.
  rc, result, checks = _verify(capsys, AFTER)
  assert rc == 0 and checks["user-mark"]["status"] == "pass"
  assert checks["start-done-agree"]["status"] == "pass"


def test_verify_fails_a_rewrite_that_changed_the_mark(tmp_path):
  # The report's check of a rewrite: the mark must be the one the input had.
  changed = _edited(
    tmp_path,
    "changed.hlo",
    start=(MARK, '_xla_collectives_mode="peer"'),
    done=(MARK, '_xla_collectives_mode="peer"'),
  )
  changed.write_text(changed.read_text().replace(NO_MODE, PEER_MODE, 1))
  given = sources.read_source(str(AFTER))
  result = verify.verify(
    str(changed), options.load("1x1x8", backends="nccl,peer"), run_driver=False, given=given
  )
  assert not result["passed"] and "user-mark" in result["failed_checks"]
  [check] = [c for c in result["checks"] if c["name"] == "user-mark"]
  assert "no tool may change a user's mark" in check["results"][0]["message"]
  # Without the input beside it, the same module is self-consistent on the series'
  # XLA, which runs the mark's mode; a stock XLA reads no mark and runs the flag's
  # (no config beside the edited file: XLA's default, private), which user-mark fails.
  alone = verify.verify(
    str(changed), options.load("1x1x8", backends="nccl,peer"), run_driver=False, per_op_xla=True
  )
  assert "user-mark" not in alone["failed_checks"]
  stock = verify.verify(str(changed), options.load("1x1x8", backends="nccl,peer"), run_driver=False)
  [check] = [c for c in stock["checks"] if c["name"] == "user-mark"]
  assert check["results"][0]["message"].endswith(
    "a stock XLA reads no mark: it runs the flag's mode, COLLECTIVES_PRIVATE_MEMORY, "
    "XLA's default (no module config beside the file), not COLLECTIVES_PEER_MEMORY"
  )


@pytest.mark.parametrize("topology,plan", [("1x1x8", "peer"), ("1x2x4", "nccl")])
def test_a_peer_mark_is_kept_where_it_can_run_and_said_where_not(tmp_path, topology, plan):
  # Marked "Peer": peer memory where the permute can run it; where it cannot (two
  # processes of 4 GPUs), NCCL, and the reason says why XLA keeps the flag's mode.
  path = tmp_path / "peer_mark.hlo"
  path.write_text(AFTER.read_text().replace(MARK, '_xla_collectives_mode="Peer"'))
  entries = [
    description.describe(str(path), options.load(topology, backends="nccl,peer"), use_driver=use)[
      "collectives"
    ][0]
    for use in (True, False)
  ]
  assert [e["decided_by"] for e in entries] == ["nvshmem-opt", "core binding"]
  for e in entries:
    assert e["choice"]["plan"] == plan and e["user_mark"] == "Peer"
    assert e["reason"].startswith("marked by the user: Peer; kept as marked")
    assert (", though XLA keeps the flag's mode: peer refused: " in e["reason"]) == (plan == "nccl")
  assert entries[0]["reason"] == entries[1]["reason"]


_WARP = r"""
from jax import lax
from jax.experimental.xla_metadata import set_xla_metadata
def body(x):
  with set_xla_metadata(_xla_collectives_mode="warp_drive"):
    return lax.ppermute(x, "cp", [(0, 1), (1, 0)])
f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("cp"), out_specs=P("cp")))
f.lower(jax.ShapeDtypeStruct((2, 1 << 20), np.float32,
                             sharding=NamedSharding(mesh, P("cp")))).compile()
"""


@pytest.fixture(scope="module")
def warp_drive(tmp_path_factory):
  """A ring jax marked _xla_collectives_mode="warp_drive", compiled for two H200s."""
  from conftest import compile_two_h200

  dump = compile_two_h200(_WARP, tmp_path_factory.mktemp("warp") / "dump")
  [after] = dump.glob("*jit_body*gpu_after_optimizations.txt")
  assert "warp_drive" in after.read_text()
  return after


@pytest.mark.parametrize("tool", ["explain", "verify", "report", "nvshmem-opt"])
def test_a_mark_no_mode_names_is_an_error_in_every_tool(warp_drive, tool, tmp_path):
  """No XLA runs "warp_drive" (the patched one fails the compile): every tool stops
  with one line naming the permute and the value, and exit 2."""
  args = [str(warp_drive), "--topology=1x1x2", "--backends=nccl,peer"]
  if tool == "nvshmem-opt":
    proc = subprocess.run(
      [str(REPO / "build" / "nvshmem-opt"), *args, "-o", str(tmp_path / "out.hlo")],
      capture_output=True,
      text=True,
      timeout=120,
      check=False,
    )
    assert not (tmp_path / "out.hlo").exists()
  else:
    extra = ["--out", str(tmp_path / "report")] if tool == "report" else []
    proc = subprocess.run(
      [sys.executable, "-m", "hlo_tools.cli", tool, *args, *extra],
      capture_output=True,
      text=True,
      timeout=300,
      check=False,
    )
  assert proc.returncode == 2, (proc.stdout, proc.stderr)
  last = proc.stderr.strip().splitlines()[-1]
  assert (
    '%collective-permute-start: _xla_collectives_mode="warp_drive" names no '
    "collectives mode" in last
  ), proc.stderr


_PEER_RING = _WARP.replace('"warp_drive"', '"peer"').replace("1 << 20", "16 << 20")


@pytest.fixture(scope="module")
def peer_marked(tmp_path_factory):
  """A ring jax marked peer, compiled for two H200s by jax 0.10.2's stock XLA with
  the flag at its default (XLA's config beside it says PRIVATE)."""
  from conftest import compile_two_h200

  dump = compile_two_h200(_PEER_RING, tmp_path_factory.mktemp("peer") / "dump")
  [after] = dump.glob("*jit_body*gpu_after_optimizations.txt")
  return after


def test_explain_on_a_stock_xla_says_the_mark_does_not_run(peer_marked, capsys):
  assert cli.main(["explain", str(peer_marked), "--topology=1x1x2", "--backends=nccl,peer"]) == 0
  out = capsys.readouterr().out
  rows = {l.split()[0]: l.strip() for l in out.splitlines() if l.startswith("  ")}
  assert "kept as marked" not in out and "taken over the flag's mode" not in out
  assert rows["runs"].startswith("runs          COLLECTIVES_PRIVATE_MEMORY, the flag's mode")
  assert rows["choice"].endswith("runs COLLECTIVES_PRIVATE_MEMORY on this XLA, not as marked")
  assert rows["reason"].startswith(
    "reason        marked by the user: peer; not run as marked: a stock XLA reads no mark"
  )
  # On the series' XLA the mark runs, and the lines say so.
  assert (
    cli.main(
      ["explain", str(peer_marked), "--topology=1x1x2", "--backends=nccl,peer", "--per-op-modes"]
    )
    == 0
  )
  out = capsys.readouterr().out
  assert "reason        marked by the user: peer; kept as marked" in out
  assert "runs          COLLECTIVES_PEER_MEMORY" in out


def test_verify_user_mark_checks_the_mode_that_runs(peer_marked, capsys):
  args = ["verify", str(peer_marked), "--topology=1x1x2", "--backends=nccl,peer", "--format=json"]
  assert cli.main(args) == 1
  checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
  message = checks["user-mark"]["results"][0]["message"]
  assert checks["user-mark"]["status"] == "fail"
  assert (
    "a stock XLA reads no mark: it runs the flag's mode, COLLECTIVES_PRIVATE_MEMORY "
    f"({peer_marked.parent}/module_0001.jit_body.config.pbtxt)" in message
  ), message
  assert cli.main(args + ["--per-op-modes"]) == 0
  checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
  assert checks["user-mark"]["status"] == "pass"


def test_the_tools_own_mode_attribute_is_decided_again(tmp_path, capsys):
  """nvshmem-opt writes its choice as _xla_collectives_mode (what the patched XLA
  reads) and says it is its own: a second run on its output, on a layout where peer
  cannot run (one GPU per process), decides the permute again instead of keeping
  it as a user's mark, and the tools read no user's mark there."""
  ring = FIXTURES / "ring_1x1x8.after_optimizations.hlo"
  table = tmp_path / "table.txt"  # peer wins where it can run
  table.write_text(
    "links { backend: PEER link_class: NVLINK latency_us: 1 "
    "bandwidth_gbps: 900 per_buffer_us: 1 }\n"
  )
  first, second = tmp_path / "first.hlo", tmp_path / "second.hlo"
  for src, dst, spec in ((ring, first, "1x1x8"), (first, second, "1x1x8:gpus_per_process=1")):
    proc = subprocess.run(
      [
        str(REPO / "build" / "nvshmem-opt"),
        str(src),
        f"--topology={spec}",
        "--backends=nccl,peer",
        "--per-op-modes",
        f"--cost-table={table}",
        "-o",
        str(dst),
      ],
      capture_output=True,
      text=True,
      env=driver.driver_env(),
      timeout=300,
      check=False,
    )
    assert proc.returncode == 0, proc.stderr
  starts = _lines(first.read_text(), "collective-permute-start")
  assert starts and all(
    '_xla_collectives_mode="peer"' in l and '_nvshmem_opt_mode="peer"' in l for l in starts
  ), starts
  starts = _lines(second.read_text(), "collective-permute-start")
  assert all(
    '_xla_collectives_mode="private"' in l
    and '_nvshmem_opt_mode="private"' in l
    and PEER_MODE not in l
    for l in starts
  ), starts
  assert (
    cli.main(
      [
        "explain",
        str(first),
        "--topology=1x1x8:gpus_per_process=1",
        "--backends=nccl,peer",
        f"--cost-table={table}",
      ]
    )
    == 0
  )
  out = capsys.readouterr().out
  assert "marked by the user" not in out and "choice        nccl" in out
  # A user's own mark of the same permute stays law.
  marked = tmp_path / "marked.hlo"
  marked.write_text(
    first.read_text()
    .replace('_nvshmem_opt_mode="peer",', "")
    .replace(',_nvshmem_opt_mode="peer"', "")
  )
  assert "_nvshmem_opt_mode" not in marked.read_text()
  assert (
    cli.main(
      [
        "explain",
        str(marked),
        "--topology=1x1x8:gpus_per_process=1",
        "--backends=nccl,peer",
        f"--cost-table={table}",
      ]
    )
    == 0
  )
  assert "marked by the user: peer" in capsys.readouterr().out


_COMBINED = _WARP.replace(
  """def body(x):
  with set_xla_metadata(_xla_collectives_mode="warp_drive"):
    return lax.ppermute(x, "cp", [(0, 1), (1, 0)])""",
  """def body(x):
  with set_xla_metadata(_xla_collectives_mode="peer"):
    a = lax.ppermute(x, "cp", [(0, 1), (1, 0)])
  with set_xla_metadata(_xla_collectives_mode="Peer"):
    b = lax.ppermute(x * 3, "cp", [(0, 1), (1, 0)])
  return a + b""",
)


def test_mark_values_as_the_series_parses_them():
  assert modes.mark_mode("Peer,peer") == modes.MODES["peer"]
  assert modes.mark_mode("PRIVATE") == modes.MODES["private"]
  for bad in ("peer,symmetric", "warp_drive", "", "peer,", " peer", "p\u00e9er"):
    assert modes.mark_mode(bad) is None, bad


@pytest.mark.parametrize("tool", ["explain", "verify", "nvshmem-opt"])
def test_a_combined_permutes_joined_marks_of_one_mode_are_a_mark(tool, tmp_path_factory):
  """jax 0.10.2's combiner joins two permutes marked peer and Peer into one marked
  "Peer,peer", which the series' assigner reads as peer: every tool takes it as a
  peer mark, none as an error."""
  from conftest import compile_two_h200

  dump = compile_two_h200(_COMBINED, tmp_path_factory.mktemp("combined") / "dump")
  [after] = dump.glob("*jit_body*gpu_after_optimizations.txt")
  assert '_xla_collectives_mode="Peer,peer"' in after.read_text()
  args = [str(after), "--topology=1x1x2", "--backends=nccl,peer"]
  if tool == "nvshmem-opt":
    cmd = [str(REPO / "build" / "nvshmem-opt"), *args, "--mode=explain"]
  else:
    cmd = [sys.executable, "-m", "hlo_tools.cli", tool, *args, "--per-op-modes"]
  proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode == 0, (proc.stdout, proc.stderr)
  if tool != "verify":
    assert "marked by the user: Peer,peer; kept as marked" in proc.stdout, proc.stdout
