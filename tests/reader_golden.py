"""What hlo_tools.hlo.reader reads from every committed real module, as a golden file.

tests/reader_golden.json holds, per module, its collective-permute records
(hlo_tools.model.collectives) in full and a digest of its structure (header
attributes, tables, computations, and each instruction's name, opcode, operands,
shape, position and raw attributes). It was written by the reader that came before
the present one (hlo_text.py at commit 8740ff5), so a test can check that the present
one reads the same. That reader refused jaxlib 0.10's `replica_groups=mesh[...],
device_ids=(...) {...}` (the train-step modules after optimizations and before async);
those six entries come from it with only its value scanner taught to step over the
`, device_ids=(...)` part (three lines), which no collective-permute record reads.

    python tests/reader_golden.py [--reader=PATH/hlo_text.py] [--update] [FILE ...]

--reader loads the reader to snapshot with from a file (e.g. an older hlo_text.py
taken with `git show REV:hlo_tools/hlo_text.py`); FILEs (default: every real module
of the repository) are added to or replaced in the golden file with --update.
"""

import argparse
import dataclasses
import hashlib
import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "reader_golden.json"


def real_modules():
  """Every committed module that JAX/XLA wrote: tests/fixtures (any depth), the pass
  dumps there, and the jax 0.11.2 sample."""
  fixtures = REPO / "tests" / "fixtures"
  out = sorted(fixtures.rglob("*.hlo"))
  out += [p for p in sorted(fixtures.rglob("*.txt")) if p.read_bytes()[:10] == b"HloModule "]
  return out


def key(path):
  return str(Path(path).resolve().relative_to(REPO))


def _instruction_row(instr):
  return [
    instr.name,
    instr.opcode,
    list(instr.operands),
    instr.shape.to_string(),
    instr.line,
    instr.col,
    bool(instr.is_root),
    list(instr.attributes.items()),
    instr.operand_text,
  ]


def structure(module):
  """A canonical, JSON-able listing of what the reader read."""
  return {
    "name": module.name,
    "attributes": list(module.attributes.items()),
    "entry": module.entry.name,
    "tables": {k: list(v) for k, v in module.tables.items()},
    "file_names": sorted(module.file_names.items()),
    "function_names": sorted(module.function_names.items()),
    "file_locations": sorted(module.file_locations.items()),
    "stack_frames": sorted(module.stack_frames.items()),
    "computations": [
      [
        c.name,
        c.is_entry,
        c.line,
        c.signature,
        c.execution_thread,
        c.root.name,
        [_instruction_row(i) for i in c.instructions],
      ]
      for c in module.computations
    ],
  }


def snapshot(module):
  from hlo_tools.model.collectives import collective_permutes  # pylint: disable=import-outside-toplevel

  records = [_as_recorded(dataclasses.asdict(r)) for r in collective_permutes(module)]
  text = json.dumps(structure(module), sort_keys=True, separators=(",", ":"))
  return {
    "records": json.loads(json.dumps(records)),  # tuples as lists, as stored
    "computations": len(module.computations),
    "instructions": module.instruction_count,
    "structure_sha256": hashlib.sha256(text.encode()).hexdigest(),
  }


def _as_recorded(record):
  """A record in the golden file's fields: the innermost loop's own trip count, as
  records held when it was written (the loop nest, and the conditional branch around
  a permute, are derived from the reader's facts since)."""
  loops = record.pop("loops", None)
  record.pop("trips_at_least", None)
  record.pop("branch", None)
  if loops is not None:
    record["trip_count"] = loops[0][2] if loops else None
  return record


def _load_reader(path):
  spec = importlib.util.spec_from_file_location("hlo_text_under_snapshot", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def main(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--reader", help="the hlo_text.py to snapshot with")
  parser.add_argument("--update", action="store_true", help="merge into the golden file")
  parser.add_argument("files", nargs="*")
  args = parser.parse_args(argv)
  if args.reader:
    reader = _load_reader(args.reader)
  else:
    from hlo_tools.hlo import reader  # pylint: disable=import-outside-toplevel
  golden = json.loads(GOLDEN.read_text()) if args.update and GOLDEN.exists() else {}
  for path in args.files or real_modules():
    golden[key(path)] = snapshot(reader.parse_hlo_file(str(path)))
    print(f"{key(path)}: {len(golden[key(path)]['records'])} collective-permutes", file=sys.stderr)
  GOLDEN.write_text(json.dumps(dict(sorted(golden.items())), indent=1) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
