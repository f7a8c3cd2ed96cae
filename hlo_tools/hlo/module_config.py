"""XLA's module config beside a module: the device each partition runs on, and the
collective flags the compile ran with.

XLA's GPU compiler writes the module's HloModuleConfigProto, in protobuf text
format, when it starts the module's passes (DumpHloConfigIfEnabled,
xla/service/dump.cc:844 and xla/service/gpu/gpu_compiler.cc:2084 at openxla/xla
3cc8846c; xla_dump_full_hlo_config is on by default, debug_options_flags.cc:205).

Where the config of a module file is (find_config), first found wins:
  1. the sidecar `<stem>.config.pbtxt`, stem the file's path less `.hlo.pb`, `.hlo`,
     `.txt` or `.pb`:
     `after_optimizations.config.pbtxt` beside `after_optimizations.hlo`. This is
     the name `hlo-tools dump` gives its copy beside each stage file it writes, and
     the fixtures' (`ring.after_optimizations.config.pbtxt`).
  2. in an XLA dump folder, for any file of module `module_NNNN.NAME` (a stage, a
     pass snapshot): XLA's own `module_NNNN.NAME.config.pbtxt` beside it.
  3. for a stage file of an `hlo-tools dump` directory made without the sidecar:
     its manifest's main module's config under xla_dump/.

What is read (ModuleConfig): static_device_assignment, the top-level replica_count
and num_partitions, and two debug options, xla_gpu_collective_permute_mode and
xla_gpu_experimental_enable_nvshmem. The reader is a small, strict protobuf
text-format reader: every other field is parsed and skipped; a syntax error, a
field given twice, or a device assignment XLA would refuse is an InputError,
`file:line: message`.

partition_to_device is indexed by XLA's flattened id, replica * computation_count +
partition (xla/service/collective_ops_utils.cc:423 at 3cc8846c); with one replica,
the partition. Its value is the device id of computation_devices[partition]
.replica_device_ids[replica] (DeviceAssignment::Serialize,
xla/service/computation_placer.cc:95).
"""

import dataclasses
import json
import os
import re
from collections.abc import Iterator
from typing import NoReturn

from hlo_tools import bounded_input
from hlo_tools.errors import InputError

SUFFIX = ".config.pbtxt"
_MODULE_FILE_RE = re.compile(r"^module_\d+\.")
_TOKEN_RE = re.compile(
  r"""
    (?P<space>[ \t\r\f\v]+) | (?P<newline>\n) | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fFuUlL]*)
  | (?P<word>[-]?[A-Za-z_][\w]*)
  | (?P<punct>[{}:\[\],;])
  """,
  re.X,
)
_BOOLS = {
  "true": True,
  "True": True,
  "t": True,
  "1": True,
  "false": False,
  "False": False,
  "f": False,
  "0": False,
}


@dataclasses.dataclass(frozen=True)
class ModuleConfig:
  """What the tools take from a module's config; None where the config does not say."""

  path: str  # the config file, as errors name it
  replica_count: int
  computation_count: int
  # Flattened id (replica * computation_count + partition) -> device id.
  partition_to_device: tuple[int, ...] | None
  collective_permute_mode: str | None  # e.g. "COLLECTIVES_PRIVATE_MEMORY"
  nvshmem_enabled: bool | None


# ---------------------------------------------------------------------------------------
# Where the config is


def sidecar_path(module_path: str) -> str:
  """`<stem>.config.pbtxt` for the module file at `module_path` (stem: less .hlo.pb,
  .hlo, .txt or .pb)."""
  stem = str(module_path)
  for suffix in (".hlo.pb", ".hlo", ".txt", ".pb"):
    if stem.endswith(suffix):
      stem = stem[: -len(suffix)]
      break
  return stem + SUFFIX


# What a config's messages call it, and its own size bound (bounded_input.side_limit).
WHAT = "a module config"


def _beside(path: str) -> str | None:
  """`path` where a config within its limit is; None where nothing is; InputError
  where something else is (a FIFO, device, directory, dangling link: refused, never
  skipped, since the driver would read it)."""
  return bounded_input.found_beside(path, WHAT)


