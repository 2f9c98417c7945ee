"""Remake docs/ci-summary-script.png: the step summary of a matrix.json, rendered as GitHub shows it.

    python ci/summary_screenshot.py [MATRIX_JSON] [--out PNG] [--root DIR]

Takes the Markdown `ckpt-harness summary MATRIX_JSON --root DIR` writes
(`ckpt_harness.present.ci.summary`, as tests/test_ci_output.py renders it),
renders it as GitHub renders a step summary (CommonMark with tables, HTML
kept: markdown_it), opens the first finding's `<details>` and takes a
screenshot in headless Chromium with ci/screenshots.py's `shoot()` (Debian's
chromium and chromedriver: ci/install_browser.sh installs them).

The default matrix, docs/ci-summary-script.json, is a failing script matrix
(docs/ci.md, "Output for CI", names the command that made it), run from the
repository root so that its scripts' paths are relative.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "ci"))
sys.path.insert(0, str(ROOT))

from screenshots import shoot  # noqa: E402  (the same browser, flags and window width)

from ckpt_harness.present import ci  # noqa: E402


def page(data: dict, root: Path) -> str:
    """The summary as a page: GitHub's rendering of it, its first finding open."""
    import markdown_it

    body = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(ci.summary(data, root=root))
    body = body.replace("<details>", "<details open>", 1)  # as a click on its <summary> opens it
    return f"<!doctype html><meta charset=utf-8><body style='font:14px sans-serif'>{body}</body>"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("matrix", type=Path, nargs="?", default=DOCS / "ci-summary-script.json",
                        help="a matrix.json (default: docs/ci-summary-script.json)")
    parser.add_argument("--out", type=Path, default=DOCS / "ci-summary-script.png")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="summary's --root: the repository root (default: this one)")
    args = parser.parse_args()
    try:
        data = json.loads(args.matrix.read_text())
    except (OSError, ValueError) as exc:
        sys.exit(f"cannot read {args.matrix}: {exc}")
    with tempfile.TemporaryDirectory(prefix="ckpt-summary-") as tmp:
        html = Path(tmp) / "summary.html"
        html.write_text(page(data, args.root.resolve()), encoding="utf-8")
        shoot(html, "", args.out.resolve())


if __name__ == "__main__":
    main()
