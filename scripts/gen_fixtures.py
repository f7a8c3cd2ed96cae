#!/usr/bin/env python3
"""Regenerates the HLO fixtures in tests/fixtures/ (deviceless GPU compiles on the CPU).

    .venv/bin/python scripts/gen_fixtures.py [--out_dir=tests/fixtures] [--only=NAME ...]

Each fixture is one compile of a small example for an H200 topology:
  <name>.before_optimizations.hlo  the module XLA starts from (sync permutes, psums)
  <name>.before_async.hlo          module after XLA's collective-permute-combiner,
                                   i.e. what collective-backend-assigner sees (sync
                                   collective-permutes, final message sizes); taken
                                   as the input of async-collective-creator
  <name>.after_optimizations.hlo   the fully optimized module (async permutes)

Source locations (file paths, line numbers) are stripped so that the text does not
depend on where the repository is checked out or on edits to the Python code.
"""

import argparse
import json
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hlo_tools.errors import DumpError  # pylint: disable=wrong-import-position
from hlo_tools.hlo import module_config  # pylint: disable=wrong-import-position
from hlo_tools.model import dumps  # pylint: disable=wrong-import-position
from hlo_tools.ops import dump_compile, dump_target  # pylint: disable=wrong-import-position

# The module entering XLA's async-collective-creator: sync collective-permutes with
# final message sizes. It equals the module after collective-permute-combiner (and
# after collective-backend-assigner, which changes nothing by default), but unlike
# the combiner's snapshot it always exists: the combiner leaves no file when it has
# nothing to combine (a single permute), while a pipeline start is always dumped.
SNAPSHOT_PASS = "async-collective-creator"
SMALL_RING = {
  "seq_len": 1024,
  "num_heads": 4,
  "num_kv_heads": 2,
  "head_dim": 64,
  "dtype": "bf16",
  "causal": True,
  "backward": False,
  "batch": 1,
}

# name -> (source, topology, stages). Order is the order they are generated.
FIXTURES = {}
for _topo in ("1x1x8", "1x2x4", "2x2x4"):
  FIXTURES[f"ring_{_topo}"] = (
    {"kind": "ring", "config": SMALL_RING},
    _topo,
    ("before_async", "after_optimizations"),
  )
# What a user gets from jax.jit(f).lower(...).as_text(dialect="hlo"): no num_partitions
# in the header, scan loops without known_trip_count.
FIXTURES["ring_1x2x4"] = FIXTURES["ring_1x2x4"][:2] + (
  ("lowered", "before_async", "after_optimizations"),
)
# Non-causal (about 62 KB; the causal one, with its dynamic-bound chunk loops, is
# about 109 KB) with the same 3 permutes, all i -> i+1: K/V in the forward loop, K/V
# with the f32 gradient sums in the backward loop, the sums handed home after it.
FIXTURES["ring_bwd_1x2x4"] = (
  {"kind": "ring", "config": dict(SMALL_RING, backward=True, causal=False)},
  "1x2x4",
  ("before_async",),
)
# A non-cyclic shift (i -> i+1, no wrap-around): a permute that is not a ring.
FIXTURES["shift_1x2x4"] = (
  {
    "kind": "function",
    "function": "hlo_tools.programs.ring_attention:neighbour_shift",
    "args": ["1,1024,2,64:bf16:None,cp"],
    "out_spec": "None,cp",
  },
  "1x2x4",
  ("before_async", "after_optimizations"),
)
# The same shift on two GPUs: pairs {0,1}, the permute measured to hang XLA's
# NVSHMEM runtime (device 1 has no source and never reaches the barrier).
FIXTURES["shift_1x1x2"] = (
  {
    "kind": "function",
    "function": "hlo_tools.programs.ring_attention:neighbour_shift",
    "args": ["1,256,2,64:bf16:None,cp"],
    "out_spec": "None,cp",
  },
  "1x1x2",
  ("before_async",),
)

