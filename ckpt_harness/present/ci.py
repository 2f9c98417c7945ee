"""What CI shows of a run: a step summary, annotations, a repro and an issue draft per finding.

A CI job keeps files (matrix.json, the HTML page, timelines); a person
reading the job's page wants the verdict, the table and what failed, where
GitHub shows it: the step summary (Markdown, at most 1 MiB per step, so a
whole built-in matrix is trimmed to fit), annotations (at the user's file
and line when a finding names one that exists in the workspace: a call
site its headline names, else the innermost frame of its traceback in the
workspace), and for each finding a standalone reproduction (`repro.sh`:
the command, from the repository root, local paths made relative) and an
`ISSUE.md` a user can paste into a framework's tracker. The summary and
the draft carry what the console shows of a finding: the exception text,
the call site and the usual fix.

An annotation's level says what the finding does to the exit code, so
that a red line on the job's page means a red job: `::error` for what
fails the command (every finding of run, explore and scenario; a matrix
cell its `--fail-on` counts; with a baseline, what is NEW or WORSE),
`::notice` for what a baseline expects and for what it expects that is
fixed, `::warning` for a finding the command does not fail on (a matrix
cell `--fail-on` leaves out).

Input: a matrix.json (`matrix`) or a report's JSON (`run`, `explore`,
`scenario --json`). Torch-free: it reads JSON only.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from ckpt_harness.report import one_line, usual_fix

#: GitHub's limit on one step's summary.
LIMIT = 1 << 20
#: What this writes at most: the limit with room for what else a step appends.
BUDGET = 900_000
#: A call site a reason names: "inline_save.py:72 in <module>()", "checkpointers.py:82".
_SITE = re.compile(r"([\w.-]+\.py):(\d+)")
#: A traceback's frame: `File "train.py", line 88, in <module>` (the path as the run saw it).
_FRAME = re.compile(r'File "([^"<>]+\.py)", line (\d+)')
#: The baseline's outcomes that fail the command (`catalogue.expectations.Outcome.fails`).
_REGRESSIONS = frozenset({"new", "worse", "other cause"})
#: What a finding's details keep in the step summary: the exception text and its traceback, not every log line.
_DETAIL_LINES, _DETAIL_CHARS = 40, 4000


@dataclasses.dataclass(frozen=True)
class Finding:
    """One failing matrix cell or case: what a person acts on."""

    title: str
    verdict: str
    reason: str
    repro: Optional[str]
    #: What the console shows under it: the exception text and traceback, the cases behind it.
    details: str = ""
    #: The usual fix of its property (`report.usual_fix`), as the console's "usual fix:" line.
    fix: Optional[str] = None
    #: The baseline's word on it ("expected", "new", "worse", "other cause"); "" with no baseline.
    gate: str = ""
    #: Whether it fails the command's exit code (what makes its annotation an `::error`).
    counts: bool = True

    @property
    def sites(self) -> list[tuple[str, int]]:
        """The user's call sites its reason names (file name, line), in order, each once."""
        return list(dict.fromkeys((name, int(line)) for name, line in _SITE.findall(self.reason)))

    @property
    def frames(self) -> list[tuple[str, int]]:
        """Its tracebacks' frames (path as the run saw it, line), each once:
        the first traceback's innermost first (the rank that raised first is
        named first; its peers' tracebacks are what followed from it)."""
        found = []
        for traceback in self.details.split("Traceback (most recent call last)")[1:]:
            found += reversed([(path, int(line)) for path, line in _FRAME.findall(traceback)])
        return list(dict.fromkeys(found))

    @property
    def level(self) -> str:
        """Its annotation's level: an error exactly when it fails the command."""
        if self.gate == "expected":
            return "notice"
        return "error" if self.counts else "warning"

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9]+", "-", self.title).strip("-").lower()[:60]


#: Which matrix cells fail the command when no baseline decides (`matrix --fail-on`): cell -> counts.
CellRule = Callable[[Mapping[str, Any]], bool]


