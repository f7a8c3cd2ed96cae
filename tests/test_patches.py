"""The openxla/xla patch series in xla_patches/ (scripts/gen_patches.py).

Without the upstream tree (as in CI):
* regenerating the series from the sources, the edits and the committed hunks'
  upstream lines reproduces xla_patches/ and WORKSPACE byte for byte;
* its new-file hunks are byte-identical to xla_src/;
* a stale patch, a changed edit and a malformed edits file are reported;
* it applies with `git am` and `patch -p1` to a tree rebuilt from the lines
  the hunks show;
* the flags that 0003 reads are the fields and flags that 0002 adds;
* the Bazel files, the BUILD hunk included, pass buildifier.
With XLA_PIN set (openxla/xla at the pin: a git directory or a checkout),
`gen_patches.py --check --xla` also regenerates it from the upstream files.
"""

import importlib.util
import os
import re
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
    **{k: v for k, v in os.environ.items() if k != "XLA_PIN"},
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@invalid",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@invalid",
}


def run(cmd, cwd=None, env=GIT_ENV):
  return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)


def copy_outputs(dst):
  """The committed outputs under dst, as --out-root expects them."""
  shutil.copytree(REPO / "xla_patches", dst / "xla_patches")
  shutil.copy(REPO / "WORKSPACE", dst / "WORKSPACE")
  return dst


def patch_of(subject_word):
  return next(p for p in PATCHES if subject_word in p.name)


def added_lines(patch, path_suffix):
  """'+' lines of the diff of the file ending in path_suffix."""
  text = patch.read_text()
  out = []
  for chunk in re.split(r"^diff --git ", text, flags=re.M)[1:]:
    if chunk.split("\n", 1)[0].endswith(path_suffix):
      out += [l[1:] for l in chunk.split("\n") if l.startswith("+") and not l.startswith("+++")]
  return out


def test_series_is_numbered_and_touches_one_area_each():
  assert [p.name[:5] for p in PATCHES] == ["0001-", "0002-", "0003-", "0004-"]
  touched = {p.name[:4]: set(re.findall(r"^diff --git a/(\S+)", p.read_text(), re.M))
             for p in PATCHES}
  assert f"{gen.PKG}/BUILD" in touched["0001"]
  assert all(f.startswith(gen.PKG + "/") for f in touched["0001"])
  assert touched["0002"] == {"xla/xla.proto", "xla/debug_options_flags.cc"}
  assert touched["0003"] == {"xla/service/gpu/gpu_compiler.cc", "xla/service/gpu/BUILD"}
  assert touched["0004"] == {f"{gen.PKG}/collective_backend_assigner.cc",
                             f"{gen.PKG}/collective_backend_assigner_test.cc"}


def test_check_passes():
  r = run([sys.executable, str(SCRIPT), "--check"])
  assert r.returncode == 0, r.stdout + r.stderr


def test_regenerating_without_the_pin_changes_nothing(tmp_path):
  root = copy_outputs(tmp_path)
  before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
  r = run([sys.executable, str(SCRIPT), "--out-root", str(root)])
  assert r.returncode == 0, r.stdout + r.stderr
  assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_check_names_a_stale_file(tmp_path):
  root = copy_outputs(tmp_path)
  patch = next((root / "xla_patches").glob("0001-*.patch"))
  good = patch.read_bytes()
  patch.write_bytes(good.replace(b"+#include", b"+#include ", 1))
  r = run([sys.executable, str(SCRIPT), "--check", "--out-root", str(root)])
  assert r.returncode == 1
  lines = r.stdout.strip().splitlines()
  assert len(lines) == 1 and patch.name in lines[0], r.stdout
  patch.write_bytes(good)
  (root / "xla_patches" / "0009-extra.patch").write_text("x\n")
  r = run([sys.executable, str(SCRIPT), "--check", "--out-root", str(root)])
  assert r.returncode == 1 and "0009-extra.patch" in r.stdout


def test_check_names_a_changed_upstream_hunk(tmp_path):
  root = copy_outputs(tmp_path)
  patch = next((root / "xla_patches").glob("0004-*.patch"))
  patch.write_bytes(patch.read_bytes().replace(b"+bool EveryDeviceHasSource",
                                               b"+bool EveryDeviceHasASource", 1))
  r = run([sys.executable, str(SCRIPT), "--check", "--out-root", str(root)])
  assert r.returncode == 1
  assert patch.name in r.stdout, r.stdout


