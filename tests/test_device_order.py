"""Verdicts that rest on the user's real layout: the device order XLA wrote beside the
module (a mesh over a permuted device list), and the processes that drive the GPUs.

Fixtures: tests/fixtures/perm_ring_1x2x4 (Mesh(devices[[0,4,1,5,2,6,3,7]].reshape(2,4),
("dp","cp")), a 32 MiB ring over cp) and perm_flat_ring_1x2x4 (the same list, one axis),
each with XLA's config beside it; every hop of either ring crosses hosts.
"""

import json
import shutil

import pytest

from hlo_tools import cli

from conftest import FIXTURES, run_nvshmem_opt

PERM = FIXTURES / "perm_ring_1x2x4.after_optimizations.hlo"
FLAT = FIXTURES / "perm_flat_ring_1x2x4.after_optimizations.hlo"
SPREAD = "0,4,1,5,2,6,3,7"


def _run(capsys, *argv):
  rc = cli.main([str(a) for a in argv])
  out, err = capsys.readouterr()
  return rc, out, err


def _explained(capsys, path, *flags):
  rc, out, err = _run(capsys, "explain", path, *flags, "--format=json")
  assert rc == 0, err
  return json.loads(out)


def _copy_with_config(src, dest_dir, name="ring.hlo"):
  """The module and XLA's config beside it, as a user's own file would be."""
  dest = dest_dir / name
  shutil.copyfile(src, dest)
  shutil.copyfile(
    str(src).replace(".hlo", ".config.pbtxt"), str(dest).replace(".hlo", ".config.pbtxt")
  )
  return dest


@pytest.mark.parametrize("path", [PERM, FLAT], ids=["dp_cp_mesh", "flat_mesh"])
def test_permuted_mesh_crosses_hosts_in_every_edge(capsys, path):
  result = _explained(capsys, path, "--topology=1x2x4")
  assert result["topology"] == f"1x2x4:map={SPREAD}"
  assert result["placement"].startswith("device order: the module's device assignment (")
  for e in result["collectives"]:
    assert e["edges_by_class"] == {"same_device": 0, "nvlink": 0, "nvlink_domain": 0, "network": 8}
    assert e["choice"]["plan"] == "nccl"
    assert "8 of 8 edges leave their host" in e["reason"]


def test_the_driver_places_a_text_module_by_its_config(tmp_path):
  result = run_nvshmem_opt(PERM, "--report=-", "--mode=explain")
  assert result.returncode == 0, result.stderr
  report = json.loads(result.stdout)
  assert report["topology"].endswith(f":map={SPREAD}")
  assert report["placement"].startswith("the module's device assignment (")
  [d] = report["decisions"]
  assert d["plan"] == "nccl"
  # Its rewrite carries the config along, so what reads the output places it too.
  out = tmp_path / "out.hlo"
  assert run_nvshmem_opt(PERM, "--topology=1x2x4", "-o", out).returncode == 0
  assert (tmp_path / "out.config.pbtxt").read_text() == PERM.with_name(
    "perm_ring_1x2x4.after_optimizations.config.pbtxt"
  ).read_text()


def test_without_a_config_the_order_is_unknown_and_one_sided_backends_refused(capsys, tmp_path):
  alone = tmp_path / "alone.hlo"
  shutil.copyfile(FIXTURES / "ring_1x1x8.after_optimizations.hlo", alone)
  table = f"--cost-table={FIXTURES / 'fast_nvshmem.cost'}"
  rc, out, _ = _run(capsys, "explain", alone, "--topology=1x1x8", table)
  assert rc == 0
  assert "device order: unknown" in out
  assert "does not say which device runs each of its ids" in out
  assert "choice        nccl" in out
  # Stated by the user, the identity map decides again.
  result = _explained(capsys, alone, "--topology=1x1x8:map=0,1,2,3,4,5,6,7", table)
  assert {e["choice"]["plan"] for e in result["collectives"]} == {"nvshmem"}
  assert result["placement"] == "device order: the topology's map"


def test_verify_fails_nvshmem_that_the_real_order_makes_unsafe(capsys, tmp_path):
  """NVSHMEM written on the permuted ring, as a pass that assumed the identity would:
  verify fails it on the module's own map (every edge crosses hosts, and id 1 runs on
  device 4), in every form it is given."""
  ring = _copy_with_config(PERM, tmp_path)
  ring.write_text(ring.read_text().replace('"backend":"DEFAULT"', '"backend":"NVSHMEM"', 1))
  rc, out, _ = _run(capsys, "verify", ring, "--topology=1x2x4", "--format=json")
  assert rc == 1
  failed = json.loads(out)["failed_checks"]
  assert "nvshmem-runtime" in failed and "selection" in failed
  assert "8 of 8 edges" in out and "logical device 1 runs on device 4" in out
  # The same text without its config: the order is unknown, and verify says so.
  ring.with_name("ring.config.pbtxt").unlink()
  rc, out, _ = _run(capsys, "verify", ring, "--topology=1x2x4")
  assert rc == 1 and "does not say which device runs each of its ids" in out


