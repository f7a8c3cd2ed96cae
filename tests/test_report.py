"""hlo-tools report: the whole story on small shapes, the page in headless Chromium."""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from hlo_tools import cli
from hlo_tools.ops import outdir, report
from hlo_tools.ops.report.cases import (
  DEFAULTS,
  ring_case,
)

REPO = Path(__file__).resolve().parents[1]
DRIVER = REPO / "build" / "nvshmem-opt"
FIXTURES = REPO / "tests" / "fixtures"
SMALL = ["--seq_len=4096", "--num_heads=4", "--num_kv_heads=2", "--head_dim=64"]
CHROMIUM = next(
  (
    p
    for p in (
      "/usr/bin/chromium",
      shutil.which("chromium") or "",
      shutil.which("chromium-browser") or "",
    )
    if p and os.path.exists(p)
  ),
  None,
)


@pytest.fixture(scope="session")
def small_report(tmp_path_factory):
  out = tmp_path_factory.mktemp("report") / "r"
  proc = subprocess.run(
    [
      str(REPO / ".venv" / "bin" / "python"),
      "-m",
      "hlo_tools.cli",
      "report",
      f"--out={out}",
      "--quiet",
      *SMALL,
    ],
    capture_output=True,
    text=True,
    check=False,
    cwd=REPO,
    timeout=300,
  )
  return out, proc


def test_report_directory_holds_verdicts_and_json(small_report):
  out, proc = small_report
  assert proc.returncode == 0, proc.stderr
  assert "verify: all checks pass" in proc.stdout
  # K and V (512 tokens x 2 heads x 64 x bf16 each) in one permute, 2 hosts: NCCL,
  # NVSHMEM refused (two edges leave their host).
  assert re.search(
    r"%\S+ \(256\.0 KiB/device x8 trips; nvlink 6, network 2\): nccl,.*"
    r"leave their host",
    proc.stdout,
  ), proc.stdout
  data = json.loads((out / "report.json").read_text())
  [case] = data["cases"]
  assert case["config"]["seq_len"] == 4096 and case["topology"] == "1x2x4"
  assert case["stages"] == ["before_async", "after_optimizations"]
  assert case["note"] is None  # the module the pass sees
  for name in data["files"]:
    assert (out / name).is_file(), name
  assert data["summary"]["verify_passed"]
  perms = case["collective_permutes"]
  assert perms and all(p["choice"]["plan"] == "nccl" for p in perms)
  explained = json.loads((out / case["id"] / "json" / "explain.json").read_text())
  assert len(explained["collectives"]) == len(perms)
  trace = json.loads((out / case["id"] / "json" / "trace.json").read_text())
  assert trace["final"] and trace["events"]
  page = (out / "index.html").read_text()
  assert "<script" not in page and "<svg" in page and 'id="comparison"' in page


@pytest.mark.long
def test_side_by_side_shows_where_nvshmem_wins_and_loses(tmp_path):
  # One host, a short and a long context: the same program, two answers.
  config = dict(DEFAULTS, num_heads=4, num_kv_heads=2, head_dim=64)
  cases = [ring_case(dict(config, seq_len=n), "1x1x8") for n in (4096, 1 << 20)]
  data = report.build(cases, tmp_path / "r", progress=False)
  rows = data["summary"]["comparison"]
  # Short: K and V combined into one permute; long: over the combiner's threshold, two.
  assert [r["case"] for r in rows] == ["1x1x8-4K"] + ["1x1x8-1024K"] * (len(rows) - 1)
  for row in rows:
    faster = "nvshmem" if row["nvshmem_us"] < row["nccl_us"] else "nccl"
    assert row["plan"] == faster or "margin" in row["verdict"]
    assert row["saved_us_per_run"] >= 0
  # The modeled NVSHMEM advantage grows with the message size.
  gain = [(r["nccl_us"] - r["nvshmem_us"]) / r["nccl_us"] for r in rows]
  assert gain[0] < min(gain[1:])
  assert data["summary"]["verify_passed"], data["summary"]["failed_checks"]
  assert "NVSHMEM wins" in rows[-1]["verdict"]
  page = (tmp_path / "r" / "index.html").read_text()
  takeaways = page[page.index('id="takeaways"') : page.index('id="comparison"')]
  # One item per configuration, each listing its permutes.
  assert takeaways.count("collective-permute(s)<ul>") == 2 and "NVSHMEM wins" in takeaways


