"""The C++ driver end to end on real fixtures: rewrite, report, errors."""

import json
import os
import re
import stat

import pytest

from hlo_tools.hlo import reader
from hlo_tools.model import collectives

from conftest import FIXTURES, SHARED_DATA, placed, run_nvshmem_opt

# Every fixture with a collective-permute (Ulysses attention has only all-to-alls).
BEFORE_ASYNC = sorted(
  p for p in FIXTURES.glob("*.before_async.hlo") if not p.name.startswith("ulysses")
)
AFTER_OPT = sorted(FIXTURES.glob("*.after_optimizations.hlo"))


# Under this table NVSHMEM wins every NVLink edge (no per-buffer cost), so the
# tests below check what the driver does with a decision, not the default
# table's calibration.
NVSHMEM_FAVOURED = "links { backend: NVSHMEM link_class: NVLINK latency_us: 1 bandwidth_gbps: 450 per_buffer_us: 0 }\nlinks { backend: NVSHMEM link_class: NVLINK_DOMAIN latency_us: 1 bandwidth_gbps: 450 per_buffer_us: 0 }\n"


@pytest.fixture(scope="module")
def favoured(tmp_path_factory):
  path = tmp_path_factory.mktemp("tables") / "nvshmem_favoured.txt"
  path.write_text(NVSHMEM_FAVOURED)
  return f"--cost-table={path}"


def _topology_for(path):
  # ring_1x2x4.before_async.hlo -> 1x2x4 (the topology it was compiled for).
  return path.name.split(".")[0].split("_")[-1]


@pytest.mark.long
@pytest.mark.parametrize("path", BEFORE_ASYNC + AFTER_OPT, ids=lambda p: p.name)
def test_rewrites_every_fixture_and_output_verifies(path, tmp_path):
  out, report = tmp_path / "out.hlo", tmp_path / "report.json"
  result = run_nvshmem_opt(
    path, f"--topology={_topology_for(path)}", "-o", out, f"--report={report}"
  )
  assert result.returncode == 0, result.stderr
  assert result.stderr == ""
  decisions = json.loads(report.read_text())["decisions"]
  assert decisions, "every fixture has at least one collective-permute"
  module = reader.parse_hlo_file(out)
  permutes = collectives.collective_permutes(module)
  # No sync permute survives; every async one carries the decided backend.
  assert all(p.form != "sync" for p in permutes)
  by_plan = {d["plan"] for d in decisions}
  backends = {p.backend for p in permutes}
  if by_plan == {"nvshmem"}:
    assert backends == {"NVSHMEM"}
  if by_plan == {"nccl"}:
    assert backends == {"DEFAULT"}
  # Exit 0: the output passed XLA's verifier. A second run over it changes nothing
  # (test_reliability.py's invariants, every fixture on every topology).


def test_one_host_ring_is_nvshmem_two_hosts_nccl(favoured):
  ring = FIXTURES / "ring_1x1x8.before_async.hlo"
  for topology, plan, backend in (
    ("1x1x8", "nvshmem", "NVSHMEM"),
    ("1x2x4", "nccl", "DEFAULT"),
    ("1x2x4:nvl8", "nccl", "DEFAULT"),
  ):
    result = run_nvshmem_opt(
      ring, f"--topology={topology}", "--report=-", "--mode=explain", "--compare-upstream", favoured
    )
    assert result.returncode == 0, result.stderr
    (decision,) = json.loads(result.stdout)["decisions"]
    assert decision["plan"] == plan, decision
    assert decision["backend"] == backend
    assert decision["bytes"] == 65536  # K and V stacked: bf16[2,1,128,2,64]
    # With one GPU per process (the layout where NVSHMEM runs), upstream's assigner
    # gives NVSHMEM to the ring across hosts too, where NVSHMEM_TEAM_SHARED does not
    # wait for the remote put.
    assert decision["upstream"] == "NVSHMEM"


def test_backward_fixture_has_permutes_in_both_loops(favoured):
  result = run_nvshmem_opt(
    FIXTURES / "ring_bwd_1x2x4.before_async.hlo",
    "--topology=1x1x8",
    "--report=-",
    "--mode=explain",
    favoured,
  )
  decisions = json.loads(result.stdout)["decisions"]
  # K/V in the forward loop, K/V with the f32 gradient sums (3x) in the backward
  # loop, then the sums (2x) handed to their owners outside the loops.
  assert [d["bytes"] for d in decisions] == [65536, 196608, 131072]
  assert len({d["computation"] for d in decisions}) == 3
  assert {d["plan"] for d in decisions} == {"nvshmem"}


def test_explain_prints_one_block_per_permute():
  result = run_nvshmem_opt(
    FIXTURES / "ring_2x2x4.before_async.hlo", "--topology=2x2x4", "--mode=explain"
  )
  assert result.returncode == 0
  assert "region_0.5_spmd/ppermute.6.0 (sync, 32768 bytes, 16 pairs): nccl" in result.stdout
  assert "4 of 16 edges leave their host" in result.stdout


def test_cost_table_changes_the_decision(tmp_path):
  ring = FIXTURES / "ring_1x1x8.before_async.hlo"
  fast, slow = tmp_path / "fast.txt", tmp_path / "slow.txt"
  fast.write_text(NVSHMEM_FAVOURED)
  slow.write_text(
    "links { backend: NVSHMEM link_class: NVLINK latency_us: 1000 bandwidth_gbps: 450 per_buffer_us: 0 }\n"
  )
  for extra, plan in (([f"--cost-table={fast}"], "nvshmem"), ([f"--cost-table={slow}"], "nccl")):
    result = run_nvshmem_opt(ring, "--topology=1x1x8", "--report=-", "--mode=explain", *extra)
    assert result.returncode == 0, result.stderr
    (decision,) = json.loads(result.stdout)["decisions"]
    assert decision["plan"] == plan, decision


