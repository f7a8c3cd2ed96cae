"""The JAX hook's parts, one job each; users import hlo_tools.jax_hook, the public entry.

  decide     the core's binding (import_selection), one permute's mode, the users' marks
  text_edit  a permute line's collectives_mode and mark; one module's per-op rewrite
  flags      the mode a compile runs (XLA's flag, compiler_options, XLA_FLAGS); the probe
  program    a stock XLA's one mode per program (compile_program)
  registry   the installed hooks by name; their settings in jax's cache key
  processes  the topology from jax's view of the processes (install, each compile)
  jit        hook.jit, and the eager jax.vmap and jax.grad around it
  hook       Hook, which jax calls inside its compile, and install()

Each imports at run time only those above it. The process's state lives in one
place each: the probes and the probing count in flags, the installed hooks and
jax's own cache key hook in registry.
"""
