"""hlo_tools.selection: the selection core from Python; the bindings give the C++ answers."""

import pytest

import hlo_tools.selection as selection  # first: it says how to build a missing binding
from hlo_tools import _selection_core
from hlo_tools.errors import InputReadError

from conftest import FIXTURES, ROOT


def placed(spec, devices=None):
  """`spec` with its map for a program of `devices` (default: all of them), logical
  device i on device i. Without one, the core refuses the one-sided backends
  wherever the program spans hosts or processes."""
  dims = [int(x) for x in spec.split(":")[0].split("x")]
  devices = devices or dims[0] * dims[1] * dims[2]
  return f"{spec}:map={','.join(str(i) for i in range(devices))}"


def ring(n):
  return [(i, (i + 1) % n) for i in range(n)]


def test_topology_round_trip_and_link_classes():
  t = selection.parse_topology("2x2x4:nvl8")
  assert (t.slices, t.hosts_per_slice, t.gpus_per_host, t.nvlink_domain_size) == (2, 2, 4, 8)
  assert t.num_devices == 16
  assert str(t) == "2x2x4:nvl8:gpus_per_process=1"  # the default set's layout
  assert str(selection.parse_topology("2x2x4:nvl8", "nccl,peer")) == "2x2x4:nvl8"
  assert [t.classify(0, d) for d in (0, 3, 4, 8)] == [
    "same_device",
    "nvlink",
    "nvlink_domain",
    "network",
  ]
  with pytest.raises(ValueError):
    t.classify(0, 16)


@pytest.mark.parametrize(
  "spec, message",
  [
    ("", "expected SLICESxHOSTSxGPUS"),
    ("1x2x", "is not a positive whole number"),
    ("1x2x4:nvl3", "whole number of hosts"),
    ("1x2x4:map=0,1", None),  # valid spec; the map is checked against a module later
    ("1x1x2:map=1,1", "twice"),
    ("1x2x4:bogus", "unknown option 'bogus'"),
  ],
)
def test_topology_errors_are_one_line(spec, message):
  if message is None:
    selection.parse_topology(spec)
    return
  with pytest.raises(selection.SelectionError) as e:
    selection.parse_topology(spec)
  assert message in str(e.value)
  assert "\n" not in str(e.value)
  assert str(e.value).startswith(f"topology spec '{spec}'")


def test_decisions_match_the_cpp_tests():
  table = selection.load_cost_table()
  one_host = selection.decide(selection.parse_topology(placed("1x1x8")), table, 32 << 20, ring(8))
  assert one_host["plan"] == one_host["backend"] == "nvshmem"
  assert one_host["backend_us"]["nvshmem"] < one_host["backend_us"]["nccl"]
  assert one_host["chosen_us"] == one_host["backend_us"]["nvshmem"]
  two_hosts = selection.decide(selection.parse_topology(placed("1x2x4")), table, 32 << 20, ring(8))
  assert two_hosts["plan"] == "nccl"
  assert two_hosts["edges_by_class"]["network"] == 2
  # Refused across hosts: the receiver waits only on NVSHMEM_TEAM_SHARED.
  assert two_hosts["backend_us"]["nvshmem"] is None
  assert "2 of 8 edges leave their host" in two_hosts["refused"]["nvshmem"]
  # The split plan's fields are gone from the decision.
  assert not {"split_us", "nvshmem_edge", "nccl_us", "nvshmem_us"} & set(two_hosts)
  nvl72 = selection.decide(
    selection.parse_topology(placed("1x9x8:nvl72")), table, 32 << 20, ring(72), num_partitions=72
  )
  # NVSHMEM_TEAM_SHARED is not established to span the NVL72's hosts.
  assert nvl72["plan"] == "nccl" and "leave their host" in nvl72["refused"]["nvshmem"]
  huge = selection.decide(selection.parse_topology(placed("1x1x8")), table, 2 << 30, ring(8))
  assert huge["plan"] == "nccl" and "symmetric heap" in huge["reason"]
  # Operand and result both live in the heap (1 GiB): 512 MiB fits, one byte more not.
  assert selection.nvshmem_heap_reason(table, 512 << 20) is None
  assert "2 x 512.0 MiB" in selection.nvshmem_heap_reason(table, (512 << 20) + 1)


def test_cost_table_file_overrides_and_errors(tmp_path):
  good = tmp_path / "t.txt"
  good.write_text(
    "links { backend: NCCL link_class: NETWORK latency_us: 4 bandwidth_gbps: 900 per_buffer_us: 0 }\nsm_interference { backend: NCCL fraction: 0.5 }\n"
  )
  table = selection.load_cost_table(good)
  assert table.link("nccl", "network") == (4.0, 900.0)
  assert table.sm_interference("nccl") == 0.5
  d = selection.decide(selection.parse_topology(placed("1x2x4")), table, 64 << 20, ring(8))
  # Across hosts: NCCL, NVSHMEM refused whatever the table.
  assert d["plan"] == "nccl" and "leave their host" in d["refused"]["nvshmem"]
  # Text form round-trips through the parser.
  again = selection.CostTable.parse(str(table), "again")
  assert str(again) == str(table)

  bad = tmp_path / "bad.txtpb"
  bad.write_text("margin: 0.1\n\nlinks { backend: NVSHMEM link_class: NVLINK latency_us: fast }\n")
  with pytest.raises(selection.SelectionError, match=r"bad\.txtpb:3: Expected double, got: fast"):
    selection.load_cost_table(bad)
  # A file that cannot be read is the bounded reader's error, one line naming it.
  with pytest.raises(InputReadError, match=r"missing\.txt: cannot read: No such file"):
    selection.load_cost_table(tmp_path / "missing.txt")
  # A table in the line format of earlier releases is refused, not half-read.
  old = tmp_path / "old.txt"
  old.write_text("# measured\nmargin 0.05\nsplit_overhead_us 2\n")
  with pytest.raises(
    selection.SelectionError, match=r"old\.txt:2: the cost table is in text format now"
  ):
    selection.load_cost_table(old)


