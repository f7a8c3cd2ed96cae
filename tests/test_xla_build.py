"""Building XLA with the series: WORKSPACE (Bazel) and scripts/build_jaxlib.sh.

Offline, as in CI: WORKSPACE applies the series (SERIES) in order to jax v0.9.1's
XLA and completes XLA's set-up in jax's order; the docs name only @xla labels
the series declares (or whose sources it changes); build_jaxlib.sh checks out
jax from a local git repository, stops with one line when the series does not
apply, and calls build.py only with options jax v0.9.1's build.py has; the
XLA_FLAGS it prints are flags the series adds or the pin has. With local
mirrors of openxla/xla and jax (as test_patches finds them): the series
applies in the script's checkout, the committed build.py options are those of
`build.py build --help` at jax-v0.9.1, WORKSPACE's calls follow jax's
WORKSPACE, .bazelversion is the pin's, and each xla/ header a new source
includes is declared by a dep of its target (Bazel's layering check).
"""

import ast
import os
import re
import subprocess
from pathlib import Path

import pytest

from test_patches import (
  ALL,
  FLAGS,
  PIN_DIR,
  PKG,
  REPO,
  RUNTIME,
  SERIES,
  SOURCES,
  added,
  file_diffs,
  includes,
  needs_pin,
  run,
  series_targets,
)

PIN = "3cc8846c10052cc1c32c4db87866eac4e4cdbccd"
SCRIPT = REPO / "scripts" / "build_jaxlib.sh"
OPTIONS = REPO / "scripts" / "upstream_checks" / "jax-v0.9.1_build_py_options.txt"
DOCS = [
  REPO / "README.md",
  REPO / "docs" / "patch_series.md",
  SERIES / "README.md",
  REPO / "WORKSPACE",
  REPO / "docs" / "xla_pin_research.md",
  SCRIPT,
]
# A git directory of jax holding the tag jax-v0.9.1, from the environment.
JAX_DIR = next(
  (p for p in [os.environ.get("JAX_GIT_DIR")] if p and Path(p, "HEAD").is_file()), None
)
needs_jax = pytest.mark.skipif(JAX_DIR is None, reason="needs a local jax repository")
# Upstream targets the series changes the sources of (checked at the pin below).
CHANGED_UPSTREAM = {
  "//xla/service/gpu:gpu_compiler": "xla/service/gpu/gpu_compiler.cc",
  "//xla/service/gpu:gpu_executable": "xla/service/gpu/gpu_executable.cc",
  "//xla/service/gpu:gpu_memory_space_assignment": "xla/service/gpu/gpu_memory_space_assignment.cc",
  "//xla/service/gpu:gpu_memory_space_assignment_test": "xla/service/gpu/gpu_memory_space_assignment_test.cc",
  "//xla/service/gpu:thunk_emitter": "xla/service/gpu/thunk_emitter.cc",
}
WORKSPACE_ORDER = [
  "xla_workspace4",
  "xla_workspace3",
  "cc_toolchain_deps",
  "python_init_rules",
  "python_init_repositories",
  "python_init_toolchains",
  "python_init_pip",
  "install_deps",
  "xla_workspace2",
  "xla_workspace1",
  "xla_workspace0",
  "cuda_json_init_repository",
  "cuda_redist_init_repositories",
  "cudnn_redist_init_repository",
  "cuda_configure",
  "nccl_redist_init_repository",
  "nccl_configure",
  "nvshmem_json_init_repository",
  "nvshmem_redist_init_repository",
]


def top_level_calls(text):
  """The names of the functions a WORKSPACE calls at top level, in order."""
  return [
    n.value.func.id
    for n in ast.parse(text).body
    if isinstance(n, ast.Expr)
    and isinstance(n.value, ast.Call)
    and isinstance(n.value.func, ast.Name)
  ]


def xla_archive():
  tree = ast.parse((REPO / "WORKSPACE").read_text())
  for call in ast.walk(tree):
    if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "http_archive":
      kw = {k.arg: k.value for k in call.keywords}
      if ast.literal_eval(kw["name"]) == "xla":
        return kw
  raise AssertionError("WORKSPACE has no http_archive of xla")


def git(*args, cwd):
  r = run(["git", *args], cwd=cwd)
  assert r.returncode == 0, r.stderr
  return r.stdout.strip()


def tiny_repo(path, files, tag=None):
  """A git repository with one commit of files (path -> bytes)."""
  git("init", "-q", path, cwd=REPO)
  for name, data in files.items():
    (path / name).parent.mkdir(parents=True, exist_ok=True)
    (path / name).write_bytes(data)
  git("add", "-A", cwd=path)
  git("commit", "-q", "-m", "tiny", cwd=path)
  if tag:
    git("tag", tag, cwd=path)
  return git("rev-parse", "HEAD", cwd=path)


def script_command():
  """The options of build.py's command as build_jaxlib.sh writes it."""
  block = re.search(r"^CMD=\((.*?)\)$", SCRIPT.read_text(), re.M | re.S).group(1)
  return re.findall(r"(--[a-z_]+)", block)


