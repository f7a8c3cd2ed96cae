"""nvshmem-opt's JSON report, typed: a mirror of nvshmem_opt/report.proto.

The driver prints its Report through protobuf's JSON printer with the proto's
field names and every field (report.cc), so each message is a TypedDict here,
field for field; tests/model/test_driver_report.py holds the two together through
protoc's own descriptor of the proto. google.protobuf.Value fields are Any (null
where nothing applies); `upstream` is printed only with --compare-upstream.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class Loop(TypedDict):
  while_loop: str
  computation: str
  trip_count: Any  # Value: an int, or null where no analysis knows it


class Decision(TypedDict):
  computation: str
  instruction: str
  form: str
  bytes: int
  pairs: list[list[Any]]
  plan: str
  backend: str
  collectives_mode: Any
  skipped: bool
  reason: str
  modeled_us: dict[str, Any]
  edges_by_class: dict[str, Any]
  new_instructions: list[str]
  upstream: NotRequired[Any]
  refused: dict[str, Any]
  buffers: int
  edges: list[list[Any]]
  loops: list[Loop]
  user_mark: str
  current_plan: Any
  current_refused: Any


class PlacedTopology(TypedDict):
  slices: int
  hosts_per_slice: int
  gpus_per_host: int
  nvlink_domain_size: int
  gpus_per_process: int
  device_to_process: list[int]


class Report(TypedDict):
  input: str
  topology: str
  topology_source: str
  mode: str
  changed: bool
  pass_us: float
  decisions: list[Decision]
  num_partitions: int
  num_replicas: int
  partitions_from: str
  processes: str
  placement: str
  partition_to_device: list[int]
  spec: str
  module_config: str
  collective_permute_mode: str
  placed: PlacedTopology
  other_host_shapes: list[str]