def findings(data: Mapping[str, Any], cell_counts: Optional[CellRule] = None) -> list[Finding]:
    """The failing cells of a matrix.json, or a report's findings (its failing
    cases grouped by the mistake they share, `oracle.findings`; a report
    written before it had them: its failing cases), each with the details,
    usual fix and baseline word the console shows beside it. `cell_counts`:
    which failing cells fail a matrix without a baseline (default: those
    `matrix`'s default `--fail-on unknown,error` counts)."""
    gated = (data.get("baseline") or {}).get("gated", ())
    if data.get("kind") == "matrix":
        rule = cell_counts or (lambda cell: cell.get("verdict") in ("unknown", "error"))
        return [_cell_finding(data, c, rule) for c in data.get("cells", ())
                if c.get("verdict") in ("fail", "error", "unknown")]
    by_case = {g["scenario"]: g["outcome"] for g in gated}
    whole = [g["outcome"] for g in gated] if data.get("kind") == "scenario" else []
    cases = {(c["case"], c["check"]): c for c in data.get("cases", ())}
    if "findings" in data:
        out = []
        for i, f in enumerate(data["findings"], 1):
            first = cases.get((f["cases"][0], f["check"]), {}) if f["cases"] else {}
            listing = "its cases:\n" + "\n".join(f"  {case}" for case in f["cases"])
            gate = _weightiest([by_case[c] for c in f["cases"] if c in by_case] or whole)
            out.append(Finding(
                f"{data.get('job', '?')} · {f['check']} · finding {i} ({len(f['cases'])} "
                f"case{'s' * (len(f['cases']) > 1)})", f["verdict"], f["headline"], f.get("repro"),
                "\n\n".join(part for part in (_case_text(first), listing) if part),
                usual_fix(f["check"], f["cases"]) if f["verdict"] == "fail" else None,
                gate, gate in _REGRESSIONS if gated else True))
        return out
    out = []
    for c in data.get("cases", ()):
        if c.get("verdict") not in ("fail", "error", "unknown"):
            continue
        gate = _weightiest([by_case[c["case"]]] if c["case"] in by_case else whole)
        out.append(Finding(f"{data.get('job', '?')} · {c['case']} / {c['check']}", c["verdict"], c["summary"],
                           c.get("repro"), c.get("details", ""),
                           usual_fix(c["check"], [c["case"]]) if c["verdict"] == "fail" else None,
                           gate, gate in _REGRESSIONS if gated else True))
    return out


def fixed(data: Mapping[str, Any]) -> list[str]:
    """What the baseline expects to fail and now passes, one line each: the
    entry to drop from the baseline."""
    out = []
    for g in (data.get("baseline") or {}).get("gated", ()):
        if g.get("outcome") == "fixed":
            entry = g.get("expected") or {}
            out.append(f"{g['job']} · {g['scenario']}: the baseline expects {entry.get('verdict', 'a failure')} "
                       f"({entry.get('where', '?')}), now {g['verdict']}: fixed, update the baseline")
    return out


def _cell_finding(data: Mapping[str, Any], cell: Mapping[str, Any], rule: CellRule) -> Finding:
    """A failing matrix cell as a finding: the details of the scenario its
    reason and repro come from (the first failing one of its property)."""
    scenarios = [s for s in data.get("scenarios", ()) if s.get("job") == cell["job"]
                 and s.get("scenario") in cell.get("scenarios", ()) and s.get("verdict") == cell["verdict"]]
    source = next((s for s in scenarios if s.get("repro") == cell.get("repro")), scenarios[0] if scenarios else {})
    gate = str((cell.get("baseline") or {}).get("outcome", ""))
    gate = "" if gate == "ok" else gate
    case = _case_of(cell.get("repro"))
    return Finding(f"{cell['job']} · {cell['property']}", cell["verdict"], cell["reason"], cell.get("repro"),
                   str(source.get("details", "")),
                   usual_fix(cell["property"], [case] if case else []) if cell["verdict"] == "fail" else None,
                   gate, gate in _REGRESSIONS if data.get("baseline") else rule(cell))


def _case_text(case: Mapping[str, Any]) -> str:
    """A case as the console shows it under a finding (`CaseResult.explain`, without the paths of this run)."""
    if not case:
        return ""
    return f"--- {case['case']} / {case['check']}: {str(case['verdict']).upper()} — {case.get('summary', '')}\n" \
           f"{case.get('details', '')}".rstrip()


def _case_of(repro: Optional[str]) -> Optional[str]:
    """The case a repro line names (`--case X`), for the usual fix that depends on where the fault hit."""
    try:
        words = shlex.split(repro or "")
    except ValueError:
        return None
    return next((words[i + 1] for i, w in enumerate(words[:-1]) if w == "--case"), None)


def _weightiest(outcomes: Sequence[str]) -> str:
    """The outcome a group shows: a regression before a fix before a known failure (`Outcome.weight`)."""
    weight = {"new": 3, "worse": 3, "other cause": 3, "fixed": 2, "expected": 1}
    found = max(outcomes, key=lambda o: weight.get(o, 0), default="")
    return "" if found == "ok" else found


def summary(data: Mapping[str, Any], budget: int = BUDGET, root: Optional[Path] = None,
            cell_counts: Optional[CellRule] = None) -> str:
    """The step summary: the verdict, the matrix's table (or the report's
    counts), the baseline's word if there is one, then the findings, each
    with what the console shows of it (the reason, the call site, the
    exception text, the usual fix) and its repro line, as many as `budget`
    bytes hold; the rest counted. `root`: the workspace its call sites are
    looked up in (None: the sites as the reason names them)."""
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
        head += [f"- fixed: {_escape(line)}" for line in fixed(data)] + ([""] if fixed(data) else [])
    found = findings(data, cell_counts)
    text = "\n".join(head) + "\n"
    if not found:
        return text
    files = _find(root, {n for f in found for n, _ in f.sites}) if root is not None else {}
    text += f"### Findings ({len(found)})\n\n"
    for i, f in enumerate(found):
        block = _block(f, _where(f, root, files) if root is not None else None, root)
        if len((text + block).encode()) > budget - 200:
            text += f"… and {len(found) - i} more findings: see the uploaded matrix.md, JSON and HTML report.\n"
            break
        text += block
    return text


