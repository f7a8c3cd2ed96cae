"""Writes the seed corpora for fuzz/driver_fuzzer and fuzz/selection_fuzzer.

  python fuzz/make_corpus.py OUT_DIR

OUT_DIR/driver/: every tests/fixtures/*.hlo and every module of the pass's C++
test (the HloModule raw strings of nvshmem_collective_permute_rewriter_test.cc),
each under four
configurations named by a leading comment that XLA and nvshmem-opt skip
("/* driver_fuzzer --topology=T --mode=M [--slow-network] */", see
driver_fuzzer.cc), so every seed is a module file nvshmem-opt reads as it is;
plus every regression input under fuzz/regressions/, as it is.
OUT_DIR/selection/: topology specs x cost tables x requests.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
PASS_TEST = (ROOT / "xla_src/xla/backends/gpu/transforms/collectives/"
             "nvshmem_collective_permute_rewriter_test.cc")
REGRESSIONS = ROOT / "fuzz" / "regressions"

# driver_fuzzer's kTopologies and kModes. Each module gets its own topology with
# rewrite under the default costs and under slow NCCL on the network
# ("rewrite-slownet"), annotate on another topology, and explain.
TOPOLOGIES = ["1x1x8", "1x2x4", "2x2x4", "1x2x4:nvl8", "1x1x4", "2x2x2", "1x4x4:nvl8",
              "1x2x4:map=1,0,3,2,5,4,7,6"]
MODES = ["rewrite", "annotate", "explain"]
TOPOLOGY_INDEX = {"1x1x8": 0, "1x2x4": 1, "2x2x4": 2}


def config_comment(code):
  """The comment naming configuration `code` (topology code % 8, mode code // 8 % 3,
  slow network code // 24 % 2)."""
  slow = " --slow-network" if (code // 24) % 2 else ""
  return (f"/* driver_fuzzer --topology={TOPOLOGIES[code % 8]} "
          f"--mode={MODES[(code // 8) % 3]}{slow} */\n").encode()


def seed_modules():
  for path in sorted(FIXTURES.glob("*.hlo")):
    yield path.stem, path.read_bytes(), path.name.split(".")[0].split("_")[-1]
  text = PASS_TEST.read_text()
  for m in re.finditer(r'constexpr char (\w+)\[\] = R"(\w*)\((.*?)\)\2";', text, re.S):
    body = m.group(3).strip()
    if body.startswith("HloModule"):
      yield m.group(1), body.encode() + b"\n", "1x2x4"


def main(argv):
  out = pathlib.Path(argv[1] if len(argv) > 1 else "build-fuzz/corpus")
  driver, selection = out / "driver", out / "selection"
  driver.mkdir(parents=True, exist_ok=True)
  selection.mkdir(parents=True, exist_ok=True)
  count = 0
  for name, data, topology in seed_modules():
    base = TOPOLOGY_INDEX.get(topology, 1)
    for extra, tag in ((0, "rewrite"), (24, "rewrite-slownet"), (3 + 8, "annotate-nvl8"),
                       (16, "explain")):
      (driver / f"{name}.{tag}").write_bytes(config_comment(base + extra) + data)
      count += 1
  for path in sorted(REGRESSIONS.glob("*")) if REGRESSIONS.is_dir() else []:
    if path.is_file() and path.suffix in (".hlo", ".pb"):
      (driver / f"regression.{path.name}").write_bytes(path.read_bytes())
      count += 1
  specs = ["1x1x8", "1x2x4", "2x2x4", "1x2x4:nvl8", "1x9x8:nvl72",
           "1x2x4:map=1,0,3,2,5,4,7,6", "2x2x4:nvl=8"]
  tables = ["",
            "links { backend: NCCL link_class: NETWORK latency_us: 1 bandwidth_gbps: 900 per_buffer_us: 0 }\nsm_interference { backend: NCCL fraction: 4 }\n",
            "margin: 0.5\nnvshmem_max_bytes: 1024\n# comment\n",
            "links { backend: NVSHMEM link_class: NVLINK latency_us: 0 bandwidth_gbps: 1e-3 per_buffer_us: 0 }\n",
            "links { backend: NCCL link_class: NVLINK points { buffers: 1 bytes: 1024 us: 14 } points { buffers: 4 bytes: 1024 us: 40 } points { buffers: 1 bytes: 1048576 us: 20 } }\nsm_interference { backend: NCCL fraction: 0 }\n",
            "backends: [NCCL, PEER]\nlinks { backend: PEER link_class: NVLINK latency_us: 2 }\n"]
  requests = ["1048576 8 1 1 0 1 1 2 2 3 3 4 4 5 5 6 6 7 7 0",
              "4096 8 1 1 0 4 4 0", "0 4 2 0 0 1 1 0", "67108864 16 1 1 0 8 8 0 3 11"]
  n = 0
  for spec in specs:
    for table in tables:
      for request in requests:
        (selection / f"seed{n:03d}").write_text(f"{spec}\n%%\n{table}%%\n{request}\n")
        n += 1
  print(f"{count} driver seeds in {driver}, {n} selection seeds in {selection}")


if __name__ == "__main__":
  main(sys.argv)
