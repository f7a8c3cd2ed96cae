"""The model layer of hlo_tools; data flows one way, through these modules in order:

  source       HLO text -> a parsed module (hlo.reader) with its text and program size
  collectives  module -> one record per collective-permute, whatever its form
  decisions    records -> the selection core's choice, as the pass makes it
  driver       nvshmem-opt: the pass itself, XLA's verifier and upstream's assigner
  topology     a user's topology spec, checked against the core's limit
  dumps        XLA dump directories: their stages and per-pass snapshots

The operations (hlo_tools.ops) and the commands (hlo_tools.commands) sit on top and
never feed back into it.
"""