def test_report_of_a_file(tmp_path):
  out = tmp_path / "r"
  rc = cli.main(
    [
      "report",
      str(FIXTURES / "ring_1x2x4.lowered.hlo"),
      "--topology=1x2x4",
      f"--out={out}",
      "--quiet",
    ]
  )
  assert rc == 0
  data = json.loads((out / "report.json").read_text())
  [case] = data["cases"]
  assert case["stages"] == ["input"] and case["input"].endswith("ring_1x2x4.lowered.hlo")
  assert [p["instruction"] for p in case["collective_permutes"]] == ["ppermute.1"]
  assert all(p["trip_count"] == 8 for p in case["collective_permutes"])
  explained = json.loads((out / case["id"] / "json" / "explain.json").read_text())
  assert explained["num_partitions"] == 8
  assert (out / case["id"] / "hlo" / "input.nvshmem.hlo").is_file()
  # jax's lowered HLO is from before the combiner: the report says so.
  assert case["note"].startswith("note: this module is from before XLA's optimizations")
  assert 'class="note"' in (out / "index.html").read_text()


def test_report_of_a_dump_directory(tmp_path):
  out = tmp_path / "r"
  rc = cli.main(
    [
      "report",
      str(FIXTURES / "ring_product_grad_1x2x4.passes"),
      "--topology=1x1x8",
      f"--out={out}",
      "--quiet",
    ]
  )
  assert rc == 0
  data = json.loads((out / "report.json").read_text())
  [case] = data["cases"]
  assert case["stages"] == ["before_async", "after_optimizations"]
  assert {p["buffers"] for p in case["collective_permutes"]} == {2, 4}
  trace = json.loads((out / case["id"] / "json" / "trace.json").read_text())
  assert [e["kind"] for e in trace["events"]].count("combined") == 2


def test_bad_options_are_refused_before_writing(capsys, tmp_path):
  # The core's grammar and its one-line error, as every command: no HxG shorthand.
  for spec in ("two-by-four", "2x4"):
    rc = cli.main(["report", f"--out={tmp_path / 'r'}", f"--topology={spec}"])
    _, err = capsys.readouterr()
    assert rc == 2 and f"topology spec '{spec}': expected SLICESxHOSTSxGPUS" in err
    assert len(err.strip().splitlines()) == 1
  rc = cli.main(
    [
      "report",
      f"--out={tmp_path / 'r'}",
      "--quiet",
      "--seq_len=1001",
      "--num_heads=4",
      "--num_kv_heads=2",
      "--head_dim=64",
    ]
  )
  _, err = capsys.readouterr()
  assert rc == 2 and "not divisible" in err and len(err.strip().splitlines()) == 1
  assert not (tmp_path / "r").exists()
  rc = cli.main(["report", str(tmp_path / "nothing.hlo"), f"--out={tmp_path / 'r'}"])
  _, err = capsys.readouterr()
  assert rc == 2 and "nothing.hlo" in err and len(err.strip().splitlines()) == 1
  keep = tmp_path / "precious"
  keep.mkdir()
  (keep / "notes.txt").write_text("mine")
  rc = cli.main(["report", f"--out={keep}", "--quiet", *SMALL])
  _, err = capsys.readouterr()
  assert rc == 2 and "refusing to replace" in err
  assert (keep / "notes.txt").read_text() == "mine"
  assert not list(tmp_path.glob(".*"))


def _leftovers(parent, pids):
  left = [p.name for p in parent.iterdir() if p.name.startswith(".")]
  left += [
    n
    for n in os.listdir(tempfile.gettempdir())
    if any(n.startswith(f"nvshmem-opt-report-{pid}-") for pid in pids)
  ]
  return left