def with_edits_dir(monkeypatch, tmp_path):
  edits = tmp_path / "xla_edits"
  shutil.copytree(REPO / "xla_edits", edits)
  monkeypatch.setattr(gen, "EDITS_DIR", edits)
  return edits


def test_changed_edit_needs_the_pin(monkeypatch, tmp_path):
  edits = with_edits_dir(monkeypatch, tmp_path)
  f = next(edits.glob("0004-*.edits"))
  f.write_text(f.read_text().replace("bool EveryDeviceHasSource(",
                                     "bool EveryDeviceSends(", 1))
  with pytest.raises(gen.NeedPin, match=r"0004-.*--xla PIN"):
    gen.build_series()


def test_malformed_edits_name_file_and_line(monkeypatch, tmp_path):
  edits = with_edits_dir(monkeypatch, tmp_path)
  f = next(edits.glob("0003-*.edits"))
  lines = f.read_text().splitlines(keepends=True)
  n = next(i for i, l in enumerate(lines) if l.startswith("@@ insert"))
  lines[n] = "@@ with\n"
  f.write_text("".join(lines))
  with pytest.raises(gen.GenError, match=rf"0003-registration.edits:{n + 1}: expected '@@ insert'"):
    gen.build_series()


def test_deterministic():
  assert gen.build_series() == gen.build_series()
  for p in PATCHES:
    head = p.read_bytes().split(b"\n---\n", 1)[0]
    assert head.startswith(gen.ZERO_FROM.encode() + b"\n")
    assert f"From: {gen.AUTHOR}\n".encode() in head
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


def test_selection_core_depends_on_absl_only():
  core = next(t for t in gen.TARGETS if t["name"] == "nvshmem_backend_selection")
  deps = gen.derive_deps(core)
  assert "@com_google_absl//absl/status:statusor" in deps
  assert all(d.startswith("@com_google_absl//") for d in deps), deps


def test_selection_core_with_an_xla_include_is_refused(monkeypatch):
  core = next(t for t in gen.TARGETS if t["name"] == "nvshmem_backend_selection")
  real = gen.source_includes

  def with_xla(name):
    extra = [('"', "xla/shape.h")] if name == core["srcs"][0] else []
    return list(real(name)) + extra

  monkeypatch.setattr(gen, "source_includes", with_xla)
  with pytest.raises(gen.GenError, match="standard library and absl only"):
    gen.derive_deps(core)


def rebuilt_tree(root):
  """Upstream files as the hunks show them, other lines replaced by fillers."""
  views = gen.sparse_from_patches(REPO / "xla_patches")
  assert set(views) == set(gen.UPSTREAM)
  for path, view in views.items():
    lines = [view.known.get(i, b"filler line %d" % i) for i in range(view.count)]
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_bytes(b"\n".join(lines) + b"\n")
  return views


def test_git_am_on_a_tree_rebuilt_from_the_hunks(tmp_path):
  repo = tmp_path / "xla"
  repo.mkdir()
  rebuilt_tree(repo)
  assert run(["git", "init", "-q"], cwd=repo).returncode == 0
  assert run(["git", "add", "-A"], cwd=repo).returncode == 0
  assert run(["git", "commit", "-qm", "base"], cwd=repo).returncode == 0
  r = run(["git", "am", "-q", *map(str, PATCHES)], cwd=repo)
  assert r.returncode == 0, r.stdout + r.stderr
  log = run(["git", "log", "--format=%an <%ae>|%aD|%s", "-4"], cwd=repo).stdout.split("\n")
  assert all(l.startswith(f"{gen.AUTHOR}|{gen.DATE}|") for l in log if l)
  for src in sorted((REPO / "xla_src" / gen.PKG).glob("nvshmem_*")):
    assert (repo / gen.PKG / src.name).read_bytes() == src.read_bytes(), src.name
  build = (repo / gen.PKG / "BUILD").read_text()
  for t in gen.TARGETS:
    assert f'name = "{t["name"]}"' in build
  compiler = (repo / "xla/service/gpu/gpu_compiler.cc").read_text()
  assert "pipeline.AddPass<NvshmemCollectivePermuteRewriter>(" in compiler
  combiner = compiler.index("AddCollectiveCombinerPasses(pipeline, *hlo_module")
  assert combiner < compiler.index("pipeline.AddPass<NvshmemCollectivePermuteRewriter>(")
  assert compiler.index("pipeline.AddPass<NvshmemCollectivePermuteRewriter>(") < \
      compiler.index("pipeline.AddPass<AllReduceContiguous>();")


