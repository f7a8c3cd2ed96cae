"""The installed hooks by name, and their settings in jax's persistent compilation cache key."""

from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the binding is imported when first used
  from hlo_tools._selection_core import CostTable
  from hlo_tools.hook.hook import Hook

# name -> the installed Hook: jax would run a second registration under one name as
# a second transformation, deciding every permute twice.
INSTALLED: "dict[str, Hook]" = {}


def table_fingerprint(selection: ModuleType, table: "CostTable") -> str:
  """A digest of everything in `table` the core decides with."""
  import hashlib  # pylint: disable=import-outside-toplevel

  parts: list[Any] = [
    table.backends,
    table.margin,
    table.nvshmem_max_bytes,
    table.symmetric_signals,
  ]
  for backend in selection.BACKENDS:
    try:
      parts.append(table.sm_interference(backend))
    except (ValueError, KeyError):
      parts.append(None)
    for link_class in selection.LINK_CLASSES:
      for get in (table.link, table.per_buffer_us, table.points):
        try:
          parts.append(get(backend, link_class))
        except (ValueError, KeyError):
          parts.append(None)
  return hashlib.sha256(repr(parts).encode()).hexdigest()[:32]


def cache_key_settings() -> str:
  """What every installed hook decides with, for jax's persistent compilation
  cache key: its key holds the compile options but no registered transformation
  (jax/_src/cache_key.py get(), whose `custom_hook` entry is there to be
  replaced), so without this an executable cached before the hook was installed,
  or by a hook with other settings, is served and no transformation runs."""
  return ";".join(
    f"nvshmem_opt_hook {h.name} topology={h.topology} backends={','.join(h.backends)} "
    f"per_op={h.xla.get('per_op')} table={h.table_digest}"
    for _, h in sorted(INSTALLED.items())
  )


# jax's own cache_key.custom_hook, kept while a hook's settings stand in for it.
_CACHE_HOOK: dict[str, Callable[[], str]] = {}


def set_cache_key_settings() -> None:
  """Puts the installed hooks' settings into jax's cache key (jax's own custom hook
  back when none is installed)."""
  try:
    from jax._src import cache_key  # pylint: disable=import-outside-toplevel
  except ImportError:
    return
  if "jax" not in _CACHE_HOOK:
    _CACHE_HOOK["jax"] = cache_key.custom_hook
  previous = _CACHE_HOOK["jax"]
  if not INSTALLED:
    cache_key.custom_hook = previous
    del _CACHE_HOOK["jax"]
    return

  def custom_hook() -> str:  # read at each key: a probe may settle per_op later
    return previous() + cache_key_settings()

  cache_key.custom_hook = custom_hook


def clear_jax_caches() -> None:
  """Drops the executables in jax's in-process caches (pxla._cached_compilation,
  keyed by the lowered module, devices and options; jax.jit's own): none of them
  says which transformation was registered when it was compiled, so after an
  install or uninstall none may be served again (jax.clear_caches)."""
  import jax  # pylint: disable=import-outside-toplevel

  jax.clear_caches()