def test_no_split_even_where_the_costs_favour_one(tmp_path):
  # NVSHMEM on the NVLink edges would leave the targets of the network edges
  # without a source in NVSHMEM's world-team barrier: the ring stays NCCL.
  table = tmp_path / "fast_fabric.txt"
  table.write_text(
    "links { backend: NCCL link_class: NETWORK latency_us: 1 bandwidth_gbps: 900 per_buffer_us: 0 }\nsm_interference { backend: NCCL fraction: 4 }\n"
  )
  out = tmp_path / "out.hlo"
  result = run_nvshmem_opt(
    FIXTURES / "ring_1x2x4.before_async.hlo",
    "--topology=1x2x4",
    f"--cost-table={table}",
    "-o",
    out,
    "--report=-",
  )
  assert result.returncode == 0, result.stderr
  (decision,) = json.loads(result.stdout)["decisions"]
  assert decision["plan"] == "nccl", decision
  text = out.read_text()
  assert "nvshmem-start" not in text and '"backend":"NVSHMEM"' not in text


@pytest.mark.parametrize(
  "fixture, topology, team", [("shift_1x2x4", "1x1x8", 8), ("shift_1x1x2", "1x1x2", 2)]
)
def test_non_cyclic_shift_never_gets_nvshmem(fixture, topology, team, tmp_path, favoured):
  """A device without a source would hang XLA's NVSHMEM permute; upstream picks it."""
  out = tmp_path / "out.hlo"
  result = run_nvshmem_opt(
    FIXTURES / f"{fixture}.before_async.hlo",
    f"--topology={topology}",
    "-o",
    out,
    "--report=-",
    "--compare-upstream",
    favoured,
  )
  assert result.returncode == 0, result.stderr
  (decision,) = json.loads(result.stdout)["decisions"]
  assert decision["plan"] == "nccl" and decision["backend"] == "DEFAULT", decision
  assert "nvshmem refused" in decision["reason"]
  assert f"of {team} devices of the program (device 0) has no source" in decision["reason"]
  assert decision["upstream"] == "NVSHMEM"  # the assignment that hangs
  (permute,) = collectives.collective_permutes(reader.parse_hlo_file(out))
  assert permute.backend == "DEFAULT"


def test_reads_serialized_proto(tmp_path):
  from jaxlib import _hlo  # pylint: disable=import-outside-toplevel

  text = (FIXTURES / "shift_1x2x4.before_async.hlo").read_text()
  module = _hlo.hlo_module_from_text(text)
  proto = tmp_path / "shift.pb"
  proto.write_bytes(module.as_serialized_hlo_module_proto())
  result = run_nvshmem_opt(proto, f"--topology={placed('1x1x8')}", "--report=-", "--mode=explain")
  assert result.returncode == 0, result.stderr
  (decision,) = json.loads(result.stdout)["decisions"]
  # A shift: device 0 has no source, so NVSHMEM is refused.
  assert decision["plan"] == "nccl" and "no source" in decision["reason"], decision


