"""hlo_tools.hlo_text against real HLO: the shared H200 dump, HLO that JAX compiles here for
an 8-GPU H200 topology (plus every pass dump), and tests/fixtures/*.hlo. jaxlib's own
parser is the reference; it runs in a subprocess because it aborts on some inputs."""

import dataclasses
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hlo_tools import hlo_parse_cli, hlo_text
from hlo_tools.model.collectives import collective_permutes
from hlo_tools.hlo_text import (OPCODES, HloParseError, parse_hlo_file, parse_hlo_text,
                                parse_shape)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "jax0112"
H200_HLO = SHARED_DATA / "h200_jax0112_ppermute_loop.after_optimizations.hlo"
FIXTURES_DIR = REPO / "tests" / "fixtures"
# jax 0.10.2 fixtures, plus the same ring compiled by jax 0.9.1 (tests/fixtures/jax091/).
FIXTURES = (sorted(FIXTURES_DIR.glob("*.hlo"))
            + sorted((FIXTURES_DIR / "jax091").glob("*.hlo")))
FIXTURE_IDS = [str(p.relative_to(FIXTURES_DIR)) for p in FIXTURES]

# Compiles a ppermute ring in a fori_loop for 8 H200s on the CPU, dumping every pass.
_GEN_SCRIPT = r"""
import os, sys
out = sys.argv[1]
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = "1"
os.environ["XLA_FLAGS"] = (f"--xla_dump_to={out}/dump --xla_dump_hlo_as_text "
                           "--xla_dump_hlo_pass_re=.*")
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import topologies
from jax.sharding import NamedSharding, PartitionSpec as P
topo = topologies.get_topology_desc(
    platform="cuda", topology="1x2x4",
    target_config=open("hlo_tools/data/h200_gpu_target_config.pbtxt").read())
mesh = jax.sharding.Mesh(topo.devices, ("cp",))
n = len(topo.devices)
perm = [(j, (j + 1) % n) for j in range(n)]
def ring(x):
  def body(i, x):
    return lax.ppermute(x, "cp", perm) * 2
  return lax.fori_loop(0, 6, body, x)
f = jax.jit(jax.shard_map(ring, mesh=mesh, in_specs=P("cp"), out_specs=P("cp")))
x = jax.ShapeDtypeStruct((n * 128, 256), jnp.bfloat16, sharding=NamedSharding(mesh, P("cp")))
open(f"{out}/ring_compiled.hlo", "w").write(f.lower(x).compile().as_text())
"""

# Prints one JSON line per file: jaxlib's view of every instruction.
_JAXLIB_VIEW_SCRIPT = r"""
import json, re, sys
from jaxlib import _hlo
SPECIAL = {"kClz": "count-leading-zeros", "kCos": "cosine", "kSin": "sine",
           "kExp": "exponential", "kExpm1": "exponential-minus-one",
           "kLog1p": "log-plus-one", "kOptimizationBarrier": "opt-barrier",
           "kPopulationCount": "popcnt", "kTopK": "topk", "kAtan2": "atan2"}
def opstr(op):
  name = op.name
  return SPECIAL.get(name) or re.sub(r"(?<!^)([A-Z])", r"-\1", name[1:]).lower()
for path in sys.argv[1:]:
  print(json.dumps({"start": path}), flush=True)
  try:
    mod = _hlo.hlo_module_from_text(open(path).read())
  except Exception as e:
    print(json.dumps({"path": path, "error": str(e)}), flush=True)
    continue
  comps = {}
  for comp in mod.computations():
    rows = []
    for instr in comp.instructions():
      op = opstr(instr.opcode)
      text = instr.to_string()
      rhs = text.split(" = ", 1)[1]
      k = rhs.find(" " + op + "(")
      rows.append([instr.name, op, [o.name for o in instr.operands()],
                   rhs[:k] if k >= 0 else None])
    comps[comp.name] = rows
  print(json.dumps({"path": path, "computations": comps}), flush=True)
"""


def _env():
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1")
  env.pop("XLA_FLAGS", None)
  return env


@pytest.fixture(scope="session")
def generated_dir(tmp_path_factory):
  """HLO compiled by real JAX here; made once per session (shared with other test files)."""
  out = tmp_path_factory.getbasetemp() / "jax_generated_hlo"
  if not (out / "ring_compiled.hlo").exists():
    out.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", _GEN_SCRIPT, str(out)], cwd=REPO,
                          env=_env(), capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
      pytest.fail("generating HLO with JAX failed:\n" + proc.stderr[-3000:])
  return out


def hlo_dump_files(generated_dir):
  """The pass dumps that are HLO modules (the dump dir also holds buffer assignments etc.)."""
  out = []
  for path in sorted((generated_dir / "dump").glob("*.txt")):
    with open(path, "rb") as f:
      if f.read(10) == b"HloModule ":
        out.append(path)
  return out


@pytest.fixture(scope="session")
def all_hlo_files(generated_dir):
  files = [generated_dir / "ring_compiled.hlo"] + hlo_dump_files(generated_dir)
  files += FIXTURES
  if H200_HLO.exists():
    files.append(H200_HLO)
  return files


@pytest.fixture(scope="session")
def jaxlib_views(all_hlo_files):
  """path -> jaxlib's view, or None where jaxlib failed or crashed on the file."""
  views = {}
  todo = [str(p) for p in all_hlo_files]
  while todo:
    proc = subprocess.run([sys.executable, "-c", _JAXLIB_VIEW_SCRIPT] + todo,
                          env=_env(), capture_output=True, text=True, timeout=600)
    started = None
    for line in proc.stdout.splitlines():
      rec = json.loads(line)
      if "start" in rec:
        started = rec["start"]
      else:
        views[rec["path"]] = rec.get("computations")
        started = None
    done_upto = todo.index(started) + 1 if started else len(todo)
    if started:  # jaxlib died on this file
      views[started] = None
    todo = todo[done_upto:]
  return views


# ---------------------------------------------------------------------------------------
# The shared H200 module (jax 0.11.2 text format)

@pytest.fixture(scope="module")
def h200():
  if not H200_HLO.exists():
    pytest.skip(f"{H200_HLO} not present")
  return parse_hlo_file(H200_HLO)