def test_edge_expansion_and_time():
  t = selection.parse_topology(placed("1x2x4"))
  assert _selection_core.edge_ids_to_devices(t, [(0, 5)], True, 8, 1) == [(0, 5)]
  with pytest.raises(ValueError, match="outside 0..7"):
    _selection_core.edge_ids_to_devices(t, [(0, 8)], True, 8, 1)
  table = selection.load_cost_table()
  small = selection.edge_time_us(table, "nccl", "network", 1024)
  big = selection.edge_time_us(table, "nccl", "network", 1 << 30)
  assert 20 < small < 21 and big > 1000 * small


def test_nvshmem_hang_reason_for_verify():
  assert selection.nvshmem_hang_reason([(0, 1)], 2) == (
    "nvshmem refused: 1 of 2 devices of the program (device 0) has no source; "
    "a device without one skips the barrier over NVSHMEM_TEAM_SHARED, in which its "
    "host's devices with a source would hang, so the patched runtime runs such a "
    "permute on NCCL"
  )
  assert selection.nvshmem_hang_reason(ring(2), 2) is None
  # Unknown team: devices 0..max named; a ring over them is safe.
  assert selection.nvshmem_hang_reason(ring(4), None) is None
  assert "device 0)" in selection.nvshmem_hang_reason([(0, 1), (1, 2)], 0)
  # A ring over half of the program leaves the other half without a source.
  assert "4 of 8 devices" in selection.nvshmem_hang_reason(ring(4), 8)
  assert "outside the team" in selection.nvshmem_hang_reason([(0, 5), (5, 0)], 2)
  with pytest.raises(selection.SelectionError):
    selection.nvshmem_hang_reason(ring(2), -1)


def test_decide_refuses_nvshmem_for_shifts_and_partial_groups():
  table = selection.load_cost_table()
  t = selection.parse_topology(placed("1x1x2"))
  shift = selection.decide(t, table, 32 << 20, [(0, 1)], num_partitions=2)
  assert shift["plan"] == "nccl" and shift["backend_us"]["nvshmem"] is None
  assert "nvshmem refused: 1 of 2 devices" in shift["reason"]
  assert selection.decide(t, table, 32 << 20, ring(2))["plan"] == "nvshmem"
  # A ring of 4 partitions x 2 replicas on 8 GPUs gives every device a source, but
  # both replicas' ids name PEs 0..3...
  t8 = selection.parse_topology(placed("1x1x8"))
  groups = selection.decide(t8, table, 32 << 20, ring(4), num_partitions=4, num_replicas=2)
  assert groups["plan"] == "nccl"
  assert "its pairs apply to 2 groups" in groups["reason"], groups["reason"]
  # ...a 4-device program's ring is one group, with the team given by the program:
  # on a host of only its GPUs NVSHMEM runs it; on half of a host of 8 the host's
  # NVSHMEM_TEAM_SHARED (one PE a GPU) holds GPUs that never enter the barrier.
  t4 = selection.parse_topology(placed("1x1x4", 4))
  assert selection.decide(t4, table, 32 << 20, ring(4), num_partitions=4)["plan"] == "nvshmem"
  half = selection.parse_topology(placed("1x1x8", 4))
  idle = selection.decide(half, table, 32 << 20, ring(4), num_partitions=4)
  assert idle["plan"] == "nccl"
  assert "all 8 GPUs of host 0; GPUs 4-7 are not in the program" in idle["reason"]
  assert "GPUs 4-7 are not" in selection.nvshmem_host_reason(half, ring(4), 4)
  assert selection.nvshmem_host_reason(t4, ring(4), 4) is None
  mapped = selection.parse_topology("1x1x4:map=3,2,1,0")
  assert _selection_core.team_devices(mapped, 2) == [3, 2]
  assert "logical device 0 runs on device 3" in selection.nvshmem_pe_reason(mapped, True, 2, 1)
  assert selection.nvshmem_pe_reason(t8, True, 8, 1) is None
  assert "apply to 2 groups" in selection.nvshmem_pe_reason(t8, True, 4, 2)
  assert "apply to 4 groups" in selection.nvshmem_pe_reason(t8, False, 4, 2)


