"""The HTML report: one self-contained file a person clicks through.

A matrix page opens on its grid (a job per row, a property per column, each
cell coloured by its verdict); a cell lists the scenarios behind it, a
scenario its cases, a case its verdict, reason, fault plan, repro line,
state differences, stacks and timeline. A report of one command (run,
explore, scenario) is the same page without the grid. Pages are sections of
one file, shown one at a time by their `#id`, so the file works offline and
a link to a case can be shared; a case's timeline is drawn when it is opened,
from the data the Chrome-trace file holds (`timeline.Timeline`), so a
1,700-case matrix opens as fast as its text.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from ckpt_harness.timeline import Timeline
from ckpt_harness.verdict import CaseResult, Verdict, fold

if TYPE_CHECKING:
    from ckpt_harness.catalogue.matrix import Matrix
    from ckpt_harness.oracle.findings import Finding
    from ckpt_harness.catalogue.scenario import ScenarioResult
    from ckpt_harness.report import Report

_HERE = Path(__file__).parent / "templates"


@dataclasses.dataclass(frozen=True)
class CaseView:
    id: str
    result: CaseResult
    #: Where it came from, for the case page's heading ("torch_save · crash-every-phase").
    where: str
    #: Back link: the scenario (or report) page that lists it.
    parent: str
    timeline: Optional[str]

    @property
    def verdict(self) -> str:
        return self.result.verdict.value

    @property
    def opens(self) -> bool:
        """Worth a page of its own: not a plain pass."""
        return not self.result.verdict.ok or bool(self.result.details) or self.timeline is not None


@dataclasses.dataclass(frozen=True)
class ScenarioView:
    id: str
    result: "ScenarioResult"
    cases: tuple[CaseView, ...]
    parent: str
    #: Its failing cases as the findings they share, shown before them.
    findings: tuple["FindingView", ...] = ()

    @property
    def verdict(self) -> str:
        return self.result.verdict.value


@dataclasses.dataclass(frozen=True)
class CellView:
    id: str
    job: str
    property: str
    verdict: str
    reason: str
    scenarios: tuple[tuple[ScenarioView, "ScenarioResult"], ...]
    #: What the baseline says of it ("NEW", "expected", "fixed", "stale"; "" nothing).
    baseline: str = ""
    #: The baseline's lines about it, with the entries that decided them.
    baseline_lines: tuple[str, ...] = ()
    #: Each scenario's outcome against the baseline (`Outcome.label`), by name.
    outcomes: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class FindingView:
    """A finding of a report (`oracle.findings`): its dependency, then its cases, each a link."""

    finding: "Finding"
    #: (case name, the id of its page) of each of its cases, the lead property's first.
    cases: tuple[tuple[str, str], ...]

    @property
    def verdict(self) -> str:
        return self.finding.verdict.value


@dataclasses.dataclass(frozen=True)
class ReportView:
    """A report among others on one page (each report the `ckpt` fixture made
    in a pytest session): its findings, then its cases."""

    id: str
    #: What made it: the test's node id.
    title: str
    report: "Report"
    cases: tuple[CaseView, ...]
    findings: tuple[FindingView, ...]

    @property
    def verdict(self) -> str:
        return self.report.verdict.value

    @property
    def reason(self) -> str:
        """The lead finding's line, else the first failing case's summary."""
        if self.findings:
            return self.findings[0].finding.headline
        return next((c.result.summary for c in self.cases if not c.result.verdict.ok), "")


@dataclasses.dataclass(frozen=True)
class Page:
    title: str
    subtitle: str
    kind: str
    verdict: str
    columns: tuple[str, ...] = ()
    rows: tuple[tuple[str, tuple[CellView, ...]], ...] = ()
    scenarios: tuple[ScenarioView, ...] = ()
    #: Cases of a report that has no scenarios (run, explore).
    cases: tuple[CaseView, ...] = ()
    #: A report's findings, shown before its cases.
    findings: tuple[FindingView, ...] = ()
    #: Reports of their own besides a grid (a pytest session's fixture calls), each a page.
    reports: tuple[ReportView, ...] = ()
    facts: tuple[tuple[str, str], ...] = ()
    #: (id, JSON) of the timeline parts the cases' timelines are made of (`_timeline_data`).
    parts: tuple[tuple[str, str], ...] = ()

    @property
    def all_cases(self) -> list[CaseView]:
        return [*self.cases, *(c for s in self.scenarios for c in s.cases), *(c for r in self.reports for c in r.cases)]


# -- building the page -------------------------------------------------------------------
class _Ids:
    """Element ids: readable, unique, valid in a URL fragment; and the
    timeline parts the page holds once however many cases draw them."""

    def __init__(self, share: bool = True) -> None:
        self.used: set[str] = set()
        #: (id, JSON of one run's tracks) of every part the page holds.
        self.parts: list[tuple[str, str]] = []
        self.held: dict[str, str] = {}
        #: Hold a text once however many cases draw it (off: the naive page, `ci/bench_report.py`).
        self.share = share

    def part(self, text: str) -> str:
        """The id of the element holding `text`: one per distinct text (every
        case of a scenario draws the same golden run)."""
        found = self.held.get(text) if self.share else None
        if found is None:
            found = self.held[text] = f"tl-{len(self.parts) + 1}"
            self.parts.append((found, text))
        return found

    def __call__(self, *parts: str) -> str:
        base = "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", p).strip("_") for p in parts)
        name, n = base, 1
        while name in self.used:
            n += 1
            name = f"{base}-{n}"
        self.used.add(name)
        return name


def _case_views(ids: _Ids, results: Sequence[CaseResult], where: str, parent: str, prefix: str,
                base: Path) -> tuple[CaseView, ...]:
    return tuple(CaseView(ids("case", prefix, r.case, r.check), r, where, parent, _timeline_data(r, base, ids))
                 for r in results)


def _scenario_view(ids: _Ids, s: "ScenarioResult", parent: str, base: Path) -> ScenarioView:
    from ckpt_harness.oracle.findings import group

    sid = ids("scenario", s.job, s.scenario)
    cases = _case_views(ids, s.results, f"{s.job} · {s.scenario}", sid, f"{s.job}.{s.scenario}", base)
    return ScenarioView(sid, s, cases, parent, _finding_views(group(s.results), cases))


def matrix_page(matrix: "Matrix", base: Path = Path("."), share: bool = True,
                reports: Sequence[tuple[str, "Report"]] = ()) -> Page:
    """The grid of `matrix`, each cell opening the scenarios it folds
    (`Matrix.cells`, `ScenarioResult.under`): its own property's first, then
    failures of it that another property's scenarios found. `base`: where
    its matrix.json is (its timeline files are named relative to it).
    `share` off: every case holds its runs' tracks itself (the naive page).
    `reports`: (title, report) of other runs to list below the grid."""
    ids = _Ids(share)
    done = {(r.job, r.scenario): r for r in matrix.results}
    views = {key: _scenario_view(ids, r, "top", base) for key, r in done.items()}
    by_cell = {(c.job, c.property): c for c in matrix.cells()}
    rows = []
    for job in matrix.names:
        cells = []
        for prop in matrix.properties:
            c = by_cell[job, prop]
            shown = tuple((views[job, r.scenario], part) for r, part in matrix.behind(job, prop))
            gate = matrix.gate(job, prop)
            said = {} if gate is None else {
                "baseline": gate.label, "baseline_lines": tuple(gate.lines()),
                "outcomes": tuple((g.scenario, g.outcome.label) for g in gate.gated if g.outcome.label != "ok")}
            cells.append(CellView(ids("cell", job, prop), job, prop, c.shown.replace(" ", ""), c.reason, shown,
                                  **said))
        rows.append((job, tuple(cells)))
    # a scenario's back link goes to the cell of its own property
    cell_of = {(c.job, c.property): c.id for _, cells in rows for c in cells}
    scenario_views = tuple(dataclasses.replace(v, parent=cell_of.get((v.result.job, v.result.property), "top"))
                           for v in views.values())
    facts = (("world size", str(matrix.world_size)), ("elapsed", f"{matrix.elapsed / 60:.1f} min"),
             ("scenarios run", str(len(matrix.results))), ("cases", str(sum(r.cases for r in matrix.results))),
             ("date", matrix.date), *matrix.versions.items())
    if matrix.gating is not None:
        facts += (("baseline", f"{matrix.gating.source}: {matrix.gating.summary()}"),)
    views = _report_views(ids, reports)
    return Page("ckpt_harness matrix", f"{len(matrix.names)} rows × {len(matrix.properties)} properties", "matrix",
                matrix.verdict.value, tuple(matrix.properties), tuple(rows), scenario_views, facts=facts,
                reports=views, parts=_parts(ids))


def report_page(report: "Report") -> Page:
    ids = _Ids()
    title = f"ckpt_harness {report.kind}: {report.noun} {report.job}"
    facts = (("world size", str(report.world_size)), ("elapsed", f"{report.elapsed:.1f} s"),
             ("cases", str(len({r.case for r in report.results}))),
             *(("warning", w) for w in report.warnings))
    cases = _case_views(ids, report.results, report.job, "top", report.job, Path("."))
    return Page(title, report.note, report.kind, report.verdict.value, cases=cases,
                findings=_finding_views(report.findings(), cases), facts=facts, parts=_parts(ids))


def session_page(reports: Sequence[tuple[str, "Report"]], versions: dict[str, str]) -> Page:
    """The reports a pytest session's tests made with the `ckpt` fixture: a
    line per report on the first page, each its own page of findings and cases."""
    ids = _Ids()
    views = _report_views(ids, reports)
    verdict = fold(r.report.verdict for r in views).value
    facts = (("tests", str(len({t for t, _ in reports}))), ("reports", str(len(reports))),
             ("elapsed", f"{sum(r.elapsed for _, r in reports):.1f} s"), *versions.items())
    return Page("ckpt_harness pytest session", f"{len(reports)} reports of the ckpt fixture", "session", verdict,
                reports=views, facts=facts, parts=_parts(ids))


def _report_views(ids: _Ids, reports: Sequence[tuple[str, "Report"]]) -> tuple[ReportView, ...]:
    views = []
    for title, report in reports:
        rid = ids("report", title, report.job)
        cases = _case_views(ids, report.results, title, rid, f"{title}.{report.job}", Path("."))
        views.append(ReportView(rid, title, report, cases, _finding_views(report.findings(), cases)))
    return tuple(views)


def _finding_views(findings: Sequence["Finding"], cases: Sequence[CaseView]) -> tuple[FindingView, ...]:
    page_of = {id(c.result): c.id for c in cases}
    return tuple(FindingView(f, tuple((c.case, page_of[id(c)]) for c in f.cases)) for f in findings)


# -- timelines, as the page draws them ------------------------------------------------------
def _timeline_data(result: CaseResult, base: Path, ids: _Ids) -> Optional[str]:
    """The case's timeline as the page's script draws it: the same slices and
    marks as its trace file, in arrays, its runs' tracks held once per page
    (`_Ids.part`: a golden run is drawn by every case of its scenario), as
    JSON that is safe inside a <script> element."""
    t: Optional[Timeline] = result.timeline
    if t is None and result.timeline_file:  # a matrix read back from its matrix.json
        try:
            t = Timeline.read(base / result.timeline_file)
        except (OSError, ValueError, KeyError):
            return None
    if t is None:
        return None
    parts = []
    for run in t.runs:
        tracks = [{"label": track.label, "run": track.run,
                   "lanes": [{"thread": lane.thread,
                              "slices": [[s.name, s.category, _ms(s.start), _ms(s.end)] for s in lane.slices],
                              "marks": [[m.name, m.category, _ms(m.at)] for m in lane.marks]}
                             for lane in track.lanes]}
                  for track in t.tracks if track.run == run.name]
        parts.append(ids.part(_script_json(tracks)))
    return _script_json({"runs": [[r.name, _ms(r.start), _ms(r.end), r.ended] for r in t.runs], "parts": parts})


def _script_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/")


def _parts(ids: _Ids) -> tuple[tuple[str, str], ...]:
    return tuple(ids.parts)


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


# -- rendering ---------------------------------------------------------------------------
def render(page: Page) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_HERE), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    return env.get_template("report.html.j2").render(
        page=page, style=(_HERE / "report.css").read_text(), script=(_HERE / "report.js").read_text(),
        marks={**{v.value.replace("/", ""): v.value.upper() for v in Verdict}, "notrun": "not run"})


def write(page: Page, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(page), encoding="utf-8")  # whatever the locale: the page says it is UTF-8
    return path
