#!/usr/bin/env python3
"""Point-to-point microbenchmark: NVSHMEM on-stream put vs NCCL send/recv, ring i -> i+1.

    python3 benchmarks/p2p_bench.py --out=p2p.csv [--sizes=1K:256M] [--backends=nccl,nvshmem]
                             [--copy-out=copy.csv] [--nprocs=N] [--details=p2p.json]

One process per GPU (N = visible GPUs unless --nprocs says otherwise). Rank r sends
to (r+1) mod N and receives from (r-1) mod N; with one GPU that is the self-ring
0 -> 0. For each message size the step is:

  nccl     ncclGroupStart; ncclSend(next); ncclRecv(prev); ncclGroupEnd
           (what XLA's NCCL collective-permute issues), through a small ctypes
           binding of the libnccl that PyTorch loads;
  nvshmem  nvshmemx_putmem_on_stream(next) + nvshmemx_quiet_on_stream, and with
           N > 1 nvshmemx_barrier_all_on_stream so the receiver may read the data
           (nvshmem4py's low-level bindings, symmetric buffers from nvshmem4py).

Steps are timed with CUDA events: K steps are captured into one CUDA graph and
replayed (falling back to eager launches when capture fails), the time per step
is the median over the replays. A size's row in the CSV is the slowest rank's
median (a ring step ends when its slowest edge does).

The copy ceiling (cudaMemcpyAsync device-to-device on one GPU, and peer-to-peer
GPU i -> i+1 when there are two or more) is measured by one extra process that
sees every GPU and goes to --copy-out.

The CSV has the header `backend,link_class,bytes,seconds` (then extra columns
that `hlo-tools heuristics calibrate` ignores) so it can be fed to calibrate as is.
link_class is same_device for the self-ring and nvlink for GPUs of one host.

NVLink multicast stays off: NCCL_NVLS_ENABLE=0, NVSHMEM_DISABLE_NVLS=1 and
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 are set here and in every child's environment.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # pylint: disable=wrong-import-position
from benchlib import (  # pylint: disable=wrong-import-position,unused-import
  MULTICAST_OFF,
  BenchError,
  parse_sizes,
  publish as _publish,
  wait_for as _wait_for,
)

# Keep NVLink multicast off everywhere (the device machines ask for it: a program
# that uses it can put a shared host's GPUs out of service).
os.environ.update(MULTICAST_OFF)

CSV_COLUMNS = ("backend", "link_class", "bytes", "seconds", "gbps", "ranks", "iters", "mode")
BACKENDS = ("nccl", "nvshmem")
COPY_BACKENDS = ("cuda_memcpy_d2d", "cuda_memcpy_peer")
DEFAULT_SIZES = "1K:256M"
# ---------------------------------------------------------------------------
# Pure helpers (tested on the CPU)


def link_class_for(nprocs):
  """The calibrate link class of the ring's edges: the self-ring or one host's GPUs."""
  return "same_device" if nprocs == 1 else "nvlink"


def iterations_for(nbytes, target_s=2e-3, lo=5, hi=100):
  """Steps per timed replay: about target_s of work, between lo and hi."""
  estimate = 10e-6 + nbytes / 1e12
  return max(lo, min(hi, int(target_s / estimate)))


def ring_peers(rank, nprocs):
  """(send_to, receive_from) of rank in the ring i -> i+1."""
  return (rank + 1) % nprocs, (rank - 1) % nprocs


def merge_rank_results(per_rank):
  """[{bytes: (seconds, iters, mode)}] per rank -> {bytes: (max seconds, iters, mode)}.

  The ring step is as slow as its slowest edge, so each size keeps the largest
  of the ranks' medians. A size missing on any rank is dropped.
  """
  if not per_rank:
    return {}
  common = set(per_rank[0])
  for r in per_rank[1:]:
    common &= set(r)
  merged = {}
  for nbytes in sorted(common):
    worst = max((r[nbytes] for r in per_rank), key=lambda t: t[0])
    modes = sorted({r[nbytes][2] for r in per_rank})
    merged[nbytes] = (worst[0], worst[1], "+".join(modes))
  return merged


def csv_rows(backend, link_class, merged, nprocs):
  """Rows (dicts keyed by CSV_COLUMNS) of one backend's merged results."""
  rows = []
  for nbytes, (seconds, iters, mode) in sorted(merged.items()):
    rows.append(
      {
        "backend": backend,
        "link_class": link_class,
        "bytes": nbytes,
        "seconds": f"{seconds:.9g}",
        "gbps": f"{nbytes / seconds / 1e9:.6g}" if seconds > 0 else "",
        "ranks": nprocs,
        "iters": iters,
        "mode": mode,
      }
    )
  return rows