def test_a_spec_states_each_devices_process():
  # jax's process_index of each device, as the hook passes it: peer memory needs
  # every device of the program in one process.
  table = selection.with_backends(selection.load_cost_table(), "nccl,peer")
  split = selection.parse_topology("1x1x8:processes=0,0,0,0,1,1,1,1:map=0,1,2,3,4,5,6,7")
  assert split.device_to_process == [0, 0, 0, 0, 1, 1, 1, 1] and split.gpus_per_process == 4
  assert selection.states_processes("1x1x8:processes=0,0,0,0,1,1,1,1")
  d = selection.decide(split, table, 64 << 20, ring(8))
  assert d["plan"] == "nccl" and "4 of the program's 8 devices" in d["reason"]
  one = selection.parse_topology("1x1x8:processes=0,0,0,0,0,0,0,0:map=0,1,2,3,4,5,6,7")
  assert selection.decide(one, table, 64 << 20, ring(8))["plan"] == "peer"
  assert str(split).startswith("1x1x8:processes=0,0,0,0,1,1,1,1")
  with pytest.raises(selection.SelectionError, match="process map has 3 entries"):
    selection.parse_topology("1x1x4:processes=0,0,1")
  # The same facts without a spec, as the hook takes them from jax's devices.
  made = _selection_core.Topology.create(1, 1, 8, 0, list(range(8)), [0] * 4 + [1] * 4)
  assert str(made) == str(split)
  with pytest.raises(ValueError, match="process map names process 9"):
    _selection_core.Topology.create(1, 1, 2, 0, [], [0, 9])


def test_a_destination_off_the_heap_refuses_nvshmem():
  # (allocation, entry parameter or -1, returned), as nvshmem-opt reads XLA's
  # buffer assignment: the emitter puts only into heap buffers no caller sees.
  table = selection.load_cost_table()
  t = selection.parse_topology(placed("1x1x8"))
  assert selection.decide(t, table, 32 << 20, ring(8), destinations=[(2, -1, False)])["plan"] == (
    "nvshmem"
  )
  donated = selection.decide(t, table, 32 << 20, ring(8), destinations=[(0, 1, False)])
  assert donated["plan"] == "nccl" and "parameter 1's buffer (a donated input)" in donated["reason"]
  returned = selection.decide(t, table, 32 << 20, ring(8), destinations=[(0, -1, True)])
  assert returned["plan"] == "nccl" and "which the program returns" in returned["reason"]


def test_backend_sets_from_python():
  default = selection.load_cost_table()
  assert default.backends == "nccl,nvshmem"
  assert "peer" in selection.BACKENDS and "symmetric" in selection.BACKENDS
  peer = selection.with_backends(default, ("nccl", "peer", "symmetric"))
  assert peer.backends == "nccl,peer,symmetric" and default.backends == "nccl,nvshmem"
  with pytest.raises(selection.SelectionError, match="no XLA offers both"):
    selection.with_backends(default, "nccl,nvshmem,peer")
  t = selection.parse_topology(placed("1x1x2"), "nccl,peer")
  # Peer's default is its measured curve with one process driving the GPUs:
  # slower than NCCL below a few MiB, faster from 16 MiB.
  d = selection.decide(t, peer, 1 << 20, ring(2))
  assert d["plan"] == d["backend"] == "nccl"
  assert d["backend_us"]["peer"] > d["backend_us"]["nccl"]
  assert d["backend_us"]["nvshmem"] is None
  assert "not offered" in d["refused"]["nvshmem"]
  assert "support signals" in d["refused"]["symmetric"]
  faster = selection.CostTable.parse(
    "backends: [NCCL, PEER]\nlinks { backend: PEER link_class: NVLINK latency_us: 1 bandwidth_gbps: 900 per_buffer_us: 0.5 }\n"
  )
  assert faster.per_buffer_us("peer", "nvlink") == 0.5
  d = selection.decide(t, faster, 64 << 20, ring(2), buffers=2)
  assert d["plan"] == "peer" and d["reason"].startswith(
    "peer memory: all 2 edges stay in one process"
  )
  two_hosts = selection.decide(
    selection.parse_topology(placed("1x2x1"), "nccl,peer"), faster, 1 << 20, ring(2)
  )
  assert two_hosts["plan"] == "nccl" and "leave their host" in two_hosts["refused"]["peer"]


def test_per_buffer_cost_adds_per_extra_buffer():
  table = selection.CostTable.parse(
    "links { backend: NVSHMEM link_class: NVLINK latency_us: 5 bandwidth_gbps: 100 per_buffer_us: 4 }\n"
  )
  one = selection.edge_time_us(table, "nvshmem", "nvlink", 10**6)
  four = selection.edge_time_us(table, "nvshmem", "nvlink", 10**6, buffers=4)
  assert one == pytest.approx(15) and four == pytest.approx(27)
  with pytest.raises(ValueError):
    selection.edge_time_us(table, "nvshmem", "nvlink", 1, buffers=0)


def test_decide_takes_a_backend_set_per_call():
  table = selection.CostTable.parse(
    "links { backend: PEER link_class: NVLINK latency_us: 1 bandwidth_gbps: 900 per_buffer_us: 0 }\n"
  )
  t = selection.parse_topology(placed("1x1x2"), "nccl,peer")
  assert selection.decide(t, table, 1 << 20, ring(2), backends=("nccl", "peer"))["plan"] == "peer"
  assert table.backends == "nccl,nvshmem"  # the caller's table is unchanged
  with pytest.raises(selection.SelectionError, match="lacks nccl"):
    selection.decide(t, table, 1 << 20, ring(2), backends="peer")


