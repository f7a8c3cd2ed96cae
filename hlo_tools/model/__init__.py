"""The model layer of hlo_tools: what the tools know of a module, from its text to
the core's choice for each permute. Its modules, in the order data flows through
them:

  sources         HLO text -> a parsed module (hlo.reader), strict pair lists, the
                  program's partition count
  options         a command's topology, cost table and backend set, parsed once
  placement       the module's device map from XLA's config (or the driver's JSON)
  topology        what to say of a parsed topology: the SxHxG jax compiles for,
                  size warnings, where it came from
  collectives     module -> one record per collective-permute, whatever its form
  modes           the collectives mode a permute's frontend attribute asks for
  driver          nvshmem-opt: the pass itself, XLA's verifier, upstream's assigner
  driver_report   the driver's JSON report, typed (a mirror of report.proto)
  decisions       records -> the selection core's choice, as the pass makes it
  backend_tables  what a plan writes, and the backend an op's config selects
  refusals        why the core refuses a backend for a permute
  runtime_rules   what each backend's runtime needs beyond the core's rules
  description     what `hlo-tools explain` prints as JSON
  program_mode    the one collectives mode a stock XLA runs for a whole program
  dumps           XLA dump directories: their stages and per-pass snapshots

The operations (hlo_tools.ops) and the commands (hlo_tools.commands) sit on top and
never feed back into it.
"""
