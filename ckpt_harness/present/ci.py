"""What CI shows of a run: a step summary, annotations, a repro and an issue draft per finding.

A CI job keeps files (matrix.json, the HTML page, timelines); a person
reading the job's page wants the verdict, the table and what failed, where
GitHub shows it: the step summary (Markdown, at most 1 MiB per step, so a
whole built-in matrix is trimmed to fit), annotations (`::error` lines,
at the user's file and line when a finding names one that exists in the
workspace), and for each finding a standalone reproduction (`repro.sh`:
the command, from the repository root, local paths made relative) and an
`ISSUE.md` a user can paste into a framework's tracker.

Input: a matrix.json (`matrix`) or a report's JSON (`run`, `explore`,
`scenario --json`). Torch-free: it reads JSON only.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ckpt_harness.report import one_line

#: GitHub's limit on one step's summary.
LIMIT = 1 << 20
#: What this writes at most: the limit with room for what else a step appends.
BUDGET = 900_000
#: A call site a reason names: "inline_save.py:72 in <module>()", "checkpointers.py:82".
_SITE = re.compile(r"([\w.-]+\.py):(\d+)")


@dataclasses.dataclass(frozen=True)
class Finding:
    """One failing matrix cell or case: what a person acts on."""

    title: str
    verdict: str
    reason: str
    repro: Optional[str]
    details: str = ""

    @property
    def sites(self) -> list[tuple[str, int]]:
        """The user's call sites its reason names (file name, line), in order, each once."""
        return list(dict.fromkeys((name, int(line)) for name, line in _SITE.findall(self.reason)))

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9]+", "-", self.title).strip("-").lower()[:60]


def findings(data: Mapping[str, Any]) -> list[Finding]:
    """The failing cells of a matrix.json, or a report's findings (its failing
    cases grouped by the mistake they share, `oracle.findings`; a report
    written before it had them: its failing cases)."""
    if data.get("kind") == "matrix":
        return [Finding(f"{c['job']} · {c['property']}", c["verdict"], c["reason"], c.get("repro"))
                for c in data.get("cells", ()) if c.get("verdict") in ("fail", "error", "unknown")]
    if "findings" in data:
        return [Finding(f"{data.get('job', '?')} · {f['check']} · finding {i} ({len(f['cases'])} "
                        f"case{'s' * (len(f['cases']) > 1)})", f["verdict"], f["headline"], f.get("repro"),
                        "its cases:\n" + "\n".join(f"  {case}" for case in f["cases"]))
                for i, f in enumerate(data["findings"], 1)]
    return [Finding(f"{data.get('job', '?')} · {c['case']} / {c['check']}", c["verdict"], c["summary"], c.get("repro"),
                    c.get("details", ""))
            for c in data.get("cases", ()) if c.get("verdict") in ("fail", "error", "unknown")]


def summary(data: Mapping[str, Any], budget: int = BUDGET) -> str:
    """The step summary: the verdict, the matrix's table (or the report's
    counts), the baseline's word if there is one, then the findings, each
    with its repro line, as many as `budget` bytes hold; the rest counted."""
    kind = data.get("kind", "report")
    head = [f"## ckpt-harness {kind}: {str(data.get('verdict', '?')).upper()}", ""]
    versions = ", ".join(f"{k} {v}" for k, v in data.get("versions", {}).items())
    head += [f"World size {data.get('world_size', '?')}, {data.get('elapsed_seconds', 0) / 60:.1f} min"
             + (f"; {versions}" if versions else "") + ".", ""]
    if kind == "matrix":
        head += _grid(data)
    else:
        counts: dict[str, int] = {}
        for c in data.get("cases", ()):
            counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
        head += [", ".join(f"{n} {v}" for v, n in counts.items()) + f" of {sum(counts.values())} judgments", ""]
    gate = data.get("baseline")
    if gate:
        counts = gate.get("counts", {})
        regressions = counts.get("new", 0) + counts.get("worse", 0) + counts.get("other cause", 0)
        head += [f"**Against the baseline {gate.get('source')}**: {regressions} new, {counts.get('expected', 0)} "
                 f"expected, {counts.get('fixed', 0)} fixed, {len(gate.get('stale', ()))} stale.", ""]
    found = findings(data)
    text = "\n".join(head) + "\n"
    if not found:
        return text
    text += f"### Findings ({len(found)})\n\n"
    for i, f in enumerate(found):
        block = (f"<details><summary><b>{_escape(f.title)}</b>: {f.verdict}</summary>\n\n"
                 f"{_escape(one_line(f.reason, 1500))}\n\n")
        block += f"```sh\n{f.repro}\n```\n\n" if f.repro else ""
        block += "</details>\n\n"
        if len((text + block).encode()) > budget - 200:
            text += f"… and {len(found) - i} more findings: see the uploaded matrix.md, JSON and HTML report.\n"
            break
        text += block
    return text


