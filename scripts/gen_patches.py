#!/usr/bin/env python3
"""Generates the openxla/xla patch series (xla_patches/) from the pass sources.

Run with the project's interpreter from anywhere:

    .venv/bin/python scripts/gen_patches.py            # (re)write the outputs
    .venv/bin/python scripts/gen_patches.py --check    # exit 1 if anything is stale
    .venv/bin/python scripts/gen_patches.py --print-build-edit

Outputs (all generated, never edit them by hand):

  xla_patches/0001-*.patch   the pass sources under xla_src/ as new files of an XLA
                             tree (byte for byte), plus nvshmem_targets.bzl, a Bazel
                             macro that declares their targets
  xla_patches/BUILD.bazel    exports the patches, for WORKSPACE's `patches = [...]`
  BUILD                      the same targets as plain BUILD text, for people who
                             paste them into an XLA checkout's collectives/BUILD
  WORKSPACE                  http_archive of openxla/xla at the pin, with the series

The series is deterministic: fixed author and date, an all-zero "From" hash, no
tool versions. Only new files are generated. Patches that modify upstream files
(pipeline registration, DebugOptions fields and flags) need the upstream files at
the pinned commit, which this project could not read; see xla_patches/README.md.

Bazel dependencies are derived from each source's #include lines (INCLUDE_DEPS
below), so the targets follow the sources as they change. An include that the
table does not know is an error: add its Bazel label to the table.
"""

import argparse
import hashlib
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "xla/backends/gpu/transforms/collectives"
SRC_DIR = ROOT / "xla_src" / PKG

AUTHOR = "NVSHMEM pass authors <nvshmem-pass@invalid>"
DATE = "Thu, 1 Jan 2026 00:00:00 +0000"
ZERO_FROM = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001"

# The macro file that 0001 adds next to the sources, and the macro it defines.
BZL_NAME = "nvshmem_targets.bzl"
MACRO = "nvshmem_collective_permute_rewriter_targets"

# jax commit that the jax/jaxlib v0.9.1 PyPI wheels were built from
# (`_git_hash` in jaxlib/version.py of the jaxlib 0.9.1 wheel). Its
# third_party/xla/revision.bzl names the XLA commit this series targets.
JAX_COMMIT = "58cb6e556c996bf0361bca9e64890a551e513280"

# Targets, in the order they are declared. "std_only" targets may include only
# standard headers and their own package's files.
TARGETS = [
    {
        "rule": "cc_library",
        "name": "nvshmem_backend_selection",
        "srcs": ["nvshmem_backend_selection.cc"],
        "hdrs": ["nvshmem_backend_selection.h"],
        "std_only": True,
    },
    {
        "rule": "xla_cc_test",
        "name": "nvshmem_backend_selection_test",
        "srcs": ["nvshmem_backend_selection_test.cc"],
    },
    {
        "rule": "cc_library",
        "name": "nvshmem_collective_permute_rewriter",
        "srcs": ["nvshmem_collective_permute_rewriter.cc"],
        "hdrs": ["nvshmem_collective_permute_rewriter.h"],
    },
    {
        "rule": "xla_cc_test",
        "name": "nvshmem_collective_permute_rewriter_test",
        "srcs": [
            "nvshmem_collective_permute_rewriter_test.cc",
            "nvshmem_collective_permute_rewriter_test_modules.inc",
        ],
    },
]

