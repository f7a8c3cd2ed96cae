"""A serialized module as XLA dumps it (`--xla_dump_hlo_as_proto`: X.hlo.pb, an HloProto
holding the HloModuleProto and, after optimizations, its buffer assignment), or a bare
HloModuleProto: told apart from HLO text, unwrapped, its device assignment read, and
printed as HLO text by jaxlib's XLA for the readers here.

Only the few fields the tools need are read, straight from the wire format
(xla/service/hlo.proto: HloProto.hlo_module = 1; HloModuleProto.name = 1,
.computations = 3, .device_assignment = 15; xla/xla_data.proto: DeviceAssignmentProto
.replica_count = 1, .computation_count = 2, .computation_devices = 3 of
.replica_device_ids = 1), so no generated proto module is imported.
"""

from __future__ import annotations

import dataclasses

from hlo_tools.errors import InputError

_HLO_MODULE = 1  # HloProto.hlo_module
_NAME, _COMPUTATIONS, _DEVICE_ASSIGNMENT = 1, 3, 15  # HloModuleProto
_REPLICAS, _COMPUTATIONS_COUNT, _COMPUTATION_DEVICES = 1, 2, 3  # DeviceAssignmentProto
_MAX_DEVICES = 1 << 20


class _Bad(Exception):
  """Bytes that are not the protobuf message expected."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
  value, shift = 0, 0
  while True:
    if pos >= len(data) or shift > 63:
      raise _Bad("truncated varint")
    byte = data[pos]
    pos += 1
    value |= (byte & 0x7F) << shift
    if byte < 0x80:
      return value, pos
    shift += 7


def _fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
  """(field number, wire type, value) of each field of one message; _Bad when the
  bytes are not a well-formed message."""
  fields: list[tuple[int, int, int | bytes]] = []
  pos = 0
  while pos < len(data):
    key, pos = _varint(data, pos)
    number, wire = key >> 3, key & 7
    if number == 0:
      raise _Bad("field number 0")
    if wire == 0:
      value, pos = _varint(data, pos)
      fields.append((number, wire, value))
    elif wire == 2:
      size, pos = _varint(data, pos)
      if pos + size > len(data):
        raise _Bad("truncated field")
      fields.append((number, wire, data[pos : pos + size]))
      pos += size
    elif wire in (1, 5):
      width = 8 if wire == 1 else 4
      if pos + width > len(data):
        raise _Bad("truncated field")
      fields.append((number, wire, int.from_bytes(data[pos : pos + width], "little")))
      pos += width
    else:
      raise _Bad(f"wire type {wire}")
  return fields


def _is_module(data: bytes) -> bool:
  """An HloModuleProto: a name and at least one computation."""
  try:
    fields = _fields(data)
  except _Bad:
    return False
  names = [v for n, w, v in fields if n == _NAME and w == 2]
  return bool(names and names[0]) and any(n == _COMPUTATIONS and w == 2 for n, w, _ in fields)


def module_bytes(data: bytes) -> bytes | None:
  """The serialized HloModuleProto in `data` (an HloProto's hlo_module, or `data`
  itself), or None where `data` is neither."""
  try:
    fields = _fields(data)
  except _Bad:
    return None
  inner = [v for n, w, v in fields if n == _HLO_MODULE and w == 2]
  if inner and isinstance(inner[-1], bytes) and _is_module(inner[-1]):
    return inner[-1]
  return data if _is_module(data) else None


def looks_like_text(data: bytes) -> bool:
  """HLO text starts with 'HloModule' after white space and comments."""
  rest = data.lstrip()
  while rest.startswith((b"//", b"/*")):
    if rest.startswith(b"//"):
      end = rest.find(b"\n")
      rest = b"" if end < 0 else rest[end + 1 :].lstrip()
    else:
      end = rest.find(b"*/")
      rest = b"" if end < 0 else rest[end + 2 :].lstrip()
  return rest.startswith(b"HloModule")


@dataclasses.dataclass(frozen=True)
class DeviceAssignment:
  replica_count: int
  computation_count: int
  # XLA's flattened order, as a module config lists it: replica * computations + p.
  partition_to_device: tuple[int, ...]


def device_assignment(module: bytes, label: str) -> DeviceAssignment | None:
  """The device assignment an HloModuleProto carries (XLA writes the compile's
  static one), or None where it has none; InputError when it is malformed."""
  found = [v for n, w, v in _fields(module) if n == _DEVICE_ASSIGNMENT and w == 2]
  if not found or not isinstance(found[-1], bytes):
    return None
  try:
    fields = _fields(found[-1])
    replicas = next((v for n, w, v in fields if n == _REPLICAS and w == 0), 0)
    computations = next((v for n, w, v in fields if n == _COMPUTATIONS_COUNT and w == 0), 0)
    columns: list[list[int]] = []
    for n, w, v in fields:
      if n != _COMPUTATION_DEVICES or w != 2 or not isinstance(v, bytes):
        continue
      ids: list[int] = []
      for m, mw, mv in _fields(v):
        if m != 1:
          continue
        if mw == 0 and isinstance(mv, int):
          ids.append(mv)
        elif mw == 2 and isinstance(mv, bytes):  # packed
          pos = 0
          while pos < len(mv):
            value, pos = _varint(mv, pos)
            ids.append(value)
      columns.append(ids)
  except _Bad as e:
    raise InputError(f"{label}: the proto's device assignment is malformed ({e})") from None
  assert isinstance(replicas, int) and isinstance(computations, int)
  if (
    replicas < 1
    or computations < 1
    or replicas * computations > _MAX_DEVICES
    or len(columns) != computations
    or any(len(c) != replicas for c in columns)
  ):
    raise InputError(
      f"{label}: the proto's device assignment places {replicas} replicas x "
      f"{computations} computations with {len(columns)} columns of devices"
    )
  flat = tuple(columns[p][r] for r in range(replicas) for p in range(computations))
  if len(set(flat)) != len(flat):
    raise InputError(f"{label}: the proto's device assignment names a device twice")
  return DeviceAssignment(replicas, computations, flat)


def config_text(assignment: DeviceAssignment) -> str:
  """A module config (config.pbtxt) holding just the device assignment, as XLA
  writes one, for the readers that find the placement beside a module."""
  lines = [
    "static_device_assignment {",
    f"  replica_count: {assignment.replica_count}",
    f"  computation_count: {assignment.computation_count}",
  ]
  for p in range(assignment.computation_count):
    lines.append("  computation_devices {")
    for r in range(assignment.replica_count):
      lines.append(
        "    replica_device_ids: "
        f"{assignment.partition_to_device[r * assignment.computation_count + p]}"
      )
    lines.append("  }")
  lines.append("}")
  return "\n".join(lines) + "\n"


def to_text(module: bytes, label: str, assignment: DeviceAssignment | None = None) -> str:
  """The HloModuleProto printed as HLO text by jaxlib's XLA (the XLA that wrote it,
  for a jax dump), its header stating the device assignment's partition and replica
  counts (jaxlib prints the module under a default config, which states none).
  InputError when jaxlib refuses it."""
  try:
    from jax._src.lib import xla_client  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise InputError(
      f"{label}: reading the proto needs jaxlib, which is not installed ({e})"
    ) from None
  try:
    text = str(xla_client.XlaComputation(module).as_hlo_text())
  except Exception as e:  # pylint: disable=broad-except  # jaxlib's own error types
    raise InputError(f"{label}: jaxlib cannot read the proto: {' '.join(str(e).split())}") from None
  if assignment is not None:
    head, sep, rest = text.partition("\n")
    name, comma, attributes = head.partition(",")
    counts = "" if "num_partitions=" in head else f" num_partitions={assignment.computation_count},"
    if assignment.replica_count > 1 and "replica_count=" not in head:
      counts += f" replica_count={assignment.replica_count},"
    if counts and name.startswith("HloModule "):
      head = name + "," + counts + (attributes if comma else "").rstrip(",")
      text = head.rstrip(",") + sep + rest
  return text