@pytest.mark.long
def test_killed_runs_leave_old_or_new_report(tmp_path):
  # Reports of a file take a few seconds; kill later runs at growing delays. DIR must
  # hold a whole report (old or new) after every kill, and the next run cleans up.
  out = tmp_path / "r"
  cmd = [
    str(REPO / ".venv" / "bin" / "python"),
    "-m",
    "hlo_tools.cli",
    "report",
    str(FIXTURES / "ring_1x1x8.before_async.hlo"),
    "--topology=1x1x8",
    f"--out={out}",
    "--quiet",
  ]
  assert subprocess.run(cmd, cwd=REPO, capture_output=True, check=False).returncode == 0
  pids = []
  for delay in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0):
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids.append(proc.pid)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL if delay != 2.0 else signal.SIGTERM)
    proc.wait()
    data = json.loads((out / "report.json").read_text())
    assert all((out / f).is_file() for f in data["files"])
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
  assert proc.returncode == 0, proc.stderr
  assert _leftovers(tmp_path, pids) == []


def test_a_run_killed_between_renames_gets_its_report_back(tmp_path):
  # Where the file system cannot exchange two directories, DIR moves aside first; a
  # run killed right then left `.DIR.old-PID-X/old`. The next run restores it.
  out = tmp_path / "r"
  gone = subprocess.Popen(["true"])  # its pid: a process that no longer runs
  gone.wait()
  trash = tmp_path / f".r.old-{gone.pid}-abc123"
  (trash / "old").mkdir(parents=True)
  (trash / "old" / "report.json").write_text("{}")
  (tmp_path / f".r.tmp-{gone.pid}-def456").mkdir()
  (tmp_path / f".r.tmp-{os.getpid()}-live01").mkdir()  # a running process's: kept
  outdir.clean_stale(str(out))
  assert (out / "report.json").read_text() == "{}"
  assert sorted(p.name for p in tmp_path.iterdir()) == [f".r.tmp-{os.getpid()}-live01", "r"]


def chromium(*args, timeout=90):
  profile = tempfile.mkdtemp(prefix="chromium-profile-")
  try:
    return subprocess.run(
      [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *args,
      ],
      capture_output=True,
      text=True,
      timeout=timeout,
      check=False,
    )
  finally:
    shutil.rmtree(profile, ignore_errors=True)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_page_in_headless_chromium(small_report, tmp_path):
  out, proc = small_report
  assert proc.returncode == 0, proc.stderr
  url = (out / "index.html").as_uri()
  dom = chromium("--enable-logging=stderr", "--v=0", "--dump-dom", url)
  assert dom.returncode == 0, dom.stderr[-2000:]
  # Console messages and script errors land on stderr as CONSOLE(...) / Uncaught.
  assert not re.search(r"Uncaught|CONSOLE\(|console", dom.stderr), dom.stderr[-2000:]
  table = dom.stdout[dom.stdout.index('id="comparison"') :]
  table = table[: table.index("</table>")]
  data = json.loads((out / "report.json").read_text())
  for p in data["summary"]["comparison"]:
    assert f"%{p['instruction']}" in table
  assert "nccl" in table
  shot = tmp_path / "report.png"
  snap = chromium(f"--screenshot={shot}", "--window-size=1400,2000", url)
  assert snap.returncode == 0, snap.stderr[-2000:]
  assert shot.stat().st_size > 20000
  keep = os.environ.get("HLO_TOOLS_REPORT_SCREENSHOT")
  if keep:
    shutil.copyfile(shot, keep)


_PROTO_SCRIPT = """
import os, sys
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax
from jax.sharding import PartitionSpec as P
from hlo_tools.programs import ring_attention
from hlo_tools.programs import pass_tests
mesh = ring_attention.make_mesh(jax.devices("cpu"))
f = jax.shard_map(pass_tests.ring_shift, mesh=mesh, in_specs=P("cp"),
                  out_specs=P("cp"))
lowered = jax.jit(f).lower(jax.ShapeDtypeStruct((8 * 1024, 64), "float32"))
with open(sys.argv[1], "wb") as out:
  out.write(lowered.compiler_ir("hlo").as_serialized_hlo_module_proto())
"""


