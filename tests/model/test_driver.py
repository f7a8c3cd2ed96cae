"""hlo_tools.model.driver: finding nvshmem-opt, running it on a module, and reading its
answer (the report, its one-line message, upstream's backends)."""

import json
import os
import stat
import subprocess

import pytest

from hlo_tools import selection
from hlo_tools.errors import InputError
from hlo_tools.model import driver

from conftest import FIXTURES

FIXTURE = FIXTURES / "ring_1x1x8.before_async.hlo"


# ---------------------------------------------------------------------------------------
# The real driver


@pytest.mark.parametrize(
  "spec",
  [
    "1x1x8",
    "1x2x4",
    "1x2x4:gpus_per_process=2",
    "1x2x4:processes=0,0,1,1,2,2,3,3",
    "1x2x4:nvl8",
    "1x1x8:map=7,6,5,4,3,2,1,0",
    None,  # derived from the module
  ],
)
def test_placed_facts_build_the_topology_decided_on(tmp_path, spec):
  """The report's `placed` facts (with partition_to_device) give the core the very
  topology the driver decided on: its spec, as the core prints it, is the report's
  `topology`; no spec of the driver's is parsed again."""
  if driver.find_nvshmem_opt() is None:
    pytest.skip(driver.NOT_INSTALLED)
  answer = driver.run_nvshmem_opt(FIXTURE, spec, tmp_dir=str(tmp_path))
  assert answer.report is not None, answer.message
  assert str(driver.placed_topology(answer.report)) == answer.report["topology"]


def test_other_host_shapes_only_for_a_derived_topology(tmp_path):
  """The driver names the other host shapes a derived topology's devices fill (the
  tools warn with them), and none where the topology was given."""
  if driver.find_nvshmem_opt() is None:
    pytest.skip(driver.NOT_INSTALLED)
  derived = driver.run_nvshmem_opt(FIXTURE, None, tmp_dir=str(tmp_path))
  given = driver.run_nvshmem_opt(FIXTURE, "1x1x8", tmp_dir=str(tmp_path))
  by_host = driver.run_nvshmem_opt(FIXTURE, None, tmp_dir=str(tmp_path), devices_per_host=4)
  assert derived.report is not None and given.report is not None and by_host.report is not None
  assert derived.report["topology"].startswith("1x1x8")
  assert derived.report["other_host_shapes"] == ["1x2x4", "1x4x2"]
  assert given.report["other_host_shapes"] == [] == by_host.report["other_host_shapes"]


def test_driver_report_lists_every_backend_and_link_class_of_the_core(tmp_path):
  fixture = FIXTURES / "ring_1x1x8.before_async.hlo"
  rc, report, message = driver.run_nvshmem_opt(fixture, "1x2x4", tmp_dir=tmp_path)
  assert rc == 0, message
  [d] = report["decisions"]
  # Keyed by the core's names, read back in the core's order.
  assert tuple(d["modeled_us"]) == selection.BACKENDS + ("chosen",)
  assert tuple(d["edges_by_class"]) == selection.LINK_CLASSES
  assert d["edges_by_class"] == {"same_device": 0, "nvlink": 6, "nvlink_domain": 0, "network": 2}
  assert d["modeled_us"]["chosen"] == d["modeled_us"][d["plan"]]
  # Every candidate has a modeled time or a refusal that says why not.
  assert tuple(d["refused"]) == ("nvshmem", "peer", "symmetric")
  assert "leave their host" in d["refused"]["nvshmem"]
  assert "not offered by the target XLA" in d["refused"]["peer"]
  for backend in selection.BACKENDS:
    assert (d["modeled_us"][backend] is None) == (backend in d["refused"]), backend
  record = selection.BACKEND_INFO[d["plan"]]
  assert d["backend"] == record["config_backend"]
  assert d["collectives_mode"] == (record["collectives_mode"] or None)