# Quoted include -> Bazel label (XLA's naming). Prefix entries end with "/".
INCLUDE_DEPS = {
    "absl/algorithm/container.h": "@com_google_absl//absl/algorithm:container",
    "absl/container/btree_map.h": "@com_google_absl//absl/container:btree",
    "absl/container/btree_set.h": "@com_google_absl//absl/container:btree",
    "absl/container/flat_hash_map.h": "@com_google_absl//absl/container:flat_hash_map",
    "absl/container/flat_hash_set.h": "@com_google_absl//absl/container:flat_hash_set",
    "absl/container/inlined_vector.h": "@com_google_absl//absl/container:inlined_vector",
    "absl/log/check.h": "@com_google_absl//absl/log:check",
    "absl/log/log.h": "@com_google_absl//absl/log",
    "absl/status/status.h": "@com_google_absl//absl/status",
    "absl/status/status_matchers.h": "@com_google_absl//absl/status:status_matchers",
    "absl/status/statusor.h": "@com_google_absl//absl/status:statusor",
    "absl/strings/ascii.h": "@com_google_absl//absl/strings",
    "absl/strings/match.h": "@com_google_absl//absl/strings",
    "absl/strings/numbers.h": "@com_google_absl//absl/strings",
    "absl/strings/str_cat.h": "@com_google_absl//absl/strings",
    "absl/strings/str_format.h": "@com_google_absl//absl/strings:str_format",
    "absl/strings/str_join.h": "@com_google_absl//absl/strings",
    "absl/strings/str_replace.h": "@com_google_absl//absl/strings",
    "absl/strings/str_split.h": "@com_google_absl//absl/strings",
    "absl/strings/string_view.h": "@com_google_absl//absl/strings:string_view",
    "absl/strings/strip.h": "@com_google_absl//absl/strings",
    "absl/types/span.h": "@com_google_absl//absl/types:span",
    "xla/hlo/ir/": "//xla/hlo/ir:hlo",
    "xla/hlo/parser/hlo_parser.h": "//xla/hlo/parser:hlo_parser",
    "xla/hlo/pass/hlo_pass_interface.h": "//xla/hlo/pass:hlo_pass",
    "xla/hlo/pass/hlo_pass_pipeline.h": "//xla/hlo/pass:hlo_pass_pipeline",
    "xla/hlo/testlib/filecheck.h": "//xla/hlo/testlib:filecheck",
    "xla/hlo/testlib/hlo_hardware_independent_test_base.h":
        "//xla/hlo/testlib:hlo_hardware_independent_test_base",
    "xla/hlo/testlib/verified_hlo_module.h": "//xla/hlo/testlib:verified_hlo_module",
    "xla/hlo/utils/hlo_matchers.h": "//xla/hlo/utils:hlo_matchers",
    "xla/hlo/utils/hlo_query.h": "//xla/hlo/utils:hlo_query",
    "xla/literal.h": "//xla:literal",
    "xla/literal_util.h": "//xla:literal_util",
    "xla/service/collective_ops_utils.h": "//xla/service:collective_ops_utils",
    "xla/service/gpu/backend_configs.pb.h": "//xla/service/gpu:backend_configs_cc",
    PKG + "/collective_backend_assigner.h": ":collective_backend_assigner",
    PKG + "/collective_ops_utils.h": ":collective_ops_utils",
    "xla/service/hlo_module_config.h": "//xla/service:hlo_module_config",
    "xla/service/hlo_verifier.h": "//xla/service:hlo_verifier",
    "xla/shape.h": "//xla:shape_util",
    "xla/shape_util.h": "//xla:shape_util",
    "xla/status_macros.h": "//xla:status_macros",
    "xla/stream_executor/cuda/cuda_compute_capability.h":
        "//xla/stream_executor/cuda:cuda_compute_capability",
    "xla/stream_executor/device_description.h": "//xla/stream_executor:device_description",
    "xla/tsl/platform/errors.h": "//xla/tsl/platform:errors",
    "xla/tsl/platform/status_matchers.h": "//xla/tsl/platform:status_matchers",
    "xla/tsl/platform/statusor.h": "//xla/tsl/platform:statusor",
    "xla/tsl/platform/test.h": "//xla/tsl/platform:test",
    "xla/util.h": "//xla:util",
    "xla/xla.pb.h": "//xla:xla_proto_cc",
    "xla/xla_data.pb.h": "//xla:xla_data_proto_cc",
}
GTEST = "@com_google_googletest//:gtest"
GTEST_MAIN = "@com_google_googletest//:gtest_main"
ANGLE_DEPS = {"gtest/gtest.h": GTEST, "gmock/gmock.h": GTEST}

