"""The patch series for XLA newer than the pin: openxla/xla main at 183fa00c
(xla_patches/xla-183fa00c_openxla-main/) and its backport to jax v0.11.0's XLA
(xla_patches/xla-131bf41a_jax-0.11.0/).

Offline: each patch is a commit of the project's author with an [XLA:GPU] summary
and a body that says what changes for a user who sets no attribute; the
attribute patch (0001: lines added and removed outside *_test.cc, as `git apply
--numstat` counts them) stays within 250 non-test lines; both series make the
same changes and add the same tests; build_jaxlib.sh refuses an unknown
jax version in one line. With openxla/xla holding both commits ($XLA_NEXT,
$XLA_PIN or a local mirror): each series is what scripts/gen_patches_next.py
makes, and build_jaxlib.sh --jax-version 0.11.0 applies the backport with git am.
The reviewer's check (scripts/check_series_upstream.sh COMMIT: compiles against
the commit, tests against tf-nightly's XLA) runs where the wheel of that commit's
days is installed (.venv-main for 183fa00c, .venv-next for 131bf41a; not with
NVSHMEM_TEST_SERIES_UPSTREAM=0).
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COMMITS = {
  "183fa00c": "183fa00cb5d82384463a1a7aed1ab06bc9026974",
  "131bf41a": "131bf41acb4650e4391a640c3f1859c1c86ad74b",
}
SERIES = {
  "183fa00c": REPO / "xla_patches" / "xla-183fa00c_openxla-main",
  "131bf41a": REPO / "xla_patches" / "xla-131bf41a_jax-0.11.0",
}
VENVS = {"183fa00c": REPO / ".venv-main", "131bf41a": REPO / ".venv-next"}
NON_TEST_LIMIT = 250
GEN = REPO / "scripts" / "gen_patches_next.py"
BUILD = REPO / "scripts" / "build_jaxlib.sh"
CHECK = REPO / "scripts" / "check_series_upstream.sh"
PKG = "xla/backends/gpu/transforms/collectives"


def patches(key):
  return sorted(SERIES[key].glob("[0-9][0-9][0-9][0-9]-*.patch"))


def _has_commits(d):
  return d and all(
    subprocess.run(
      ["git", "--git-dir", d, "cat-file", "-e", f"{c}^{{commit}}"], capture_output=True
    ).returncode
    == 0
    for c in COMMITS.values()
  )


XLA_DIR = next(
  (d for d in [os.environ.get("XLA_NEXT"), os.environ.get("XLA_PIN")] if _has_commits(d)), None
)
needs_xla = pytest.mark.skipif(XLA_DIR is None, reason="needs openxla/xla at 183fa00c and 131bf41a")
ENV = {
  **os.environ,
  "GIT_CONFIG_NOSYSTEM": "1",
  "GIT_CONFIG_GLOBAL": os.devnull,
  "GIT_AUTHOR_NAME": "t",
  "GIT_AUTHOR_EMAIL": "t@invalid",
  "GIT_COMMITTER_NAME": "t",
  "GIT_COMMITTER_EMAIL": "t@invalid",
}


def run(cmd, **kw):
  return subprocess.run(
    [str(c) for c in cmd],
    capture_output=True,
    text=True,
    env=ENV,
    timeout=kw.pop("timeout", 600),
    **kw,
  )


def numstat(patch):
  """(added, removed, path) per file the patch changes."""
  rows = run(["git", "apply", "--numstat", patch], cwd=REPO).stdout.splitlines()
  return [(int(a), int(d), p) for a, d, p in (r.split("\t") for r in rows if r)]


def non_test_lines(key, only=None):
  """Lines added and removed outside tests, over the whole series or patch `only`."""
  return sum(
    a + d
    for p in patches(key)
    if only in (None, p)
    for a, d, path in numstat(p)
    if not path.endswith("_test.cc")
  )


def added_lines(key, path):
  """The lines the series adds to path, in order."""
  out = []
  for p in patches(key):
    diff = p.read_text().split(f"diff --git a/{path} b/{path}\n")
    if len(diff) > 1:
      body = diff[1].split("\ndiff --git ", 1)[0]
      out += [l[1:] for l in body.splitlines() if l.startswith("+") and not l.startswith("+++")]
  return out


@pytest.mark.parametrize("key", COMMITS)
def test_patches_are_commits_of_the_project_with_a_reason(key):
  assert len(patches(key)) == 4
  for p in patches(key):
    text = p.read_text()
    assert "From: NVSHMEM ring-attention pass developers" in text, p.name
    subject = re.search(r"^Subject: \[PATCH[^\]]*\] (.*(?:\n .*)*)", text, re.M).group(1)
    assert subject.startswith("[XLA:GPU] "), p.name
    body = text.split("\n\n", 1)[1].split("\n---\n", 1)[0]
    assert len(body.split()) > 100, p.name
    assert "For a user who sets no attribute" in body, p.name


@pytest.mark.parametrize("key", COMMITS)
def test_non_test_lines_stay_within_the_limit(key):
  """The attribute patch; the fallbacks, the branch rule and the runtime's
  rendezvous are patches of their own."""
  lines = non_test_lines(key, patches(key)[0])
  assert 150 < lines <= NON_TEST_LIMIT, lines
  tests = {path for p in patches(key) for _, _, path in numstat(p) if path.endswith("_test.cc")}
  assert tests == {
    f"{PKG}/collective_backend_assigner_test.cc",
    "xla/hlo/transforms/collectives/collective_permute_combiner_test.cc",
    "xla/backends/gpu/runtime/collective_permute_thunk_test.cc",
  }


@pytest.mark.parametrize("key", COMMITS)
def test_readmes_give_the_line_counts(key):
  """Each patch's row in its series' README, the series' total, and the docs' table."""
  readme = (SERIES[key] / "README.md").read_text()
  per_patch = [
    sum(a + d for a, d, path in numstat(p) if not path.endswith("_test.cc")) for p in patches(key)
  ]
  for p, n in zip(patches(key), per_patch):
    assert re.search(rf"^\| `{re.escape(p.name)}` \|.*\| {n} \|$", readme, re.M), (p.name, n)
  assert f"{non_test_lines(key)} non-test lines in all" in readme
  row = next(
    l
    for l in (REPO / "docs" / "patch_series.md").read_text().splitlines()
    if l.startswith(f"| `{SERIES[key].name}/` |")
  )
  assert row.endswith(f"| {' + '.join(map(str, per_patch))} |"), row


def test_backport_makes_the_same_change():
  """The new code differs only in the status macros' names (and so in how
  clang-format breaks their lines), the combiner key in the field openxla added
  after 131bf41a, and the tests not at all."""
  for path in [
    f"{PKG}/collective_backend_assigner_test.cc",
    "xla/hlo/transforms/collectives/collective_permute_combiner_test.cc",
    "xla/backends/gpu/runtime/collective_permute_thunk_test.cc",
    "xla/side_effect_util.h",
    "xla/side_effect_util.cc",
  ]:
    assert added_lines("183fa00c", path) == added_lines("131bf41a", path), path
  # The code, up to the macros' names and how clang-format breaks their lines.
  code = lambda lines: (
    re.sub(
      r"\s+",
      " ",
      " ".join(  # noqa: E731
        l.replace("ABSL_", "") for l in lines if not l.startswith("#include")
      ),
    )
    .replace("( ", "(")
    .replace("collective_group_key, ", "")
  )
  # The key's return statement, which names its fields, is left out.
  key = lambda s: re.sub(
    r"\*value; .*? std::optional<DebugOptions", "*value; std::optional<DebugOptions", s
  )  # noqa: E731
  for path in [
    f"{PKG}/collective_backend_assigner.cc",
    "xla/service/collective_permute_key.cc",
    "xla/backends/gpu/runtime/collective_thunk.cc",
    "xla/backends/gpu/runtime/collective_permute_thunk.cc",
  ]:
    main, back = (key(code(added_lines(k, path))) for k in ("183fa00c", "131bf41a"))
    assert main == back, path


@pytest.mark.parametrize("key", COMMITS)
def test_attribute_is_legalized_into_the_config_and_read_by_the_thunk_emitter(key):
  first, second, third, fourth = (p.read_text() for p in patches(key))
  assert '+const char kXlaCollectivesModeAttr[] = "_xla_collectives_mode";' in first
  assert "+      changed |= instr->erase_frontend_attribute(kXlaCollectivesModeAttr) != 0;" in first
  assert "+absl::StatusOr<CollectiveThunk::CollectivesMode> CollectivePermuteMode(" in first
  assert "-        ir_emitter_context_->debug_options().xla_gpu_collective_permute_mode()," in first
  assert "+    /*collectives_mode=*/std::string>;" in first
  assert "+std::optional<DebugOptions::CollectivesMode> ParseCollectivesMode(" in first
  assert "CollectivesMode_Parse(" in first and '"peer"      ?' not in first
  assert "TEST_F(CollectiveBackendAssignerTest, CollectivesModeAttributeOnOtherOps)" in first
  assert "+      gpu_topology.num_devices_per_process(), alias_info);" in second
  assert "+bool SharesBufferWithOtherMemorySpace(const HloInstruction& instr," in second
  assert "TEST_F(CollectiveBackendAssignerTest, CliqueLargerThanProcessIsPrivate)" in second
  assert "+absl::flat_hash_set<const HloComputation*> ConditionalBranches(" in third
  assert "TEST_F(CollectiveBackendAssignerTest, PermuteUnderConditionalBranchIsPrivate)" in third
  assert "+  static bool MayCopyToPeers(CollectivesMode mode," in fourth
  assert "+  if (MayCopyToPeers(collectives_mode(), clique_key)) {" in fourth
  assert "TEST(CollectivePermuteThunkTest, PeerCopiesOnlyOnLocalClique)" in fourth


@pytest.mark.parametrize("version", ["0.10.2", "0.11", ""])
def test_build_jaxlib_refuses_an_unknown_jax_version(version, tmp_path):
  r = run([BUILD, "--dry-run", "--jax-version", version, "--work", tmp_path])
  assert r.returncode == 2 and r.stderr.count("\n") == 1 and "0.11.0" in r.stderr


def test_gen_patches_next_refuses_an_unknown_series():
  r = run(["python3", GEN, "--check", "--series", "deadbeef", "--xla", REPO], cwd=REPO)
  assert r.returncode == 2 and r.stderr.count("\n") == 1 and "deadbeef" in r.stderr


@pytest.mark.parametrize("args", [["deadbeef", "/nonexistent"], ["--series"], ["--bogus"]])
def test_reviewers_check_refuses_bad_usage_in_one_line(args):
  r = run(["bash", CHECK, *args], cwd=REPO)
  assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
  assert r.stderr.startswith("check_series_upstream: ")


@needs_xla
@pytest.mark.parametrize("key", COMMITS)
def test_series_is_what_the_generator_makes(key):
  r = run(["python3", GEN, "--check", "--series", key, "--xla", XLA_DIR], cwd=REPO)
  assert r.returncode == 0, r.stdout + r.stderr


@needs_xla
def test_build_jaxlib_applies_the_series_at_jax_v0_11_0s_xla(tmp_path):
  """--jax-version 0.11.0: jax at jax-v0.11.0, XLA at 131bf41a (its files the series
  changes, in a small repository), git am of the series, the build command."""
  pin = COMMITS["131bf41a"]
  changed = {path for p in patches("131bf41a") for _, _, path in numstat(p)}
  xla, jax = tmp_path / "xla", tmp_path / "jax"
  for d in (xla, jax):
    assert run(["git", "init", "-q", d]).returncode == 0
  for path in changed:
    shown = subprocess.run(
      ["git", "--git-dir", XLA_DIR, "show", f"{pin}:{path}"], capture_output=True
    )
    assert shown.returncode == 0, path  # the series adds no file
    (xla / path).parent.mkdir(parents=True, exist_ok=True)
    (xla / path).write_bytes(shown.stdout)
  (jax / "README.md").write_text("jax\n")
  for d in (xla, jax):
    assert run(["git", "add", "-A"], cwd=d).returncode == 0
    assert run(["git", "commit", "-qm", "tiny"], cwd=d).returncode == 0
  assert run(["git", "tag", "jax-v0.11.0"], cwd=jax).returncode == 0
  rev = run(["git", "rev-parse", "HEAD"], cwd=xla).stdout.strip()
  work = tmp_path / "work"
  r = run(
    [
      BUILD,
      "--dry-run",
      "--jax-version",
      "0.11.0",
      "--work",
      work,
      "--jax",
      jax,
      "--xla",
      xla,
      "--xla-rev",
      rev,
    ]
  )
  assert r.returncode == 0, r.stdout + r.stderr
  assert run(
    ["git", "rev-list", "--count", f"{rev}..HEAD"], cwd=work / "xla"
  ).stdout.strip() == str(len(patches("131bf41a")))
  assert f"--local_xla_path={work / 'xla'}" in r.stdout
  assert "set_xla_metadata(_xla_collectives_mode=" in r.stdout
  assert "kXlaCollectivesModeAttr" in (work / "xla" / "xla" / "side_effect_util.h").read_text()


def _has_wheel(key):
  return bool(list(VENVS[key].glob("lib/python*/site-packages/tensorflow")))


@needs_xla
@pytest.mark.parametrize("key", COMMITS)
def test_reviewers_check_passes(key):
  """About 10 minutes each on two cores: git am, clang-format, buildifier, the
  compiles against the commit and the assigner's and combiner's tests against
  the XLA of the tf-nightly of the commit's days."""
  if not _has_wheel(key) or os.environ.get("NVSHMEM_TEST_SERIES_UPSTREAM") == "0":
    pytest.skip(f"needs tf-nightly in {VENVS[key].name} (scripts/setup.sh --long)")
  r = run(["bash", CHECK, key, XLA_DIR], cwd=REPO, timeout=3600)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  assert f"check_series_upstream: OK: {SERIES[key].name} on {key}" in r.stdout
  for name in ["assigner", "combiner", "emitter", "thunk"]:
    assert re.search(rf"{name} (\d+) passed", r.stdout), name
