"""Reliability: the reader under mutation, the pass's invariants on
every fixture and on mutated-but-valid modules, file safety and input limits.

Budget: about a minute on 2 cores (driver runs go two at a time)."""

import concurrent.futures
import hashlib
import json
import os
import pathlib
import random
import re
import shlex
import signal
import stat
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hlo_tools import cli
from hlo_tools.commands import parse
from hlo_tools.errors import HloParseError
from hlo_tools.hlo import reader
from hlo_tools.hlo.shape import MAX_SHAPE_DEPTH

from conftest import FIXTURES, NVSHMEM_OPT, ROOT, run_nvshmem_opt

FIXTURE_PATHS = sorted(FIXTURES.glob("*.hlo"))
FIXTURE_TEXT = {p.name: p.read_text() for p in FIXTURE_PATHS}
# NCCL slow on the network: costs under which NVSHMEM on the NVLink edges alone would
# pay off, so the pass also runs where only its safety rules keep NVSHMEM out.
SLOW_NCCL_NETWORK = "links { backend: NCCL link_class: NETWORK latency_us: 1 bandwidth_gbps: 900 per_buffer_us: 0 }\nsm_interference { backend: NCCL fraction: 4 }\n"
PERMUTE_OPS = {"collective-permute", "collective-permute-start", "collective-permute-done"}
POOL = concurrent.futures.ThreadPoolExecutor(max_workers=2)

# --------------------------------------------------------------------------------------
# 1. The Python reader and `hlo-tools parse` under mutation of real HLO.

INSERTS = [
  "{",
  "}",
  "(",
  ")",
  "[",
  "]",
  '"',
  "\\",
  ",",
  "=",
  "%",
  ":",
  "/*",
  "*/",
  "\n",
  "ROOT ",
  "ENTRY ",
  "HloModule x\n",
  "s32[]",
  "->",
  "\x00",
  "\u00e9",
]


@st.composite
def mutated_hlo(draw):
  name = draw(st.sampled_from(sorted(FIXTURE_TEXT)))
  lines = FIXTURE_TEXT[name].split("\n")
  for _ in range(draw(st.integers(1, 4))):
    op = draw(st.sampled_from(["truncate", "delete", "duplicate", "swap", "flip", "insert", "cut"]))
    text = "\n".join(lines)
    if op == "truncate":
      text = text[: draw(st.integers(0, len(text)))]
    elif op in ("delete", "duplicate", "swap") and lines:
      i = draw(st.integers(0, len(lines) - 1))
      if op == "delete":
        del lines[i]
      elif op == "duplicate":
        lines.insert(i, lines[i])
      else:
        j = draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
      text = "\n".join(lines)
    elif text:
      i = draw(st.integers(0, len(text) - 1))
      if op == "flip":
        text = text[:i] + chr(draw(st.integers(32, 126))) + text[i + 1 :]
      elif op == "insert":
        text = text[:i] + draw(st.sampled_from(INSERTS)) + text[i:]
      else:
        text = text[:i] + text[i + draw(st.integers(1, 40)) :]
    lines = text.split("\n")
  return "\n".join(lines)


def _check_parse_error(error, path):
  text = str(error)
  assert "\n" not in text, text
  assert text.startswith(path + ":"), text
  line, col = text[len(path) + 1 :].split(":")[:2]
  assert line.isdigit() and col.isdigit(), text
  assert error.line >= 1 and error.col >= 1


@settings(
  max_examples=400,
  deadline=None,
  derandomize=True,
  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated_hlo())
def test_reader_never_raises_anything_but_parse_error(text):
  try:
    module = reader.parse_hlo_text(text, "m.hlo")
  except HloParseError as e:
    _check_parse_error(e, "m.hlo")
    return
  # What parses must also summarise (properties read lazily: ints, pairs, JSON).
  parse._text(parse.summarize(module))


@settings(
  max_examples=60,
  deadline=None,
  derandomize=True,
  suppress_health_check=[
    HealthCheck.too_slow,
    HealthCheck.data_too_large,
    HealthCheck.function_scoped_fixture,
  ],
)
@given(text=mutated_hlo(), as_bytes=st.booleans())
def test_parse_cli_exits_0_or_2(text, as_bytes, tmp_path, capsys):
  path = tmp_path / "m.hlo"
  data = text.encode("utf-8", "surrogatepass")
  if as_bytes:  # also invalid UTF-8
    data = data.replace(b"\xc3\xa9", b"\xc3")
  path.write_bytes(data)
  code = cli.main(["parse", str(path), "--json"])
  err = capsys.readouterr().err
  assert code in (0, 2)
  if code == 2:
    assert err.count("\n") == 1 and err.startswith(str(path) + ":"), err


