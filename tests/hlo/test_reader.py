"""hlo_tools.hlo.reader against real HLO: every committed module read exactly as the reader
before it read it (tests/reader_golden.json), HLO that JAX compiles here for an 8-GPU
H200 topology (plus every pass dump) against jaxlib's own parser (in a subprocess,
as it aborts on some inputs), and garbage refused with one line."""

import json
import random
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hlo_tools.errors import HloParseError
from hlo_tools.hlo.reader import parse_hlo_file, parse_hlo_text
from hlo_tools.hlo.scanner import MAX_NESTING
from hlo_tools.hlo.shape import parse_shape

import generated_hlo
import reader_golden
from conftest import FIXTURES as FIXTURES_DIR, SHARED_DATA
from generated_hlo import _env, hlo_dump_files

generated_dir = generated_hlo.generated_dir  # the session fixture, shared with other files
H200_HLO = SHARED_DATA / "h200_jax0112_ppermute_loop.after_optimizations.hlo"
# jax 0.10.2 fixtures, plus the same ring compiled by jax 0.9.1 (tests/fixtures/jax091/).
FIXTURES = sorted(FIXTURES_DIR.glob("*.hlo")) + sorted((FIXTURES_DIR / "jax091").glob("*.hlo"))
FIXTURE_IDS = [str(p.relative_to(FIXTURES_DIR)) for p in FIXTURES]


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
    proc = subprocess.run(
      [sys.executable, "-c", _JAXLIB_VIEW_SCRIPT] + todo,
      env=_env(),
      capture_output=True,
      text=True,
      timeout=600,
    )
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


def test_h200_computations_parse_in_order_with_entry_and_roots(h200):
  assert [c.name for c in h200.computations] == [
    "fused_add",
    "region_0.1",
    "fused_compare",
    "region_1.2",
    "main.3",
  ]
  assert h200.entry is h200.computation("main.3") and h200.entry.is_entry
  body = h200.computation("%region_0.1")
  assert body.root.name == "tuple.3" and body.root.is_root
  assert [p.name for p in body.parameters] == ["arg_tuple.1"]
  assert body.line == 30
  assert h200.instruction_count == 24


def test_h200_permute_start_keeps_shape_operands_and_pairs(h200):
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
  assert list(start.attributes) == [
    "channel_id",
    "source_target_pairs",
    "metadata",
    "backend_config",
  ]
  loop = h200.entry.instruction("while.5")
  assert loop.called_computations == ["region_1.2", "region_0.1"]
  assert loop.backend_config_json()["known_trip_count"] == {"n": "4"}
  fusion = h200.computation("region_0.1").instruction("loop_add_fusion")
  assert fusion.called_computations == ["fused_add"] and fusion.attributes["kind"] == "kLoop"
  assert h200.entry.instruction("constant_5_0").literal == "0"


# ---------------------------------------------------------------------------------------
# Fidelity against jaxlib on every real HLO file


def test_every_real_module_matches_jaxlib_computations(all_hlo_files, jaxlib_views):
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
  assert {
    "collective-permute",
    "collective-permute-start",
    "collective-permute-done",
    "while",
    "fusion",
  } <= opcodes


@pytest.mark.parametrize("path", FIXTURES, ids=FIXTURE_IDS)
def test_every_fixture_parses_with_an_entry(path):
  module = parse_hlo_file(path)
  assert module.entry is not None and module.instruction_count > 0


def test_serialized_proto_loads_like_its_text(tmp_path, all_hlo_files):
  from hlo_tools.hlo.reader import load_hlo_proto  # pylint: disable=import-outside-toplevel

  src = all_hlo_files[0]
  proto = tmp_path / "module.pb"
  code = (
    "import sys; from jaxlib import _hlo; open(sys.argv[2], 'wb').write("
    "_hlo.hlo_module_from_text(open(sys.argv[1]).read()).as_serialized_hlo_module_proto())"
  )
  subprocess.run(
    [sys.executable, "-c", code, str(src), str(proto)], env=_env(), check=True, timeout=120
  )
  module = load_hlo_proto(proto)
  assert module.instruction_count == parse_hlo_file(src).instruction_count
  proto.write_bytes(b"\x01\x02 not a proto")
  with pytest.raises(HloParseError):
    load_hlo_proto(proto)


