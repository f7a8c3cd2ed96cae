"""Attribute values read from their text: strings, key=value and integer lists, replica groups."""

import codecs
import itertools
import math
import re
from collections.abc import Sequence

from hlo_tools.hlo.grammar import (
  ATTR_RE,
  ESCAPE_RE,
  INT_RE,
  IOTA_RE,
  KV_RE,
  MESH_RE,
  WS_RE,
  match_end,
)
from hlo_tools.hlo.scanner import Scanner


def unquote(text: str) -> str:
  """The value of a quoted HLO string (C escapes), or the text itself if not quoted."""
  if len(text) < 2 or text[0] != '"' or text[-1] != '"':
    return text
  body = text[1:-1]
  if "\\" not in body:
    return body
  body = ESCAPE_RE.sub(  # an unknown escape is its character, as C compilers take it
    lambda m: m.group() if m.group(1) in "\\'\"abfnrtvx01234567" else m.group(1), body
  )
  try:  # C escapes (\n, \", \ooo, \xhh), as Python's bytes literals take them
    return codecs.escape_decode(body.encode("utf-8", "surrogateescape"))[0].decode(
      "utf-8", "replace"
    )
  except ValueError:  # `\x` without digits: keep the text
    return body


def parse_kv(text: str) -> dict[str, str]:
  """`{a="x" b=1, c=2}` -> {'a': 'x', 'b': '1', 'c': '2'} (values unquoted)."""
  if text.startswith("{") and text.endswith("}"):
    text = text[1:-1]
  return {k: unquote(v) for k, v in KV_RE.findall(text)}


def parse_name_list(text: str) -> list[str]:
  """`%a` or `{%a, %b}` -> ['a', 'b']."""
  text = text.strip()
  if text.startswith("{"):
    text = text[1:-1]
  return [n.strip().lstrip("%") for n in text.split(",") if n.strip()]


def parse_int_lists(text: str) -> list[list[int]]:
  """`{{0,1},{1,0}}` -> [[0, 1], [1, 0]]."""
  return [[int(x) for x in INT_RE.findall(g)] for g in re.findall(r"\{([^{}]*)\}", text)]


def _ints(text: str | None) -> list[int] | None:
  return [int(x) for x in text.split(",")] if text else None


def _iota_ids(dims: list[int] | None, perm: list[int] | None = None) -> list[int] | None:
  """The ids 0..N-1 laid out row-major in `dims`, transposed by `perm`, read row-major;
  None for a perm that is not one."""
  if dims is None:
    return None
  perm = perm or list(range(len(dims)))
  if sorted(perm) != list(range(len(dims))):
    return None
  strides = [1] * len(dims)
  for k in range(len(dims) - 2, -1, -1):
    strides[k] = strides[k + 1] * dims[k + 1]
  return [
    sum(idx[k] * strides[perm[k]] for k in range(len(perm)))
    for idx in itertools.product(*(range(dims[p]) for p in perm))
  ]


def expand_iota(text: str) -> list[list[int]] | None:
  """Expands `[G,S]<=[d0,d1,...]T(perm)` replica groups; None if not in that form."""
  m = IOTA_RE.fullmatch(re.sub(r"\s+", "", text))
  if m is None:
    return None
  ids = _iota_ids(_ints(m.group(2)), _ints(m.group(3)))
  if ids is None:
    return None
  size = (_ints(m.group(1)) or [0])[-1]  # the group matched digits: never the default
  return [ids[i : i + size] for i in range(0, len(ids) * (size > 0), size or 1)]


def expand_mesh_groups(text: str) -> list[list[int]] | None:
  """Expands jaxlib 0.10's `mesh['a'=8,'b'=1] {'a'}` replica groups; None if not that form.

  A group is every position of the mesh (row-major) that differs only along the chosen
  axes, in the chosen order; `device_ids=([4,2]T(1,0))` names the device at each position.
  """
  m = MESH_RE.fullmatch(text.strip())
  if m is None:
    return None
  try:
    axes = {
      a.strip().strip("'"): int(n)
      for a, n in (x.split("=") for x in m.group(1).split(",") if x.strip())
    }
  except ValueError:  # not that form
    return None
  names = list(axes)
  chosen = [a.strip().strip("'") for a in m.group(4).split(",") if a.strip()]
  if any(c not in axes for c in chosen):
    return None
  order = _iota_ids(
    list(axes.values()),
    [names.index(n) for n in names if n not in chosen] + [names.index(c) for c in chosen],
  )
  if order is None:
    return None
  ids: Sequence[int] | None = (
    _iota_ids(_ints(m.group(2)), _ints(m.group(3))) if m.group(2) else range(len(order))
  )
  if ids is None or len(ids) != len(order):
    return None
  size = math.prod(axes[c] for c in chosen)
  return [[ids[p] for p in order[i : i + size]] for i in range(0, len(order), max(size, 1))]


def split_attributes(text: str) -> dict[str, str]:
  """`, key=value, ...` (checked when read) -> {key: raw value}, by the regex the reader
  matched, else by the scanner that took it."""
  attrs: dict[str, str] = {}
  pos, end = 0, len(text)
  while True:
    pos = match_end(WS_RE, text, pos)
    if pos >= end:
      return attrs
    m = ATTR_RE.match(text, pos)
    if m is None:
      return Scanner(None, text, 0, 0).attributes()
    attrs[m.group(1)] = m.group(2)
    pos = m.end()
