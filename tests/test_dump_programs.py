"""A dump folder of several programs, and the proto XLA writes.

The fixtures are the --xla_dump_to folders of a real training script
(hlo_tools/programs/training_script.py, made by scripts/gen_fixtures.py): it jits
init, train_step, eval_step and a metrics lambda, and only the two steps hold ring
permutes (train_step two, eval_step one). One folder is text only, the other text
and XLA's protos (.hlo.pb) beside it.

Oracles are XLA's own files: the permutes each after-optimizations module holds
(counted in its text here), the device assignment in its config.pbtxt."""

import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, NVSHMEM_OPT, ROOT

TEXT_DUMP = FIXTURES / "training_script_1x1x8.xla_dump"
PROTO_DUMP = FIXTURES / "training_script_pb_1x1x8.xla_dump"
PROGRAMS = [
  "module_0001.jit_init",
  "module_0669.jit_train_step",
  "module_1383.jit_eval_step",
  "module_2066.jit__lambda",
]
TRAIN, EVAL = PROGRAMS[1], PROGRAMS[2]
AFTER = "sm_9.0a_gpu_after_optimizations"


def _cli(*args, **kwargs):
  return subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", *map(str, args)],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=300,
    **kwargs,
  )


def _permute_starts(folder, key):
  """The async permutes XLA's after-optimizations text of `key` holds."""
  text = (folder / f"{key}.{AFTER}.txt").read_text()
  return len(re.findall(r"[)}\]] collective-permute-start\(", text))


def test_fixture_holds_four_programs_two_with_permutes():
  counts = {key: _permute_starts(TEXT_DUMP, key) for key in PROGRAMS}
  assert counts == {PROGRAMS[0]: 0, TRAIN: 2, EVAL: 1, PROGRAMS[3]: 0}


@pytest.mark.parametrize("folder", [TEXT_DUMP, PROTO_DUMP], ids=["text", "proto_and_text"])
@pytest.mark.parametrize("command", ["explain", "verify"])
def test_every_program_with_permutes_is_decided(folder, command):
  result = _cli(command, f"{folder}:after_optimizations", "--format=json")
  assert result.returncode == 0, result.stderr[-2000:]
  out = json.loads(result.stdout)
  assert out["programs_total"] == 4
  assert [p["program"] for p in out["programs"]] == [TRAIN, EVAL]
  assert {s["program"]: s["reason"] for s in out["skipped"]} == {
    PROGRAMS[0]: "no collective-permutes",
    PROGRAMS[3]: "no collective-permutes",
  }
  if command == "explain":
    for entry in out["programs"]:
      assert len(entry["collectives"]) == _permute_starts(folder, entry["program"])
      # Each program placed by its own config, XLA's.
      assert f"{entry['program']}.config.pbtxt" in entry["placement"]
  else:
    assert out["passed"] is True
    assert all(p["passed"] for p in out["programs"])


def test_text_says_how_many_programs_and_which_were_skipped():
  result = _cli("explain", f"{TEXT_DUMP}:after_optimizations")
  assert result.returncode == 0, result.stderr[-2000:]
  first = result.stdout.splitlines()[0]
  assert first == (
    f"{TEXT_DUMP}: 4 programs; deciding 2 with collective-permutes ({TRAIN}, "
    f"{EVAL}); skipped {PROGRAMS[0]} (no collective-permutes); "
    f"{PROGRAMS[3]} (no collective-permutes)"
  )
  assert f"=== program {TRAIN} " in result.stdout and f"=== program {EVAL} " in result.stdout
  assert "no collective-permutes, nothing for the pass to decide" not in result.stdout


@pytest.mark.parametrize(
  "name", ["train_step", "jit_train_step", "669", "0669", "module_0669", TRAIN]
)
def test_program_picked_by_name_or_id(name):
  result = _cli("explain", f"{TEXT_DUMP}:{name}:after_optimizations", "--format=json")
  assert result.returncode == 0, result.stderr[-2000:]
  out = json.loads(result.stdout)
  assert out["module"] == "jit_train_step"
  assert len(out["collectives"]) == 2
  assert out["file"] == f"{TEXT_DUMP}:{TRAIN}:after_optimizations"


