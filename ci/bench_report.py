"""How fast the HTML report of a whole matrix is made and opened, against
the naive page, measured in the same run (docs/speed.md).

    python ci/bench_report.py MATRIX_DIR      # the --out of `ckpt-harness matrix` (matrix.json, timelines/)

The naive page holds every case's timeline in full; the report holds each
run's tracks once, however many cases draw them (a scenario's cases share
its golden run). For each page: the time to make it from matrix.json and its
timeline files, its size, and in headless Chromium (Debian's, as the tests
use it) the time until its load event and the time to open its largest case
(the click, the timeline drawn). Each browser measurement is the median of 3.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ckpt_harness.catalogue.matrix import load  # noqa: E402
from ckpt_harness.present import html  # noqa: E402
from tests.test_html_report import FLAGS  # noqa: E402


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in FLAGS:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"),
                            options=options)


def opened(chrome, page: Path, case: str) -> tuple[float, float]:
    """Seconds to the load event of `page`, and to show `case` with its timeline drawn."""
    chrome.get("about:blank")
    chrome.get(page.as_uri())
    load_ms = chrome.execute_script("const n = performance.getEntriesByType('navigation')[0]; "
                                    "return n.loadEventEnd - n.startTime;")
    started = time.perf_counter()
    chrome.execute_script(f"location.hash = {case!r};")
    chrome.execute_script("return document.querySelector('section.shown svg.timeline-svg') !== null")
    while not chrome.execute_script("return document.querySelector('section.shown svg.timeline-svg') !== null"):
        time.sleep(0.005)
    return load_ms / 1e3, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("matrix", type=Path, help="the directory of a matrix.json (with its timelines/)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/ckpt-bench-report"))
    args = parser.parse_args()
    matrix = load(args.matrix)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    chrome = browser()
    try:
        for name, share in (("report (tracks held once)", True), ("naive (every case in full)", False)):
            started = time.perf_counter()
            page = html.matrix_page(matrix, args.matrix, share=share)
            path = html.write(page, args.out / f"matrix-{'shared' if share else 'naive'}.html")
            made = time.perf_counter() - started
            heaviest = max((c for c in page.all_cases if c.timeline), key=lambda c: len(c.timeline or ""))
            loads, cases = zip(*(opened(chrome, path, heaviest.id) for _ in range(3)))
            timelines = sum(1 for c in page.all_cases if c.timeline)
            rows.append((name, made, path.stat().st_size / 2**20, statistics.median(loads),
                         statistics.median(cases), timelines))
    finally:
        chrome.quit()
    cases = sum(r.cases for r in matrix.results)
    print(f"matrix: {len(matrix.names)} rows, {len(matrix.results)} scenarios, {cases} cases; "
          f"{rows[0][5]} cases with a timeline")
    print("| page | made in | size | load event | open the largest case |\n|---|---|---|---|---|")
    for name, made, size, load_s, case_s, _ in rows:
        print(f"| {name} | {made:.1f} s | {size:.1f} MB | {load_s:.2f} s | {case_s:.2f} s |")
    (shared, naive) = rows
    print(f"\nnaive / report: size {naive[2] / shared[2]:.1f}x, load {naive[3] / shared[3]:.1f}x")


if __name__ == "__main__":
    main()
