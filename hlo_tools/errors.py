"""Every error type of hlo_tools, in one module at the bottom of the import graph.

Bad input of any kind is an InputError: str() is the one line the CLI root prints
(`file:line:col: message` or `LABEL: message`) before it exits with status 2. The
subclasses say where it was found, so a caller that needs to can tell them apart;
none needs translating into another on its way up.

    InputError        bad input (the base)
    InputReadError    a file, device or stdin that cannot be read or is over the limit
    HloParseError     HLO text the reader refuses
    SelectionError    a topology spec, cost table or permute the selection core refuses
    DumpError         a compile or dump that failed
    DumpReadError     a stage or pass a dump directory does not have
    HeuristicsError   a sweep, check or calibration that cannot run
    HookError         a bad argument to jax_hook.install() (a caller's bug, not input)
    ShapeError        a shape's text the reader refuses, at an offset (it becomes an
                      HloParseError with the line and column)
"""

import codecs

# An error line longer than this is cut: a message quoting a whole instruction with
# a million pairs helps nobody. Room for a prefix around nvshmem-opt's own line,
# which the driver already cuts at about 330 characters, so it is never cut twice.
MAX_MESSAGE_CHARS = 600
_CUT_SLACK = 32


def one_line(text: object, limit: int = MAX_MESSAGE_CHARS) -> str:
  """`text` as one readable line: newlines and other control characters escaped,
  so are the bytes of a file name that is not UTF-8 (\\xff), at most `limit`
  characters followed by "... (N more characters)"."""
  text = str(text)
  if len(text) > limit + _CUT_SLACK:  # the slack makes a cut line stay as it is
    text = f"{text[:limit]}... ({len(text) - limit} more characters)"
  if any(ch < " " or ch == "\x7f" or "\ud800" <= ch <= "\udfff" for ch in text):
    text = "".join(_escaped(ch) for ch in text)
  return text


def _escaped(ch: str) -> str:
  if ch >= " " and ch != "\x7f" and not "\ud800" <= ch <= "\udfff":
    return ch
  if "\udc80" <= ch <= "\udcff":  # a byte of a non-UTF-8 name, as os.fsdecode keeps it
    return f"\\x{ord(ch) - 0xDC00:02x}"
  return repr(ch)[1:-1]


ESCAPE_ERRORS = "hlo-tools-escape"


def _escape_unencodable(error: UnicodeError) -> tuple[str, int]:
  """The codec error handler ESCAPE_ERRORS: what UTF-8 cannot encode (the bytes of a
  non-UTF-8 file name, which Python keeps as lone surrogates) written as `\\xff`, so
  an output naming such a file is still UTF-8 text and says which bytes it had."""
  if not isinstance(error, UnicodeEncodeError):
    raise error
  bad = error.object[error.start : error.end]
  return "".join(_escaped(ch) for ch in bad), error.end


codecs.register_error(ESCAPE_ERRORS, _escape_unencodable)


def escape_name(text: str) -> str:
  """`text` with the bytes of a non-UTF-8 file name escaped (`\\xff`): safe to
  print, to write as UTF-8 and to put in HTML."""
  return text.encode("utf-8", ESCAPE_ERRORS).decode("utf-8")


class InputError(Exception):
  """Bad input: str() is the one line printed on stderr (`file:line:col: ...`)."""

  def __init__(self, message: object) -> None:
    super().__init__(one_line(message))


class InputReadError(InputError, ValueError):
  """An input that cannot be read or is over the limit; str() is `LABEL: message`."""

  def __init__(self, label: str, message: str, size: int | None = None) -> None:
    super().__init__(f"{label}: {message}")
    self.label, self.message, self.size = label, message, size

  def __reduce__(self) -> tuple[type, tuple[str, str, int | None]]:
    return (InputReadError, (self.label, self.message, self.size))


class HloParseError(InputError, ValueError):
  """Bad HLO text; str() is `path:line:col: message`."""

  def __init__(self, path: str, line: int, col: int, message: str) -> None:
    message = one_line(message, 400)  # one readable line even when it quotes huge text
    super().__init__(f"{one_line(path, 200)}:{line}:{col}: {message}")
    self.path, self.line, self.col, self.message = path, line, col, message

  # Picklable despite the 4-argument constructor.
  def __reduce__(self) -> tuple[type, tuple[str, int, int, str]]:
    return (HloParseError, (self.path, self.line, self.col, self.message))


class SelectionError(InputError, ValueError):
  """A bad topology spec, cost table or permute: the selection core's one line."""


class DumpError(InputError):
  """A compile or dump that failed."""


class DumpReadError(InputError):
  """A stage or pass a dump directory does not have."""


class HeuristicsError(InputError):
  """A sweep, check or calibration that cannot run."""


class HookError(ValueError):
  """A bad argument to jax_hook.install(); str() is one line."""


class ShapeError(ValueError):
  """A shape's text the HLO reader refuses; `offset` is where in the text."""

  def __init__(self, message: str, offset: int) -> None:
    super().__init__(message)
    self.offset = offset