def test_h200_header_and_tables(h200):
  assert h200.name == "jit_ring"
  assert h200.is_scheduled
  assert h200.num_partitions == 1 and h200.num_replicas == 1
  assert h200.entry_computation_layout == "(bf16[1024,1024]{1,0})->bf16[1024,1024]{1,0}"
  assert h200.frontend_attributes == {"fingerprint_before_lhs": "cf03cc5da5056ec7691524bab0bc0297"}
  assert h200.attributes["allow_spmd_sharding_propagation_to_output"] == "{true}"
  assert h200.file_names == {1: "ring_probe.py"}
  assert h200.function_names[3] == "ring.<locals>.body"
  assert h200.file_locations[2]["line"] == 22
  assert h200.stack_frames[5] == {"file_location_id": 3, "parent_frame_id": 5}
  assert len(h200.tables["StackFrames"]) == 5


def test_h200_computations(h200):
  assert [c.name for c in h200.computations] == [
      "fused_add", "region_0.1", "fused_compare", "region_1.2", "main.3"]
  assert h200.entry is h200.computation("main.3") and h200.entry.is_entry
  body = h200.computation("%region_0.1")
  assert body.root.name == "tuple.3" and body.root.is_root
  assert [p.name for p in body.parameters] == ["arg_tuple.1"]
  assert body.line == 30
  assert h200.instruction_count == 24


def test_h200_instruction_details(h200):
  start = h200.computation("region_0.1").instruction("collective-permute-start")
  assert start.opcode == "collective-permute-start"
  assert str(start.shape) == "((bf16[1024,1024]{1,0}), bf16[1024,1024]{1,0})"
  assert start.shape.tuple_shapes[0].is_tuple
  assert start.shape.byte_size() == 2 * 2 * 1024 * 1024
  assert start.operands == ["get-tuple-element.5"]
  assert start.source_target_pairs == [(0, 0)]
  assert start.channel_id == 1
  assert start.metadata["op_name"] == "jit(ring)/while/body/eval_jaxpr/ppermute"
  assert start.metadata["stack_frame_id"] == "5"
  assert start.backend_config_json()["collective_backend_config"]["backend"] == "DEFAULT"
  assert start.line == 33 and start.col == 4
  assert list(start.attributes) == ["channel_id", "source_target_pairs", "metadata",
                                    "backend_config"]
  loop = h200.entry.instruction("while.5")
  assert loop.called_computations == ["region_1.2", "region_0.1"]
  assert loop.backend_config_json()["known_trip_count"] == {"n": "4"}
  fusion = h200.computation("region_0.1").instruction("loop_add_fusion")
  assert fusion.called_computations == ["fused_add"] and fusion.attributes["kind"] == "kLoop"
  assert h200.entry.instruction("constant_5_0").literal == "0"


# ---------------------------------------------------------------------------------------
# Fidelity against jaxlib on every real HLO file

def test_fidelity_against_jaxlib(all_hlo_files, jaxlib_views):
  compared = 0
  for path in all_hlo_files:
    view = jaxlib_views.get(str(path))
    ours = parse_hlo_file(path)  # must parse every real file, whatever jaxlib thinks
    if view is None:
      continue
    assert sorted(view) == sorted(c.name for c in ours.computations), path
    for comp in ours.computations:
      theirs = {row[0]: row for row in view[comp.name]}
      assert sorted(theirs) == sorted(i.name for i in comp.instructions), (path, comp.name)
      for instr in comp.instructions:
        name, opcode, operands, shape = theirs[instr.name]
        where = f"{path}:{instr.line}"
        if opcode.startswith("async-") and instr.opcode != opcode:
          # jaxlib's printer spells a single-op async as `{op}-start/-update/-done`
          assert instr.opcode.endswith(opcode[5:]), where
          shape = None
        else:
          assert instr.opcode == opcode, where
        assert instr.operands == operands, where
        if shape is not None:
          shape = re.sub(r"/\*index=\d+\*/", "", shape)  # XLA's tuple index comments
          assert str(instr.shape) == shape, where
          assert parse_shape(shape) == instr.shape, where
    compared += 1
  assert compared >= 10  # the compiled module, its pass dumps and the H200 file


def test_generated_files_cover_both_collective_spellings(generated_dir):
  dumps = hlo_dump_files(generated_dir)
  assert len(dumps) > 20
  opcodes = {i.opcode for p in dumps for i in parse_hlo_file(p).instructions()}
  assert {"collective-permute", "collective-permute-start", "collective-permute-done",
          "while", "fusion"} <= opcodes


@pytest.mark.skipif(not FIXTURES, reason="no tests/fixtures/*.hlo yet")
@pytest.mark.parametrize("path", FIXTURES, ids=FIXTURE_IDS)
def test_fixture_parses(path):
  module = parse_hlo_file(path)
  assert module.entry is not None and module.instruction_count > 0


def test_opcode_set_matches_jaxlib_enum():
  view = subprocess.run(
      [sys.executable, "-c", "from jaxlib import _hlo; print(len(_hlo.HloOpcode.__members__))"],
      env=_env(), capture_output=True, text=True, timeout=120)
  assert view.returncode == 0
  assert len(OPCODES) == int(view.stdout)


# ---------------------------------------------------------------------------------------
# Shapes and attributes

def test_shapes():
  s = parse_shape("f32[8,128]{1,0:T(8,128)S(1)}")
  assert s.dims == (8, 128) and s.memory_space == 1 and s.minor_to_major == (1, 0)
  assert s.byte_size() == 4096
  t = parse_shape("((bf16[2]{0}, (s32[], token[])), /*index=1*/c128[3], pred[<=4])")
  assert [str(x) for x in t.leaves()] == ["bf16[2]{0}", "s32[]", "token[]", "c128[3]",
                                         "pred[<=4]"]
  assert t.byte_size() == 4 + 4 + 0 + 48 + 4
  for bad in ("f33[2]", "f32[2", "(f32[], f32[]", "f32[a]"):
    with pytest.raises(ValueError):
      parse_shape(bad)


def _module(body, extra=""):
  return f"HloModule m\n\n{extra}ENTRY %e (p: f32[8]) -> f32[8] {{\n{body}\n}}\n"