def xla_dump_config(xla_dir: str, module_key: str) -> str | None:
  """XLA's config of module `module_key` (`module_NNNN.NAME`) in its dump folder."""
  return _beside(os.path.join(xla_dir, module_key + SUFFIX))


def find_config(module_path: str) -> str | None:
  """The config file of the module at `module_path` (see the module docstring), or None.
  Something at a config's name that is not a regular file within the limit is an
  InputError, not skipped."""
  if not module_path or str(module_path) == "-":
    return None
  path = _beside(sidecar_path(module_path))
  if path:
    return path
  directory, base = os.path.split(str(module_path))
  if _MODULE_FILE_RE.match(base):
    # module_0001.jit_f.sm_9.0a_gpu_after_optimizations.txt: the name may hold dots,
    # so each prefix ending before a dot is tried, the longest first.
    for cut in reversed([m.start() for m in re.finditer(r"\.", base)][1:]):
      found = xla_dump_config(directory, base[:cut])
      if found:
        return found
  return _manifest_config(directory, base)


def _manifest_config(directory: str, base: str) -> str | None:
  """XLA's config of the main module of the `hlo-tools dump` directory holding stage
  file `base`, or None."""
  manifest = read_manifest(directory)  # InputError for a FIFO or device at its name
  if manifest is None:
    return None
  try:
    key, sub = manifest["main_module"], manifest.get("xla_dump_dir") or "xla_dump"
    is_stage = base in manifest["stages"].values()
  except (KeyError, TypeError, AttributeError):
    return None
  if not is_stage or not isinstance(key, str) or not isinstance(sub, str) or "/" in key:
    return None
  return xla_dump_config(os.path.join(directory, sub), key)


def read_manifest(directory: str) -> dict | None:
  """`hlo-tools dump`'s manifest.json in `directory`, read as a side input (bounded in
  size and time); None where there is none or it is not a JSON object. Something
  at its name that is not a regular file is an InputError, not skipped."""
  path = bounded_input.found_beside(os.path.join(directory, "manifest.json"), "a dump's manifest")
  if path is None:
    return None
  data = bounded_input.read_side_input(path, "a dump's manifest")
  try:
    manifest = json.loads(data)
  except ValueError:
    return None  # not `hlo-tools dump`'s: the folder is read as XLA wrote it
  return manifest if isinstance(manifest, dict) else None


def read_config(path: str, max_bytes: int | None = None, label: str | None = None) -> ModuleConfig:
  """Reads and parses the config at `path`; InputError (one line, naming `label`,
  default the path) when bad or over its limit (the smaller of max_bytes and a
  config's own, bounded_input.side_limit)."""
  label = str(label or path)
  data = bounded_input.read_side_input(path, WHAT, max_bytes, label)
  if not data.strip():  # XLA never writes an empty one: a cut or failed copy
    raise InputError(f"{label}: empty file, no module config")
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise InputError(f"{label}:{line}: not UTF-8 text (byte {e.start})") from None
  return parse_config(text, label)


def for_module(module_path: str, max_bytes: int | None = None) -> ModuleConfig | None:
  """The parsed config of the module at `module_path`, or None where there is none."""
  path = find_config(module_path)
  return None if path is None else read_config(path, max_bytes)


# ---------------------------------------------------------------------------------------
# Text format


class _Field:
  """A scalar (value: its text) or a message (fields: what its braces hold)."""

  __slots__ = ("name", "value", "fields", "line", "kind")

  def __init__(
    self, name: str, line: int, kind: str, value: str = "", fields: "list[_Field] | None" = None
  ) -> None:
    self.name, self.value, self.line, self.kind = name, value, line, kind
    self.fields = fields or []


def _tokens(text: str, label: str) -> Iterator[tuple[str, str, int]]:
  """(kind, text, line) of each token, then ("end", "", last line)."""
  line, pos = 1, 0
  while pos < len(text):
    m = _TOKEN_RE.match(text, pos)
    if not m:
      raise InputError(f"{label}:{line}: unexpected character {text[pos]!r}")
    kind, pos = m.lastgroup or "", m.end()
    if kind == "newline":
      line += 1
    elif kind not in ("space", "comment"):
      yield kind, m.group(), line
  yield "end", "", line - 1 if text.endswith("\n") and line > 1 else line  # the last line


