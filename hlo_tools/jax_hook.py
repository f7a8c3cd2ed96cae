"""The JAX hook's public entry: install() puts the selection core inside jax's compile.

From jax 0.10.2: one collectives mode for the whole program on a stock XLA, one per
collective-permute on an XLA with the patch series for jax v0.11.0's XLA.

    from hlo_tools import jax_hook
    hook = jax_hook.install(topology="1x1x2", backends=("nccl", "peer"))
    compiled = hook.compile(jax.jit(f).lower(x))  # the program's best safe mode applied
    hook.uninstall()

What each XLA honours. Every XLA that jax ships builds a CollectivePermuteThunk with
the flag `xla_gpu_collective_permute_mode` (thunk_emitter.cc:1824 at 5a9e73cb, jax
0.10.2; :1948 at 131bf41a, jax 0.11.0; :2188 at 183fa00c); a permute's own
`collective_backend_config.collectives_mode` only moves a SYMMETRIC permute's
buffers into the collective memory (gpu_memory_space_assignment.cc:145 and :130).
So on a stock XLA the mode is one per compiled program: `compile` (or `jit`) reads
the program's permutes from the lowered program, lets the core choose the one mode
every permute can run that is modeled fastest in sum (model.program_mode), and
compiles once with it in jax's compiler_options; it writes no mode on any op. The
optimized module is decided again, and only where it contradicts the first
decision (a permute XLA's partitioner made) is the program compiled a second time,
which the record says. Every compile's permutes are compared with the mode the
record says was applied: a mismatch is a HookError. A program compiled through plain
jax.jit still meets the registered transformation, which then only records, in
`programs`, the mode to set for it (XLA_FLAGS or compiler_options): the flag of a
compile under way cannot change. With the series the thunk runs the op's
own mode; the transformation that `install` registers (before the scheduler, where
jax runs it: a compile on a live client) then writes each permute's choice into its
backend_config and as the frontend attribute _xla_collectives_mode, and a permute
the user marked (set_xla_metadata) keeps its mode.

Which XLA is which is asked of the XLA itself (`hook.flags.probe`): a one-device
permute marked `_xla_collectives_mode="peer"` is compiled with the flag at its
default; the series' assigner writes PEER into its config (the same patch makes
the thunk read it), a stock assigner leaves the config as it was
(collective_backend_assigner.cc:51).

A deviceless compile (jax.experimental.topologies.get_topology_desc) runs no
registered transformation: jax 0.10.2 registers it only on a PjRt client, and the
compile-only client of a topology refuses it ("implemented for a PjRt-compatible
backend only"). `compile` needs none, so it works there too; on the series' XLA it
then applies one mode for the program, as on a stock XLA, and its record says so.

A mode the caller sets (a compile's compiler_options over those given to jax.jit,
which jax merges, else XLA_FLAGS as XLA tokenizes it, the last flag winning; or a
user's mark, set_xla_metadata's _xla_collectives_mode, which a stock XLA reads
only as the program's mode where the marks agree) follows one policy: refused by a
rule of the core (the run would hang or go wrong), a HookError naming the permute,
the rule and the way out, unless trust_caller_mode=True keeps it with a
HookWarning; modeled slower only, kept with a HookWarning. A mark that names no
mode, or one on a collective that is not a permute, is an error, as it is in the
series' compile.

jax's compilation caches key an executable by its module, devices and compile
options, not by the transformations registered when it was compiled: install and
uninstall clear the in-process ones, and while a hook is installed its settings are
part of every persistent key (jax's cache_key.custom_hook), so no executable
compiled without it, or under another hook, is served to it. One hook per platform.

Only pure Python and the core's binding are imported (no TensorFlow): the
module is read with hlo_tools.hlo.reader, edited as text and re-parsed by jaxlib.
A module the hook cannot read or rewrite is left as jax built it, and the
error is recorded in the handle's `calls`.

The code is in hlo_tools/hook/, one job a module (its __init__ lists them); this
module names what a user calls.
"""

from hlo_tools.errors import HookError
from hlo_tools.hook.hook import Hook, install
from hlo_tools.hook.jit import HookLowered, JitFunction
from hlo_tools.hook.program import HookWarning
from hlo_tools.hook.text_edit import permute_modes

__all__ = [
  "Hook",
  "HookError",
  "HookLowered",
  "HookWarning",
  "JitFunction",
  "install",
  "permute_modes",
]
