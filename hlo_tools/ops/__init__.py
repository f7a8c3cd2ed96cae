"""The library operations of hlo_tools: what a command, a test or a user's script calls.

  dump        compile a JAX program (or read an XLA dump) into a stage directory
  diff        two modules matched collective by collective; the per-pass trace
  verify      named checks on a module's collective-permutes
  explain     the core's reasoning per collective-permute, and upstream's answer
  report      dump -> pass -> explain, verify, diff -> page, chart and JSON
  heuristics  sweep, check against the pass, calibrate a cost table
  bench       the P1-P3 benchmarks
  sizes       the one size parser and the one byte formatter
  outdir      work directories published atomically

Operations use hlo_tools.model (and hlo_tools.hlo, selection) below them and
never a command: argument parsing and output stay in hlo_tools.commands.
"""