@pytest.mark.skipif(shutil.which("patch") is None, reason="no patch(1)")
def test_patch_p1_as_http_archive_does(tmp_path):
  rebuilt_tree(tmp_path)
  for p in PATCHES:
    r = subprocess.run(["patch", "-p1", "-s", "-i", str(p)], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
  assert (tmp_path / gen.PKG / "nvshmem_collective_permute_rewriter.h").is_file()


def test_registration_reads_the_flags_that_0002_adds():
  proto = "\n".join(added_lines(patch_of("0002-"), "xla/xla.proto"))
  fields = dict(re.findall(r"optional \w+ (xla_\w+) = (\d+);", proto))
  assert len(fields) == 3 and set(fields.values()) == {"456", "457", "458"}
  assert "  // Next id: 459" in proto
  flags = "\n".join(added_lines(patch_of("0002-"), "xla/debug_options_flags.cc"))
  for name in fields:
    assert f"opts.set_{name}(" in flags, name
    assert f'"{name}",' in flags, name
  compiler = "\n".join(added_lines(patch_of("0003-"), "gpu_compiler.cc"))
  used = set(re.findall(r"\.(xla_gpu_experimental_\w+)\(\)", compiler))
  assert used - {"xla_gpu_experimental_enable_nvshmem"} == set(fields)


def test_registration_sets_members_the_pass_options_have():
  compiler = "\n".join(added_lines(patch_of("0003-"), "gpu_compiler.cc"))
  members = set(re.findall(r"rewriter_options\.(\w+) =", compiler))
  assert {"topology", "cost_table_path"} <= members
  header = (REPO / "xla_src" / gen.PKG / "nvshmem_collective_permute_rewriter.h").read_text()
  options = header[header.index("struct Options {"):]
  options = options[:options.index("\n  };")]
  for m in members:
    assert re.search(rf"\s{m}( = [^;]*)?;", options), m


def test_readme_documents_the_series():
  readme = (REPO / "xla_patches" / "README.md").read_text()
  assert gen.XLA_COMMIT in readme
  for p in PATCHES:
    assert p.name in readme
  for path, (blob, _) in gen.UPSTREAM.items():
    assert path in readme and blob in readme, path
  assert "git am" in readme and "check_patches_upstream.sh" in readme
  ws = (REPO / "WORKSPACE").read_text()
  for p in PATCHES:
    assert f"//xla_patches:{p.name}" in ws
  assert gen.XLA_SHA256 in ws and gen.XLA_COMMIT in ws


BUILDIFIER = shutil.which("buildifier")


@pytest.mark.skipif(BUILDIFIER is None, reason="buildifier not installed")
def test_buildifier(tmp_path):
  files = [REPO / "BUILD", REPO / "WORKSPACE", REPO / "xla_patches" / "BUILD.bazel"]
  # The targets 0001 adds, with the package BUILD's loads.
  targets = tmp_path / "BUILD"
  targets.write_text('load("@rules_cc//cc:cc_library.bzl", "cc_library")\n'
                     'load("//xla:xla.default.bzl", "xla_cc_test")\n\n' +
                     "\n".join(added_lines(PATCHES[0], f"{gen.PKG}/BUILD")).rstrip() + "\n")
  files.append(targets)
  r = subprocess.run([BUILDIFIER, "--mode=check", "--lint=warn", *map(str, files)],
                     capture_output=True, text=True)
  assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.skipif(not os.environ.get("XLA_PIN"), reason="XLA_PIN (the upstream tree) not set")
def test_check_against_the_pin():
  r = run([sys.executable, str(SCRIPT), "--check", "--xla", os.environ["XLA_PIN"]])
  assert r.returncode == 0, r.stdout + r.stderr


CHECK_SCRIPT = REPO / "scripts" / "check_patches_upstream.sh"


@pytest.mark.parametrize("args", [[], ["/nonexistent/xla"], ["a", "b"]])
def test_upstream_check_rejects_bad_arguments(args):
  r = run(["bash", str(CHECK_SCRIPT), *args])
  assert r.returncode == 2, r.stdout + r.stderr
  lines = r.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("check_patches_upstream: "), r.stderr


def test_upstream_check_rejects_a_tree_that_is_not_xla(tmp_path):
  r = run(["bash", str(CHECK_SCRIPT), str(tmp_path)])
  assert r.returncode == 2
  assert "neither a git directory" in r.stderr or "gen_patches" in r.stderr, r.stderr