def test_program_picked_for_a_pass_stage():
  result = _cli("verify", f"{TEXT_DUMP}:eval_step:before_async", "--format=json")
  assert result.returncode == 0, result.stderr[-2000:]
  out = json.loads(result.stdout)
  assert out["file"] == f"{TEXT_DUMP}:{EVAL}:before_async"


@pytest.mark.parametrize("command", ["explain", "verify", "diff"])
def test_no_such_program_lists_the_programs(command):
  extra = [TEXT_DUMP / f"{TRAIN}.{AFTER}.txt"] if command == "diff" else []
  result = _cli(command, f"{TEXT_DUMP}:warp_step:after_optimizations", *extra)
  assert result.returncode == 2
  [line] = result.stderr.splitlines()
  assert "no program 'warp_step'" in line
  assert all(key in line for key in PROGRAMS), line


def test_diff_of_a_folder_stage_asks_for_a_program():
  result = _cli("diff", f"{TEXT_DUMP}:before_optimizations", f"{TEXT_DUMP}:after_optimizations")
  assert result.returncode == 2
  [line] = result.stderr.splitlines()
  assert "DIR:PROGRAM:before_optimizations" in line and all(k in line for k in PROGRAMS)
  result = _cli(
    "diff",
    f"{TEXT_DUMP}:eval_step:before_optimizations",
    f"{TEXT_DUMP}:eval_step:after_optimizations",
    "--format=json",
  )
  assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("command", ["explain", "verify", "diff"])
def test_help_documents_the_program_syntax(command):
  result = _cli(command, "--help")
  assert result.returncode == 0
  assert "DIR:PROGRAM:STAGE" in result.stdout or "DIR:[PROGRAM:]STAGE" in result.stdout


def test_report_decides_each_program(tmp_path):
  out = tmp_path / "report"
  result = _cli("report", TEXT_DUMP, f"--out={out}", "--quiet")
  assert result.returncode == 0, result.stderr[-2000:]
  report = json.loads((out / "report.json").read_text())
  assert report["folder"]["programs_total"] == 4
  assert report["folder"]["decided"] == [TRAIN, EVAL]
  assert [s["program"] for s in report["folder"]["skipped"]] == [PROGRAMS[0], PROGRAMS[3]]
  assert [c["dump_program"] for c in report["cases"]] == [TRAIN, EVAL]
  assert [len(c["collective_permutes"]) for c in report["cases"]] == [2, 1]
  assert f"{TEXT_DUMP}: 4 programs; deciding 2" in result.stdout


# --------------------------------------------------------------------------------------
# The proto XLA writes (X.hlo.pb) as the input of every command that takes a module file.

TRAIN_PB = PROTO_DUMP / f"{TRAIN}.{AFTER}.hlo.pb"
TRAIN_TXT = PROTO_DUMP / f"{TRAIN}.{AFTER}.txt"


def _strip_device_assignment(data):
  """The HloProto `data` with its module's device_assignment (field 15) removed: a
  proto that carries none (a hand-built one), for the config-beside case."""

  def fields(buf):
    pos, out = 0, []
    while pos < len(buf):
      start = pos
      key, pos = _varint(buf, pos)
      if key & 7 == 0:
        _, pos = _varint(buf, pos)
      elif key & 7 == 2:
        size, pos = _varint(buf, pos)
        pos += size
      elif key & 7 == 1:
        pos += 8
      elif key & 7 == 5:
        pos += 4
      out.append((key >> 3, buf[start:pos]))
    return out

  def payload(raw):
    _, pos = _varint(raw, 0)
    _, pos = _varint(raw, pos)
    return raw[pos:]

  outer = fields(data)
  module = payload(next(raw for n, raw in outer if n == 1))
  stripped = b"".join(raw for n, raw in fields(module) if n != 15)
  assert len(stripped) < len(module)
  return b"\x0a" + _encode_varint(len(stripped)) + stripped


