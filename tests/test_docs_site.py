"""The manual is a built site whose links are checked (issue 65, item 4).

`make docs` (run by `make test`) builds docs/ with `mkdocs build --strict`,
and mkdocs.yml's `validation:` turns a link to a missing page, a missing
anchor, an absolute link and a page left out of the nav into warnings, which
--strict makes a failure. Shown both ways: the real docs build clean, and a
copy of them with one dead link, one dead anchor or one renamed page fails,
naming it. The README, which is not part of the site, is held to the same
rule by hand: every relative link in it resolves to a file of the
repository, none leaves it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

try:
    import material  # noqa: F401  (the theme mkdocs.yml names)
    import mkdocs  # noqa: F401
    MISSING = None
except ImportError as e:  # pragma: no cover - depends on the install
    MISSING = (f"{e.name} is not installed: the manual is built with MkDocs and the Material theme; "
               f"install the dev extra (`pip install -c constraints.txt -e '.[dev]'`, or `make test`)")

needs_mkdocs = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of the mkdocs.yml in root, into site, as `make docs` runs it."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(root / "mkdocs.yml"), "--site-dir", str(site)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def copy_of_the_docs(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy2(ROOT / "mkdocs.yml", root / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", root / "docs")
    return root


@needs_mkdocs
def test_the_real_docs_build_clean(tmp_path):
    done = build(ROOT, tmp_path / "site")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "WARNING" not in out, out
    home = (tmp_path / "site" / "index.html").read_text()
    assert "ckpt_harness" in home and "getting-started.html" in home
    for page in ("getting-started", "scripts", "jobs", "pytest", "properties", "scenarios", "ci", "ci-recipes",
                 "storage", "extending", "findings", "matrix", "speed", "speed-archive", "how-it-works",
                 "probes", "trust"):
        assert (tmp_path / "site" / f"{page}.html").is_file(), page


# Each breaks the copy one way a change to the docs can, and what the failure must name. One build
# takes them all: a strict build lists every warning before it aborts, and any one warning aborts it,
# so each named here fails the build alone too.
BROKEN = {
    "dead link": ("\nSee [the gone page](no-such-page.md).\n",
                  "'pytest.md' contains a link 'no-such-page.md', but the target is not found"),
    "dead anchor": ("\nSee [CI](ci.md#no-such-section).\n",
                    "'pytest.md' contains a link 'ci.md#no-such-section', but the doc 'ci.md' does not contain an "
                    "anchor '#no-such-section'"),
    "absolute link": ("\nSee [CI](/ci.md).\n", "'pytest.md' contains an absolute link '/ci.md'"),
    "renamed page": (None, "contains a link 'ci-recipes.md', but the target is not found"),
}


def broken_build(tmp_path: Path, *hows: str) -> str:
    root = copy_of_the_docs(tmp_path)
    for how in hows:
        text, _ = BROKEN[how]
        if text is None:
            (root / "docs" / "ci-recipes.md").rename(root / "docs" / "ci-shards.md")
        else:
            with (root / "docs" / "pytest.md").open("a") as f:
                f.write(text)
    done = build(root, tmp_path / "site")
    out = done.stdout + done.stderr
    assert done.returncode != 0, f"{', '.join(hows)}: the strict build passed:\n{out}"
    assert "Aborted with" in out and "in strict mode" in out, out
    return out


@needs_mkdocs
def test_dead_links_and_anchors_fail_the_build_naming_each(tmp_path):
    out = broken_build(tmp_path, *BROKEN)
    for how, (_, named) in BROKEN.items():
        assert named in out, f"{how}: not named:\n{out}"


LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_readme_links_stay_in_the_repository():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150, "the README is the front door: at most 150 lines, the rest in docs/"
    links = LINK.findall(text)
    assert links
    for link in links:
        assert not re.match(r"[a-z]+:", link), f"README links outside the repository: {link}"
        path, _, anchor = link.partition("#")
        target = (ROOT / path).resolve()
        assert target.is_relative_to(ROOT), f"README links outside the repository: {link}"
        assert target.exists(), f"README links to {link}, which does not exist"
        if anchor and path.endswith(".md"):  # the anchor mkdocs makes of a heading (toc's slugify)
            slugs = {re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", h).strip().lower())
                     for h in re.findall(r"^#+ (.*)$", target.read_text(), re.M)}
            assert anchor in slugs, f"README links to {link}: {path} has no heading with that anchor"
    # never the bare `pip install torch` that pulls CUDA wheels on a CPU box: torch from an index URL
    code = "\n".join(re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S))
    torch_installs = [line for line in code.splitlines() if re.search(r"pip install [^#]*\btorch\b", line)]
    assert torch_installs, "README's install installs no torch"
    for line in torch_installs:
        assert "--index-url" in line, f"README installs torch without the index of a build: {line}"
