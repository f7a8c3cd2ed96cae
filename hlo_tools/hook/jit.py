"""hook.jit: jax.jit whose compiles go through a Hook's compile, and the eager
jax.vmap and jax.grad around it that jax would compile without the hook."""

import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hlo_tools.errors import HookError

if TYPE_CHECKING:  # jax is imported when first used
  from jax.stages import Compiled, Lowered

  from hlo_tools.hook.hook import Hook


class JitFunction:
  """What hook.jit returns: jax.jit(fun, **jit_kwargs), whose calls compile through
  hook.compile, one compile per argument signature (static arguments by value, by
  position or name as jax.jit resolves them; the others by shape, dtype, weak type
  and sharding). `lower` gives a Lowered whose compile() is hook.compile's.

  Called with jax tracers (under jax.grad, jax.vmap, jax.checkpoint or inside
  another jax.jit) it is jax.jit(fun) itself: the function joins the traced program,
  and the compile of that program decides its mode: hook.compile or hook.jit of the
  outer function, one mode for all of it (the same decision as for that program
  written with plain jax.jit inside); a plain jax.jit's compile only meets the
  registered transformation (records the mode to set on a stock XLA, decides per
  permute on the series'). Two eager cases compile through hook.compile instead,
  unless shardings or donations were given: under jax.vmap without an axis name
  the batched program (_under_vmap), and under jax.grad, jax.value_and_grad or
  jax.vjp the forward and the backward program (_under_grad)."""

  _TRACED_PLAIN = {
    "in_shardings",
    "out_shardings",
    "donate_argnums",
    "donate_argnames",
    "keep_unused",
    "inline",
  }

  def __init__(self, hook: "Hook", fun: Callable[..., Any], jit_kwargs: Mapping[str, Any]) -> None:
    import jax  # pylint: disable=import-outside-toplevel

    self._hook, self._fun = hook, fun
    self._jitted = jax.jit(fun, **jit_kwargs)
    self._nums, self._names = _static_arguments(fun, jit_kwargs)
    self._cache: dict[Hashable, Compiled] = {}
    self._jit_kwargs = dict(jit_kwargs)
    # Under an eager jax.vmap: the batched function's JitFunction per batching.
    self._vmapped: dict[Hashable, JitFunction] = {}
    # Under an eager jax.grad: the forward and backward JitFunction per signature.
    # None: the function closes over a traced value, and keeps jax's own rule.
    self._grads: dict[Hashable, tuple[JitFunction, JitFunction] | None] = {}
    functools.update_wrapper(self, fun)

  def _key(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Hashable, tuple, dict]:

    static = {i if i >= 0 else len(args) + i for i in self._nums}
    dyn_args = tuple(a for i, a in enumerate(args) if i not in static)
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._names}
    fixed = (
      tuple((i, args[i]) for i in sorted(static) if 0 <= i < len(args)),
      tuple(sorted((k, v) for k, v in kwargs.items() if k in self._names)),
    )
    key = (len(args), fixed, _signature((dyn_args, dyn_kwargs)))
    try:
      hash(key)
    except TypeError:
      raise HookError(
        "a static argument of hook.jit is not hashable, as jax.jit needs it to be"
      ) from None
    return key, dyn_args, dyn_kwargs

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    import jax  # pylint: disable=import-outside-toplevel

    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs))):
      # Shardings and donations of the arguments do not carry over to jax.vmap(fun)
      # or jax.vjp(fun) as written: such a function keeps jax's own rules.
      plain = self._TRACED_PLAIN & set(self._jit_kwargs)
      if not plain and _eager_vmap(jax.tree.leaves((args, kwargs))):
        return self._under_vmap(args, kwargs)
      if not plain and _eager_linearize(jax.tree.leaves((args, kwargs))):
        return self._under_grad(args, kwargs)
      return self._jitted(*args, **kwargs)  # part of a traced program: see the class
    key, dyn_args, dyn_kwargs = self._key(args, kwargs)
    compiled = self._cache.get(key)
    if compiled is None:
      compiled = self._cache[key] = self._hook.compile(self._jitted.lower(*args, **kwargs))
    return compiled(*dyn_args, **dyn_kwargs)

  def _split(
    self, args: tuple[Any, ...], kwargs: Mapping[str, Any]
  ) -> tuple[Hashable, tuple[Any, ...], dict[str, Any], Callable[..., Any]]:
    """(the static arguments, the others by position, by name, fun of those two)."""
    static = {i if i >= 0 else len(args) + i for i in self._nums}
    fixed_args = tuple((i, a) for i, a in enumerate(args) if i in static)
    fixed_kwargs = tuple(sorted((k, v) for k, v in kwargs.items() if k in self._names))
    dyn_args = tuple(a for i, a in enumerate(args) if i not in static)
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._names}
    fixed = (fixed_args, fixed_kwargs)
    try:
      hash(fixed)
    except TypeError:
      raise HookError(
        "a static argument of hook.jit is not hashable, as jax.jit needs it to be"
      ) from None

    def call(dyn: tuple[Any, ...], named: dict[str, Any]) -> Any:
      it, at = iter(dyn), dict(fixed_args)
      full = [at[i] if i in at else next(it) for i in range(len(args))]
      return self._fun(*full, **dict(fixed_kwargs), **named)

    return fixed, dyn_args, dyn_kwargs, call

  def _under_vmap(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """A call under an eager jax.vmap: the batched program, jax.jit(jax.vmap(fun)),
    compiled through hook.compile (decided, compiled once with its mode, checked)
    and called on the concrete batched arrays. jax's own batching rule would bind
    the jit one level up and compile it without the hook (pjit.py _pjit_batcher);
    custom_vmap hands its rule those concrete arrays instead, each batched one
    with its batch axis first."""
    import jax  # pylint: disable=import-outside-toplevel
    from jax.custom_batching import custom_vmap  # pylint: disable=import-outside-toplevel

    fixed, dyn_args, dyn_kwargs, call = self._split(args, kwargs)
    batched = custom_vmap(call)

    @batched.def_vmap
    def rule(axis_size: int, in_batched: Any, dyn: Any, named: Any) -> Any:
      axes = jax.tree.map(lambda b: 0 if b else None, tuple(in_batched))
      key = (fixed, axis_size, jax.tree.structure(axes), tuple(jax.tree.leaves(axes)))
      inner = self._vmapped.get(key)
      if inner is None:
        options = {k: v for k, v in self._jit_kwargs.items() if k == "compiler_options"}
        vmapped = jax.vmap(call, in_axes=axes, axis_size=axis_size)
        inner = self._vmapped[key] = JitFunction(self._hook, vmapped, options)
      out = inner(dyn, named)
      return out, jax.tree.map(lambda _: True, out)

    return batched(dyn_args, dyn_kwargs)

  def _under_grad(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """A call under an eager jax.grad, jax.value_and_grad or jax.vjp: two programs,
    each compiled through hook.compile (decided, compiled once with its mode,
    checked): the forward, jax.vjp(fun) returning the output and the pullback's
    residuals, and the backward, the pullback applied to the cotangent. jax's own
    linearize rule stages the jit's tangent and compiles both halves without the
    hook, and refuses compiler_options on the staged jit (pjit.py
    pjit_staging_rule); custom_vjp runs its forward and backward rules on concrete
    arrays instead. The residuals are those jax.grad of jax.jit(fun) keeps.

    A function that closes over a traced value (a custom_vjp's rules could not
    carry its gradient), as jax.closure_convert finds on the first call of a
    signature, keeps jax's own rule: jax.jit(fun), no mode applied on a stock XLA.
    The backward compiles once per cotangent signature, its sharding included."""
    import jax  # pylint: disable=import-outside-toplevel

    fixed, dyn_args, dyn_kwargs, call = self._split(args, kwargs)
    key = (fixed, _signature(jax.tree.map(_primal, (dyn_args, dyn_kwargs))))
    if key not in self._grads and jax.closure_convert(call, dyn_args, dyn_kwargs)[1]:
      self._grads[key] = None
    halves = self._grads.get(key)
    if key in self._grads and halves is None:
      return self._jitted(*args, **kwargs)
    if halves is None:
      options = {k: v for k, v in self._jit_kwargs.items() if k == "compiler_options"}
      pullback: list[Any] = []  # the pullback's tree, from the forward's one trace

      def forward(dyn: tuple[Any, ...], named: dict[str, Any]) -> Any:
        out, back = jax.vjp(call, dyn, named)
        leaves, tree = jax.tree.flatten(back)
        pullback.append(tree)
        return out, leaves

      def backward(leaves: list[Any], cotangent: Any) -> Any:
        return jax.tree.unflatten(pullback[0], leaves)(cotangent)

      name = getattr(self._fun, "__name__", "fun")
      forward.__name__, backward.__name__ = f"{name}_vjp_forward", f"{name}_vjp_backward"
      # A new function per key: jax traces it (and records its tree) exactly once.
      halves = self._grads[key] = (
        JitFunction(self._hook, forward, options),
        JitFunction(self._hook, backward, options),
      )
    run_forward, run_backward = halves

    @jax.custom_vjp
    def differentiable(dyn: tuple[Any, ...], named: dict[str, Any]) -> Any:
      return call(dyn, named)

    differentiable.defvjp(run_forward, run_backward)
    return differentiable(dyn_args, dyn_kwargs)

  def lower(self, *args: Any, **kwargs: Any) -> "HookLowered":
    """jax.jit(fun).lower(...), whose compile() goes through hook.compile."""
    return HookLowered(self._hook, self._jitted.lower(*args, **kwargs))

  def trace(self, *args: Any, **kwargs: Any) -> Any:
    return self._jitted.trace(*args, **kwargs)

  def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
    return self._jitted.eval_shape(*args, **kwargs)

  def __get__(self, obj: Any, objtype: Any = None) -> Any:
    """A method, as jax.jit's: bound to the instance (its first argument)."""
    if obj is None:
      return self
    return functools.partial(self, obj)


class HookLowered:
  """A jax.stages.Lowered whose compile() is hook.compile's; the rest is the Lowered's."""

  def __init__(self, hook: "Hook", lowered: "Lowered") -> None:
    self._hook, self.lowered = hook, lowered

  def compile(self, compiler_options: Mapping[str, Any] | None = None) -> "Compiled":
    return self._hook.compile(self.lowered, compiler_options)

  def __getattr__(self, name: str) -> Any:
    return getattr(self.lowered, name)


def _eager_vmap(leaves: Sequence[Any]) -> bool:
  """Whether the tracers among `leaves` are all of one jax.vmap applied eagerly
  (its trace's parent evaluates) with no axis name that a collective inside could
  use. Reads jax's BatchTrace (jax/_src/interpreters/batching.py, 0.10.2); any
  other layout is False (the plain jax.jit path)."""
  try:
    from jax._src import core  # pylint: disable=import-outside-toplevel
    from jax._src.interpreters import batching  # pylint: disable=import-outside-toplevel
  except ImportError:
    return False
  tracers = [x for x in leaves if isinstance(x, core.Tracer)]
  if not all(isinstance(t, batching.BatchTracer) for t in tracers):
    return False
  if len({id(t._trace) for t in tracers}) != 1:
    return False
  trace = tracers[0]._trace
  data = getattr(trace, "axis_data", None)
  return (
    isinstance(getattr(trace, "parent_trace", None), core.EvalTrace)
    and data is not None
    and getattr(data, "name", None) is core.no_axis_name
    and getattr(data, "spmd_name", None) is None
    and getattr(data, "explicit_mesh_axis", None) is None
  )


def _signature(tree: Any) -> Hashable:
  """The tree's structure and each leaf's type, shape, dtype, weak type and
  sharding: what makes jax.jit compile another executable."""
  import jax  # pylint: disable=import-outside-toplevel

  leaves, structure = jax.tree.flatten(tree)
  return structure, tuple(
    (
      type(x).__name__,
      getattr(x, "shape", None),
      str(getattr(x, "dtype", "")),
      getattr(x, "weak_type", None),
      # The sharding itself: its printed form names no device, and two meshes
      # of one shape on other devices need their own executable.
      getattr(x, "sharding", None),
    )
    for x in leaves
  )


def _eager_linearize(leaves: Sequence[Any]) -> bool:
  """Whether the tracers among `leaves` are all of one linearization for a VJP
  (jax.grad, jax.value_and_grad, jax.vjp) applied eagerly: their primals are
  concrete arrays. Reads jax's LinearizeTracer and its trace's is_vjp
  (jax/_src/interpreters/ad.py, 0.10.2): jax.linearize, whose linear function
  applies forward mode, which no custom_vjp allows, is False, as is any other
  layout (jax.jvp, a gradient inside a trace, a gradient of a gradient)."""
  try:
    from jax._src import core  # pylint: disable=import-outside-toplevel
    from jax._src.interpreters import ad  # pylint: disable=import-outside-toplevel
  except ImportError:
    return False
  tracer_type = getattr(ad, "LinearizeTracer", None)
  tracers = [x for x in leaves if isinstance(x, core.Tracer)]
  if tracer_type is None or not all(isinstance(t, tracer_type) for t in tracers):
    return False
  if len({id(t._trace) for t in tracers}) != 1:
    return False
  trace = tracers[0]._trace
  return (
    not any(isinstance(getattr(t, "primal", None), core.Tracer) for t in tracers)
    and isinstance(getattr(trace, "parent_trace", None), core.EvalTrace)
    and getattr(trace, "is_vjp", False) is True
  )


def _primal(x: Any) -> Any:
  """A linearization's tracer's primal value; anything else itself."""
  return getattr(x, "primal", x)


def _static_arguments(
  fun: Callable[..., Any], jit_kwargs: Mapping[str, Any]
) -> tuple[tuple[int, ...], tuple[str, ...]]:
  """(static positions, static names) as jax.jit resolves them from fun's signature
  (jax/_src/pjit.py, api_util.resolve_argnums)."""
  try:
    from jax._src import api_util  # pylint: disable=import-outside-toplevel

    signature = api_util.fun_signature(fun)
    _, _, nums, names = api_util.resolve_argnums(
      fun,
      signature,
      jit_kwargs.get("donate_argnums"),
      jit_kwargs.get("donate_argnames"),
      jit_kwargs.get("static_argnums"),
      jit_kwargs.get("static_argnames"),
    )
  except (ImportError, AttributeError) as e:
    raise HookError(f"hook.jit needs jax's own reading of static arguments: {e}") from None
  return tuple(nums), tuple(names)