def _block(f: Finding, where: Optional[tuple[str, int]], root: Optional[Path] = None) -> str:
    """One finding in the step summary, folded: its title and verdict (and
    the baseline's word), then the reason, the call site, the exception
    text (clipped), the usual fix and the repro line."""
    said = f" · {f.gate}" if f.gate else ""
    block = (f"<details><summary><b>{_escape(f.title)}</b>: {f.verdict}{said}</summary>\n\n"
             f"{_escape(one_line(f.reason, 1500))}\n\n")
    site = f"{where[0]}:{where[1]}" if where else next((f"{n}:{line}" for n, line in f.sites), "")
    block += f"**Call site**: `{site}`\n\n" if site else ""
    if f.details.strip():
        details = scrub(f.details, root) if root is not None else f.details
        # four backticks: a traceback may hold three of its own
        block += f"````text\n{_clip(details, _DETAIL_LINES, _DETAIL_CHARS)}\n````\n\n"
    block += f"**Usual fix**: {_escape(f.fix)}\n\n" if f.fix else ""
    block += f"```sh\n{f.repro}\n```\n\n" if f.repro else ""
    return block + "</details>\n\n"


def annotations(found: Sequence[Finding], root: Path, data: Optional[Mapping[str, Any]] = None) -> list[str]:
    """One workflow command per finding, at the user's file and line where
    it names one in `root` (the workspace; `_where`), at the level its
    effect on the exit code gives (`Finding.level`); with the run's `data`,
    a `::notice` per failure the baseline expects that is fixed."""
    files = _find(root, {n for f in found for n, _ in f.sites})
    out = []
    for f in found:
        where = _where(f, root, files)
        at = f"file={where[0]},line={where[1]}," if where else ""
        said = f" ({f.gate})" if f.gate else ""
        out.append(f"::{f.level} {at}title={_property(f.title + said)}::{_command_text(one_line(f.reason, 600))}")
    for line in fixed(data or {}):
        out.append(f"::notice title=fixed (update the baseline)::{_command_text(line)}")
    return out


def _where(f: Finding, root: Path, files: Mapping[str, list[Path]]) -> Optional[tuple[str, int]]:
    """The file (relative to `root`) and line of the user's code a finding
    points at: the first call site its reason names that is one file of the
    workspace, else the innermost frame of its traceback that is in the
    workspace (and not in an environment, `_SKIP`); None if neither."""
    for name, line in f.sites:
        if len(paths := files.get(name, [])) == 1:
            return str(paths[0].relative_to(root)), line
    for path, line in f.frames:
        found = _in_workspace(path, root)
        if found is not None:
            return found, line
    return None


def _in_workspace(path: str, root: Path) -> Optional[str]:
    """`path` (absolute, or relative to the workspace, as the run that raised
    saw it) relative to `root` if it is a file of the workspace's own code."""
    full = Path(path) if os.path.isabs(path) else root / path
    try:
        relative = full.resolve().relative_to(root.resolve())
    except (ValueError, OSError):
        return None
    if _SKIP.intersection(relative.parts) or not full.is_file():
        return None
    return str(relative)


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
    command there, local paths relative to it) and `ISSUE.md` (what happens,
    the call site, the usual fix, the command, the versions, the exception
    text and traceback)."""
    written = []
    files = _find(root, {n for f in found for n, _ in f.sites})
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
        where = _where(f, root, files)
        site = f"{where[0]}:{where[1]}" if where else next((f"{n}:{line}" for n, line in f.sites), "")
        (folder / "ISSUE.md").write_text(
            f"# Checkpointing: {f.title} ({f.verdict.upper()})\n\n"
            f"Found by ckpt-harness, which runs the real framework under a real process group, breaks a save on "
            f"purpose and judges the resume bitwise against an uninterrupted run.\n\n"
            f"## What happens\n\n{scrub(f.reason, root)}\n\n"
            + (f"Call site: `{site}`\n\n" if site else "")
            + (f"Usual fix: {f.fix}\n\n" if f.fix else "")
            + f"## Reproduce\n\nFrom the repository root:\n\n```sh\n{command}\n```\n\n"
            f"## Environment\n\n{env}\n\n"
            + (f"## Details\n\n````text\n{_clip_lines(scrub(f.details, root), 80)}\n````\n" if f.details else ""))
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



def _clip(text: str, lines: int, chars: int) -> str:
    """`text` at most `lines` lines and about `chars` characters, the rest counted (a finding's details in the
    step summary: the exception text and its traceback come first, log tails after)."""
    kept = _clip_lines(text.rstrip(), lines)
    return kept if len(kept) <= chars else kept[:chars] + f"\n... ({len(kept) - chars} more characters)"