def test_driver_json_gives_loops_edges_and_counts():
  rc, report, message = driver.run_nvshmem_opt(
    FIXTURES / "scan_remat_1x1x8.before_async.hlo", "1x1x8"
  )
  assert rc == 0, message
  assert (report["num_partitions"], report["num_replicas"]) == (8, 1)
  assert report["partitions_from"] == ""  # the header states it
  assert len(report["decisions"]) == 3
  for d in report["decisions"]:
    # A remat scan of 4 steps around a ring of 8: nested loops, innermost first.
    assert [loop["trip_count"] for loop in d["loops"]] == [8, 4]
    assert d["loops"][1]["computation"] == "main.19_spmd"
    assert len(d["edges"]) == len(d["pairs"]) == 8
    assert {link for _, _, link in d["edges"]} == {"nvlink"}
    assert d["buffers"] >= 1 and d["bytes"] > 0


def test_driver_error_is_not_its_partition_note(tmp_path):
  # A module without num_partitions whose ids need 16 devices on an 8-device
  # topology: the driver first notes the count it inferred, then fails; the tools
  # quote the failure.
  bad = tmp_path / "wide.hlo"
  bad.write_text(
    (FIXTURES / "ring_1x2x4.lowered.hlo")
    .read_text()
    .replace("source_target_pairs={{0,1}", "source_target_pairs={{0,15}", 1)
  )
  report, why = driver.explain_report(bad, "1x2x4", None)
  assert report is None
  assert "needs 16 devices" in why and "gives no num_partitions" not in why


# ---------------------------------------------------------------------------------------
# The bridge on a stand-in driver: what it is given, and how its answer is read