def test_parse_cli_subprocess_never_tracebacks(tmp_path):
  cases = {
    "empty.hlo": b"",
    "binary.hlo": bytes(range(256)),
    "dir": None,
    "cut.hlo": FIXTURE_PATHS[0].read_bytes()[:5000],
  }
  for name, data in cases.items():
    path = tmp_path / name
    path.mkdir() if data is None else path.write_bytes(data)
    result = subprocess.run(
      [sys.executable, "-m", "hlo_tools.cli", "parse", str(path)],
      capture_output=True,
      text=True,
      cwd=ROOT,
      timeout=60,
    )
    assert result.returncode == 2, (name, result.stderr)
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr


# --------------------------------------------------------------------------------------
# 3. Invariants of the pass, through the driver.


def _fingerprint(path):
  st_ = os.stat(path)
  return st_.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest()


def _run(*args):
  result = run_nvshmem_opt(*args)
  return result


def _instrs(module):
  return {(c.name, i.name): i for c in module.computations for i in c.instructions}


def _check_preserved(before_path, after_path, report):
  before = reader.parse_hlo_file(before_path)
  after = reader.parse_hlo_file(after_path)
  after_by_name = {i.name: i for c in after.computations for i in c.instructions}
  old = {i.name: i for c in before.computations for i in c.instructions}
  for (comp, name), instr in _instrs(before).items():
    if instr.opcode in PERMUTE_OPS:
      continue
    assert name in after_by_name, f"{name} lost"
    new = after_by_name[name]
    assert new.computation.name == comp, name
    assert new.opcode == instr.opcode, name
    assert new.attributes.get("metadata") == instr.attributes.get("metadata"), name
    assert new.attributes.get("frontend_attributes") == instr.attributes.get(
      "frontend_attributes"
    ), name
    assert new.shape == instr.shape, name
  for record in report["decisions"]:
    original = old[record["instruction"]]
    if record["skipped"]:
      continue
    new_starts = [
      after_by_name[n]
      for n in record["new_instructions"]
      if after_by_name[n].opcode == "collective-permute-start"
    ]
    if record["form"] == "async":  # backend set in place
      starts = [after_by_name[original.name]]
      done_shape = next(
        i
        for i in old.values()
        if i.opcode == "collective-permute-done" and i.operands == [original.name]
      ).shape
    else:
      starts = new_starts
      done_shape = original.shape
    assert starts, record
    pairs = []
    for start in starts:
      assert start.operands == original.operands, (start.name, original.name)
      pairs += start.source_target_pairs
      done = [
        i
        for i in after_by_name.values()
        if i.opcode == "collective-permute-done" and i.operands == [start.name]
      ]
      assert len(done) == 1 and done[0].shape == done_shape, start.name
    assert sorted(pairs) == sorted(original.source_target_pairs), record["instruction"]
    assert len(set(pairs)) == len(pairs)


def _pass_case(source, topology, table, tmp_path, tag, check_preserved=True):
  """Run, re-run on the output, check every invariant. Returns the first output."""
  args = [f"--topology={topology}"] + ([f"--cost-table={table}"] if table else [])
  before = _fingerprint(source)
  out1, out2 = tmp_path / f"{tag}.1.hlo", tmp_path / f"{tag}.2.hlo"
  report1, report2 = tmp_path / f"{tag}.1.json", tmp_path / f"{tag}.2.json"
  first = _run(source, *args, "-o", out1, f"--report={report1}")
  assert first.returncode == 0, (tag, first.stderr)  # 0: the output verified
  assert _fingerprint(source) == before, "input was written"
  if out1.read_bytes() == source.read_bytes():
    # Nothing to rewrite: a second run would repeat this one on the same bytes.
    assert json.loads(report1.read_text())["changed"] is False, tag
    return out1
  second = _run(out1, *args, "-o", out2, f"--report={report2}")
  assert second.returncode == 0, (tag, second.stderr)
  assert json.loads(report2.read_text())["changed"] is False, tag
  assert out2.read_bytes() == out1.read_bytes(), f"{tag}: second run changed the text"
  if check_preserved:
    _check_preserved(source, out1, json.loads(report1.read_text()))
  return out1


def _partitions(text):
  m = re.search(r"num_partitions=(\d+)", text.split("\n", 1)[0])
  return int(m.group(1)) if m else 1


def _highest_device(path):
  """The highest device id the config beside the module assigns, or -1."""
  config = path.with_name(path.name.removesuffix(".hlo") + ".config.pbtxt")
  if not config.exists():
    return -1
  ids = re.findall(r"replica_device_ids: (\d+)", config.read_text())
  return max(map(int, ids), default=-1)


