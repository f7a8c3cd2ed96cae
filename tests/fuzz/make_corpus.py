"""Writes the seed corpora for tests/fuzz/driver_fuzzer and tests/fuzz/selection_fuzzer.

  python tests/fuzz/make_corpus.py OUT_DIR

OUT_DIR/driver/: every tests/fixtures/*.hlo and every module of the pass's C++
test (the HloModule raw strings of permute_backend_assigner_test.cc),
each under four
configurations named by a leading comment that XLA and nvshmem-opt skip
("/* driver_fuzzer --topology=T --mode=M [--slow-network] */", see
driver_fuzzer.cc), so every seed is a module file nvshmem-opt reads as it is;
plus every regression input under tests/fuzz/regressions/, as it is.
OUT_DIR/selection/: topology specs x cost tables x requests, then the rule
seeds (layouts, tables and requests that reach each backend's rules).
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
PASS_TEST = ROOT / "core/xla/backends/gpu/transforms/collectives/permute_backend_assigner_test.cc"
REGRESSIONS = ROOT / "tests" / "fuzz" / "regressions"

# driver_fuzzer's kTopologies and kModes. Each module gets its own topology with
# rewrite under the default costs and under slow NCCL on the network
# ("rewrite-slownet"), annotate on another topology, and explain.
TOPOLOGIES = [
  "1x1x8",
  "1x2x4",
  "2x2x4",
  "1x2x4:nvl8",
  "1x1x4",
  "2x2x2",
  "1x4x4:nvl8",
  "1x2x4:map=1,0,3,2,5,4,7,6",
]
MODES = ["rewrite", "annotate", "explain"]
TOPOLOGY_INDEX = {"1x1x8": 0, "1x2x4": 1, "2x2x4": 2}


def config_comment(code):
  """The comment naming configuration `code` (topology code % 8, mode code // 8 % 3,
  slow network code // 24 % 2)."""
  slow = " --slow-network" if (code // 24) % 2 else ""
  return (
    f"/* driver_fuzzer --topology={TOPOLOGIES[code % 8]} --mode={MODES[(code // 8) % 3]}{slow} */\n"
  ).encode()


def seed_modules():
  for path in sorted(FIXTURES.glob("*.hlo")):
    yield path.stem, path.read_bytes(), path.name.split(".")[0].split("_")[-1]
  text = PASS_TEST.read_text()
  for m in re.finditer(r'constexpr char (\w+)\[\] = R"(\w*)\((.*?)\)\2";', text, re.S):
    body = m.group(3).strip()
    if body.startswith("HloModule"):
      yield m.group(1), body.encode() + b"\n", "1x2x4"


# Seeds that reach each rule of NVSHMEM, peer and symmetric memory: layouts
# with one GPU per process (identity and permuted maps, two hosts, no map) and
# with several, tables under which each backend beats NCCL at any size, and
# requests that a rule must refuse (a shift, local copies, groups, a ring
# across hosts, a heap at its boundary), with the op's facts (types, the
# memcpy flag, a branch, a collectives group, a team the topology lacks).
IDENTITY = ",".join(map(str, range(8)))
RULE_SPECS = [
  f"1x1x8:gpus_per_process=1:map={IDENTITY}",
  "1x1x8:gpus_per_process=1:map=1,0,3,2,5,4,7,6",
  f"1x2x4:gpus_per_process=1:map={IDENTITY}",
  "1x2x4:gpus_per_process=1:map=0,4,1,5,2,6,3,7",
  # One NVLink domain over two hosts (NVL8 of 2x4): the cost model prices
  # every edge as NVLink, so only the host rules keep a ring on NCCL.
  f"1x2x4:nvl8:gpus_per_process=1:map={IDENTITY}",
  f"1x2x4:nvl8:gpus_per_process=4:map={IDENTITY}",
  "1x1x8:gpus_per_process=1",
  f"1x1x8:gpus_per_process=2:map={IDENTITY}",
  f"1x1x8:gpus_per_process=8:map={IDENTITY}",
  f"1x2x4:gpus_per_process=4:map={IDENTITY}",
]
FAST = "latency_us: 0 bandwidth_gbps: 1e6 per_buffer_us: 0"
RULE_TABLES = [
  f"links {{ backend: NVSHMEM link_class: NVLINK {FAST} }}\nnvshmem_max_bytes: 67108864\n",
  f"backends: [NCCL, PEER]\nlinks {{ backend: PEER link_class: NVLINK {FAST} }}\n",
  "backends: [NCCL, SYMMETRIC]\nsymmetric_signals: true\n"
  f"links {{ backend: SYMMETRIC link_class: NVLINK {FAST} }}\n",
]
RING8 = "0 1 1 2 2 3 3 4 4 5 5 6 6 7 7 0"
RULE_REQUESTS = [
  f"33554432 8 1 1 {RING8}",  # a ring, at half the heap
  f"33554433 8 1 1 {RING8}",  # one byte over
  "1048576 8 1 1 0 1 1 2 2 3 3 4 4 5 5 6 6 7",  # a shift: device 0 no source
  "1048576 8 1 1 0 0 1 1 2 2 3 3 4 4 5 5 6 6 7 7",  # local copies
  "1048576 4 2 1 0 1 1 2 2 3 3 0",  # two groups of a ring of 4
  "1048576 4 1 1 0 1 1 2 2 3 3 0",  # a ring of the first 4
]
RULE_FACTS = [
  "",
  "types=f32",
  "types=bf16,s8",
  "types=pred",
  "memcpy",
  "branch",
  "group",
  "team=16",
  "team=4",
]


def write_rule_seeds(selection, n):
  """Writes the rule seeds after the `n` others; returns the new count."""
  for spec in RULE_SPECS:
    for table in RULE_TABLES:
      for request in RULE_REQUESTS:
        facts = RULE_FACTS if request.startswith("33554432 ") else [""]
        for fact in facts:
          (selection / f"seed{n:03d}").write_text(f"{spec}\n%%\n{table}%%\n{request}\n%%\n{fact}\n")
          n += 1
  return n


def main(argv):
  out = pathlib.Path(argv[1] if len(argv) > 1 else "build-fuzz/corpus")
  driver, selection = out / "driver", out / "selection"
  driver.mkdir(parents=True, exist_ok=True)
  selection.mkdir(parents=True, exist_ok=True)
  count = 0
  for name, data, topology in seed_modules():
    base = TOPOLOGY_INDEX.get(topology, 1)
    for extra, tag in (
      (0, "rewrite"),
      (24, "rewrite-slownet"),
      (3 + 8, "annotate-nvl8"),
      (16, "explain"),
    ):
      (driver / f"{name}.{tag}").write_bytes(config_comment(base + extra) + data)
      count += 1
  for path in sorted(REGRESSIONS.glob("*")) if REGRESSIONS.is_dir() else []:
    if path.is_file() and path.suffix in (".hlo", ".pb"):
      (driver / f"regression.{path.name}").write_bytes(path.read_bytes())
      count += 1
  specs = [
    "1x1x8",
    "1x2x4",
    "2x2x4",
    "1x2x4:nvl8",
    "1x9x8:nvl72",
    "1x2x4:map=1,0,3,2,5,4,7,6",
    "2x2x4:nvl=8",
  ]
  tables = [
    "",
    "links { backend: NCCL link_class: NETWORK latency_us: 1 bandwidth_gbps: 900 per_buffer_us: 0 }\nsm_interference { backend: NCCL fraction: 4 }\n",
    "margin: 0.5\nnvshmem_max_bytes: 1024\n# comment\n",
    "links { backend: NVSHMEM link_class: NVLINK latency_us: 0 bandwidth_gbps: 1e-3 per_buffer_us: 0 }\n",
    "links { backend: NCCL link_class: NVLINK points { buffers: 1 bytes: 1024 us: 14 } points { buffers: 4 bytes: 1024 us: 40 } points { buffers: 1 bytes: 1048576 us: 20 } }\nsm_interference { backend: NCCL fraction: 0 }\n",
    "backends: [NCCL, PEER]\nlinks { backend: PEER link_class: NVLINK latency_us: 2 }\n",
  ]
  requests = [
    "1048576 8 1 1 0 1 1 2 2 3 3 4 4 5 5 6 6 7 7 0",
    "4096 8 1 1 0 4 4 0",
    "0 4 2 0 0 1 1 0",
    "67108864 16 1 1 0 8 8 0 3 11",
  ]
  n = 0
  for spec in specs:
    for table in tables:
      for request in requests:
        (selection / f"seed{n:03d}").write_text(f"{spec}\n%%\n{table}%%\n{request}\n")
        n += 1
  n = write_rule_seeds(selection, n)
  print(f"{count} driver seeds in {driver}, {n} selection seeds in {selection}")


if __name__ == "__main__":
  main(sys.argv)