INCLUDE_RE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)
MAIN_RE = re.compile(rb"^\s*int\s+main\s*\(", re.M)

BUILD_EDIT_CMD = (
    "f=" + PKG + "/BUILD && "
    "{ echo 'load(\":" + BZL_NAME + "\", \"" + MACRO + "\")'; cat \"$f\"; echo; "
    "echo '" + MACRO + "()'; } > \"$f.tmp\" && mv \"$f.tmp\" \"$f\""
)


class GenError(Exception):
    pass


# ----------------------------------------------------------------------------
# Sources and Bazel targets


def source_files():
    """Files of the series, in TARGETS order (path relative to PKG)."""
    names = []
    for t in TARGETS:
        for key in ("hdrs", "srcs"):
            names.extend(t.get(key, []))
    on_disk = sorted(p.name for p in SRC_DIR.glob("nvshmem_*") if p.is_file())
    unlisted = [n for n in on_disk if n not in names]
    if unlisted:
        raise GenError(f"xla_src/{PKG}/{unlisted[0]} is not in any target of "
                       "scripts/gen_patches.py TARGETS")
    missing = [n for n in names if not (SRC_DIR / n).is_file()]
    if missing:
        raise GenError(f"xla_src/{PKG}/{missing[0]} is missing")
    return sorted(names)


def label_sort_key(label):
    # buildifier order: local labels, then //labels, then @repo//labels.
    if label.startswith(":"):
        return (0, "", label[1:])
    phase = 1 if label.startswith("//") else 2
    pkg, _, name = label.partition(":")
    return (phase, pkg, name)


def derive_deps(target):
    own = set(target.get("srcs", [])) | set(target.get("hdrs", []))
    owner = {}
    for t in TARGETS:
        if t["rule"] == "cc_library":
            for n in t.get("hdrs", []):
                owner[n] = t["name"]
    deps = set()
    has_main = False
    for name in target.get("srcs", []) + target.get("hdrs", []):
        data = (SRC_DIR / name).read_bytes()
        has_main = has_main or bool(MAIN_RE.search(data))
        for m in INCLUDE_RE.finditer(data):
            kind, inc = m.group(1).decode(), m.group(2).decode()
            where = f"xla_src/{PKG}/{name}: #include {kind}{inc}"
            if kind == "<":
                if inc in ANGLE_DEPS:
                    deps.add(ANGLE_DEPS[inc])
                elif "/" in inc:
                    raise GenError(f"{where}: unknown system header, add it to INCLUDE_DEPS")
                continue
            base = inc[len(PKG) + 1:] if inc.startswith(PKG + "/") else None
            if base in own:
                continue
            if base in owner:
                deps.add(":" + owner[base])
                continue
            label = INCLUDE_DEPS.get(inc)
            if label is None:
                for prefix, lab in INCLUDE_DEPS.items():
                    if prefix.endswith("/") and inc.startswith(prefix):
                        label = lab
                        break
            if label is None:
                raise GenError(f"{where}: no Bazel label known; add it to "
                               "INCLUDE_DEPS in scripts/gen_patches.py")
            deps.add(label)
    if target.get("std_only") and deps:
        raise GenError(f"target {target['name']} must depend on the standard library "
                       f"only, but its sources need {sorted(deps)[0]}")
    if target["rule"] == "xla_cc_test" and not has_main:
        deps.discard(GTEST)
        deps.add(GTEST_MAIN)
    return sorted(deps, key=label_sort_key)


def render_target(target, indent):
    pad = " " * indent
    lines = [f"{pad}{target['rule']}("]
    lines.append(f'{pad}    name = "{target["name"]}",')
    for key in ("srcs", "hdrs"):
        if target.get(key):
            lines.append(f"{pad}    {key} = {str_list(target[key], indent + 4)},")
    deps = derive_deps(target)
    if deps:
        lines.append(f"{pad}    deps = {str_list(deps, indent + 4)},")
    lines.append(f"{pad})")
    return "\n".join(lines)


