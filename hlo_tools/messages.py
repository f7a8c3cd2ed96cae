"""Messages to the user on stderr, each one line (errors.one_line: control
characters escaped, the text cut to errors.MAX_MESSAGE_CHARS).

The whole API:

    print_error(text)                errors.one_line(text) on stderr
    print_note(text)                 print_error, but once per command
    forget_notes()                   forgets the notes said (the CLI root, before
                                     each command)
"""

import sys

from hlo_tools.errors import one_line

__all__ = [
  "print_error",
  "print_note",
  "forget_notes",
]


def print_error(text: object) -> None:
  """Prints one_line(text) on stderr."""
  print(one_line(text), file=sys.stderr)


_said: set[str] = set()


def print_note(text: object) -> None:
  """print_error, once per command: a note on a folder's topology is not repeated
  for each of its programs (the CLI root forgets what was said before each
  command)."""
  line = one_line(text)
  if line not in _said:
    _said.add(line)
    print(line, file=sys.stderr)


def forget_notes() -> None:
  _said.clear()