def test_report_of_a_serialized_proto(tmp_path):
  proto = tmp_path / "shift.pb"
  made = subprocess.run(
    [str(REPO / ".venv" / "bin" / "python"), "-c", _PROTO_SCRIPT, str(proto)],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )
  assert made.returncode == 0, made.stderr
  out = tmp_path / "r"
  # No --topology: the one nvshmem-opt derives from the module (8 devices, one host).
  rc = cli.main(["report", str(proto), f"--out={out}", "--quiet"])
  assert rc == 0
  [case] = json.loads((out / "report.json").read_text())["cases"]
  assert case["topology"] == "1x1x8"
  [perm] = case["collective_permutes"]
  assert perm["bytes"] == 1024 * 64 * 4 and perm["edges_by_class"]["nvlink"] == 8
  assert (out / case["id"] / "hlo" / "input.hlo").read_text().startswith("HloModule")


def test_report_of_a_function(tmp_path):
  # module:function compiled as `hlo-tools dump` would, here one that needs --nocheck_vma.
  out = tmp_path / "r"
  rc = cli.main(
    [
      "report",
      "hlo_tools.programs.pass_tests:ring_sum_fresh_carry",
      "--arg=1024,64:f32:cp",
      "--nocheck_vma",
      "--topology=1x1x8",
      f"--out={out}",
      "--quiet",
    ]
  )
  assert rc == 0
  [case] = json.loads((out / "report.json").read_text())["cases"]
  assert case["stages"] == ["before_async", "after_optimizations"]
  [perm] = case["collective_permutes"]
  assert perm["bytes"] == 128 * 64 * 4 and perm["trip_count"] == 8
  assert (out / case["id"] / "json" / "trace.json").is_file()


def test_report_uses_manifest_topology(tmp_path, capsys):
  # A dump compiled for 1x1x8 is reported on 1x1x8 (its manifest), not on a default.
  dump_dir = tmp_path / "dump"
  shutil.copytree(FIXTURES / "ring_product_grad_1x2x4.passes", dump_dir)
  manifest = json.loads((dump_dir / "manifest.json").read_text())
  manifest["target"]["topology"] = "1x1x8"
  (dump_dir / "manifest.json").write_text(json.dumps(manifest))
  out = tmp_path / "r"
  rc = cli.main(["report", str(dump_dir), f"--out={out}"])
  _, err = capsys.readouterr()
  assert rc == 0, err
  [case] = json.loads((out / "report.json").read_text())["cases"]
  assert case["topology"] == "1x1x8" and case["title"].endswith("on 1x1x8")
  assert "no --topology; using 1x1x8, the topology the dump was compiled for" in err
  assert all(p["edges_by_class"].get("network", 0) == 0 for p in case["collective_permutes"])


def test_report_reads_stdin(tmp_path):
  out = tmp_path / "r"
  with open(FIXTURES / "ring_1x1x8.before_async.hlo") as stdin:
    proc = subprocess.run(
      [
        str(REPO / ".venv" / "bin" / "python"),
        "-m",
        "hlo_tools.cli",
        "report",
        "-",
        "--topology=1x1x8",
        f"--out={out}",
        "--quiet",
      ],
      stdin=stdin,
      capture_output=True,
      text=True,
      cwd=REPO,
      timeout=300,
      check=False,
    )
  assert proc.returncode == 0, proc.stderr
  [case] = json.loads((out / "report.json").read_text())["cases"]
  assert case["input"] == "<stdin>" and case["title"] == "<stdin> on 1x1x8"
  assert len(case["collective_permutes"]) == 1
  assert not list(Path(tempfile.gettempdir()).glob("hlo-tools-report-stdin-*"))


@pytest.mark.parametrize(
  "argv,needle",
  [
    (["--topology=1x2x4", "--devices-per-host=4"], "give one"),
    (
      [str(FIXTURES / "ring_1x1x8.before_async.hlo"), "--seq_len=4096"],
      "--seq_len shapes the built-in ring-attention example",
    ),
    ([str(FIXTURES / "ring_1x1x8.before_async.hlo"), "--nocausal"], "--causal shapes"),
    (["--devices-per-host=4", "--seq_len=4096"], "applies to a FILE or DIR"),
    (["hlo_tools.programs.pass_tests:kv_loop", "--devices-per-host=4"], "applies to a FILE or DIR"),
    ([str(FIXTURES / "no_such.hlo"), "--devices-per-host=4"], "no such file"),
  ],
)
def test_report_refuses_options_it_would_ignore(capsys, tmp_path, argv, needle):
  rc = cli.main(["report", f"--out={tmp_path / 'r'}", "--quiet", *argv])
  out, err = capsys.readouterr()
  assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
  assert needle in err
  assert not (tmp_path / "r").exists()