@pytest.mark.long
@pytest.mark.parametrize(
  "args, message",
  [
    (["{missing}", "--topology=1x1x8"], "{missing}: no such file"),
    (["{ring}", "--topology=1x2"], "topology spec '1x2': expected SLICESxHOSTSxGPUS"),
    (["{ring}", "--topology=1x2x4:nvl3"], "whole number of hosts"),
    (["{ring}", "--topology=1x1x4"], "needs 8 devices"),
    (["{ring}", "--topology=1x1x8", "--mode=fast"], "unknown --mode 'fast'"),
    (["{ring}", "--topology=1x1x8", "--frobnicate"], "unknown flag '--frobnicate'"),
    (["{ring}", "--mode=explain", "-o", "{missing}"], "--mode=explain writes no module"),
    (["{ring}", "--devices-per-host=0"], "--devices-per-host: '0' is not a positive integer"),
    (["{ring}", "--devices-per-host=-1"], "--devices-per-host: '-1' is not a positive integer"),
    (["{ring}", "--devices-per-host=abc"], "--devices-per-host: 'abc' is not a positive"),
    (["{ring}", "--devices-per-host"], "--devices-per-host needs a value"),
    (
      ["{ring}", "--devices-per-host=3"],
      "{ring}: its 8 devices (partitions x replicas) do not fill hosts of 3 GPUs",
    ),
    (["{ring}", "--devices-per-host=16"], "{ring}: its 8 devices"),
    # Stated hosts must be filled; the default host of 8 may be part-used.
    (
      ["{twelve}", "--devices-per-host=8"],
      "{twelve}: its 12 devices (partitions x replicas) do not fill hosts of 8 "
      "GPUs (--devices-per-host)",
    ),
    (["{ring}", "--devices-per-host=4", "--topology=1x2x4"], "give one"),
    (["{bad_pairs}", "--topology=1x1x2"], "{bad_pairs}:5:"),
    (["{truncated}", "--topology=1x1x8"], "{truncated}:"),
    (["{garbage}", "--topology=1x1x8"], "neither HLO text"),
    (
      ["{ring}", "--topology=1x1x8", "--cost-table={bad_table}"],
      '{bad_table}:2: Unknown enumeration value of "WARP" for field "link_class"',
    ),
    (
      ["{ring}", "--topology=1x1x8", "--cost-table={old_table}"],
      "{old_table}:2: the cost table is in text format now",
    ),
  ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, args, message):
  paths = {
    "missing": tmp_path / "nope.hlo",
    "ring": FIXTURES / "ring_1x1x8.before_async.hlo",
    "bad_pairs": tmp_path / "bad_pairs.hlo",
    "truncated": tmp_path / "truncated.hlo",
    "garbage": tmp_path / "garbage.bin",
    "bad_table": tmp_path / "table.txt",
    "old_table": tmp_path / "old_table.txt",
    "twelve": tmp_path / "twelve.hlo",
  }
  ring12 = ",".join(f"{{{i},{(i + 1) % 12}}}" for i in range(12))
  paths["twelve"].write_text(
    "HloModule m, num_partitions=12\n\nENTRY e {\n  p = f32[4] parameter(0)\n"
    f"  ROOT c = f32[4] collective-permute(p), channel_id=1, source_target_pairs={{{ring12}}}\n}}\n"
  )
  shift = (FIXTURES / "shift_1x2x4.before_async.hlo").read_text()
  paths["bad_pairs"].write_text(
    "HloModule m, num_partitions=2\n\nENTRY e {\n  p = f32[4] parameter(0)\n"
    "  ROOT c = f32[4] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,}}\n}\n"
  )
  paths["truncated"].write_text(shift[: len(shift) * 2 // 3])
  paths["garbage"].write_bytes(bytes(range(256)) * 8)
  paths["bad_table"].write_text("margin: 0.1\nlinks { backend: NCCL link_class: WARP }\n")
  paths["old_table"].write_text("# a table of an earlier release\nmargin 0.1\n")
  formatted = [a.format(**paths) for a in args]
  result = run_nvshmem_opt(*formatted)
  assert result.returncode == 2, (result.stdout, result.stderr)
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert message.format(**paths) in lines[0]


def test_jax_0112_module_keeps_its_own_text(tmp_path, favoured):
  """jaxlib 0.11 writes a one-operand permute-start's shape as ((T), T), which the wheel's
  verifier rejects: read as (T, T), decided, and written back as it was. The program has
  one device, so its permute is a local copy: no NVSHMEM, which upstream's assigner gives."""
  newer = SHARED_DATA / "h200_jax0112_ppermute_loop.after_optimizations.hlo"
  out = tmp_path / "out.hlo"
  result = run_nvshmem_opt(
    newer, "--topology=1x1x1", "-o", out, "--report=-", "--compare-upstream", favoured
  )
  assert result.returncode == 0, result.stderr
  (decision,) = json.loads(result.stdout)["decisions"]
  assert decision["plan"] == "nccl" and decision["upstream"] == "NVSHMEM", decision
  assert "every pair is a device to itself" in json.dumps(decision), decision
  text = out.read_text()
  assert "= ((bf16[1024,1024]{1,0}), bf16[1024,1024]{1,0}) collective-permute-start(" in text
  assert text.replace('"backend":"NVSHMEM"', '"backend":"DEFAULT"') == newer.read_text()


def test_input_is_never_written(tmp_path):
  source = tmp_path / "in.hlo"
  source.write_text((FIXTURES / "ring_1x1x8.before_async.hlo").read_text())
  source.chmod(stat.S_IRUSR)
  before = source.read_bytes()
  result = run_nvshmem_opt(source, "--topology=1x1x8", "-o", source)
  assert result.returncode == 2 and "refusing to overwrite the input" in result.stderr
  result = run_nvshmem_opt(source, "--topology=1x1x8", f"--report={source}")
  assert result.returncode == 2
  link = tmp_path / "alias.hlo"
  os.symlink(source, link)
  result = run_nvshmem_opt(source, "--topology=1x1x8", "-o", link)
  assert result.returncode == 2
  assert source.read_bytes() == before


def test_output_is_atomic_and_deterministic(tmp_path):
  ring = FIXTURES / "ring_2x2x4.after_optimizations.hlo"
  outputs = []
  for i in range(2):
    out = tmp_path / f"out{i}.hlo"
    assert run_nvshmem_opt(ring, "--topology=2x2x4", "-o", out).returncode == 0
    outputs.append(out.read_bytes())
  assert outputs[0] == outputs[1]
  assert not list(tmp_path.glob("*.tmp.*")), "no temp file left behind"


def test_jax_010_mesh_groups_are_read_and_kept(tmp_path):
  """jaxlib 0.10 prints GSPMD's all-reduce groups as replica_groups=mesh[...], which the
  wheel's parser lacks; the driver reads them and writes them back as they were."""
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel

  from generated_hlo import _MESH_ALL_REDUCE  # pylint: disable=import-outside-toplevel

  root = FIXTURES.parents[1]
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1")
  text = subprocess.run(
    [
      sys.executable,
      "-c",
      _MESH_ALL_REDUCE,
      str(root / "hlo_tools" / "data" / "h200_gpu_target_config.pbtxt"),
    ],
    capture_output=True,
    text=True,
    env=env,
    check=True,
    timeout=300,
  ).stdout
  assert "replica_groups=mesh[" in text
  path, out = tmp_path / "mesh.hlo", tmp_path / "out.hlo"
  path.write_text(text)
  result = run_nvshmem_opt(path, "--topology=1x2x4", "-o", out, "--compare-upstream")
  assert result.returncode == 0, result.stderr
  assert result.stderr == ""
  assert out.read_text() == text  # no permute: nothing to change


# The tensor- and context-parallel module of jax 0.10.2 (scripts/gen_driver_fixture.py):
# a psum over tp, a ppermute ring over cp, and GSPMD's all-reduce in the mesh form, with
# backend_config fields (collectives_mode) the wheel's GpuBackendConfig lacks.
TP_CP = FIXTURES / "driver_tp_cp_1x1x8.after_optimizations.hlo"


@pytest.mark.parametrize("mode", ["rewrite", "annotate", "explain"])
def test_tp_cp_module_goes_through_every_mode(mode, tmp_path, favoured):
  output = [] if mode == "explain" else ["-o", tmp_path / "out.hlo"]
  result = run_nvshmem_opt(
    TP_CP,
    f"--topology={placed('1x1x8')}",
    f"--mode={mode}",
    *output,
    f"--report={tmp_path / 'report.json'}",
    "--compare-upstream",
    favoured,
  )
  assert result.returncode == 0, result.stderr
  (decision,) = json.loads((tmp_path / "report.json").read_text())["decisions"]
  assert decision["plan"] == "nvshmem" and decision["upstream"] == "NVSHMEM", decision
  assert decision["pairs"] == [[0, 2], [2, 4], [4, 6], [6, 0], [1, 3], [3, 5], [5, 7], [7, 1]]


_STATEMENT_RE = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = \S.*? ([a-z][a-z\-]*)\(", re.M)
_PERMUTE_OPS = ("collective-permute", "collective-permute-start", "collective-permute-done")


def _statements(text):
  """{(computation, instruction): (opcode, line)} of XLA-printed text."""
  out, computation = {}, None
  for line in text.splitlines():
    if line.rstrip().endswith("{") and not line.startswith(("HloModule", " ")):
      computation = line.split()[1 if line.startswith("ENTRY") else 0].lstrip("%")
      continue
    m = _STATEMENT_RE.match(line)
    if m and computation:
      out[(computation, m.group(1))] = (m.group(2), line)
  return out


@pytest.mark.long
@pytest.mark.parametrize("path", [TP_CP] + BEFORE_ASYNC + AFTER_OPT, ids=lambda p: p.name)
def test_output_is_lossless(path, tmp_path, favoured):
  """Only permutes change: every other instruction is the input's own text, line for
  line, and the output parses with jax's own XLA (the jaxlib that wrote it)."""
  from jaxlib import _hlo  # pylint: disable=import-outside-toplevel

  out = tmp_path / "out.hlo"
  topology = placed("1x1x8") if path == TP_CP else _topology_for(path)
  result = run_nvshmem_opt(path, f"--topology={topology}", "-o", out, favoured)
  assert result.returncode == 0, result.stderr
  before, after = _statements(path.read_text()), _statements(out.read_text())
  kept = {k: v for k, v in before.items() if v[0] not in _PERMUTE_OPS}
  assert kept and {k: after.get(k) for k in kept} == kept
  assert {k for k, v in after.items() if v[0] not in _PERMUTE_OPS} == set(kept)
  # A permute the user marked keeps the config it has: none is written.
  if not path.name.startswith("marked_"):
    assert any(v[0] == "collective-permute-start" and '"backend":"' in v[1] for v in after.values())
  _hlo.hlo_module_from_text(out.read_text())  # raises if jax's XLA cannot read it


@pytest.mark.parametrize("mode", ["rewrite", "annotate"])
def test_permute_written_over_several_lines_is_replaced_whole(mode, tmp_path, favoured):
  from jaxlib import _hlo  # pylint: disable=import-outside-toplevel

  path, out = tmp_path / "lines.hlo", tmp_path / "out.hlo"
  path.write_text(
    "HloModule m, num_partitions=4\n\nENTRY e {\n  p = f32[4] parameter(0)\n"
    "  c = f32[4] collective-permute(p), channel_id=1,\n"
    "      source_target_pairs={{0,1},{1,2},{2,3},{3,0}}  /* a { */\n"
    "  ROOT n = f32[4] negate(c)\n}\n"
  )
  result = run_nvshmem_opt(
    path, f"--topology={placed('1x1x4')}", f"--mode={mode}", "-o", out, favoured
  )
  assert result.returncode == 0, result.stderr
  text = out.read_text()
  assert "  p = f32[4] parameter(0)\n" in text and "  ROOT n = f32[4] negate(c)\n" in text
  assert ('"backend":"NVSHMEM"' in text) == (mode == "rewrite")
  assert ('_nvshmem_plan="nvshmem"' in text) == (mode == "annotate")
  _hlo.hlo_module_from_text(text)


def _groups_by_channel(text):
  return {
    int(m.group(1)): m.group(2)
    for m in re.finditer(r"channel_id=(\d+), replica_groups=(\{\{[\d,{}]*\}\})", text)
  }


# Mesh forms as XLA writes them (xla/hlo/ir/mesh_and_axis.cc): device ids as an iota
# with a transpose or as a list, and sub-axes 'name':(pre-size)size.
_MESH_FORMS = [
  "mesh['a'=2,'b'=4] {'b'}",
  "mesh['a'=2,'b'=4] {'b','a'}",
  "mesh['a'=2,'b'=4], device_ids=([4,2]T(1,0)) {'b':(2)2}",
  "mesh['x'=2,'y'=2,'z'=2], device_ids=(3,1,2,0,7,5,6,4) {'z','x'}",
  "mesh['a'=8] {'a':(1)2,'a':(4)2}",
  "mesh['a'=2,'b'=4,'c'=1] {'a','b':(1)2}",
  "mesh['axis_0'=1,'axis_1'=8] {'axis_1'}",
]


def test_mesh_groups_expand_as_jaxs_xla_does(tmp_path):
  """--print-readable's explicit groups equal what jaxlib's own XLA expands each mesh
  form to (its fingerprint printing writes full lists)."""
  from jaxlib import _hlo  # pylint: disable=import-outside-toplevel

  body = "\n".join(
    f"  r{i} = f32[4] all-reduce(p), channel_id={i + 1}, replica_groups={form}, "
    "use_global_device_ids=true, to_apply=add"
    for i, form in enumerate(_MESH_FORMS)
  )
  text = (
    "HloModule m, num_partitions=8\n\nadd {\n  x = f32[] parameter(0)\n"
    "  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n\nENTRY e {\n"
    f"  p = f32[4] parameter(0)\n{body}\n  ROOT t = () tuple()\n}}\n"
  )
  (tmp_path / "forms.hlo").write_text(text)
  real = [p for p in [TP_CP] + AFTER_OPT if "replica_groups=mesh[" in p.read_text()]
  assert len(real) >= 2  # the tp x cp fixture and the train steps
  for path, source in [(tmp_path / "forms.hlo", text)] + [(p, p.read_text()) for p in real]:
    readable = run_nvshmem_opt(path, "--print-readable")
    assert readable.returncode == 0, readable.stderr
    assert "mesh[" not in readable.stdout
    module = _hlo.hlo_module_from_text(source)
    jax_groups = _groups_by_channel(module.to_string(_hlo.HloPrintOptions.fingerprint()))
    ours = _groups_by_channel(readable.stdout)
    assert jax_groups and ours == jax_groups


def test_proto_of_a_jax_010_module_comes_back_readable_by_jax(tmp_path, favoured):
  """A serialized module with mesh groups: this XLA prints them in a short form of its
  own (@mesh<...>) that jax cannot read; the driver writes the full lists instead."""
  from jaxlib import _hlo  # pylint: disable=import-outside-toplevel

  module = _hlo.hlo_module_from_text(TP_CP.read_text())
  proto, out = tmp_path / "tp_cp.pb", tmp_path / "out.hlo"
  proto.write_bytes(module.as_serialized_hlo_module_proto())
  result = run_nvshmem_opt(proto, "--topology=1x1x8", "-o", out, favoured)
  assert result.returncode == 0, result.stderr
  text = out.read_text()
  assert "@mesh" not in text and "collective-permute-start" in text
  again = _hlo.hlo_module_from_text(text)  # jax's own XLA reads it
  full = _hlo.HloPrintOptions.fingerprint()
  assert _groups_by_channel(again.to_string(full)) == _groups_by_channel(module.to_string(full))


@pytest.mark.parametrize(
  "path", sorted(FIXTURES.glob("train_step_*.after_optimizations.hlo")), ids=lambda p: p.name
)
def test_train_steps_compare_with_upstream(path):
  """Llama train steps of jax 0.10.2 (TP all-reduces in the mesh form, collectives_mode in
  their configs) next to upstream's CollectiveBackendAssigner."""
  result = run_nvshmem_opt(
    path, f"--topology={_topology_for(path)}", "--report=-", "--mode=explain", "--compare-upstream"
  )
  assert result.returncode == 0, result.stderr
  decisions = json.loads(result.stdout)["decisions"]
  assert decisions and all(d["upstream"] in ("DEFAULT", "NVSHMEM") for d in decisions)


def test_python_side_says_why_upstream_is_missing(tmp_path):
  from hlo_tools.model import driver  # pylint: disable=import-outside-toplevel

  report, why = driver.explain_report(TP_CP, "1x1x8", None)
  assert why is None
  assert list(driver.upstream_from_report(report).values()) == ["NVSHMEM"]
  bad = tmp_path / "bad.hlo"
  bad.write_text("HloModule m\n\nENTRY e {\n  ROOT p = f32[4] parameter(0),\n}\n")
  report, why = driver.explain_report(bad, "1x1x8", None)
  assert report is None and why.startswith(f"nvshmem-opt: {bad}:5:")


# The same small ring compiled by jax 0.9.1 (tests/fixtures/jax091/README.md): the oldest
# XLA the tools must read. Its text differs from jax 0.10.2's (the combined permute has no
# metadata, a shorter collective_backend_config, nested Triton gemm fusions).
JAX091 = FIXTURES / "jax091"


@pytest.mark.parametrize("stage", ["before_async", "after_optimizations"])
@pytest.mark.parametrize(
  "topology, plan, backend", [("1x2x4", "nccl", "DEFAULT"), ("1x1x8", "nvshmem", "NVSHMEM")]
)
def test_jax091_fixtures_rewrite_and_verify(stage, topology, plan, backend, tmp_path, favoured):
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel

  path = JAX091 / f"ring_1x2x4.{stage}.hlo"
  out, report = tmp_path / "out.hlo", tmp_path / "report.json"
  # jax 0.9.1's text comes without XLA's config: the map is given.
  topology = placed(topology)
  result = run_nvshmem_opt(
    path, f"--topology={topology}", "-o", out, f"--report={report}", favoured
  )
  assert result.returncode == 0, result.stderr
  assert result.stderr == ""
  (decision,) = json.loads(report.read_text())["decisions"]
  assert decision["plan"] == plan, decision
  assert decision["backend"] == backend
  assert decision["bytes"] == 65536  # K and V blocks: 2 x bf16[1,128,2,64]
  (permute,) = collectives.collective_permutes(reader.parse_hlo_file(out))
  assert permute.form == "start-done" and permute.backend == backend
  assert permute.while_loop is not None
  verified = subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", "verify", str(out), f"--topology={topology}", favoured],
    capture_output=True,
    text=True,
    cwd=FIXTURES.parents[1],
    timeout=300,
  )
  assert verified.returncode == 0, verified.stdout + verified.stderr
  assert "all checks pass" in verified.stdout


# --- Input a user actually has, and hostile input --------------------------------------

LOWERED = FIXTURES / "ring_1x2x4.lowered.hlo"


def test_jax_lowered_module_gets_its_partitions_from_the_mesh():
  """jax.jit(f).lower(...).as_text(dialect="hlo") has no num_partitions in its header."""
  assert "num_partitions" not in LOWERED.read_text().splitlines()[0]
  result = run_nvshmem_opt(LOWERED, "--topology=1x2x4", "--report=-", "--mode=explain")
  assert result.returncode == 0, result.stderr
  (line,) = result.stderr.strip().splitlines()
  assert "using 8 from the Shardy mesh" in line and "--num-partitions" in line
  decisions = json.loads(result.stdout)["decisions"]
  assert len(decisions) == 1 and {d["plan"] for d in decisions} == {"nccl"}
  # Said explicitly, nothing is inferred and nothing is said.
  quiet = run_nvshmem_opt(
    LOWERED, "--topology=1x2x4", "--report=-", "--mode=explain", "--num-partitions=8"
  )
  assert quiet.returncode == 0 and quiet.stderr == ""
  assert json.loads(quiet.stdout)["decisions"] == decisions


def test_jax_lowered_module_without_mesh_uses_the_topology(tmp_path):
  header, rest = LOWERED.read_text().split("\n", 1)
  no_mesh = tmp_path / "no_mesh.hlo"
  no_mesh.write_text(header[: header.index(", frontend_attributes=")] + "\n" + rest)
  result = run_nvshmem_opt(no_mesh, "--topology=1x1x8", "--report=-", "--mode=explain")
  assert result.returncode == 0, result.stderr
  assert "using 8 from the topology's 8 devices" in result.stderr
  # A topology too small for the ids the module names is still an error.
  small = run_nvshmem_opt(no_mesh, "--topology=1x1x4", "--mode=explain")
  assert small.returncode == 2 and "needs 8 devices" in small.stderr


def test_compare_upstream_ignores_the_backend_already_in_the_input(tmp_path, favoured):
  """Upstream's assigner only sets NVSHMEM: it must not echo an earlier run's choice."""
  first = tmp_path / "first.hlo"
  assert (
    run_nvshmem_opt(
      FIXTURES / "ring_1x1x8.before_async.hlo", "--topology=1x1x8", "-o", first, favoured
    ).returncode
    == 0
  )
  assert '"backend":"NVSHMEM"' in first.read_text()
  # Every edge of the ring now crosses hosts.
  result = run_nvshmem_opt(
    first,
    "--topology=1x2x4:map=0,4,1,5,2,6,3,7",
    "--report=-",
    "--mode=explain",
    "--compare-upstream",
    favoured,
  )
  assert result.returncode == 0, result.stderr
  (decision,) = json.loads(result.stdout)["decisions"]
  assert decision["plan"] == "nccl"
  # The first run's output carries the ring's config (the identity map); the map
  # the topology states is the one decided on.
  assert decision["edges_by_class"]["network"] == 8


def test_deeply_nested_shape_exits_2_with_one_line(tmp_path):
  shape = "f32[]"
  for _ in range(10_000):
    shape = f"({shape})"
  deep = tmp_path / "deep.hlo"
  deep.write_text(f"HloModule m\n\nENTRY e {{\n  ROOT p = {shape} parameter(0)\n}}\n")
  result = run_nvshmem_opt(deep, "--topology=1x1x1")
  assert result.returncode == 2, result.stderr[-500:]
  (line,) = result.stderr.strip().splitlines()
  assert f"{deep}:4: nesting deeper than 512 levels" in line
  # Brackets inside strings do not count.
  text = FIXTURES / "ring_1x1x8.before_async.hlo"
  quoted = tmp_path / "quoted.hlo"
  quoted.write_text(text.read_text().replace('op_name="', 'op_name="' + "(" * 600, 1))
  assert run_nvshmem_opt(quoted, "--topology=1x1x8", "--mode=explain").returncode == 0


@pytest.mark.parametrize("how", ["input", "stdin", "cost_table"])
def test_input_limit_bounds_devices_and_pipes(how):
  """/dev/zero never ends: the limit must stop the read, not the file's size."""
  ring = FIXTURES / "ring_1x1x8.before_async.hlo"
  args = {
    "input": ["/dev/zero", "--topology=1x1x1"],
    "stdin": ["-", "--topology=1x1x1"],
    "cost_table": [ring, "--topology=1x1x8", "--cost-table=/dev/zero"],
  }[how]
  with open("/dev/zero", "rb") as zero:
    result = run_nvshmem_opt(*args, "--max-input-bytes=1000000", stdin=zero)
  assert result.returncode == 2
  (line,) = result.stderr.strip().splitlines()
  assert "more than 1000000 bytes, over the limit of 1000000 (--max-input-bytes)" in line


def test_error_lines_stay_readable(tmp_path):
  """The verifier quotes the whole instruction: a million characters of pairs."""
  pairs = ",".join(f"{{{i},{i + 1}}}" for i in range(100_000))
  big = tmp_path / "big.hlo"
  big.write_text(
    "HloModule m, num_partitions=2\n\nENTRY e {\n  p = f32[4] parameter(0)\n"
    f"  ROOT c = f32[4] collective-permute(p), channel_id=1, "
    f"source_target_pairs={{{pairs}}}\n}}\n"
  )
  result = run_nvshmem_opt(big, "--topology=1x1x2")
  assert result.returncode == 2
  (line,) = result.stderr.strip().splitlines()
  assert len(line) < 500 and line.endswith("more characters)"), line
  assert line.startswith(f"nvshmem-opt: {big}")


# --- Backends as data: peer / symmetric memory for the XLA of jax >= 0.10.2 ------------

# Peer copies beat NCCL on NVLink under this table (on 2x H200 they measured at parity,
# and the default table says so: NCCL is kept).
PEER_FAVOURED = (
  "links { backend: PEER link_class: NVLINK latency_us: 1 bandwidth_gbps: 450 per_buffer_us: 0 }\n"
)


def _permute_configs(path):
  return [p.backend_config for p in collectives.collective_permutes(reader.parse_hlo_file(path))]


@pytest.mark.parametrize("stage", ["before_async", "after_optimizations"])
def test_peer_backend_writes_collectives_mode(stage, tmp_path):
  table = tmp_path / "peer.txt"
  table.write_text(PEER_FAVOURED)
  ring = FIXTURES / f"ring_1x1x8.{stage}.hlo"
  out = tmp_path / "out.hlo"
  result = run_nvshmem_opt(
    ring,
    "--topology=1x1x8",
    "--backends=nccl,peer",
    "--per-op-modes",  # a stock XLA runs the program's one mode: NCCL written
    f"--cost-table={table}",
    "-o",
    out,
    "--report=-",
  )
  assert result.returncode == 0, result.stderr
  (decision,) = json.loads(result.stdout)["decisions"]
  assert decision["plan"] == "peer", decision
  assert decision["backend"] == "DEFAULT"
  assert decision["collectives_mode"] == "COLLECTIVES_PEER_MEMORY"
  (line,) = [l for l in out.read_text().splitlines() if "collective-permute-start(" in l]
  assert '"backend":"DEFAULT","collectives_mode":"COLLECTIVES_PEER_MEMORY"' in line
  if stage == "after_optimizations":
    # Fields this build's XLA does not know survive, in their order.
    assert '"kernel_strategy":"KERNEL_STRATEGY_DEFAULT"' in line
    assert line.count('"collectives_mode"') == 1
  # The same choice as the frontend attribute of the series for jax v0.11.0's XLA.
  assert '_xla_collectives_mode="peer"' in line


def test_peer_is_refused_across_hosts_and_at_parity(tmp_path):
  table = tmp_path / "peer.txt"
  table.write_text(PEER_FAVOURED)
  ring = FIXTURES / "ring_1x2x4.after_optimizations.hlo"
  for args, why in (
    ([f"--cost-table={table}"], "leave their host"),
    ([], ""),
  ):  # default table: peer measured at parity with NCCL
    out = tmp_path / "out.hlo"
    result = run_nvshmem_opt(
      ring,
      "--topology=1x2x4" if why else "--topology=1x1x8",
      "--backends=nccl,peer",
      *args,
      "-o",
      out,
      "--report=-",
    )
    assert result.returncode == 0, result.stderr
    (decision,) = json.loads(result.stdout)["decisions"]
    assert decision["plan"] == "nccl" and decision["collectives_mode"] is None, decision
    assert why in decision["reason"]
    (line,) = [l for l in out.read_text().splitlines() if "collective-permute-start(" in l]
    assert '"backend":"DEFAULT","collectives_mode":"COLLECTIVES_MODE_INVALID"' in line


def test_default_backend_set_is_nccl_nvshmem(favoured):
  result = run_nvshmem_opt(
    FIXTURES / "ring_1x1x8.before_async.hlo",
    "--topology=1x1x8",
    "--report=-",
    "--mode=explain",
    favoured,
  )
  (decision,) = json.loads(result.stdout)["decisions"]
  assert decision["plan"] == "nvshmem" and decision["collectives_mode"] is None
  printed = run_nvshmem_opt("--print-cost-table", "--backends=nccl,peer,symmetric")
  assert "backends: [NCCL, PEER, SYMMETRIC]" in printed.stdout


@pytest.mark.parametrize("backends", ["nvshmem,peer", "peer", "nccl,warp"])
def test_bad_backend_set_exits_2(backends):
  result = run_nvshmem_opt(
    FIXTURES / "ring_1x1x8.before_async.hlo", "--topology=1x1x8", f"--backends={backends}"
  )
  assert result.returncode == 2
  (line,) = result.stderr.strip().splitlines()
  assert line.startswith("nvshmem-opt: --backends:"), line


def test_decisions_are_not_attributes_unless_asked(tmp_path, favoured):
  ring = FIXTURES / "ring_1x1x8.before_async.hlo"
  plain, annotated = tmp_path / "plain.hlo", tmp_path / "annotated.hlo"
  assert run_nvshmem_opt(ring, "--topology=1x1x8", "-o", plain, favoured).returncode == 0
  assert (
    run_nvshmem_opt(ring, "--topology=1x1x8", "-o", annotated, "--annotate", favoured).returncode
    == 0
  )
  assert "_nvshmem_plan" not in plain.read_text()
  (start,) = [l for l in annotated.read_text().splitlines() if "collective-permute-start(" in l]
  assert '_nvshmem_plan="nvshmem"' in start and '"backend":"NVSHMEM"' in start


# --- The topology derived from the module (no --topology) -------------------------------


def _decisions(result):
  assert result.returncode == 0, result.stderr
  report = json.loads(result.stdout)
  return report, [
    {k: v for k, v in d.items() if k != "new_instructions"} for d in report["decisions"]
  ]


@pytest.mark.long
@pytest.mark.parametrize(
  "fixture, flags, spec",
  [
    ("ring_1x1x8.before_async.hlo", [], "1x1x8"),
    ("ring_1x2x4.before_async.hlo", ["--devices-per-host=4"], "1x2x4"),
    ("shift_1x2x4.before_async.hlo", ["--devices-per-host=4"], "1x2x4"),
    # The default host of 8 GPUs: a 2-device program runs on part of it.
    ("shift_1x1x2.before_async.hlo", [], "1x1x8"),
  ],
)
def test_derived_topology_decides_as_the_explicit_spec(fixture, flags, spec, favoured, tmp_path):
  """Without --topology the driver asks the pass, which derives hosts of N GPUs."""
  path = FIXTURES / fixture
  common = ["--report=-", "--mode=explain", "--compare-upstream", favoured]
  derived = run_nvshmem_opt(path, *flags, *common)
  given = run_nvshmem_opt(path, f"--topology={spec}", *common)
  (d_report, d_decisions), (g_report, g_decisions) = _decisions(derived), _decisions(given)
  assert d_report["topology"] == g_report["topology"]
  assert d_report["topology"].startswith(spec + ":gpus_per_process=1:map=0,1")
  # Derived from the module, placed by XLA's config beside it; else the flag's.
  assert (d_report["topology_source"], g_report["topology_source"]) == ("module config", "flag")
  assert d_report["partition_to_device"] == g_report["partition_to_device"]
  assert d_decisions == g_decisions
  # Said once on stderr, naming what overrides it; nothing when the spec is given.
  (line,) = derived.stderr.strip().splitlines()
  assert f"no --topology; using {spec}" in line and "--topology=SPEC" in line
  assert given.stderr == ""
  # The rewritten modules are the same too.
  outs = [tmp_path / "derived.hlo", tmp_path / "given.hlo"]
  assert run_nvshmem_opt(path, *flags, favoured, "-o", outs[0]).returncode == 0
  assert run_nvshmem_opt(path, f"--topology={spec}", favoured, "-o", outs[1]).returncode == 0
  assert outs[0].read_text() == outs[1].read_text()


def test_two_hosts_of_four_and_one_of_eight_differ(favoured):
  """The fixture compiled for 1x2x4 is NVSHMEM on one host, NCCL across two."""
  path = FIXTURES / "ring_1x2x4.before_async.hlo"
  _, one_host = _decisions(run_nvshmem_opt(path, "--report=-", "--mode=explain", favoured))
  _, two_hosts = _decisions(
    run_nvshmem_opt(path, "--devices-per-host=4", "--report=-", "--mode=explain", favoured)
  )
  assert [d["plan"] for d in one_host] == ["nvshmem"]
  assert [d["plan"] for d in two_hosts] == ["nccl"]


def _proto_with_assignment(tmp_path, fixture, devices=None):
  """The fixture as a serialized HloModuleProto, with a static device assignment
  (partition p on devices[p]) when `devices` is given."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from jax._src.lib import xla_client  # pylint: disable=import-outside-toplevel
  from jaxlib import _hlo  # pylint: disable=import-outside-toplevel

  proto = _hlo.hlo_module_from_text((FIXTURES / fixture).read_text())
  data = proto.as_serialized_hlo_module_proto()
  if devices is not None:
    # HloModuleProto.device_assignment is field 15; a field appended to a serialized
    # message is part of it.
    assignment = xla_client.DeviceAssignment.create(np.array([devices])).serialize()
    size, length = len(assignment), b""
    while True:
      length += bytes([(size & 0x7F) | (0x80 if size > 0x7F else 0)])
      size >>= 7
      if not size:
        break
    data += bytes([15 << 3 | 2]) + length + assignment
  path = tmp_path / (fixture + ".pb")
  path.write_bytes(data)
  return path


def test_derived_topology_follows_the_device_assignment(tmp_path):
  """A proto's device assignment places the partitions: here each ring neighbour is on
  the other host, so every edge crosses the network."""
  spread = [0, 4, 1, 5, 2, 6, 3, 7]
  path = _proto_with_assignment(tmp_path, "ring_1x1x8.before_async.hlo", spread)
  common = ["--report=-", "--mode=explain", "--compare-upstream"]
  derived = run_nvshmem_opt(path, "--devices-per-host=4", *common)
  report, decisions = _decisions(derived)
  assert report["topology"] == "1x2x4:gpus_per_process=1:map=0,4,1,5,2,6,3,7"
  assert report["topology_source"] == "module config"
  assert report["partition_to_device"] == spread
  assert "placed by the module's device assignment" in derived.stderr
  assert decisions[0]["edges_by_class"]["network"] == 8
  _, given = _decisions(
    run_nvshmem_opt(
      FIXTURES / "ring_1x1x8.before_async.hlo", "--topology=1x2x4:map=0,4,1,5,2,6,3,7", *common
    )
  )
  assert decisions == given
  # Without the assignment, partitions come from the ids the permute names (said on
  # stderr), and the ring keeps 6 of its 8 edges on a host.
  plain = _proto_with_assignment(tmp_path, "ring_1x1x8.before_async.hlo")
  result = run_nvshmem_opt(plain, "--devices-per-host=4", *common)
  report, decisions = _decisions(result)
  assert report["topology"] == "1x2x4:gpus_per_process=1" and report["placement"] == "unknown"
  assert decisions[0]["edges_by_class"]["network"] == 2
  assert "the serialized module gives no num_partitions; using 8" in result.stderr


@pytest.mark.parametrize(
  "devices, flags, message",
  [
    (list(range(8)), ["--num-replicas=2"], "device assignment does not match"),
    ([2**31 - 1] + list(range(1, 8)), [], "the device assignment names device 2147483647"),
    ([-1] + list(range(1, 8)), [], "device -1"),
    ([0, 0] + list(range(2, 8)), [], "device 0 twice"),
  ],
)
def test_bad_device_assignment_exits_2(devices, flags, message, tmp_path):
  path = _proto_with_assignment(tmp_path, "ring_1x1x8.before_async.hlo", devices)
  result = run_nvshmem_opt(path, *flags, "--mode=explain")
  assert result.returncode == 2, result.stderr
  (line,) = result.stderr.strip().splitlines()
  assert str(path) in line and message in line


def test_jax_lowered_module_without_topology(tmp_path):
  """Partitions from the Shardy mesh, or without one from the ids used; then the
  topology from those."""
  result = run_nvshmem_opt(LOWERED, "--devices-per-host=4", "--report=-", "--mode=explain")
  report, _ = _decisions(result)
  assert report["topology"] == "1x2x4:gpus_per_process=1"
  assert "using 8 from the Shardy mesh" in result.stderr
  header, rest = LOWERED.read_text().split("\n", 1)
  no_mesh = tmp_path / "no_mesh.hlo"
  no_mesh.write_text(header[: header.index(", frontend_attributes=")] + "\n" + rest)
  result = run_nvshmem_opt(no_mesh, "--report=-", "--mode=explain")
  report, _ = _decisions(result)
  assert report["topology"] == "1x1x8:gpus_per_process=1"
  assert "using 8 from the largest partition id its collectives name" in result.stderr


def test_program_mode_flag_given_twice_in_the_config_is_refused_with_its_line(tmp_path):
  """The program's collectives-mode flag is read from the config's debug_options: given
  twice, the driver names the config's file and the second one's line and exits 2, as a
  proto's own text parser refuses a field given twice, rather than taking either value."""
  module = tmp_path / "ring.hlo"
  module.write_bytes((FIXTURES / "ring_1x1x8.before_async.hlo").read_bytes())
  config = "".join(
    l
    for l in (FIXTURES / "ring_1x1x8.before_async.config.pbtxt")
    .read_text()
    .splitlines(keepends=True)
    if "xla_gpu_collective_permute_mode" not in l
  )
  flag = "  xla_gpu_collective_permute_mode: COLLECTIVES_PEER_MEMORY\n"
  head = "debug_options {\n"
  assert head in config
  config = config.replace(head, head + flag + flag, 1)
  (tmp_path / "ring.config.pbtxt").write_text(config)
  line = 1 + config[: config.index(head)].count("\n") + 2  # the second flag's line
  r = run_nvshmem_opt(module, "--topology=1x1x8", "--report=-", "--mode=explain")
  assert r.returncode == 2
  assert f"ring.config.pbtxt:{line}" in r.stderr
  assert "xla_gpu_collective_permute_mode is given twice" in r.stderr
  once = config.replace(flag + flag, flag, 1)
  (tmp_path / "ring.config.pbtxt").write_text(once)
  report, _ = _decisions(run_nvshmem_opt(module, "--topology=1x1x8", "--report=-"))
  assert report["collective_permute_mode"] == "COLLECTIVES_PEER_MEMORY"
