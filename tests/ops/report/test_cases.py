"""hlo_tools.ops.report.cases: the cases a report covers, each a module or program on a
topology: the embedded default grid, a FILE or DIR, stdin, a module:function."""

import json
import os

import pytest

import hlo_tools.commands.report
from hlo_tools import selection
from hlo_tools.errors import InputError
from hlo_tools.ops import report
from hlo_tools.ops.report import cases
from hlo_tools.ops.report.cases import (
  DEFAULT_GRID,
  DEFAULT_TRAIN_STEPS,
  Request,
  plan_cases,
  train_step_case,
)
from hlo_tools.ops.report.text import summary_text

from conftest import FIXTURES

RING = FIXTURES / "ring_1x1x8.before_async.hlo"
PASSES = FIXTURES / "ring_product_grad_1x2x4.passes"  # its manifest: compiled for 1x2x4


def test_topology_arg_is_the_cores_spec_compiled_for_its_shape():
  compile_topology, spec, parsed = cases.parse_topology_arg("1x9x8:nvl72")
  assert (compile_topology, spec, parsed.num_devices) == ("1x9x8", "1x9x8:nvl72", 72)
  with pytest.raises(selection.SelectionError, match="topology spec '2x4'"):
    cases.parse_topology_arg("2x4")


def test_ring_case_is_named_by_topology_and_tokens():
  config = dict(cases.DEFAULTS, seq_len=131072)
  case = cases.ring_case(config, "1x9x8:nvl72")
  assert case.id == "1x9x8_nvl72-128K"
  assert case.title == "ring attention, 128K tokens, on 1x9x8:nvl72"
  assert (case.topology, case.compile_topology) == ("1x9x8:nvl72", "1x9x8")
  assert case.source == {"kind": "ring", "config": config} and case.config is config
  # A length that is not whole K tokens is given as it is.
  assert cases.ring_case(dict(config, seq_len=1000), "1x1x8").id == "1x1x8-1000"


def test_train_step_case_names_its_mesh():
  case = train_step_case("1x2x8", "tp:2,cp:8", 131072)
  assert case.id == "train_step-1x2x8-tp2_cp8-128K"
  assert case.source == {
    "kind": "program",
    "program": "train_step",
    "config": {"seq_len": 131072},
    "mesh": "tp:2,cp:8",
  }
  # No mesh given: dump's default for the topology, and no mesh in the source.
  assert "mesh" not in train_step_case("1x1x8").source


def test_an_explicit_ring_is_one_case_on_the_default_topology():
  [case] = plan_cases(Request(config=dict(cases.DEFAULTS, seq_len=4096), explicit=True))
  assert (case.id, case.topology) == ("1x2x4-4K", cases.DEFAULT_TOPOLOGY)


def test_a_file_is_one_case_named_after_it():
  [case] = plan_cases(Request(source=str(RING), topology="1x1x8"))
  assert case.id == "ring_1x1x8.before_async.hlo" and case.title == f"{RING} on 1x1x8"
  assert (case.path, case.label) == (str(RING), str(RING))
  assert case.parsed.num_devices == 8 and case.source is None
  # No --topology on a file: the driver derives it from the module later.
  [derived] = plan_cases(Request(source=str(RING)))
  assert derived.topology is None and derived.parsed is None


def test_stdin_is_named_stdin(tmp_path):
  copy = tmp_path / "stdin-copy.hlo"
  copy.write_text(RING.read_text())
  [case] = plan_cases(Request(source="-", stdin_path=str(copy), topology="1x1x8"))
  assert (case.id, case.label, case.title) == ("stdin", "<stdin>", "<stdin> on 1x1x8")


def test_a_dump_directory_takes_its_manifests_topology(capsys):
  [case] = plan_cases(Request(source=str(PASSES)))
  assert case.topology == "1x2x4" and case.id == "ring_product_grad_1x2x4.passes"
  assert "no --topology; using 1x2x4, the topology the dump was compiled for" in (
    capsys.readouterr().err
  )
  # --devices-per-host would place a module whose topology is not known: this one's is.
  with pytest.raises(InputError, match="was compiled for 1x2x4 \\(its manifest\\)"):
    plan_cases(Request(source=str(PASSES), devices_per_host=4, quiet=True))


