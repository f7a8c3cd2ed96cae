"""hlo-tools report: the whole story on small shapes, the page in headless Chromium."""

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from hlo_tools import report

REPO = Path(__file__).resolve().parents[1]
DRIVER = REPO / "build" / "nvshmem-opt"
SMALL = ["--seq_len=4096", "--num_heads=4", "--num_kv_heads=2", "--head_dim=64"]
CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium") or "",
                             shutil.which("chromium-browser") or "") if p and os.path.exists(p)),
                None)


@pytest.fixture(scope="session")
def small_report(tmp_path_factory):
  if not DRIVER.exists():
    pytest.skip("nvshmem-opt is not built")
  out = tmp_path_factory.mktemp("report") / "r"
  proc = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-m", "hlo_tools.cli",
                         "report", f"--out={out}", "--quiet", *SMALL], capture_output=True,
                        text=True, check=False, cwd=REPO, timeout=300)
  return out, proc


def test_report_directory(small_report):
  out, proc = small_report
  assert proc.returncode == 0, proc.stderr
  assert "verify: all checks pass" in proc.stdout
  # K and V (512 tokens x 2 heads x 64 x bf16 each) combined into one permute.
  assert re.search(r"%\S+ \(256\.0 KiB/device x8 trips; nvlink 6, network 2\): nccl",
                   proc.stdout), proc.stdout
  data = json.loads((out / "report.json").read_text())
  assert data["config"]["seq_len"] == 4096 and data["topology"] == "1x2x4"
  for name in data["files"] + ["index.html"]:
    assert (out / name).is_file(), name
  assert data["summary"]["verify_passed"]
  perms = data["summary"]["collective_permutes"]
  assert perms and all(p["choice"]["plan"] == "nccl" for p in perms)
  explained = json.loads((out / "json" / "explain.json").read_text())
  assert len(explained["collectives"]) == len(perms)
  trace = json.loads((out / "json" / "trace.json").read_text())
  assert trace["final"] and trace["events"]
  page = (out / "index.html").read_text()
  assert "<script" not in page and "<svg" in page and "id=\"decisions\"" in page


def test_one_host_chooses_nvshmem(tmp_path):
  if not DRIVER.exists():
    pytest.skip("nvshmem-opt is not built")
  out = tmp_path / "r"
  rc = report.main(["hlo-tools report", f"--out={out}", "--topology=1x8", "--quiet", *SMALL])
  assert rc == 0
  data = json.loads((out / "report.json").read_text())
  assert data["topology"] == "1x1x8"
  assert {p["choice"]["plan"] for p in data["summary"]["collective_permutes"]} == {"nvshmem"}
  verify = json.loads((out / "json" / "verify_before_async.json").read_text())
  assert {c["name"]: c["status"] for c in verify["checks"]}["nvlink-domain"] == "pass"


def test_bad_options(capsys, tmp_path):
  rc = report.main(["hlo-tools report", f"--out={tmp_path / 'r'}", "--topology=two-by-four"])
  _, err = capsys.readouterr()
  assert rc == 2 and "bad --topology" in err and len(err.strip().splitlines()) == 1
  rc = report.main(["hlo-tools report", f"--out={tmp_path / 'r'}", "--quiet",
                    "--seq_len=1001", "--num_heads=4", "--num_kv_heads=2", "--head_dim=64"])
  _, err = capsys.readouterr()
  assert rc == 2 and "not divisible" in err and len(err.strip().splitlines()) == 1
  assert not (tmp_path / "r").exists()
  keep = tmp_path / "precious"
  keep.mkdir()
  (keep / "notes.txt").write_text("mine")
  rc = report.main(["hlo-tools report", f"--out={keep}", "--quiet", *SMALL])
  _, err = capsys.readouterr()
  assert rc == 2 and "refusing to replace" in err
  assert (keep / "notes.txt").read_text() == "mine"


def chromium(*args, timeout=90):
  profile = tempfile.mkdtemp(prefix="chromium-profile-")
  try:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=timeout, check=False)
  finally:
    shutil.rmtree(profile, ignore_errors=True)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_page_in_headless_chromium(small_report, tmp_path):
  out, proc = small_report
  assert proc.returncode == 0, proc.stderr
  url = (out / "index.html").as_uri()
  dom = chromium("--enable-logging=stderr", "--v=0", "--dump-dom", url)
  assert dom.returncode == 0, dom.stderr[-2000:]
  # Console messages and script errors land on stderr as CONSOLE(...) / Uncaught.
  assert not re.search(r"Uncaught|CONSOLE\(|console", dom.stderr), dom.stderr[-2000:]
  table = dom.stdout[dom.stdout.index("id=\"decisions\""):]
  table = table[:table.index("</table>")]
  data = json.loads((out / "report.json").read_text())
  for p in data["summary"]["collective_permutes"]:
    assert f"%{p['instruction']}" in table
  assert "nccl" in table
  shot = tmp_path / "report.png"
  snap = chromium(f"--screenshot={shot}", "--window-size=1400,2000", url)
  assert snap.returncode == 0, snap.stderr[-2000:]
  assert shot.stat().st_size > 20000
  keep = os.environ.get("HLO_TOOLS_REPORT_SCREENSHOT")
  if keep:
    shutil.copyfile(shot, keep)