# ---------------------------------------------------------------------------------------
# Malformed input: always HloParseError, at the right line


def _h200_lines():
  return H200_HLO.read_text().split("\n")


def _error(text):
  with pytest.raises(HloParseError) as info:
    parse_hlo_text(text, path="bad.hlo")
  err = info.value
  assert str(err) == f"bad.hlo:{err.line}:{err.col}: {err.message}"
  return err


def _module(body, extra=""):
  return f"HloModule m\n\n{extra}ENTRY %e (p: f32[8]) -> f32[8] {{\n{body}\n}}\n"


def test_unknown_opcode_is_refused_at_its_column():
  lines = _h200_lines()
  n = next(k for k, l in enumerate(lines) if " copy(%collective-permute-done)" in l)
  lines[n] = lines[n].replace(" copy(", " kopy(")
  err = _error("\n".join(lines))
  assert (err.line, err.col) == (n + 1, lines[n].index("kopy") + 1)
  assert "unknown opcode 'kopy'" in err.message


def test_unbalanced_brace_is_refused_on_its_line():
  lines = _h200_lines()
  n = next(k for k, l in enumerate(lines) if "%loop_add_fusion =" in l)
  lines[n] = lines[n].replace("stack_frame_id=4}", "stack_frame_id=4", 1)
  err = _error("\n".join(lines))
  assert err.line == n + 1 and "unbalanced '{': no matching '}' on this line" in err.message


def test_missing_equals_and_bad_shape():
  lines = _h200_lines()
  n = next(k for k, l in enumerate(lines) if "%copy.5 =" in l)
  broken = lines[:n] + [lines[n].replace("%copy.5 =", "%copy.5")] + lines[n + 1 :]
  err = _error("\n".join(broken))
  assert err.line == n + 1 and "'='" in err.message
  broken = lines[:n] + [lines[n].replace("= bf16[", "= bf17[")] + lines[n + 1 :]
  err = _error("\n".join(broken))
  assert err.line == n + 1 and "element type" in err.message


