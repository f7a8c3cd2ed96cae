"""hlo_tools/hook/jit.py: hook.jit behaves as jax.jit: lower, static and donated
arguments, methods, pytrees, under jax.grad and jax.vmap and inside another jax.jit,
with the same decisions as hook.compile of the same program.

On a live CPU client of two devices with the series' per-op path (the CPU's compiler
carries each permute's written mode into the executable, so the executable says
what was decided), and deviceless on jax 0.10.2's GPU compiler for the stock path's
one mode per program."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from hlo_tools import jax_hook
from hlo_tools.hook.jit import HookLowered, JitFunction

from conftest import FAST_PEER_TABLE, H200_TARGET, ROOT, run_jax, run_live_cpu

_PEER = "COLLECTIVES_PEER_MEMORY"

_LIVE = r"""
import functools, json, sys
import jax, jax.numpy as jnp, numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P
from hlo_tools import jax_hook
from hlo_tools.programs import ring_attention
hook = jax_hook.install("1x1x2", backends=("nccl", "peer"), platforms=("cpu",),
                        cost_table=sys.argv[1], per_op=True)
mesh = ring_attention.make_mesh(jax.devices()[:2])
ring = [(0, 1), (1, 0)]

def f(x):
  return jax.shard_map(lambda v: lax.ppermute(v, "cp", ring) * 2, mesh=mesh,
                       in_specs=P("cp"), out_specs=P("cp"))(x)

def same(a, b):
  return all(bool(jnp.allclose(u, v)) for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)))

def peer_calls(since):  # the transformation's calls since `since` that wrote peer
  return [c["module"] for c in hook.calls[since:]
          if any(k.endswith(_PEER) for k in (c.get("modes_out") or {}))]

_PEER = "COLLECTIVES_PEER_MEMORY"
x = jnp.arange(1 << 12, dtype=jnp.float32)
out = {}
g = hook.jit(f)
# The reference decision: hook.compile of jax.jit(f).
ref = hook.compile(jax.jit(f).lower(x))
out["reference"] = jax_hook.permute_modes(ref.as_text())

# .lower(): a Lowered whose compile() is hook.compile's.
n = len(hook.programs)
low = g.lower(x)
compiled = low.compile()
out["lower"] = {"type": type(low).__name__, "text": "ppermute" in low.as_text() or
                "collective_permute" in low.as_text(), "modes": jax_hook.permute_modes(
                compiled.as_text()), "records": len(hook.programs) - n,
                "right": same(compiled(x), jax.jit(f)(x)), "name": g.__name__}

# donate_argnums: the argument is donated as jax.jit donates it.
def donated(jit):
  y = jnp.ones(1 << 12, jnp.float32)
  jit(f, donate_argnums=0)(y)
  return y.is_deleted()
out["donate"] = {"hook": donated(hook.jit), "jax": donated(jax.jit)}

# pytrees in and out.
def tree_fn(d):
  return {"sum": f(d["a"]) + f(d["b"]), "a": d["a"]}
d = {"a": x, "b": x * 3}
out["pytree"] = same(hook.jit(tree_fn)(d), jax.jit(tree_fn)(d))

# a method, its instance static as jax.jit's methods take it.
class Model:
  def __init__(self, scale):
    self.scale = scale
  @functools.partial(hook.jit, static_argnums=0)
  def apply(self, x):
    return f(x) * self.scale
out["method"] = same(Model(3.0).apply(x), jax.jit(f)(x) * 3.0)

# under jax.grad: the gradient's compiles meet the per-op transformation, which
# decides their permutes as hook.compile decides the same program's.
loss = lambda v: (g(v) ** 2).sum()
since = len(hook.calls)
grad = jax.grad(loss)(x)
want = jax.grad(lambda v: (jax.jit(f)(v) ** 2).sum())(x)
grad_ref = hook.compile(jax.jit(jax.grad(lambda v: (f(v) ** 2).sum())).lower(x))
out["grad"] = {"right": same(grad, want), "peer_calls": len(peer_calls(since)),
               "reference": jax_hook.permute_modes(grad_ref.as_text())}