# The Llama-3-8B-shaped train step (hlo_tools/programs/train_step.py, its defaults:
# 2 layers, 65536 tokens, vocabulary 8192) on one host and across hosts, each with
# the mesh `hlo-tools dump --program=train_step` picks: tp inside a host, cp across.
# jaxlib 0.10 prints all-reduce replica groups and collectives_mode fields that the
# pinned XLA cannot read. Each compile with every pass dumped: about 25 s, 110 MB.
TRAIN_STEP_MESHES = {"1x1x8": "cp:4,tp:2", "1x2x8": "cp:2,tp:8", "1x4x4": "cp:4,tp:4"}
for _topo, _mesh in TRAIN_STEP_MESHES.items():
  FIXTURES[f"train_step_{_topo}"] = (
    {"kind": "program", "program": "train_step", "config": {}, "mesh": _mesh},
    _topo,
    ("before_optimizations", "before_async", "after_optimizations"),
  )

# Parallel shapes beside a ring (hlo_tools/programs/parallel_shapes.py), the smallest
# shapes that keep the structure: a GPipe pipeline (7 steps, a non-cyclic pp shift, a
# 4-step cp ring inside: 28 ring trips), dp x cp x tp on 4 hosts, a ring both ways,
# Ulysses all-to-all (no permute) and a scan over 4 rematerialized layers around an
# 8-step ring (the backward recomputes it).
_SHAPES = "hlo_tools.programs.parallel_shapes:"
for _name, _fn, _topo, _mesh, _args, _out in (
  (
    "pipeline_1x2x4",
    "pipeline_ring",
    "1x2x4",
    "pp:2,cp:4",
    ["6,64,32:f32:None,cp", "2,32,32:f32:pp"],
    "None,cp",
  ),
  (
    "dp_cp_tp_1x4x8",
    "dp_cp_tp_block",
    "1x4x8",
    "dp:2,cp:4,tp:4",
    ["2,64,32:f32:dp,cp", "32,64:f32:None,tp", "64,32:f32:tp,None"],
    ["None,tp", "tp,None"],
  ),
  ("bidir_1x1x8", "bidirectional_ring", "1x1x8", None, ["64,32:f32:cp", "32,32:f32"], "cp"),
  ("ulysses_1x1x8", "ulysses_attention", "1x1x8", None, ["64,8,16:bf16:cp"] * 3, "cp"),
  ("scan_remat_1x1x8", "scan_remat_ring", "1x1x8", None, ["64,32:f32:cp", "4,32,32:f32"], ""),
):
  FIXTURES[_name] = (
    {
      "kind": "function",
      "function": _SHAPES + _fn,
      "args": _args,
      "out_spec": _out,
      "check_vma": False,
    }
    | ({"mesh": _mesh} if _mesh else {}),
    _topo,
    ("before_async",),
  )

# K and V in fp8 rotated around a ring: a type the pinned NVSHMEM runtime cannot put.
FIXTURES["fp8_kv_ring_1x1x8"] = (
  {
    "kind": "function",
    "function": "hlo_tools.programs.pass_tests:kv_loop",
    "args": ["64,16:float8_e4m3fn:cp"] * 2,
    "out_spec": "cp",
  },
  "1x1x8",
  ("before_async",),
)

# A per-pass dump (what `hlo-tools dump --all_passes` writes), pruned to the snapshots
# that change a collective-permute line: the input of `hlo-tools diff --trace`.
# ring_product_grad's forward loop rotates 2 buffers and its backward loop 4, all with
# the same pairs and bytes: XLA's combiner must be followed per loop.
PASS_DUMPS = {
  "ring_product_grad_1x2x4": (
    {
      "kind": "function",
      "function": "hlo_tools.programs.pass_tests:ring_product_grad",
      "args": ["64,8:f32:cp"] * 3,
      "out_spec": "cp",
    },
    "1x2x4",
  ),
}