# A stand-in for nvshmem-opt: records its argv and stdin, writes $FAKE_REPORT as its
# JSON report, says $FAKE_MESSAGE after a log line of TensorFlow's, exits $FAKE_RC.
FAKE = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_DIR/argv"
cat > "$FAKE_DIR/stdin"
for a in "$@"; do case "$a" in --report=*) r="${a#--report=}";; esac; done
ls "$(dirname "$r")" > "$FAKE_DIR/beside_report"
[ -n "$FAKE_REPORT" ] && cat "$FAKE_REPORT" > "$r"
echo "I0000 00:00:00.000000 1 cpu_feature_guard.cc:1] noise" >&2
[ -n "$FAKE_MESSAGE" ] && echo "$FAKE_MESSAGE" >&2
[ -n "$FAKE_SLEEP" ] && sleep "$FAKE_SLEEP"
exit "${FAKE_RC:-0}"
"""

# A decision as the driver prints it, its keyed objects in no set order.
SHUFFLED = {
  "decisions": [
    {
      "computation": "main",
      "instruction": "cp",
      "plan": "nccl",
      "modeled_us": {"chosen": 3.0, "symmetric": None, "nccl": 3.0, "nvshmem": 2.0},
      "refused": {"symmetric": "no signals", "nvshmem": "hangs"},
      "edges_by_class": {"network": 0, "same_device": 0, "nvlink": 8, "nvlink_domain": 0},
    }
  ]
}


@pytest.fixture
def fake(tmp_path, monkeypatch):
  exe = tmp_path / "nvshmem-opt"
  exe.write_text(FAKE)
  exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
  report = tmp_path / "report.json"
  report.write_text(json.dumps(SHUFFLED))
  monkeypatch.setenv("NVSHMEM_OPT", str(exe))
  monkeypatch.setenv("FAKE_DIR", str(tmp_path))
  monkeypatch.setenv("FAKE_REPORT", str(report))
  for name in ("FAKE_MESSAGE", "FAKE_RC", "FAKE_SLEEP"):
    monkeypatch.delenv(name, raising=False)
  return tmp_path


def test_nvshmem_opt_env_names_the_driver(tmp_path, monkeypatch):
  exe = tmp_path / "nvshmem-opt"
  exe.write_text("#!/bin/sh\n")
  monkeypatch.setenv("NVSHMEM_OPT", str(exe))
  assert driver.find_nvshmem_opt() is None  # not executable
  exe.chmod(0o755)
  assert driver.find_nvshmem_opt() == str(exe)


def test_run_gives_the_flags_and_the_table_on_stdin(fake):
  table = selection.CostTable.default()
  answer = driver.run_nvshmem_opt(
    "m.hlo",
    "1x2x4",
    table,
    out="o.hlo",
    compare_upstream=True,
    num_partitions=8,
    tmp_dir=str(fake),
    annotate=True,
    backends="nccl,peer",
    devices_per_host=4,  # a topology given: the driver derives none
    module_config="m.config.pbtxt",
    per_op_modes=True,
  )
  argv = (fake / "argv").read_text().splitlines()
  assert argv[:2] == ["m.hlo", "--mode=explain"] and argv[2].startswith("--report=")
  assert argv[3:] == [
    "--topology=1x2x4",
    "--cost-table=-",
    "--backends=nccl,peer",
    "--num-partitions=8",
    "--module-config=m.config.pbtxt",
    "--compare-upstream",
    "--annotate",
    "--per-op-modes",
    "-o",
    "o.hlo",
  ]
  assert (fake / "stdin").read_text() == str(table)
  assert answer.rc == 0 and answer.message == ""  # the log line is no message


def test_run_without_a_topology_asks_hosts_of_n_gpus(fake):
  driver.run_nvshmem_opt("m.hlo", None, devices_per_host=4, mode="rewrite", tmp_dir=str(fake))
  argv = (fake / "argv").read_text().splitlines()
  assert argv[1] == "--mode=rewrite" and argv[3:] == ["--devices-per-host=4"]
  assert (fake / "stdin").read_text() == ""  # the built-in table: nothing on stdin


def test_the_report_is_read_back_in_the_cores_order_and_removed(fake):
  answer = driver.run_nvshmem_opt("m.hlo", "1x1x8", tmp_dir=str(fake))
  [d] = answer.report["decisions"]
  assert list(d["modeled_us"]) == ["nccl", "nvshmem", "symmetric", "chosen"]
  assert list(d["refused"]) == ["nvshmem", "symmetric"]
  assert list(d["edges_by_class"]) == ["same_device", "nvlink", "nvlink_domain", "network"]
  # The report file, named with this process's pid, is gone after the run.
  [named] = [
    n for n in (fake / "beside_report").read_text().split() if n.startswith("nvshmem-opt-report-")
  ]
  assert named.startswith(f"nvshmem-opt-report-{os.getpid()}-")
  assert not list(fake.glob("nvshmem-opt-report-*"))


def test_a_failed_run_has_no_report_and_its_first_real_line(fake, monkeypatch):
  monkeypatch.setenv("FAKE_RC", "2")
  monkeypatch.setenv("FAKE_MESSAGE", "nvshmem-opt: m.hlo:3:1: bad module")
  answer = driver.run_nvshmem_opt("m.hlo", "1x1x8", tmp_dir=str(fake))
  assert answer == driver.Answer(2, None, "nvshmem-opt: m.hlo:3:1: bad module")
  assert driver.why_no_report(answer) == "nvshmem-opt: m.hlo:3:1: bad module"
  report, why = driver.explain_report("m.hlo", "1x1x8", None)
  assert report is None and why == "nvshmem-opt: m.hlo:3:1: bad module"


def test_ask_says_why_the_driver_could_not_run(fake, monkeypatch):
  monkeypatch.setenv("FAKE_SLEEP", "5")
  assert driver.ask("m.hlo", "1x1x8", timeout=0.5) == driver.Answer(
    -1, None, "nvshmem-opt did not finish within 0.5 s"
  )
  monkeypatch.setenv("NVSHMEM_OPT", str(fake / "missing"))
  answer = driver.ask("m.hlo", "1x1x8")
  assert answer.rc == -1 and answer.report is None
  assert answer.message == (
    f"nvshmem-opt is not built at $NVSHMEM_OPT={fake / 'missing'} (not an executable file)"
  )


def test_reports_left_by_dead_processes_are_removed(tmp_path):
  dead = subprocess.Popen(["true"])
  dead.wait()
  stale = tmp_path / f"nvshmem-opt-report-{dead.pid}-abc123.json"
  mine = tmp_path / f"nvshmem-opt-report-{os.getpid()}-abc123.json"
  other = tmp_path / "nvshmem-opt-report-notapid.json"
  for f in (stale, mine, other):
    f.write_text("{}")
  driver._clean_stale_reports(str(tmp_path))
  assert not stale.exists() and mine.exists() and other.exists()


def test_first_message_skips_the_drivers_log_and_partition_note():
  stderr = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    "E0000 00:00:00.000000  1 cuda_dnn.cc:8] noise\n"
    "\n"
    "nvshmem-opt: m.hlo: the module's header gives no num_partitions (jax-lowered text?); "
    "using 8 from the largest partition id its collectives name (--num-partitions=N "
    "overrides)\n"
    "nvshmem-opt: m.hlo: no --topology; using 1x1x8\n"
    "  nvshmem-opt: m.hlo:2:3: the error  \n"
    "a second line\n"
  )
  assert driver.first_message(stderr) == "nvshmem-opt: m.hlo:2:3: the error"
  assert driver.first_message("I0101 log only\n") == ""


def test_first_message_skips_the_partition_note_of_a_serialized_module():
  # The note nvshmem-opt prints (nvshmem_opt/input.cc) for an .hlo.pb without a count.
  stderr = (
    "nvshmem-opt: m.hlo.pb: the serialized module gives no num_partitions; using 4 from "
    "the largest partition id its collectives name (--num-partitions=N overrides)\n"
    "nvshmem-opt: m.hlo.pb: the real error\n"
  )
  assert driver.first_message(stderr) == "nvshmem-opt: m.hlo.pb: the real error"


def test_why_no_report():
  assert driver.why_no_report(driver.Answer(0, {"decisions": []}, "")) is None
  assert driver.why_no_report(driver.Answer(3, None, "")) == (
    "nvshmem-opt exited with status 3 and said nothing"
  )
  assert driver.why_no_report(driver.Answer(-1, None, "could not run")) == "could not run"


def test_derived_is_the_reports_spec_or_one_line_why_not():
  assert driver.derived("m.hlo", driver.Answer(0, {"spec": "1x2x4"}, "")) == "1x2x4"
  with pytest.raises(InputError, match=r"^m.hlo: no --topology given and the driver cannot "):
    driver.derived("m.hlo", driver.Answer(-1, None, "not installed"))
  with pytest.raises(InputError, match=r"^nvshmem-opt: m.hlo:1: bad$"):
    driver.derived("m.hlo", driver.Answer(2, None, "nvshmem-opt: m.hlo:1: bad"))
  with pytest.raises(InputError, match=r"^m.hlo: nvshmem-opt exit 2$"):
    driver.derived("m.hlo", driver.Answer(2, None, ""))


def test_placement_none_where_the_driver_knew_no_map():
  for where in (None, "", "unknown"):
    assert driver.placement({"placement": where}) is None
  assert driver.placement({}) is None
  assert driver.placement({"placement": "the topology's map"}) == "the topology's map"


def test_upstream_answers_by_the_inputs_instruction():
  report = {
    "decisions": [
      {"computation": "body", "instruction": "cp.1", "upstream": "nvshmem"},
      {"computation": "body", "instruction": "cp.2"},  # no --compare-upstream answer
      {"computation": "main", "instruction": "cp.3", "upstream": "nccl"},
    ]
  }
  assert driver.upstream_from_report(report) == {
    ("body", "cp.1"): "nvshmem",
    ("main", "cp.3"): "nccl",
  }
  assert driver.upstream_from_report(None) == {}


def test_placed_topology_is_built_from_the_reports_facts():
  report = {
    "placed": {
      "slices": 1,
      "hosts_per_slice": 2,
      "gpus_per_host": 4,
      "nvlink_domain_size": 4,
      "gpus_per_process": 1,
      "device_to_process": [],
    },
    "partition_to_device": [0, 4, 1, 5, 2, 6, 3, 7],
  }
  topology = driver.placed_topology(report)
  assert (topology.slices, topology.hosts_per_slice, topology.gpus_per_host) == (1, 2, 4)
  assert topology.num_devices == 8
  assert topology.partition_to_device == [0, 4, 1, 5, 2, 6, 3, 7]
  # Devices 0 and 4 sit on different hosts of 4.
  assert topology.classify(0, 4) == "network" and topology.classify(0, 1) == "nvlink"
