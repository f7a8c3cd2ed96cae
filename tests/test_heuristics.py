"""Tests of the `hlo-tools heuristics` command (its subcommands, its help) and properties
of the core. Each subcommand's own tests are in tests/ops/heuristics/."""

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import hlo_tools.selection as selection  # first: it says how to build a missing binding
from hlo_tools import _selection_core, cli
from hlo_tools.commands import heuristics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(argv, capsys):
  rc = cli.main(["heuristics"] + argv)
  out, err = capsys.readouterr()
  return rc, out, err


# ---------------------------------------------------------------------------
# Properties of the core, through hlo_tools.selection


@st.composite
def topologies(draw):
  slices = draw(st.integers(1, 2))
  hosts = draw(st.integers(1, 4))
  gpus = draw(st.integers(1, 4))
  hosts_per_domain = draw(st.sampled_from([d for d in range(1, hosts + 1) if hosts % d == 0]))
  spec = f"{slices}x{hosts}x{gpus}:nvl{hosts_per_domain * gpus}"
  n = slices * hosts * gpus
  if draw(st.booleans()):
    spec += ":map=" + ",".join(map(str, draw(st.permutations(range(n)))))
  return selection.parse_topology(spec)


@st.composite
def cost_tables(draw):
  # No subnormals: the core's strtod-based parser rejects them (ERANGE).
  positive = st.floats(0.5, 5000, allow_nan=False)
  small = lambda hi: st.floats(0, hi, allow_subnormal=False)  # pylint: disable=unnecessary-lambda-assignment
  lines = []
  for backend in ("NCCL", "NVSHMEM"):
    for link_class in selection.LINK_CLASSES:
      if (backend, link_class) == ("NVSHMEM", "network"):
        continue  # NVSHMEM has no network row: it never crosses hosts.
      lines.append(
        f"links {{ backend: {backend} link_class: {link_class.upper()} "
        f"latency_us: {draw(small(50))!r} bandwidth_gbps: {draw(positive)!r} "
        "per_buffer_us: 0 }"
      )
    lines.append(f"sm_interference {{ backend: {backend} fraction: {draw(small(0.5))!r} }}")
  lines.append(f"margin: {draw(small(0.5))!r}")
  lines.append(f"nvshmem_max_bytes: {draw(st.integers(0, 1 << 34))}")
  return selection.CostTable.parse("\n".join(lines), "generated")


@st.composite
def permutes(draw):
  topology = draw(topologies())
  n = topology.num_devices
  pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2 * n))
  return topology, pairs


SIZES = st.integers(0, 1 << 33)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _device_edges(topology, pairs):
  return _selection_core.edge_ids_to_devices(topology, pairs, True, topology.num_devices, 1)


@PROPERTY
@given(permutes(), cost_tables(), SIZES)
def test_nvshmem_only_where_every_device_has_a_source(permute, table, nbytes):
  topology, pairs = permute
  d = selection.decide(topology, table, nbytes, pairs)
  edges = _device_edges(topology, pairs)
  if d["plan"] == "nvshmem":
    # Every edge inside a host; every device of the program receives.
    same_host = lambda a, b: topology.classify(a, b) in ("same_device", "nvlink")  # noqa: E731
    assert all(same_host(s, t) for s, t in edges)
    assert set(range(topology.num_devices)) <= {t for _, t in edges}
    # Priced by its slowest edge.
    slowest = max(
      selection.edge_time_us(table, "nvshmem", topology.classify(s, t), nbytes) for s, t in edges
    )
    assert d["backend_us"]["nvshmem"] == pytest.approx(slowest)
  if d["plan"] != "nccl":
    assert nbytes <= table.nvshmem_max_bytes


@PROPERTY
@given(permutes(), cost_tables(), SIZES, SIZES)
def test_modeled_time_monotone_in_bytes(permute, table, a, b):
  topology, pairs = permute
  small, large = sorted((a, b))
  ds = selection.decide(topology, table, small, pairs)
  dl = selection.decide(topology, table, large, pairs)
  for key in ("nccl", "nvshmem"):
    small_us, large_us = ds["backend_us"][key], dl["backend_us"][key]
    if small_us is not None and large_us is not None:
      assert large_us >= small_us, key
  # The chosen time is monotone only up to the margin: just past the point
  # where an alternative starts beating NCCL by the margin, the choice switches
  # and the chosen time drops below NCCL's at a smaller size.
  assert dl["chosen_us"] >= ds["chosen_us"] * (1 - table.margin) * (1 - 1e-12)


