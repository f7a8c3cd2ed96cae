"""The openxla/xla patch series for jax v0.9.1's XLA in xla_patches/xla-3cc8846c_jax-0.9.1/
(scripts/gen_patches.py).

Offline, as in CI (no XLA tree): the files the series adds are those of its
source folder, xla_patches/xla-3cc8846c_jax-0.9.1/src/ (git apply), a changed source is
reported stale; the patches' headers, messages and licence lines are an
upstream change's; the series stays within 1,200 lines outside tests, as both
READMEs count them; the BUILD hunk declares every source with the deps its
includes need; the decision builds without HLO; the flags the registration
reads are the fields the flags patch adds; the run-time guard comes before the
executable's heap allocations; the sources are clang-format 17.0.6 clean in the
pin's style; the Bazel files pass buildifier. With openxla/xla at the pin ($XLA_PIN, or a
local mirror where the machine has one): `--check` regenerates the series with
git and finds it current, --edit/--from round-trip a change, the changed lines
are clang-format and buildifier clean, and the style file is the pin's.
"""

import ast
import email
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gen_patches.py"
SERIES = REPO / "xla_patches/xla-3cc8846c_jax-0.9.1"
ALL = sorted(SERIES.glob("[0-9][0-9][0-9][0-9]-*.patch"))
# 0001 stands alone (the runtime's own rules); the rest builds on it.
PATCHES = ALL[1:]
PES, GUARD, COLORS, DECISION, PASS, FLAGS, REGISTRATION = PATCHES
RUNTIME = "xla/backends/gpu/runtime"
PKG = "xla/backends/gpu/transforms/collectives"
SOURCES = REPO / "xla_patches" / "xla-3cc8846c_jax-0.9.1" / "src"  # The files the series adds.
SRC = SOURCES / PKG
STYLE = SOURCES / ".clang-format"
NON_TEST_LIMIT = 1200
PATCH_LIMIT = 400
CLANG_FORMAT = REPO / ".venv" / "bin" / "clang-format"
AUTHOR = "NVSHMEM ring-attention pass developers <nvshmem-ring-pass@users.noreply.github.com>"
# A git directory of openxla/xla (or a fork) holding the pin, from the environment
# (.ci/run sets it where the machine keeps a mirror).
PIN_DIR = os.environ.get("XLA_PIN") or None
needs_pin = pytest.mark.skipif(PIN_DIR is None, reason="needs openxla/xla at the pin ($XLA_PIN)")
ENV = {
  **{k: v for k, v in os.environ.items() if k != "XLA_PIN"},
  "GIT_CONFIG_NOSYSTEM": "1",
  "GIT_CONFIG_GLOBAL": os.devnull,
  "GIT_AUTHOR_NAME": "t",
  "GIT_AUTHOR_EMAIL": "t@invalid",
  "GIT_COMMITTER_NAME": "t",
  "GIT_COMMITTER_EMAIL": "t@invalid",
}


