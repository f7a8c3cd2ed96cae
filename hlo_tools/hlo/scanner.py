"""The exact scanner over one line: the reader's slow path, and the column of its errors."""

import re
from typing import TYPE_CHECKING, NoReturn

from hlo_tools.hlo.grammar import KEY_EQ_RE, SPECIAL_RE, STR_RE, WS_RE, match_end

if TYPE_CHECKING:
  from hlo_tools.hlo.reader import _Reader

_CLOSERS = {"(": ")", "{": "}", "[": "]"}
# Bracket nesting the scanner follows in a value before refusing the line: a hostile
# line of a million '{' fails at once instead of building a stack that deep.
MAX_NESTING = 1024


class Scanner:
  """Exact scanner over one line: the slow path, and where errors get their column."""

  def __init__(self, reader: "_Reader | None", s: str, lineno: int, col0: int) -> None:
    self.reader, self.s, self.lineno, self.col0, self.i = reader, s, lineno, col0, 0

  def fail(self, message: str, at: int | None = None) -> NoReturn:
    # No reader: splitting text the reader took, which cannot fail.
    assert self.reader is not None, message
    self.reader.error(self.lineno, self.col0 + (self.i if at is None else at) + 1, message)

  def ws(self) -> None:
    self.i = match_end(WS_RE, self.s, self.i)

  def expect(self, ch: str, message: str | None = None) -> None:
    if not self.s.startswith(ch, self.i):
      got = self.s[self.i : self.i + 12] or "end of line"
      self.fail(message or f"expected {ch!r}, got {got!r}")
    self.i += len(ch)

  def regex(self, rx: "re.Pattern[str]", message: str) -> str:
    m = rx.match(self.s, self.i)
    if m is None:
      self.fail(message)
    self.i = m.end()
    return m.group(0)

  def attributes(self) -> dict[str, str]:
    """`, key=value, ...` up to the end of the text."""
    attrs: dict[str, str] = {}
    while True:
      self.ws()
      if self.i >= len(self.s):
        return attrs
      self.expect(",")
      self.ws()
      key = self.regex(KEY_EQ_RE, "expected an attribute, `name=value`")[:-1]
      self.ws()
      attrs[key] = self.value()

  def balanced(self) -> None:
    """Skips the string or bracketed group at self.i, minding strings (any closer closes
    a bracket)."""
    s, depth, j = self.s, 0, self.i
    while True:
      m = SPECIAL_RE.search(s, j)
      if m is None:
        self.fail(
          f"unbalanced {s[self.i]!r}: no matching {_CLOSERS[s[self.i]]!r} on this "
          "line (the reader takes one statement a line, as XLA prints it)",
          self.i,
        )
      ch, j = m.group(), m.end()
      if ch == '"':
        sm = STR_RE.match(s, m.start())
        if sm is None:
          self.fail("unterminated string", m.start())
        j = sm.end()
        if not depth:  # the value was the string
          self.i = j
          return
      elif ch in _CLOSERS:
        depth += 1
        if depth > MAX_NESTING:
          self.fail(f"brackets nest deeper than {MAX_NESTING} levels", m.start())
      else:
        depth -= 1
        if not depth:
          self.i = j
          return

  def value(self) -> str:
    """One attribute value: a string, a bracketed group, or a bare word with bracketed
    parts (`[2,4]<=[4,2]T(1,0)`, jaxlib 0.10's `mesh['a'=8] {'a'}`)."""
    s, start = self.s, self.i
    if s.startswith(('"', "{"), start):
      self.balanced()
    else:
      while self.i < len(s) and s[self.i] not in ',)]}{" \t':
        if s[self.i] in "([":
          self.balanced()
        else:
          self.i += 1
      if self.i == start:
        self.fail("expected an attribute value")
      if s.startswith("mesh[", start) and s[self.i - 1] == "]":
        if s.startswith(", device_ids=(", self.i):
          self.i += len(", device_ids=")
          self.balanced()
        after = match_end(WS_RE, s, self.i)
        if s.startswith("{", after):
          self.i = after
          self.balanced()
    return s[start : self.i]
