"""The patch series for jax v0.11.0's XLA (xla_patches/xla-131bf41a_jax-0.11.0/).

Offline: each patch is a commit of the project's author with an [XLA:GPU] summary
and a body; patch 0001 stays small enough to send first (200 changed lines with
its tests); build_jaxlib.sh refuses an unknown jax version in one line. With
openxla/xla at 131bf41a ($XLA_NEXT, $XLA_PIN or a local mirror): the series is
what scripts/gen_patches_next.py makes, and build_jaxlib.sh --jax-version 0.11.0
applies it with git am. The reviewer's check (scripts/check_series_upstream.sh:
compiles against the commit, tests against tf-nightly's XLA) runs where
scripts/setup.sh installed tf-nightly into .venv-next (not with
NVSHMEM_TEST_SERIES_UPSTREAM=0).
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SERIES = REPO / "xla_patches" / "xla-131bf41a_jax-0.11.0"
PATCHES = sorted(SERIES.glob("[0-9][0-9][0-9][0-9]-*.patch"))
PIN = "131bf41acb4650e4391a640c3f1859c1c86ad74b"
GEN = REPO / "scripts" / "gen_patches_next.py"
BUILD = REPO / "scripts" / "build_jaxlib.sh"
CHECK = REPO / "scripts" / "check_series_upstream.sh"
LOCAL_MIRRORS = ["/work/.mirror/ROCm+xla/repo"]


def _has_pin(d):
  return d and subprocess.run(["git", "--git-dir", d, "cat-file", "-e", f"{PIN}^{{commit}}"],
                              capture_output=True).returncode == 0


XLA_DIR = next((d for d in [os.environ.get("XLA_NEXT"), os.environ.get("XLA_PIN"),
                            *LOCAL_MIRRORS] if _has_pin(d)), None)
needs_pin = pytest.mark.skipif(XLA_DIR is None, reason="needs openxla/xla at 131bf41a")
ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
       "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@invalid",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@invalid"}


def run(cmd, **kw):
  return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=ENV,
                        timeout=kw.pop("timeout", 600), **kw)


def test_patches_are_commits_of_the_project_with_a_reason():
  assert PATCHES
  for p in PATCHES:
    text = p.read_text()
    assert "From: NVSHMEM ring-attention pass developers" in text, p.name
    subject = re.search(r"^Subject: \[PATCH[^\]]*\] (.*(?:\n .*)*)", text, re.M).group(1)
    assert subject.startswith("[XLA:GPU] "), p.name
    body = text.split("\n\n", 1)[1].split("\n---\n", 1)[0]
    assert len(body.split()) > 50, p.name


def test_first_patch_is_small_enough_to_send_first():
  numstat = run(["git", "apply", "--numstat", PATCHES[0]], cwd=REPO).stdout.split("\n")
  changed = sum(int(a) + int(d) for a, d, _ in (l.split("\t") for l in numstat if l))
  assert changed <= 205, changed
  tests = [l.split("\t")[2] for l in numstat if l.endswith("_test.cc")]
  assert "xla/backends/gpu/transforms/collectives/collective_backend_assigner_test.cc" in tests


@pytest.mark.parametrize("version", ["0.10.2", "0.11", ""])
def test_build_jaxlib_refuses_an_unknown_jax_version(version, tmp_path):
  r = run([BUILD, "--dry-run", "--jax-version", version, "--work", tmp_path])
  assert r.returncode == 2 and r.stderr.count("\n") == 1 and "0.11.0" in r.stderr


@needs_pin
def test_series_is_what_the_generator_makes():
  r = run(["python3", GEN, "--check", "--xla", XLA_DIR], cwd=REPO)
  assert r.returncode == 0, r.stdout + r.stderr


@needs_pin
def test_build_jaxlib_applies_the_series_at_jax_v0_11_0s_xla(tmp_path):
  """--jax-version 0.11.0: jax at jax-v0.11.0, XLA at 131bf41a (its files the series
  changes, in a small repository), git am of the series, the build command."""
  changed = {l.split("\t")[2] for p in PATCHES
             for l in run(["git", "apply", "--numstat", p]).stdout.splitlines()}
  xla, jax = tmp_path / "xla", tmp_path / "jax"
  for d in (xla, jax):
    assert run(["git", "init", "-q", d]).returncode == 0
  for path in changed:
    shown = subprocess.run(["git", "--git-dir", XLA_DIR, "show", f"{PIN}:{path}"],
                           capture_output=True)
    if shown.returncode:  # a file the series adds
      continue
    (xla / path).parent.mkdir(parents=True, exist_ok=True)
    (xla / path).write_bytes(shown.stdout)
  (jax / "README.md").write_text("jax\n")
  for d in (xla, jax):
    assert run(["git", "add", "-A"], cwd=d).returncode == 0
    assert run(["git", "commit", "-qm", "tiny"], cwd=d).returncode == 0
  assert run(["git", "tag", "jax-v0.11.0"], cwd=jax).returncode == 0
  rev = run(["git", "rev-parse", "HEAD"], cwd=xla).stdout.strip()
  work = tmp_path / "work"
  r = run([BUILD, "--dry-run", "--jax-version", "0.11.0", "--work", work, "--jax", jax,
           "--xla", xla, "--xla-rev", rev])
  assert r.returncode == 0, r.stdout + r.stderr
  assert run(["git", "rev-list", "--count", f"{rev}..HEAD"], cwd=work / "xla").stdout.strip() \
      == str(len(PATCHES))
  assert f"--local_xla_path={work / 'xla'}" in r.stdout
  assert "set_xla_metadata(_xla_collectives_mode=" in r.stdout
  assert "kXlaCollectivesModeAttr" in (work / "xla" / "xla" / "side_effect_util.h").read_text()


@needs_pin
@pytest.mark.skipif(not list((REPO / ".venv-next").glob("lib/python*/site-packages/tensorflow"))
                    or os.environ.get("NVSHMEM_TEST_SERIES_UPSTREAM") == "0",
                    reason="needs tf-nightly in .venv-next (scripts/setup.sh)")
def test_reviewers_check_passes():
  """About 10 minutes on two cores: git am, clang-format, buildifier, the compiles
  against 131bf41a and the assigner's and combiner's tests against tf-nightly's XLA."""
  r = run(["bash", CHECK, XLA_DIR], cwd=REPO, timeout=3600)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  assert "check_series_upstream: OK" in r.stdout