@PROPERTY
@given(permutes(), SIZES, SIZES)
def test_chosen_time_monotone_without_margin(permute, a, b):
  topology, pairs = permute
  # Parametric NVLink rows: the default's measured curves follow their noisy
  # data, which is not monotone below a few MiB.
  table = selection.CostTable.parse(
    "margin: 0\nlinks { backend: NCCL link_class: NVLINK latency_us: 6 bandwidth_gbps: 450 per_buffer_us: 7.6 }\nlinks { backend: NVSHMEM link_class: NVLINK latency_us: 5.6 bandwidth_gbps: 450 per_buffer_us: 8 }\n",
    "no-margin",
  )
  small, large = sorted((a, b))
  assert (
    selection.decide(topology, table, large, pairs)["chosen_us"]
    >= selection.decide(topology, table, small, pairs)["chosen_us"]
  )


@PROPERTY
@given(permutes(), cost_tables(), SIZES)
def test_decisions_are_deterministic(permute, table, nbytes):
  topology, pairs = permute
  first = selection.decide(topology, table, nbytes, pairs)
  again = selection.decide(
    selection.parse_topology(str(topology)),
    selection.CostTable.parse(str(table), "copy"),
    nbytes,
    list(pairs),
  )
  assert first == again == selection.decide(topology, table, nbytes, pairs)


@PROPERTY
@given(permutes(), cost_tables(), SIZES)
def test_alternatives_only_when_they_beat_pure_plans_by_margin(permute, table, nbytes):
  topology, pairs = permute
  d = selection.decide(topology, table, nbytes, pairs)
  required = lambda us: us * (1 - table.margin)  # pylint: disable=unnecessary-lambda-assignment
  us = d["backend_us"]
  assert d["plan"] == d["backend"]
  if d["plan"] == "nvshmem":
    assert us["nvshmem"] <= required(us["nccl"])
    assert d["chosen_us"] == us["nvshmem"]
  if d["plan"] == "nccl":
    # NCCL stays only when no eligible alternative clears the margin.
    assert us["nvshmem"] is None or us["nvshmem"] >= required(us["nccl"])
    assert d["chosen_us"] == us["nccl"]


@PROPERTY
@given(permutes(), cost_tables(), SIZES)
def test_pure_plan_times_are_slowest_edge(permute, table, nbytes):
  """The core's NCCL-only time, recomputed from per-edge times."""
  topology, pairs = permute
  d = selection.decide(topology, table, nbytes, pairs)
  edges = _device_edges(topology, pairs)
  expected = max(
    (selection.edge_time_us(table, "nccl", topology.classify(s, t), nbytes) for s, t in edges),
    default=0.0,
  )
  assert d["backend_us"]["nccl"] == expected
  assert sum(d["edges_by_class"].values()) == len(edges)


def test_no_traceback_on_unknown_subcommand(capsys):
  rc, _, err = run_cli(["frobnicate"], capsys)
  assert rc == 2 and "invalid choice: 'frobnicate'" in err and len(err.strip().splitlines()) == 1


def test_cli_dispatches_heuristics_sweep():
  proc = subprocess.run(
    [sys.executable, "-m", "hlo_tools.cli", "heuristics", "sweep", "--help"],
    capture_output=True,
    text=True,
    cwd=ROOT,
    check=False,
  )
  assert proc.returncode == 0 and "--cost-table" in proc.stdout


def test_every_subcommand_is_described_in_help(capsys):
  with pytest.raises(SystemExit) as e:
    heuristics.main(["hlo-tools heuristics", "--help"])
  out, _ = capsys.readouterr()
  assert e.value.code == 0
  text = " ".join(out.split())
  for name in heuristics.SUBCOMMANDS:
    assert name in heuristics.DESCRIPTIONS
    assert f"{name} {' '.join(heuristics.DESCRIPTIONS[name].split())[:40]}" in text
