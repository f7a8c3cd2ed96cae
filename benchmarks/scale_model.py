#!/usr/bin/env python3
"""Scale model of Llama-3-8B ring attention past two GPUs, from measurements and the core.

    python3 benchmarks/scale_model.py [--out=benchmarks/results/scale_model.csv]
        [--plot=benchmarks/results/scale_model.png]
        [--check=benchmarks/results/scale_model_check_2gpu.csv]

Per ring step a device computes one block pair with the kernel the ring runs
(benchmarks/results/h200_attention_kernel.csv, kernel `ring`, the jax version of the
mode's XLA) times the ring program's own overhead (merge, loop, packing:
benchmarks/results/h200_ring_program_n1.csv), while the step's one permute moves the
K/V block (forward: K and V, bf16; backward: K and V plus their f32 gradient
accumulators). The permute's time per step comes from the selection core (the
C++ core the pass runs) with the mode's cost table: the slowest edge of the
ring, for a forced backend, or the core's own decision (`pass`). The compiled
ring starts the permute before the step's attention and ends it after
(hlo_tools.ops.ring_overlap on the compiled modules), so a step takes
max(compute, permute); the backward's last hand-off of the gradients is exposed.
Causal: step 0 is the diagonal block, every later step has a device computing a
full block (the critical device), and the ring waits for it.

Columns: step_s = the modeled attention call time / number of GPUs (the mean
ring step, as benchmarks/ring_e2e.py reports it); exposed_s = the part of step_s that
is communication not hidden by compute.

NVSHMEM runs only inside one host at the pinned XLA (openxla/xla 3cc8846c): its
receiver waits for a put in nvshmemx_barrier_on_stream(NVSHMEM_TEAM_SHARED, ...)
(xla/backends/gpu/collectives/nvshmem_communicator.cc:179), the PEs that share a
memory domain, so a put from another host is not waited for; whether that team
spans the hosts of an NVL72 domain is not established. Where the core refuses
NVSHMEM (every ring here past 8 GPUs), the `nvshmem` mode runs NCCL, as a plan the
pass emits would.

Assumptions (not measured): the overlapped permute and attention do not slow each
other (a step is max(compute, permute)); every cost-table row other than one
host's NVLink (NCCL across InfiniBand and between the hosts of an NVLink domain) is
the core's documented estimate; kernels and program overhead measured on one H200
hold on every GPU of a larger machine; 8 GPUs per host.

The 2-GPU check models the program the committed 2-GPU end-to-end runs measured
(the previous ring: blocked kernel, jax's autodiff backward, K and V in two
permutes of which one ran exposed) from its one-GPU program times
(`prev_ring_program_n1`) and compares with benchmarks/results/h200x2_ring_step*.csv.
"""

import argparse
import csv
import io
import math
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
RESULTS = os.path.join(REPO, "benchmarks", "results")

HEADER = ("gpus", "interconnect", "seq_len", "direction", "mode", "step_s", "exposed_s")
KV_HEADS, HEAD_DIM = 8, 128
KV_BYTES = 2 * KV_HEADS * HEAD_DIM * 2  # per token: K and V, bf16
GRAD_BYTES = 2 * KV_HEADS * HEAD_DIM * 4  # per token: their f32 gradients
GPUS = (8, 16, 64, 72)
SEQ_LENS = tuple(1024 * k for k in (32, 64, 128, 256, 512, 1024))
# mode -> (jax version of the kernel table, backends XLA offers, forced backend or
# None for the core's choice). Costs: the core's default table (measured NVLink
# curves; NCCL's network and NVLink-domain rows as the core documents them).
MODES = {
  "nccl": ("0.9.1", "nccl,nvshmem", "nccl"),
  "nvshmem": ("0.9.1", "nccl,nvshmem", "nvshmem"),
  "pass": ("0.9.1", "nccl,nvshmem", None),
  "nccl_jax0112": ("0.11.2", "nccl,peer", "nccl"),
  "peer_jax0112": ("0.11.2", "nccl,peer", "peer"),
  "pass_jax0112": ("0.11.2", "nccl,peer", None),
}