@pytest.mark.parametrize(
  "fixture, spec, plan, reason",
  [
    # jax's ppermute of a one-step shift on 2 devices: device 0 has no source.
    (
      "shift_1x1x2.before_async.hlo",
      "1x1x2",
      "nccl",
      "nvshmem refused: 1 of 2 devices of the program (device 0) has no source",
    ),
    ("shift_1x2x4.before_async.hlo", "1x1x8", "nccl", "has no source"),
    ("ring_1x1x8.before_async.hlo", "1x1x8", "nvshmem", "NVSHMEM: all 8 edges"),
  ],
)
def test_real_modules_never_plan_a_hanging_nvshmem_permute(fixture, spec, plan, reason):
  from hlo_tools.hlo import reader
  from hlo_tools.model import collectives

  module = reader.parse_hlo_file(str(FIXTURES / fixture))
  permutes = collectives.collective_permutes(module)
  assert permutes
  t = selection.parse_topology(placed(spec, module.num_partitions))
  table = selection.CostTable.parse(
    "links { backend: NVSHMEM link_class: NVLINK latency_us: 1 bandwidth_gbps: 900 per_buffer_us: 0 }\n"
  )  # NVSHMEM favoured
  for p in permutes:
    d = selection.decide(
      t, table, p.bytes_per_device, p.pairs, num_partitions=module.num_partitions, buffers=p.buffers
    )
    assert d["plan"] == plan and reason in d["reason"], (p.start, d["reason"])
    edges = _selection_core.edge_ids_to_devices(
      t, [tuple(x) for x in p.pairs], True, module.num_partitions, 1
    )
    hang = selection.nvshmem_hang_reason(edges, module.num_partitions)
    assert (hang is None) == (plan == "nvshmem")


CURVE = """links {
  backend: NVSHMEM
  link_class: NVLINK
  latency_us: 99
  bandwidth_gbps: 400
  per_buffer_us: 10
  points { buffers: 1 bytes: 1024 us: 20 }
  points { buffers: 1 bytes: 1048576 us: 30 }
  points { buffers: 1 bytes: 67108864 us: 200 }
  points { buffers: 4 bytes: 1024 us: 50 }
  points { buffers: 4 bytes: 1048576 us: 60 }
  points { buffers: 4 bytes: 67108864 us: 260 }
}
sm_interference { backend: NVSHMEM fraction: 0 }
"""


def curve_us(table, nbytes, buffers=1):
  return selection.edge_time_us(table, "nvshmem", "nvlink", nbytes, buffers)


def test_measured_curve_exact_at_points_and_log_log_between():
  table = selection.CostTable.parse(CURVE, "curve")
  assert table.has_measured_curve("nvshmem", "nvlink")
  assert not table.has_measured_curve("nvshmem", "nvlink_domain")
  assert table.points("nvshmem", "nvlink")[:2] == [(1, 1024, 20.0), (1, 1048576, 30.0)]
  for buffers, nbytes, us in table.points("nvshmem", "nvlink"):
    assert curve_us(table, nbytes, buffers) == us
  assert curve_us(table, 32768) == pytest.approx((20 * 30) ** 0.5, rel=1e-12)
  # Monotone where the data is: every size from 1 B to 1 GiB.
  times = [curve_us(table, 1 << k) for k in range(31)]
  assert times == sorted(times)


def test_measured_curve_extrapolates_and_blends_buffer_counts():
  table = selection.CostTable.parse(CURVE, "curve")
  top = 64 << 20
  # Beyond the largest size: the last point plus bytes at the row's 400 GB/s.
  assert curve_us(table, top + 4_000_000) == pytest.approx(210)
  # 2 buffers: a third of the way from the 1-buffer to the 4-buffer curve;
  # 5 buffers: the 4-buffer curve plus one per_buffer (10 us).
  assert curve_us(table, 1024, 2) == pytest.approx(30)
  assert curve_us(table, 1024, 5) == pytest.approx(60)
  d = selection.decide(selection.parse_topology(placed("1x1x2")), table, 1024, ring(2))
  assert "measured curve" in d["reason"]


def test_link_line_gives_the_parametric_model_and_text_round_trips():
  table = selection.CostTable.parse(CURVE, "curve")
  again = selection.CostTable.parse(str(table), "again")
  assert str(again) == str(table)
  assert again.points("nvshmem", "nvlink") == table.points("nvshmem", "nvlink")
  # A table naming the pair without points drops the inherited curve.
  plain = selection.CostTable.parse(
    "links { backend: NVSHMEM link_class: NVLINK latency_us: 5 bandwidth_gbps: 450 per_buffer_us: 1 }\n",
    "plain",
  )
  assert not plain.has_measured_curve("nvshmem", "nvlink")
  # with_backends copies the curves along.
  assert selection.with_backends(table, "nccl,nvshmem").points("nvshmem", "nvlink") == table.points(
    "nvshmem", "nvlink"
  )