def _topologies(path):
  if _partitions(FIXTURE_TEXT[path.name]) <= 8 < _highest_device(path) + 1:  # part of two hosts
    return ["1x2x8"]
  if _partitions(FIXTURE_TEXT[path.name]) == 16:
    return ["2x2x4"]
  if _partitions(FIXTURE_TEXT[path.name]) == 32:  # dp x cp x tp on four hosts
    return ["1x4x8"]
  return ["1x1x8", "1x2x4", "1x2x4:nvl8"]


def test_every_fixture_is_checked():
  """The fixtures the invariants run on, so that none is lost to a glob."""
  assert len(FIXTURE_PATHS) >= 30
  assert sum(len(_topologies(p)) + 1 for p in FIXTURE_PATHS) >= 40


@pytest.mark.long
@pytest.mark.parametrize("path", FIXTURE_PATHS, ids=lambda p: p.stem)
def test_invariants_on_each_fixture(path, tmp_path):
  # Every topology with the built-in table; the table that flips decisions on one:
  # two hosts where there is a choice, whose permutes mix NVLink and network edges.
  topologies = _topologies(path)
  cases = [
    (topology, table, f"{path.stem}.{topology.replace(':', '_')}.{t}")
    for topology in topologies
    for t, table in enumerate([None, SLOW_NCCL_NETWORK])
    if table is None or topology == topologies[len(topologies) // 2]
  ]
  split_table = tmp_path / "split.txt"
  split_table.write_text(SLOW_NCCL_NETWORK)
  futures = [
    POOL.submit(_pass_case, path, topology, split_table if table else None, tmp_path, tag)
    for topology, table, tag in cases
  ]
  outputs = {tag: f.result() for (_, _, tag), f in zip(cases, futures)}
  assert len(outputs) == len(cases) == len(topologies) + 1

  # Byte-identical across runs (one config); an output that is its input byte for
  # byte was already reproduced by that run.
  tag = f"{path.stem}.{topologies[0].replace(':', '_')}.0"
  if outputs[tag].read_bytes() != path.read_bytes():
    out = tmp_path / f"{tag}.again.hlo"
    result = _run(path, f"--topology={topologies[0]}", "-o", out)
    assert result.returncode == 0
    assert out.read_bytes() == outputs[tag].read_bytes()


def _relabel_pairs(text, perm):
  def sub(m):
    pairs = re.findall(r"\{(\d+),(\d+)\}", m.group(0))
    return (
      "source_target_pairs={"
      + ",".join(f"{{{perm[int(a)]},{perm[int(b)]}}}" for a, b in pairs)
      + "}"
    )

  return re.sub(r"source_target_pairs=\{(?:\{\d+,\d+\},?)*\}", sub, text)


@pytest.mark.long
@settings(
  max_examples=6,
  deadline=None,
  derandomize=True,
  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_invariants_on_permuted_fixtures(data, tmp_path):
  path = data.draw(st.sampled_from([p for p in FIXTURE_PATHS if "before_async" in p.name]))
  n = _partitions(FIXTURE_TEXT[path.name])
  perm = data.draw(st.permutations(range(n)))
  topology = data.draw(st.sampled_from(_topologies(path)))
  table = data.draw(st.sampled_from([None, SLOW_NCCL_NETWORK]))
  source = tmp_path / "permuted.hlo"
  source.write_text(_relabel_pairs(FIXTURE_TEXT[path.name], perm))
  table_path = None
  if table:
    table_path = tmp_path / "split.txt"
    table_path.write_text(table)
  _pass_case(source, topology, table_path, tmp_path, "perm")


SYNTHETIC = """HloModule synthetic, num_partitions={n}
ENTRY %main (p: {dtype}[{dims}]) -> {result} {{
  %p = {dtype}[{dims}]{{{layout}}} parameter(0), metadata={{op_name="x" source_file="t.py" source_line=3}}
  %neg = {dtype}[{dims}]{{{layout}}} negate(%p), frontend_attributes={{keep="me"}}
  %cp = {dtype}[{dims}]{{{layout}}} collective-permute(%neg), channel_id=1, source_target_pairs={{{pairs}}}, metadata={{op_name="ppermute"}}, frontend_attributes={{a="b"}}
  ROOT %out = {dtype}[{dims}]{{{layout}}} add(%cp, %neg), metadata={{op_name="add"}}
}}
"""


@pytest.mark.long
@settings(
  max_examples=10,
  deadline=None,
  derandomize=True,
  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_invariants_on_synthetic_modules(data, tmp_path):
  topology = data.draw(st.sampled_from(["1x1x8", "1x2x4", "1x2x4:nvl8", "2x2x4"]))
  n = 16 if topology == "2x2x4" else 8
  perm = data.draw(st.permutations(range(n)))
  k = data.draw(st.integers(1, n))
  pairs = ",".join(f"{{{perm[i]},{perm[(i + 1) % k]}}}" for i in range(k))
  dims = data.draw(st.lists(st.sampled_from([1, 2, 8, 64, 1024, 65536]), min_size=1, max_size=3))
  dtype = data.draw(st.sampled_from(["f32", "bf16", "s8", "f16"]))
  text = SYNTHETIC.format(
    n=n,
    dtype=dtype,
    dims=",".join(map(str, dims)),
    layout=",".join(str(i) for i in reversed(range(len(dims)))),
    pairs=pairs,
    result=f"{dtype}[{','.join(map(str, dims))}]",
  )
  source = tmp_path / "synthetic.hlo"
  source.write_text(text)
  table = None
  if data.draw(st.booleans()):
    table = tmp_path / "split.txt"
    table.write_text(SLOW_NCCL_NETWORK)
  _pass_case(source, topology, table, tmp_path, "syn")


# --------------------------------------------------------------------------------------
# 4. Files: inputs untouched, atomic outputs, size limits, memory.


def test_refuses_to_overwrite_any_input(tmp_path):
  source = tmp_path / "in.hlo"
  source.write_bytes((FIXTURES / "shift_1x2x4.before_async.hlo").read_bytes())
  table = tmp_path / "costs.txt"
  table.write_text(SLOW_NCCL_NETWORK)
  link = tmp_path / "hardlink.hlo"
  os.link(source, link)
  before = _fingerprint(source), _fingerprint(table)
  for args in (["-o", source], ["-o", link], [f"--report={source}", "-o", tmp_path / "o"]):
    result = _run(source, "--topology=1x2x4", f"--cost-table={table}", *args)
    assert result.returncode == 2 and "refusing to overwrite the input" in result.stderr
  assert (_fingerprint(source), _fingerprint(table)) == before


def _copies_of_ring_bwd(directory, size):
  out = directory / f"copies_{size}.hlo"
  subprocess.run(
    [
      sys.executable,
      str(ROOT / "tests/fuzz/make_big_module.py"),
      str(FIXTURES / "ring_bwd_1x2x4.before_async.hlo"),
      str(out),
      size,
    ],
    check=True,
    timeout=60,
  )
  return out


@pytest.fixture(scope="module")
def big_module(tmp_path_factory):
  """~12 MB of real HLO (copies of the ring backward fixture)."""
  return _copies_of_ring_bwd(tmp_path_factory.mktemp("big"), "12e6")


@pytest.mark.long
def test_output_is_all_or_nothing_when_killed(tmp_path):
  # 4 MB: a run of about a second still has a parse, a pass and a write to kill
  # in; the kill points scale with it.
  module = _copies_of_ring_bwd(tmp_path, "4e6")
  reference = tmp_path / "reference.hlo"
  start = time.monotonic()
  assert _run(module, "--topology=1x2x4", "-o", reference).returncode == 0
  full = time.monotonic() - start
  expected = reference.read_bytes()
  rng = random.Random(8)
  outcomes = []
  # Kill points spread over the run, dense near its end where the write happens.
  for delay in [full * f for f in (0.5, 0.8, 0.9, 0.95)] + [full * rng.uniform(0.85, 1.1)]:
    target = tmp_path / "out.hlo"
    if target.exists():
      target.unlink()
    proc = subprocess.Popen(
      [str(NVSHMEM_OPT), str(module), "--topology=1x2x4", "-o", str(target)],
      stderr=subprocess.DEVNULL,
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if target.exists():
      assert target.read_bytes() == expected, "half-written output at the target"
      outcomes.append("complete")
    else:
      outcomes.append("absent")
    for leftover in tmp_path.glob("out.hlo.tmp.*"):  # the temp file may stay; never the target
      leftover.unlink()
  assert set(outcomes) <= {"complete", "absent"}


# Linux keeps a process's peak RSS across exec, and a forked child starts with a
# copy of its parent's pages: a child of the (large) pytest process would report
# pytest's size. A small probe process forks the command and reports its peak.
_RSS_PROBE = """
import os, sys
pid = os.fork()
if pid == 0:
  devnull = os.open(os.devnull, os.O_WRONLY)
  os.dup2(devnull, 1)
  os.execvp(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def _peak_rss_kb(args):
  proc = subprocess.run(
    [sys.executable, "-c", _RSS_PROBE, *map(str, args)], capture_output=True, text=True, check=False
  )
  code, rss_kb = proc.stdout.split()[-2:]
  return int(code), int(rss_kb)


@pytest.mark.long
def test_memory_is_linear_in_input(big_module, tmp_path):
  size_mb = big_module.stat().st_size / 2**20
  code, driver_kb = _peak_rss_kb(
    [str(NVSHMEM_OPT), str(big_module), "--topology=1x2x4", "-o", str(tmp_path / "o.hlo")]
  )
  assert code == 0
  # ~300 MB of TensorFlow libraries plus ~12 bytes per byte of HLO (docs/reliability.md).
  assert driver_kb / 1024 < 400 + 20 * size_mb, (driver_kb, size_mb)
  code, reader_kb = _peak_rss_kb(
    [
      sys.executable,
      "-c",
      "import sys; from hlo_tools.hlo.reader import parse_hlo_file; "
      f"parse_hlo_file({str(big_module)!r})",
    ]
  )
  assert code == 0
  # A loose guard against runaway growth only; the measured figures (about 7-8
  # bytes of RSS per byte of HLO at 100 MB, more at small sizes where the
  # interpreter and allocator dominate) are in docs/reliability.md.
  assert reader_kb / 1024 < 150 + 30 * size_mb, (reader_kb, size_mb)


def test_driver_refuses_input_over_max_input_bytes(tmp_path):
  source = FIXTURES / "shift_1x2x4.before_async.hlo"
  size = source.stat().st_size
  result = _run(source, "--topology=1x2x4", f"--max-input-bytes={size - 1}")
  assert result.returncode == 2
  assert result.stderr == (
    f"nvshmem-opt: {source}: input is {size} bytes, over the limit of "
    f"{size - 1} (--max-input-bytes)\n"
  )
  assert _run(source, "--topology=1x2x4", f"--max-input-bytes={size}").returncode == 0
  piped = subprocess.run(
    [str(NVSHMEM_OPT), "-", "--topology=1x2x4", "--max-input-bytes=100"],
    input=source.read_bytes(),
    capture_output=True,
    timeout=60,
  )
  assert piped.returncode == 2 and b"over the limit of 100" in piped.stderr
  assert _run(source, "--topology=1x2x4", "--max-input-bytes=0").returncode == 2
  with pytest.raises(HloParseError, match=r":1:1: input is \d+ bytes, over the limit of 10$"):
    reader.parse_hlo_file(source, max_bytes=10)
  assert cli.main(["parse", str(source), "--max-input-bytes=10"]) == 2


# --------------------------------------------------------------------------------------
# 5. Hostile input to every reading command: deep nesting, endless devices, huge error
#    lines, a reader that closes the pipe early.


def _cli(*args, **kwargs):
  return subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", *map(str, args)],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=120,
    **kwargs,
  )


def _deep_tuple_module(depth):
  """The real 1x1x8 ring with a custom-call whose shape nests `depth` tuples deep."""
  shape = "(" * depth + "f32[]" + ")" * depth
  lines = FIXTURE_TEXT["ring_1x1x8.before_async.hlo"].split("\n")
  entry = next(i for i, l in enumerate(lines) if l.startswith("ENTRY"))
  lines.insert(entry + 1, f'  %deep = {shape} custom-call(), custom_call_target="x"')
  return "\n".join(lines), entry + 2


READING_COMMANDS = [
  ("parse",),
  ("explain", "--topology=1x1x8"),
  ("verify", "--topology=1x1x8"),
  ("diff", "SAME"),
]


@pytest.mark.parametrize("command", READING_COMMANDS, ids=lambda c: c[0])
def test_deep_tuple_shape_is_one_line_error(command, tmp_path):
  text, lineno = _deep_tuple_module(10000)
  path = tmp_path / "deep.hlo"
  path.write_text(text)
  args = [path if a == "SAME" else a for a in command]
  result = _cli(args[0], path, *args[1:])
  assert result.returncode == 2, result.stderr[-2000:]
  assert result.stderr == (
    f"{path}:{lineno}:{11 + MAX_SHAPE_DEPTH}: tuple shape "
    f"nests deeper than {MAX_SHAPE_DEPTH} levels\n"
  )


@pytest.mark.parametrize("depth", [MAX_SHAPE_DEPTH, MAX_SHAPE_DEPTH + 1, 1000])
def test_deep_tuples_reader_and_driver_agree(depth, tmp_path):
  # Both read a module nested as deep as the reader allows, and refuse one level more
  # (nvshmem-opt before XLA's parser, whose recursion would overflow its stack).
  text, lineno = _deep_tuple_module(depth)
  path = tmp_path / "deep.hlo"
  path.write_text(text)
  accepted = depth <= MAX_SHAPE_DEPTH
  driver = _run(path, "--topology=1x1x8", "--mode=explain")
  assert driver.returncode == (0 if accepted else 2), driver.stderr[-2000:]
  if accepted:
    deep = reader.parse_hlo_file(path).entry.instruction("deep")
    assert deep.line == lineno and deep.shape.byte_size() == 4
    assert deep.shape.to_string() == "(" * depth + "f32[]" + ")" * depth
  for command in READING_COMMANDS:
    args = [path if a == "SAME" else a for a in command]
    result = _cli(args[0], path, *args[1:])
    assert "Traceback" not in result.stderr, (command, result.stderr[-2000:])
    if accepted:
      assert result.returncode in (0, 1), (command, result.stderr[-2000:])
    else:
      assert result.returncode == 2 and result.stderr.count("\n") == 1, (
        command,
        result.stderr[-2000:],
      )


BOUNDED_COMMANDS = {
  "parse": [],
  "explain": ["--topology=1x2x4"],
  "verify": ["--topology=1x2x4"],
  "diff": ["OTHER"],
}


@pytest.mark.long
@pytest.mark.parametrize("command", sorted(BOUNDED_COMMANDS))
def test_max_input_bytes_bounds_devices_and_pipes(command, tmp_path):
  source = FIXTURES / "shift_1x2x4.before_async.hlo"
  data = source.read_bytes()

  def args(path, limit):
    rest = [source if a == "OTHER" else a for a in BOUNDED_COMMANDS[command]]
    return [command, path, *rest, f"--max-input-bytes={limit}"]

  code, rss_kb = _peak_rss_kb(
    [sys.executable, "-m", "hlo_tools.cli", *map(str, args("/dev/zero", 1000000))]
  )
  assert code == 2
  assert rss_kb < 200 * 1024, rss_kb  # the interpreter plus at most ~1 MB of input
  result = _cli(*args("/dev/zero", 1000000))
  assert result.stderr == (
    "/dev/zero: input is more than 1000000 bytes, over the limit of 1000000 (--max-input-bytes)\n"
  )
  piped = _cli(*args("-", len(data) - 1), input=data.decode())
  assert piped.returncode == 2 and "over the limit of" in piped.stderr, piped.stderr
  assert _cli(*args("-", len(data)), input=data.decode()).returncode in (0, 1)
  fifo = tmp_path / "fifo"
  os.mkfifo(fifo)
  writer = POOL.submit(lambda: fifo.write_bytes(data))
  assert _cli(*args(fifo, 100)).returncode == 2
  writer.exception(timeout=60)  # BrokenPipe or done: either way the writer ends


@pytest.mark.parametrize("command", READING_COMMANDS, ids=lambda c: c[0])
def test_error_lines_stay_readable(command, tmp_path):
  # A real module that uses an undefined operand with a 1 MB name.
  text = FIXTURE_TEXT["ring_1x2x4.before_async.hlo"]
  m = re.search(r"collective-permute\(%([\w.\-]+)", text)
  path = tmp_path / "long.hlo"
  path.write_text(text[: m.start(1)] + "x" * 1_000_000 + text[m.end(1) :])
  args = [path if a == "SAME" else a for a in command]
  result = _cli(args[0], path, *args[1:])
  assert result.returncode == 2
  assert result.stderr.count("\n") == 1 and len(result.stderr) < 600, len(result.stderr)
  assert re.search(
    r"use of undefined instruction %x+\.\.\. \(\d+ more characters\)\n\Z", result.stderr
  ), result.stderr[-200:]


def test_closed_stdout_ends_quietly(big_module):
  proc = subprocess.Popen(
    [sys.executable, "-m", "hlo_tools.cli", "parse", str(big_module), "--json"],
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    cwd=ROOT,
  )
  assert proc.stdout.readline().startswith(b"{")
  proc.stdout.close()  # as `| head -1` does
  err = proc.stderr.read().decode()
  assert proc.wait(timeout=120) == 141 and err == "", err


@pytest.mark.parametrize("command", ["explain", "verify"])
def test_commands_take_non_utf8_bytes_in_comments_only(tmp_path, command):
  # As XLA's lexer: any bytes inside /* */ are fine, elsewhere they are an error
  # at their line and column.
  lines = (FIXTURES / "shift_1x1x2.before_async.hlo").read_bytes().split(b"\n")
  ok = tmp_path / "comment.hlo"
  ok.write_bytes(b"\n".join(lines[:1] + [b"/* caf\xe9 \xff */"] + lines[1:]))
  proc = subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", command, str(ok), "--topology=1x1x2"],
    capture_output=True,
    text=True,
  )
  assert proc.returncode == 0, proc.stderr
  bad = tmp_path / "entry.hlo"
  bad.write_bytes(b"\n".join(lines).replace(b"ENTRY", b"ENTRY \xff", 1))
  proc = subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", command, str(bad), "--topology=1x1x2"],
    capture_output=True,
    text=True,
  )
  [line] = proc.stderr.strip().splitlines()
  assert proc.returncode == 2 and re.match(rf"{re.escape(str(bad))}:\d+:\d+: byte 0xff", line)


def test_write_atomic_gives_plain_permissions_and_leaves_nothing_on_failure(tmp_path):
  # Every command's output goes through atomic_output.write_atomic: readers see the old file
  # or the new one, never a part, a stray temporary, or a private (0600) file.
  from hlo_tools import atomic_output  # pylint: disable=import-outside-toplevel

  target = tmp_path / "out.png"
  target.write_bytes(b"old")
  umask = os.umask(0o022)
  try:
    atomic_output.write_atomic(str(target), b"new")
  finally:
    os.umask(umask)
  assert target.read_bytes() == b"new"
  assert target.stat().st_mode & 0o777 == 0o644

  class Unwritable:  # str and bytes only: write() of anything else raises
    pass

  with pytest.raises(TypeError):
    atomic_output.write_atomic(str(target), Unwritable())
  assert target.read_bytes() == b"new"
  assert sorted(p.name for p in tmp_path.iterdir()) == ["out.png"]


# --------------------------------------------------------------------------------------
# 6. Outputs never replace what is not a regular file: a device or FIFO is written in
#    place, a symlink is followed (the link stays, its target is replaced atomically).

SHIFT = FIXTURES / "shift_1x2x4.before_async.hlo"
# (name, argv writing its output to OUT); "-" for OUT gives the bytes on stdout.
WRITERS = {
  "nvshmem-opt -o": lambda out: [str(NVSHMEM_OPT), str(SHIFT), "--topology=1x2x4", "-o", str(out)],
  "nvshmem-opt --report": lambda out: [
    str(NVSHMEM_OPT),
    str(SHIFT),
    "--topology=1x2x4",
    "--mode=explain",
    f"--report={out}",
  ],
  "hlo-tools explain --out": lambda out: [
    sys.executable,
    "-m",
    "hlo_tools.cli",
    "explain",
    str(SHIFT),
    "--topology=1x2x4",
    "--format=json",
    "--out",
    str(out),
  ],
}


def _write_with(writer, out):
  result = subprocess.run(WRITERS[writer](out), capture_output=True, cwd=ROOT, timeout=120)
  assert result.returncode == 0, result.stderr.decode()[-2000:]
  return result.stdout


def _comparable(writer, data):
  if writer == "nvshmem-opt --report":  # the pass's time differs run to run
    report = json.loads(data)
    report.pop("pass_us")
    return report
  return data


@pytest.fixture(scope="module")
def expected_outputs():
  """What each writer gives on stdout: what it must put into a FIFO or file."""
  return {w: _write_with(w, "-") for w in WRITERS}


def _private_device(tmp_path):
  """A char device equal to /dev/null but ours (root: mknod 1,3); else /dev/null
  itself, which a non-root writer could not replace anyway (/dev is root's)."""
  node = tmp_path / "null"
  try:
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    with open(node, "wb") as f:  # a nodev mount refuses to open it
      f.write(b"")
    return node
  except OSError:
    if os.geteuid() == 0:
      pytest.skip("cannot make or open a device node here (root on a nodev mount)")
    return pathlib.Path("/dev/null")


@pytest.mark.parametrize("writer", WRITERS)
def test_output_to_a_fifo_is_written_in_place(writer, expected_outputs, tmp_path):
  fifo = tmp_path / "fifo"
  os.mkfifo(fifo)
  reader_ = POOL.submit(fifo.read_bytes)  # the writer's open waits for this reader
  try:
    _write_with(writer, fifo)
  finally:
    if not reader_.done():  # a writer that never opened it: let the reader go
      os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
  assert _comparable(writer, reader_.result(timeout=60)) == _comparable(
    writer, expected_outputs[writer]
  )
  assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


@pytest.mark.parametrize("writer", WRITERS)
def test_output_through_a_symlink_to_a_device_keeps_both(writer, tmp_path):
  device = _private_device(tmp_path)
  link = tmp_path / "link"
  link.symlink_to(device)
  _write_with(writer, link)
  assert link.is_symlink() and os.readlink(link) == str(device)
  assert stat.S_ISCHR(os.stat(device).st_mode)
  assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.parametrize("writer", WRITERS)
def test_output_through_a_symlink_replaces_its_target(writer, expected_outputs, tmp_path):
  (tmp_path / "real").mkdir()
  target = tmp_path / "real" / "out.txt"
  target.write_bytes(b"old")
  target.chmod(0o640)
  (tmp_path / "links").mkdir()
  link = tmp_path / "links" / "out.txt"
  link.symlink_to("../real/out.txt")  # relative: read from the link's directory
  _write_with(writer, link)
  assert link.is_symlink() and os.readlink(link) == "../real/out.txt"
  assert _comparable(writer, target.read_bytes()) == _comparable(writer, expected_outputs[writer])
  assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the file keeps its mode
  # No temporaries left; nvshmem-opt puts the input's XLA config beside its output.
  config = ["out.config.pbtxt"] if writer == "nvshmem-opt -o" else []
  assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(
    ["links", "out.txt", "out.txt", "real"] + config
  )
  # A dangling link creates the file it names, and stays a link.
  target.unlink()
  _write_with(writer, link)
  assert link.is_symlink() and _comparable(writer, target.read_bytes()) == _comparable(
    writer, expected_outputs[writer]
  )


# Inside a private mount namespace, /dev is a fresh tmpfs holding our own null device:
# a writer that replaced /dev/null would replace that one, never the machine's.
_PRIVATE_DEV = (
  "mount -t tmpfs none /dev && mknod -m 666 /dev/null c 1 3 && "
  "mknod -m 666 /dev/zero c 1 5 && mknod -m 666 /dev/urandom c 1 9 && "
  "mkdir /dev/shm && ln -s /proc/self/fd /dev/fd && {cmd}; "
  'echo "exit=$?"; stat -c %F /dev/null'
)


def _private_namespace_or_skip():
  probe = subprocess.run(
    ["unshare", "-m", "--propagation", "private", "true"], capture_output=True, text=True
  )
  if probe.returncode != 0:
    pytest.skip(
      "unshare -m is not permitted here (needs CAP_SYS_ADMIN): " + probe.stderr.strip()[:200]
    )


@pytest.mark.parametrize("writer", WRITERS)
def test_output_to_dev_null_leaves_a_device(writer, tmp_path):
  _private_namespace_or_skip()
  cmd = " ".join(shlex.quote(a) for a in WRITERS[writer]("/dev/null"))
  result = subprocess.run(
    ["unshare", "-m", "--propagation", "private", "sh", "-c", _PRIVATE_DEV.format(cmd=cmd)],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=120,
  )
  lines = result.stdout.strip().splitlines()
  assert lines[-2:] == ["exit=0", "character special file"], (result.stdout, result.stderr)
  assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_write_atomic_semantics_directly(tmp_path):
  from hlo_tools import atomic_output  # pylint: disable=import-outside-toplevel

  device = _private_device(tmp_path)
  link = tmp_path / "to_device"
  link.symlink_to(device)
  atomic_output.write_atomic(link, "text")
  assert link.is_symlink() and stat.S_ISCHR(os.stat(device).st_mode)
  with pytest.raises(IsADirectoryError):
    atomic_output.write_atomic(tmp_path, b"x")
  loop = tmp_path / "loop"
  loop.symlink_to("loop")
  with pytest.raises(OSError):
    atomic_output.write_atomic(loop, b"x")


def test_output_directory_through_a_symlink_stays_a_link(tmp_path):
  # report/dump --out DIR publish a whole directory at once; a DIR that is a symlink
  # keeps being one, and the directory it names gets the new content.
  from hlo_tools.ops import outdir  # pylint: disable=import-outside-toplevel

  real = tmp_path / "store" / "report"
  real.mkdir(parents=True)
  (real / "old.txt").write_text("old")
  link = tmp_path / "report"
  link.symlink_to(real)
  for content in ("first", "second"):
    work = outdir.make_work_dir(str(link))
    assert os.path.dirname(work) == str(real.parent)  # beside the real directory
    pathlib.Path(work, "index.html").write_text(content)
    outdir.publish(work, str(link))
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert sorted(p.name for p in real.iterdir()) == ["index.html"]
    assert (real / "index.html").read_text() == content
  assert sorted(p.name for p in tmp_path.iterdir()) == ["report", "store"]
  assert sorted(p.name for p in real.parent.iterdir()) == ["report"]
  (tmp_path / "file").write_text("x")
  with pytest.raises(NotADirectoryError):
    outdir.make_work_dir(str(tmp_path / "file"))