def annotations(found: Sequence[Finding], root: Path) -> list[str]:
    """`::error` (a FAIL) or `::warning` lines, one per finding, at the first
    call site it names that is one file under `root` (the workspace)."""
    files = _find(root, {n for f in found for n, _ in f.sites})
    out = []
    for f in found:
        where = next((f"file={p[0].relative_to(root)},line={line}," for name, line in f.sites
                      if len(p := files.get(name, [])) == 1), "")
        level = "error" if f.verdict == "fail" else "warning"
        out.append(f"::{level} {where}title={_property(f.title)}::{_command_text(one_line(f.reason, 600))}")
    return out


#: Directories a workspace's own code is not in: environments, caches, VCS, and the copies a build makes
#: (`pip install .` leaves build/lib/<package>: the same file names again, so no annotation would find one).
_SKIP = frozenset({".venv", "venv", "site-packages", ".git", "node_modules", "__pycache__", ".tox", "build", "dist"})


def _find(root: Path, names: set[str]) -> dict[str, list[Path]]:
    """Each of `names` -> the files of that name under `root` (one walk, the
    `_SKIP` directories left out)."""
    found: dict[str, list[Path]] = {name: [] for name in names}
    if not names:
        return found
    for here, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIP]
        for name in names.intersection(files):
            found[name].append(Path(here) / name)
    return found


def write_repros(found: Sequence[Finding], out: Path, root: Path, versions: Mapping[str, str]) -> list[Path]:
    """Per finding with a repro line, `out/NN-slug/` with `repro.sh` (run from
    anywhere: it changes to the repository root, `root`, and runs the
    command there, local paths relative to it) and `ISSUE.md`."""
    written = []
    for i, f in enumerate((f for f in found if f.repro), 1):
        folder = out / f"{i:02d}-{f.slug}"
        folder.mkdir(parents=True, exist_ok=True)
        command = scrub(f.repro or "", root)
        back = os.path.relpath(root, folder)
        script = folder / "repro.sh"
        script.write_text("#!/bin/sh\n# Reproduces: " + f.title.replace("\n", " ") + "\n"
                          f'cd "$(dirname "$0")/{back}" || exit 2\n'
                          f"{_runner(command)}\n")
        script.chmod(0o755)
        env = "\n".join(f"- {k} {v}" for k, v in versions.items())
        (folder / "ISSUE.md").write_text(
            f"# Checkpointing: {f.title} ({f.verdict.upper()})\n\n"
            f"Found by ckpt-harness, which runs the real framework under a real process group, breaks a save on "
            f"purpose and judges the resume bitwise against an uninterrupted run.\n\n"
            f"## What happens\n\n{scrub(f.reason, root)}\n\n"
            f"## Reproduce\n\nFrom the repository root:\n\n```sh\n{command}\n```\n\n"
            f"## Environment\n\n{env}\n\n"
            + (f"## Details\n\n```text\n{_clip_lines(scrub(f.details, root), 80)}\n```\n" if f.details else ""))
        written.append(folder)
    return written


def scrub(text: str, root: Path) -> str:
    """`text` without this machine's paths: those under `root` made relative
    to it (`PYTHONPATH=/home/me/repo` -> `PYTHONPATH=.`), temporary ones
    replaced by what they stand for."""
    rooted = re.escape(str(root.resolve()))
    text = re.sub(rooted + "/", "", text)
    text = re.sub(rooted + r"(?=[\s'\":]|$)", ".", text)
    return re.sub(r"/tmp/[\w.+-]+(/[\w.@+#-]+)*", "<tmp>", text)


def _runner(command: str) -> str:
    """The command with its `ckpt-harness` replaceable (`CKPT_HARNESS`, e.g. `python -m ckpt_harness.cli`)."""
    words = shlex.split(command)
    at = next((i for i, w in enumerate(words) if w == "ckpt-harness"), None)
    if at is None:
        return command
    env, rest = words[:at], words[at + 1:]
    return " ".join([*map(shlex.quote, env), '${CKPT_HARNESS:-ckpt-harness}', *map(shlex.quote, rest)])


def _grid(data: Mapping[str, Any]) -> list[str]:
    props = list(data.get("properties", ()))
    cells = {(c["job"], c["property"]): c for c in data.get("cells", ())}
    # words, not emoji: a runner's browser or log without an emoji font shows them as boxes
    marks = {"pass": "pass", "fail": "**FAIL**", "error": "**ERROR**", "unknown": "unknown", "n/a": "n/a"}
    lines = ["| | " + " | ".join(props) + " |", "|---|" + "---|" * len(props)]
    for job in data.get("jobs", ()):
        row = []
        for p in props:
            c = cells.get((job, p), {})
            gate = (c.get("baseline") or {}).get("label", "")
            row.append(marks.get(str(c.get("verdict")), "not run") + (f" {gate}" if gate else ""))
        lines.append(f"| {_escape(job)} | " + " | ".join(row) + " |")
    return [*lines, ""]


def _property(title: str) -> str:
    return _command_text(title).replace(",", " ").replace("::", ": ")


def _command_text(text: str) -> str:
    """A workflow command's message: newlines and % escaped as GitHub reads them."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape(text: str) -> str:
    return text.replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _clip_lines(text: str, lines: int) -> str:
    kept = text.splitlines()
    return "\n".join(kept[:lines] + ([f"... ({len(kept) - lines} more lines)"] if len(kept) > lines else []))