class _Parser:
  def __init__(self, text: str, label: str) -> None:
    self.label = label
    self.tokens = _tokens(text, label)
    self.open: list[tuple[str, int]] = []  # (name, line) of each block the parser is inside
    self.advance()

  def advance(self) -> None:
    self.kind, self.text, self.line = next(self.tokens)

  def fail(self, message: str, line: int | None = None) -> NoReturn:
    if self.kind == "end" and self.open:  # a cut file: say where it was cut
      name, opened = self.open[-1]
      message = f"the file ends inside '{name}' (opened at line {opened})"
    raise InputError(f"{self.label}:{line or self.line}: {message}")

  def _found(self) -> str:
    return "the end of the file" if self.kind == "end" else repr(self.text)

  def message(self, nested: bool = False) -> list[_Field]:
    """Fields up to the closing brace (nested) or the end of the file."""
    fields: list[_Field] = []
    while True:
      if self.kind == "end":
        if nested:
          self.fail("the file ends inside a block")
        return fields
      if self.text == "}" and self.kind == "punct":
        if not nested:
          self.fail("'}' without a block to close")
        self.open.pop()
        self.advance()
        return fields
      fields += self.field()
      if self.text in (",", ";") and self.kind == "punct":
        self.advance()

  def field(self) -> list[_Field]:
    if self.kind != "word" or self.text.startswith("-"):
      self.fail(f"expected a field name, found {self._found()}")
    name, line = self.text, self.line
    self.advance()
    colon = self.text == ":" and self.kind == "punct"
    if colon:
      self.advance()
    if self.text == "{" and self.kind == "punct":
      self.open.append((name, line))
      self.advance()
      return [_Field(name, line, "message", fields=self.message(nested=True))]
    if not colon:
      self.fail(f"expected ':' or '{{' after '{name}', found {self._found()}")
    if self.text == "[" and self.kind == "punct":
      return self.scalar_list(name)
    return [self.scalar(name)]

  def scalar(self, name: str) -> _Field:
    if self.kind not in ("string", "number", "word"):
      self.fail(f"expected a value for '{name}', found {self._found()}")
    field = _Field(name, self.line, self.kind, value=self.text)
    self.advance()
    while field.kind == "string" and self.kind == "string":  # "a" "b" is one string
      self.advance()
    return field

  def scalar_list(self, name: str) -> list[_Field]:
    self.advance()
    values: list[_Field] = []
    while not (self.text == "]" and self.kind == "punct"):
      values.append(self.scalar(name))
      if self.text == "," and self.kind == "punct":
        self.advance()
      elif not (self.text == "]" and self.kind == "punct"):
        self.fail(f"expected ',' or ']' in the list of '{name}', found {self._found()}")
    self.advance()
    return values


# ---------------------------------------------------------------------------------------
# The fields the tools read


class _Reader:
  """Typed access to parsed fields, each error naming the field's line."""

  def __init__(self, label: str) -> None:
    self.label = label

  def fail(self, line: int, message: str) -> NoReturn:
    raise InputError(f"{self.label}:{line}: {message}")

  def one(self, fields: list[_Field], name: str, kind: str) -> _Field | None:
    """The field `name` (None if absent); a second one is an error."""
    found = [f for f in fields if f.name == name]
    if len(found) > 1:
      self.fail(found[1].line, f"'{name}' given twice (first at line {found[0].line})")
    if found and (found[0].kind == "message") != (kind == "message"):
      self.fail(found[0].line, f"'{name}' must be {'a block' if kind == 'message' else 'a value'}")
    return found[0] if found else None

  def integer(self, field: _Field) -> int:
    if field.kind != "number" or not re.fullmatch(r"[-+]?\d+", field.value):
      self.fail(field.line, f"'{field.name}' must be an integer, not {field.value!r}")
    value = int(field.value)
    if not -(1 << 63) <= value < 1 << 63:  # the proto's fields are int64
      self.fail(field.line, f"'{field.name}' {field.value} does not fit in 64 bits")
    return value

  def int_field(self, fields: list[_Field], name: str) -> tuple[int, int] | None:
    """(value, line) of the integer field `name`, None if absent."""
    field = self.one(fields, name, "scalar")
    return None if field is None else (self.integer(field), field.line)

  def enum_field(self, fields: list[_Field], name: str) -> str | None:
    field = self.one(fields, name, "scalar")
    if field is not None and field.kind == "string":
      self.fail(field.line, f"'{name}' must be an enum name or number, not a string")
    return None if field is None else field.value

  def bool_field(self, fields: list[_Field], name: str) -> bool | None:
    field = self.one(fields, name, "scalar")
    if field is None:
      return None
    if field.kind == "string" or field.value not in _BOOLS:
      self.fail(field.line, f"'{name}' must be true or false, not {field.value!r}")
    return _BOOLS[field.value]