def write_csv(path, rows, comments=()):
  """Writes rows under the header calibrate reads; comments go first as '# ...'."""
  benchlib.write_csv(path, CSV_COLUMNS, rows, comments)


def child_env(extra=None):
  """The environment of a child process: ours, multicast off, and extra."""
  return benchlib.child_env(extra=extra)


def build_parser():
  p = argparse.ArgumentParser(prog="p2p_bench.py", description=__doc__.split("\n\n")[0])
  p.add_argument("--out", default="p2p.csv", help="CSV for calibrate (nccl, nvshmem)")
  p.add_argument(
    "--copy-out", default=None, help="CSV of the copy ceiling (default: OUT with _copy before .csv)"
  )
  p.add_argument("--details", default=None, help="JSON with per-rank results and errors")
  p.add_argument(
    "--sizes",
    default=DEFAULT_SIZES,
    help="sizes: A:B doubles from A to B, or a comma list (1K,64K,1M)",
  )
  p.add_argument(
    "--backends", default="nccl,nvshmem,copy", help="comma list of nccl, nvshmem, copy"
  )
  p.add_argument(
    "--nprocs",
    type=int,
    default=None,
    help="processes = GPUs in the ring (default: all visible GPUs)",
  )
  p.add_argument("--reps", type=int, default=7, help="timed replays per size")
  p.add_argument("--warmup", type=int, default=3, help="untimed steps per size")
  p.add_argument("--timeout", type=float, default=300, help="seconds per worker group")
  p.add_argument("--no-graph", action="store_true", help="eager launches, no CUDA graph")
  # Internal: a worker process.
  p.add_argument("--worker", choices=BACKENDS + ("copy",), help=argparse.SUPPRESS)
  p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
  p.add_argument("--rdv", default=None, help=argparse.SUPPRESS)
  p.add_argument("--result", default=None, help=argparse.SUPPRESS)
  return p


def parse_args(argv):
  args = build_parser().parse_args(argv)
  args.size_list = parse_sizes(args.sizes)
  wanted = [b.strip() for b in args.backends.split(",") if b.strip()]
  bad = [b for b in wanted if b not in BACKENDS + ("copy",)]
  if bad or not wanted:
    raise BenchError(f"unknown backend(s) {bad or args.backends!r}: nccl, nvshmem, copy")
  args.backend_list = wanted
  if args.nprocs is not None and args.nprocs < 1:
    raise BenchError("--nprocs must be >= 1")
  if args.reps < 1 or args.warmup < 0:
    raise BenchError("--reps must be >= 1 and --warmup >= 0")
  if args.copy_out is None:
    root, ext = os.path.splitext(args.out)
    args.copy_out = f"{root}_copy{ext or '.csv'}"
  return args


# ---------------------------------------------------------------------------
# GPU side (runs on the device only)