def test_neither_a_path_nor_a_function_is_refused(tmp_path):
  with pytest.raises(InputError, match="no such file or directory, and not module:function"):
    plan_cases(Request(source=str(tmp_path / "nothing.hlo")))


def test_a_function_is_compiled_for_the_topology():
  source = {"kind": "function", "function": "pkg.mod:fn", "args": ["1024:f32:cp"]}
  [case] = plan_cases(Request(source="pkg.mod:fn", topology="1x1x8", function_source=source))
  assert (case.id, case.title, case.source) == ("pkg.mod_fn", "pkg.mod:fn on 1x1x8", source)
  assert case.compile_topology == "1x1x8" and case.path is None
  assert os.sep not in case.id


def test_embedded_default_is_a_grid():
  args = hlo_tools.commands.report._parser("hlo-tools report").parse_args([])
  config, explicit = hlo_tools.commands.report._config("hlo-tools report", args)
  assert not explicit and config["seq_len"] == 131072 and config["num_heads"] == 32
  cases = plan_cases(hlo_tools.commands.report.request_for(args, config, explicit))
  rings = [c for c in cases if c.source["kind"] == "ring"]
  assert [(c.topology, c.config["seq_len"]) for c in rings] == list(DEFAULT_GRID)
  # Beside the ring, the train step on one host and across hosts (its layouts:
  # test_default_grid_holds_the_seed_layout).
  assert [(c.source.get("program"), c.topology) for c in cases[len(rings) :]] == [
    ("train_step", t) for t, _, _ in DEFAULT_TRAIN_STEPS
  ]
  args = hlo_tools.commands.report._parser("hlo-tools report").parse_args(["--topology=1x1x8"])
  config, explicit = hlo_tools.commands.report._config("hlo-tools report", args)
  [case] = plan_cases(hlo_tools.commands.report.request_for(args, config, explicit))
  assert case.topology == "1x1x8" and case.config["seq_len"] == 131072


PROG = "hlo-tools report"


def _default_cases():
  args = hlo_tools.commands.report._parser(PROG).parse_args([])
  config, explicit = hlo_tools.commands.report._config(PROG, args)
  return plan_cases(hlo_tools.commands.report.request_for(args, config, explicit))


def test_default_grid_holds_the_seed_layout():
  cases = [c for c in _default_cases() if c.source.get("program") == "train_step"]
  seed = [c for c in cases if c.source.get("mesh") == "tp:2,cp:8"]
  # tp across the two hosts, the ring over the 8 GPUs of each, at 64K to 256K tokens.
  assert [(c.topology, c.source["config"]["seq_len"]) for c in seed] == [
    ("1x2x8", 65536),
    ("1x2x8", 131072),
    ("1x2x8", 262144),
  ]
  assert [c.title for c in seed] == [
    f"Llama train step (tp 2 x cp 8), {n} tokens, on 1x2x8" for n in ("64K", "128K", "256K")
  ]
  # Beside it, the layouts that were there: one host, and the ring across hosts.
  assert [c.title for c in cases if c not in seed] == [
    "Llama train step (cp 4 x tp 2), 64K tokens, on 1x1x8",
    "Llama train step (cp 2 x tp 8), 64K tokens, on 1x2x8",
  ]
  assert len({c.id for c in _default_cases()}) == len(_default_cases())


@pytest.mark.long
def test_seed_layout_keeps_the_ring_inside_each_host(tmp_path):
  # The seed's mesh order (tp slowest, cp over consecutive ids) on 2 hosts x 4, small
  # shapes: every edge of every permute stays on one host's NVLink.
  case = train_step_case("1x2x4", "tp:2,cp:4", 4096)
  case.source["config"].update(
    num_layers=1, hidden=256, mlp=512, vocab=256, num_heads=4, num_kv_heads=2, head_dim=64
  )
  data = report.build([case], tmp_path / "r", progress=False)
  [entry] = data["cases"]
  assert entry["verify_passed"] and entry["collective_permutes"]
  assert all(
    {k: v for k, v in p["edges_by_class"].items() if v} == {"nvlink": 8}
    for p in entry["collective_permutes"]
  )
  manifest = json.loads((tmp_path / "r" / case.id / "dump" / "manifest.json").read_text())
  assert list(manifest["mesh"].items()) == [("tp", 2), ("cp", 4)]
  assert "Llama train step (tp 2 x cp 4), 4K tokens, on 1x2x4: per step" in summary_text(data)
