"""hlo_tools.commands.common: what every command shares (its parser, the topology it
is given or finds, the modules FILE or DIR:STAGE names, its output files)."""

import argparse
import json
import os
import shutil
import threading

import pytest

from hlo_tools import cli
from hlo_tools.commands import common
from hlo_tools.errors import InputError

from conftest import FIXTURES

RING = FIXTURES / "ring_1x2x4.before_async.hlo"


def run(capsys, *argv):
  rc = cli.main(["explain", *map(str, argv)])
  out, err = capsys.readouterr()
  return rc, out, err


def test_file_of_a_dump_takes_the_topology_of_its_manifest(tmp_path, capsys):
  """A module inside an `hlo-tools dump` directory is explained on the topology the
  dump was compiled for (its manifest.json), which the module text does not carry."""
  dump_dir = tmp_path / "dump"
  shutil.copytree(FIXTURES / "ring_product_grad_1x2x4.passes", dump_dir)
  manifest = json.loads((dump_dir / "manifest.json").read_text())
  manifest["target"]["topology"] = "2x1x4"
  (dump_dir / "manifest.json").write_text(json.dumps(manifest))
  module = dump_dir / "ring.hlo"
  shutil.copyfile(FIXTURES / "ring_1x1x8.before_async.hlo", module)
  rc, out, err = run(capsys, module, "--format=json")
  # A file the manifest does not list has no config of its own: no map.
  assert rc == 0 and json.loads(out)["topology"] == "2x1x4"
  assert "using 2x1x4, the topology the dump was compiled for" in err
  rc, out, _ = run(capsys, module, "--devices-per-host=8", "--format=json")
  assert rc == 0 and json.loads(out)["topology"] == "1x1x8"


# ---------------------------------------------------------------------------------------
# The parser.


def test_a_usage_error_is_an_input_error_naming_the_program():
  parser = common.parser_for("hlo-tools x", "Does x.\n\nMore about x.")
  assert parser.description == "Does x."
  parser.add_argument("--n", type=int)
  with pytest.raises(InputError, match=r"^hlo-tools x: unrecognized arguments: --bogus$"):
    parser.parse_args(["--bogus"])
  with pytest.raises(InputError, match="argument --n: invalid int value: 'two'"):
    parser.parse_args(["--n=two"])


def test_run_command_parses_after_the_program_name():
  parser = common.parser_for("hlo-tools x", "Does x.")
  parser.add_argument("word")
  assert common.run_command(parser, ["hlo-tools x", "seven"], lambda a: len(a.word)) == 5


def test_function_source_from_the_shared_flags():
  parser = common.parser_for("hlo-tools x", "Does x.")
  common.add_function_flags(parser, "target.pbtxt")
  args = parser.parse_args(["--arg=8,4:f32:cp", "--arg=4:bf16"])
  assert common.function_source(args, "mod:fn") == {
    "kind": "function",
    "function": "mod:fn",
    "args": ["8,4:f32:cp", "4:bf16"],
    "out_spec": "cp",
    "check_vma": True,
  }
  args = parser.parse_args(
    ["--out_spec=cp", "--out_spec=", "--global", "--mesh=cp:4,tp:2", "--nocheck_vma"]
  )
  source = common.function_source(args, "mod:fn")
  assert source["out_spec"] == ["cp", ""] and source["check_vma"] is False
  assert source["global"] is True and source["mesh"] == "cp:4,tp:2"
  assert args.target_config == "target.pbtxt"


# ---------------------------------------------------------------------------------------
# The topology: given, found in a dump's manifest, or left to nvshmem-opt.


def topology_args(topology=None, devices_per_host=None):
  return argparse.Namespace(topology=topology, devices_per_host=devices_per_host)


def test_given_topology_and_devices_per_host_exclude_each_other():
  args = topology_args("1x2x4", 4)
  with pytest.raises(InputError, match="--devices-per-host and --topology: give one"):
    common.given_topology(args, str(RING), str(RING), "hlo-tools explain")
  assert common.given_topology(topology_args("1x2x4"), "f", str(RING), "p") == "1x2x4"
  # Only the hosts' size: the topology is nvshmem-opt's to derive.
  assert common.given_topology(topology_args(None, 4), "f", str(RING), "p") is None