# A training script's --xla_dump_to folder (hlo_tools/programs/training_script.py): it
# jits init, train_step, eval_step and a metrics lambda, four programs of which the two
# steps hold ring permutes. Pruned to what the tools read: each program's stages, its
# module entering async-collective-creator, its config and buffer assignment; the
# "_pb" one also as XLA's protos (--xla_dump_hlo_as_proto), .hlo.pb beside the text.
SCRIPT_DUMPS = {
  "training_script_1x1x8": (
    {"kind": "script", "script": "hlo_tools.programs.training_script:run"},
    "1x1x8",
    False,
  ),
  "training_script_pb_1x1x8": (
    {"kind": "script", "script": "hlo_tools.programs.training_script:run"},
    "1x1x8",
    True,
  ),
}
_SCRIPT_KEEP = re.compile(
  r"(?:\.before_optimizations|_after_optimizations|\.config"
  r"|_after_optimizations-buffer-assignment"
  r"|\.after_[^.]+\.before_async-collective-creator)"
  r"\.(?:txt|pbtxt|hlo\.pb)$"
)


def generate_script_dump(name, out_dir, target_config=dump_target.DEFAULT_TARGET_CONFIG):
  """Writes <name>.xla_dump/, XLA's own folder pruned (SCRIPT_DUMPS); returns its path."""
  source, topology, as_proto = SCRIPT_DUMPS[name]
  target = dump_target.Target(topology=topology, target_config=target_config)
  target.validate()
  dest = os.path.join(out_dir, f"{name}.xla_dump")
  with tempfile.TemporaryDirectory(prefix="gen-fixtures-") as work_dir:
    dump_compile.compile_in_child(
      work_dir,
      source,
      target,
      pass_re="async-collective-creator",
      progress=False,
      as_proto=as_proto,
    )
    xla_dir = os.path.join(work_dir, dumps.XLA_DUMP_SUBDIR)
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    for fname in sorted(os.listdir(xla_dir)):
      if not _SCRIPT_KEEP.search(fname) or not fname.startswith("module_"):
        continue
      src = os.path.join(xla_dir, fname)
      if fname.endswith(".hlo.pb"):
        shutil.copyfile(src, os.path.join(dest, fname))
        continue
      with open(src) as f:
        text = f.read()
      text = blank_dump_path(text) if fname.endswith(".pbtxt") else normalize(text)
      with open(os.path.join(dest, fname), "w") as f:
        f.write(text)
  return dest


def normalize(text):
  """Drops source locations: the FileNames..StackFrames tables and their references."""
  text = re.sub(r"\nFileNames\n.*?\nStackFrames\n(?:\d+ \{[^\n]*\}\n)*", "\n", text, flags=re.S)
  text = re.sub(r" stack_frame_id=\d+", "", text)
  text = re.sub(
    r' source_file="[^"]*"| source_line=\d+| source_end_line=\d+'
    r"| source_column=\d+| source_end_column=\d+",
    "",
    text,
  )
  return text


def blank_dump_path(text):
  """XLA's config records --xla_dump_to; a fixture must not depend on where it was made."""
  return re.sub(r'^(\s*xla_dump_to: )".*"$', r'\1""', text, flags=re.M)


def generate(name, out_dir, target_config=dump_target.DEFAULT_TARGET_CONFIG):
  """Compiles one fixture and writes its files; returns the paths written."""
  source, topology, stages = FIXTURES[name]
  target = dump_target.Target(topology=topology, target_config=target_config)
  target.validate()
  written = []
  with tempfile.TemporaryDirectory(prefix="gen-fixtures-") as work_dir:
    info = dump_compile.compile_in_child(
      work_dir, source, target, pass_re=".*" if "before_async" in stages else None, progress=False
    )
    xla_dir = os.path.join(work_dir, dumps.XLA_DUMP_SUBDIR)
    modules = dumps.index_xla_dump(xla_dir)
    key = dumps.main_module(modules, info.get("module_name"))
    for stage in stages:
      if stage == "before_async":
        text = dumps.pass_snapshot_text(xla_dir, SNAPSHOT_PASS, key, when="before")
      elif stage == "lowered":
        with open(os.path.join(work_dir, dump_compile.LOWERED_FILE)) as f:
          text = f.read()
      else:
        with open(os.path.join(xla_dir, modules[key]["stages"][stage])) as f:
          text = f.read()
      path = os.path.join(out_dir, f"{name}.{stage}.hlo")
      with open(path, "w") as f:
        f.write(normalize(text))
      written.append(path)
      # XLA's config of the module beside each stage: its device assignment.
      config = module_config.xla_dump_config(xla_dir, key)
      if config and stage != "lowered":
        with open(config) as f:
          config_text = blank_dump_path(f.read())
        with open(module_config.sidecar_path(path), "w") as f:
          f.write(config_text)
        written.append(module_config.sidecar_path(path))
  return written