@pytest.mark.parametrize(
  "points, message",
  [
    ("points { buffers: 1 bytes: 1024 }", "us must be a number > 0, not 0"),
    ("points { buffers: 0 bytes: 1024 us: 5 }", "buffers must be from 1 to 1048576, not 0"),
    ("points { buffers: 1 bytes: 0 us: 5 }", "bytes must be at least 1, not 0"),
    ("points { buffers: 1 bytes: 1024 us: -3 }", "us must be a number > 0, not -3"),
    (
      "points { buffers: 1 bytes: 1024 us: 5 }\npoints { buffers: 1 bytes: 1024 us: 6 }",
      "a second point at 1 buffers and 1024 bytes",
    ),
    ("point nccl nvlink 1 1024 5", "is in the line format of earlier releases"),
  ],
)
def test_bad_points_name_file_and_line(tmp_path, points, message):
  path = tmp_path / "bad.txtpb"
  if points.startswith("point "):
    path.write_text("# measured\n" + points + "\n")
    line = 2
  else:
    path.write_text("# measured\nlinks { backend: NCCL link_class: NVLINK\n" + points + "\n}\n")
    line = 3 + points.count("\n")
  with pytest.raises(selection.SelectionError) as e:
    selection.load_cost_table(path)
  assert str(e.value).startswith(f"{path}:{line}: ") and message in str(e.value)


H200_TABLE = ROOT / "core" / "tables" / "h200x2_nvlink_cost_table.txtpb"


def test_compiled_in_default_is_the_committed_h200_table():
  """The default table is the committed calibrated table, number for number."""
  import subprocess
  import sys

  text = H200_TABLE.read_text()
  committed = selection.CostTable.parse(text, str(H200_TABLE))
  default = selection.CostTable.default()
  # The measured entries; the file's other rows are the estimates of the day
  # it was written.
  for backend in ("nccl", "nvshmem"):
    assert committed.per_buffer_us(backend, "nvlink") == default.per_buffer_us(backend, "nvlink")
    # NVSHMEM's thunk now also enters a barrier before its puts, which the
    # measurement predates: the default charges it one more buffer.
    extra = default.per_buffer_us(backend, "nvlink") if backend == "nvshmem" else 0
    latency, bandwidth = committed.link(backend, "nvlink")
    assert default.link(backend, "nvlink") == (pytest.approx(latency + extra), bandwidth)
    assert default.points(backend, "nvlink") == [
      (b, n, pytest.approx(us + extra)) for b, n, us in committed.points(backend, "nvlink")
    ]
    assert committed.sm_interference(backend) == default.sm_interference(backend)
  assert default.link("nvshmem", "nvlink")[0] > committed.link("nvshmem", "nvlink")[0] + 16
  # The committed file names every measured pair itself, so the equality does
  # not come from inheriting the defaults.
  for backend in ("nccl", "nvshmem"):
    block = text.split(f"  backend: {backend.upper()}\n  link_class: NVLINK\n", 1)[1]
    rows = [l.split() for l in block.split("\n}", 1)[0].splitlines() if l.startswith("  points {")]
    assert len(rows) == len(default.points(backend, "nvlink")) >= 30
    assert {int(r[3]) for r in rows} == {1, 2, 4}
  assert "# Measured on: 2x NVIDIA H200 143771 MiB, NV18 NVLink, driver 580.159.04" in text
  assert "XLA openxla/xla 3cc8846c" in text and "sha256 " in text
  # The generated block of the core's source is this table's.
  check = subprocess.run(
    [sys.executable, str(ROOT / "scripts" / "embed_default_cost_table.py"), "--check"],
    capture_output=True,
    text=True,
    check=False,
  )
  assert check.returncode == 0, check.stderr


def test_built_in_table_puts_these_ring_steps_on_peer():
  """What the jax v0.11.0 series' by-cost assigner chooses on two GPUs of one
  process (the same core and built-in table): peer memory at 16 MiB and more, and
  at 4 MiB with 4 buffers; NCCL at the other measured points."""
  table = selection.with_backends(selection.load_cost_table(), "nccl,peer")
  t = selection.parse_topology(placed("1x1x2"), "nccl,peer")
  peer = {
    (buffers, 1024 << (2 * i))
    for buffers in (1, 2, 4)
    for i in range(10)
    if selection.decide(t, table, 1024 << (2 * i), ring(2), buffers=buffers)["plan"] == "peer"
  }
  assert peer == {(b, n) for b in (1, 2, 4) for n in (16 << 20, 64 << 20, 256 << 20)} | {
    (4, 4 << 20)
  }
  # Across processes the thunk would run NCCL: no peer.
  apart = selection.parse_topology("1x1x2:gpus_per_process=1")
  assert selection.decide(apart, table, 64 << 20, ring(2))["plan"] == "nccl"


def test_jax0112_one_process_table_puts_large_permutes_on_peer():
  """XLA of jax 0.11.2, one process driving both H200s: peer copies lose below
  a few MiB and win from 16 MiB on; NCCL elsewhere."""
  path = ROOT / "core" / "tables" / "h200x2_nvlink_cost_table_jax0112.txtpb"
  table = selection.load_cost_table(path)
  assert table.backends == "nccl,peer" and not table.symmetric_signals
  t = selection.parse_topology(placed("1x1x2"), table.backends)
  assert selection.decide(t, table, 1 << 10, ring(2))["plan"] == "nccl"
  big = selection.decide(t, table, 64 << 20, ring(2))
  assert big["plan"] == "peer" and "measured curve" in big["reason"]
  assert selection.decide(t, table, 64 << 20, ring(2), buffers=4)["plan"] == "peer"