def str_list(items, indent):
    if len(items) == 1:
        return f'["{items[0]}"]'
    pad = " " * (indent + 4)
    inner = "".join(f'{pad}"{i}",\n' for i in items)
    return "[\n" + inner + " " * indent + "]"


LOADS = ('load("@rules_cc//cc:cc_library.bzl", "cc_library")\n'
         'load("//xla:xla.default.bzl", "xla_cc_test")\n')


def render_bzl():
    body = "\n\n".join(render_target(t, 4) for t in TARGETS)
    return (
        '"""Bazel targets of the NVSHMEM collective-permute rewriter.\n'
        "\n"
        "Generated by scripts/gen_patches.py of the NVSHMEM ring-attention pass\n"
        "project; do not edit. The package BUILD instantiates them with\n"
        "\n"
        f'    load(":{BZL_NAME}", "{MACRO}")\n'
        f"    {MACRO}()\n"
        '"""\n'
        "\n" + LOADS + "\n"
        f'def {MACRO}(name = "{MACRO}"):\n'
        '    """Declares the selection core, the pass and their tests.\n'
        "\n"
        "    Args:\n"
        "      name: unused; the targets have fixed names.\n"
        '    """\n' + body + "\n")


def render_top_build():
    body = "\n\n".join(render_target(t, 0) for t in TARGETS)
    return (
        "# Bazel targets of the NVSHMEM collective-permute rewriter, as they sit in an\n"
        f"# XLA tree: {PKG}/.\n"
        "#\n"
        "# For use inside an XLA checkout (paste into that package's BUILD); the labels\n"
        "# are XLA's, so nothing here builds from this repository's root. The patch\n"
        "# series declares the very same targets through\n"
        f"# {PKG}/{BZL_NAME}.\n"
        "# Generated by scripts/gen_patches.py; do not edit.\n"
        "\n" + LOADS + "\n" + body + "\n")


# ----------------------------------------------------------------------------
# Patches