class _Nccl:
  """The few NCCL calls a collective-permute makes, through ctypes."""

  def __init__(self):
    import ctypes

    self.ct = ctypes
    self.lib = self._load()

    class UniqueId(ctypes.Structure):
      _fields_ = [("internal", ctypes.c_char * 128)]

    self.UniqueId = UniqueId
    lib = self.lib
    lib.ncclGetVersion.argtypes = [ctypes.POINTER(ctypes.c_int)]
    lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(UniqueId)]
    lib.ncclCommInitRank.argtypes = [
      ctypes.POINTER(ctypes.c_void_p),
      ctypes.c_int,
      UniqueId,
      ctypes.c_int,
    ]
    for fn in (lib.ncclSend, lib.ncclRecv):
      fn.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_void_p,
      ]
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]
    self.comm = ctypes.c_void_p()

  @staticmethod
  def _load():
    import ctypes
    import glob

    import torch  # noqa: F401  (loads its libnccl, which ctypes then finds by soname)

    candidates = ["libnccl.so.2"]
    for d in sys.path:
      candidates += sorted(glob.glob(os.path.join(d, "nvidia", "nccl", "lib", "libnccl.so*")))
    errors = []
    for c in candidates:
      try:
        return ctypes.CDLL(c)
      except OSError as e:
        errors.append(f"{c}: {e}")
    raise BenchError("no libnccl: " + "; ".join(errors))

  def check(self, status, what):
    if status != 0:
      msg = self.lib.ncclGetErrorString(status).decode()
      raise BenchError(f"{what} failed: NCCL error {status}: {msg}")

  def version(self):
    v = self.ct.c_int()
    self.check(self.lib.ncclGetVersion(self.ct.byref(v)), "ncclGetVersion")
    return v.value

  def init(self, rdv, rank, nprocs):
    uid = self.UniqueId()
    if rank == 0:
      self.check(self.lib.ncclGetUniqueId(self.ct.byref(uid)), "ncclGetUniqueId")
      raw = self.ct.string_at(self.ct.addressof(uid), 128)
      _publish(rdv, "nccl_uid", raw)
    else:
      raw = _wait_for(rdv, "nccl_uid")
      self.ct.memmove(self.ct.addressof(uid), raw, 128)
    self.check(
      self.lib.ncclCommInitRank(self.ct.byref(self.comm), nprocs, uid, rank), "ncclCommInitRank"
    )

  def group_start(self):
    self.check(self.lib.ncclGroupStart(), "ncclGroupStart")

  def group_end(self):
    self.check(self.lib.ncclGroupEnd(), "ncclGroupEnd")

  def send(self, ptr, nbytes, peer, stream):
    self.check(self.lib.ncclSend(ptr, nbytes, 0, peer, self.comm, stream), "ncclSend")

  def recv(self, ptr, nbytes, peer, stream):
    self.check(self.lib.ncclRecv(ptr, nbytes, 0, peer, self.comm, stream), "ncclRecv")

  def destroy(self):
    if self.comm:
      self.lib.ncclCommDestroy(self.comm)
      self.comm = self.ct.c_void_p()


def _time_steps(torch, stream, step, nbytes, warmup, reps, use_graph):
  """Median seconds of one step, from CUDA events over K steps; (s, K, mode)."""
  iters = iterations_for(nbytes)
  with torch.cuda.stream(stream):
    for _ in range(max(1, warmup)):
      step(nbytes)
  stream.synchronize()
  graph, mode = None, "eager"
  if use_graph:
    try:
      g = torch.cuda.CUDAGraph()
      with torch.cuda.graph(g, stream=stream, capture_error_mode="relaxed"):
        for _ in range(iters):
          step(nbytes)
      g.replay()
      stream.synchronize()
      graph, mode = g, "graph"
    except Exception as e:  # capture not supported: fall back to eager launches
      torch.cuda.synchronize()
      print(
        f"  graph capture failed at {nbytes} B ({type(e).__name__}: {e}); eager", file=sys.stderr
      )
  start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
  times = []
  with torch.cuda.stream(stream):
    for _ in range(reps):
      start.record(stream)
      if graph is not None:
        graph.replay()
      else:
        for _ in range(iters):
          step(nbytes)
      end.record(stream)
      end.synchronize()
      times.append(start.elapsed_time(end) / 1e3 / iters)
  return statistics.median(times), iters, mode