def cp_ring_across_two_hosts():
  """tp 8 inside each host, cp 2 across: device t <-> t + 8."""
  return [e for t in range(8) for e in ((t, t + 8), (t + 8, t))]


def test_ring_across_hosts_never_gets_nvshmem():
  t = selection.parse_topology(placed("1x2x8"))
  edges = cp_ring_across_two_hosts()
  for spec in (placed("1x2x8"), placed("1x2x8:nvl16")):
    d = _selection_core.decide(
      selection.parse_topology(spec), selection.load_cost_table(), 8 << 20, edges, team_size=16
    )
    assert d["plan"] == "nccl"
    assert "16 of 16 edges leave their host" in d["refused"]["nvshmem"], d["reason"]
  with pytest.raises(ValueError, match="fast:1: NVSHMEM has no network row"):
    selection.CostTable.parse(
      "links { backend: NVSHMEM link_class: NETWORK latency_us: 12 }\n", "fast"
    )
  shift = [(d, d + 8) for d in range(8)]
  d = _selection_core.decide(t, selection.load_cost_table(), 8 << 20, shift, team_size=16)
  assert d["plan"] == "nccl" and "leave their host" in d["refused"]["nvshmem"]


def test_runtime_rules_types_and_memcpy_flag():
  t = selection.parse_topology(placed("1x1x8"))
  table = selection.load_cost_table()
  ok = _selection_core.decide(t, table, 32 << 20, ring(8), 8, 2, ["bf16", "bf16"])
  assert ok["plan"] == "nvshmem"
  fp8 = _selection_core.decide(t, table, 32 << 20, ring(8), 8, 2, ["bf16", "f8e4m3fn"])
  assert fp8["plan"] == "nccl"
  assert "element type f8e4m3fn is not one NVSHMEM puts" in fp8["refused"]["nvshmem"]
  flag = _selection_core.decide(t, table, 32 << 20, ring(8), 8, 2, ["bf16"], memcpy_local_p2p=True)
  assert flag["plan"] == "nccl" and "memcpy_local_p2p" in flag["refused"]["nvshmem"]
  with pytest.raises(ValueError, match="t:1: .*nvshmem_transport"):
    selection.CostTable.parse("nvshmem_transport: IBGDA\n", "t")
  assert "nvshmem_transport" not in str(table)


def test_peer_by_default_on_one_host_unless_one_process_per_gpu():
  """The backend set alone, no table: a one-host ring of 128 MiB gets peer
  memory; with one process per GPU XLA would run it as NCCL, so it is refused."""
  table = selection.with_backends(selection.load_cost_table(), "nccl,peer")
  d = selection.decide(selection.parse_topology("1x1x8", table.backends), table, 128 << 20, ring(8))
  assert d["plan"] == "peer" and "measured curve" in d["reason"], d["reason"]
  per_gpu = selection.parse_topology(placed("1x1x8:gpus_per_process=1"))
  assert per_gpu.gpus_per_process == 1
  assert str(per_gpu).startswith("1x1x8:gpus_per_process=1:map=0,1,")
  d = selection.decide(per_gpu, table, 128 << 20, ring(8))
  assert d["plan"] == "nccl"
  assert d["refused"]["peer"].startswith(
    "peer refused: 7 of the program's 8 devices are outside its first device's "
    "process (1 GPU per process)"
  )
  # Without a map the order of 8 processes is unknown, but under any order 7 of the
  # 8 devices are outside the first one's process: that is the reason, map or none.
  unknown = selection.decide(
    selection.parse_topology("1x1x8:gpus_per_process=1"), table, 128 << 20, ring(8)
  )
  assert unknown["refused"]["peer"] == d["refused"]["peer"]


def test_a_ring_no_order_fits_in_a_process_is_refused_for_that():
  """Four devices on hosts of two GPUs (one process each): no device order puts the
  ring in one process, so peer is refused for the process rule, not for the order
  the module does not state, and the reason gives no map to try."""
  table = selection.load_cost_table()
  d = selection.decide(
    selection.parse_topology("1x4x2", "nccl,peer"),
    table,
    128 << 20,
    ring(4),
    True,
    4,
    backends=("nccl", "peer"),
  )
  assert d["refused"]["peer"].startswith(
    "peer refused: 2 of the program's 4 devices are outside its first device's "
    "process (2 GPUs per process)"
  ), d["refused"]["peer"]
  assert "map=" not in d["refused"]["peer"]
  # NVSHMEM's rule is per edge, which an order can keep in one host: still unknown.
  d = selection.decide(
    selection.parse_topology("1x4x2:gpus_per_process=1"),
    table,
    1 << 20,
    ring(4),
    True,
    4,
    backends=("nccl", "nvshmem"),
  )
  assert "does not say which device runs each of its ids" in d["refused"]["nvshmem"]
  with pytest.raises(selection.SelectionError, match="must divide a host"):
    selection.parse_topology("1x1x8:gpus_per_process=3")


