"""hlo_tools.model.placement: the module's device map from XLA's config beside it (or
the driver's JSON), merged into the topology a command decides on."""

import dataclasses
import shutil

import pytest

from hlo_tools.errors import InputError
from hlo_tools.model import options, placement

from conftest import FIXTURES

PERM = FIXTURES / "perm_ring_1x2x4.after_optimizations.hlo"
PERM_CONFIG = FIXTURES / "perm_ring_1x2x4.after_optimizations.config.pbtxt"
# perm_ring's config: computation p runs on device 0,4,1,5,2,6,3,7 (one replica).
SPREAD = [0, 4, 1, 5, 2, 6, 3, 7]


def test_a_map_of_replicas_and_partitions_is_in_the_cores_order(tmp_path):
  """XLA's config names computation p's device for replica r; the core's map is indexed
  r + p * replicas (as nvshmem-opt reads the same config), not XLA's r * partitions + p."""
  config = tmp_path / "m.config.pbtxt"
  config.write_text(
    "replica_count: 2\nnum_partitions: 2\nstatic_device_assignment {\n"
    "  replica_count: 2\n  computation_count: 2\n"
    "  computation_devices { replica_device_ids: 0 replica_device_ids: 2 }\n"
    "  computation_devices { replica_device_ids: 1 replica_device_ids: 3 }\n"
    "}\n"
  )
  device_map, origin = placement.module_map(str(tmp_path / "m.hlo"))
  # (r0,p0)=0, (r1,p0)=2, (r0,p1)=1, (r1,p1)=3.
  assert device_map == [0, 2, 1, 3] and origin == str(config)


def test_spec_map_is_the_map_option_only():
  assert placement.spec_map("1x2x4") is None
  assert placement.spec_map("1x2x4:map=0,4,1,5,2,6,3,7") == "0,4,1,5,2,6,3,7"
  assert placement.spec_map("1x2x4:nvl8:map=1,0:gpus_per_process=1") == "1,0"


def test_config_path_beside_a_file_and_in_a_dump_folder(tmp_path):
  assert placement.config_path(str(PERM)) == str(PERM_CONFIG)
  alone = tmp_path / "alone.hlo"
  shutil.copyfile(PERM, alone)
  assert placement.config_path(str(alone)) is None
  assert placement.config_path(None) is None
  # A folder: its main module's config (the manifest names module_0001.jit_ring_product_grad).
  dump = FIXTURES / "ring_product_grad_1x2x4.passes"
  assert placement.config_path(str(dump)) == str(
    dump / "xla_dump" / "module_0001.jit_ring_product_grad.config.pbtxt"
  )


def test_module_map_of_a_real_config():
  assert placement.module_map(str(PERM)) == (SPREAD, str(PERM_CONFIG))


def test_the_reader_places_a_module_by_its_config():
  selected = placement.placed_by_reader(options.load("1x2x4"), str(PERM))
  assert selected.settled
  assert selected.spec == "1x2x4:map=0,4,1,5,2,6,3,7"
  assert selected.topology.partition_to_device == SPREAD
  assert selected.placement == f"the module's device assignment ({PERM_CONFIG})"
  assert placement.placement_text(selected) == (
    f"device order: the module's device assignment ({PERM_CONFIG})"
  )


def test_a_spec_with_its_own_map_keeps_it():
  same = placement.placed_by_reader(options.load("1x2x4:map=0,4,1,5,2,6,3,7"), str(PERM))
  assert same.spec == "1x2x4:map=0,4,1,5,2,6,3,7"
  assert same.placement == f"the module's device assignment ({PERM_CONFIG})"
  other = placement.placed_by_reader(options.load("1x2x4:map=0,1,2,3,4,5,6,7"), str(PERM))
  assert other.spec == "1x2x4:map=0,1,2,3,4,5,6,7"
  assert other.topology.partition_to_device == list(range(8))
  assert other.placement == "the topology's map"


def test_without_a_config_the_order_is_unknown(tmp_path):
  alone = tmp_path / "alone.hlo"
  shutil.copyfile(PERM, alone)
  selected = placement.placed_by_reader(options.load("1x2x4"), str(alone))
  assert selected.settled and selected.placement is None and selected.spec == "1x2x4"
  assert placement.placement_text(selected).startswith("device order: unknown (")


def test_a_map_wider_than_the_topology_is_bad_input():
  with pytest.raises(InputError, match=r"places 8 devices, more than topology 1x1x4 has \(4\)"):
    placement.placed_by_reader(options.load("1x1x4"), str(PERM))


# The driver's JSON on perm_ring at 1x2x4 (what placement reads of it).
REPORT = {
  "placed": {
    "slices": 1,
    "hosts_per_slice": 2,
    "gpus_per_host": 4,
    "nvlink_domain_size": 4,
    "gpus_per_process": 1,
    "device_to_process": [],
  },
  "partition_to_device": SPREAD,
  "placement": f"the module's device assignment ({PERM_CONFIG})",
}


def test_from_report_takes_the_drivers_map_and_topology():
  selected = placement.from_report(options.load("1x2x4"), REPORT)
  assert selected.settled and selected.spec == "1x2x4:map=0,4,1,5,2,6,3,7"
  assert selected.topology.partition_to_device == SPREAD
  assert selected.placement == REPORT["placement"]
  # A spec with a map of its own is kept as given.
  stated = placement.from_report(options.load("1x2x4:map=0,4,1,5,2,6,3,7"), REPORT)
  assert stated.spec == "1x2x4:map=0,4,1,5,2,6,3,7"
  # No JSON: as given, settled, no map known.
  bare = placement.from_report(options.load("1x2x4"), None)
  assert (bare.spec, bare.placement, bare.settled) == ("1x2x4", None, True)


def test_settled_prefers_the_report_and_settles_once(tmp_path):
  alone = tmp_path / "alone.hlo"
  shutil.copyfile(PERM, alone)
  # The driver's JSON wins over what lies beside the file (nothing, here).
  assert (
    placement.settled(options.load("1x2x4"), str(alone), REPORT).placement == (REPORT["placement"])
  )
  # Without one the reader places it.
  assert placement.settled(options.load("1x2x4"), str(PERM), None).spec.endswith(
    ":map=0,4,1,5,2,6,3,7"
  )
  done = dataclasses.replace(options.load("1x2x4"), settled=True)
  assert placement.settled(done, str(PERM), REPORT) is done


def test_layout_text_says_where_the_process_layout_came_from():
  assert placement.layout_text(options.load("1x1x8")).startswith(
    "processes of 1 GPU (the default where the target XLA offers NVSHMEM"
  )
  assert placement.layout_text(options.load("1x2x4:gpus_per_process=4")).endswith("(stated)")
