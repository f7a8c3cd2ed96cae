"""hlo_tools.hlo.proto: a serialized module told from HLO text, unwrapped from XLA's
HloProto, its device assignment read off the wire format, and printed as text by
jaxlib; on messages encoded here by hand and on a real jax 0.10.2 dump
(tests/fixtures/training_script_pb_1x1x8.xla_dump/)."""

import pytest

from hlo_tools.errors import InputError
from hlo_tools.hlo import proto
from hlo_tools.hlo.module_config import parse_config
from hlo_tools.hlo.reader import parse_hlo_file, parse_hlo_text

from conftest import FIXTURES

DUMP = FIXTURES / "training_script_pb_1x1x8.xla_dump"
LAMBDA = "module_2066.jit__lambda.sm_9.0a_gpu_after_optimizations"
LAMBDA_PB, LAMBDA_TXT = DUMP / f"{LAMBDA}.hlo.pb", DUMP / f"{LAMBDA}.txt"


# Protobuf's wire format, written out: a varint is 7 bits a byte, low first, the high
# bit set on every byte but the last; a field is its key (number << 3 | wire type),
# then a varint (type 0) or a length and the bytes (type 2).
def varint(value):
  out = bytearray()
  while True:
    byte, value = value & 0x7F, value >> 7
    out.append(byte | (0x80 if value else 0))
    if not value:
      return bytes(out)


def field(number, value):
  if isinstance(value, int):
    return varint(number << 3) + varint(value)
  return varint(number << 3 | 2) + varint(len(value)) + value


def module(name=b"m", assignment=None):
  """An HloModuleProto: name = 1, one (empty) computation = 3, device_assignment = 15."""
  data = field(1, name) + field(3, b"")
  return data + (field(15, assignment) if assignment is not None else b"")


def assignment(replicas, computations, columns, packed=False):
  """A DeviceAssignmentProto: replica_count = 1, computation_count = 2,
  computation_devices = 3, each of replica_device_ids = 1."""
  data = field(1, replicas) + field(2, computations)
  for ids in columns:
    if packed:
      data += field(3, field(1, b"".join(varint(i) for i in ids)))
    else:
      data += field(3, b"".join(field(1, i) for i in ids))
  return data


def test_encoding_here_is_protobufs():
  # The example of protobuf's encoding guide: 150 is 0x96 0x01.
  assert varint(150) == b"\x96\x01"
  assert field(1, 150) == b"\x08\x96\x01"
  assert field(2, b"testing") == b"\x12\x07testing"


def test_text_is_told_from_a_proto():
  assert proto.looks_like_text(b"HloModule m\n")
  assert proto.looks_like_text(b"\n  // made by hand\n/* a\nb */ HloModule m")
  assert not proto.looks_like_text(b"/* never closed HloModule m")
  assert not proto.looks_like_text(module())
  assert not proto.looks_like_text(LAMBDA_PB.read_bytes())


def test_module_bytes_unwraps_an_hlo_proto():
  bare = module(b"jit_f")
  assert proto.module_bytes(bare) == bare
  assert proto.module_bytes(field(1, bare) + field(3, b"\x08\x01")) == bare  # an HloProto
  assert proto.module_bytes(field(1, b"") + field(3, b"")) is None  # no name
  assert proto.module_bytes(field(1, b"m")) is None  # no computation
  assert proto.module_bytes(b"\xff\xff") is None  # a truncated varint
  assert proto.module_bytes(b"HloModule m\n") is None
  # XLA's dump: an HloProto whose module is named as the file is.
  inner = proto.module_bytes(LAMBDA_PB.read_bytes())
  assert inner.startswith(field(1, b"jit__lambda"))


def test_device_assignment_is_flattened_as_xla_flattens_it():
  # Two replicas of two partitions: flattened id replica * 2 + partition.
  for packed in (False, True):
    data = module(assignment=assignment(2, 2, [[10, 11], [12, 13]], packed))
    found = proto.device_assignment(data, "m.pb")
    assert found == proto.DeviceAssignment(2, 2, (10, 12, 11, 13)), packed
  assert proto.device_assignment(module(), "m.pb") is None


def test_real_dump_carries_the_configs_device_assignment():
  data = proto.module_bytes(LAMBDA_PB.read_bytes())
  found = proto.device_assignment(data, "lambda")
  config = parse_config((DUMP / "module_2066.jit__lambda.config.pbtxt").read_text(), "config")
  assert (found.replica_count, found.computation_count) == (1, 8)
  assert found.partition_to_device == config.partition_to_device == tuple(range(8))


@pytest.mark.parametrize(
  "data, message",
  [
    (assignment(1, 2, [[0, 1]]), "places 1 replicas x 2 computations with 1 columns"),
    (assignment(2, 1, [[0]]), "places 2 replicas x 1 computations with 1 columns"),
    (assignment(0, 1, [[]]), "places 0 replicas"),
    (assignment(1, 2, [[3], [3]]), "names a device twice"),
    (field(1, 1) + b"\x10", "malformed (truncated varint)"),
  ],
)
def test_bad_device_assignments_are_refused(data, message):
  with pytest.raises(InputError) as info:
    proto.device_assignment(module(assignment=data), "m.pb")
  assert str(info.value).startswith("m.pb: the proto's device assignment")
  assert message in str(info.value)


def test_config_text_is_a_module_config_xla_would_write():
  text = proto.config_text(proto.DeviceAssignment(2, 2, (10, 12, 11, 13)))
  assert text == (
    "static_device_assignment {\n"
    "  replica_count: 2\n"
    "  computation_count: 2\n"
    "  computation_devices {\n"
    "    replica_device_ids: 10\n"
    "    replica_device_ids: 11\n"
    "  }\n"
    "  computation_devices {\n"
    "    replica_device_ids: 12\n"
    "    replica_device_ids: 13\n"
    "  }\n"
    "}\n"
  )
  assert parse_config(text, "c").partition_to_device == (10, 12, 11, 13)


def test_to_text_prints_the_module_xla_dumped_beside_it():
  data = proto.module_bytes(LAMBDA_PB.read_bytes())
  text = proto.to_text(data, "lambda", proto.DeviceAssignment(1, 8, tuple(range(8))))
  printed = parse_hlo_text(text, "lambda")
  dumped = parse_hlo_file(LAMBDA_TXT)
  assert printed.name == dumped.name == "jit__lambda"
  assert printed.num_partitions == 8 and printed.num_replicas == 1
  assert [c.name for c in printed.computations] == [c.name for c in dumped.computations]
  assert printed.instruction_count == dumped.instruction_count
  with pytest.raises(InputError, match="^bad.pb: jaxlib cannot read the proto"):
    proto.to_text(b"\x0a\x01", "bad.pb")