def test_given_topology_is_the_manifests_beside_the_file(tmp_path, capsys):
  module = tmp_path / "after_optimizations.hlo"
  shutil.copyfile(RING, module)
  assert common.given_topology(topology_args(), str(module), str(module), "p") is None
  (tmp_path / "manifest.json").write_text(json.dumps({"target": {"topology": "2x1x4"}}))
  assert common.given_topology(topology_args(), str(module), str(module), "p") == "2x1x4"
  assert "2x1x4" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# The modules FILE names.


def test_a_regular_text_file_is_read_by_the_operation(tmp_path):
  with common.module_inputs(str(RING), 1 << 20) as found:
    [one] = found.inputs
    assert (one.path, one.source, one.label) == (str(RING), None, str(RING))
    assert found.note is None and found.total == 1


def test_a_fifo_is_read_once_into_a_copy_named_as_the_user_gave_it(tmp_path):
  fifo = tmp_path / "module.fifo"
  os.mkfifo(fifo)
  text = RING.read_text()
  writer = threading.Thread(target=lambda: fifo.write_text(text))
  writer.start()
  with common.module_inputs(str(fifo), 1 << 20) as found:
    [one] = found.inputs
    writer.join()
    assert one.path != str(fifo) and open(one.path).read() == text
    assert one.source is not None and one.source.module.num_partitions == 8
    # Results speak of the user's FIFO, never of the copy.
    result = {"file": one.path, "notes": [f"read {one.path}"]}
    assert one.in_user_terms(result) == {"file": str(fifo), "notes": [f"read {fifo}"]}
    copy = one.path
  assert not os.path.exists(copy)


def test_a_missing_file_or_a_bare_directory_is_refused():
  with pytest.raises(InputError, match="nope.hlo: cannot read"):
    with common.module_inputs("nope.hlo", 1 << 20):
      pass
  with pytest.raises(InputError, match="is a directory; name a stage, e.g. "):
    with common.module_inputs(str(FIXTURES), 1 << 20):
      pass


def test_programs_json_and_text_put_each_program_under_its_name():
  found = common.ModuleInputs(
    [
      common.ModuleInput("a.hlo", None, "D:step:after_optimizations", program="module_1.step"),
      common.ModuleInput("b.hlo", None, "D:eval:after_optimizations", program="module_2.eval"),
    ],
    note="D: 3 programs; deciding 2",
    skipped=[("module_0.init", "no collective-permutes")],
    folder="D",
    total=3,
  )
  assert common.programs_json(found, [{"passed": True}, {"passed": False}]) == {
    "folder": "D",
    "programs_total": 3,
    "skipped": [{"program": "module_0.init", "reason": "no collective-permutes"}],
    "programs": [
      {"passed": True, "program": "module_1.step"},
      {"passed": False, "program": "module_2.eval"},
    ],
  }
  assert common.programs_text(found, ["one\n", "two"]) == (
    "D: 3 programs; deciding 2\n\n"
    "=== program module_1.step (D:step:after_optimizations) ===\none\n\n"
    "=== program module_2.eval (D:eval:after_optimizations) ===\ntwo"
  )


# ---------------------------------------------------------------------------------------
# Output files.


def test_out_that_is_an_input_is_refused(tmp_path):
  path = tmp_path / "m.hlo"
  path.write_text("x")
  with pytest.raises(InputError, match="refusing to overwrite an input"):
    common.check_out_path(str(path), [None, str(path)])
  common.check_out_path(str(tmp_path / "other.json"), [str(path)])
  common.check_out_path(None, [str(path)])


def test_an_output_file_that_could_not_be_written_is_refused_first(tmp_path):
  with pytest.raises(InputError, match=r"^--json .*: is a directory, not a file$"):
    common.check_output_file(str(tmp_path), "--json")
  with pytest.raises(InputError, match="no such directory"):
    common.check_output_file(str(tmp_path / "no" / "r.json"), "--json")
  common.check_output_file(str(tmp_path / "r.json"), "--json")
  common.check_output_file(os.devnull, "--json")  # a device is written in place


def test_write_output_ends_with_one_newline(tmp_path, capsys):
  common.write_output("text", None)
  common.write_output("more\n", None)
  assert capsys.readouterr().out == "text\nmore\n"
  dest = tmp_path / "out.txt"
  common.write_output("saved", str(dest))
  assert dest.read_text() == "saved\n"
