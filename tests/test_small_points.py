"""Smaller points a new user hit, each checked on real modules and dumps: output into
a missing folder, --num-partitions against the module's header, indexing a dump
into itself, the indexed dump's manifest, the driver's help, the report's per-run
and per-step savings, upstream's answer under a backend set without NVSHMEM, the
charts' estimated curves and the rules list."""

import json
import re
import shutil
import subprocess
import sys

import pytest

from hlo_tools import selection
from hlo_tools.model import description, options, sources
from hlo_tools.ops.report import chart, page
from hlo_tools.ops.report.cases import Case

from conftest import FIXTURES, NVSHMEM_OPT, ROOT

MODULE = FIXTURES / "ring_1x1x8.before_async.hlo"  # its header: num_partitions=8
DUMP = FIXTURES / "training_script_1x1x8.xla_dump"


def _cli(*args, **kwargs):
  return subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", *map(str, args)],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=300,
    **kwargs,
  )


def _driver(*args):
  return subprocess.run(
    [str(NVSHMEM_OPT), *map(str, args)], capture_output=True, text=True, timeout=120
  )


def test_out_into_a_missing_folder_names_the_folder(tmp_path):
  out = tmp_path / "missing" / "x.txt"
  result = _cli("explain", MODULE, "--topology=1x1x8", f"--out={out}")
  assert result.returncode == 2
  assert result.stderr == f"hlo-tools explain: {out}: no such directory {out.parent}\n"
  result = _driver(MODULE, "--topology=1x1x8", "-o", out)
  assert result.returncode == 2
  assert (
    result.stderr.strip().splitlines()[-1] == f"nvshmem-opt: {out}: no such directory {out.parent}"
  )
  assert not (tmp_path / "missing").exists()


def test_num_partitions_against_the_header_blames_the_flag():
  result = _cli("explain", MODULE, "--topology=1x2x8", "--num-partitions=16")
  assert result.returncode == 2
  [line] = result.stderr.strip().splitlines()
  assert "--num-partitions=16 contradicts the module's header (num_partitions=8)" in line
  assert "map" not in line
  result = _driver(MODULE, "--topology=1x2x8", "--num-partitions=16", "--mode=explain")
  assert result.returncode == 2
  assert "--num-partitions=16 contradicts the module's header (num_partitions=8)" in result.stderr
  # The same count as the header's is no contradiction.
  assert _driver(MODULE, "--topology=1x1x8", "--num-partitions=8", "--mode=explain").returncode == 0


@pytest.mark.parametrize("where", ["same", "inside"])
def test_dump_refuses_to_index_a_folder_into_itself(where, tmp_path):
  folder = tmp_path / "xla"
  shutil.copytree(DUMP, folder)
  before = sorted(p.name for p in folder.iterdir())
  out = folder if where == "same" else folder / "index"
  result = _cli("dump", folder, f"--out={out}", "--overwrite", "--quiet")
  assert result.returncode == 2
  assert "XLA dump folder" in result.stderr and len(result.stderr.splitlines()) == 1
  assert sorted(p.name for p in folder.iterdir()) == before


def test_indexed_gpu_dump_manifest_says_what_xla_wrote(tmp_path):
  result = _cli("dump", DUMP, f"--out={tmp_path / 'copy'}", "--quiet")
  assert result.returncode == 0, result.stderr
  manifest = json.loads((tmp_path / "copy" / "manifest.json").read_text())
  target = manifest["target"]
  assert target["platform"] == "cuda" and target["num_devices"] == 8
  assert target["topology"] is None and "no topology" in target["note"]
  assert "cpu_devices" not in manifest["options"]
  assert "target_config" not in manifest["options"]
  result = _cli("dump", DUMP, f"--out={tmp_path / 'other'}", "--topology=1x1x8")
  assert result.returncode == 2 and "--topology does not apply" in result.stderr


def test_driver_help_states_the_whole_grammar_and_the_threshold():
  text = _driver("--help").stdout
  assert "[:gpus_per_process=N]" in text and "[:map=" in text
  line = re.search(r"upstream-threshold-bytes.*", text, re.S)[0][:400]
  assert "all-reduces only" in line


def _explain_1x2x4(backends=None, table=None):
  selected = options.load("1x2x4", table, backends)
  return description.describe(
    str(FIXTURES / "ring_1x2x4.before_async.hlo"), selected, use_driver=False
  ), selected


