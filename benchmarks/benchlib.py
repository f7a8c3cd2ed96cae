"""What the GPU measurement scripts in benchmarks/ share: the child processes' environment,
size and list arguments, starting workers and waiting for them under a deadline,
their rendezvous, and atomic CSV / JSON output. Each script keeps only its
measurement.

The scripts run as `python3 benchmarks/NAME.py` (and are loaded by path in the tests),
so they import this module as `benchlib` after putting benchmarks/ on sys.path.
"""

import csv
import io
import json
import os
import re
import signal
import socket
import subprocess
import time

# NVLink multicast stays off in every process (NCCL, NVSHMEM and PyTorch).
MULTICAST_OFF = {
  "NCCL_NVLS_ENABLE": "0",
  "NVSHMEM_DISABLE_NVLS": "1",
  "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
}

_UNITS = {
  "": 1,
  "B": 1,
  "K": 1 << 10,
  "KB": 1 << 10,
  "KIB": 1 << 10,
  "M": 1 << 20,
  "MB": 1 << 20,
  "MIB": 1 << 20,
  "G": 1 << 30,
  "GB": 1 << 30,
  "GIB": 1 << 30,
}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([A-Za-z]*)\s*$")


class BenchError(Exception):
  """A user-facing failure, printed as one line."""


def parse_size(text):
  """'1K' -> 1024, '256M' -> 268435456, '4096' -> 4096 (binary units)."""
  m = _SIZE_RE.match(text)
  if not m or m.group(2).upper() not in _UNITS:
    raise BenchError(f"bad size {text!r} (e.g. 4096, 1K, 256M, 1G)")
  value = int(m.group(1)) * _UNITS[m.group(2).upper()]
  if value <= 0:
    raise BenchError(f"size {text!r} must be positive")
  return value


def _size_range(part, factor):
  fields = part.split(":")
  if len(fields) not in (2, 3):
    raise BenchError(f"bad size range {part!r} (A:B or A:B:FACTOR)")
  lo, hi = parse_size(fields[0]), parse_size(fields[1])
  if len(fields) == 3:
    if not fields[2].strip().isdigit() or int(fields[2]) < 2:
      raise BenchError(f"bad factor in {part!r}: a whole number >= 2")
    factor = int(fields[2])
  if lo > hi:
    raise BenchError(f"empty size range {part!r}")
  sizes, s = [], lo
  while s <= hi:
    sizes.append(s)
    s *= factor
  return sizes


def parse_sizes(text, factor=2):
  """'1K:256M' -> 1 KiB to 256 MiB, each `factor` times the last; 'A:B:F' steps by F;
  '1K,4K,1M' -> that list. Sorted, no repeats."""
  sizes = set()
  for part in (p.strip() for p in text.split(",")):
    if part:
      sizes.update(_size_range(part, factor) if ":" in part else [parse_size(part)])
  if not sizes:
    raise BenchError("no sizes given")
  return sorted(sizes)


def parse_list(text, allowed=None, cast=str, what="item"):
  """'a,b' -> ['a', 'b'] (cast each, no repeats, every item in `allowed` if given)."""
  try:
    items = [cast(t.strip()) for t in text.split(",") if t.strip()]
  except ValueError:
    raise BenchError(f"bad list {text!r}") from None
  if not items:
    raise BenchError(f"empty list {text!r}")
  if allowed is not None:
    bad = [i for i in items if i not in allowed]
    if bad:
      raise BenchError(f"unknown {what} {bad}; known: {', '.join(allowed)}")
  return list(dict.fromkeys(items))


def child_env(base=None, extra=None, xla_flags=(), drop_flags=()):
  """A child's environment: `base` (default ours), multicast off, unbuffered output,
  XLA_FLAGS without the flags starting with `drop_flags` plus `xla_flags`, and `extra`."""
  env = dict(os.environ if base is None else base)
  env.update(MULTICAST_OFF)
  env["PYTHONUNBUFFERED"] = "1"
  if xla_flags or drop_flags:
    kept = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(tuple(drop_flags))]
    env["XLA_FLAGS"] = " ".join(kept + list(xla_flags))
  if extra:
    env.update(extra)
  return env


# Workers and their rendezvous


def free_port():
  """A free local TCP port for jax.distributed's coordinator."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def spawn(cmd, env, log=None):
  """A worker in its own process group (so a deadline kills it with its children)."""
  return subprocess.Popen(
    cmd, env=env, stdout=log, stderr=subprocess.STDOUT if log else None, start_new_session=True
  )


def kill(procs):
  """SIGKILL the process groups of the workers still running, then reap them all."""
  for p in procs:
    if p.poll() is None:
      try:
        os.killpg(p.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
  for p in procs:
    p.wait()


def wait_all(procs, timeout):
  """'finished', 'failed (exit [...])' or 'timed out' (the rest killed)."""
  deadline = time.time() + timeout
  while any(p.poll() is None for p in procs):
    if time.time() > deadline:
      kill(procs)
      return "timed out"
    time.sleep(0.2)
  codes = [p.returncode for p in procs]
  return "finished" if not any(codes) else f"failed (exit {codes})"


def publish(rdv, name, data):
  """Puts bytes under `name` in the rendezvous directory, atomically."""
  tmp = os.path.join(rdv, f".{name}.{os.getpid()}")
  with open(tmp, "wb") as f:
    f.write(data)
  os.replace(tmp, os.path.join(rdv, name))


def wait_for(rdv, name, timeout=120):
  path = os.path.join(rdv, name)
  deadline = time.time() + timeout
  while not os.path.exists(path):
    if time.time() > deadline:
      raise BenchError(f"timed out waiting for {name} in {rdv}")
    time.sleep(0.01)
  with open(path, "rb") as f:
    return f.read()


def file_barrier(rdv, tag, rank, nprocs, timeout=120):
  publish(rdv, f"barrier_{tag}_{rank}", b"1")
  for r in range(nprocs):
    wait_for(rdv, f"barrier_{tag}_{r}", timeout)


# Output


def write_text(path, text):
  """hlo-tools' one writer: a regular file atomically, a device or FIFO in place."""
  from hlo_tools.atomic_output import write_atomic  # pylint: disable=import-outside-toplevel

  write_atomic(path, text.encode("utf-8"))


def write_csv(path, header, rows, comments=()):
  """Rows (dicts keyed by the header, or sequences) under `header`; comments first as '# ...'."""
  buf = io.StringIO()
  for c in comments:
    buf.write(f"# {c}\n")
  w = csv.writer(buf, lineterminator="\n")
  w.writerow(header)
  for row in rows:
    w.writerow([row.get(k, "") for k in header] if isinstance(row, dict) else row)
  write_text(path, buf.getvalue())


def write_json(path, data):
  write_text(path, json.dumps(data, indent=1, default=str))
