"""hlo_tools.messages (one line on stderr, a note said once per command), and what the
tools say to a user through it: the user's own path in an error, exit 2 for a
topology smaller than the module in every command, and the report's headline saving
as what it is (modeled permute time that may overlap attention), on real modules
from tests/fixtures."""

import pytest

from hlo_tools import cli, messages
from hlo_tools.ops import report
from hlo_tools.ops.report.cases import Case
from hlo_tools.ops.report.text import summary_text

from conftest import FIXTURES

RING = FIXTURES / "ring_1x1x8.after_optimizations.hlo"  # ring attention, 8 devices
COND = FIXTURES / "cond_ring_1x1x8.after_optimizations.hlo"


def _broken(tmp_path):
  """The ring with its permute's opcode misspelt; (path, line of the error)."""
  lines = RING.read_text().split("\n")
  [i] = [i for i, l in enumerate(lines) if " collective-permute-start(" in l]
  lines[i] = lines[i].replace(" collective-permute-start(", " collective-permute-strt(")
  path = tmp_path / "bad.hlo"
  path.write_text("\n".join(lines))
  return path, i + 1


@pytest.mark.parametrize("command", ["report", "explain", "verify"])
def test_an_error_names_the_users_file_and_line(tmp_path, capsys, command):
  path, line = _broken(tmp_path)
  flags = [f"--out={tmp_path / 'r'}", "--quiet"] if command == "report" else []
  assert cli.main([command, str(path), "--topology=1x1x8", *flags]) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1, err
  assert err.startswith(f"{path}:{line}:") and "collective-permute-strt" in err, err
  assert "/hlo/input.hlo" not in err


@pytest.mark.parametrize("command", ["verify", "explain", "report"])
@pytest.mark.parametrize("fixture", [RING, COND], ids=["text alone", "with its config"])
def test_a_topology_smaller_than_the_module_is_bad_input(tmp_path, capsys, command, fixture):
  flags = [f"--out={tmp_path / 'r'}", "--quiet"] if command == "report" else []
  assert cli.main([command, str(fixture), "--topology=1x1x4", *flags]) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1, err
  assert not (tmp_path / "r").exists()
  assert str(fixture).rsplit(".", 1)[0] in err, err
  # XLA's config beside a module places its 8 devices, or the module's own count.
  assert (
    "the module needs 8 devices" in err and "but the topology has 4" in err
  ) or "places 8 devices, more than topology 1x1x4 has (4)" in err, err


@pytest.mark.parametrize(
  "fixture,overlap",
  [
    (
      RING,
      "1 of 1 async permutes have attention (a fused-attention call, a conditional "
      "or a loop) scheduled between start and done, so the step gains only the part "
      "of a saving that was not hidden under it",
    ),
    (
      FIXTURES / "marked_ring_1x1x8.after_optimizations.hlo",
      "none of the 1 async permutes has attention (a fused-attention call, a conditional "
      "or a loop) scheduled between start and done",
    ),
  ],
)
def test_headline_saving_is_modeled_permute_time_that_may_overlap(tmp_path, fixture, overlap):
  case = Case(id="c", title="ring", topology="1x1x8", path=str(fixture), label=str(fixture))
  data = report.build([case], tmp_path / "r", progress=False)
  [line] = [l for l in summary_text(data).splitlines() if "per step" in l]
  assert " of modeled permute time, " in line
  assert (
    "time that may overlap attention: the step's own time is not modeled here, "
    "so its share of a step is not known; " + overlap + "; %"
  ) in line
  assert data["summary"]["overlap"]["c"][0]["start"] == "collective-permute-start"


# ---------------------------------------------------------------------------------------
# messages itself.


def test_an_error_is_one_line_on_stderr(capsys):
  messages.print_error("m.hlo:3: bad\nsecond line\tend")
  out, err = capsys.readouterr()
  assert out == "" and err == "m.hlo:3: bad\\nsecond line\\tend\n"


def test_a_note_is_said_once_until_forgotten(capsys):
  messages.forget_notes()
  messages.print_note("no --topology; using 1x2x4")
  messages.print_note("no --topology; using 1x2x4")
  messages.print_note("another note")
  assert capsys.readouterr().err == "no --topology; using 1x2x4\nanother note\n"
  # The CLI root forgets them before each command: the next command says it again.
  messages.forget_notes()
  messages.print_note("no --topology; using 1x2x4")
  assert capsys.readouterr().err == "no --topology; using 1x2x4\n"
  messages.forget_notes()


def test_a_long_error_is_cut(capsys):
  # At most 600 characters, then how many more there were.
  messages.print_error("x" * 5000)
  assert capsys.readouterr().err == "x" * 600 + "... (4400 more characters)\n"