def _interrupt_after(cmd, marker, cwd, env=None, ready=None):
  """Runs cmd in its own process group and sends it Ctrl-C's SIGINT once `marker`
  shows on stderr (and, given `ready`, once that file exists); returns (exit status,
  stderr after the signal, stderr before it)."""
  # Ctrl-C's default action in the child even when this runner was started with
  # SIGINT ignored (a shell's background job): an ignored signal is inherited.
  proc = subprocess.Popen(
    cmd,
    cwd=cwd,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.PIPE,
    text=True,
    start_new_session=True,
    env=env,
    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
  )
  seen = []
  for line in proc.stderr:
    seen.append(line)
    if marker in line:
      deadline = time.monotonic() + 120
      while ready is not None and not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
      time.sleep(0.3)
      os.killpg(proc.pid, signal.SIGINT)
      break
  rest = proc.stderr.read()
  proc.wait(timeout=60)
  return proc.returncode, rest, "".join(seen)


def _slow_driver(directory):
  """The real nvshmem-opt behind a start that touches `ready` and then waits, so that
  Ctrl-C lands while the driver runs however fast the machine is."""
  ready = directory / "driver-started"
  wrapper = directory / "nvshmem-opt"
  wrapper.write_text(f"#!/bin/sh\ntouch '{ready}'\nsleep 60\nexec '{DRIVER}' \"$@\"\n")
  wrapper.chmod(0o755)
  return {**os.environ, "NVSHMEM_OPT": str(wrapper)}, ready


@pytest.mark.parametrize(
  "command,marker",
  [
    (
      ["report", str(FIXTURES / "ring_1x1x8.before_async.hlo"), "--topology=1x1x8", "--out=r"],
      "running nvshmem-opt",
    ),
    (["report", "--topology=1x1x8", "--out=r", *SMALL], "compiling"),
    (["dump", "--topology=1x1x8", "--all_passes", "--out=r", *SMALL], "compiling"),
  ],
)
def test_ctrl_c_ends_with_one_line_and_no_leftovers(tmp_path, command, marker):
  work = tmp_path / "cwd"
  work.mkdir()
  env, ready = _slow_driver(tmp_path) if marker == "running nvshmem-opt" else (None, None)
  rc, err, before = _interrupt_after(
    [str(REPO / ".venv" / "bin" / "python"), "-m", "hlo_tools.cli", *command],
    marker,
    work,
    env=env,
    ready=ready,
  )
  assert rc == 130, before + err
  assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
  assert "interrupted" in err
  time.sleep(1)  # an interrupted compile child must not write after us
  assert sorted(p.name for p in work.iterdir()) == [], before + err


def test_driver_message_is_not_cut(tmp_path, capsys):
  # A module XLA's verifier rejects (a dot whose batch and contracting dimensions
  # clash): the report's one line carries nvshmem-opt's whole line, naming the
  # user's file, with nothing cut ("... (55 more characters)").
  deep = tmp_path / ("d" * 150)
  deep.mkdir()
  bad = deep / "bad.hlo"
  bad.write_text(
    (FIXTURES / "ring_1x1x8.before_async.hlo")
    .read_text()
    .replace(
      "lhs_contracting_dims={2}, rhs_batch_dims={0}",
      "lhs_contracting_dims={2}, rhs_batch_dims={1}",
      1,
    )
  )
  # The driver's own line, short enough that the driver does not cut it either.
  direct = subprocess.run(
    [str(DRIVER), "bad.hlo", "--topology=1x1x8"],
    capture_output=True,
    text=True,
    check=False,
    cwd=deep,
  )
  assert direct.returncode == 2
  [driver_line] = [
    l.split("bad.hlo: ", 1)[1]
    for l in direct.stderr.splitlines()
    if l.startswith("nvshmem-opt: bad.hlo: ")
  ]
  rc = cli.main(["report", str(bad), "--topology=1x1x8", f"--out={tmp_path / 'r'}", "--quiet"])
  _, err = capsys.readouterr()
  assert rc == 2 and len(err.strip().splitlines()) == 1
  assert len(err.strip()) > 432  # over the old limit that cut it
  # Protobuf's debug strings vary their spacing and marker from run to run.
  words = lambda text: " ".join(re.sub(r"goo\.gle/debug\S*", "", text).split())
  assert words(f"nvshmem-opt: {bad}: {driver_line}") in words(err), err
  assert "more characters" not in err