def _worker_nccl(args, torch, nprocs, info):
  nccl = _Nccl()
  info["nccl_version"] = nccl.version()
  nccl.init(args.rdv, args.rank, nprocs)
  to, frm = ring_peers(args.rank, nprocs)
  top = max(args.size_list)
  src = torch.ones(top, dtype=torch.uint8, device="cuda")
  dst = torch.zeros(top, dtype=torch.uint8, device="cuda")
  stream = torch.cuda.Stream()
  sp = stream.cuda_stream

  def step(n):
    nccl.group_start()
    nccl.send(src.data_ptr(), n, to, sp)
    nccl.recv(dst.data_ptr(), n, frm, sp)
    nccl.group_end()

  results = {}
  for n in args.size_list:
    results[n] = _time_steps(torch, stream, step, n, args.warmup, args.reps, not args.no_graph)
  torch.cuda.synchronize()
  info["check"] = bool(dst[:top].eq(1).all().item())  # the received bytes are the sent ones
  nccl.destroy()
  return results


def _worker_nvshmem(args, torch, nprocs, info):
  import numpy as np
  import nvshmem
  import nvshmem.bindings as nb
  import nvshmem.core as nc
  from cuda.core import Device

  info["nvshmem4py"] = getattr(nvshmem, "__version__", "?")
  dev = Device(args.rank)
  dev.set_current()
  if args.rank == 0:
    uid = nc.get_unique_id()
    _publish(args.rdv, "nvshmem_uid", uid._data.tobytes())
  else:
    uid = nc.get_unique_id(empty=True)
    raw = _wait_for(args.rdv, "nvshmem_uid")
    uid._data[:] = np.frombuffer(raw, dtype=uid._data.dtype)
  nc.init(device=dev, uid=uid, rank=args.rank, nranks=nprocs, initializer_method="uid")
  try:
    info["libnvshmem"] = str(nc.get_version().libnvshmem_version)
  except Exception as e:  # version query is informative only
    info["libnvshmem"] = f"? ({e})"
  to, _ = ring_peers(args.rank, nprocs)
  top = max(args.size_list)
  src_buf = nc.buffer(top)
  dst_buf = nc.buffer(top)
  src = torch.utils.dlpack.from_dlpack(src_buf).view(torch.uint8)
  dst = torch.utils.dlpack.from_dlpack(dst_buf).view(torch.uint8)
  src.fill_(1)
  dst.zero_()
  torch.cuda.synchronize()
  stream = torch.cuda.Stream()
  sp = stream.cuda_stream
  sptr, dptr = int(src_buf.handle), int(dst_buf.handle)

  def step(n):
    nb.putmem_on_stream(dptr, sptr, n, to, sp)
    nb.quiet_on_stream(sp)
    if nprocs > 1:
      nb.barrier_all_on_stream(sp)

  results = {}
  for n in args.size_list:
    results[n] = _time_steps(torch, stream, step, n, args.warmup, args.reps, not args.no_graph)
  torch.cuda.synchronize()
  if nprocs > 1:
    nb.barrier_all_on_stream(sp)
    stream.synchronize()
  info["check"] = bool(dst[:top].eq(1).all().item())
  del src, dst
  nc.free(src_buf)
  nc.free(dst_buf)
  nc.finalize()
  return results