# under jax.vmap.
xs = jnp.stack([x, x + 1, x * 2])
since = len(hook.calls)
out["vmap"] = {"right": same(jax.vmap(g)(xs), jax.vmap(jax.jit(f))(xs)),
               "peer_calls": len(peer_calls(since))}

# inside another jax.jit, and inside another hook.jit: the outer compile decides.
outer = lambda v: g(v) + 1
out["in_jit"] = same(jax.jit(outer)(x), jax.jit(f)(x) + 1)
n = len(hook.programs)
nested = hook.jit(outer)
y = nested(x)
plain_outer = hook.compile(jax.jit(lambda v: f(v) + 1).lower(x))
out["in_hook_jit"] = {"right": same(y, jax.jit(f)(x) + 1),
                      "modes": hook.programs[n]["compiled_modes"],
                      "reference": hook.programs[-1]["compiled_modes"]}
print(json.dumps(out, default=str))
hook.uninstall()
"""


@pytest.fixture(scope="module")
def live(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("hook_jit")
  table = tmp / "table.txt"
  table.write_text(FAST_PEER_TABLE)
  return run_live_cpu(_LIVE, table)


def test_reference_is_peer(live):
  assert live["reference"] == {f"collective-permute:{_PEER}": 1}


def test_lower_gives_a_lowered_that_compiles_through_the_hook(live):
  got = live["lower"]
  assert got["type"] == "HookLowered" and got["text"] and got["right"]
  assert got["modes"] == live["reference"] and got["records"] == 1
  assert got["name"] == "f"  # wraps the function as jax.jit does


def test_donated_argument_as_jax_jit(live):
  assert live["donate"]["hook"] == live["donate"]["jax"]


def test_pytrees_in_and_out(live):
  assert live["pytree"]


def test_methods(live):
  assert live["method"]


def test_under_grad(live):
  got = live["grad"]
  assert got["right"]
  # The gradient's permutes (the forward's and the transposed one) decided peer,
  # as hook.compile decides the gradient program.
  assert got["peer_calls"] >= 1
  assert {k.split(":")[1] for k in got["reference"]} == {_PEER}


def test_under_vmap(live):
  got = live["vmap"]
  assert got["right"] and got["peer_calls"] >= 1


def test_inside_jax_jit_and_hook_jit(live):
  assert live["in_jit"]
  got = live["in_hook_jit"]
  assert got["right"] and got["modes"] == got["reference"] == {_PEER: 1}


_DEVICELESS = r"""
import json, sys
import jax, numpy as np
from jax import lax
from jax.experimental import topologies
from jax.sharding import NamedSharding, PartitionSpec as P
from hlo_tools import jax_hook
from hlo_tools.programs import ring_attention as ra
topo = topologies.get_topology_desc(platform="cuda", topology="1x1x2",
                                    target_config=open(sys.argv[1]).read())
mesh = ra.make_mesh(topo.devices)
hook = jax_hook.install("1x1x2", backends=("nccl", "peer"), cost_table=sys.argv[2])
arg = jax.ShapeDtypeStruct((2, 4 << 20), np.float32, sharding=NamedSharding(mesh, P("cp")))

def f(x):
  return jax.shard_map(lambda v: lax.ppermute(v, "cp", [(0, 1), (1, 0)]) * 2, mesh=mesh,
                       in_specs=P("cp"), out_specs=P("cp"))(x)