def test_truncated_module_is_refused_at_the_cut():
  lines = _h200_lines()
  n = next(k for k, l in enumerate(lines) if "%collective-permute-start =" in l)
  cut = "\n".join(lines[:n] + [lines[n][: len(lines[n]) // 2]])
  assert _error(cut).line == n + 1
  err = _error("\n".join(lines[:n]))  # cut between lines: computation never closed
  assert err.line == n and "not closed" in err.message


def test_undefined_references_are_refused_on_their_line():
  err = _error(_module("  %p = f32[8] parameter(0)\n  ROOT %r = f32[8] add(%p, %q)"))
  assert err.line == 5 and "%q" in err.message
  err = _error(_module("  %p = f32[8] parameter(0)\n  ROOT %r = f32[8] call(%p), to_apply=%nope"))
  assert err.line == 5 and "%nope" in err.message


def test_non_hlo_input_is_refused_with_a_reason(tmp_path):
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
    mutated = text[:pos] + text[pos + data.draw(st.integers(1, 5)) :]
  else:
    mutated = text[:pos] + data.draw(st.sampled_from(list('{}()[]",=% \n/*x\\'))) + text[pos:]
  try:
    parse_hlo_text(mutated)
  except HloParseError as e:
    assert 1 <= e.line <= mutated.count("\n") + 1


# ---------------------------------------------------------------------------------------
# Tolerance: text XLA's parser takes that the reader takes too

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
    rest = texts[len(out) :]
    proc = subprocess.run(
      [sys.executable, "-c", _XLA_VERDICT_SCRIPT],
      env=_env(),
      input="".join(json.dumps(t) + "\n" for t in rest),
      capture_output=True,
      text=True,
      timeout=600,
    )
    out += [tuple(json.loads(l)) for l in proc.stdout.splitlines()]
    if len(out) < len(texts):
      assert proc.returncode != 0, proc.stderr[-2000:]
      out.append((None, f"XLA died with status {proc.returncode}"))
  return out


def test_accepts_what_xla_accepts(tmp_path):
  base = (FIXTURES_DIR / "shift_1x2x4.before_async.hlo").read_text()
  quote_in_comment = base.replace(
    "collective-permute(%param.1)", 'collective-permute(/* a"b */%param.1)'
  )
  variants = {
    "quote_in_comment": quote_in_comment,
    "cr_only": base.replace("\n", "\r"),
    "crlf": base.replace("\n", "\r\n"),
    "name_colon": base.replace("%param.1 = ", "param.1: = ", 1),
  }
  assert all(v != base for v in variants.values())
  assert all(ok for ok, _ in xla_parser_verdicts(list(variants.values())))
  for name, text in variants.items():
    module = parse_hlo_text(text, name)
    assert module.entry.instruction("ppermute.3.0").operands == ["param.1"], name
  # Bytes that are not UTF-8: XLA (the wheel's, through nvshmem-opt) takes them in a
  # comment and refuses them in a string.
  from conftest import run_nvshmem_opt

  for where, old, new, xla_ok in (
    ("comment", b"collective-permute(%param.1)", b"collective-permute(/*\xff\xc3*/%param.1)", True),
    ("string", b'op_name="x"', b'op_name="x\xff"', False),
  ):
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


def _time_parse(text):
  import time  # pylint: disable=import-outside-toplevel

  t0 = time.perf_counter()
  with pytest.raises(HloParseError) as info:
    parse_hlo_text(text, "h.hlo")
  return time.perf_counter() - t0, info.value


_HOSTILE_HEAD = (
  "HloModule m\nENTRY %e {\n  %p = f32[] parameter(0)\n  ROOT %c = f32[] "
  'custom-call(%p), custom_call_target="x", backend_config='
)


@pytest.mark.parametrize(
  "kind", ["brace_lines", "brace_pairs", "brace_line", "comment", "string", "root"]
)
def test_hostile_input_fails_at_its_line_in_linear_time(kind):
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
  expected = {
    "brace_lines": "unbalanced '{': no matching '}' on this line",
    "brace_pairs": "unbalanced '{': no matching '}' on this line",
    "brace_line": f"brackets nest deeper than {MAX_NESTING} levels",
    "comment": "unterminated /* comment",
    "string": "unterminated string",
    "root": "expected '=' after instruction name %ROOT",
  }[kind]
  assert expected in err.message
  assert t_large < 8 * t_small + 0.5, (t_small, t_large)  # 4x the input: about 4x the time


# ---------------------------------------------------------------------------------------
# Every real module read as before: the reader that came before this one wrote
# tests/reader_golden.json (tests/reader_golden.py says how); collective-permute records
# in full, the rest as a digest of every instruction's name, opcode, operands, shape,
# line, column and raw attributes.

GOLDEN = json.loads(reader_golden.GOLDEN.read_text())


@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_real_module_reads_as_the_previous_reader_read_it(key):
  path = reader_golden.REPO / key
  assert path.exists(), f"{key} is gone: regenerate tests/reader_golden.json"
  snapshot = reader_golden.snapshot(parse_hlo_file(path))
  assert snapshot["records"] == GOLDEN[key]["records"]
  assert snapshot == GOLDEN[key]


def test_golden_file_covers_the_modules_of_every_jax_version():
  keys = set(GOLDEN)
  for kind in ("jax091/", "jax0112/", "train_step_", ".passes/xla_dump/", "ring_bwd_"):
    assert any(kind in k for k in keys), kind
  assert sum(len(v["records"]) for v in GOLDEN.values()) >= 100


# ---------------------------------------------------------------------------------------
# Garbage: refused with one line, `file:line:col: message`, at a line of the input.


def _garbage():
  ring = (FIXTURES_DIR / "ring_1x2x4.before_async.hlo").read_text()
  lines = ring.split("\n")
  shuffled = lines[:]
  random.Random(3).shuffle(shuffled)
  n = next(k for k, l in enumerate(lines) if "collective-permute(" in l)
  split = lines[:n] + [lines[n].replace(", ", ",\n  ", 1)] + lines[n + 1 :]
  proto = subprocess.run(
    [
      sys.executable,
      "-c",
      "import sys; from jaxlib import _hlo; sys.stdout.buffer.write("
      "_hlo.hlo_module_from_text(sys.stdin.read()).as_serialized_hlo_module_proto())",
    ],
    input=ring.encode(),
    capture_output=True,
    env=_env(),
    check=True,
    timeout=120,
  ).stdout
  return {
    "empty": b"",
    "blank": b"\n \n\t\n",
    "python": b"def f():\n  return 1\n",
    "json": b'{"HloModule": 1}\n',
    "binary": bytes(range(256)),
    "proto": proto,
    "html": b"<html><body>HloModule m</body></html>\n",
    "header_only": b"HloModule m\n",
    "shuffled": "\n".join(shuffled).encode(),
    "reversed": "\n".join(lines[::-1]).encode(),
    "cut_mid_line": ring[: ring.index("collective-permute(") + 25].encode(),
    "statement_over_two_lines": "\n".join(split).encode(),
    "no_closing_brace": "\n".join(l for l in lines if l != "}").encode(),
    "latin1": ring.replace("ppermute", "pperm\u00fcte").encode("latin-1"),
    "doubled": (ring + ring).encode(),
    "parameter_without_number": ring.replace("parameter(0)", "parameter()", 1).encode(),
  }


def test_garbage_is_refused_with_one_line(tmp_path):
  for name, data in _garbage().items():
    path = tmp_path / f"{name}.hlo"
    path.write_bytes(data)
    with pytest.raises(HloParseError) as info:
      parse_hlo_file(path)
    err = info.value
    assert str(err) == f"{path}:{err.line}:{err.col}: {err.message}", name
    assert "\n" not in str(err), name
    assert 1 <= err.line <= max(data.count(b"\n") + (not data.endswith(b"\n")), 1), name
    assert err.col >= 1, name


def test_statement_over_two_lines_is_refused_at_its_first_line():
  base = (FIXTURES_DIR / "shift_1x2x4.before_async.hlo").read_text()
  n = next(k for k, l in enumerate(base.split("\n"), 1) if "%ppermute.3.0 =" in l)
  err = _error(base.replace("{{0,1},{1,2}", "{{0,1},\n{1,2}", 1))
  assert err.line == n and "unbalanced '{'" in err.message
  err = _error(base.replace("channel_id=1,", "channel_id=1,\n", 1))
  assert err.line == n


def test_file_over_the_limit_is_a_parse_error_and_a_missing_one_os_error(tmp_path):
  size = H200_HLO.stat().st_size
  with pytest.raises(HloParseError) as info:
    parse_hlo_file(H200_HLO, max_bytes=1000)
  assert str(info.value) == f"{H200_HLO}:1:1: input is {size} bytes, over the limit of 1000"
  with pytest.raises(OSError, match="No such file or directory"):
    parse_hlo_file(tmp_path / "missing.hlo")
  # Bytes, and text with CR LF line ends, read as the file is.
  module = parse_hlo_text(H200_HLO.read_bytes().replace(b"\n", b"\r\n"))
  assert module.instruction_count == parse_hlo_file(H200_HLO).instruction_count == 24