def _worker_copy(args, torch, info):
  """cudaMemcpyAsync D2D on GPU 0, and peer copies i -> i+1 when there are several."""
  ngpu = torch.cuda.device_count()
  top = max(args.size_list)
  out = {}
  torch.cuda.set_device(0)
  a = torch.ones(top, dtype=torch.uint8, device="cuda:0")
  b = torch.zeros(top, dtype=torch.uint8, device="cuda:0")
  stream = torch.cuda.Stream(device=0)

  def d2d(n):
    b[:n].copy_(a[:n], non_blocking=True)

  out["cuda_memcpy_d2d"] = {
    n: _time_steps(torch, stream, d2d, n, args.warmup, args.reps, not args.no_graph)
    for n in args.size_list
  }
  del a, b
  if ngpu >= 2:
    info["can_access_peer"] = {
      f"{i}->{(i + 1) % ngpu}": bool(torch.cuda.can_device_access_peer(i, (i + 1) % ngpu))
      for i in range(ngpu)
    }
    per_edge = []
    for i in range(ngpu):
      j = (i + 1) % ngpu
      torch.cuda.set_device(i)
      a = torch.ones(top, dtype=torch.uint8, device=f"cuda:{i}")
      b = torch.zeros(top, dtype=torch.uint8, device=f"cuda:{j}")
      stream = torch.cuda.Stream(device=i)

      def peer(n, a=a, b=b):
        b[:n].copy_(a[:n], non_blocking=True)  # peer copy engine when P2P is on

      per_edge.append(
        {
          n: _time_steps(torch, stream, peer, n, args.warmup, args.reps, not args.no_graph)
          for n in args.size_list
        }
      )
      del a, b
    out["cuda_memcpy_peer"] = merge_rank_results(per_edge)
    info["peer_edges"] = ngpu
  return out


def run_worker(args):
  """One worker process: times its backend, writes a JSON result, never raises."""
  info = {
    "rank": args.rank,
    "backend": args.worker,
    "pid": os.getpid(),
    "env": {k: os.environ.get(k) for k in MULTICAST_OFF},
  }
  nprocs = args.nprocs
  try:
    import torch

    info["torch"] = torch.__version__
    if args.worker != "copy":
      torch.cuda.set_device(args.rank)
    info["device"] = torch.cuda.get_device_name()
    if args.worker == "nccl":
      info["results"] = {str(k): v for k, v in _worker_nccl(args, torch, nprocs, info).items()}
    elif args.worker == "nvshmem":
      info["results"] = {str(k): v for k, v in _worker_nvshmem(args, torch, nprocs, info).items()}
    else:
      info["results"] = {
        b: {str(k): v for k, v in r.items()} for b, r in _worker_copy(args, torch, info).items()
      }
    info["ok"] = True
  except BaseException as e:  # reported by the launcher, with the exact text
    import traceback

    info["ok"] = False
    info["error"] = f"{type(e).__name__}: {e}"
    info["traceback"] = traceback.format_exc()[-4000:]
  with open(args.result, "w") as f:
    json.dump(info, f, indent=1)
  return 0 if info["ok"] else 1


# ---------------------------------------------------------------------------
# Launcher


def visible_gpus():
  try:
    import torch

    return torch.cuda.device_count()
  except Exception:
    return 0


def _run_group(args, backend, nprocs, tmp, extra_env=None):
  """Starts nprocs workers of one backend; returns their result dicts."""
  rdv = tempfile.mkdtemp(prefix=f"rdv_{backend}_", dir=tmp)
  procs, paths = [], []
  for rank in range(nprocs if backend != "copy" else 1):
    result = os.path.join(rdv, f"result_{rank}.json")
    cmd = [
      sys.executable,
      os.path.abspath(__file__),
      f"--worker={backend}",
      f"--rank={rank}",
      f"--nprocs={nprocs}",
      f"--rdv={rdv}",
      f"--result={result}",
      f"--sizes={','.join(str(s) for s in args.size_list)}",
      f"--reps={args.reps}",
      f"--warmup={args.warmup}",
    ]
    if args.no_graph:
      cmd.append("--no-graph")
    procs.append(benchlib.spawn(cmd, child_env(extra_env)))
    paths.append(result)
  benchlib.wait_all(procs, args.timeout)
  infos = []
  for rank, (p, path) in enumerate(zip(procs, paths)):
    if os.path.exists(path):
      with open(path) as f:
        infos.append(json.load(f))
    else:
      infos.append(
        {
          "rank": rank,
          "backend": backend,
          "ok": False,
          "error": f"no result (exit status {p.returncode}; killed after "
          f"{args.timeout:.0f} s if negative)",
        }
      )
  return infos


