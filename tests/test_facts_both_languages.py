"""Facts about a module that both the driver (C++) and the Python reader compute, held
equal on every HLO fixture.

Python computes them again because it must work where no driver is installed (the
JAX hook's base package ships none). Each test compares the two independent
computations on every fixture both sides read, listing each difference; the oracle
is the driver (XLA's own parse), never the Python code it checks:

1. the loop nest around each collective-permute, innermost first, with trip counts
   (driver report's `loops`; collectives.collective_permutes' `loops`);
2. the replica groups of every collective, jax >= 0.10's `mesh[...]` forms expanded
   (the driver's --print-readable text; ir.HloInstruction.replica_groups);
3. XLA's module config beside the module: device map, compile flag, config file
   (driver report; module_config.for_module);
4. the backend_config a backend choice writes into the permute (the driver's
   rewrite; hook.text_edit.set_line_mode on the same line).
"""

import json
import os
import re
import subprocess

import numpy as np
import pytest

from hlo_tools.errors import InputError
from hlo_tools.hlo import module_config
from hlo_tools.hook import text_edit
from hlo_tools.model import collectives, driver, sources

from conftest import FIXTURES

# The driver over every fixture, under several tables: about a minute and a half.
pytestmark = pytest.mark.long

# Every module among the fixtures: text (`.hlo`, XLA's dumps as `module_*.txt`) and
# XLA's serialized `.hlo.pb`, which the Python reader decodes itself.
MODULES = sorted(
  [
    *FIXTURES.rglob("*.hlo"),
    *FIXTURES.rglob("*.hlo.pb"),
    *(p for p in FIXTURES.rglob("module_*.txt") if not p.name.endswith("-buffer-assignment.txt")),
  ]
)
PROTO_MODULES = [p for p in MODULES if p.name.endswith(".hlo.pb")]


def _id(path):
  return str(path.relative_to(FIXTURES))


# Peer copies, or symmetric memory, beat NCCL on NVLink under these tables: the
# rewrite then writes a collectives_mode wherever the permute stays in one host.
# Alternate fixtures take the other table, so that both modes are written.
_TABLES = {
  "peer": "links { backend: PEER link_class: NVLINK latency_us: 1 bandwidth_gbps: 450 per_buffer_us: 0 }\n",
  "symmetric": "symmetric_signals: true\nlinks { backend: SYMMETRIC link_class: NVLINK latency_us: 1 bandwidth_gbps: 450 per_buffer_us: 0 }\n",
}

# Minimum comparisons per fact over all fixtures, so that no change can make the
# tests compare nothing and pass.
MIN_LOOP_PERMUTES = 150  # permutes inside at least one loop
MIN_GROUPS, MIN_MESH_GROUPS = 200, 7  # collectives with replica groups; in the mesh form
MIN_CONFIGS = 80
MIN_MODE_EDITS = {"COLLECTIVES_PEER_MEMORY": 50, "COLLECTIVES_SYMMETRIC_MEMORY": 50, None: 30}