def _varint(buf, pos):
  value = shift = 0
  while True:
    byte = buf[pos]
    pos += 1
    value |= (byte & 0x7F) << shift
    shift += 7
    if byte < 0x80:
      return value, pos


def _encode_varint(value):
  out = bytearray()
  while True:
    byte, value = value & 0x7F, value >> 7
    out.append(byte | (0x80 if value else 0))
    if not value:
      return bytes(out)


@pytest.mark.parametrize("command", ["explain", "verify"])
def test_proto_is_read_like_its_text(command):
  pb = _cli(command, TRAIN_PB, "--format=json")
  txt = _cli(command, TRAIN_TXT, "--format=json")
  assert pb.returncode == txt.returncode == 0, pb.stderr[-2000:] + txt.stderr[-2000:]
  a, b = json.loads(pb.stdout), json.loads(txt.stdout)
  assert "UTF-8" not in pb.stderr and "HLO text" not in pb.stdout + pb.stderr
  if command == "explain":
    assert a["placement"] == b["placement"]
    assert f"{TRAIN}.config.pbtxt" in a["placement"]
    assert a["topology"] == b["topology"]
    keys = ("instruction", "bytes", "pairs", "choice")
    assert [{k: e[k] for k in keys} for e in a["collectives"]] == [
      {k: e[k] for k in keys} for e in b["collectives"]
    ]
  else:
    assert a["passed"] and b["passed"]


def test_proto_alone_is_placed_by_its_own_device_assignment(tmp_path):
  alone = tmp_path / "step.hlo.pb"
  shutil.copyfile(TRAIN_PB, alone)
  result = _cli("explain", alone, "--topology=1x2x4", "--format=json")
  assert result.returncode == 0, result.stderr[-2000:]
  out = json.loads(result.stdout)
  assert (
    out["placement"] == f"device order: the module's device assignment ({alone}, the proto's own)"
  )
  assert out["topology"] == "1x2x4:map=0,1,2,3,4,5,6,7"
  assert "device order unknown" not in result.stdout
  assert str(tmp_path / "hlo-tools-input") not in result.stdout


@pytest.mark.parametrize("command", ["parse", "diff", "report"])
def test_other_commands_take_the_proto(command, tmp_path):
  args = {
    "parse": [TRAIN_PB, "--json"],
    "diff": [TRAIN_PB, TRAIN_TXT, "--format=json"],
    "report": [TRAIN_PB, f"--out={tmp_path / 'r'}", "--quiet"],
  }[command]
  result = _cli(command, *args)
  assert result.returncode == 0, result.stderr[-2000:]
  if command == "parse":
    assert json.loads(result.stdout)["module"] == "jit_train_step"
    assert json.loads(result.stdout)["num_partitions"] == 8
  if command == "diff":
    pairs = json.loads(result.stdout)["collectives"]
    assert len(pairs) == 2
    assert all(
      [p["a"]["pairs"], p["a"]["bytes"]] == [p["b"][0]["pairs"], p["b"][0]["bytes"]] for p in pairs
    )
  if command == "report":
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert len(report["cases"][0]["collective_permutes"]) == 2
    assert "module_0669.jit_train_step.config.pbtxt" in report["cases"][0]["placement"]


def _driver(*args):
  return subprocess.run(
    [str(NVSHMEM_OPT), *map(str, args)], capture_output=True, text=True, timeout=120
  )


def test_driver_places_a_proto_on_a_given_topology(tmp_path):
  report = tmp_path / "r.json"
  result = _driver(TRAIN_PB, "--topology=1x1x8", "--mode=explain", f"--report={report}")
  assert result.returncode == 0, result.stderr[-2000:]
  data = json.loads(report.read_text())
  assert data["partition_to_device"] == list(range(8)) and data["placed"]["gpus_per_host"] == 8
  assert "device assignment" in data["placement"] and "proto" in data["placement"]
  assert "carries no device assignment" not in result.stdout