CORE = ["nvshmem_topology.h", "nvshmem_topology.cc", "nvshmem_cost_table.proto",
        "nvshmem_cost_table.h", "nvshmem_cost_table.cc", "nvshmem_backend_selection.h",
        "nvshmem_backend_selection.cc"]
PKG = "xla/backends/gpu/transforms/collectives"


def added_file(patch_text, path):
  """The text a patch gives a file it creates."""
  diff = patch_text.split(f"diff --git a/{path} b/{path}\n", 1)[1].split("\ndiff --git ", 1)[0]
  body = diff.split("\n@@ ", 1)[1].split("\n", 1)[1]
  return "".join(l[1:] + "\n" for l in body.split("\n") if l.startswith("+"))


def test_second_patch_chooses_the_mode_by_cost_with_the_shared_core():
  """0002: the selection core as xla_src/ holds it (the pinned series' files), the
  flag (field 515, off by default) and the assigner's test of the choice."""
  text = PATCHES[1].read_text()
  assert "Subject: [PATCH 2/3] [XLA:GPU] Choose a collective-permute's collectives mode" in text
  for name in CORE:
    assert added_file(text, f"{PKG}/{name}") == (REPO / "xla_src" / PKG / name).read_text(), name
  assert "+  optional bool xla_gpu_experimental_collective_permute_mode_by_cost = 515;" in text
  assert "+  opts.set_xla_gpu_experimental_collective_permute_mode_by_cost(false);" in text
  assert "TEST_F(CollectiveBackendAssignerTest, CollectivesModeByCost)" in text
  assert "+      CollectivesCluster{gpu_topology.num_devices_per_host()," in text


def test_third_patch_keeps_permutes_under_a_branch_private():
  """0003: devices may take different branches, and a peer or symmetric put lands
  in the peer's copy of the sender's own destination; the assigner gives PRIVATE."""
  text = PATCHES[2].read_text()
  assert "Subject: [PATCH 3/3] [XLA:GPU] Keep collective-permutes under a" in text
  assert "+absl::flat_hash_set<const HloComputation*> ConditionalBranches(" in text
  assert "+        requested = mode = DebugOptions::COLLECTIVES_PRIVATE_MEMORY;" in text
  assert "TEST_F(CollectiveBackendAssignerTest, PermuteUnderConditionalBranchIsPrivate)" in text