g = hook.jit(f)
out = {}
# The gradient of a loss that calls hook.jit(f), compiled through hook.jit, against
# the same gradient written with f itself through hook.compile.
hook.jit(jax.grad(lambda v: (g(v) ** 2).sum())).lower(arg).compile()
out["grad_hook_jit"] = hook.programs[-1]
hook.compile(jax.jit(jax.grad(lambda v: (f(v) ** 2).sum())).lower(arg))
out["grad_reference"] = hook.programs[-1]
print(json.dumps(out, default=str))
"""


def test_stock_xla_same_decision_for_a_gradient(tmp_path):
  """One mode per program (jax 0.10.2's own GPU compiler, deviceless): the gradient
  of a loss that calls hook.jit gets the decision hook.compile gives the same
  gradient written with plain code, in one compile, checked against XLA's output."""
  table = tmp_path / "table.txt"
  table.write_text(FAST_PEER_TABLE)
  got = run_jax(_DEVICELESS, H200_TARGET, table, deviceless=True)
  a, b = got["grad_hook_jit"], got["grad_reference"]
  assert a["applied"] == b["applied"] == _PEER
  assert a["program"]["permutes"] == b["program"]["permutes"] >= 2
  assert a["compiled_modes"] == b["compiled_modes"] == {_PEER: a["program"]["permutes"]}
  assert a["compiles"] == b["compiles"] == 1


_MESHES = r"""
import json
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from hlo_tools import jax_hook
hook = jax_hook.install("1x1x4", backends=("nccl", "peer"), platforms=("cpu",), per_op=True)
devices = jax.devices()
x = jnp.arange(16, dtype=jnp.float32)
g = hook.jit(lambda v: v * 2)
out = {}
for name, mesh in (("a", Mesh(np.array(devices[:2]), ("cp",))),
                   ("b", Mesh(np.array(devices[2:4]), ("cp",)))):
  v = jax.device_put(x, NamedSharding(mesh, P("cp")))
  try:
    y = g(v)
    out[name] = [bool(jnp.array_equal(y, x * 2)), sorted(d.id for d in y.sharding.device_set)]
  except Exception as e:  # jax refuses an executable of other devices
    out[name] = f"{type(e).__name__}: {e}"
out["compiles"] = len(hook.programs)
print(json.dumps(out))
hook.uninstall()
"""


def test_same_mesh_shape_on_other_devices_compiles_its_own():
  """Two arguments sharded alike over meshes of one shape on different devices: a
  sharding's printed form names no device, and jax.jit compiles each for its own
  devices; so does hook.jit, rather than calling the first executable with arrays
  it was not compiled for."""
  env = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    XLA_FLAGS="--xla_force_host_platform_device_count=4",
    PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
  )
  proc = subprocess.run(
    [sys.executable, "-c", _MESHES],
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  got = json.loads(proc.stdout.strip().splitlines()[-1])
  assert got["a"] == [True, [0, 1]] and got["b"] == [True, [2, 3]], got
  assert got["compiles"] == 2


_STOCK_VMAP = r"""
import json, sys
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
from hlo_tools import jax_hook
from hlo_tools.programs import ring_attention
table = sys.argv[1] if len(sys.argv) > 1 else None
hook = jax_hook.install("1x1x2", backends=("nccl", "peer"), platforms=("cpu",),
                        cost_table=table, per_op=False)
mesh = ring_attention.make_mesh(jax.devices()[:2])

def f(x):
  return jax.shard_map(lambda v: lax.ppermute(v, "cp", [(0, 1), (1, 0)]) * 2, mesh=mesh,
                       in_specs=P("cp"), out_specs=P("cp"))(x)

xs = jnp.arange(3 << 12, dtype=jnp.float32).reshape(3, 1 << 12)
g = hook.jit(f)
n = len(hook.programs)
out = {}
try:
  y = jax.vmap(g)(xs)
  out["records"] = hook.programs[n:]
  n = len(hook.programs)
  out["right"] = bool(jnp.allclose(y, jax.vmap(jax.jit(f))(xs)))
  n = len(hook.programs)
  jax.vmap(g)(xs)  # the same batching again: no new record
  out["again"] = len(hook.programs) - n
  hook.compile(jax.jit(jax.vmap(f)).lower(xs))
  out["reference"] = hook.programs[-1]
except jax_hook.HookError as e:
  out["error"] = str(e)
print(json.dumps(out, default=str))
hook.uninstall()
"""


def _stock_vmap(*argv):
  return run_live_cpu(_STOCK_VMAP, *argv)


def test_stock_xla_eager_vmap_applies_and_checks_the_mode():
  """One mode per program, under an eager jax.vmap: the batched program compiles
  through hook.compile with its mode applied and checked, the decision of
  hook.compile of jax.jit(jax.vmap(f)); not jax's own compile that only records
  the mode to set."""
  got = _stock_vmap()
  assert "error" not in got, got
  assert got["right"]
  (record,) = got["records"]
  ref = got["reference"]
  assert record["applied"] is not None and record["applied"] == ref["applied"]
  assert record["verified"] and record["compiles"] == 1
  assert record["program"]["permutes"] == ref["program"]["permutes"] >= 1
  assert record["compiled_modes"] == ref["compiled_modes"]
  assert got["again"] == 0


def test_stock_xla_eager_vmap_runs_the_compiled_mode_check(tmp_path):
  """Where the core moves the batched ring to peer memory, the CPU's compiler
  writes no mode: the hook's check of the compiled module fails under jax.vmap as
  it fails under hook.compile, rather than a silent record of a mode to set."""
  table = tmp_path / "table.txt"
  table.write_text(FAST_PEER_TABLE)
  got = _stock_vmap(table)
  assert "writes no collectives mode" in got.get("error", ""), got


_STOCK_GRAD = r"""
import json, sys
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
from hlo_tools import jax_hook
from hlo_tools.programs import ring_attention
table = sys.argv[1] if len(sys.argv) > 1 else None
hook = jax_hook.install("1x1x2", backends=("nccl", "peer"), platforms=("cpu",),
                        cost_table=table, per_op=False)
mesh = ring_attention.make_mesh(jax.devices()[:2])

def f(x, scale):
  return jax.shard_map(lambda v: lax.ppermute(v, "cp", [(0, 1), (1, 0)]) * scale, mesh=mesh,
                       in_specs=P("cp"), out_specs=P("cp"))(x)

x = jnp.arange(1 << 12, dtype=jnp.float32)
g = hook.jit(f, static_argnums=1)
loss = lambda v: (g(v, 3.0) ** 2).sum()
want = jax.grad(lambda v: (jax.jit(f, static_argnums=1)(v, 3.0) ** 2).sum())(x)
out = {}
try:
  n = len(hook.programs)
  grad = jax.grad(loss)(x)
  out["records"] = hook.programs[n:]
  out["right"] = bool(jnp.allclose(grad, want))
  n = len(hook.programs)
  value, grad = jax.value_and_grad(loss)(x)  # the same signature: no new compile
  out["again"] = len(hook.programs) - n
  out["value_and_grad"] = bool(jnp.allclose(grad, want)) and bool(jnp.allclose(value, loss(x)))
  n = len(hook.programs)
  primal, pullback = jax.vjp(lambda v: g(v, 3.0), x)
  out["vjp"] = bool(jnp.allclose(pullback(primal)[0], want / 2))
  out["vjp_records"] = len(hook.programs) - n
  # jax.jvp keeps jax's own rule (a JVP tracer, not a linearization): still right.
  out["jvp"] = bool(jnp.allclose(jax.jvp(lambda v: g(v, 3.0), (x,), (x,))[1], f(x, 3.0)))
  # So does jax.linearize (its linear function runs forward mode, which no
  # custom_vjp allows), and a function that closes over a traced value.
  n = len(hook.programs)
  out["linearize"] = bool(jnp.allclose(jax.linearize(lambda v: g(v, 3.0), x)[1](x), f(x, 3.0)))
  closing = lambda jit: lambda a, w: (jit(lambda v: f(v, 1.0) * w)(a) ** 2).sum()
  out["closure"] = all(
    bool(jnp.allclose(u, v))
    for u, v in zip(
      jax.grad(closing(hook.jit), argnums=(0, 1))(x, x),
      jax.grad(closing(jax.jit), argnums=(0, 1))(x, x),
    )
  )
  # Records of the halves compiled through hook.compile (plain compiles on this
  # live client are recorded too, by the registered transformation).
  out["plain_records"] = [
    r["module"] for r in hook.programs[n:] if r["module"].endswith(("_vjp_forward", "_vjp_backward"))
  ]
  hook.compile(jax.jit(jax.grad(lambda v: (f(v, 3.0) ** 2).sum())).lower(x))
  out["reference"] = hook.programs[-1]
except jax_hook.HookError as e:
  out["error"] = str(e)
print(json.dumps(out, default=str))
hook.uninstall()
"""


@pytest.mark.long
def test_stock_xla_eager_grad_applies_and_checks_the_mode():
  """One mode per program, under an eager jax.grad, jax.value_and_grad and jax.vjp:
  the forward (with the pullback's residuals) and the backward program each compile
  through hook.compile with their mode applied and checked, the decision hook.compile
  gives the whole gradient; not jax's own compiles that only record a mode to set."""
  got = run_live_cpu(_STOCK_GRAD)
  assert "error" not in got, got
  assert got["right"] and got["value_and_grad"] and got["vjp"] and got["jvp"]
  # jax.linearize and a closure over a traced value keep jax's own rule: right, and
  # compiled without the hook.
  assert got["linearize"] and got["closure"] and got["plain_records"] == []
  forward, backward = got["records"]
  ref = got["reference"]
  assert forward["module"].endswith("f_vjp_forward") and backward["module"].endswith(
    "f_vjp_backward"
  )
  for record in (forward, backward):
    assert record["applied"] is not None and record["applied"] == ref["applied"]
    assert record["verified"] and record["compiles"] == 1
    assert record["program"]["permutes"] == 1
  assert (
    forward["program"]["permutes"] + backward["program"]["permutes"] == ref["program"]["permutes"]
  )
  assert got["again"] == 0 and got["vjp_records"] == 0


@pytest.mark.long
def test_stock_xla_eager_grad_runs_the_compiled_mode_check(tmp_path):
  """Where the core moves the ring to peer memory, the CPU's compiler writes no mode:
  the check of the compiled module fails under jax.grad as under hook.compile."""
  table = tmp_path / "table.txt"
  table.write_text(FAST_PEER_TABLE)
  got = run_live_cpu(_STOCK_GRAD, table)
  assert "writes no collectives mode" in got.get("error", ""), got
  assert "f_vjp_forward" in got["error"]


_JIT_STATIC = r"""
import json, sys
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
from hlo_tools import jax_hook
from hlo_tools.programs import ring_attention
# The series' per-op path (the CPU's compiler carries each permute's mode through).
hook = jax_hook.install("1x1x2", backends=("nccl", "peer"), platforms=("cpu",),
                        cost_table=sys.argv[1], per_op=True)
mesh = ring_attention.make_mesh(jax.devices()[:2])

def f(x, n, scale=1.0, *, flip=False):
  def body(x):
    for _ in range(n):
      x = lax.ppermute(x, "cp", [(0, 1), (1, 0)])
    return -x * scale if flip else x * scale
  return jax.shard_map(body, mesh=mesh, in_specs=P("cp"), out_specs=P("cp"))(x)

x = jnp.arange(1 << 16, dtype=jnp.float32)
want = lambda n, scale=1.0, flip=False: jax.jit(f, static_argnums=1, static_argnames=("n", "flip"))(
    x, n, scale, flip=flip)
g = hook.jit(f, static_argnums=1, static_argnames=("n", "flip"))
got = {"positional": bool(jnp.array_equal(g(x, 1), want(1))),
       "other_static": bool(jnp.array_equal(g(x, 2), want(2))),
       "keyword_static": bool(jnp.array_equal(g(x, n=1), want(1))),
       "keyword_dynamic": bool(jnp.array_equal(g(x, 1, scale=3.0), want(1, 3.0))),
       "keyword_only_static": bool(jnp.array_equal(g(x, 1, flip=True), want(1, flip=True))),
       "again": bool(jnp.array_equal(g(x, 1, scale=5.0), want(1, 5.0)))}
# compile()'s records (plain jax.jit's compiles above add their own, of another kind)
compiled = [p for p in hook.programs if "mode_requested" in p]
got["compiles"] = len(compiled)
got["permutes"] = [sum(p["compiled_modes"].values()) for p in compiled]
try:
  hook.jit(f, abstracted_axes=None)
except jax_hook.HookError as e:
  got["refused"] = str(e)
print(json.dumps(got))
hook.uninstall()
"""


def test_jit_takes_static_and_keyword_arguments_as_jax_jit_does(tmp_path):
  """hook.jit(f, static_argnums=1): each static value compiles its own program
  (one permute per step of the loop it unrolls), keyword arguments static or not
  reach it as jax.jit passes them, and a value seen before compiles nothing."""
  table = tmp_path / "table.txt"
  table.write_text(FAST_PEER_TABLE)
  got = run_live_cpu(_JIT_STATIC, table)
  for case in (
    "positional",
    "other_static",
    "keyword_static",
    "keyword_dynamic",
    "keyword_only_static",
    "again",
  ):
    assert got[case], case
  # n=1, n=2, n=1 by keyword (jax.jit's own signature differs), a dynamic keyword,
  # flip=True; scale=5.0 after scale=3.0 reuses its program.
  assert got["compiles"] == 5 and got["permutes"][:2] == [1, 2]
  assert "abstracted_axes" in got["refused"] and "\n" not in got["refused"]


def _f(x, n, scale=1.0, *, flip=False):
  return x


def test_one_compile_per_signature_static_values_by_value():
  """The key of JitFunction's own cache: static arguments by value (by position or
  by name), the others by shape and dtype only; no jax backend is needed for it."""
  jit = JitFunction(object(), _f, {"static_argnums": 1, "static_argnames": ("flip",)})
  x4, y4 = np.zeros(4, np.float32), np.ones(4, np.float32)
  key, dyn_args, dyn_kwargs = jit._key((x4, 2), {"flip": True})  # pylint: disable=protected-access
  assert dyn_args == (x4,) and dyn_kwargs == {}  # the static ones are not passed again
  same = jit._key((y4, 2), {"flip": True})[0]  # pylint: disable=protected-access
  assert same == key  # other values, same shape: the same executable
  for args, kwargs in (
    ((y4, 3), {"flip": True}),  # another static value
    ((y4, 2), {"flip": False}),  # another static keyword
    ((np.ones(5, np.float32), 2), {"flip": True}),  # another shape
    ((np.ones(4, np.float64), 2), {"flip": True}),  # another dtype
    ((y4, 2), {"flip": True, "scale": 2.0}),  # a dynamic keyword more
  ):
    assert jit._key(args, kwargs)[0] != key, (args, kwargs)  # pylint: disable=protected-access
  with pytest.raises(jax_hook.HookError, match="static argument of hook.jit is not hashable"):
    jit._key((x4, [2]), {})  # pylint: disable=protected-access


def test_hook_lowered_compiles_through_the_hook():
  calls = []
  hook = SimpleNamespace(compile=lambda lowered, options: calls.append((lowered, options)) or "c")
  lowered = SimpleNamespace(as_text=lambda: "module", in_tree="tree")
  wrapped = HookLowered(hook, lowered)
  assert wrapped.compile({"o": 1}) == "c" and calls == [(lowered, {"o": 1})]
  assert wrapped.as_text() == "module" and wrapped.in_tree == "tree"  # the Lowered's own


def test_a_jit_function_binds_as_a_method():
  class Model:
    apply = JitFunction(object(), _f, {"static_argnums": 0})

  model = Model()
  bound = model.apply
  assert bound.func is Model.__dict__["apply"] and bound.args == (model,)
  assert Model.apply is Model.__dict__["apply"]  # on the class: the function itself
  assert Model.__dict__["apply"].__name__ == "_f"  # wraps the function as jax.jit does