def test_driver_reads_the_config_beside_a_proto_without_assignment(tmp_path):
  bare = tmp_path / "step.hlo.pb"
  bare.write_bytes(_strip_device_assignment(TRAIN_PB.read_bytes()))
  report = tmp_path / "r.json"
  result = _driver(bare, "--topology=1x1x8", "--mode=explain", f"--report={report}")
  assert result.returncode == 0, result.stderr[-2000:]
  unplaced = json.loads(report.read_text())
  assert unplaced["placement"] == "unknown"
  # The reason speaks of the module, not of HLO text: the input is a proto.
  assert "neither it nor a config beside it gives a device assignment" in result.stdout
  assert "HLO text" not in result.stdout
  # Its module's config beside it, as XLA names it beside the dump, or as a sidecar.
  shutil.copyfile(PROTO_DUMP / f"{TRAIN}.config.pbtxt", tmp_path / "step.config.pbtxt")
  result = _driver(bare, "--topology=1x1x8", "--mode=explain", f"--report={report}")
  assert result.returncode == 0, result.stderr[-2000:]
  placed = json.loads(report.read_text())
  assert placed["module_config"] == str(tmp_path / "step.config.pbtxt")
  assert placed["partition_to_device"] == list(range(8))
  # The tools read the same bare proto alike.
  result = _cli("explain", bare, "--topology=1x1x8", "--format=json")
  assert result.returncode == 0, result.stderr[-2000:]
  assert "step.config.pbtxt" in json.loads(result.stdout)["placement"]


# --------------------------------------------------------------------------------------
# report and verify: one answer on one plan.

FAST_NVSHMEM = FIXTURES / "fast_nvshmem.cost"


def _runtime_results(verified):
  [check] = [c for c in verified["checks"] if c["name"] == "nvshmem-runtime"]
  return check["results"]


def test_report_and_verify_give_one_answer_on_one_plan(tmp_path):
  # The report's pass writes NVSHMEM onto XLA's compile of each step (a table where
  # NVSHMEM wins); XLA's buffer assignment of that compile goes with it, and verify of
  # the written plan beside the same assignment says what the report says.
  out = tmp_path / "report"
  result = _cli("report", TEXT_DUMP, f"--out={out}", "--quiet", f"--cost-table={FAST_NVSHMEM}")
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  report = json.loads((out / "report.json").read_text())
  for case in report["cases"]:
    assert {p["choice"]["plan"] for p in case["collective_permutes"]} == {"nvshmem"}
    assert case["verify_passed"] and not case["failed_checks"]
    case_dir = out / case["id"]
    key = case["dump_program"]
    # The assignment travelled: the report's own verify read it.
    reported = json.loads((case_dir / "json" / "verify_after_optimizations.json").read_text())
    notes = [r["message"] for r in _runtime_results(reported)]
    assert len(notes) == _permute_starts(TEXT_DUMP, key)
    assert all("is of a compile where this permute was not NVSHMEM" in n for n in notes)
    # The written plan, beside XLA's buffer assignment and config, as a user has it.
    plan = tmp_path / f"{key}.plan.txt"
    shutil.copyfile(case_dir / "hlo" / "after_optimizations.nvshmem.hlo", plan)
    shutil.copyfile(
      TEXT_DUMP / f"{key}.{AFTER}-buffer-assignment.txt",
      tmp_path / f"{key}.plan-buffer-assignment.txt",
    )
    shutil.copyfile(TEXT_DUMP / f"{key}.config.pbtxt", tmp_path / f"{key}.plan.config.pbtxt")
    alone = _cli(
      "verify", plan, "--topology=1x1x8", f"--cost-table={FAST_NVSHMEM}", "--format=json"
    )
    assert alone.returncode == 0, alone.stdout[-3000:]
    assert [r["message"] for r in _runtime_results(json.loads(alone.stdout))] == notes