def run(cmd, cwd=REPO, **env):
  return subprocess.run(
    [str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, env={**ENV, **env}
  )


def gen(*args, cwd=REPO, **env):
  return run([sys.executable, cwd / "scripts" / "gen_patches.py", *args], cwd=cwd, **env)


def file_diffs(patch):
  """path -> the lines of that file's diff in the patch."""
  parts = re.split(r"^diff --git a/(\S+) b/\S+\n", patch.read_text(), flags=re.M)
  return {parts[i]: parts[i + 1].split("\n") for i in range(1, len(parts), 2)}


def added(patch, path):
  return [
    l[1:] for l in file_diffs(patch).get(path, []) if l.startswith("+") and not l.startswith("+++")
  ]


def series_targets():
  """name -> {rule, srcs, hdrs, deps} of the targets the BUILD hunks add."""
  out = {}
  for patch in ALL:
    for path in file_diffs(patch):
      if path.endswith("BUILD"):
        out.update(parse_targets("\n".join(added(patch, path)), path))
  return out


def parse_targets(text, path):
  targets = {}
  try:
    tree = ast.parse(text)
  except SyntaxError:
    return targets  # a hunk of deps inside an upstream rule, not whole rules
  for call in ast.walk(tree):
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
      kw = {
        k.arg: ast.literal_eval(k.value)
        for k in call.keywords
        if isinstance(k.value, (ast.Constant, ast.List))
      }
      if "name" in kw:
        targets[kw["name"]] = {
          "rule": call.func.id,
          "package": path[: -len("/BUILD")],
          **{k: kw.get(k, []) for k in ("srcs", "hdrs", "deps")},
        }
  return targets


def includes(path):
  return re.findall(r'^#include "([^"]+)"', path.read_text(), re.M)


def repo_copy(tmp_path):
  """The generator, the series' sources and the series in a fresh git repository."""
  dst = tmp_path / "repo"
  (dst / "scripts").mkdir(parents=True)
  shutil.copy(SCRIPT, dst / "scripts")
  shutil.copytree(SOURCES, dst / SOURCES.relative_to(REPO))
  (dst / SERIES.relative_to(REPO)).mkdir(parents=True, exist_ok=True)
  for p in ALL:
    shutil.copy(p, dst / SERIES.relative_to(REPO))
  assert run(["git", "init", "-q"], cwd=dst).returncode == 0
  assert run(["git", "add", "-A"], cwd=dst).returncode == 0
  return dst


# --- offline -----------------------------------------------------------------


def test_check_without_the_pin_finds_the_added_files_current():
  r = gen("--check")
  assert r.returncode == 0, r.stdout + r.stderr
  assert "ok" in r.stdout


def test_check_without_the_pin_names_a_changed_source(tmp_path):
  repo = repo_copy(tmp_path)
  header = repo / SRC.relative_to(REPO) / "nvshmem_permute_decision.h"
  header.write_text(header.read_text() + "// changed\n")
  r = gen("--check", cwd=repo)
  assert r.returncode == 1
  assert "nvshmem_permute_decision.h" in r.stdout and "stale" in r.stdout


def test_writing_without_the_pin_is_refused_in_one_line(tmp_path):
  repo = repo_copy(tmp_path)
  r = gen(cwd=repo)
  assert r.returncode == 2
  assert r.stderr.count("\n") == 1 and "XLA_PIN" in r.stderr
  # The series' files are left as they were (its sources' folder, src/, beside them).
  assert sorted(p.name for p in (repo / SERIES.relative_to(REPO)).iterdir() if p.name != "src") == [
    p.name for p in ALL
  ]


def test_generator_is_short():
  assert len(SCRIPT.read_text().splitlines()) <= 165


def test_patches_are_an_upstream_change():
  assert [p.name[:5] for p in ALL] == [f"{i:04d}-" for i in range(1, len(ALL) + 1)]
  for i, patch in enumerate(PATCHES, 2):
    text = patch.read_text()
    msg = email.message_from_string(text)
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert " ".join(msg["From"].split()) == AUTHOR
    subject = " ".join(msg["Subject"].split())
    assert subject.startswith(f"[PATCH {i}/{len(ALL)}] [XLA:GPU] ")
    assert len(subject) - len(f"[PATCH {i}/{len(ALL)}] ") <= 80
    body = msg.get_payload().split("\n---\n")[0].strip()
    assert len(body.splitlines()) >= 3, f"{patch.name}: the body must say why"
    assert "Generated by" not in text and "nvshmem-pass@invalid" not in text


def test_each_patch_touches_one_area():
  touched = {p.name[:4]: set(file_diffs(p)) for p in PATCHES}
  collectives = "xla/backends/gpu/collectives"
  assert (
    touched["0002"]
    == {
      f"{collectives}/gpu_collectives.h",
      f"{collectives}/nvshmem_collectives.h",
      f"{collectives}/nvshmem_collectives.cc",
      f"{collectives}/nvshmem_communicator.h",
      f"{collectives}/nvshmem_communicator.cc",
      "xla/core/collectives/communicator.h",
      f"{RUNTIME}/BUILD",
      f"{RUNTIME}/nvshmem_collective_permute_thunk.h",
      f"{RUNTIME}/nvshmem_collective_permute_thunk.cc",
      f"{RUNTIME}/nvshmem_collective_thunk.cc",
    }
    | RUN_CHECKS
  )
  assert touched["0003"] == {
    "xla/service/gpu/gpu_executable.cc",
    "xla/service/gpu/gpu_executable.h",
    "xla/service/gpu/BUILD",
  }
  assert touched["0004"] == {
    "xla/service/gpu/gpu_memory_space_assignment.cc",
    "xla/service/gpu/gpu_memory_space_assignment_test.cc",
    "xla/service/gpu/BUILD",
  }
  # The decision, then the pass, each with its BUILD targets.
  assert touched["0005"] == {f"{PKG}/BUILD"} | {
    f"{PKG}/nvshmem_permute_decision{s}" for s in (".h", ".cc", "_test.cc")
  }
  assert touched["0006"] == {f"{PKG}/BUILD"} | {
    f"{PKG}/nvshmem_collective_permute_rewriter{s}" for s in (".h", ".cc", "_test.cc")
  }
  assert touched["0007"] == {"xla/xla.proto", "xla/debug_options_flags.cc"}
  assert touched["0008"] == {"xla/service/gpu/gpu_compiler.cc", "xla/service/gpu/BUILD"}


def test_each_source_file_is_changed_by_one_patch():
  """Every prefix builds where the whole series does: a C++ file is changed by one
  patch only, which calls only what it or earlier patches add."""
  owners = {}
  for p in ALL:
    for path in file_diffs(p):
      if not path.endswith("BUILD"):
        assert path not in owners, (path, owners.get(path), p.name)
        owners[path] = p.name


def non_test_lines(patch):
  """Lines added and removed outside *_test.cc, as `git apply --numstat` counts them."""
  rows = run(["git", "apply", "--numstat", patch]).stdout.splitlines()
  return sum(
    int(a) + int(d)
    for a, d, path in (r.split("\t") for r in rows if r)
    if not path.endswith("_test.cc")
  )


def test_series_stays_within_1200_non_test_lines_and_400_a_patch():
  counts = [non_test_lines(p) for p in ALL]
  assert sum(counts) <= NON_TEST_LIMIT, counts
  assert max(counts) <= PATCH_LIMIT, counts


def test_readmes_give_the_line_counts():
  """Each patch's row in the series' README, the series' total, and the docs' row."""
  readme = (SERIES / "README.md").read_text()
  counts = [non_test_lines(p) for p in ALL]
  for p, n in zip(ALL, counts):
    assert re.search(rf"^\| `{re.escape(p.name)}` \|.*\| {n} \|$", readme, re.M), (p.name, n)
  assert f"{sum(counts):,} non-test lines in all" in readme
  row = next(
    l
    for l in (REPO / "docs" / "patch_series.md").read_text().splitlines()
    if l.startswith(f"| `{SERIES.name}/` |")
  )
  assert row.endswith(f"| {' + '.join(map(str, counts))} |"), row


def test_no_added_non_test_file_is_over_300_lines():
  for p in ALL:
    for path, diff in file_diffs(p).items():
      if "new file mode" in "\n".join(diff[:2]) and not path.endswith("_test.cc"):
        assert len(added(p, path)) <= 300, path


def test_no_patch_is_over_1500_lines():
  for p in PATCHES:
    assert len(p.read_text().splitlines()) <= 1500, p.name


def test_added_cpp_carries_the_openxla_licence():
  for path in list(SOURCES.rglob("*.cc")) + list(SOURCES.rglob("*.h")):
    first = path.read_text().split("\n", 1)[0]
    assert first == "/* Copyright 2026 The OpenXLA Authors.", path.name


def test_build_hunk_declares_every_source_once():
  declared = [
    f for t in series_targets().values() if t["package"] == PKG for f in t["srcs"] + t["hdrs"]
  ]
  assert sorted(declared) == sorted(p.name for p in SRC.iterdir())


def test_build_deps_name_the_package_headers_included():
  targets = {n: t for n, t in series_targets().items() if t["package"] == PKG}
  owner = {h: n for n, t in targets.items() for h in t["hdrs"]}
  for name, t in targets.items():
    for src in t["srcs"] + t["hdrs"]:
      for inc in includes(SRC / src):
        head = inc.rsplit("/", 1)[-1]
        if inc.startswith(PKG + "/") and owner.get(head, name) != name:
          assert f":{owner[head]}" in t["deps"], f"{name}: {inc} needs :{owner[head]}"


def test_decision_builds_without_hlo():
  """DecideNvshmemPermute takes plain facts in XLA's types: its files include
  absl, the protos and primitive_util only, so that a test calls it without HLO."""
  for name in ("nvshmem_permute_decision.h", "nvshmem_permute_decision.cc"):
    for inc in includes(SRC / name):
      assert inc.startswith("absl/") or inc in {
        "xla/xla_data.pb.h",
        "xla/service/gpu/backend_configs.pb.h",
        "xla/primitive_util.h",
        f"{PKG}/nvshmem_permute_decision.h",
      }, f"{name}: {inc}"
  header = (SRC / "nvshmem_permute_decision.h").read_text()
  assert "NvshmemPermuteDecision DecideNvshmemPermute(const NvshmemPermuteFacts& facts);" in header


def test_registration_reads_the_flags_that_the_flags_patch_adds():
  regs = "\n".join(added(REGISTRATION, "xla/service/gpu/gpu_compiler.cc"))
  proto = "\n".join(added(FLAGS, "xla/xla.proto"))
  flags = "\n".join(added(FLAGS, "xla/debug_options_flags.cc"))
  read = set(
    re.findall(
      r"debug_options\.(xla_gpu_experimental_nvshmem\w*|"
      r"xla_gpu_experimental_enable_nvshmem_\w+)\(\)",
      regs,
    )
  )
  assert read
  for field in read:
    assert re.search(rf"optional \w+ {field} = \d+;", proto), field
    assert f'"{field}"' in flags and f"set_{field}(" in flags, field


def test_registration_sets_members_the_pass_options_have():
  regs = "\n".join(added(REGISTRATION, "xla/service/gpu/gpu_compiler.cc"))
  header = (SRC / "nvshmem_collective_permute_rewriter.h").read_text()
  members = set(re.findall(r"rewriter_options\.(\w+) =", regs))
  assert members
  for m in members:
    assert re.search(rf"\b{m}\b[^;]*;", header), m


def test_sources_are_clang_format_17_clean():
  assert CLANG_FORMAT.exists(), "clang-format 17.0.6 missing: scripts/setup.sh --tests installs it"
  assert " 17.0.6 " in run([CLANG_FORMAT, "--version"]).stdout
  files = sorted(p for p in SOURCES.rglob("*") if p.suffix in (".cc", ".h"))
  r = run([CLANG_FORMAT, f"--style=file:{STYLE}", "--dry-run", *files])
  assert r.returncode == 0 and "warning" not in r.stderr, r.stderr[:2000]


def test_bazel_files_pass_buildifier(tmp_path):
  assert shutil.which("buildifier"), "buildifier missing: scripts/setup.sh --tests installs it"
  hunk = tmp_path / "BUILD"
  lines = added(DECISION, f"{PKG}/BUILD") + added(PASS, f"{PKG}/BUILD")
  # The loads a patch adds go to the top of the file, the targets further down.
  loads = [l for l in lines if l.startswith("load(")]
  rest = [l for l in lines if not l.startswith("load(")]
  hunk.write_text("\n".join(loads + [""] + rest).strip() + "\n")
  files = [REPO / "WORKSPACE", REPO / "BUILD", SERIES / "BUILD.bazel", hunk]
  r = run(["buildifier", "--mode=check", *files])
  assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("args", [["--check", "--edit", "x"], ["--bogus"]])
def test_generator_rejects_bad_arguments(args):
  assert gen(*args).returncode == 2


@pytest.mark.parametrize("args", [[], ["/nonexistent"], ["a", "b"]])
def test_upstream_check_rejects_bad_arguments(args, tmp_path):
  r = run([REPO / "scripts" / "check_patches_upstream.sh", *args])
  assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr


def test_upstream_check_rejects_a_directory_without_the_pin(tmp_path):
  run(["git", "init", "-q", tmp_path])
  r = run([REPO / "scripts" / "check_patches_upstream.sh", tmp_path])
  assert r.returncode == 2 and "not a git directory holding" in r.stderr


# --- 0001: the runtime's own rules, a patch that stands alone -----------------

STANDALONE = ALL[:1]
RUNTIME_SRC = SOURCES / RUNTIME
RUNTIME_FILES = {f"{RUNTIME}/nvshmem_permute_support{s}" for s in (".h", ".cc", "_test.cc")}
RUN_CHECKS = {f"{RUNTIME}/nvshmem_run_checks{s}" for s in (".h", ".cc", "_test.cc")}


def test_standalone_patch_is_an_upstream_change():
  assert len(STANDALONE) == 1
  text = STANDALONE[0].read_text()
  msg = email.message_from_string(text)
  assert " ".join(msg["From"].split()) == AUTHOR
  subject = " ".join(msg["Subject"].split())
  assert subject.startswith("[PATCH 1/") and "] [XLA:GPU] " in subject
  assert len(subject.split("] ", 1)[1]) <= 80
  body = msg.get_payload().split("\n---\n")[0]
  assert "NVSHMEM_TEAM_SHARED" in body and "xla_gpu_use_memcpy_local_p2p" in body


def test_every_patch_says_what_changes_without_its_flags():
  for p in ALL:
    body = email.message_from_string(p.read_text()).get_payload().split("\n---\n")[0]
    assert re.search(r"[Nn]othing\s+changes", body), p.name


def test_standalone_patch_touches_the_runtime_and_the_emitter_only():
  assert set(file_diffs(STANDALONE[0])) == RUNTIME_FILES | {
    f"{RUNTIME}/BUILD",
    "xla/service/gpu/thunk_emitter.cc",
    "xla/service/gpu/BUILD",
  }
  added = RUNTIME_FILES | RUN_CHECKS  # 0002 adds the run-time checks beside them.
  assert {p.name for p in RUNTIME_SRC.iterdir()} == {f.rsplit("/", 1)[1] for f in added}
  # No other patch touches what 0001 adds: it applies alone, first.
  assert not any(RUNTIME_FILES & set(file_diffs(p)) for p in PATCHES)


def test_emitter_decides_start_and_done_alike():
  lines = added(STANDALONE[0], "xla/service/gpu/thunk_emitter.cc")
  uses = [l for l in lines if "UseNvshmemCollectivePermute(" in l]
  # The definition, the start (EmitCollectivePermute) and the done dispatch.
  assert len(uses) == 3, uses
  # The runtime's rule (its test runs start and done), with the buffer
  # assignment at both call sites.
  assert any("NvshmemRunsPermute(" in l for l in lines)
  assert any("assignment.GetUniqueSlice(permute, index)" in l for l in lines)
  assert sum("buffer_assignment()" in l for l in lines) == 2


def test_thunk_waits_for_every_pe_before_its_puts():
  diff = "\n".join(file_diffs(PES)[f"{RUNTIME}/nvshmem_collective_permute_thunk.cc"])
  barrier = diff.index("+  TF_RETURN_IF_ERROR(nvshmem_comm->Barrier(GpuCollectives::On(stream)));")
  assert barrier < diff.index("for (uint64_t idx = 0; idx < buffers.size(); ++idx)")


def test_thunk_initialize_checks_ids_and_team_once_per_assignment():
  """0002: Initialize translates ids to PEs and refuses pairs that leave
  NVSHMEM_TEAM_SHARED, recorded per device assignment; each run puts to the
  recorded PE of its target."""
  body = "\n".join(added(PES, f"{RUNTIME}/nvshmem_collective_permute_thunk.cc"))
  init = body.index("return CheckPes(*params.collective_params->device_assn);")
  for name in (
    "collectives->topology()",
    "CheckAndRecordNvshmemPes(",
    "job ? &job->device_to_process : nullptr, pairs_,",
    "comm->IsBarrierPeer(RankId(pe))",
  ):
    assert body.index(name) > init, name
  run = body.index("NvshmemTargetPe(pes_, *params.collective_params->device_assn,")
  assert body.index("source_target.target));", run) > run
  diff = "\n".join(file_diffs(PES)[f"{RUNTIME}/nvshmem_collective_permute_thunk.cc"])
  assert diff.index("NvshmemTargetPe(") < diff.index("RunCollectivePermute(source_target,")
  communicator = "\n".join(added(PES, "xla/backends/gpu/collectives/nvshmem_communicator.cc"))
  assert "nvshmem_team_translate_pe(NVSHMEM_TEAM_WORLD" in communicator
  kept = "\n".join(added(PES, "xla/backends/gpu/collectives/nvshmem_collectives.cc"))
  assert "kept->kv_store = nullptr;" in kept and "std::atomic_store(&topology_" in kept


def test_sync_nvshmem_collectives_run_on_the_collective_stream():
  """0002: a sync NVSHMEM collective runs on the async stream between waits, as
  an async one does, so every NVSHMEM team operation is issued on one stream."""
  diff = file_diffs(PES)[f"{RUNTIME}/nvshmem_collective_thunk.cc"]
  assert "-    TF_RETURN_IF_ERROR(RunNvshmemCollective(params, *params.stream));" in diff
  lines = [l[1:].strip() for l in diff if l.startswith("+") and not l.startswith("+++")]
  steps = [
    "params.collective_params->async_streams.at(async_stream_idx);",
    'TF_RET_CHECK(async_stream != nullptr) << "no stream for NVSHMEM";',
    "TF_RETURN_IF_ERROR(async_stream->WaitFor(params.stream));",
    "TF_RETURN_IF_ERROR(RunNvshmemCollective(params, *async_stream));",
    "TF_RETURN_IF_ERROR(params.stream->WaitFor(async_stream));",
  ]
  assert [l for l in lines if l in steps] == steps


def test_guard_runs_before_the_heap_allocations_without_a_per_run_flag_read():
  """0003: an executable with collective memory checks the NVSHMEM job before
  GenerateBufferAllocations, whose first heap allocation would hang; the job is
  read once, and no run reads the process's flags."""
  diff = "\n".join(file_diffs(GUARD)["xla/service/gpu/gpu_executable.cc"])
  call = diff.index("+  if (allocates_collective_memory_) {")
  assert call < diff.index("GenerateBufferAllocations(run_options, arguments, globals,", call)
  body = "\n".join(added(GUARD, "xla/service/gpu/gpu_executable.cc"))
  for name in (
    "CheckNvshmemJob(job->num_processes, job->device_count_per_process,",
    "absl::call_once(nvshmem_job_once_",
    "(*nvshmem)->topology()",
    "RunAllocatesHeap(allocation_ptrs_, /*collective memory*/ 1);",
  ):
    assert name in body, name
  assert "GetDebugOptionsFromFlags" not in body and "kv_store" not in body


def test_colorer_keeps_only_permutes_live_out_buffers_off_the_heap():
  lines = "\n".join(added(COLORS, "xla/service/gpu/gpu_memory_space_assignment.cc"))
  assert "alias_analysis->BufferLivesOut(buffer)" in lines
  assert "NvshmemHeapMayHold(buffer.values()," in lines
  tests = file_diffs(COLORS)["xla/service/gpu/gpu_memory_space_assignment_test.cc"]
  assert "LiveOutNvshmemPermuteKeepsDefaultMemory" in "\n".join(tests)
  # Upstream's test, whose all-reduce result is returned, is not changed.
  assert not any(l.startswith("-") and not l.startswith("---") for l in tests)


def test_compile_time_rules_read_no_process_flags():
  for path in SOURCES.rglob("*.cc"):
    text = path.read_text()
    for name in ("GetDebugOptionsFromFlags", "setenv", "XLA_FLAGS", "getenv"):
      assert name not in text, (path.name, name)


def test_runtime_sources_carry_the_licence_and_are_clang_format_clean():
  files = sorted(RUNTIME_SRC.iterdir())
  for path in files:
    assert path.read_text().startswith("/* Copyright 2026 The OpenXLA Authors.\n"), path.name
  r = run([CLANG_FORMAT, f"--style=file:{STYLE}", "--dry-run", *files])
  assert r.returncode == 0 and "warning" not in r.stderr, r.stderr[:2000]


@needs_pin
def test_standalone_patch_applies_alone_to_the_pin(tmp_path):
  changed = [f for f in file_diffs(STANDALONE[0]) if f not in RUNTIME_FILES]
  for f in changed:
    (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / f).write_bytes(
      subprocess.run(
        ["git", "--git-dir", PIN_DIR, "show", f"3cc8846c10052cc1c32c4db87866eac4e4cdbccd:{f}"],
        capture_output=True,
        check=True,
      ).stdout
    )
  r = run(["git", "apply", "--check", "--whitespace=error-all", STANDALONE[0]], cwd=tmp_path)
  assert r.returncode == 0, r.stderr


# --- with openxla/xla at the pin --------------------------------------------


@needs_pin
def test_check_against_the_pin():
  r = gen("--check", "--xla", PIN_DIR)
  assert r.returncode == 0, r.stdout + r.stderr


@needs_pin
def test_check_against_the_pin_names_a_stale_patch(tmp_path):
  repo = repo_copy(tmp_path)
  cc = repo / SRC.relative_to(REPO) / "nvshmem_collective_permute_rewriter.cc"
  cc.write_text(cc.read_text() + "// changed\n")
  r = gen("--check", "--xla", PIN_DIR, cwd=repo)
  assert r.returncode == 1 and "0006-" in r.stdout


@needs_pin
def test_edit_and_from_carry_a_change_made_with_git(tmp_path):
  repo = repo_copy(tmp_path)
  edit = tmp_path / "edit"
  assert gen("--edit", edit, "--xla", PIN_DIR, cwd=repo).returncode == 0
  assert run(["git", "rev-list", "--count", "pin..HEAD"], cwd=edit).stdout.strip() == str(len(ALL))
  msg = run(["git", "log", "-1", "--format=%B"], cwd=edit).stdout
  amended = msg.replace("\n\n", "\n\nOne more sentence of why.\n\n", 1)
  assert run(["git", "commit", "-q", "--amend", "-m", amended], cwd=edit).returncode == 0
  r = gen("--from", edit, "--xla", PIN_DIR, cwd=repo)
  assert r.returncode == 0, r.stderr
  new = sorted((repo / SERIES.relative_to(REPO)).glob("*.patch"))
  assert [p.name for p in new] == [p.name for p in ALL]
  assert "One more sentence of why." in new[-1].read_text()
  assert all(a.read_text() == b.read_text() for a, b in zip(new[:-1], ALL[:-1]))


@needs_pin
def test_changed_lines_are_clang_format_and_buildifier_clean(tmp_path):
  edit = tmp_path / "edit"
  assert gen("--edit", edit, "--xla", PIN_DIR).returncode == 0
  r = run(
    ["git", "clang-format", f"--binary={CLANG_FORMAT}", "--diff", "pin", "--", "*.cc", "*.h"],
    cwd=edit,
  )
  assert "did not modify" in r.stdout or "no modified files" in r.stdout, r.stdout[:3000]
  builds = run(["git", "diff", "--name-only", "pin", "--", "*BUILD"], cwd=edit).stdout.split()
  r = run(["buildifier", "--mode=check", *builds], cwd=edit)
  assert r.returncode == 0, r.stdout + r.stderr


@needs_pin
def test_style_file_is_the_pins(tmp_path):
  pins = tmp_path / "pin.clang-format"
  pins.write_bytes(
    subprocess.run(
      [
        "git",
        "--git-dir",
        PIN_DIR,
        "show",
        "3cc8846c10052cc1c32c4db87866eac4e4cdbccd:.clang-format",
      ],
      capture_output=True,
      check=True,
    ).stdout
  )
  dump = lambda f: run([CLANG_FORMAT, f"--style=file:{f}", "--dump-config"]).stdout
  assert dump(STYLE) == dump(pins)


# Each call site of a run-time rule, in the upstream files that need the pin's
# LLVM or MLIR to compile (scripts/check_patches_upstream.sh compiles some of
# them alone): the lines that call the rule, with its arguments, in order.
WIRING = {
  (0, "xla/service/gpu/thunk_emitter.cc"): [
    "return NvshmemRunsPermute(",
    "*instr, config,",
    "[&](const HloInstruction* permute, const ShapeIndex& index) {",
    "return assignment.GetUniqueSlice(permute, index);",
    "},",
    "static_cast<int64_t>(MemorySpaceColor::kCollective));",
  ],
  # The barrier's team, which no test here can run: NVSHMEM's own call.
  (1, "xla/backends/gpu/collectives/nvshmem_communicator.cc"): [
    "return nvshmem_team_translate_pe(NVSHMEM_TEAM_WORLD, rank.value(),",
    "NVSHMEM_TEAM_SHARED) >= 0;",
  ],
  (1, f"{RUNTIME}/nvshmem_collective_permute_thunk.cc"): [
    "std::shared_ptr<const GpuCollectives::Topology> job = collectives->topology();",
    "TF_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,",
    "collectives->CreateCommunicator());",
    "absl::MutexLock lock(&mu_);",
    "return CheckAndRecordNvshmemPes(",
    "devices, job ? &job->device_to_process : nullptr, pairs_,",
    "[&](int64_t pe) { return comm->IsBarrierPeer(RankId(pe)); }, pes_);",
  ],
  (1, f"{RUNTIME}/nvshmem_collective_permute_thunk.cc "): [
    "TF_ASSIGN_OR_RETURN(",
    "source_target.target,",
    "NvshmemTargetPe(pes_, *params.collective_params->device_assn,",
    "source_target.target));",
  ],
  (2, "xla/service/gpu/gpu_executable.cc"): [
    "allocates_collective_memory_ =",
    "RunAllocatesHeap(allocation_ptrs_, /*collective memory*/ 1);",
  ],
  (2, "xla/service/gpu/gpu_executable.cc "): [
    "if (job == nullptr) return absl::OkStatus();  // NVSHMEM is not set up.",
    "return CheckNvshmemJob(job->num_processes, job->device_count_per_process,",
    "devices);",
  ],
  (2, "xla/service/gpu/gpu_executable.cc  "): [
    "if (allocates_collective_memory_) {",
    "// Null unless xla_gpu_experimental_enable_nvshmem set NVSHMEM up.",
    "absl::call_once(nvshmem_job_once_, [this] {",
    "absl::StatusOr<GpuCollectives*> nvshmem =",
    "GetNvshmemCollectivesFromRegistry();",
    "if (nvshmem.ok()) nvshmem_job_ = (*nvshmem)->topology();",
    "});",
    "RETURN_IF_ERROR(CheckNvshmemJobOf(",
    "nvshmem_job_.get(), run_options->run_options().device_assignment()));",
  ],
  (3, "xla/service/gpu/gpu_memory_space_assignment.cc"): [
    "const bool nvshmem_heap =",
    "use_nvshmem &&",
    "NvshmemHeapMayHold(buffer.values(),",
    "alias_analysis->BufferLivesOut(buffer),",
    "[](const HloInstruction* instr) {",
    "return IsNvshmemInstruction(instr) &&",
    "IsCollectiveMemoryInstruction(instr);",
  ],
  (7, "xla/service/gpu/gpu_compiler.cc"): [
    "rewriter_options.slice_size = options.slice_size;",
    "if (options.gpu_topology.has_value() &&",
    "options.gpu_topology->number_of_devices() > 0) {",
    "rewriter_options.slice_size = options.gpu_topology->slice_size();",
    "rewriter_options.job_devices = options.gpu_topology->number_of_devices();",
    "rewriter_options.num_visible_devices_per_process =",
    "options.gpu_topology->num_devices_per_host();",
    "} else if (absl::StatusOr<Collectives*> nvshmem =",
    'CollectivesRegistry::Get("gpu", "nvshmem");',
    "nvshmem.ok()) {",
    "if (auto job = tsl::down_cast<GpuCollectives*>(*nvshmem)->topology()) {",
    "rewriter_options.job_devices =",
    "job->num_processes * job->device_count_per_process;",
    "rewriter_options.num_visible_devices_per_process =",
    "job->device_count_per_process;",
  ],
}


@pytest.mark.parametrize("where", sorted(WIRING), ids=lambda w: f"{w[0] + 1:04d}:{w[1].strip()}")
def test_each_rule_is_called_with_its_arguments(where):
  """The lines that call each run-time rule, consecutive among the lines the
  patch adds to the file: a changed argument, a dropped or moved call fails."""
  lines = [l.strip() for l in added(ALL[where[0]], where[1].strip())]
  want = WIRING[where]
  assert any(lines[i : i + len(want)] == want for i in range(len(lines))), where
