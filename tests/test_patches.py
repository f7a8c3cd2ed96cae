"""The openxla/xla patch series in xla_patches/ (scripts/gen_patches.py).

* regenerating it from the sources reproduces xla_patches/, BUILD and WORKSPACE;
* its new-file hunks are byte-identical to xla_src/;
* it applies with `git apply --check`, `git am` and `patch -p1` to an empty tree;
* the Bazel files pass buildifier (skipped when buildifier is not installed).
"""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gen_patches.py"
PATCHES = sorted((REPO / "xla_patches").glob("*.patch"))

_spec = importlib.util.spec_from_file_location("gen_patches", SCRIPT)
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@invalid",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@invalid",
}


def run(cmd, cwd=None, **kw):
  return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=GIT_ENV, **kw)


def scratch_repo(path):
  path.mkdir()
  assert run(["git", "init", "-q"], cwd=path).returncode == 0
  assert run(["git", "commit", "-q", "--allow-empty", "-m", "base"], cwd=path).returncode == 0
  return path


def test_series_exists():
  assert PATCHES, "xla_patches/ has no patch; run scripts/gen_patches.py"
  assert PATCHES[0].name.startswith("0001-")


def test_check_passes():
  r = run([sys.executable, str(SCRIPT), "--check"])
  assert r.returncode == 0, r.stdout + r.stderr


def test_check_names_a_stale_file(tmp_path):
  assert run([sys.executable, str(SCRIPT), "--out-root", str(tmp_path)]).returncode == 0
  assert run([sys.executable, str(SCRIPT), "--check", "--out-root", str(tmp_path)]).returncode == 0
  patch = next((tmp_path / "xla_patches").glob("0001-*.patch"))
  patch.write_bytes(patch.read_bytes().replace(b"+#include", b"+#include ", 1))
  r = run([sys.executable, str(SCRIPT), "--check", "--out-root", str(tmp_path)])
  assert r.returncode == 1
  lines = r.stdout.strip().splitlines()
  assert len(lines) == 1 and patch.name in lines[0], r.stdout
  # An extra, unknown patch is stale too.
  patch.unlink()
  assert run([sys.executable, str(SCRIPT), "--out-root", str(tmp_path)]).returncode == 0
  (tmp_path / "xla_patches" / "0009-extra.patch").write_text("x\n")
  r = run([sys.executable, str(SCRIPT), "--check", "--out-root", str(tmp_path)])
  assert r.returncode == 1 and "0009-extra.patch" in r.stdout


def test_deterministic():
  assert gen.build_series() == gen.build_series()
  for p in PATCHES:
    head = p.read_bytes().split(b"\n---\n", 1)[0]
    assert head.startswith(gen.ZERO_FROM.encode() + b"\n")
    assert b"From: NVSHMEM pass authors <nvshmem-pass@invalid>\n" in head
    assert f"Date: {gen.DATE}\n".encode() in head


def test_new_file_hunks_byte_identical():
  files = {}
  for p in PATCHES:
    files.update(gen.new_files_in_patch(p.read_bytes()))
  sources = sorted((REPO / "xla_src" / gen.PKG).glob("nvshmem_*"))
  assert sources
  for src in sources:
    rel = f"{gen.PKG}/{src.name}"
    assert rel in files, f"{rel} is not in the series"
    assert files[rel] == src.read_bytes(), rel
  assert gen.check_hunks(REPO) is None


def test_selection_core_depends_on_std_only():
  core = next(t for t in gen.TARGETS if t["name"] == "nvshmem_backend_selection")
  assert gen.derive_deps(core) == []


def test_git_apply_check_and_git_am_on_empty_tree(tmp_path):
  repo = scratch_repo(tmp_path / "xla")
  r = run(["git", "apply", "--check", *map(str, PATCHES)], cwd=repo)
  assert r.returncode == 0, r.stderr
  r = run(["git", "am", "-q", *map(str, PATCHES)], cwd=repo)
  assert r.returncode == 0, r.stdout + r.stderr
  log = run(["git", "log", "--format=%an <%ae>|%aD", "-1"], cwd=repo).stdout.strip()
  assert log == f"NVSHMEM pass authors <nvshmem-pass@invalid>|{gen.DATE}"
  for src in sorted((REPO / "xla_src" / gen.PKG).glob("nvshmem_*")):
    assert (repo / gen.PKG / src.name).read_bytes() == src.read_bytes(), src.name
  bzl = (repo / gen.PKG / gen.BZL_NAME).read_text()
  assert f"def {gen.MACRO}(" in bzl
  # git's own blob hashes match the index lines of the patch.
  for src in sorted((REPO / "xla_src" / gen.PKG).glob("nvshmem_*")):
    h = run(["git", "hash-object", str(src)]).stdout.strip()
    assert h == gen.blob_hash(src.read_bytes())
    assert any(f"..{h}\n" in p.read_text() for p in PATCHES)


@pytest.mark.skipif(shutil.which("patch") is None, reason="no patch(1)")
def test_patch_p1_and_build_edit(tmp_path):
  """What WORKSPACE's http_archive does: patch -p1, then the patch_cmds edit."""
  pkg = tmp_path / gen.PKG
  pkg.mkdir(parents=True)
  (pkg / "BUILD").write_text('cc_library(\n    name = "collective_backend_assigner",\n)\n')
  for p in PATCHES:
    r = subprocess.run(["patch", "-p1", "-s", "-i", str(p)], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
  r = subprocess.run(["sh", "-c", gen.BUILD_EDIT_CMD], cwd=tmp_path)
  assert r.returncode == 0
  build = (pkg / "BUILD").read_text()
  assert build.startswith(f'load(":{gen.BZL_NAME}", "{gen.MACRO}")\n')
  assert build.rstrip().endswith(f"{gen.MACRO}()")
  assert 'name = "collective_backend_assigner"' in build


def test_readme_documents_the_series():
  readme = (REPO / "xla_patches" / "README.md").read_text()
  assert gen.BUILD_EDIT_CMD in readme
  assert gen.JAX_COMMIT in readme
  for p in PATCHES:
    assert p.name in readme
  assert "nvshmem_collective_permute_rewriter_test" in readme
  assert "--local_xla_path" in readme
  ws = (REPO / "WORKSPACE").read_text()
  for p in PATCHES:
    assert f"//xla_patches:{p.name}" in ws
  assert 'patch_args = ["-p1"]' in ws


BUILDIFIER = shutil.which("buildifier")


@pytest.mark.skipif(BUILDIFIER is None, reason="buildifier not installed "
                    "(npm install -g @bazel/buildifier)")
def test_buildifier(tmp_path):
  files = [REPO / "BUILD", REPO / "WORKSPACE", REPO / "xla_patches" / "BUILD.bazel"]
  for p in PATCHES:
    for rel, content in gen.new_files_in_patch(p.read_bytes()).items():
      if rel.endswith(".bzl"):
        out = tmp_path / Path(rel).name
        out.write_bytes(content)
        files.append(out)
  r = subprocess.run([BUILDIFIER, "--mode=check", "--lint=warn", *map(str, files)],
                     capture_output=True, text=True)
  assert r.returncode == 0, r.stdout + r.stderr