def test_saved_per_run_is_one_run(tmp_path):
  # The pipeline's cp ring runs 28 times a step (7 pipeline steps x 4 ring steps).
  fast = FIXTURES / "fast_nvshmem.cost"
  selected = options.load("1x2x4", str(fast))
  explained = description.describe(
    str(FIXTURES / "pipeline_1x2x4.before_async.hlo"), selected, use_driver=False
  )
  case = Case(id="c", title="c", topology="1x2x4")
  rows = page.comparison_rows([{"case": case, "explain": explained}])
  assert rows
  for row, e in zip(rows, explained["collectives"]):
    once = e["modeled_us"]["nccl"] - e["modeled_us"]["chosen"]
    assert abs(row["saved_us_per_run"] - once) < 1e-9
    assert abs(row["saved_us_per_step"] - once * e["runs_per_step"]) < 1e-9
  assert any(r["saved_us_per_step"] != r["saved_us_per_run"] for r in rows)
  html = page._comparison_html(rows)  # pylint: disable=protected-access
  assert "saved per run (us)" in html and "saved per step (us)" in html


def test_upstream_not_shown_as_an_answer_without_nvshmem(tmp_path):
  result = _cli("explain", MODULE, "--topology=1x1x8", "--backends=nccl,peer")
  assert result.returncode == 0, result.stderr
  rows = [l for l in result.stdout.splitlines() if l.strip().startswith("upstream XLA")]
  assert rows and all("not compared" in r and "NVSHMEM" in r for r in rows)
  assert not any(re.search(r"upstream XLA +NVSHMEM", r) for r in rows)
  result = _cli("explain", MODULE, "--topology=1x1x8")
  assert re.search(r"upstream XLA +NVSHMEM \(nvshmem-opt", result.stdout), result.stdout


def test_charts_mark_estimated_curves():
  explained, selected = _explain_1x2x4()
  src = sources.read_source(str(FIXTURES / "ring_1x2x4.before_async.hlo"))
  data = chart.chart_data(selected.topology, selected.table, explained, src)
  [first] = data["charts"][:1]
  # The default table has no measured curve for the network: what crosses hosts is
  # estimated, and says so.
  assert "network" in first["edge_classes"]
  assert not selected.table.has_measured_curve("nccl", "network")
  assert "nccl" in first["estimated"]
  svg = chart.svg_chart(first, ("t", "s"))
  legend = list(re.findall(r'class="legend"[^>]*>([^<]*)<', svg))
  assert any("ESTIMATED" in l and l.startswith("NCCL") for l in legend), legend
  assert 'stroke-opacity="0.45"' in svg
  # On one host (NVLink, measured) nothing is estimated.
  one = options.load("1x1x8")
  ex1 = description.describe(str(MODULE), one, use_driver=False)
  d1 = chart.chart_data(one.topology, one.table, ex1, sources.read_source(str(MODULE)))
  assert all(c["estimated"] == [] for c in d1["charts"])


def test_rules_are_a_list_per_backend():
  html = page._rules_html("nccl,nvshmem")  # pylint: disable=protected-access
  assert html.startswith("<h2>Where each backend can run</h2>")
  nvshmem = re.search(r"<li><b>NVSHMEM[^<]*</b><ul>(.*?)</ul></li>", html)[1]
  assert nvshmem.count("<li>") >= 4
  rule = selection.BACKEND_INFO["nvshmem"]["rule"]
  assert max(len(x) for x in re.findall(r"<li>(.*?)</li>", nvshmem)) < len(rule) / 2
  first = selection.BACKEND_INFO["nvshmem"]["rule"].split(": ", 1)[1].split("; ")[0]
  assert first.split(" (")[0] in nvshmem


def test_report_page_compares_upstream_only_where_the_set_offers_nvshmem():
  explained, _ = _explain_1x2x4(backends="nccl,peer")
  rows = page.comparison_rows(
    [{"case": Case(id="c", title="c", topology="1x2x4"), "explain": explained}]
  )
  # What the driver says of these permutes (its assigner, run with --compare-upstream).
  rows = [dict(r, upstream="NVSHMEM") for r in rows]
  assert rows
  peer = page._comparison_html(rows, "nccl,peer")  # pylint: disable=protected-access
  assert "<td>NVSHMEM</td>" not in peer and "not compared" in peer
  pinned = page._comparison_html(rows, "nccl,nvshmem")  # pylint: disable=protected-access
  assert "<td>NVSHMEM</td>" in pinned