def generate_pass_dump(name, out_dir, target_config=dump_target.DEFAULT_TARGET_CONFIG):
  """Writes <name>.passes/ (manifest.json + xla_dump/), pruned; returns its path."""
  from hlo_tools.ops import diff  # pylint: disable=import-outside-toplevel

  source, topology = PASS_DUMPS[name]
  target = dump_target.Target(topology=topology, target_config=target_config)
  target.validate()
  dest = os.path.join(out_dir, f"{name}.passes")
  with tempfile.TemporaryDirectory(prefix="gen-fixtures-") as work_dir:
    info = dump_compile.compile_in_child(work_dir, source, target, pass_re=".*", progress=False)
    xla_dir = os.path.join(work_dir, dumps.XLA_DUMP_SUBDIR)
    modules = dumps.index_xla_dump(xla_dir)
    key = dumps.main_module(modules, info.get("module_name"))
    module = modules[key]
    keep = list(module["stages"].values())
    last = None
    for snap in module["passes"]:
      with open(os.path.join(xla_dir, snap["file"])) as f:
        sig = diff.signature(f.read())
      if sig != last:
        keep.append(snap["file"])
        last = sig
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(os.path.join(dest, dumps.XLA_DUMP_SUBDIR))
    for fname in keep:
      with open(os.path.join(xla_dir, fname)) as f:
        # The trace never reads metadata; without it the fixture is half the size.
        text = re.sub(r", metadata=\{[^{}]*\}", "", normalize(f.read()))
      with open(os.path.join(dest, dumps.XLA_DUMP_SUBDIR, fname), "w") as f:
        f.write(text)
    config = module_config.xla_dump_config(xla_dir, key)
    if config:  # the module's device assignment, for every stage and snapshot
      with open(config) as f:
        text = blank_dump_path(f.read())
      with open(os.path.join(dest, dumps.XLA_DUMP_SUBDIR, os.path.basename(config)), "w") as f:
        f.write(text)
    with open(os.path.join(dest, "manifest.json"), "w") as f:
      json.dump(
        {
          "source": source,
          "target": target.describe() | {"target_config": None},
          "versions": info.get("versions"),
          "main_module": key,
          "xla_dump_dir": dumps.XLA_DUMP_SUBDIR,
          "pruned": "only snapshots that change a collective-permute line",
        },
        f,
        indent=1,
      )
  return dest


def main(argv):
  p = argparse.ArgumentParser(prog=argv[0], description=__doc__.split("\n\n")[0])
  p.add_argument(
    "--out_dir",
    default=os.path.join(
      os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fixtures"
    ),
  )
  p.add_argument(
    "--only",
    action="append",
    choices=sorted(FIXTURES) + sorted(PASS_DUMPS) + sorted(SCRIPT_DUMPS),
    help="generate only these fixtures (repeatable)",
  )
  p.add_argument("--target_config", default=dump_target.DEFAULT_TARGET_CONFIG)
  args = p.parse_args(argv[1:])
  os.makedirs(args.out_dir, exist_ok=True)
  for name in args.only or list(FIXTURES) + list(PASS_DUMPS) + list(SCRIPT_DUMPS):
    try:
      if name in SCRIPT_DUMPS:
        print(generate_script_dump(name, args.out_dir, args.target_config), file=sys.stderr)
        continue
      if name in PASS_DUMPS:
        print(generate_pass_dump(name, args.out_dir, args.target_config), file=sys.stderr)
        continue
      for path in generate(name, args.out_dir, args.target_config):
        print(f"{path} ({os.path.getsize(path)} bytes)", file=sys.stderr)
    except DumpError as e:
      print(f"{argv[0]}: {name}: {e}", file=sys.stderr)
      return 2
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
