"""hlo_tools.model.driver_report: the Python mirror of the driver's report against
nvshmem_opt/report.proto itself, read by protoc, and against a report the driver
writes."""

import json
import subprocess
import typing

import pytest
from google.protobuf import descriptor_pb2

from hlo_tools.model import driver, driver_report

from conftest import ROOT

PROTOC = ROOT / ".venv" / "bin" / "protoc"
FIXTURE = ROOT / "tests" / "fixtures" / "ring_1x1x8.before_async.hlo"
F = descriptor_pb2.FieldDescriptorProto
# The Python type each proto field type is printed as (protobuf's JSON mapping, with
# the driver's integers unquoted).
SCALAR = {
  F.TYPE_STRING: str,
  F.TYPE_BOOL: bool,
  F.TYPE_DOUBLE: float,
  F.TYPE_INT64: int,
  F.TYPE_INT32: int,
}
WELL_KNOWN = {
  ".google.protobuf.Value": typing.Any,
  ".google.protobuf.Struct": dict,
  ".google.protobuf.ListValue": list,
}


def _messages(tmp_path):
  out = tmp_path / "report.desc"
  subprocess.run(
    [
      str(PROTOC),
      "-I",
      str(ROOT),
      "-I",
      str(ROOT / ".venv" / "include"),
      f"--descriptor_set_out={out}",
      "nvshmem_opt/report.proto",
    ],
    cwd=ROOT,
    check=True,
  )
  files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
  [proto] = [f for f in files.file if f.name == "nvshmem_opt/report.proto"]
  return {m.name: m for m in proto.message_type}


def _base(hint):
  """The outer type of a hint: list[X] -> list, NotRequired[X] -> X's, Any -> Any."""
  if typing.get_origin(hint) is typing.NotRequired:
    [hint] = typing.get_args(hint)
  return typing.get_origin(hint) or hint


@pytest.mark.skipif(not PROTOC.exists(), reason="needs the venv's protoc (scripts/setup.sh)")
def test_mirror_has_every_field_of_the_proto_with_its_type(tmp_path):
  messages = _messages(tmp_path)
  assert set(messages) == {"Decision", "Loop", "Report", "PlacedTopology"}
  for name, message in messages.items():
    mirror = getattr(driver_report, name)
    hints = typing.get_type_hints(mirror, include_extras=True)
    assert [f.name for f in message.field] == list(hints), name
    for field in message.field:
      hint = hints[field.name]
      if field.label == F.LABEL_REPEATED:
        assert _base(hint) is list, (name, field.name)
        continue
      own = field.type_name.rsplit(".", 1)[-1]
      if field.type == F.TYPE_MESSAGE and own in messages:
        want = getattr(driver_report, own)
      elif field.type == F.TYPE_MESSAGE:
        want = WELL_KNOWN.get(field.type_name, typing.Any)
      else:
        want = SCALAR[field.type]
      assert _base(hint) is want, (name, field.name, hint)


def test_a_driver_report_has_the_mirror_s_keys(tmp_path):
  if driver.find_nvshmem_opt() is None:
    pytest.skip(driver.NOT_INSTALLED)
  answer = driver.run_nvshmem_opt(FIXTURE, "1x1x8", tmp_dir=str(tmp_path))
  assert answer.report is not None, answer.message
  report = json.loads(json.dumps(answer.report))
  assert set(report) == set(typing.get_type_hints(driver_report.Report))
  optional = {"upstream"}  # only with --compare-upstream
  decision_keys = set(typing.get_type_hints(driver_report.Decision))
  for d in report["decisions"]:
    assert decision_keys - optional <= set(d) <= decision_keys
    for loop in d["loops"]:
      assert set(loop) == set(typing.get_type_hints(driver_report.Loop))
