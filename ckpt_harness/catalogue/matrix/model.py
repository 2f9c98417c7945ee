"""The matrix as data: its rows, scenarios and results, and the cells they fold into.

Every other module of the package reads or makes a `Matrix` (Markdown, matrix.json,
merging shards, running it) and imports this one; this one imports none of them, so
what a matrix is stays apart from how it is shown, stored, merged or run.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Optional, Sequence

from ckpt_harness import targets
from ckpt_harness.catalogue.expectations import CellGate, Gating
from ckpt_harness.catalogue.scenario import Scenario, ScenarioResult
from ckpt_harness.catalogue.shards import Shard, Task
from ckpt_harness.oracle import PROPERTIES
from ckpt_harness.oracle.causes import Severity
from ckpt_harness.verdict import Verdict, fold

#: The mark of a cell some of whose scenarios did not run.
NOT_RUN = "⏳ not run"


@dataclasses.dataclass(frozen=True)
class Cell:
    job: str
    property: str
    #: None: not judged, some of its scenarios did not run (`pending`).
    verdict: Optional[Verdict]
    reason: str
    repro: Optional[str]
    scenarios: tuple[str, ...]
    #: Its scenarios that did not run: in another shard, or not yet (interrupted).
    pending: tuple[str, ...] = ()
    #: How bad its failing state comparisons are (`causes.Severity.option`: "rng" ... "missing");
    #: "" unless it fails, or when a failure of it is not a state comparison's (a hang, a torn file).
    severity: str = ""

    @property
    def mark(self) -> str:
        return NOT_RUN if self.verdict is None else self.verdict.mark

    @property
    def shown(self) -> str:
        return "not run" if self.verdict is None else self.verdict.value


def cell(job: str, prop: str, results: Sequence[ScenarioResult]) -> Cell:
    """One cell from what scenarios found about one property (`verdict.fold`;
    `ScenarioResult.under`), with the reason of the first scenario behind its
    verdict."""
    names = tuple(r.scenario for r in results)
    if not results:
        return Cell(job, prop, Verdict.NA, "no scenario of the catalogue judges this property", None, names)
    verdict = fold(r.verdict for r in results)
    hit = [r for r in results if r.verdict is verdict]
    if verdict is Verdict.PASS:
        cases = sum(r.cases for r in hit)
        return Cell(job, prop, verdict, f"{', '.join(r.scenario for r in hit)}: {cases} cases pass", None, names)
    if verdict is Verdict.NA:
        return Cell(job, prop, verdict, hit[0].reason, None, names)
    more = f" (and {len(hit) - 1} more scenario{'s' * (len(hit) > 2)})" if len(hit) > 1 else ""
    # a failure of no degree (a hang, a torn file) among them: the cell has none either
    worst = max((r.severity for r in hit), key=lambda s: Severity[s.upper()]) if all(r.severity for r in hit) else ""
    return Cell(job, prop, verdict, f"{hit[0].scenario}: {hit[0].reason}{more}", hit[0].repro, names, severity=worst)


@dataclasses.dataclass
class Matrix:
    world_size: int
    #: The rows' names, in order (a target of any kind: a job, a script...); matrix.json's "jobs".
    names: list[str]
    results: list[ScenarioResult]
    scenarios: list[Scenario]
    elapsed: float = 0.0
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    date: str = dataclasses.field(default_factory=lambda: datetime.date.today().isoformat())
    #: The bench settings besides the world size (timeout, parallel; a script
    #: matrix's layout: nproc_per_node, nnodes).
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Each row by name -> its target as data (`targets.TargetSpec`: kind and settings), to run it again.
    rows: dict[str, targets.TargetSpec] = dataclasses.field(default_factory=dict)
    #: Every (row, scenario) of the whole matrix, in the order they run (default: those of `results`).
    plan: list[Task] = dataclasses.field(default_factory=list)
    #: The part of `plan` this matrix is to run: a shard's; None: all of it.
    tasks: Optional[list[Task]] = None
    shard: Optional[Shard] = None
    #: The signal that stopped the run ("SIGINT", "SIGTERM"), if one did.
    stopped_by: Optional[str] = None
    #: The matrix against `--baseline` (NEW, expected, fixed, stale per cell);
    #: not read back by `files.from_json`: a resumed or merged matrix is gated again.
    gating: Optional[Gating] = None

    def __post_init__(self) -> None:
        if not self.plan:
            self.plan = [Task(r.job, r.scenario) for r in self.results]
        if self.tasks is None:
            self.tasks = list(self.plan)

    @property
    def properties(self) -> list[str]:
        used = {s.property for s in self.scenarios}
        return [p for p in PROPERTIES if p in used]

    @property
    def missing(self) -> list[Task]:
        """This matrix's tasks with no result: not run yet (the run was stopped)."""
        done = {Task(r.job, r.scenario) for r in self.results}
        return [t for t in self.tasks or () if t not in done]

    @property
    def incomplete(self) -> bool:
        """Stopped before its tasks all ran: `--resume` finishes it."""
        return bool(self.missing)

    def behind(self, job: str, prop: str) -> list[tuple[ScenarioResult, ScenarioResult]]:
        """The results a cell folds, each with what it says of `prop`
        (`ScenarioResult.under`): its own scenarios first, then failures of it
        the row's others found."""
        done = {(r.job, r.scenario): r for r in self.results}
        row = [done[job, t.scenario] for t in self.plan if t.row == job and (job, t.scenario) in done]
        row.sort(key=lambda r: r.property != prop)
        return [(r, part) for r in row if (part := r.under(prop)) is not None]

    def gate(self, job: str, prop: str) -> Optional[CellGate]:
        """The baseline's word on a cell (None: the matrix was run without one)."""
        if self.gating is None:
            return None
        own = {s.name for s in self.scenarios if s.property == prop}
        return self.gating.part(job, own | {r.scenario for r, _ in self.behind(job, prop)})

    def cells(self) -> list[Cell]:
        prop = {s.name: s.property for s in self.scenarios}
        done = {(r.job, r.scenario): r for r in self.results}
        mine = set(self.tasks or ())
        out = []
        for job in self.names:
            for p in self.properties:
                planned = [t.scenario for t in self.plan if t.row == job and prop.get(t.scenario) == p]
                pending = tuple(s for s in planned if (job, s) not in done)
                if not pending:
                    out.append(cell(job, p, [part for _, part in self.behind(job, p)]))
                    continue
                elsewhere = [s for s in pending if Task(job, s) not in mine]
                why = "another shard runs it" if elsewhere else "the run was stopped first"
                out.append(Cell(job, p, None, f"{', '.join(pending)} not run: {why}", None, tuple(planned), pending))
        return out

    @property
    def complete(self) -> bool:
        """Every cell judged: the command's success, whatever the verdicts."""
        return all(c.verdict is not None and c.verdict.judged for c in self.cells())

    @property
    def verdict(self) -> Verdict:
        """The fold of the judged cells (a cell not run says nothing yet)."""
        return fold(c.verdict for c in self.cells() if c.verdict is not None)

    def costs(self) -> dict[Task, float]:
        """Each run's seconds: what `--costs` balances shards by."""
        return {Task(r.job, r.scenario): r.elapsed for r in self.results}