# --- offline -----------------------------------------------------------------


def test_workspace_applies_the_series_in_order():
  patches = ast.literal_eval(xla_archive()["patches"])
  assert patches == [f"//xla_patches/xla-3cc8846c_jax-0.9.1:{p.name}" for p in ALL]
  assert ast.literal_eval(xla_archive()["patch_args"]) == ["-p1"]


def test_workspace_fetches_jax_v0_9_1s_xla():
  text = (REPO / "WORKSPACE").read_text()
  assert f'XLA_COMMIT = "{PIN}"' in text
  assert 'XLA_SHA256 = "68759a08c3f0793dffd2ec917fb20a657bc85c2cbf7e69e0178c35535d1fd143"' in text


def test_workspace_completes_xla_setup_in_jax_order():
  calls = [c for c in top_level_calls((REPO / "WORKSPACE").read_text()) if c in WORKSPACE_ORDER]
  assert calls == WORKSPACE_ORDER


def test_bazelversion_is_the_pins():
  assert (REPO / ".bazelversion").read_text().strip() == "7.7.0"


def test_docs_name_only_labels_of_the_series():
  defined = {f"//{t['package']}:{n}" for n, t in series_targets().items()} | set(CHANGED_UPSTREAM)
  named = {
    m
    for doc in DOCS
    if doc.exists()
    for m in re.findall(r"@xla(//xla/[\w/]+:\w+)", doc.read_text())
  }
  assert named, "the docs name no @xla target"
  assert named <= defined, named - defined


def test_build_command_uses_jax_v0_9_1_build_py_options():
  known = {l for l in OPTIONS.read_text().splitlines() if l.startswith("--")}
  used = set(script_command())
  assert {"--wheels", "--local_xla_path", "--output_path"} <= used
  assert used <= known, used - known


# Flags of the newer XLA the series for it leave as they are
# (debug_options_flags.cc:2911 at 183fa00c, :2725 at 131bf41a).
NEWER_XLA_FLAGS = {"xla_gpu_collective_permute_mode"}
# The docs pages that give XLA_FLAGS recipes.
RECIPE_PAGES = ["patch_series.md", "jax_hook.md", "commands.md", "install.md", "overview.md"]


def test_recipe_flags_are_flags_of_the_series_or_the_pin():
  """Every --xla_gpu_ flag the docs name is one the pinned series registers, one
  of the pin's own (a context line), or one of the newer XLA's the series for it
  read."""
  flags_cc = file_diffs(FLAGS).get("xla/debug_options_flags.cc", [])
  added_flags = set(re.findall(r'^\+\s+"(xla_\w+)",', "\n".join(flags_cc), re.M))
  context = "\n".join(l for l in flags_cc if l.startswith(" "))
  for doc in (SCRIPT, REPO / "README.md", *(REPO / "docs" / p for p in RECIPE_PAGES)):
    for flag in set(re.findall(r"--(xla_gpu_\w+)", doc.read_text())):
      assert flag in added_flags | NEWER_XLA_FLAGS or flag in context, f"{doc.name}: {flag}"


@pytest.mark.parametrize("args", [["--bogus"], ["--work"], ["--jax"]])
def test_build_jaxlib_rejects_bad_arguments(args):
  r = run([SCRIPT, *args])
  assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr


def test_build_jaxlib_stops_in_one_line_when_the_series_does_not_apply(tmp_path):
  jax_rev = tiny_repo(tmp_path / "jax", {"README.md": b"jax\n"}, tag="jax-v0.9.1")
  xla_rev = tiny_repo(tmp_path / "xla", {"README.md": b"not xla\n"})
  work = tmp_path / "work"
  r = run(
    [
      SCRIPT,
      "--dry-run",
      "--work",
      work,
      "--jax",
      tmp_path / "jax",
      "--xla",
      tmp_path / "xla",
      "--xla-rev",
      xla_rev,
    ]
  )
  assert r.returncode == 1, r.stdout + r.stderr
  assert r.stderr.strip().splitlines()[-1].startswith("build_jaxlib: git am failed")
  assert git("rev-parse", "HEAD", cwd=work / "jax") == jax_rev
  assert "build command" not in r.stdout


def test_build_jaxlib_refuses_to_reuse_a_work_directory(tmp_path):
  (tmp_path / "jax").mkdir()
  r = run([SCRIPT, "--dry-run", "--work", tmp_path])
  assert r.returncode == 2 and "exists" in r.stderr


# --- with local mirrors ------------------------------------------------------


@needs_pin
def test_changed_upstream_targets_are_declared_at_the_pin():
  for label, src in CHANGED_UPSTREAM.items():
    package, name = label[2:].split(":")
    build = subprocess.run(
      ["git", "--git-dir", PIN_DIR, "show", f"{PIN}:{package}/BUILD"],
      capture_output=True,
      text=True,
      check=True,
    ).stdout
    rule = re.search(rf'\n\w+\(\n    name = "{name}",\n(.*?)\n\)', build, re.S)
    assert rule and f'"{src.rsplit("/", 1)[-1]}"' in rule.group(1), label