def parse_config(text: str, label: str) -> ModuleConfig:
  """Parses an HloModuleConfigProto in text format (see the module docstring)."""
  top = _Parser(text, label).message()
  reader = _Reader(label)
  replicas = reader.int_field(top, "replica_count")
  partitions = reader.int_field(top, "num_partitions")
  debug = reader.one(top, "debug_options", "message")
  debug_fields = debug.fields if debug else []
  assignment = reader.one(top, "static_device_assignment", "message")
  replica_count, computation_count = (
    replicas[0] if replicas else 1,
    partitions[0] if partitions else 1,
  )
  devices: tuple[int, ...] | None = None
  if assignment is not None:
    replica_count, computation_count, devices = _device_assignment(reader, assignment)
    for given, name, want in (
      (replicas, "replica_count", replica_count),
      (partitions, "num_partitions", computation_count),
    ):
      if given and given[0] > 0 and given[0] != want:
        reader.fail(
          given[1],
          f"{name} {given[0]} differs from the device assignment's {want} (line {assignment.line})",
        )
  return ModuleConfig(
    path=label,
    replica_count=replica_count,
    computation_count=computation_count,
    partition_to_device=devices,
    collective_permute_mode=reader.enum_field(debug_fields, "xla_gpu_collective_permute_mode"),
    nvshmem_enabled=reader.bool_field(debug_fields, "xla_gpu_experimental_enable_nvshmem"),
  )


def _device_assignment(reader: _Reader, block: _Field) -> tuple[int, int, tuple[int, ...]]:
  """(replica_count, computation_count, devices by flattened id): the checks of XLA's
  DeviceAssignment::Deserialize (computation_placer.cc:111), and distinct devices."""
  fields = block.fields
  counts: list[int] = []
  for name in ("replica_count", "computation_count"):
    value = reader.int_field(fields, name)
    if value is None or value[0] <= 0:
      reader.fail(
        value[1] if value else block.line,
        f"static_device_assignment needs {name} > 0, "
        f"{'got ' + str(value[0]) if value else 'none given'}",
      )
    counts.append(value[0])
  replicas, computations = counts
  rows = [f for f in fields if f.name == "computation_devices"]
  if len(rows) != computations:
    reader.fail(
      rows[computations].line if len(rows) > computations else block.line,
      f"static_device_assignment has {len(rows)} computation_devices for "
      f"computation_count {computations}",
    )
  by_id = [-1] * (replicas * computations)  # each set below: rows and ids are counted
  seen: dict[int, int] = {}
  for partition, row in enumerate(rows):
    if row.kind != "message":
      reader.fail(row.line, "'computation_devices' must be a block")
    ids = [f for f in row.fields if f.name == "replica_device_ids"]
    if len(ids) != replicas:
      reader.fail(
        row.line,
        f"computation_devices {partition} has {len(ids)} "
        f"replica_device_ids for replica_count {replicas}",
      )
    for replica, field in enumerate(ids):
      device = reader.integer(field)
      if device < 0:
        reader.fail(field.line, f"device id {device} is negative")
      if device in seen:
        reader.fail(field.line, f"device {device} is given twice (first at line {seen[device]})")
      seen[device] = field.line
      by_id[replica * computations + partition] = device
  return replicas, computations, tuple(by_id)