@pytest.mark.parametrize("form", ["file", "xla_dump_dir"])
def test_report_counts_no_saving_on_the_permuted_ring(capsys, tmp_path, form):
  if form == "file":
    source = _copy_with_config(PERM, tmp_path)
  else:  # an --xla_dump_to folder: XLA's own names for the module and its config
    source = tmp_path / "xla"
    source.mkdir()
    shutil.copyfile(PERM, source / "module_0001.jit_ring.sm_9.0a_gpu_after_optimizations.txt")
    shutil.copyfile(
      PERM.with_name("perm_ring_1x2x4.after_optimizations.config.pbtxt"),
      source / "module_0001.jit_ring.config.pbtxt",
    )
  rc, out, err = _run(
    capsys, "report", source, "--topology=1x2x4", "--quiet", f"--out={tmp_path / 'r'}"
  )
  assert rc == 0, err
  report = json.loads((tmp_path / "r" / "report.json").read_text())
  [case] = report["cases"]
  assert case["placement"].startswith("device order: the module's device assignment")
  assert case["processes"].startswith("processes of 1 GPU (the default where the target")
  for p in case["collective_permutes"]:
    assert p["choice"]["plan"] == "nccl" and p["edges_by_class"]["network"] == 8
  assert "verify: all checks pass" in out


@pytest.mark.parametrize("spec", ["1x2x4:gpus_per_process=4", "1x1x8:gpus_per_process=8"])
def test_nvshmem_refused_where_a_process_drives_several_gpus(capsys, spec):
  fixture = FIXTURES / (
    "ring_1x2x4.before_async.hlo" if spec.startswith("1x2x4") else "ring_1x1x8.before_async.hlo"
  )
  result = _explained(
    capsys, fixture, f"--topology={spec}", f"--cost-table={FIXTURES / 'fast_nvshmem.cost'}"
  )
  assert result["processes"].endswith("(stated)")
  for e in result["collectives"]:
    assert e["choice"]["plan"] == "nccl"
    assert "a process drives" in e["reason"]


def test_llama_step_with_a_process_per_host_gets_no_nvshmem(capsys):
  result = _explained(
    capsys,
    FIXTURES / "train_step_1x2x8.after_optimizations.hlo",
    "--topology=1x2x8:gpus_per_process=8",
  )
  assert result["collectives"]
  assert all(e["choice"]["plan"] == "nccl" for e in result["collectives"])
  assert all("a process drives 8 GPUs" in e["reason"] for e in result["collectives"])


def test_the_default_layout_is_stated_with_why(capsys):
  rc, out, _ = _run(capsys, "explain", FIXTURES / "ring_1x1x8.before_async.hlo", "--topology=1x1x8")
  assert rc == 0
  assert (
    "processes of 1 GPU (the default where the target XLA offers NVSHMEM, which its "
    "pass runs only with one GPU per process)"
  ) in out
  rc, out, _ = _run(
    capsys,
    "explain",
    FIXTURES / "ring_1x1x8.before_async.hlo",
    "--topology=1x1x8",
    "--backends=nccl,peer",
  )
  assert "processes of 8 GPUs (the default: one process per host" in out
  with pytest.raises(SystemExit):
    cli.main(["explain", "--help"])
  helped = " ".join(capsys.readouterr().out.split())
  assert "one GPU per process where the backends offer NVSHMEM" in helped


def test_a_bad_config_beside_the_module_is_one_line_with_file_and_line(tmp_path):
  ring = _copy_with_config(PERM, tmp_path)
  config = ring.with_name("ring.config.pbtxt")
  text = config.read_text()
  config.write_text(text.replace("replica_device_ids: 4", "replica_device_ids: four", 1))
  result = run_nvshmem_opt(ring, "--topology=1x2x4", "--mode=explain")
  assert result.returncode == 2
  [line] = result.stderr.strip().splitlines()
  bad = text[: text.index("replica_device_ids: 4")].count("\n") + 1
  assert line.startswith(f"nvshmem-opt: {config}:{bad}:"), line


def test_module_config_flag_places_a_module_without_one_beside_it(tmp_path):
  alone = tmp_path / "alone.hlo"
  shutil.copyfile(PERM, alone)
  config = PERM.with_name("perm_ring_1x2x4.after_optimizations.config.pbtxt")
  unknown = json.loads(
    run_nvshmem_opt(alone, "--topology=1x2x4", "--report=-", "--mode=explain").stdout
  )
  assert unknown["placement"] == "unknown"
  result = run_nvshmem_opt(
    alone, "--topology=1x2x4", f"--module-config={config}", "--report=-", "--mode=explain"
  )
  assert result.returncode == 0, result.stderr
  report = json.loads(result.stdout)
  assert report["topology"].endswith(f":map={SPREAD}")
  assert report["decisions"][0]["edges_by_class"]["network"] == 8
