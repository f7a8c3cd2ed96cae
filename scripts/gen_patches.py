#!/usr/bin/env python3
"""Generates the openxla/xla patch series (xla_patches/) from this project's sources.

Run with the project's interpreter from anywhere:

    .venv/bin/python scripts/gen_patches.py [--xla PIN]          # (re)write the outputs
    .venv/bin/python scripts/gen_patches.py --check [--xla PIN]  # exit 1 if anything is stale

PIN is openxla/xla at the pinned commit: a git directory that holds the commit,
or a checkout of it. Sources of truth, never the patches themselves:

  xla_src/xla/backends/gpu/transforms/collectives/nvshmem_*
                     the files that 0001 adds, byte for byte
  xla_edits/NNNN-*.edits
                     each patch's message and its edits of upstream files
                     (format below)
  TARGETS below      the Bazel targets 0001 adds to the package BUILD; their
                     deps are derived from the sources' #include lines

Outputs (generated, never edit them by hand): xla_patches/NNNN-*.patch,
xla_patches/BUILD.bazel and WORKSPACE.

Without PIN, the upstream lines come from the committed patches' own hunks
(their context and removed lines at their line numbers). That is enough to
regenerate and check every hunk as long as the edits' anchors and context stay
inside lines the committed hunks already show; the post-image blob hash of an
upstream file is then taken over from the committed patch. An edit that needs
more of the upstream file than that fails with a message that asks for PIN.
With PIN, everything is computed from the upstream files, whose blob hashes
must be the pin's (UPSTREAM below).

Edits format, one file per patch. Lines starting with "@@ " are directives;
every other line is text:

  @@ subject <one line>
  @@ message                 the commit message body, up to "@@ end"
  @@ new-files               the patch adds the xla_src/ sources (0001 only)
  @@ file <path>             the upstream file the edits below change
  @@ after | before | replace
  <anchor lines>             consecutive lines that occur once in the file
  @@ insert | with           (replace takes "with")
  <new lines>                up to "@@ end"
  @@ insert bazel-targets    (instead of a body) TARGETS as BUILD text
  @@ # <comment>
"""

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "xla/backends/gpu/transforms/collectives"
SRC_DIR = ROOT / "xla_src" / PKG
EDITS_DIR = ROOT / "xla_edits"

XLA_COMMIT = "3cc8846c10052cc1c32c4db87866eac4e4cdbccd"
# sha256 of https://github.com/openxla/xla/archive/<XLA_COMMIT>.tar.gz, as
# jax v0.9.1's third_party/xla/revision.bzl records it (XLA_SHA256).
XLA_SHA256 = "68759a08c3f0793dffd2ec917fb20a657bc85c2cbf7e69e0178c35535d1fd143"

# The upstream files the series changes: path -> (blob at XLA_COMMIT, lines).
UPSTREAM = {
    "xla/backends/gpu/transforms/collectives/BUILD":
        ("da9ce1ce8a01c575d86cc0584ec8dceebb11a236", 732),
    "xla/backends/gpu/transforms/collectives/collective_backend_assigner.cc":
        ("a86eca24aa28bd6eeb2d8e3e03d2fd55c12561ba", 126),
    "xla/backends/gpu/transforms/collectives/collective_backend_assigner_test.cc":
        ("061d5c361983c78caa103adfad2ed66f614fb8c5", 251),
    "xla/debug_options_flags.cc": ("000c0294c55e360139da59ef15bbfbe743189081", 3093),
    "xla/service/gpu/BUILD": ("6e64d7e48c3fc2447f617654078005a8d1b5998d", 3618),
    "xla/service/gpu/gpu_compiler.cc": ("60467c6cd65d50c66631d53845e1600a041cd2d0", 3471),
    "xla/xla.proto": ("08070f78f203b1533a2acf325811a5507133ee35", 1844),
}

AUTHOR = "NVSHMEM pass authors <nvshmem-pass@invalid>"
DATE = "Thu, 1 Jan 2026 00:00:00 +0000"
ZERO_FROM = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001"
CONTEXT = 3  # lines of context around each change, as git diff

