"""Remake the screenshots of the HTML report in docs/ (docs/ci.md, "Timelines and the HTML report").

    python ci/screenshots.py [--matrix PATH/matrix.html]

Three pages, each made by the command a user would run, opened in headless
Chromium (Debian's, as the tests use it) at one window size:

- docs/report-matrix.png: a matrix's grid (`--matrix`: the page `ckpt-harness
  matrix --html` wrote over the whole catalogue; default: a small matrix of
  the built-in torch_save and dcp jobs made here);
- docs/report-power-loss.png: the power-loss case behind the DCP `.metadata`
  finding (docs/findings.md), its faulted run cut where the power went;
- docs/report-hang.png: a hang injected into torch_save's save: rank 0
  blocked by the fault, rank 1 waiting in its barrier until the cut.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT))

from tests.test_html_report import FLAGS  # noqa: E402  (the flags the browser tests use)

POWER_LOSS = ["explore", "--job", "tests.planted.dcp_jobs:SmallDcpAlone", "--faults", "power-loss", "--corruptions",
              "", "--ops", "rename", "--no-derive-states", "--no-after"]
HANG = ["explore", "--job", "torch_save", "--steps", "4", "--faults", "hang", "--corruptions", "", "--case",
        "hang@r0:save4/fsync(.)", "--timelines", "all"]
SMALL_MATRIX = ["matrix", "--job", "torch_save", "--job", "dcp", "--scenarios",
                "crash-every-phase,missing-shard,power-loss-after-save,unsafe-load,resume-every-save"]


def harness(args: list[str], cwd: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "ckpt_harness.cli", *args, "--quiet"], cwd=cwd, env=env,
                          capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"ckpt-harness {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")


def shoot(page: Path, fragment: str, out: Path, case_text: str = "", height: int = 0) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in FLAGS:
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"),
                               options=options)
    try:
        browser.get(page.as_uri() + "#top")
        if case_text:  # the first failing case whose name holds case_text, reached by a click
            link = next(a for a in browser.find_elements(By.CSS_SELECTOR, "table.cases a") if case_text in a.text)
            link.click()
        elif fragment:
            browser.get(page.as_uri() + "#" + fragment)
        time.sleep(0.5)
        height = height or browser.execute_script("return document.documentElement.scrollHeight") + 150
        browser.set_window_size(1400, min(max(height, 500), 1400))
        time.sleep(0.3)
        browser.save_screenshot(str(out))
    finally:
        browser.quit()
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, help="a matrix.html to take the grid of (default: make a small one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ckpt-screens-") as tmp:
        work = Path(tmp)
        matrix = args.matrix
        if matrix is None:
            harness([*SMALL_MATRIX, "--out", "out", "--html", "matrix.html"], work)
            matrix = work / "matrix.html"
        shoot(matrix, "top", DOCS / "report-matrix.png", height=640)
        harness([*POWER_LOSS, "--html", "power.html", "--keep", "none", "--timeline-dir", "tl"], work)
        shoot(work / "power.html", "", DOCS / "report-power-loss.png", case_text="power-loss@")
        harness([*HANG, "--html", "hang.html", "--keep", "none", "--timeline-dir", "tl"], work)
        shoot(work / "hang.html", "", DOCS / "report-hang.png", case_text="hang@")


if __name__ == "__main__":
    main()