def _decode(results):
  return {int(k): tuple(v) for k, v in results.items()}


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  if args.worker:
    return run_worker(args)
  nprocs = args.nprocs or visible_gpus()
  if nprocs < 1:
    raise BenchError("no GPU visible")
  link_class = link_class_for(nprocs)
  tmp = tempfile.mkdtemp(prefix="p2p_bench_")
  details = {
    "nprocs": nprocs,
    "link_class": link_class,
    "sizes": args.size_list,
    "env": MULTICAST_OFF,
    "groups": {},
  }
  rows = []
  for backend in [b for b in args.backend_list if b in BACKENDS]:
    print(
      f"== {backend}: {nprocs} process(es), ring i -> i+1 ({link_class})",
      file=sys.stderr,
      flush=True,
    )
    infos = _run_group(args, backend, nprocs, tmp)
    attempts = [infos]
    if backend == "nvshmem" and not all(i.get("ok") for i in infos):
      # NVSHMEM's UID bootstrap needs a socket interface; retry on the loopback.
      # One host needs no remote transport either.
      retry_env = {"NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo", "NVSHMEM_REMOTE_TRANSPORT": "none"}
      print(f"== nvshmem failed; retrying with {retry_env}", file=sys.stderr, flush=True)
      infos = _run_group(args, backend, nprocs, tmp, retry_env)
      attempts.append(infos)
    details["groups"][backend] = attempts
    if all(i.get("ok") for i in infos):
      merged = merge_rank_results([_decode(i["results"]) for i in infos])
      rows += csv_rows(backend, link_class, merged, nprocs)
    else:
      for i in infos:
        if not i.get("ok"):
          print(f"   rank {i.get('rank')}: {i.get('error')}", file=sys.stderr)
  comments = [
    f"p2p_bench.py: ring i -> i+1 over {nprocs} GPU(s) ({link_class}); "
    "seconds = slowest rank's median per step"
  ]
  write_csv(args.out, rows, comments)
  print(f"wrote {args.out} ({len(rows)} rows)", file=sys.stderr)
  if "copy" in args.backend_list:
    print("== copy ceiling", file=sys.stderr, flush=True)
    infos = _run_group(args, "copy", nprocs, tmp)
    details["groups"]["copy"] = [infos]
    copy_rows = []
    if infos[0].get("ok"):
      for backend, res in infos[0]["results"].items():
        lc = "same_device" if backend == "cuda_memcpy_d2d" else "nvlink"
        copy_rows += csv_rows(backend, lc, _decode(res), 1)
    else:
      print(f"   copy: {infos[0].get('error')}", file=sys.stderr)
    write_csv(
      args.copy_out,
      copy_rows,
      ["copy ceiling (cudaMemcpyAsync through torch copy_); not for calibrate"],
    )
    print(f"wrote {args.copy_out} ({len(copy_rows)} rows)", file=sys.stderr)
  if args.details:
    benchlib.write_json(args.details, details)
  for row in rows:
    print(
      f"{row['backend']:8s} {row['link_class']:12s} {row['bytes']:>10d} B "
      f"{float(row['seconds']) * 1e6:10.2f} us {row['gbps']:>10s} GB/s {row['mode']}"
    )
  failed = [b for b, a in details["groups"].items() if not all(i.get("ok") for i in a[-1])]
  return 1 if failed else 0


if __name__ == "__main__":
  try:
    sys.exit(main())
  except BenchError as e:
    print(f"p2p_bench.py: {e}", file=sys.stderr)
    sys.exit(2)
