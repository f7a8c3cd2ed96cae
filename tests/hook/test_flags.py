"""hlo_tools/hook/flags.py: the mode a compile runs its permutes in (XLA's flag,
compiler_options, XLA_FLAGS read as XLA reads it) and the probe of an XLA."""

import json
import os
import subprocess
import sys

import pytest

from hlo_tools import jax_hook
from hlo_tools.hook import flags as hook_flags

from conftest import ROOT

_PEER = "COLLECTIVES_PEER_MEMORY"
_PRIVATE = "COLLECTIVES_PRIVATE_MEMORY"
_SYMMETRIC = "COLLECTIVES_SYMMETRIC_MEMORY"


def test_probe_of_a_cpu_xla_finds_no_per_op_mode():
  code = (
    "import jax, json; from hlo_tools.hook import flags; "
    "print(json.dumps(flags.probe(jax.devices('cpu')[0])))"
  )
  env = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
  )
  proc = subprocess.run(
    [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  got = json.loads(proc.stdout.strip().splitlines()[-1])
  assert got["per_op"] is False and got["platform"] == "cpu"


@pytest.mark.parametrize(
  "value,want",
  [
    ("", None),
    ("--xla_gpu_collective_permute_mode=peer", _PEER),
    # The last one wins, as each sets the flag in turn.
    ("--xla_gpu_collective_permute_mode=peer --xla_gpu_collective_permute_mode=private", _PRIVATE),
    ('  --xla_gpu_collective_permute_mode="PEER"', _PEER),
    ("--xla_gpu_collective_permute_mode='Symmetric'", "COLLECTIVES_SYMMETRIC_MEMORY"),
    # XLA stops reading at the first word that is not a flag.
    ("--xla_dump_to=/tmp/x stray --xla_gpu_collective_permute_mode=peer", None),
    ("--xla_gpu_collective_permute_mode=peer -- --xla_gpu_collective_permute_mode=private", _PEER),
    ("--xla_gpu_collective_permute_mode_x=peer", None),
  ],
)
def test_xla_flags_read_as_xla_reads_them(value, want):
  assert hook_flags.xla_flags_mode({"XLA_FLAGS": value})[0] == want


def test_xla_flags_from_a_file_and_a_bad_word(tmp_path):
  flags = tmp_path / "flags"
  flags.write_text(
    "--xla_gpu_collective_permute_mode=private\n--xla_gpu_collective_permute_mode=peer\n"
  )
  mode, where = hook_flags.xla_flags_mode({"XLA_FLAGS": str(flags)})
  assert mode == _PEER and str(flags) in where
  with pytest.raises(jax_hook.HookError, match="warp"):
    hook_flags.xla_flags_mode({"XLA_FLAGS": "--xla_gpu_collective_permute_mode=warp"})


def test_xla_flags_args_split_as_xla_splits_them():
  # Blanks end a flag; --name="..." and --name='...' end at the closing quote, which
  # is removed; a backslash escapes inside double quotes only; the first word that
  # is not a flag ends the list.
  value = '  --a=1 --b="x y"\t--c=\'p q\' --d="a\\"b" --e=\'a\\b\' stray --f=2'
  assert hook_flags.xla_flags_args(value) == ["--a=1", "--b=x y", "--c=p q", '--d=a"b', "--e=a\\b"]
  assert hook_flags.xla_flags_args("") == []
  assert hook_flags.xla_flags_args("file.txt --a") == []


def test_an_unreadable_xla_flags_file_is_a_hook_error(tmp_path):
  missing = tmp_path / "no_such_flags"
  with pytest.raises(jax_hook.HookError, match="cannot be read") as err:
    hook_flags.xla_flags_mode({"XLA_FLAGS": str(missing)})
  assert str(missing) in str(err.value)


def test_flag_in_effect_takes_the_compile_then_jit_then_xla_flags(monkeypatch):
  flag = hook_flags.FLAG
  monkeypatch.setenv("XLA_FLAGS", f"--{flag}=symmetric")
  # The compile's own options over jax.jit's; the enum's number (xla.proto) or name.
  assert hook_flags.flag_in_effect({flag: 3}, ((flag, 1),)) == (_PEER, "compiler_options")
  assert hook_flags.flag_in_effect({}, ((flag, "1"),)) == (
    _PRIVATE,
    "jax.jit's compiler_options",
  )
  # A later key of jax.jit's options wins, as in jax's dict of them.
  assert hook_flags.flag_in_effect(None, ((flag, 1), (flag, _PEER)))[0] == _PEER
  assert hook_flags.flag_in_effect(None, None) == (_SYMMETRIC, "XLA_FLAGS")
  monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
  assert hook_flags.flag_in_effect({"other_option": 1}) == (_PRIVATE, "XLA's default")


@pytest.mark.parametrize("value", [True, "PEER", "peer", 7, "COLLECTIVES_PEER"])
def test_flag_in_effect_refuses_what_names_no_mode(value):
  with pytest.raises(jax_hook.HookError, match="is not a collectives mode"):
    hook_flags.flag_in_effect({hook_flags.FLAG: value})


def _permute(name, mode=None):
  config = (
    f', backend_config={{"collective_backend_config":{{"collectives_mode":"{mode}"}}}}'
    if mode
    else ""
  )
  return (
    f"  {name} = f32[8]{{0}} collective-permute(p0), source_target_pairs={{{{0,1}},{{1,0}}}}"
    + config
  )


def test_compiled_flag_mode_is_the_one_mode_every_permute_carries():
  def module(*lines):
    return "\n".join(["HloModule m", "ENTRY e {", "  p0 = f32[8]{0} parameter(0)", *lines, "}"])

  assert hook_flags.compiled_flag_mode(module(_permute("a", _PEER), _permute("b", _PEER))) == _PEER
  # A stock assigner writes nothing under PRIVATE: permutes without a mode ran it.
  assert hook_flags.compiled_flag_mode(module(_permute("a"), _permute("b"))) == _PRIVATE
  assert hook_flags.compiled_flag_mode(module(_permute("a", _PEER), _permute("b"))) is None
  assert hook_flags.compiled_flag_mode(module()) is None


def test_module_name_from_the_header():
  head = (ROOT / "tests" / "fixtures" / "ring_1x1x8.before_async.hlo").read_text()
  assert hook_flags.module_name(head) == "jit_ring_attention_shard"
  assert hook_flags.module_name("HloModule jit_f\n") == "jit_f"
  assert hook_flags.module_name("ENTRY e {\n}") == "module"