def topology_spec(gpus, interconnect):
  """Hosts of 8 GPUs; `nvl72`: the hosts share one NVLink domain (a part of an NVL72)."""
  hosts = max(1, gpus // 8)
  spec = f"1x{hosts}x{min(gpus, 8)}"
  return spec + (f":nvl{gpus}" if interconnect == "nvl72" and hosts > 1 else "")


def interconnects(gpus):
  return ("nvlink",) if gpus <= 8 else ("nvl72", "infiniband")


class Curve:
  """Log-log interpolation over block lengths; outside, the end pair's slope, or the
  end value with clamp=True."""

  def __init__(self, points, clamp=False):
    self.points, self.clamp = sorted(points), clamp
    if len(self.points) < 2:
      raise ValueError(f"need two points, got {self.points}")

  def __call__(self, s):
    pts = self.points
    if self.clamp:
      s = min(max(s, pts[0][0]), pts[-1][0])
    i = max(1, min(len(pts) - 1, next((j for j, (x, _) in enumerate(pts) if x >= s), len(pts) - 1)))
    (x0, y0), (x1, y1) = pts[i - 1], pts[i]
    slope = math.log(y1 / y0) / math.log(x1 / x0)
    return y0 * (s / x0) ** slope


def read_rows(path):
  with open(path, encoding="utf-8") as f:
    return list(csv.DictReader(f))


def kernel_curves(rows, kernel, jax_version):
  """{(causal, direction): Curve of seconds} for one kernel and jax version."""
  pts = {}
  for r in rows:
    if r["kernel"] == kernel and r["jax"] == jax_version:
      key = (r["causal"] == "1", r["direction"])
      pts.setdefault(key, []).append((int(r["s_block"]), float(r["ms"]) * 1e-3))
  return {k: Curve(v) for k, v in pts.items()}


def overhead_curves(program_rows, kernel_rows):
  """{(causal, direction): Curve of program / kernel time, >= 1} for the ring program."""
  kernel = kernel_curves(kernel_rows, "ring", "0.11.2")
  pts = {}
  for r in program_rows:
    if r["kernel"] == "ring_program_n1":
      key = (r["causal"] == "1", r["direction"])
      s = int(r["s_block"])
      pts.setdefault(key, []).append((s, max(1.0, float(r["ms"]) * 1e-3 / kernel[key](s))))
  return {k: Curve(v, clamp=True) for k, v in pts.items()}


class Comm:
  """A ring permute's time per step from the selection core, per mode."""

  def __init__(self):
    from hlo_tools import selection  # pylint: disable=import-outside-toplevel

    self.sel = selection
    default = selection.load_cost_table()
    self.tables = {b: selection.with_backends(default, b) for _, b, _ in MODES.values()}

  def decision(self, mode, gpus, interconnect, nbytes):
    """(seconds, backend that runs) for one permute of `nbytes` per device."""
    _, backends, backend = MODES[mode]
    # A modeled job: the ring over every GPU in order (its map), in the layout the
    # backend set runs in (one GPU per process for NVSHMEM, a process per host else).
    spec = topology_spec(gpus, interconnect)
    spec += ":map=" + ",".join(str(i) for i in range(self.sel.parse_topology(spec).num_devices))
    topo = self.sel.parse_topology(spec, self.tables[backends].backends)
    n = topo.num_devices
    d = self.sel.decide(topo, self.tables[backends], nbytes, [(j, (j + 1) % n) for j in range(n)])
    if backend is None:
      return d["chosen_us"] * 1e-6, d["backend"]
    us = d["backend_us"].get(backend)
    if us is None:  # refused (across hosts): the plan runs NCCL there
      return d["backend_us"]["nccl"] * 1e-6, "nccl"
    return us * 1e-6, backend


def ring_time(n, causal, steps, comm):
  """(total, exposed) of one ring loop: per step max(compute, permute)."""
  diag, full = steps
  compute = [diag if causal else full] + [full] * (n - 1)
  total = sum(max(c, comm) for c in compute)
  return total, total - sum(compute)


def step_compute(kernel, overhead, s_dev, causal):
  """Per-step seconds {(direction): (diagonal, full)} for forward and backward."""

  def t(c, direction):
    return kernel[(c, direction)](s_dev) * overhead[(c, direction)](s_dev)

  fwd = (t(causal, "fwd"), t(False, "fwd"))
  both = (t(causal, "fwd_bwd"), t(False, "fwd_bwd"))
  return {"fwd": fwd, "bwd": tuple(b - f for b, f in zip(both, fwd))}


def model_rows(kernel_rows, program_rows, comm, causal=True):
  overhead = overhead_curves(program_rows, kernel_rows)
  kernels = {v: kernel_curves(kernel_rows, "ring", v) for v in ("0.9.1", "0.11.2")}
  rows = []
  for gpus in GPUS:
    for inter in interconnects(gpus):
      for seq in SEQ_LENS:
        s_dev = seq / gpus
        for mode, (jax_version, _, _) in MODES.items():
          steps = step_compute(kernels[jax_version], overhead, s_dev, causal)
          fwd_comm, _ = comm.decision(mode, gpus, inter, KV_BYTES * s_dev)
          total, exposed = ring_time(gpus, causal, steps["fwd"], fwd_comm)
          rows.append((gpus, inter, seq, "fwd", mode, total / gpus, exposed / gpus))
          bwd_comm, _ = comm.decision(mode, gpus, inter, (KV_BYTES + GRAD_BYTES) * s_dev)
          handoff, _ = comm.decision(mode, gpus, inter, GRAD_BYTES * s_dev)
          b_total, b_exposed = ring_time(gpus, causal, steps["bwd"], bwd_comm)
          rows.append(
            (
              gpus,
              inter,
              seq,
              "fwd_bwd",
              mode,
              (total + b_total + handoff) / gpus,
              (exposed + b_exposed + handoff) / gpus,
            )
          )
  return rows


E2E = (
  ("0.9.1", "h200x2_ring_step.csv", {"nccl": "nccl", "nvshmem": "nvshmem", "pass": "pass"}),
  (
    "0.11.2",
    "h200x2_ring_step_jax0112.csv",
    {"nccl": "nccl_jax0112", "peer": "peer_jax0112", "pass": "pass_jax0112"},
  ),
)
CHECK_HEADER = (
  "jax",
  "seq_len",
  "direction",
  "mode",
  "measured_step_s",
  "model_step_s",
  "error_pct",
)


def prev_program_steps(program_rows, s_dev):
  """Per-step seconds of the previous ring program, {direction: (diagonal, full)}."""
  curves = kernel_curves(program_rows, "prev_ring_program_n1", "0.11.2")
  fwd = (curves[(True, "fwd")](s_dev), curves[(False, "fwd")](s_dev))
  both = (curves[(True, "fwd_bwd")](s_dev), curves[(False, "fwd_bwd")](s_dev))
  return {"fwd": fwd, "bwd": tuple(b - f for b, f in zip(both, fwd))}


def check_rows(program_rows, comm, results=RESULTS):
  """The previous ring on 2 GPUs, modeled, against the committed end-to-end runs.

  Its K and V went in two permutes per step, one overlapped and one exposed (the
  compiled schedules showed the K permute's start and done adjacent), in the
  forward loop and again in the backward loop.
  """
  rows = []
  for jax_version, name, modes in E2E:
    for r in read_rows(os.path.join(results, name)):
      seq, direction = int(r["seq_len"]), r["direction"]
      s_dev = seq / 2
      steps = prev_program_steps(program_rows, s_dev)
      one, _ = comm.decision(modes[r["mode"]], 2, "nvlink", KV_BYTES / 2 * s_dev)
      loops = ["fwd"] + (["bwd"] if direction == "fwd_bwd" else [])
      total = 0.0
      for loop in loops:
        t, _ = ring_time(2, True, steps[loop], one)
        total += t + 2 * one  # the exposed permute of each step
      model, measured = total / 2, float(r["step_s"])
      rows.append(
        (
          jax_version,
          seq,
          direction,
          r["mode"],
          f"{measured:.6g}",
          f"{model:.6g}",
          f"{100 * (model / measured - 1):.1f}",
        )
      )
  return rows


def write_csv(path, header, rows):
  from hlo_tools.atomic_output import write_atomic  # pylint: disable=import-outside-toplevel

  buf = io.StringIO()
  w = csv.writer(buf, lineterminator="\n")
  w.writerow(header)
  w.writerows(rows)
  write_atomic(path, buf.getvalue())


def plot(rows, path):
  """Exposed share of the step (forward+backward) vs length, per GPU count and link."""
  import matplotlib  # pylint: disable=import-outside-toplevel

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

  from hlo_tools.atomic_output import write_atomic  # pylint: disable=import-outside-toplevel

  panels = [(g, i) for g in GPUS for i in interconnects(g)]
  fig, axes = plt.subplots(2, len(panels), figsize=(3.2 * len(panels), 6.4), sharex=True)
  for col, (gpus, inter) in enumerate(panels):
    for mode, style in (
      ("nccl", "o-"),
      ("nvshmem", "s--"),
      ("pass", "x:"),
      ("peer_jax0112", "^-."),
    ):
      sel = [
        r for r in rows if r[0] == gpus and r[1] == inter and r[3] == "fwd_bwd" and r[4] == mode
      ]
      xs = [r[2] / 1024 for r in sel]
      axes[0][col].plot(xs, [r[5] * 1e3 for r in sel], style, label=mode, ms=4)
      axes[1][col].plot(xs, [100 * r[6] / r[5] for r in sel], style, label=mode, ms=4)
    axes[0][col].set_title(f"{gpus} GPUs, {inter}", fontsize=9)
    axes[0][col].set_yscale("log")
    axes[1][col].set_xscale("log", base=2)
    axes[1][col].set_xlabel("sequence (K tokens)")
  axes[0][0].set_ylabel("ring step, fwd+bwd (ms)")
  axes[1][0].set_ylabel("exposed communication (% of step)")
  axes[0][0].legend(fontsize=7)
  fig.suptitle(
    "Llama-3-8B ring attention, causal, bf16: model from 1x H200 kernel times "
    "and the selection core",
    fontsize=10,
  )
  fig.tight_layout()
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=110)
  write_atomic(path, buf.getvalue())


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--kernels", default=os.path.join(RESULTS, "h200_attention_kernel.csv"))
  p.add_argument("--programs", default=os.path.join(RESULTS, "h200_ring_program_n1.csv"))
  p.add_argument("--out", default=os.path.join(RESULTS, "scale_model.csv"))
  p.add_argument("--plot", default=os.path.join(RESULTS, "scale_model.png"))
  p.add_argument("--check", default=os.path.join(RESULTS, "scale_model_check_2gpu.csv"))
  args = p.parse_args(argv)
  try:
    kernels, programs = read_rows(args.kernels), read_rows(args.programs)
    comm = Comm()
    rows = model_rows(kernels, programs, comm)
    check = check_rows(programs, comm)
  except (OSError, KeyError, ValueError) as e:
    print(f"scale_model: {e}", file=sys.stderr)
    return 2
  write_csv(args.out, HEADER, [r[:5] + (f"{r[5]:.6g}", f"{r[6]:.6g}") for r in rows])
  write_csv(args.check, CHECK_HEADER, check)
  if args.plot:
    plot(rows, args.plot)
  worst = max(abs(float(r[-1])) for r in check)
  print(
    f"{len(rows)} rows -> {args.out}; 2-GPU check: worst |error| {worst:.1f}% "
    f"over {len(check)} rows -> {args.check}"
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