def test_process_layout_is_one_fact_for_every_backend():
  """NVSHMEM needs one GPU per process (the pinned XLA's pass keeps NCCL otherwise),
  peer one process for the program; the unstated layout is the set's default."""
  table = selection.load_cost_table()
  for spec in ("1x2x4:gpus_per_process=4", "1x1x8:gpus_per_process=8"):
    d = selection.decide(
      selection.parse_topology(placed(spec)), table, 32 << 20, ring(4), num_partitions=8
    )
    assert d["plan"] == "nccl"
    assert d["refused"]["nvshmem"].startswith("nvshmem refused: a process drives")
  assert selection.parse_topology("1x2x8").gpus_per_process == 1  # nccl,nvshmem
  assert selection.parse_topology("1x2x8", "nccl,peer").gpus_per_process == 8
  assert selection.parse_topology("1x2x8:gpus_per_process=2", "nccl,peer").gpus_per_process == 2
  said = selection.process_layout_text(selection.parse_topology("1x1x8"), False, "nccl,nvshmem")
  assert said.startswith("processes of 1 GPU (the default where the target XLA offers NVSHMEM")
  said = selection.process_layout_text(
    selection.parse_topology("1x1x8", "nccl,peer"), False, "nccl,peer"
  )
  assert said.startswith("processes of 8 GPUs (the default: one process per host")
  assert (
    selection.process_layout_text(
      selection.parse_topology("1x1x8:gpus_per_process=8"), True, "nccl,nvshmem"
    )
    == "processes of 8 GPUs (stated)"
  )


def test_default_peer_curve_is_the_committed_one_process_table():
  path = ROOT / "core" / "tables" / "h200x2_nvlink_cost_table_jax0112.txtpb"
  committed = selection.load_cost_table(path)
  default = selection.CostTable.default()
  assert default.points("peer", "nvlink") == committed.points("peer", "nvlink")
  assert len(default.points("peer", "nvlink")) == 30
  assert default.link("peer", "nvlink") == committed.link("peer", "nvlink")
  assert default.per_buffer_us("peer", "nvlink") == committed.per_buffer_us("peer", "nvlink")


@pytest.mark.parametrize(
  "fixture, spec",
  [
    ("train_step_1x2x8.after_optimizations.hlo", "1x2x8"),
    ("train_step_1x4x4.after_optimizations.hlo", "1x4x4"),
  ],
)
def test_real_train_step_rings_across_hosts_go_where_the_model_says(fixture, spec):
  """The Llama train step's context-parallel ring crosses hosts: NVSHMEM is
  refused there, whatever the table."""
  from hlo_tools.hlo import reader
  from hlo_tools.model import collectives

  module = reader.parse_hlo_file(str(FIXTURES / fixture))
  permutes = collectives.collective_permutes(module)
  assert permutes
  t = selection.parse_topology(placed(spec))
  for p in permutes:
    args = dict(num_partitions=module.num_partitions, buffers=p.buffers)
    default = selection.decide(t, selection.load_cost_table(), p.bytes_per_device, p.pairs, **args)
    assert default["edges_by_class"]["network"] > 0
    assert default["plan"] == "nccl"
    assert "leave their host" in default["refused"]["nvshmem"], default["reason"]


def test_nvshmem_put_types_are_the_cores():
  # The pinned runtime's put list (nvshmem_communicator.cc:367), asked of the core.
  puts = [
    t
    for t in (
      "f64",
      "f32",
      "f16",
      "bf16",
      "s32",
      "s64",
      "u32",
      "u64",
      "s8",
      "u8",
      "f8e4m3fn",
      "f8e5m2",
      "pred",
      "s16",
      "c64",
    )
    if selection.nvshmem_puts_type(t)
  ]
  assert puts == ["f64", "f32", "f16", "bf16", "s32", "s64", "u32", "u64"]


# Each rule of the core and its layer as the tools meet it through the binding:
# (topology spec, backends, decide's keyword arguments, plan, refusal text). A
# rule removed from the core or the layer fails its row here as well as a gtest.
FAST_PEER = "links { backend: PEER link_class: NVLINK latency_us: 1 bandwidth_gbps: 1e6 }\n"
FAST_SYMMETRIC = (
  "symmetric_signals: true\n"
  "links { backend: SYMMETRIC link_class: NVLINK latency_us: 1 "
  "bandwidth_gbps: 1e6 }\n"
)
RULE_ROWS = {
  "one GPU per process, at two": (
    placed("1x1x8:gpus_per_process=2"),
    "nccl,nvshmem",
    {},
    "nccl",
    "a process drives 2 GPUs",
  ),
  "local copies": (
    placed("1x1x8:gpus_per_process=1"),
    "nccl,nvshmem",
    {"pairs": [(i, i) for i in range(8)]},
    "nccl",
    "every pair is a device to itself",
  ),
  "NVSHMEM under a branch": (
    placed("1x1x8:gpus_per_process=1"),
    "nccl,nvshmem",
    {"place": "branch"},
    "nccl",
    "under a conditional's branch",
  ),
  "NVSHMEM in a collectives group": (
    placed("1x1x8:gpus_per_process=1"),
    "nccl,nvshmem",
    {"place": "group"},
    "nccl",
    "in a collectives group",
  ),
  "peer under a branch": (
    placed("1x1x8:gpus_per_process=8"),
    "nccl,peer",
    {"place": "branch"},
    "nccl",
    "under a conditional's branch",
  ),
  "symmetric under a branch": (
    placed("1x1x8:gpus_per_process=8"),
    "nccl,symmetric",
    {"place": "branch"},
    "nccl",
    "under a conditional's branch",
  ),
  "peer in a collectives group runs": (
    placed("1x1x8:gpus_per_process=8"),
    "nccl,peer",
    {"place": "group"},
    "peer",
    None,
  ),
  "a mark of a backend that can run": (
    placed("1x1x8:gpus_per_process=8"),
    "nccl,peer",
    {"bytes": 4096, "mark": "peer"},
    "peer",
    None,
  ),
}