def blob_hash(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def new_file_diff(path, data):
    out = [f"diff --git a/{path} b/{path}", "new file mode 100644"]
    if not data:
        out.append(f"index 0000000000000000000000000000000000000000..{blob_hash(data)}")
        return "\n".join(out).encode() + b"\n"
    out.append(f"index 0000000000000000000000000000000000000000..{blob_hash(data)}")
    out += ["--- /dev/null", f"+++ b/{path}"]
    lines = data.split(b"\n")
    eol = data.endswith(b"\n")
    if eol:
        lines = lines[:-1]
    n = len(lines)
    out.append(f"@@ -0,0 +1 @@" if n == 1 else f"@@ -0,0 +1,{n} @@")
    head = "\n".join(out).encode() + b"\n"
    body = b"".join(b"+" + line + b"\n" for line in lines)
    if not eol:
        body += b"\\ No newline at end of file\n"
    return head + body


def mail(number, total, subject, body, diffs):
    head = "\n".join([
        ZERO_FROM,
        f"From: {AUTHOR}",
        f"Date: {DATE}",
        f"Subject: [PATCH {number}/{total}] {subject}",
        "MIME-Version: 1.0",
        "Content-Type: text/plain; charset=UTF-8",
        "Content-Transfer-Encoding: 8bit",
        "",
        body.rstrip("\n"),
        "---",
        "",
    ]).encode()
    return head + b"".join(diffs) + b"-- \nscripts/gen_patches.py\n\n"


def slug(subject):
    return re.sub(r"[^A-Za-z0-9]+", "-", subject).strip("-")[:60].rstrip("-")


def patch_0001():
    files = []
    for name in source_files():
        files.append((f"{PKG}/{name}", (SRC_DIR / name).read_bytes()))
    files.append((f"{PKG}/{BZL_NAME}", render_bzl().encode()))
    files.sort()
    subject = "Add the NVSHMEM collective-permute rewriter pass"
    body = f"""\
Adds, as new files under {PKG}/:

- nvshmem_backend_selection.{{h,cc}}: a cost model that picks NCCL (DEFAULT),
  NVSHMEM or a split of one collective-permute, from a cluster topology
  (slices x hosts x GPUs, NVLink domains) and a cost table. Standard C++ only.
- nvshmem_collective_permute_rewriter.{{h,cc}}: an HloModulePass that applies
  those decisions: sync collective-permutes become start/done pairs whose
  collective_backend_config names the chosen backend, with the reasoning in
  _nvshmem_* frontend attributes.
- tests for both, and the HLO modules the pass test reads (.inc).
- {BZL_NAME}: the macro {MACRO}()
  declaring their Bazel targets.

The package BUILD must load and call the macro; that edit is not part of this
patch because it depends on upstream's BUILD content:

  {BUILD_EDIT_CMD}

Nothing calls the pass yet.

Generated by scripts/gen_patches.py from the project's sources; do not edit.
"""
    diffs = [new_file_diff(p, d) for p, d in files]
    return f"0001-{slug(subject)}.patch", subject, body, diffs


def build_series():
    """{relative output path: bytes} of every generated file."""
    parts = [patch_0001()]
    total = len(parts)
    out = {}
    names = []
    for i, (fname, subject, body, diffs) in enumerate(parts, 1):
        out[f"xla_patches/{fname}"] = mail(i, total, subject, body, diffs)
        names.append(fname)
    out["xla_patches/BUILD.bazel"] = render_patches_build(names).encode()
    out["BUILD"] = render_top_build().encode()
    out["WORKSPACE"] = render_workspace(names).encode()
    return out


def render_patches_build(names):
    return ("# The patch series for openxla/xla, for WORKSPACE's http_archive.\n"
            "# Generated by scripts/gen_patches.py; do not edit.\n\n"
            "exports_files(" + str_list(names, 0) + ")\n")


def starlark_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_workspace(names):
    patches = str_list([f"//xla_patches:{n}" for n in names], 4)
    return f'''\
# Fetches openxla/xla at the pin and applies the patch series, for people who
# build with Bazel online. Generated by scripts/gen_patches.py; do not edit.
#
# The pin is the XLA commit in third_party/xla/revision.bzl of jax commit
# {JAX_COMMIT},
# the commit the jax/jaxlib 0.9.1 wheels were built from. See
# xla_patches/README.md for why, and for what is unverified.
#
# This file only fetches and patches @xla. Building targets of @xla also needs
# the repository setup of XLA's own WORKSPACE at that commit (its workspace4 ..
# workspace0 macros, hermetic Python and CUDA); copy it from there, it is
# specific to the commit. Inside an XLA checkout, use `git am` instead (README).

workspace(name = "nvshmem_collective_permute_rewriter")

load("@bazel_tools//tools/build_defs/repo:http.bzl", "http_archive")

JAX_COMMIT = "{JAX_COMMIT}"

# sha256 unknown: nothing here can reach GitHub to compute it. Bazel prints
# the archive's sha256 on the first fetch; add it then.
http_archive(
    name = "jax",
    strip_prefix = "jax-" + JAX_COMMIT,
    urls = ["https://github.com/jax-ml/jax/archive/%s.tar.gz" % JAX_COMMIT],
)

load("@jax//third_party/xla:revision.bzl", "XLA_COMMIT")

# sha256 unknown for the same reason. (jax's XLA_SHA256 is not reused: jax's
# revision.bzl says it is taken over the api.github.com tarball, which is a
# different archive from the one below.)
http_archive(
    name = "xla",
    patch_args = ["-p1"],
    # Instantiates the new targets in the package BUILD (see 0001's message).
    patch_cmds = [{starlark_str(BUILD_EDIT_CMD)}],
    patches = {patches},
    strip_prefix = "xla-" + XLA_COMMIT,
    urls = ["https://github.com/openxla/xla/archive/%s.tar.gz" % XLA_COMMIT],
)
'''


# ----------------------------------------------------------------------------
# Reading patches back


def new_files_in_patch(data):
    """{path: content} of the new-file diffs in a patch made by new_file_diff."""
    files = {}
    chunks = re.split(rb"^diff --git ", data, flags=re.M)[1:]
    for chunk in chunks:
        lines = chunk.split(b"\n")
        header = lines[0].decode()
        path = header.split(" b/", 1)[1]
        if not any(l.startswith(b"new file mode") for l in lines[1:4]):
            continue
        try:
            start = next(i for i, l in enumerate(lines) if l.startswith(b"@@ "))
        except StopIteration:
            files[path] = b""
            continue
        m = re.match(rb"@@ -0,0 \+1(?:,(\d+))? @@", lines[start])
        count = int(m.group(1)) if m.group(1) else 1
        body = lines[start + 1:start + 1 + count]
        if any(not l.startswith(b"+") for l in body) or len(body) != count:
            raise GenError(f"malformed hunk for {path}")
        content = b"".join(l[1:] + b"\n" for l in body)
        rest = lines[start + 1 + count:]
        if rest and rest[0] == b"\\ No newline at end of file":
            content = content[:-1]
        files[path] = content
    return files


def check_hunks(root):
    """First mismatch between a new-file hunk and the source it came from, or None."""
    for patch in sorted((root / "xla_patches").glob("*.patch")):
        for path, content in new_files_in_patch(patch.read_bytes()).items():
            src = ROOT / "xla_src" / path
            if path.endswith("/" + BZL_NAME):
                continue
            if not src.is_file():
                return f"{patch.relative_to(root)}: {path} has no source in xla_src/"
            if src.read_bytes() != content:
                return f"{patch.relative_to(root)}: {path} differs from xla_src/{path}"
    return None


# ----------------------------------------------------------------------------


def write(out_root, outputs):
    pdir = out_root / "xla_patches"
    pdir.mkdir(parents=True, exist_ok=True)
    for old in pdir.glob("*.patch"):
        if f"xla_patches/{old.name}" not in outputs:
            old.unlink()
    for rel, data in outputs.items():
        p = out_root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if not p.is_file() or p.read_bytes() != data:
            p.write_bytes(data)


def stale(out_root, outputs):
    """Paths (relative) whose content differs from `outputs`."""
    bad = []
    present = {f"xla_patches/{p.name}" for p in (out_root / "xla_patches").glob("*.patch")}
    for rel in sorted(set(outputs) | present):
        p = out_root / rel
        if rel not in outputs or not p.is_file() or p.read_bytes() != outputs[rel]:
            bad.append(rel)
    return bad


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temporary directory and fail if the "
                         "committed outputs differ")
    ap.add_argument("--out-root", type=Path, default=ROOT,
                    help="where the outputs live (default: the repository root)")
    ap.add_argument("--print-build-edit", action="store_true",
                    help="print the shell command that instantiates the targets "
                         "in an XLA checkout's package BUILD")
    args = ap.parse_args(argv)
    if args.print_build_edit:
        print(BUILD_EDIT_CMD)
        return 0
    try:
        outputs = build_series()
        if args.check:
            with tempfile.TemporaryDirectory() as tmp:
                write(Path(tmp), outputs)
                regenerated = {rel: (Path(tmp) / rel).read_bytes() for rel in outputs}
            bad = stale(args.out_root, regenerated)
            if bad:
                more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
                print(f"stale: {bad[0]}{more}; run scripts/gen_patches.py")
                return 1
            problem = check_hunks(args.out_root)
            if problem:
                print(f"stale: {problem}")
                return 1
            return 0
        write(args.out_root, outputs)
    except GenError as e:
        print(f"gen_patches: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