@needs_pin
def test_build_jaxlib_applies_the_series_on_the_pins_files(tmp_path):
  changed = {
    l.split("\t")[2] for p in ALL for l in run(["git", "apply", "--numstat", p]).stdout.splitlines()
  }
  files = {}
  for path in changed:
    r = subprocess.run(["git", "--git-dir", PIN_DIR, "show", f"{PIN}:{path}"], capture_output=True)
    if r.returncode == 0:
      files[path] = r.stdout
  tiny_repo(tmp_path / "jax", {"README.md": b"jax\n"}, tag="jax-v0.9.1")
  xla_rev = tiny_repo(tmp_path / "xla", files)
  work = tmp_path / "work"
  r = run(
    [
      SCRIPT,
      "--dry-run",
      "--work",
      work,
      "--jax",
      tmp_path / "jax",
      "--xla",
      tmp_path / "xla",
      "--xla-rev",
      xla_rev,
    ]
  )
  assert r.returncode == 0, r.stdout + r.stderr
  assert git("rev-list", "--count", f"{xla_rev}..HEAD", cwd=work / "xla") == str(len(ALL))
  assert f"--local_xla_path={work / 'xla'}" in r.stdout
  assert (work / "xla" / PKG / "nvshmem_collective_permute_rewriter.cc").exists()


@needs_jax
def test_committed_options_are_build_py_help_at_jax_v0_9_1(tmp_path):
  archive = subprocess.run(
    ["git", "--git-dir", JAX_DIR, "archive", "jax-v0.9.1", "build/build.py", "build/tools"],
    capture_output=True,
    check=True,
  ).stdout
  subprocess.run(["tar", "-x", "-C", tmp_path], input=archive, check=True)
  r = run(["python3", tmp_path / "build" / "build.py", "build", "--help"])
  assert r.returncode == 0, r.stderr
  helped = set(re.findall(r"^  (?:-h, )?(--[a-z_]+)", r.stdout, re.M))
  assert helped == {l for l in OPTIONS.read_text().splitlines() if l.startswith("--")}


@needs_jax
def test_workspace_calls_follow_jax_v0_9_1s_workspace():
  jax_ws = subprocess.run(
    ["git", "--git-dir", JAX_DIR, "show", "jax-v0.9.1:WORKSPACE"],
    capture_output=True,
    text=True,
    check=True,
  ).stdout
  jax_calls = [c for c in top_level_calls(jax_ws) if c in WORKSPACE_ORDER]
  assert jax_calls == WORKSPACE_ORDER
  version = subprocess.run(
    ["git", "--git-dir", JAX_DIR, "show", "jax-v0.9.1:.bazelversion"],
    capture_output=True,
    text=True,
    check=True,
  ).stdout
  assert (REPO / ".bazelversion").read_text() == version


@needs_pin
def test_build_deps_declare_every_xla_header_the_sources_include():
  """What Bazel's layering check would ask: each xla/ header a new source
  includes is declared by one of its target's deps (at the pin, or in the
  series for the package's own targets)."""
  targets = {n: t for n, t in series_targets().items() if t["package"] in (PKG, RUNTIME)}
  builds = {}

  def rule_text(label):
    package, name = (label[2:] if label.startswith("//") else PKG + label).split(":")
    if package not in builds:
      r = subprocess.run(
        ["git", "--git-dir", PIN_DIR, "show", f"{PIN}:{package}/BUILD"],
        capture_output=True,
        text=True,
      )
      # With the rules the series adds to that package (the runtime's support).
      builds[package] = (
        r.stdout
        + "\n"
        + "\n".join(line for patch in ALL for line in added(patch, f"{package}/BUILD"))
      )
    if name in targets and targets[name]["package"] == package:
      return " ".join(targets[name]["srcs"] + targets[name]["hdrs"])
    m = re.search(rf'\n\w+\(\n    name = "{name}",\n(.*?)\n\)', builds[package], re.S)
    return m.group(1) if m else ""

  for name, t in targets.items():
    labels = [
      d if not d.startswith(":") else f"//{t['package']}{d}"
      for d in t["deps"]
      if d.startswith(("//xla", ":"))
    ]
    for src in t["srcs"] + t["hdrs"]:
      if src.endswith(".inc"):
        continue
      for inc in includes(SOURCES / t["package"] / src):
        if not inc.startswith("xla/") or inc.rsplit("/", 1)[-1] in t["srcs"] + t["hdrs"]:
          continue
        base = inc.rsplit("/", 1)[-1]
        if base.endswith(".pb.h"):  # a proto's C++ target: <name>_cc or <name>_proto_cc
          stem = base[: -len(".pb.h")]
          ok = any(d.rsplit(":", 1)[-1] in (f"{stem}_cc", f"{stem}_proto_cc") for d in labels)
        else:
          ok = any(
            f'"{base}"' in rule_text(d) or base in rule_text(d).split()
            for d in labels
            if d.startswith(":") or d[2:].split(":")[0] in inc
          )
        assert ok, f"{name}: {src} includes {inc}; no dep declares it"