class _Run:
  """The driver's answers on one module (one rewrite with its report, one
  --print-readable) and the Python reader's parse of it."""

  def __init__(self, path, tmp):
    self.path = path
    exe, env = driver.find_nvshmem_opt(), driver.driver_env()
    table_name = "peer" if MODULES.index(path) % 2 == 0 else "symmetric"
    table = tmp / f"{table_name}.cost"
    if not table.exists():
      table.write_text(_TABLES[table_name])
    stem = _id(path).replace("/", "_")
    out, report = tmp / f"{stem}.out", tmp / f"{stem}.json"
    done = subprocess.run(
      [
        exe,
        str(path),
        "--backends=nccl,peer,symmetric",
        "--per-op-modes",  # each permute's mode written, as the series runs it
        f"--cost-table={table}",
        f"--report={report}",
        "-o",
        str(out),
      ],
      env=env,
      capture_output=True,
      text=True,
      timeout=120,
      check=False,
    )
    self.refused = None if done.returncode == 0 else driver.first_message(done.stderr)
    self.report = json.loads(report.read_text()) if self.refused is None else None
    self.out = out.read_text() if self.refused is None else None
    if path in PROTO_MODULES:
      # --print-readable gives a proto back as a proto; the rewrite writes it as
      # XLA prints it (only its permutes changed).
      self.readable = self.out
    else:
      readable = subprocess.run(
        [exe, str(path), "--print-readable"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
      )
      self.readable = readable.stdout if readable.returncode == 0 else None
    try:
      self.source = sources.read_source(str(path))
      self.unread = None
    except InputError as e:
      self.source, self.unread = None, str(e)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("facts")
  cache = {}

  def get(path):
    if path not in cache:
      cache[path] = _Run(path, tmp)
    return cache[path]

  return get


def _read_by_both(runs, driver_side=True):
  """The modules both sides read (the driver only where driver_side); each fact's
  test compares on these, and test_every_fact_is_compared_on_enough_fixtures
  holds that they are enough."""
  return [
    path
    for path in MODULES
    if runs(path).source is not None and not (driver_side and runs(path).refused is not None)
  ]


# --- 1. Loop trip counts around each collective-permute ---------------------------------


def loop_cases(run):
  """{(computation, permute): (driver's loops, Python's loops)}, each a list of
  (while, computation, trip count), innermost first."""
  by_driver = {
    (d["computation"], d["instruction"]): [
      (l["while_loop"], l["computation"], l["trip_count"]) for l in d["loops"]
    ]
    for d in run.report["decisions"]
  }
  cases = {}
  module = run.source.module
  for rec in collectives.collective_permutes(module):
    key = (rec.computation, rec.start)
    if key not in by_driver and rec.wrapped_computation:
      key = (rec.wrapped_computation, module.computation(rec.wrapped_computation).root.name)
    cases[key] = (by_driver.get(key), [tuple(l) for l in rec.loops])
  for key, loops in by_driver.items():
    cases.setdefault(key, (loops, None))
  return cases


def test_loop_trip_counts(runs):
  wrong = []
  for path in _read_by_both(runs):
    for key, (cpp, py) in loop_cases(runs(path)).items():
      if cpp is None:
        wrong.append(f"{_id(path)} {key}: only the Python reader finds this permute")
      elif py is None:
        wrong.append(f"{_id(path)} {key}: only the driver finds this permute")
      elif py != cpp:
        wrong.append(f"{_id(path)} {key}: loops (while, computation, trips) {cpp} != {py}")
  assert not wrong, "\n".join(wrong)


# --- 2. Replica groups, jax >= 0.10's mesh forms expanded -------------------------------

_GROUPS_RE = re.compile(
  r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=.*?\breplica_groups="
  r"(?P<groups>\{(?:\s*\{[\d,\s]*\}\s*,?)*\s*\}|\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?)"
)
_IOTA_RE = re.compile(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")


def _printed_groups(text):
  """Replica groups as XLA prints them: explicit lists, or its iota form
  `[G,S]<=[dims]T(perm)` (ids 0..N-1 reshaped to dims, transposed, in G groups)."""
  m = _IOTA_RE.fullmatch(text)
  if m is None:
    return [[int(x) for x in re.findall(r"\d+", g)] for g in re.findall(r"\{([^{}]*)\}", text)]
  shape = [int(x) for x in m.group(1).split(",")]
  dims = [int(x) for x in m.group(2).split(",")]
  ids = np.arange(int(np.prod(dims))).reshape(dims)
  if m.group(3):
    ids = ids.transpose([int(x) for x in m.group(3).split(",")])
  return ids.reshape(shape[0], -1).tolist()


def group_cases(run):
  """{instruction: (groups the driver prints, groups the Python reader gives, whether
  the module writes them in the mesh form)} for every collective with replica groups."""
  printed = {}
  for line in run.readable.splitlines():
    m = _GROUPS_RE.match(line)
    if m:
      printed[m.group("name")] = _printed_groups(m.group("groups"))
  cases = {}
  for instr in run.source.module.instructions():
    raw = instr.replica_groups_text
    if raw is not None:
      cases[instr.name] = (printed.get(instr.name), instr.replica_groups, raw.startswith("mesh["))
  for name, groups in printed.items():
    cases.setdefault(name, (groups, None, False))
  return cases


def test_replica_groups(runs):
  wrong = []
  for path in _read_by_both(runs, driver_side=False):
    if runs(path).readable is None:
      continue  # the driver cannot print it: counted by the test below
    for name, (cpp, py, _) in group_cases(runs(path)).items():
      if cpp is None:
        wrong.append(f"{_id(path)} %{name}: the driver prints no replica groups")
      elif py is None:
        wrong.append(f"{_id(path)} %{name}: the Python reader finds no replica groups")
      elif py != cpp:
        wrong.append(f"{_id(path)} %{name}: replica groups {cpp} != {py}")
  assert not wrong, "\n".join(wrong)


# --- 3. XLA's module config beside the module -------------------------------------------


def _core_order(config):
  """The config's device map indexed as the driver reports it (replica + partition *
  replicas); XLA's config lists it as replica * partitions + partition."""
  if config.partition_to_device is None:
    return None
  reps, parts = config.replica_count, config.computation_count
  return [config.partition_to_device[r * parts + p] for p in range(parts) for r in range(reps)]


def _same_file(a, b):
  return bool(a) and bool(b) and os.path.samefile(a, b)


def _config_differences(path, report):
  """What the driver's report and module_config.for_module say differently of the
  config beside `path`."""
  config = module_config.for_module(str(path))
  if path in PROTO_MODULES:
    # A proto carries its compile's device assignment, which the driver takes; the
    # config beside it says the same (its flag: test_config_flag_beside_a_proto).
    if config is None:
      return ["XLA's dump holds the config of every proto fixture"]
    return [] if report["partition_to_device"] == _core_order(config) else ["device map"]
  if config is None:
    return ["only the driver finds a config"] if report.get("module_config") else []
  wrong = []
  if not _same_file(report.get("module_config"), config.path):
    wrong.append(f"config file {report.get('module_config')} != {config.path}")
  if report["partition_to_device"] != _core_order(config):
    wrong.append("device map")
  if (report.get("collective_permute_mode") or None) != config.collective_permute_mode:
    wrong.append("collective_permute_mode")
  if config.path not in report["placement"]:
    wrong.append(f"placement {report['placement']!r} names no config")
  return wrong


def test_module_config(runs):
  wrong = [
    f"{_id(path)}: {what}"
    for path in _read_by_both(runs)
    for what in _config_differences(path, runs(path).report)
  ]
  assert not wrong, "\n".join(wrong)


# A proto places its ids by its own device assignment; the flag it was compiled with
# is in XLA's config beside it only, which the driver reads for the flag alone.
@pytest.mark.parametrize("path", PROTO_MODULES, ids=_id)
def test_config_flag_beside_a_proto(path, runs):
  run = runs(path)
  assert run.refused is None, run.refused
  config = module_config.for_module(str(path))
  assert config is not None
  assert (run.report.get("collective_permute_mode") or None) == config.collective_permute_mode
  assert _same_file(run.report.get("module_config"), config.path)


# --- 4. The collectives_mode a backend choice writes into the permute -------------------

_NAME_RE = r"^\s*(?:ROOT\s+)?%?{}\s*="


def _line(text, name):
  m = re.search(_NAME_RE.format(re.escape(name)), text, re.M)
  if m is None:
    return None
  end = text.find("\n", m.start())
  return text[m.start() : end if end >= 0 else len(text)]


def _backend_config(line):
  at = line.find("backend_config={")
  if at < 0:
    return {}
  config, _ = json.JSONDecoder().raw_decode(line, at + len("backend_config="))
  return config


def _as_xla_reads(config):
  """The config without proto3's defaults, which XLA's JSON reader takes for absent
  fields: `backend` DEFAULT, `collectives_mode` COLLECTIVES_MODE_INVALID."""
  config = json.loads(json.dumps(config))
  cbc = config.get("collective_backend_config")
  if isinstance(cbc, dict):
    if cbc.get("backend") == "DEFAULT":
      del cbc["backend"]
    if cbc.get("collectives_mode") == "COLLECTIVES_MODE_INVALID":
      del cbc["collectives_mode"]
    if not cbc:
      del config["collective_backend_config"]
  return config


def mode_cases(run):
  """{permute: (mode, the config the driver wrote, the config set_line_mode writes on
  the permute's line of the input)}: the driver's start for a sync input."""
  text = run.source.text  # a proto's module as the Python reader prints it
  cases = {}
  for d in run.report["decisions"]:
    if d["skipped"]:
      continue
    name = d["instruction"]
    written = None
    for new in [name, *d["new_instructions"]]:
      line = _line(run.out, new)
      if line is not None and re.search(r"=.*? collective-permute-start\(", line):
        written = line
    given = _line(text, name)
    if written is None or given is None:
      cases[name] = (d["collectives_mode"], written, given)
      continue
    ours = text_edit.set_line_mode(given, d["collectives_mode"])
    cases[name] = (d["collectives_mode"], _backend_config(written), _backend_config(ours))
  return cases


def test_backend_config_mode(runs):
  wrong = []
  for path in _read_by_both(runs):
    for name, (mode, cpp, py) in mode_cases(runs(path)).items():
      where = f"{_id(path)} %{name}"
      if cpp is None or py is None:
        wrong.append(f"{where}: no start line in the driver's output")
      elif mode is not None and cpp["collective_backend_config"]["collectives_mode"] != mode:
        wrong.append(f"{where}: the driver wrote {cpp} for {mode}")
      elif _as_xla_reads(py) != _as_xla_reads(cpp):
        wrong.append(f"{where}: backend_config with {mode}: {cpp} != {py}")
  assert not wrong, "\n".join(wrong)


# --- Each fact compared, not skipped everywhere -----------------------------------------


def test_every_fact_is_compared_on_enough_fixtures(runs):
  loops = groups = meshes = configs = 0
  modes = dict.fromkeys(MIN_MODE_EDITS, 0)
  for path in MODULES:
    run = runs(path)
    if run.source is None:
      continue
    if run.readable is not None:
      cases = group_cases(run)
      groups += len(cases)
      meshes += sum(mesh for _, _, mesh in cases.values())
    if run.refused is not None:
      continue
    loops += sum(bool(cpp) for cpp, _ in loop_cases(run).values())
    configs += module_config.for_module(str(path)) is not None
    for mode, _, _ in mode_cases(run).values():
      modes[mode] = modes.get(mode, 0) + 1
  assert loops >= MIN_LOOP_PERMUTES, loops
  assert groups >= MIN_GROUPS, groups
  assert meshes >= MIN_MESH_GROUPS, meshes
  assert configs >= MIN_CONFIGS, configs
  for mode, least in MIN_MODE_EDITS.items():
    assert modes[mode] >= least, (mode, modes)
