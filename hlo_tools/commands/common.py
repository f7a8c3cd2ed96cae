"""What every command shares: its argument parser, its error handling, its output."""

import argparse
import os
import sys

from hlo_tools import cli_io
from hlo_tools.model import dumps
from hlo_tools.model.topology import check_topology
from hlo_tools.model.sources import InputError


class ArgumentParser(argparse.ArgumentParser):
  """argparse with one-line usage errors (InputError, exit status 2)."""

  def error(self, message):
    raise InputError(f"{self.prog}: {message}")


def parser_for(prog, doc):
  """A command's parser, described by the first paragraph of its docstring."""
  return ArgumentParser(prog=prog, description=doc.split("\n\n")[0])


def run_command(parser, argv, body):
  """Parses argv[1:] and returns body(args)'s exit status. Failures propagate: the
  CLI root (hlo_tools.cli.run) turns them into one line and an exit status."""
  return body(parser.parse_args(argv[1:]))


def add_topology_flags(parser):
  parser.add_argument("--topology", default=None,
                      help="e.g. 1x2x4 or 1x9x8:nvl72 (default: derived from the module "
                      "by nvshmem-opt, as the pass does)")
  parser.add_argument("--devices-per-host", "--devices_per_host", dest="devices_per_host",
                      type=int, default=None,
                      help="GPUs per host when --topology is absent (nvshmem-opt's default)")
  parser.add_argument("--cost-table", "--cost_table", dest="cost_table", default=None)


def topology_spec(args, path, prog=None):
  """--topology, or the topology nvshmem-opt derives from the module at `path`; the
  derived one is named on stderr (as nvshmem-opt does), since it decides every choice."""
  if args.topology:
    if args.devices_per_host is not None:
      raise InputError("--devices-per-host and --topology: give one (the spec says how "
                       "many GPUs a host has)")
    return check_topology(args.topology)
  if args.devices_per_host is None and os.path.isfile(path):
    spec = dumps.manifest_topology(os.path.dirname(os.path.abspath(path)))
    if spec:
      if prog:
        cli_io.print_error(f"{prog}: {path}: no --topology; using {spec}, the topology "
                           "its dump was compiled for (manifest.json beside it; "
                           "--topology=SPEC overrides)")
      return spec
  from hlo_tools.model import driver  # pylint: disable=import-outside-toplevel
  spec = driver.derived_topology(path, args.devices_per_host,
                                 getattr(args, "num_partitions", None))
  if prog:
    cli_io.print_error(f"{prog}: {path}: no --topology; using {spec} (derived from the "
                       "module, as nvshmem-opt and the pass do; --topology=SPEC or "
                       "--devices-per-host=N overrides)")
  return spec


def add_backends_flag(parser):
  parser.add_argument("--backends", default=None,
                      help="the backends the target XLA offers, as for nvshmem-opt: "
                      "nccl,nvshmem (the pinned XLA) or nccl,peer[,symmetric] (XLA of "
                      "jax >= 0.10.2, collectives_mode); default: the cost table's set")


def add_partitions_flag(parser):
  parser.add_argument("--num-partitions", "--num_partitions", dest="num_partitions",
                      type=int, default=None,
                      help="devices of the program when the module header does not say "
                      "(default: inferred from the mesh, the topology or the ids used)")


def check_out_path(out, inputs):
  """Refuses an --out that would overwrite one of the inputs."""
  if not out:
    return
  for path in inputs:
    if path and os.path.exists(path) and os.path.exists(out) and os.path.samefile(out, path):
      raise InputError(f"{out}: refusing to overwrite an input")


def check_output_file(path, flag):
  """Refuses, before any work, an output file that could not be written at the end.
  A device or FIFO is written in place (cli_io.write_atomic), a symlink followed."""
  real = cli_io.resolve_links(path)
  if os.path.isdir(real):
    raise InputError(f"{flag} {path}: is a directory, not a file")
  if os.path.exists(real):
    if not os.path.isfile(real):
      return  # a device or FIFO: written as it is, its directory untouched
  directory = os.path.dirname(os.path.abspath(real)) or "."
  if not os.path.isdir(directory):
    raise InputError(f"{flag} {path}: no such directory {directory}")
  if not os.access(directory, os.W_OK | os.X_OK):
    raise InputError(f"{flag} {path}: directory {directory} is not writable")


def write_output(text, out):
  """Prints, or writes `out` atomically (temp file in the same directory + os.replace)."""
  text = text if text.endswith("\n") else text + "\n"
  if not out:
    sys.stdout.write(text)
    return
  cli_io.write_atomic(out, text)