# Targets, in the order they are declared. "std_only" targets may include only
# standard headers and their own package's files.
TARGETS = [
    {
        "rule": "cc_library",
        "name": "nvshmem_backend_selection",
        "srcs": ["nvshmem_backend_selection.cc"],
        "hdrs": ["nvshmem_backend_selection.h"],
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

# Quoted include -> Bazel label (XLA's naming at the pin). Prefix entries end with "/".
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
    "xla/service/computation_placer.h": "//xla/service:computation_placer",
    "xla/service/hlo_module_config.h": "//xla/service:hlo_module_config",
    "xla/service/hlo_verifier.h": "//xla/service:hlo_verifier",
    "xla/shape.h": "//xla:shape_util",
    "xla/shape_util.h": "//xla:shape_util",
    "xla/status_macros.h": "//xla:status_macros",
    "xla/stream_executor/cuda/cuda_compute_capability.h":
        "//xla/stream_executor/cuda:cuda_compute_capability",
    "xla/stream_executor/device_description.h": "//xla/stream_executor:device_description",
    "xla/tsl/lib/core/status_test_util.h": "//xla/tsl/lib/core:status_test_util",
    "xla/tsl/platform/env.h": "//xla/tsl/platform:env",
    "xla/tsl/platform/errors.h": "//xla/tsl/platform:errors",
    "xla/tsl/platform/status_macros.h": "//xla/tsl/platform:status_macros",
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
HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class GenError(Exception):
    pass


class NeedPin(GenError):
    pass


# ----------------------------------------------------------------------------
# Sources (the working tree, or one commit of it with --sources-rev)

SOURCES_REV = None


def _git(*args, git_dir=None, check=True):
    cmd = ["git"] + (["--git-dir", str(git_dir)] if git_dir else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, cwd=ROOT)
    if check and r.returncode != 0:
        raise GenError(f"{' '.join(cmd)}: {r.stderr.decode().strip()}")
    return r


def source_names():
    if SOURCES_REV:
        out = _git("ls-tree", "--name-only", SOURCES_REV, f"xla_src/{PKG}/").stdout
        return sorted(Path(p).name for p in out.decode().split() if Path(p).name.startswith("nvshmem_"))
    return sorted(p.name for p in SRC_DIR.glob("nvshmem_*") if p.is_file())


def read_source(name):
    if SOURCES_REV:
        return _git("show", f"{SOURCES_REV}:xla_src/{PKG}/{name}").stdout
    return (SRC_DIR / name).read_bytes()


def source_files():
    """Files that 0001 adds (names relative to PKG), sorted."""
    names = []
    for t in TARGETS:
        for key in ("hdrs", "srcs"):
            names.extend(t.get(key, []))
    on_disk = source_names()
    unlisted = [n for n in on_disk if n not in names]
    if unlisted:
        raise GenError(f"xla_src/{PKG}/{unlisted[0]} is not in any target of "
                       "scripts/gen_patches.py TARGETS")
    missing = [n for n in names if n not in on_disk]
    if missing:
        raise GenError(f"xla_src/{PKG}/{missing[0]} is missing")
    return sorted(names)


# ----------------------------------------------------------------------------
# Bazel targets


def label_sort_key(label):
    # buildifier order: local labels, then //labels, then @repo//labels.
    if label.startswith(":"):
        return (0, "", label[1:])
    phase = 1 if label.startswith("//") else 2
    pkg, _, name = label.partition(":")
    return (phase, pkg, name)


def source_includes(name):
    """[(kind, include)] of one source, kind '<' or '"'."""
    return [(m.group(1).decode(), m.group(2).decode())
            for m in INCLUDE_RE.finditer(read_source(name))]


def label_for(inc):
    label = INCLUDE_DEPS.get(inc)
    if label is None:
        for prefix, lab in INCLUDE_DEPS.items():
            if prefix.endswith("/") and inc.startswith(prefix):
                return lab
    return label


def derive_deps(target):
    own = set(target.get("srcs", [])) | set(target.get("hdrs", []))
    owner = {n: t["name"] for t in TARGETS if t["rule"] == "cc_library"
             for n in t.get("hdrs", [])}
    deps = set()
    has_main = False
    for name in target.get("srcs", []) + target.get("hdrs", []):
        has_main = has_main or bool(MAIN_RE.search(read_source(name)))
        for kind, inc in source_includes(name):
            close = ">" if kind == "<" else '"'
            where = f"xla_src/{PKG}/{name}: #include {kind}{inc}{close}"
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
            label = label_for(inc)
            if label is None:
                raise GenError(f"{where}: no Bazel label known; add it to "
                               "INCLUDE_DEPS in scripts/gen_patches.py")
            deps.add(label)
    # The core stays free of XLA (the Python binding builds it outside XLA).
    non_absl = sorted(d for d in deps if not d.startswith("@com_google_absl//"))
    if target["name"] == "nvshmem_backend_selection" and non_absl:
        raise GenError(f"target {target['name']} must depend on the standard library "
                       f"and absl only, but its sources need {non_absl[0]}")
    if target["rule"] == "xla_cc_test" and not has_main:
        deps.discard(GTEST)
        deps.add(GTEST_MAIN)
    return sorted(deps, key=label_sort_key)


def str_list(items, indent):
    if len(items) == 1:
        return f'["{items[0]}"]'
    pad = " " * (indent + 4)
    inner = "".join(f'{pad}"{i}",\n' for i in items)
    return "[\n" + inner + " " * indent + "]"


def render_target(target):
    lines = [f"{target['rule']}(", f'    name = "{target["name"]}",']
    for key in ("srcs", "hdrs"):
        if target.get(key):
            lines.append(f"    {key} = {str_list(target[key], 4)},")
    deps = derive_deps(target)
    if deps:
        lines.append(f"    deps = {str_list(deps, 4)},")
    lines.append(")")
    return "\n".join(lines)


def bazel_targets_lines():
    """TARGETS as BUILD text, each followed by a blank line."""
    text = "\n\n".join(render_target(t) for t in TARGETS) + "\n\n"
    return text.encode().split(b"\n")[:-1]


GENERATED_INSERTS = {"bazel-targets": bazel_targets_lines}


# ----------------------------------------------------------------------------
# Edits files


class Edit:
    def __init__(self, where, path, kind, anchor, new):
        self.where, self.path, self.kind = where, path, kind
        self.anchor, self.new = anchor, new


class PatchSpec:
    def __init__(self, source):
        self.source = source  # the .edits file, relative to ROOT
        self.subject = None
        self.message = None
        self.new_files = False
        self.edits = []


def parse_edits(path):
    """PatchSpec of one .edits file; GenError naming file:line on bad input."""
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    spec = PatchSpec(str(rel))
    lines = path.read_bytes().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    i, cur_file = 0, None

    def fail(n, msg):
        raise GenError(f"{rel}:{n + 1}: {msg}")

    def block(start):
        """Text lines from `start` to the next directive; (lines, index of it)."""
        j = start
        while j < len(lines) and not lines[j].startswith(b"@@ "):
            j += 1
        return lines[start:j], j

    while i < len(lines):
        line = lines[i]
        if not line.startswith(b"@@ "):
            if line.strip():
                fail(i, "text outside a block; directives start with '@@ '")
            i += 1
            continue
        word, _, arg = line[3:].decode().partition(" ")
        if word == "#":
            i += 1
        elif word == "subject":
            spec.subject = arg.strip()
            i += 1
        elif word == "message":
            body, j = block(i + 1)
            if j >= len(lines) or lines[j] != b"@@ end":
                fail(i, "message without '@@ end'")
            spec.message = b"\n".join(body).decode()
            i = j + 1
        elif word == "new-files":
            spec.new_files = True
            i += 1
        elif word == "file":
            cur_file = arg.strip()
            if cur_file not in UPSTREAM:
                fail(i, f"{cur_file} is not in UPSTREAM of scripts/gen_patches.py")
            i += 1
        elif word in ("after", "before", "replace"):
            if cur_file is None:
                fail(i, f"'{word}' before any '@@ file'")
            anchor, j = block(i + 1)
            if not anchor:
                fail(i, "empty anchor")
            want = "with" if word == "replace" else "insert"
            if j >= len(lines):
                fail(i, f"anchor without '@@ {want}'")
            w2, _, arg2 = lines[j][3:].decode().partition(" ")
            if w2 != want:
                fail(j, f"expected '@@ {want}' after the anchor of '{word}'")
            if arg2.strip():
                gen = GENERATED_INSERTS.get(arg2.strip())
                if gen is None:
                    fail(j, f"unknown generated insert '{arg2.strip()}'")
                new, k = gen, j + 1
            else:
                new, k = block(j + 1)
                if k >= len(lines) or lines[k] != b"@@ end":
                    fail(j, f"'@@ {want}' without '@@ end'")
                k += 1
            spec.edits.append(Edit(f"{rel}:{i + 1}", cur_file, word, anchor, new))
            i = k
        else:
            fail(i, f"unknown directive '{word}'")
    if not spec.subject:
        raise GenError(f"{rel}: no '@@ subject'")
    if spec.message is None:
        raise GenError(f"{rel}: no '@@ message'")
    return spec


def edits_files():
    files = sorted(EDITS_DIR.glob("[0-9][0-9][0-9][0-9]-*.edits"))
    if not files:
        raise GenError(f"no edits files in {EDITS_DIR.relative_to(ROOT)}/")
    for n, f in enumerate(files, 1):
        if not f.name.startswith(f"{n:04d}-"):
            raise GenError(f"xla_edits/{f.name}: expected number {n:04d}")
    return files


# ----------------------------------------------------------------------------
# Upstream files: full (from PIN) or sparse (from the committed hunks)


class FullFile:
    def __init__(self, path, data):
        self.path = path
        if not data.endswith(b"\n"):
            raise GenError(f"{path} at the pin does not end with a newline")
        self.lines = data.split(b"\n")[:-1]
        self.count = len(self.lines)
        self.post_blob = None

    def line(self, i):
        return self.lines[i]

    def find(self, anchor, kind):
        n = len(anchor)
        return [i for i in range(self.count - n + 1) if self.lines[i:i + n] == anchor]


class SparseFile:
    """The lines of an upstream file that a committed patch shows."""

    def __init__(self, path, count, known, committed_diff):
        self.path, self.count, self.known = path, count, known
        self.committed_diff = committed_diff

    def line(self, i):
        if i not in self.known:
            raise NeedPin(f"{self.path}: line {i + 1} is not in the committed patch")
        return self.known[i]

    def find(self, anchor, kind):
        # Only the lines next to a change are sure to be in a hunk: those must
        # be known and equal; the other anchor lines must be equal if known.
        n = len(anchor)
        if kind == "after":
            needed = range(max(0, n - CONTEXT), n)
        elif kind == "before":
            needed = range(min(n, CONTEXT))
        else:
            needed = range(n)
        hits = []
        for i in sorted(self.known):
            for s in {i - k for k in needed}:
                if s < 0 or s in hits:
                    continue
                if all(self.known.get(s + k) == anchor[k] for k in needed) and all(
                        self.known.get(s + k, anchor[k]) == anchor[k] for k in range(n)):
                    hits.append(s)
        if not hits:
            raise NeedPin(f"{self.path}: an anchor is not in the committed patch")
        return sorted(hits)


class PinReader:
    """Upstream files at XLA_COMMIT from a git directory or a checkout."""

    def __init__(self, where):
        where = Path(where)
        self.git_dir = None
        for cand in (where, where / ".git"):
            r = _git("rev-parse", "--verify", "-q", f"{XLA_COMMIT}^{{commit}}",
                     git_dir=cand, check=False) if cand.exists() else None
            if r is not None and r.returncode == 0:
                self.git_dir = cand
                break
        self.tree = None if self.git_dir else where
        if self.tree is not None and not (where / "xla").is_dir():
            raise GenError(f"{where}: neither a git directory with {XLA_COMMIT[:8]} "
                           "nor an XLA checkout")

    def read(self, path):
        if self.git_dir is not None:
            data = _git("show", f"{XLA_COMMIT}:{path}", git_dir=self.git_dir).stdout
        else:
            p = self.tree / path
            if not p.is_file():
                raise GenError(f"{p}: missing")
            data = p.read_bytes()
        blob, count = UPSTREAM[path]
        if blob_hash(data) != blob:
            raise GenError(f"{path} in {self.git_dir or self.tree} is not the pin's "
                           f"(blob {blob_hash(data)[:10]}, want {blob[:10]})")
        f = FullFile(path, data)
        if f.count != count:
            raise GenError(f"{path}: {f.count} lines, UPSTREAM says {count}")
        return f

    def read_any(self, path):
        """Any file at the pin (no blob check)."""
        if self.git_dir is not None:
            return _git("show", f"{XLA_COMMIT}:{path}", git_dir=self.git_dir).stdout
        return (self.tree / path).read_bytes()

    def exists(self, path):
        if self.git_dir is not None:
            return _git("cat-file", "-e", f"{XLA_COMMIT}:{path}", git_dir=self.git_dir,
                        check=False).returncode == 0
        return (self.tree / path).is_file()


def parse_file_diffs(data):
    """{path: (index line, [hunk lines])} of the modified files in a patch."""
    out = {}
    chunks = re.split(rb"^diff --git ", data, flags=re.M)[1:]
    for chunk in chunks:
        lines = chunk.split(b"\n")
        path = lines[0].decode().split(" b/", 1)[1]
        if any(l.startswith(b"new file mode") for l in lines[1:4]):
            continue
        index = next((l.decode() for l in lines[1:3] if l.startswith(b"index ")), None)
        i = next((i for i, l in enumerate(lines) if l.startswith(b"@@ ")), None)
        if index is None or i is None:
            continue
        body = []
        while i < len(lines):
            m = HUNK_RE.match(lines[i].decode(errors="replace"))
            if not m:
                break
            old = int(m.group(2) or 1)
            new = int(m.group(4) or 1)
            body.append(lines[i])
            i += 1
            while (old or new) and i < len(lines):
                l = lines[i]
                body.append(l)
                i += 1
                if l.startswith(b" "):
                    old, new = old - 1, new - 1
                elif l.startswith(b"-"):
                    old -= 1
                elif l.startswith(b"+"):
                    new -= 1
                else:
                    break
        out[path] = (index, body)
    return out


def sparse_from_patches(patch_dir):
    """{path: SparseFile} from the committed patches in patch_dir."""
    files = {}
    for patch in sorted(patch_dir.glob("*.patch")):
        for path, (index, body) in parse_file_diffs(patch.read_bytes()).items():
            if path not in UPSTREAM:
                continue
            known = {}
            old = None
            for l in body:
                m = HUNK_RE.match(l.decode(errors="replace"))
                if m:
                    old = int(m.group(1)) - 1 if m.group(2) != "0" else int(m.group(1))
                    continue
                if old is None:
                    continue
                if l.startswith((b" ", b"-")):
                    known[old] = l[1:]
                    old += 1
            files[path] = SparseFile(path, UPSTREAM[path][1], known, (index, body))
    return files


# ----------------------------------------------------------------------------
# Diffs


def blob_hash(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def new_file_diff(path, data):
    out = [f"diff --git a/{path} b/{path}", "new file mode 100644",
           f"index 0000000000000000000000000000000000000000..{blob_hash(data)}"]
    if not data:
        return "\n".join(out).encode() + b"\n"
    out += ["--- /dev/null", f"+++ b/{path}"]
    lines = data.split(b"\n")
    eol = data.endswith(b"\n")
    if eol:
        lines = lines[:-1]
    n = len(lines)
    out.append("@@ -0,0 +1 @@" if n == 1 else f"@@ -0,0 +1,{n} @@")
    head = "\n".join(out).encode() + b"\n"
    body = b"".join(b"+" + line + b"\n" for line in lines)
    if not eol:
        body += b"\\ No newline at end of file\n"
    return head + body


def locate(view, edit):
    """(start, old_len, new_lines) of one edit in an upstream file view."""
    hits = view.find(edit.anchor, edit.kind)
    if len(hits) != 1:
        if isinstance(view, SparseFile):
            raise NeedPin(f"{edit.where}: the anchor is ambiguous in the committed patch")
        raise GenError(f"{edit.where}: the anchor occurs {len(hits)} times in "
                       f"{edit.path}; it must occur once")
    i = hits[0]
    new = edit.new() if callable(edit.new) else edit.new
    if edit.kind == "after":
        return (i + len(edit.anchor), 0, new)
    if edit.kind == "before":
        return (i, 0, new)
    return (i, len(edit.anchor), new)


def hunk_range(start, count):
    # Unified diff: a range of no lines names the line before it.
    first = start + 1 if count else start
    return f"{first}" if count == 1 else f"{first},{count}"


def file_hunks(view, changes):
    """Hunk lines (bytes) of `changes` [(start, old_len, new_lines)] to `view`."""
    changes = sorted(changes, key=lambda c: c[0])
    for a, b in zip(changes, changes[1:]):
        if b[0] < a[0] + a[1]:
            raise GenError(f"{view.path}: two edits overlap")
    groups = []
    for c in changes:
        if groups and c[0] - (groups[-1][-1][0] + groups[-1][-1][1]) <= 2 * CONTEXT:
            groups[-1].append(c)
        else:
            groups.append([c])
    out, delta = [], 0
    for g in groups:
        lo = max(0, g[0][0] - CONTEXT)
        hi = min(view.count, g[-1][0] + g[-1][1] + CONTEXT)
        body, pos, old_n, new_n = [], lo, 0, 0
        for start, old_len, new in g:
            for k in range(pos, start):
                body.append(b" " + view.line(k))
            body += [b"-" + view.line(k) for k in range(start, start + old_len)]
            body += [b"+" + l for l in new]
            pos = start + old_len
        for k in range(pos, hi):
            body.append(b" " + view.line(k))
        old_n = hi - lo
        new_n = old_n + sum(len(n) - ol for _, ol, n in g)
        head = f"@@ -{hunk_range(lo, old_n)} +{hunk_range(lo + delta, new_n)} @@"
        out.append(head.encode())
        out += body
        delta += new_n - old_n
    return out


def apply_changes(view, changes):
    lines = list(view.lines)
    for start, old_len, new in sorted(changes, key=lambda c: -c[0]):
        lines[start:start + old_len] = new
    return b"\n".join(lines) + b"\n"


def modified_file_diff(view, changes):
    hunks = file_hunks(view, changes)
    pre = UPSTREAM[view.path][0]
    if isinstance(view, FullFile):
        post = blob_hash(apply_changes(view, changes))
        index = f"index {pre}..{post} 100644"
    else:
        index, body = view.committed_diff
        if body != hunks or not index.startswith(f"index {pre}.."):
            raise NeedPin(f"{view.path}: its hunks changed")
    head = [f"diff --git a/{view.path} b/{view.path}", index,
            f"--- a/{view.path}", f"+++ b/{view.path}"]
    return b"\n".join([l.encode() for l in head] + hunks) + b"\n"


# ----------------------------------------------------------------------------
# Patches


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


def build_patch(spec, views):
    """(file name, diffs) of one patch; `views` maps upstream path -> view."""
    diffs = []
    if spec.new_files:
        for name in source_files():
            diffs.append((f"{PKG}/{name}", new_file_diff(f"{PKG}/{name}", read_source(name))))
    by_file = {}
    for e in spec.edits:
        by_file.setdefault(e.path, []).append(e)
    for path, edits in by_file.items():
        view = views.get(path)
        if view is None:
            raise NeedPin(f"{path}: not in any committed patch")
        changes = [locate(view, e) for e in edits]
        diffs.append((path, modified_file_diff(view, changes)))
    diffs.sort()
    return [d for _, d in diffs]


def build_series(pin=None, patch_dir=None):
    """{relative output path: bytes} of every generated file.

    pin: a PinReader, or None to take upstream lines from the patches in
    patch_dir (default: xla_patches/ under ROOT)."""
    specs = [parse_edits(f) for f in edits_files()]
    touched = {}
    for s in specs:
        for e in s.edits:
            if touched.setdefault(e.path, s.source) != s.source:
                raise GenError(f"{e.path} is edited by {touched[e.path]} and {s.source}; "
                               "keep each upstream file in one patch")
    if pin is not None:
        views = {p: pin.read(p) for p in touched}
        check_includes_exist(pin)
        check_labels_exist(pin)
    else:
        views = sparse_from_patches(patch_dir or ROOT / "xla_patches")
    out, names = {}, []
    for n, spec in enumerate(specs, 1):
        fname = f"{n:04d}-{slug(spec.subject)}.patch"
        body = spec.message.rstrip("\n") + (
            "\n\nGenerated by scripts/gen_patches.py from the project's sources.\n")
        try:
            diffs = build_patch(spec, views)
        except NeedPin as e:
            raise NeedPin(f"xla_patches/{fname}: {e}; regenerate with --xla PIN "
                          "(openxla/xla at the pin)") from None
        out[f"xla_patches/{fname}"] = mail(n, len(specs), spec.subject, body, diffs)
        names.append(fname)
    out["xla_patches/BUILD.bazel"] = render_patches_build(names).encode()
    out["WORKSPACE"] = render_workspace(names).encode()
    return out


def check_includes_exist(pin):
    """Every quoted include of a new file exists at the pin or in the series."""
    ours = {f"{PKG}/{n}" for n in source_files()}
    for name in source_files():
        for kind, inc in source_includes(name):
            if kind == "<" or inc in ours:
                continue
            target = inc[:-len(".pb.h")] + ".proto" if inc.endswith(".pb.h") else inc
            if inc.startswith("xla/") and not pin.exists(target):
                raise GenError(f"xla_src/{PKG}/{name}: #include \"{inc}\" does not "
                               "exist at the pin")


def check_labels_exist(pin):
    """Every //label of the new targets names a target at the pin."""
    builds = {}
    for t in TARGETS:
        for label in derive_deps(t):
            if not label.startswith("//"):
                continue
            pkg, _, name = label[2:].partition(":")
            if pkg not in builds:
                builds[pkg] = next((pin.read_any(f"{pkg}/{b}") for b in ("BUILD", "BUILD.bazel")
                                    if pin.exists(f"{pkg}/{b}")), b"").decode()
            # Proto rules declare NAME and generate NAME_cc.
            names = {name, name[:-len("_cc")]} if name.endswith("_cc") else {name}
            if not any(f'name = "{n}"' in builds[pkg] for n in names):
                raise GenError(f"target {t['name']}: {label} is not declared at the pin; "
                               "fix INCLUDE_DEPS in scripts/gen_patches.py")


def render_patches_build(names):
    return ("# The patch series for openxla/xla, for WORKSPACE's http_archive.\n"
            "# Generated by scripts/gen_patches.py; do not edit.\n\n"
            "exports_files(" + str_list(names, 0) + ")\n")


def render_workspace(names):
    patches = str_list([f"//xla_patches:{n}" for n in names], 4)
    return f'''\
# Fetches openxla/xla at the pin and applies the patch series, for people who
# build with Bazel. Generated by scripts/gen_patches.py; do not edit.
#
# The pin is the XLA commit that jax v0.9.1 builds with (XLA_COMMIT and
# XLA_SHA256 in jax's third_party/xla/revision.bzl). This file only fetches
# and patches @xla; building targets of @xla also needs the repository setup
# of XLA's own WORKSPACE at that commit. Inside an XLA checkout, use `git am`
# instead (xla_patches/README.md).

workspace(name = "nvshmem_collective_permute_rewriter")

load("@bazel_tools//tools/build_defs/repo:http.bzl", "http_archive")

XLA_COMMIT = "{XLA_COMMIT}"

http_archive(
    name = "xla",
    patch_args = ["-p1"],
    patches = {patches},
    sha256 = "{XLA_SHA256}",
    strip_prefix = "xla-" + XLA_COMMIT,
    urls = ["https://github.com/openxla/xla/archive/%s.tar.gz" % XLA_COMMIT],
)
'''


# ----------------------------------------------------------------------------
# Reading new files back (tests and --check)


def new_files_in_patch(data):
    """{path: content} of the new-file diffs in a patch made by new_file_diff."""
    files = {}
    chunks = re.split(rb"^diff --git ", data, flags=re.M)[1:]
    for chunk in chunks:
        lines = chunk.split(b"\n")
        path = lines[0].decode().split(" b/", 1)[1]
        if not any(l.startswith(b"new file mode") for l in lines[1:4]):
            continue
        start = next((i for i, l in enumerate(lines) if l.startswith(b"@@ ")), None)
        if start is None:
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
            name = path[len(PKG) + 1:] if path.startswith(PKG + "/") else None
            if name not in source_names():
                return f"{patch.relative_to(root)}: {path} has no source in xla_src/"
            if read_source(name) != content:
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
            tmp = p.with_name(p.name + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, p)


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
    global SOURCES_REV
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="regenerate and fail (exit 1) if a committed output differs")
    ap.add_argument("--xla", metavar="PIN", default=os.environ.get("XLA_PIN"),
                    help="openxla/xla at the pin: a git directory holding the commit, "
                         "or a checkout (default: $XLA_PIN; without it, upstream "
                         "lines come from the committed patches)")
    ap.add_argument("--out-root", type=Path, default=ROOT,
                    help="where the outputs live (default: the repository root)")
    ap.add_argument("--sources-rev", metavar="REV",
                    help="read xla_src/ from this git revision instead of the work tree")
    args = ap.parse_args(argv)
    SOURCES_REV = args.sources_rev
    try:
        pin = PinReader(args.xla) if args.xla else None
        outputs = build_series(pin, args.out_root / "xla_patches")
        if args.check:
            bad = stale(args.out_root, outputs)
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
    except NeedPin as e:
        print(f"gen_patches: {e}", file=sys.stderr if not args.check else sys.stdout)
        return 1 if args.check else 2
    except GenError as e:
        print(f"gen_patches: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