def _svgs(page):
  return re.findall(r"<svg.*?</svg>", page, flags=re.S)


_NO_PERMUTE_SCRIPT = """
import os, sys
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax
from jax.sharding import PartitionSpec as P
from hlo_tools.programs import ring_attention
mesh = ring_attention.make_mesh(jax.devices("cpu"))
f = jax.shard_map(lambda x: jax.lax.psum(x * 2, "cp"), mesh=mesh, in_specs=P("cp"),
                  out_specs=P())
print(jax.jit(f).lower(jax.ShapeDtypeStruct((8 * 16, 4), "float32")).as_text(dialect="hlo"))
"""


def test_report_of_a_module_without_permutes(tmp_path):
  made = subprocess.run(
    [str(REPO / ".venv" / "bin" / "python"), "-c", _NO_PERMUTE_SCRIPT],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )
  assert made.returncode == 0, made.stderr
  module = tmp_path / "psum.hlo"
  module.write_text(made.stdout)
  assert "all-reduce" in made.stdout and "collective-permute" not in made.stdout
  out = tmp_path / "r"
  proc = subprocess.run(
    [
      str(REPO / ".venv" / "bin" / "python"),
      "-m",
      "hlo_tools.cli",
      "report",
      str(module),
      "--topology=1x1x8",
      f"--out={out}",
      "--quiet",
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  assert "no collective-permutes, nothing for the pass to decide" in proc.stdout
  page = (out / "index.html").read_text()
  assert "no collective-permutes" in page and 'class="no-permutes"' in page
  assert not _svgs(page) and 'id="comparison"' not in page and "decisions-" not in page
  chart = json.loads((out / "psum.hlo" / "json" / "chart.json").read_text())
  assert chart == {"charts": [], "kinds": 0}


def test_report_of_a_train_step(tmp_path):
  # The Llama train step as jax 0.10.2 compiles it for 2 hosts x 8 (cp 2 x tp 8):
  # mesh replica groups and collectives_mode go through the driver; six permutes of
  # three sizes, all on one curve (same pairs, one buffer), each size marked.
  out = tmp_path / "r"
  rc = cli.main(
    [
      "report",
      str(FIXTURES / "train_step_1x2x8.after_optimizations.hlo"),
      "--topology=1x2x8",
      f"--out={out}",
      "--quiet",
    ]
  )
  assert rc == 0
  data = json.loads((out / "report.json").read_text())
  [case] = data["cases"]
  perms = case["collective_permutes"]
  assert len(perms) == 6 and case["verify_passed"]
  assert all(p["upstream"] in ("DEFAULT", "NVSHMEM") for p in perms)
  page = (out / "index.html").read_text()
  [svg] = _svgs(page)
  assert len(re.findall(r'stroke="#d62728" stroke-dasharray', svg)) == len(
    {p["bytes"] for p in perms}
  )
  # The comparison names the configuration once for its six rows.
  table = page[page.index('id="comparison"') :]
  table = table[: table.index("</table>")]
  assert table.count(f">{case['title']}</a>") == 1 and 'rowspan="6"' in table
  # The title fits: the permutes' names are cut to a subtitle of at most ~140 chars.
  subtitle = re.search(r'class="permutes"[^>]*>([^<]*)<', svg).group(1)
  assert "more" in subtitle and len(subtitle) < 150