@pytest.mark.parametrize("name", list(RULE_ROWS))
def test_each_rule_through_the_binding(tmp_path, name):
  spec, backends, kwargs, plan, refusal = RULE_ROWS[name]
  table_file = tmp_path / "fast.txt"
  table_file.write_text(FAST_PEER + FAST_SYMMETRIC)
  table = selection.load_cost_table(str(table_file))
  kwargs = dict(kwargs)
  pairs, size = kwargs.pop("pairs", ring(8)), kwargs.pop("bytes", 32 << 20)
  topology = selection.parse_topology(spec, backends)
  d = selection.decide(topology, table, size, pairs, backends=backends, **kwargs)
  assert d["plan"] == plan, d["reason"]
  if refusal is not None:
    assert any(refusal in r for r in d["refused"].values() if r), d["refused"]


def test_a_team_larger_than_the_topology_is_refused_nvshmem():
  # The binding's own call with the program's size (what the driver passes for a
  # module of more devices than the spec places): the team cannot be checked.
  topology = selection.parse_topology("1x1x4:gpus_per_process=1:map=0,1,2,3")
  table = selection.load_cost_table()
  fits = _selection_core.decide(topology, table, 32 << 20, ring(4), team_size=4)
  assert fits["plan"] == "nvshmem", fits["reason"]
  d = _selection_core.decide(topology, table, 32 << 20, ring(4), team_size=8)
  assert d["plan"] == "nccl"
  assert "the program's 8 devices are more than the topology places (4)" in d["refused"]["nvshmem"]


def test_place_of_is_the_cores_one_rule():
  """Where a permute sits, as every caller asks the core: a conditional's branch
  outranks a collectives group; the places are the decide call's own."""
  assert selection.place_of(False, False) == "anywhere"
  assert selection.place_of(False, True) == "group"
  assert selection.place_of(True, False) == "branch"
  assert selection.place_of(True, True) == "branch"
  assert {selection.place_of(b, g) for b in (0, 1) for g in (0, 1)} == set(selection.PLACES)


def test_layout_refusal_says_what_the_layout_alone_refuses():
  # NVSHMEM needs one GPU per process.
  two = selection.parse_topology("1x1x8:gpus_per_process=2")
  assert selection.layout_refusal(two, 8, "nvshmem").startswith(
    "nvshmem refused: a process drives 2 GPUs"
  )
  # One host, its order known: nothing for the layout to refuse.
  assert selection.layout_refusal(selection.parse_topology(placed("1x1x8")), 8, "nvshmem") is None
  # Two hosts and no map: which edges leave a host is unknown.
  unknown = selection.layout_refusal(selection.parse_topology("1x2x4"), 8, "nvshmem")
  assert "does not say which device runs each of its ids" in unknown
  # Peer with a process per host of 4: under any order 4 of 8 devices are elsewhere.
  hosts = selection.parse_topology("1x2x4", "nccl,peer")
  assert selection.layout_refusal(hosts, 8, "peer").startswith(
    "peer refused: 4 of the program's 8 devices are outside its first device's process"
  )
  assert selection.layout_refusal(selection.parse_topology("1x1x8", "nccl,peer"), 8, "peer") is None


def test_layout_never_refuses_nccl():
  # NCCL is the fallback of every refusal: decide always prices it.
  apart = selection.parse_topology("1x1x8:gpus_per_process=1")
  assert selection.decide(apart, selection.load_cost_table(), 1 << 20, ring(8))["plan"] == "nccl"
  assert selection.layout_refusal(apart, 8, "nccl") is None


def test_cost_table_file_that_is_empty_or_not_utf8(tmp_path):
  empty = tmp_path / "empty.txtpb"
  empty.write_text("\n  \n")
  with pytest.raises(selection.SelectionError, match=r"empty\.txtpb: empty file, no cost table"):
    selection.load_cost_table(empty)
  latin = tmp_path / "latin.txtpb"
  latin.write_bytes(b"margin: 0.1\n# caf\xe9\n")
  with pytest.raises(selection.SelectionError) as info:
    selection.load_cost_table(latin)
  assert str(info.value) == f"{latin}:2: not UTF-8 text (byte 17)"


def test_decide_refuses_a_place_it_does_not_know():
  t = selection.parse_topology(placed("1x1x2"))
  with pytest.raises(selection.SelectionError, match="place 'elsewhere' is not one of anywhere"):
    selection.decide(t, selection.load_cost_table(), 1024, ring(2), place="elsewhere")
