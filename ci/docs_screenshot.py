"""Remake docs/docs-site.png: the home page of the manual as built (issue 65, item 4).

    python ci/docs_screenshot.py [--out docs/docs-site.png]

Builds the site as `make docs` does (`mkdocs build --strict`, here into a
temporary directory) and opens its index.html from the disk in headless
Chromium, as ci/screenshots.py does the HTML report's pages (Debian's
chromium and chromedriver: ci/install_browser.sh installs them).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ci"))
sys.path.insert(0, str(ROOT))

from screenshots import shoot  # noqa: E402  (the same browser, flags and window width)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "docs-site.png")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                              cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
                              capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"mkdocs build --strict failed (fix what it names, then run this again):\n"
                     f"{done.stdout}{done.stderr}")
        shoot(site / "index.html", "", args.out.resolve(), height=1000)


if __name__ == "__main__":
    main()
