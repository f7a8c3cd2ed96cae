# Types of the selection core's binding (the compiled _selection_core module), for
# the type checker; tests/test_typing.py checks them against the built module.
import collections.abc
import typing

DEFAULT_INPUT_TIMEOUT_S: float
DEFAULT_MAX_INPUT_BYTES: int
SIDE_MAX_BYTES: int

class CostTable:
  backends: str
  margin: float
  nvshmem_max_bytes: int
  symmetric_signals: bool
  def __init__(self, *args: object, **kwargs: object) -> None: ...
  def copy(self) -> CostTable: ...
  @staticmethod
  def default() -> CostTable: ...
  def has_measured_curve(self, arg0: str, arg1: str) -> bool: ...
  def link(self, arg0: str, arg1: str) -> tuple[float, float]: ...
  @staticmethod
  def parse(text: str, source: str = ...) -> CostTable: ...
  def per_buffer_us(self, arg0: str, arg1: str) -> float: ...
  def points(self, arg0: str, arg1: str) -> list[tuple[int, int, float]]: ...
  def set_link(
    self,
    backend: str,
    link_class: str,
    latency_us: typing.SupportsFloat | typing.SupportsIndex,
    bandwidth_gbps: typing.SupportsFloat | typing.SupportsIndex,
    per_buffer_us: typing.SupportsFloat | typing.SupportsIndex,
    points: collections.abc.Sequence[
      tuple[
        typing.SupportsInt | typing.SupportsIndex,
        typing.SupportsInt | typing.SupportsIndex,
        typing.SupportsFloat | typing.SupportsIndex,
      ]
    ] = ...,
  ) -> None: ...
  def set_sm_interference(
    self, arg0: str, arg1: typing.SupportsFloat | typing.SupportsIndex
  ) -> None: ...
  def sm_interference(self, arg0: str) -> float: ...

class Topology:
  def __init__(self, *args: object, **kwargs: object) -> None: ...
  def classify(
    self,
    src_device: typing.SupportsInt | typing.SupportsIndex,
    dst_device: typing.SupportsInt | typing.SupportsIndex,
  ) -> str: ...
  @staticmethod
  def create(
    slices: typing.SupportsInt | typing.SupportsIndex,
    hosts_per_slice: typing.SupportsInt | typing.SupportsIndex,
    gpus_per_host: typing.SupportsInt | typing.SupportsIndex,
    nvlink_domain_size: typing.SupportsInt | typing.SupportsIndex = ...,
    partition_to_device: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] = ...,
    device_to_process: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] = ...,
    gpus_per_process: typing.SupportsInt | typing.SupportsIndex = ...,
  ) -> Topology: ...
  @staticmethod
  def parse(spec: str, backends: str | None = ...) -> Topology: ...
  @property
  def gpus_per_host(self) -> int: ...
  @property
  def gpus_per_process(self) -> int: ...
  @property
  def hosts_per_slice(self) -> int: ...
  @property
  def num_devices(self) -> int: ...
  @property
  def nvlink_domain_size(self) -> int: ...
  @property
  def device_to_process(self) -> list[int]: ...
  @property
  def partition_to_device(self) -> list[int]: ...
  @property
  def slices(self) -> int: ...

def backend_info() -> list[dict[str, str]]: ...
def backend_names() -> list[str]: ...
def decide(
  topology: Topology,
  table: CostTable,
  bytes: typing.SupportsInt | typing.SupportsIndex,
  device_edges: collections.abc.Sequence[
    tuple[typing.SupportsInt | typing.SupportsIndex, typing.SupportsInt | typing.SupportsIndex]
  ],
  team_size: typing.SupportsInt | typing.SupportsIndex = ...,
  buffers: typing.SupportsInt | typing.SupportsIndex = ...,
  element_types: collections.abc.Sequence[str] = ...,
  memcpy_local_p2p: bool = ...,
  groups: typing.SupportsInt | typing.SupportsIndex = ...,
  place: str = ...,
  mark: str | None = ...,
  destinations: collections.abc.Sequence[
    tuple[
      typing.SupportsInt | typing.SupportsIndex, typing.SupportsInt | typing.SupportsIndex, bool
    ]
  ] = ...,
) -> dict[str, typing.Any]: ...
def edge_ids_to_devices(
  topology: Topology,
  pairs: collections.abc.Sequence[
    tuple[typing.SupportsInt | typing.SupportsIndex, typing.SupportsInt | typing.SupportsIndex]
  ],
  cross_partition: bool,
  num_partitions: typing.SupportsInt | typing.SupportsIndex,
  num_replicas: typing.SupportsInt | typing.SupportsIndex,
) -> list[tuple[int, int]]: ...
def edge_time_us(
  table: CostTable,
  backend: str,
  link_class: str,
  bytes: typing.SupportsInt | typing.SupportsIndex,
  buffers: typing.SupportsInt | typing.SupportsIndex = ...,
) -> float: ...
def infer_partitions(
  ids_used: typing.SupportsInt | typing.SupportsIndex,
  mesh_devices: typing.SupportsInt | typing.SupportsIndex,
  topology_devices: typing.SupportsInt | typing.SupportsIndex,
  replicas: typing.SupportsInt | typing.SupportsIndex,
) -> tuple[int, str]: ...
def layout_refusal(
  topology: Topology, team_size: typing.SupportsInt | typing.SupportsIndex, backend: str
) -> str | None: ...
def link_classes() -> list[str]: ...
def nvshmem_hang_reason(
  device_edges: collections.abc.Sequence[
    tuple[typing.SupportsInt | typing.SupportsIndex, typing.SupportsInt | typing.SupportsIndex]
  ],
  team: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex],
) -> str | None: ...
def nvshmem_host_reason(
  topology: Topology,
  device_edges: collections.abc.Sequence[
    tuple[typing.SupportsInt | typing.SupportsIndex, typing.SupportsInt | typing.SupportsIndex]
  ],
  team: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex],
) -> str | None: ...
def nvshmem_heap_reason(
  table: CostTable, bytes: typing.SupportsInt | typing.SupportsIndex
) -> str | None: ...
def nvshmem_pe_reason(
  topology: Topology,
  team_size: typing.SupportsInt | typing.SupportsIndex,
  groups: typing.SupportsInt | typing.SupportsIndex,
) -> str | None: ...
def nvshmem_puts_type(element_type: str) -> bool: ...
def place_of(under_conditional_branch: bool, in_collectives_group: bool) -> str: ...
def process_layout_text(topology: Topology, stated: bool, backends: str) -> str: ...
def team_devices(
  topology: Topology, team_size: typing.SupportsInt | typing.SupportsIndex
) -> list[int]: ...