def test_attribute_values():
  text = _module(
      '  %p = f32[8]{0} parameter(0), sharding={devices=[8]<=[8]}\n'
      '  %cp = f32[8]{0} collective-permute(%p), channel_id=7, '
      'source_target_pairs={{0,1},{1,0}}, frontend_attributes={_xla_send="a,b}\\"c"}, '
      'metadata={op_name="x \\"q\\" {y}" source_line=3}, backend_config="{\\"a\\":1}"\n'
      '  %ag = f32[64]{0} all-gather(%cp), replica_groups=[2,4]<=[4,2]T(1,0), dimensions={0}\n'
      '  ROOT %r = f32[8]{0} copy(%p), control-predecessors={%cp, %ag}')
  m = parse_hlo_text(text)
  cp = m.entry.instruction("cp")
  assert cp.channel_id == 7 and cp.source_target_pairs == [(0, 1), (1, 0)]
  assert cp.frontend_attributes == {"_xla_send": 'a,b}"c'}
  assert cp.metadata == {"op_name": 'x "q" {y}', "source_line": "3"}
  assert cp.backend_config_json() == {"a": 1}
  ag = m.entry.instruction("ag")
  assert ag.replica_groups_text == "[2,4]<=[4,2]T(1,0)"
  assert ag.replica_groups == [[0, 2, 4, 6], [1, 3, 5, 7]]
  assert m.entry.root.control_predecessors == ["cp", "ag"]
  assert m.entry.instruction("p").sharding == "{devices=[8]<=[8]}"


# ---------------------------------------------------------------------------------------
# Malformed input: always HloParseError, at the right line

def _h200_lines():
  if not H200_HLO.exists():
    pytest.skip(f"{H200_HLO} not present")
  return H200_HLO.read_text().split("\n")


def _error(text):
  with pytest.raises(HloParseError) as info:
    parse_hlo_text(text, path="bad.hlo")
  err = info.value
  assert str(err) == f"bad.hlo:{err.line}:{err.col}: {err.message}"
  return err


def test_unknown_opcode():
  lines = _h200_lines()
  n = next(k for k, l in enumerate(lines) if " copy(%collective-permute-done)" in l)
  lines[n] = lines[n].replace(" copy(", " kopy(")
  err = _error("\n".join(lines))
  assert (err.line, err.col) == (n + 1, lines[n].index("kopy") + 1)
  assert "unknown opcode 'kopy'" in err.message


def test_unbalanced_brace():
  lines = _h200_lines()
  n = next(k for k, l in enumerate(lines) if "%loop_add_fusion =" in l)
  lines[n] = lines[n].replace('stack_frame_id=4}', 'stack_frame_id=4', 1)
  err = _error("\n".join(lines))
  assert err.line == n + 1 and "unbalanced '{'" in err.message


def test_missing_equals_and_bad_shape():
  lines = _h200_lines()
  n = next(k for k, l in enumerate(lines) if "%copy.5 =" in l)
  broken = lines[:n] + [lines[n].replace("%copy.5 =", "%copy.5")] + lines[n + 1:]
  err = _error("\n".join(broken))
  assert err.line == n + 1 and "'='" in err.message
  broken = lines[:n] + [lines[n].replace("= bf16[", "= bf17[")] + lines[n + 1:]
  err = _error("\n".join(broken))
  assert err.line == n + 1 and "element type" in err.message


