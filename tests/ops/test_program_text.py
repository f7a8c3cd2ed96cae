"""hlo_tools.ops.program_text: the program's one collectives mode in words (its
setting, saving, what a per-op choice adds, what each compiled permute runs)."""

import json

from hlo_tools.ops import program_text

FLAG = "xla_gpu_collective_permute_mode"
# How peer memory is set for a program: XLA's flag, or jax's compiler_options.
PEER_SETTING = (
  f"XLA_FLAGS=--{FLAG}=peer, or per compile "
  f'jax.jit(f, compiler_options={{"{FLAG}": "COLLECTIVES_PEER_MEMORY"}})'
)


def program(**changes):
  """A program as model.program_mode.for_source gives it: peer memory for two permutes."""
  base = {
    "backend": "peer",
    "mode": "COLLECTIVES_PEER_MEMORY",
    "best_us": 10.0,
    "nccl_us": 15.5,
    "saving_us": 5.5,
    "per_op_us": 8.75,
    "per_op_adds_us": 1.25,
    "runs_known": True,
    "permutes": 2,
    "xla_flags": f"XLA_FLAGS=--{FLAG}=peer",
    "compiler_options": {FLAG: "COLLECTIVES_PEER_MEMORY"},
    "modes": {
      "peer": {"refused": None},
      "symmetric": {"refused": "the table has no NCCL signals"},
    },
    "compiled_with": None,
    "compiled_with_from": None,
    "per_op_xla": False,
    "runs": {("main", "cp.1"): {"thunk": "COLLECTIVES_PEER_MEMORY", "agree": True}},
  }
  return dict(base, **changes)


def test_json_ready_keys_each_permute_by_computation_and_name():
  ready = program_text.json_ready(program())
  assert ready["runs"] == {"main/cp.1": {"thunk": "COLLECTIVES_PEER_MEMORY", "agree": True}}
  json.dumps(ready)  # no tuple keys left


def test_setting_is_the_flag_or_nothing_for_nccl():
  assert program_text.setting_text(program()) == PEER_SETTING
  nccl = program(backend="nccl", xla_flags=f"XLA_FLAGS=--{FLAG}=private")
  assert program_text.setting_text(nccl) == (
    f"nothing (XLA's default COLLECTIVES_PRIVATE_MEMORY); explicitly XLA_FLAGS=--{FLAG}=private"
  )


def test_lines_of_a_program():
  assert program_text.lines(program()) == [
    "program: one mode for every permute (what a stock XLA runs): peer "
    "(COLLECTIVES_PEER_MEMORY), modeled 10.00 us per step against 15.50 us on NCCL, "
    "saving 5.50 us",
    "  set           " + PEER_SETTING,
    "  per op        8.75 us per step, 1.25 us less than one mode: only an XLA with the "
    "series for jax v0.11.0 runs a mode per permute",
    "  refused       symmetric: the table has no NCCL signals",
    "  compiled with unknown: no module config beside the file; XLA's default "
    "COLLECTIVES_PRIVATE_MEMORY taken",
  ]


def test_lines_say_a_bound_a_costlier_per_op_choice_and_the_compiled_flag():
  text = program_text.lines(
    program(
      runs_known=False,
      per_op_adds_us=-2.0,
      compiled_with="COLLECTIVES_PEER_MEMORY",
      compiled_with_from="m.config.pbtxt",
    )
  )
  assert text[0].endswith("saving 5.50 us (at least: a loop count is unknown)")
  assert "2.00 us more than one mode (the users' marks kept)" in text[2]
  assert text[-1] == "  compiled with COLLECTIVES_PEER_MEMORY (m.config.pbtxt)"


def test_no_permutes_no_lines():
  assert program_text.lines({}) == []
  assert program_text.lines(program(permutes=0)) == []


def test_runs_text_says_whose_mode_and_a_disagreement():
  run = {"thunk": "COLLECTIVES_PEER_MEMORY", "config": None, "agree": True}
  assert program_text.runs_text(run, True) == "COLLECTIVES_PEER_MEMORY, its own mode (the series)"
  run = {
    "thunk": "COLLECTIVES_PRIVATE_MEMORY",
    "config": "COLLECTIVES_SYMMETRIC_MEMORY",
    "agree": False,
  }
  assert program_text.runs_text(run, False) == (
    "COLLECTIVES_PRIVATE_MEMORY, the flag's mode (stock XLA); its backend_config says "
    "COLLECTIVES_SYMMETRIC_MEMORY, which this XLA's thunk does not run (its buffers sit "
    "in the collective memory)"
  )


def test_summary_is_one_line():
  assert program_text.summary(program()) == (
    "one mode for the program (stock XLA): peer, "
    + PEER_SETTING
    + "; saves 5.50 us a step against NCCL; per op (the series' XLA only) 1.25 us more"
  )
  assert program_text.summary(program(per_op_adds_us=None)).endswith("against NCCL")