def test_truncated():
  lines = _h200_lines()
  n = next(k for k, l in enumerate(lines) if "%collective-permute-start =" in l)
  cut = "\n".join(lines[:n] + [lines[n][:len(lines[n]) // 2]])
  assert _error(cut).line == n + 1
  err = _error("\n".join(lines[:n]))  # cut between lines: computation never closed
  assert err.line == n and "not closed" in err.message


def test_undefined_references():
  err = _error(_module("  %p = f32[8] parameter(0)\n  ROOT %r = f32[8] add(%p, %q)"))
  assert err.line == 5 and "%q" in err.message
  err = _error(_module("  %p = f32[8] parameter(0)\n  ROOT %r = f32[8] call(%p), to_apply=%nope"))
  assert err.line == 5 and "%nope" in err.message


def test_not_hlo(tmp_path):
  assert "empty" in _error("").message
  assert _error("\n\n  \n").line == 3
  assert "HloModule" in _error("def f():\n  return 1\n").message
  garbage = tmp_path / "garbage.hlo"
  garbage.write_bytes(b"HloModule m\n\xff\xfe\x00junk")
  with pytest.raises(HloParseError) as info:
    parse_hlo_file(garbage)
  assert info.value.line == 1
  garbage.write_bytes(b"HloModule m\nENTRY %e {\n  \xc3\x28 = f32[] parameter(0)\n}\n")
  with pytest.raises(HloParseError) as info:
    parse_hlo_file(garbage)
  assert (info.value.line, info.value.col) == (3, 3)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutations_raise_only_hlo_parse_error(data):
  text = _h200_lines()
  text = "\n".join(text)
  pos = data.draw(st.integers(0, len(text) - 1))
  kind = data.draw(st.sampled_from(["truncate", "delete", "insert"]))
  if kind == "truncate":
    mutated = text[:pos]
  elif kind == "delete":
    mutated = text[:pos] + text[pos + data.draw(st.integers(1, 5)):]
  else:
    mutated = text[:pos] + data.draw(st.sampled_from(list('{}()[]",=% \n/*x\\'))) + text[pos:]
  try:
    parse_hlo_text(mutated)
  except HloParseError as e:
    assert 1 <= e.line <= mutated.count("\n") + 1


# ---------------------------------------------------------------------------------------
# CLI

def test_cli(capsys, tmp_path):
  if not H200_HLO.exists():
    pytest.skip(f"{H200_HLO} not present")
  assert hlo_parse_cli.main(["hlo-tools parse", str(H200_HLO)]) == 0
  out = capsys.readouterr().out
  assert "5 computations, 24 instructions" in out
  assert re.search(r"start-done %collective-permute-start .*trip count 4", out)
  assert hlo_parse_cli.main(["hlo-tools parse", str(H200_HLO), "--json"]) == 0
  summary = json.loads(capsys.readouterr().out)
  assert summary["collective_permutes"][0]["pairs"] == [[0, 0]]
  bad = tmp_path / "bad.hlo"
  bad.write_text("HloModule m\nENTRY %e {\n  ROOT %r = f32[] bogus()\n}\n")
  assert hlo_parse_cli.main(["hlo-tools parse", str(bad)]) == 2
  err = capsys.readouterr().err
  assert err == f"{bad}:3:19: unknown opcode 'bogus'\n"
  assert hlo_parse_cli.main(["hlo-tools parse", str(tmp_path / "missing.hlo")]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "missing.hlo" in err


def test_cli_dispatch_subprocess():
  if not H200_HLO.exists():
    pytest.skip(f"{H200_HLO} not present")
  proc = subprocess.run([sys.executable, "-m", "hlo_tools.cli", "parse", str(H200_HLO)],
                        cwd=REPO, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0 and "collective-permutes: 1" in proc.stdout
  assert "jax" not in proc.stderr  # reading HLO must not need jax


def test_bench_parse_reports_both_parsers():
  if not H200_HLO.exists():
    pytest.skip(f"{H200_HLO} not present")
  from hlo_tools.commands.bench.reader import bench_parse  # pylint: disable=import-outside-toplevel
  r = bench_parse(H200_HLO.read_text(), runs=3)
  assert r["ours_s"] > 0 and r["jaxlib_s"] > 0 and r["ratio"] > 0


def test_load_hlo_proto(tmp_path, all_hlo_files):
  from hlo_tools.hlo_text import load_hlo_proto  # pylint: disable=import-outside-toplevel
  src = all_hlo_files[0]
  proto = tmp_path / "module.pb"
  code = ("import sys; from jaxlib import _hlo; open(sys.argv[2], 'wb').write("
          "_hlo.hlo_module_from_text(open(sys.argv[1]).read()).as_serialized_hlo_module_proto())")
  subprocess.run([sys.executable, "-c", code, str(src), str(proto)], env=_env(), check=True,
                 timeout=120)
  module = load_hlo_proto(proto)
  assert module.instruction_count == parse_hlo_file(src).instruction_count
  proto.write_bytes(b"\x01\x02 not a proto")
  with pytest.raises(HloParseError):
    load_hlo_proto(proto)


_MESH_ALL_REDUCE = r'''
import sys, jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh
topo = topologies.get_topology_desc(platform="cuda", topology="1x2x4",
                                    target_config=open(sys.argv[1]).read())
mesh = Mesh(topo.devices, ("cp",))
c = jax.jit(lambda x, w: x @ w, out_shardings=NamedSharding(mesh, P())).lower(
    jax.ShapeDtypeStruct((64, 1024), jnp.float32, sharding=NamedSharding(mesh, P(None, "cp"))),
    jax.ShapeDtypeStruct((1024, 64), jnp.float32, sharding=NamedSharding(mesh, P("cp", None)))
).compile()
sys.stdout.write(c.as_text())
'''


def test_reads_jax_010_mesh_replica_groups():
  """jaxlib 0.10 prints GSPMD all-reduce groups as `mesh['axis_0'=1,'axis_1'=8] {'axis_1'}`."""
  from hlo_tools import hlo_text  # pylint: disable=import-outside-toplevel
  root = Path(__file__).resolve().parents[1]
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1")
  text = subprocess.run(
      [sys.executable, "-c", _MESH_ALL_REDUCE,
       str(root / "hlo_tools" / "data" / "h200_gpu_target_config.pbtxt")],
      capture_output=True, text=True, env=env, check=True, timeout=300).stdout
  assert "replica_groups=mesh[" in text
  module = hlo_text.parse_hlo_text(text, "mesh.hlo")
  reducers = [i for i in module.instructions() if i.opcode in ("all-reduce", "all-reduce-start")]
  assert reducers
  for instr in reducers:
    assert instr.replica_groups == [list(range(8))]
  assert hlo_text.expand_mesh_groups("mesh['a'=2,'b'=4] {'a'}") == [
      [0, 4], [1, 5], [2, 6], [3, 7]]
  assert hlo_text.expand_mesh_groups("mesh['a'=2,'b'=4] {'b','a'}") == [
      [0, 4, 1, 5, 2, 6, 3, 7]]


# ---------------------------------------------------------------------------------------
# Fidelity under mutation: small edits of the real fixtures, our verdict against XLA's
# parser (jaxlib's hlo_module_from_text). Seeded, a few seconds.

_ATTR_KEY_RE = re.compile(r", ([a-z_\-]+)=")
_LAYOUT_IN_SHAPE_RE = re.compile(r"\]\{(-?[0-9,\-]*)((?::[^}]*)?)\}")
_DIMS_RE = re.compile(r"\[([0-9,]+)\]")
_ENUM_RE = re.compile(r"\b(kind|direction|type)=(\w+)")
_NUMBER_RE = re.compile(r"(?<=[=,{(\[])\d+")
_CHARS = ["{", "}", "(", ")", "[", "]", '"', ",", "=", "%", ":", "/*", "*/", "x", " ", "-", "0"]


def _mutate_layout(rng, m):
  order = m.group(1).split(",") if m.group(1) else []
  how = rng.choice(["drop", "dup", "add", "swap", "attr", "junk"])
  if how == "drop" and order:
    order.pop(rng.randrange(len(order)))
  elif how == "dup" and order:
    order.append(rng.choice(order))
  elif how == "add":
    order.append(str(len(order)))
  elif how == "swap" and len(order) > 1:
    order[0], order[-1] = order[-1], order[0]
  tail = m.group(2)
  if how == "attr":
    tail = rng.choice([":T(8,128)", ":S(1)", ":T(2)S(1)", ":X(1)", ":E(4)", ":S(x)", ":"])
  text = ",".join(order) + (rng.choice(["a", ",", " ", ",,"]) if how == "junk" else "")
  return text + tail


def _mutate_line(rng, line):
  """One edit of one instruction line, of the kinds that found reader bugs."""
  kind = rng.choice(["attr_name", "enum", "layout", "dims", "insert", "delete", "attr_drop",
                     "attr_dup", "number", "opcode", "comment"])
  pick = lambda rx: (lambda ms: rng.choice(ms) if ms else None)(list(rx.finditer(line)))
  if kind == "attr_name" and (m := pick(_ATTR_KEY_RE)):
    k = m.start(1) + rng.randrange(len(m.group(1)))
    return line[:k] + rng.choice("abxz_") + line[k + rng.choice([0, 1]):]
  if kind == "enum" and (m := pick(_ENUM_RE)):
    new = rng.choice([m.group(2) + "x", m.group(2).lower(), "kLoop", "LT", "FLOAT", "kFoo"])
    return line[:m.start(2)] + new + line[m.end(2):]
  if kind == "layout" and (m := pick(_LAYOUT_IN_SHAPE_RE)):
    return line[:m.start(1)] + _mutate_layout(rng, m) + line[m.end(2):]
  if kind == "dims" and (m := pick(_DIMS_RE)):
    new = rng.choice(["x", "-1", "+3", "1_0", "?", "<=4", " ", "1,,2", "0x10"])
    return line[:m.start(1)] + new + line[m.start(1):]
  if kind == "insert":
    k = rng.randrange(len(line) + 1)
    return line[:k] + rng.choice(_CHARS) + line[k:]
  if kind == "delete":
    k = rng.randrange(len(line))
    return line[:k] + line[k + rng.randint(1, 6):]
  if kind in ("attr_drop", "attr_dup") and (m := pick(_ATTR_KEY_RE)):
    after = _ATTR_KEY_RE.search(line, m.end())
    end = after.start() if after else len(line)
    return (line[:m.start()] + line[end:] if kind == "attr_drop"
            else line + line[m.start():end])
  if kind == "number" and (m := pick(_NUMBER_RE)):
    new = rng.choice(["-1", "x", "99999999999999999999", "1.5", "", "0"])
    return line[:m.start()] + new + line[m.end():]
  if kind == "comment":  # XLA's lexer skips a comment between any two tokens
    k = rng.choice([k for k, ch in enumerate(line) if ch in ",={}()[] "] or [0])
    k += rng.choice([0, 1])
    return line[:k] + "/*c*/" + line[k:]
  if kind == "opcode" and (m := re.search(r"[\]}] ([a-z\-]+)\(", line)):
    new = rng.choice(["add", "negate", "copy", "tuple", "multiply", "fusion", "bitcast"])
    return line[:m.start(1)] + new + line[m.end(1):]
  return line


def _random_fixture(rng):
  """A fixture picked by rng: (its name, its text)."""
  path = rng.choice(sorted(FIXTURES_DIR.glob("*.hlo")))
  return path.name, path.read_text()


def fixture_mutants(seed, count):
  """`count` one-edit mutants of tests/fixtures/*.hlo: [(fixture name, text)]."""
  rng = random.Random(seed)
  out = []
  while len(out) < count:
    name, original = _random_fixture(rng)
    lines = original.split("\n")
    i = rng.choice([k for k, l in enumerate(lines) if " = " in l])
    lines[i] = _mutate_line(rng, lines[i])
    text = "\n".join(lines)
    if text != original:
      out.append((name, text))
  return out


# Line splits: XLA's lexer takes a newline as white space, so a newline may stand at any
# token boundary: next to punctuation or a space, outside strings. A few of these
# boundaries sit inside XLA's own tokens (`key=`, `<=`), which XLA then refuses.
_BOUNDARY_CHARS = set(",(){}[]= ")
_QUOTED_RE = re.compile(r'"(?:[^"\\]|\\.)*"')


def token_boundaries(line, safe=False):
  """Offsets in line where a newline may go without splitting a string; safe: nor one
  of XLA's tokens that end in punctuation (`key=`, `name:`, `<=`)."""
  quoted = set()
  for m in _QUOTED_RE.finditer(line):
    quoted.update(range(m.start() + 1, m.end()))
  return [k for k in range(1, len(line)) if k not in quoted
          and (line[k - 1] in _BOUNDARY_CHARS or line[k] in _BOUNDARY_CHARS)
          and not (safe and line[k] in "=:" and (line[k - 1].isalnum() or line[k - 1] in "_.-<"))]


def split_line(rng, line, count):
  """line with newlines (and some indentation) at `count` random token boundaries."""
  spots = token_boundaries(line)
  for k in sorted(rng.sample(spots, min(count, len(spots))), reverse=True):
    line = line[:k] + "\n" + rng.choice(["", "  ", "\t", "    ", " \n  "]) + line[k:]
  return line


def split_mutants(seed, count, edit=False):
  """`count` mutants of tests/fixtures/*.hlo with 1-3 lines (header, computation headers,
  instructions, closing braces) split at token boundaries; with edit, one of them also
  gets one edit of _mutate_line first. [(fixture name, text, the text before splitting)]"""
  rng = random.Random(seed)
  out = []
  while len(out) < count:
    name, original = _random_fixture(rng)
    lines = original.split("\n")
    picks = rng.sample([k for k, l in enumerate(lines) if l.strip()], rng.randint(1, 3))
    if edit and " = " in lines[picks[0]]:
      lines[picks[0]] = _mutate_line(rng, lines[picks[0]])
    unsplit = "\n".join(lines)
    for i in picks:
      lines[i] = split_line(rng, lines[i], rng.randint(1, 4))
    text = "\n".join(lines)
    if text != unsplit:
      out.append((name, text, unsplit))
  return out


# Reads JSON-quoted module texts, one a line; prints XLA's verdict for each. XLA aborts
# on a few inputs (a CHECK in its literal parser): the caller restarts after the last.
_XLA_VERDICT_SCRIPT = r"""
import json, sys
from jaxlib import _hlo
for raw in sys.stdin:
  try:
    _hlo.hlo_module_from_text(json.loads(raw))
    print(json.dumps([True, ""]), flush=True)
  except Exception as e:
    print(json.dumps([False, str(e)[:300]]), flush=True)
"""


def xla_parser_verdicts(texts):
  """[(accepted: bool | None for an abort, message)] from XLA's parser."""
  out = []
  while len(out) < len(texts):
    rest = texts[len(out):]
    proc = subprocess.run([sys.executable, "-c", _XLA_VERDICT_SCRIPT], env=_env(),
                          input="".join(json.dumps(t) + "\n" for t in rest),
                          capture_output=True, text=True, timeout=600)
    out += [tuple(json.loads(l)) for l in proc.stdout.splitlines()]
    if len(out) < len(texts):
      assert proc.returncode != 0, proc.stderr[-2000:]
      out.append((None, f"XLA died with status {proc.returncode}"))
  return out


def _our_verdict(text):
  try:
    parse_hlo_text(text, "m.hlo")
    return True, ""
  except HloParseError as e:
    return False, str(e)


def test_mutants_of_real_modules_agree_with_xla_parser():
  mutants = fixture_mutants(seed=14, count=400)
  verdicts = xla_parser_verdicts([t for _, t in mutants])
  disagreements = []
  for (name, text), (xla_ok, xla_msg) in zip(mutants, verdicts):
    ours_ok, ours_msg = _our_verdict(text)
    if xla_ok is None:  # XLA aborts: an input no tool may accept
      xla_ok = False
    if not ours_ok and xla_ok and "XLA's verifier rejects" in ours_msg:
      continue  # e.g. a repeated source: the parser takes it, XLA's verifier does not
    if ours_ok != xla_ok:
      disagreements.append((name, ours_msg or "accepted", xla_msg or "accepted"))
  assert not disagreements, disagreements[:5]
  rejected = sum(1 for ok, _ in verdicts if not ok)
  assert 100 < rejected < 350  # the edits are neither all harmless nor all fatal


def test_accepts_what_xla_accepts(tmp_path):
  base = (FIXTURES_DIR / "shift_1x2x4.before_async.hlo").read_text()
  quote_in_comment = base.replace("collective-permute(%param.1)",
                                  'collective-permute(/* a"b */%param.1)')
  variants = {"quote_in_comment": quote_in_comment, "cr_only": base.replace("\n", "\r"),
              "crlf": base.replace("\n", "\r\n"), "name_colon": base.replace(
                  "%param.1 = ", "param.1: = ", 1)}
  assert all(v != base for v in variants.values())
  assert all(ok for ok, _ in xla_parser_verdicts(list(variants.values())))
  for name, text in variants.items():
    module = parse_hlo_text(text, name)
    assert module.entry.instruction("ppermute.3.0").operands == ["param.1"], name
  # Bytes that are not UTF-8: XLA (the wheel's, through nvshmem-opt) takes them in a
  # comment and refuses them in a string.
  from conftest import run_nvshmem_opt
  for where, old, new, xla_ok in (
      ("comment", b"collective-permute(%param.1)", b"collective-permute(/*\xff\xc3*/%param.1)",
       True),
      ("string", b'op_name="x"', b'op_name="x\xff"', False)):
    data = base.encode().replace(old, new)
    path = tmp_path / f"{where}.hlo"
    path.write_bytes(data)
    result = run_nvshmem_opt(path, "--topology=1x2x4", "--mode=explain")
    assert (result.returncode == 0) == xla_ok, (where, result.stderr)
    if xla_ok:
      assert parse_hlo_file(path).entry.instruction("ppermute.3.0").operands == ["param.1"]
    else:
      with pytest.raises(HloParseError, match=r":13:\d+: byte 0xff is not UTF-8"):
        parse_hlo_file(path)


@pytest.mark.parametrize("old,new,message", [
    ("channel_id=1,", "channel_id=1, foo=3,", "collective-permute takes no attribute 'foo'"),
    ("kind=kLoop", "kind=kLoopy", "bad value for 'kind' of fusion"),
    ("%param_0 = bf16[1,128,2,64]{3,2,1,0}", "%param_0 = bf16[1,128,2,64]{3,2,1}",
     "orders 3 dimensions, the shape has 4"),
    ("metadata={op_name=\"x\"}", "metadata={op_nam=\"x\"}", "metadata has no field 'op_nam'"),
    ("multiply(%param_0, %mul.6.1)", "multiply(%param_0)", "multiply takes 2 operands, got 1"),
])
def test_rejects_what_xla_rejects(old, new, message):
  base = (FIXTURES_DIR / "shift_1x2x4.before_async.hlo").read_text()
  text = base.replace(old, new, 1)
  assert text != base
  [(xla_ok, xla_msg)] = xla_parser_verdicts([text])
  assert xla_ok is False, xla_msg
  with pytest.raises(HloParseError, match=re.escape(message)):
    parse_hlo_text(text, "m.hlo")


def test_repeated_source_or_target_is_rejected(tmp_path):
  base = (FIXTURES_DIR / "shift_1x2x4.before_async.hlo").read_text()
  for pairs, what in (("{{0,1},{0,2}", "source 0"), ("{{0,1},{2,1}", "target 1")):
    text = base.replace("{{0,1},{1,2}", pairs, 1)
    assert text != base
    path = tmp_path / "dup.hlo"
    path.write_text(text)
    line = next(n for n, l in enumerate(text.split("\n"), 1) if "source_target_pairs" in l)
    col = text.split("\n")[line - 1].index("source_target_pairs=") + 21
    expected = (f"{path}:{line}:{col}: %ppermute.3.0: {what} appears more than once in "
                "source_target_pairs (XLA's verifier rejects this permute)\n")
    for command in (["parse"], ["explain", "--topology=1x2x4"], ["verify", "--topology=1x2x4"]):
      result = subprocess.run([sys.executable, "-m", "hlo_tools.cli", command[0], str(path),
                               *command[1:]], capture_output=True, text=True, cwd=REPO,
                              timeout=120)
      assert (result.returncode, result.stderr) == (2, expected), command


# ---------------------------------------------------------------------------------------
# Statements over several lines. XLA's parser reads tokens: a newline may stand wherever
# white space may. The reader takes the same text, reports an error at the line of the
# offending token (an unclosed bracket: the bracket's own line), and stays linear.

ALL_FIXTURES = FIXTURES + ([H200_HLO] if H200_HLO.exists() else [])


def _split_everywhere(text, seed):
  """text with most lines split at 1-4 token boundaries (an instruction's only after its
  '=', so that its name stays on its first line); also old line -> new line."""
  import random
  rng = random.Random(seed)
  out, new_line = [], {}
  for n, line in enumerate(text.split("\n"), 1):
    new_line[n] = sum(part.count("\n") for part in out) + len(out) + 1
    after = line.find(" = ") + 3 if " = " in line else 0
    spots = [k for k in token_boundaries(line, safe=True) if k > after]
    for k in sorted(rng.sample(spots, min(rng.randint(1, 4), len(spots))), reverse=True):
      line = line[:k] + "\n" + rng.choice(["", "  ", "\t", "      "]) + line[k:]
    out.append(line)
  return "\n".join(out), new_line


def _records(module):
  return [dataclasses.asdict(r) for r in collective_permutes(module)]


@pytest.mark.parametrize("path", ALL_FIXTURES, ids=lambda p: str(p.relative_to(FIXTURES_DIR)))
def test_split_fixture_gives_identical_records(path):
  text = path.read_text()
  split, new_line = _split_everywhere(text, seed=len(text))
  assert split.count("\n") > text.count("\n") * 1.5
  whole, parts = parse_hlo_text(text, "a.hlo"), parse_hlo_text(split, "b.hlo")
  records = _records(whole)
  assert records, "every fixture has a collective-permute"
  for rec in records:  # lines move: each instruction's first line, in the split text
    rec["start_line"] = new_line[rec["start_line"]]
    if rec["done_line"] is not None:
      rec["done_line"] = new_line[rec["done_line"]]
  assert _records(parts) == records
  assert whole.attributes.keys() == parts.attributes.keys()
  assert [c.name for c in whole.computations] == [c.name for c in parts.computations]
  for a, b in zip(whole.instructions(), parts.instructions()):
    assert (a.name, a.opcode, a.operands, a.shape, b.line) == (
        b.name, b.opcode, b.operands, b.shape, new_line[a.line])
    assert a.attributes.keys() == b.attributes.keys()
    assert a.frontend_attributes == b.frontend_attributes and a.metadata == b.metadata


def test_split_mutants_agree_with_xla_parser():
  mutants = split_mutants(seed=7, count=250) + split_mutants(seed=8, count=250, edit=True)
  verdicts = xla_parser_verdicts([t for _, t, _ in mutants])
  disagreements, aborts = [], []
  for (name, text, unsplit), (xla_ok, xla_msg) in zip(mutants, verdicts):
    ours_ok, ours_msg = _our_verdict(text)
    if not ours_ok:  # one line, a line of the text
      assert "\n" not in ours_msg
      assert 1 <= int(ours_msg.split(":")[1]) <= text.count("\n") + 1
    if xla_ok is None:  # XLA aborts: no tool may accept it, unless the edit alone
      xla_ok = False    # (not the split) is one of the few the reader does not know
      if ours_ok and _our_verdict(unsplit)[0]:
        aborts.append(name)
        continue
    if not ours_ok and xla_ok and "XLA's verifier rejects" in ours_msg:
      continue
    if ours_ok != xla_ok:
      disagreements.append((name, ours_msg or "accepted", xla_msg or "accepted"))
  assert not disagreements, disagreements[:5]
  assert len(aborts) <= 2, aborts
  accepted = sum(1 for ok, _ in verdicts if ok)
  assert 200 < accepted < 450  # both verdicts are well represented


def _split_base():
  return (FIXTURES_DIR / "shift_1x2x4.before_async.hlo").read_text()


def test_split_forms_xla_accepts():
  base = _split_base()
  forms = {
      "pairs": ("{{0,1},{1,2}", "{{0,1},\n    {1,2}"),
      "leading_comma": (", channel_id=1,", "\n  , channel_id=1,"),
      "root": ("ROOT %loop", "ROOT\n  %loop"),
      "opcode": ("{3,2,1,0} collective-permute", "{3,2,1,0}\n  collective-permute"),
      "value": ("channel_id=1", "channel_id=\n1"),
      "header": (", allow_spmd", ",\n    allow_spmd"),
      "signature": ("(param_0: bf16[1,128,2,64]) -> bf16", "(param_0:\nbf16[1,128,2,64])\n-> bf16"),
      "body_brace": ("-> bf16[1,128,2,64] {\n  %param.1", "-> bf16[1,128,2,64]\n{\n  %param.1"),
      "comments": ("channel_id=1,", "channel_id=1, // the channel\n /* more\n */"),
      "iota_transpose": ("devices=[1,8,1,1]<=[8]}", "devices=[1,8,1,1]<=[2,4]\nT\n(1,0)}"),
      "newline_in_string": ('op_name="x"', 'op_name="x\ny"'),
      "blank_lines": (", metadata={op_name=\"x\"}", "\n\n, metadata={op_name=\"x\"}"),
  }
  texts = {k: base.replace(old, new, 1) for k, (old, new) in forms.items()}
  assert all(t != base for t in texts.values())
  verdicts = xla_parser_verdicts(list(texts.values()))
  assert [k for k, (ok, _) in zip(texts, verdicts) if not ok] == []
  for name, text in texts.items():
    module = parse_hlo_text(text, name)
    permute = module.entry.instruction("ppermute.3.0")
    assert permute.source_target_pairs == [(k, k + 1) for k in range(7)], name
    assert permute.operands == ["param.1"] and permute.channel_id == 1, name
  assert parse_hlo_text(texts["newline_in_string"]).entry.instruction(
      "param.1").metadata["op_name"] == "x\ny"


def test_split_error_lines():
  base = _split_base()
  lines = base.split("\n")
  n = next(k for k, l in enumerate(lines) if "%ppermute.3.0 =" in l) + 1
  split = base.replace(", source_target_pairs=", ",\n    source_target_pairs=", 1)
  # The offending token's line and column, also on a continuation line.
  for old, new, line, message, at in (
      ("{{0,1},{1,2}", "{{0,1},{1,x}", n + 1, "bad value for 'source_target_pairs'", "{{0,1}"),
      ("channel_id=1", "channel_id=x", n, "bad value for 'channel_id'", "x,"),
      ("metadata={op_name=\"jit(neighbour_shift)/shard_map/ppermute\"}",
       "metadata={op_nam=\"p\"}", n + 1, "metadata has no field 'op_nam'", "{op_nam"),
  ):
    text = split.replace(old, new, 1)
    assert text != split
    err = _error(text)
    assert err.line == line and message in err.message, str(err)
    assert text.split("\n")[err.line - 1][err.col - 1:].startswith(at), str(err)
    [(xla_ok, _)] = xla_parser_verdicts([text])
    assert xla_ok is False
  # An instruction XLA refuses for a missing attribute: at its first line.
  text = split.replace("source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7}}, ", "")
  assert text != split
  err = _error(text)
  assert (err.line, err.col) == (n, 1) and "needs attribute 'source_target_pairs'" in err.message
  # A bracket never closed: at the bracket, naming where the statement had to end.
  text = split.replace("{{0,1},{1,2}", "{{0,1},\n{{1,2}", 1)
  err = _error(text)
  assert (err.line, err.message) == (
      n + 1, f"unbalanced '{{': no matching '}}' before line {n + 3}, which starts a new "
      "statement")
  assert text.split("\n")[err.line - 1][err.col - 1:] == "{{0,1},"
  err = _error(base.replace("%param.1 = ", "%param.1 =\n", 1).replace(
      "%ppermute.3.0 = bf16", "%ppermute.3.0 = bf17", 1))
  assert err.line == n + 1 and "element type" in err.message


def test_split_error_through_cli(tmp_path, capsys):
  path = tmp_path / "split.hlo"
  path.write_text(_split_base().replace("{{0,1},{1,2}", "{{0,1},\n  {1,-2}", 1))
  assert hlo_parse_cli.main(["hlo-tools parse", str(path)]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith(f"{path}:"), err
  path.write_text(_split_base().replace("{{0,1},{1,2}", "{{0,1},\n  {1,2}", 1))
  assert hlo_parse_cli.main(["hlo-tools parse", str(path), "--json"]) == 0
  summary = json.loads(capsys.readouterr().out)
  assert summary["collective_permutes"][0]["pairs"][:2] == [[0, 1], [1, 2]]


def _time_parse(text):
  import time  # pylint: disable=import-outside-toplevel
  t0 = time.perf_counter()
  with pytest.raises(HloParseError) as info:
    parse_hlo_text(text, "h.hlo")
  return time.perf_counter() - t0, info.value


_HOSTILE_HEAD = ("HloModule m\nENTRY %e {\n  %p = f32[] parameter(0)\n  ROOT %c = f32[] "
                 'custom-call(%p), custom_call_target="x", backend_config=')


@pytest.mark.parametrize("kind", ["brace_lines", "brace_pairs", "brace_line", "comment", "string",
                                  "root"])
def test_hostile_split_input_fails_in_linear_time(kind):
  def text(size):
    if kind == "brace_lines":  # a '{' never closed, a million lines of pairs after it
      return _HOSTILE_HEAD + "{\n" + "{0,1},\n" * (size // 7)
    if kind == "brace_pairs":  # the same, each pair's own braces over two lines
      return _HOSTILE_HEAD + "{\n" + "{\n0,1},\n" * (size // 8)
    if kind == "brace_line":
      return _HOSTILE_HEAD + "{" * size + "\n}\n"
    if kind == "comment":
      return _HOSTILE_HEAD + "{}\n" + "/* x\n" * (size // 5)
    if kind == "string":
      return _HOSTILE_HEAD + '"' + "x\n" * (size // 2)
    return _HOSTILE_HEAD + "{}\n" + "ROOT\n" * (size // 5)
  small, large = text(1_000_000), text(4_000_000)
  t_small, err = _time_parse(small)
  t_large, err_large = _time_parse(large)
  assert str(err) == str(err_large)  # the same error, at the same place
  assert err.line <= 7 and "\n" not in str(err)
  expected = {"brace_lines": "unbalanced '{': no matching '}' before the end of the input",
              "brace_pairs": "unbalanced '{': no matching '}' before the end of the input",
              "brace_line": f"brackets nest deeper than {hlo_text.MAX_NESTING} levels",
              "comment": "unterminated /* comment", "string": "unterminated string",
              "root": "expected '=' after instruction name %ROOT"}[kind]
  assert expected in err.message
  assert t_large < 8 * t_small + 0.5, (t_small, t_large)  # 4x the input: about 4x the time


_IOTA_ALL_REDUCE = """HloModule m, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = f32[] add(%a, %b)
}

ENTRY %e (p: f32[8]) -> f32[8] {
  %p = f32[8] parameter(0)
  ROOT %r = f32[8] all-reduce(%p), channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), """ \
    """use_global_device_ids=true, to_apply=%add
}
"""


def test_split_iota_replica_groups():
  # A bare value of several tokens at the top level: the iota groups' `<=` and `T(...)`.
  texts = [_IOTA_ALL_REDUCE.replace(old, new) for old, new in (
      ("T(1,0)", "\nT(1,0)"), ("<=[4,2]", "\n<=\n[4,2]"), ("T(1,0)", "T\n(1,0)"),
      ("[2,4]<=", "[2,4]\n  <=  "))]
  assert all(ok for ok, _ in xla_parser_verdicts(texts))
  for text in texts:
    assert parse_hlo_text(text).entry.root.replica_groups == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_second_reading_frees_the_first():
  # A split near the end: the first reading builds almost the whole module before it
  # fails. Its objects refer to each other; they must go before the second reading,
  # not at some later garbage collection (which could double the peak).
  import gc  # pylint: disable=import-outside-toplevel
  lines = (FIXTURES_DIR / "ring_bwd_1x2x4.before_async.hlo").read_text().split("\n")
  k = max(i for i, l in enumerate(lines) if ", metadata=" in l)
  lines[k] = lines[k].replace(", metadata=", "\n  , metadata=", 1)
  def live():
    return sum(1 for o in gc.get_objects() if type(o).__name__ == "HloInstruction")
  gc.collect()
  gc.disable()
  try:
    before = live()
    module = parse_hlo_text("\n".join(lines))
    after = live()
  finally:
    gc.enable()
  assert after - before == module.instruction_count > 1000


def test_stack_frame_tables_as_tokens():
  if not H200_HLO.exists():
    pytest.skip(f"{H200_HLO} not present")
  base = H200_HLO.read_text()
  forms = [('1 "ring_probe.py"', '1\n"ring_probe.py"'), ('1 "<module>"\n2', '1 "<module>" 2'),
           ("FileNames\n1", "FileNames 1"), ("file_name_id=1 function_name_id=1 line=25",
                                             "file_name_id=1\n function_name_id=1 line=25")]
  texts = [base.replace(old, new, 1) for old, new in forms]
  bad = base.replace('1 "<module>"\n2', '1 "<module>" x 2', 1)
  assert all(t != base for t in texts + [bad])
  verdicts = xla_parser_verdicts(texts + [bad])
  assert [ok for ok, _ in verdicts] == [True] * len(texts) + [False]
  whole = parse_hlo_text(base)
  for text in texts:
    module = parse_hlo_text(text)
    assert (module.file_names, module.function_names, module.file_locations,
            module.stack_frames) == (whole.file_names, whole.function_names,
                                     whole.file_locations, whole.stack_frames)
  assert "expected a row of table FunctionNames" in _error(bad).message


def test_value_over_many_lines():
  # A value over thousands of lines (read a chunk of lines at a time while its bracket
  # stays open): the same pairs as on one line.
  base = _split_base()
  pairs = [(k, k + 1) for k in range(12000)]
  one_line = ",".join(f"{{{a},{b}}}" for a, b in pairs)
  old = "{{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7}}"
  assert old in base
  for sep in (",\n", ",\n  {\n", ", "):
    body = sep.join(f"{{{a},{b}}}" for a, b in pairs) if "{\n" not in sep else (
        ",\n".join(f"{{\n{a},{b}}}" for a, b in pairs))
    text = base.replace(old, "{" + body + "}")
    permute = parse_hlo_text(text).entry.instruction("ppermute.3.0")
    assert permute.source_target_pairs == pairs
    assert permute.line == next(n for n, l in enumerate(text.split("\n"), 1)
                                if "%ppermute.3.0 =" in l)
  assert parse_hlo_text(base.replace(old, "{" + one_line + "}")).entry.instruction(
      "ppermute.3.0").source_target_pairs == pairs
  err = _error(base.replace(old, "{" + one_line.replace(",", ",\n") + "\n"))
  assert "unbalanced '{'" in err.message
