"""`ckpt-harness matrix`: the catalogue against jobs, as a compatibility matrix.

Rows are jobs, columns are properties; a cell folds the verdicts of every
scenario that judges that property for that job. Findings against real
frameworks are results: the matrix is complete when every cell is judged
(pass, fail or n/a), whatever the verdicts.

The unit of work is one scenario against one row (a `Task`); the matrix's
`plan` lists them all. A matrix may hold only some of them: a shard's
(`--shard K/N`, `shards.assign`), or those that finished before SIGINT or
SIGTERM stopped the run (`MatrixInterrupted`). Its matrix.json keeps what it
takes to finish it (the rows, the catalogue, the settings), so `--resume`
runs the missing ones and `--merge` puts shards together (`Matrix.from_json`,
`merge`); a cell whose scenarios did not all run is not judged ("not run").
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import json
import re
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from ckpt_harness import targets
from ckpt_harness.catalogue.bench import Bench
from ckpt_harness.catalogue.expectations import CellGate, Gating
from ckpt_harness.catalogue import scenario_files
from ckpt_harness.catalogue.scenario import Scenario, ScenarioResult
from ckpt_harness.catalogue.shards import Shard, Task, assign
from ckpt_harness.config import SETTINGS
from ckpt_harness.errors import UsageError, signal_of
from ckpt_harness.oracle import PROPERTIES
from ckpt_harness.oracle.causes import Severity
from ckpt_harness.progress import Progress
from ckpt_harness.report import one_line, versions
from ckpt_harness.verdict import Verdict, fold

#: Scenarios run at once (when `parallel` > 1), each running `parallel` cases
#: at once: a catalogue is mostly waiting (hang deadlines, failure grace,
#: delays), and a second scenario's work fills those waits. Two keep the
#: groups at once within 2 x `parallel`.
SCENARIOS_AT_ONCE = 2
#: After SIGINT or SIGTERM: how long the scenarios in flight get to notice
#: that their groups are gone (`launch.cancel`) before the matrix is written
#: without them. The whole stop is to take under 3 s.
ABANDON_WAIT = 1.5
#: The mark of a cell some of whose scenarios did not run.
NOT_RUN = "⏳ not run"
#: A cell the baseline has no word on.
_NO_GATE = CellGate(())


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
    jobs: list[str]
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
    #: not read back by `from_json`: a resumed or merged matrix is gated again.
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
        for job in self.jobs:
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

    def markdown(self) -> str:
        props = self.properties
        cells = {(c.job, c.property): c for c in self.cells()}
        layout = (f" under torchrun ({self.settings.get('nnodes')} node(s) x {self.settings.get('nproc_per_node')} "
                  "workers)" if "nproc_per_node" in self.settings else "")
        lines = [
            "# Checkpoint compatibility matrix", "",
            f"`ckpt-harness matrix` at world size {self.world_size}{layout}, {len(self.scenarios)} scenarios, "
            f"{sum(r.cases for r in self.results)} cases in {self.elapsed / 60:.1f} min, on {self.date}.", "",
            "Versions: " + ", ".join(f"{k} {v}" for k, v in self.versions.items()) + ".", "",
        ]
        if self.shard is not None:
            lines += [f"**Shard {self.shard.index} of {self.shard.count}**: {len(self.tasks or ())} of the "
                      f"{len(self.plan)} (row, scenario) runs; `ckpt-harness matrix --merge` takes every shard's "
                      f"matrix.json and writes the whole matrix.", ""]
        if self.incomplete:
            stopped = f"stopped by {self.stopped_by}" if self.stopped_by else "stopped"
            lines += [f"**Incomplete**: {stopped} with {len(self.missing)} of its {len(self.tasks or ())} (row, "
                      f"scenario) runs not run ({NOT_RUN} below); `ckpt-harness matrix --resume DIR` on the "
                      "directory of this matrix.json runs them.", ""]
        commands = self.commands
        if commands:
            lines += ["Commands: " + "; ".join(f"**{name}**: `{command}`" for name, command in commands.items())
                      + ".", ""]
        row = self.noun
        lines += self._grid(cells)
        if self.skipped:
            lines += ["", "Not run: " + "; ".join(f"{j} ({why})" for j, why in self.skipped.items())]
        lines += ["", "Properties: " + "; ".join(f"**{p}**: {PROPERTIES[p]}" for p in props) + ".", ""]
        findings = [c for c in self.cells() if c.verdict is not None and not c.verdict.ok]
        if findings:
            lines += ["## Findings", ""]
            for c in findings:
                lines += [f"### {c.job} · {c.property}: {c.verdict.value}{_severity(c)}", "", _md(c.reason), ""]
                if c.repro:
                    lines += ["```sh", c.repro, "```", ""]
        if self.gating is not None:
            lines += [f"## Against the baseline {self.gating.source}", "", "```text", self.gating.explain(), "```", ""]
        gated = self.gating is not None
        lines += ["## Every cell", "", f"| {row} | property | verdict | {'baseline | ' * gated}scenarios | reason |",
                  "|---|---|---|" + "---|" * gated + "---|---|"]
        for c in self.cells():
            label = f"{(self.gate(c.job, c.property) or _NO_GATE).label} | " if gated else ""
            lines.append(f"| {c.job} | {c.property} | {c.shown} | {label}{', '.join(c.scenarios)} | "
                         f"{_md(c.reason, 240)} |")
        lines += ["", "## Scenarios", "", "| scenario | property | check | what it does |", "|---|---|---|---|"]
        for s in self.scenarios:
            lines.append(f"| {s.name} | {s.property} | {s.check} | {_md(s.description)} |")
        return "\n".join(lines) + "\n"

    def _grid(self, cells: Mapping[tuple[str, str], Cell]) -> list[str]:
        """The table: a row per job or script, a column per property."""
        props = self.properties
        lines = [f"| {self.noun} | " + " | ".join(props) + " |",
                 "|---|" + "---|" * len(props)]
        return lines + [f"| {job} | " + " | ".join(self._mark(cells[job, p]) for p in props) + " |"
                        for job in self.jobs]

    @property
    def noun(self) -> str:
        """What its rows are: their kind's name ("job", "script"), or "row" for rows of several kinds."""
        kinds = {spec.kind for spec in self.rows.values()}
        return kinds.pop() if len(kinds) == 1 else "row"

    @property
    def commands(self) -> dict[str, str]:
        """Each row whose name does not start with what picked it (a script's
        command, which its name shows without directories) -> that."""
        picked = {name: str(targets.picked_by(spec)) for name, spec in self.rows.items()}
        return {name: value for name, value in picked.items() if not name.startswith(value)}

    def summary(self) -> str:
        """What a terminal shows of it (matrix.md holds the rest): the table,
        then a line per cell that did not pass."""
        cells = {(c.job, c.property): c for c in self.cells()}
        rows, props = len(self.jobs), len(self.properties)
        said = (f"INCOMPLETE ({len(self.missing)} of {len(self.tasks or ())} runs not run)" if self.incomplete
                else self.verdict.value.upper())
        lines = [f"ckpt-harness matrix: {rows} row{'s' * (rows != 1)} x {props} propert{'ies' if props != 1 else 'y'}, "
                 f"{sum(r.cases for r in self.results)} cases in {self.elapsed / 60:.1f} min: {said}", "",
                 *self._grid(cells), ""]
        if self.skipped:
            lines += ["Not run: " + "; ".join(f"{j} ({why})" for j, why in self.skipped.items()), ""]
        findings = [c for c in cells.values() if c.verdict is not None and not c.verdict.ok]
        lines += [f"{c.job} · {c.property}: {c.verdict.value}{_severity(c)}: {one_line(c.reason, 160)}"
                  for c in findings]
        lines += ["matrix.md: every finding with its repro line, every cell, every scenario"]
        return "\n".join(lines)

    def _mark(self, c: Cell) -> str:
        """A grid cell: its verdict, and what the baseline says of it if anything."""
        gate = self.gate(c.job, c.property)
        return f"{c.mark} · {gate.label}" if gate is not None and gate.label else c.mark

    @property
    def verdict(self) -> Verdict:
        """The fold of the judged cells (a cell not run says nothing yet)."""
        return fold(c.verdict for c in self.cells() if c.verdict is not None)

    def costs(self) -> dict[Task, float]:
        """Each run's seconds: what `--costs` balances shards by."""
        return {Task(r.job, r.scenario): r.elapsed for r in self.results}

    def to_json(self) -> dict[str, Any]:
        """The envelope of `Report.to_json` (kind ... versions), then the matrix's
        own, then what it takes to resume or merge it (`from_json`)."""
        return {
            "kind": "matrix",
            "verdict": self.verdict.value,
            "world_size": self.world_size,
            "settings": {"world_size": self.world_size, **self.settings},
            "elapsed_seconds": round(self.elapsed, 1),
            "versions": self.versions,
            "date": self.date,
            "jobs": self.jobs,
            "skipped": self.skipped,
            "properties": self.properties,
            "complete": self.complete,
            "incomplete": self.incomplete,
            "stopped_by": self.stopped_by,
            "missing": [list(t) for t in self.missing],
            "shard": None if self.shard is None else {
                "index": self.shard.index, "count": self.shard.count, "tasks": [list(t) for t in self.tasks or ()]},
            "cells": [self._cell_json(c) for c in self.cells()],
            "baseline": None if self.gating is None else self.gating.to_json(),
            "scenarios": [r.to_json() for r in self.results],
            "rows": {name: spec.to_json() for name, spec in self.rows.items()},
            "catalogue": [s.to_json() for s in self.scenarios],
            "plan": [list(t) for t in self.plan],
        }

    def _cell_json(self, c: Cell) -> dict[str, Any]:
        gate = self.gate(c.job, c.property)
        return {**dataclasses.asdict(c), **({} if gate is None else {"baseline": gate.to_json()})}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "matrix.json") -> "Matrix":
        """Back from `to_json` (cells are derived again from the results);
        UsageError naming `source` for a file that is not one."""
        if not isinstance(data, Mapping) or data.get("kind") != "matrix":
            raise UsageError(f"{source}: not a matrix.json written by `ckpt-harness matrix`")
        if "plan" not in data or "catalogue" not in data:
            raise UsageError(f"{source}: written by an older ckpt-harness, without the plan and catalogue a resume "
                             "or merge needs (it still serves as --costs or --baseline): run the matrix again")
        try:
            shard = data.get("shard")
            settings = {k: v for k, v in data["settings"].items() if k != "world_size"}
            return cls(
                world_size=int(data["world_size"]), jobs=list(data["jobs"]),
                results=[ScenarioResult.from_json(r) for r in data["scenarios"]],
                scenarios=[scenario_files.from_json(s) for s in data["catalogue"]],
                elapsed=float(data["elapsed_seconds"]), versions=dict(data["versions"]),
                skipped=dict(data.get("skipped", {})), date=str(data["date"]), settings=settings,
                rows=_rows(data),
                plan=[Task(*t) for t in data["plan"]],
                tasks=[Task(*t) for t in shard["tasks"]] if shard else None,
                shard=Shard(int(shard["index"]), int(shard["count"])) if shard else None,
                stopped_by=data.get("stopped_by"),
            )
        except UsageError as exc:  # a catalogue entry a check of this version no longer takes
            raise UsageError(f"{source}: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{source}: not a matrix.json written by `ckpt-harness matrix` ({type(exc).__name__}: "
                             f"{exc})") from None

    def with_timelines(self, out: Path) -> "Matrix":
        """This matrix, the timelines of its cases written under `out`/timelines, a folder per row and
        scenario, and named relative to `out` (where matrix.json is): a sharded matrix merges to the
        same matrix.json as the whole, and the folder can be moved with it."""
        results = [r.with_timelines(out / TIMELINES / _folder(r.job) / r.scenario, base=out) for r in self.results]
        return dataclasses.replace(self, results=results)

    def write(self, out: Path) -> tuple[Path, Path]:
        out.mkdir(parents=True, exist_ok=True)
        md, js = out / "matrix.md", out / "matrix.json"
        md.write_text(self.markdown())
        js.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        return md, js


#: The folder of a matrix's --out that holds its cases' timelines.
TIMELINES = "timelines"


def _rows(data: Mapping[str, Any]) -> dict[str, targets.TargetSpec]:
    """The rows of a matrix.json as targets' data; from one written before rows were (its
    `job_refs` and `scripts`), as the matrix of then ran them: its bench settings for every row."""
    if "rows" in data:
        return {name: targets.TargetSpec.from_json(spec) for name, spec in data["rows"].items()}
    settings = data["settings"]
    jobs = {name: targets.TargetSpec("job", {"job": ref, **{k: settings[k] for k in (
        "world_size", "timeout", "launcher", "cold_start") if k in settings}}) for name, ref in data.get(
        "job_refs", {}).items()}
    return {**jobs, **{name: targets.TargetSpec("script", {"script": command, **{k: settings[k] for k in (
        "nproc_per_node", "nnodes", "timeout", "cold_start") if k in settings}}) for name, command in data.get(
        "scripts", {}).items()}}


def _folder(row: str) -> str:
    """A row's name as a folder name ("planted.jobs:Job" -> "planted.jobs_Job")."""
    return re.sub(r"[^\w.-]+", "_", row)


def _severity(c: Cell) -> str:
    """" (missing keys)" for a cell whose failure is a state comparison's."""
    return f" ({Severity[c.severity.upper()].label})" if c.severity else ""


def _md(text: str, limit: int = 400) -> str:
    return one_line(str(text).replace("|", "\\|"), limit)


def read_json(path: Union[str, Path]) -> tuple[dict[str, Any], Path]:
    """The JSON of a matrix.json, given as the file or its directory, and the file's path."""
    path = Path(path)
    file = path / "matrix.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text())
    except OSError as exc:
        raise UsageError(f"cannot read {file}: {exc.strerror or exc}; give a matrix.json written by "
                         "`ckpt-harness matrix`, or its directory") from None
    except ValueError as exc:
        raise UsageError(f"{file}: not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != "matrix" or not isinstance(data.get("scenarios"), list):
        raise UsageError(f"{file}: not a matrix.json written by `ckpt-harness matrix`")
    return data, file


def load(path: Union[str, Path]) -> Matrix:
    """The matrix of a matrix.json (the file or its directory), to resume or merge."""
    data, file = read_json(path)
    return Matrix.from_json(data, str(file))


def read_costs(path: Union[str, Path]) -> dict[Task, float]:
    """Each (row, scenario)'s seconds in a matrix.json, of any version (`--costs`)."""
    data, file = read_json(path)
    try:
        results = [ScenarioResult.from_json(r) for r in data["scenarios"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{file}: a scenario entry is not one `ckpt-harness matrix` wrote ({exc})") from None
    return {Task(r.job, r.scenario): float(r.elapsed) for r in results}


class MatrixInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped `run_matrix`. `matrix` holds the scenarios
    finished before it (`Matrix.missing`: the rest; the ones in flight were
    abandoned, their groups killed); `signum` is the signal."""

    def __init__(self, matrix: Matrix, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.matrix = matrix
        self.signum = signum


# -- merging shards --------------------------------------------------------------------
#: What the shards of one matrix share: (what it is called, how a matrix has it).
_SHARED = (
    ("world size", lambda m: m.world_size),
    ("settings", lambda m: m.settings),
    ("versions", lambda m: m.versions),
    ("rows", lambda m: m.jobs),
    ("row settings", lambda m: {name: spec.to_json() for name, spec in m.rows.items()}),
    ("jobs not run", lambda m: m.skipped),
    ("catalogue", lambda m: [s.definition for s in m.scenarios]),
    ("(row, scenario) runs", lambda m: m.plan),
)


def merge(shards: Sequence[tuple[str, Matrix]]) -> Matrix:
    """The whole matrix of its shards' matrices, each with where it was read
    from: the same cells, verdicts, reasons and scenario results, in the same
    order, as one run of the whole would give. Its elapsed time is the
    longest shard's (they run at once), its date the latest. UsageError,
    saying what differs, for shards of different matrices (settings,
    versions, rows, catalogue), a shard given twice or missing, shards whose
    runs overlap, or one stopped before it finished."""
    if not shards:
        raise UsageError("--merge needs the matrix.json of every shard")
    (first_source, first), *_ = shards
    for source, m in shards:
        if m.shard is None:
            raise UsageError(f"{source} is not a shard's matrix.json (it was not run with --shard K/N): "
                             "merge the matrix.json files of `matrix --shard 1/N` ... `--shard N/N`")
        if m.incomplete:
            raise UsageError(f"{source}: shard {m.shard} was stopped before it finished ({len(m.missing)} runs "
                             f"missing): finish it first with `ckpt-harness matrix --resume {source}`")
        for what, of in _SHARED:
            if of(m) != of(first):
                raise UsageError(f"{source} and {first_source} are shards of different matrices: their {what} differ "
                                 f"({_difference(of(m), of(first), source, first_source)}); run every shard with "
                                 "the same options, versions and catalogue")
    count = first.shard.count  # type: ignore[union-attr]
    by_index: dict[int, str] = {}
    owner: dict[Task, str] = {}
    for source, m in shards:
        shard = m.shard
        assert shard is not None
        if shard.count != count:
            raise UsageError(f"{source} is shard {shard} but {first_source} is shard {first.shard}: give the "
                             f"shards of one split (the same N)")
        if shard.index in by_index:
            raise UsageError(f"shard {shard} given twice: {by_index[shard.index]} and {source}")
        by_index[shard.index] = source
        for task in m.tasks or ():
            if task in owner:
                raise UsageError(f"{source} and {owner[task]} both ran {task.scenario} on {task.row}: the shards "
                                 "were split differently (a different --costs file?); run every shard with the "
                                 "same --costs")
            owner[task] = source
    absent = [k for k in range(1, count + 1) if k not in by_index]
    if absent:
        raise UsageError(f"shard{'s' * (len(absent) > 1)} {', '.join(f'{k}/{count}' for k in absent)} missing: "
                         f"give the matrix.json of every shard of {count}")
    left = [t for t in first.plan if t not in owner]
    if left:
        raise UsageError(f"no shard ran {len(left)} of the matrix's runs (e.g. {left[0].scenario} on "
                         f"{left[0].row}): the shards were split differently; run every shard with the same --costs")
    results = {Task(r.job, r.scenario): r for _, m in shards for r in m.results}
    return dataclasses.replace(
        first, results=[results[t] for t in first.plan], elapsed=max(m.elapsed for _, m in shards),
        date=max(m.date for _, m in shards), tasks=None, shard=None, stopped_by=None)


def _difference(ours: Any, theirs: Any, we: str, they: str) -> str:
    """What tells two values of a shared field apart, shortly."""
    if isinstance(ours, Mapping) and isinstance(theirs, Mapping):
        keys = [k for k in dict.fromkeys([*ours, *theirs]) if ours.get(k) != theirs.get(k)]
        return "; ".join(f"{k}: {ours.get(k)!r} vs. {theirs.get(k)!r}" for k in keys[:3])
    if isinstance(ours, list) and isinstance(theirs, list):
        extra, lacking = [x for x in ours if x not in theirs], [x for x in theirs if x not in ours]
        parts = ([f"only {we} has {_short(extra)}"] if extra else []) + (
            [f"only {they} has {_short(lacking)}"] if lacking else [])
        return "; ".join(parts) or "the same entries in another order"
    return f"{ours!r} vs. {theirs!r}"


def _short(values: Sequence[Any], shown: int = 3) -> str:
    def one(v: Any) -> str:
        if isinstance(v, Task):
            return f"{v.scenario} on {v.row}"
        return str(v[0]) if isinstance(v, tuple) else str(v)  # a scenario's definition: its name
    more = f" and {len(values) - shown} more" if len(values) > shown else ""
    return ", ".join(one(v) for v in values[:shown]) + more


# -- running -------------------------------------------------------------------------
def matrix_rows(given: Sequence[Mapping[str, Any]]) -> tuple[list[targets.Target], dict[str, str]]:
    """The rows the settings of each `given` make (``{"job": "dcp[bf16]",
    "world_size": 2, ...}``, ``{"script": "train.py {ckpt_dir}", ...}``),
    through the chooser every surface uses (`targets.make`), each checked
    before anything runs; and the rows this machine cannot run (a framework
    not installed), each with why, instead of a row of errors. Bad input
    (a script that is not there, an axis a job does not train with) raises."""
    from ckpt_harness.errors import Unavailable

    rows: list[targets.Target] = []
    skipped: dict[str, str] = {}
    for settings in given:
        kind = targets.chosen(settings, "run")
        try:
            target = targets.make(settings, "run").breakable()
            target.preflight()
        except Unavailable as exc:
            skipped[str(settings[kind.option])] = str(exc)
            continue
        rows.append(target)
    return rows, skipped


def run_matrix(
    rows: Sequence[targets.Target],
    scenarios: Sequence[Scenario],
    *,
    parallel: int = SETTINGS["parallel"].default,
    reduce: bool = True,
    scenarios_at_once: int = SCENARIOS_AT_ONCE,
    workdir: Optional[Path] = None,
    keep: bool = False,
    progress: Optional[Progress] = None,
    skipped: Mapping[str, str] = {},
    shard: Optional[Shard] = None,
    costs: Optional[Mapping[Task, float]] = None,
    previous: Optional[Matrix] = None,
) -> Matrix:
    """Run every scenario that applies against every row (a target of any
    kind: `matrix_rows`), showing cases as they finish and a line per
    finished scenario on `progress`. `reduce=False` runs every case's faulted
    save and resume (the naive catalogue, for comparison); `scenarios_at_once`
    applies when `parallel` > 1. `skipped`: rows not run, each with why.

    The rows' scenarios go in turn, row by row (every row's first scenario,
    then every row's second...): a row's first scenarios all wait for its
    golden run (a script's is a torchrun run of seconds), so the rows'
    golden runs go at once rather than one after the other.

    `shard`: only that shard's part of the runs (`shards.assign`, balanced by
    `costs`). `previous`: a matrix of the same rows and scenarios that was
    stopped (`resume`): only the runs it lacks are made, its results kept.

    On SIGINT (KeyboardInterrupt, or `errors.Interrupted` for SIGTERM) the
    runs not started are cancelled, every group is killed (`launch.cancel`:
    the process can start none after), the scenarios in flight are abandoned
    and `MatrixInterrupted` is raised with the matrix of those that finished,
    its temporary directory removed."""
    started = time.monotonic()
    if not rows and not skipped:
        raise UsageError("a matrix needs at least one row: give --job or --script")
    for target in rows:
        target.warm(parallel)  # before any run: no deadline pays for what the runs share
    names: list[str] = []
    for i, target in enumerate(rows):
        names.append(target.row if target.row not in names else f"{target.row} #{i + 1}")  # apart, if cut alike
    specs = {name: targets.spec(target) for name, target in zip(names, rows)}
    plans = [(target, name, [s for s in scenarios if s.applies_to(name)]) for target, name in zip(rows, names)]
    tasks = [(i, name, scenario) for i, (_, name, mine) in enumerate(plans) for scenario in mine]
    tasks.sort(key=lambda task: plans[task[0]][2].index(task[2]))
    plan = [Task(name, scenario.name) for _, name, scenario in tasks]
    finished: dict[Task, ScenarioResult] = {}
    before = 0.0
    skipped = dict(skipped)
    if previous is not None:
        if names != previous.jobs or plan != previous.plan:
            raise UsageError(f"the rows and scenarios are not those of the matrix to resume "
                             f"({_difference(plan, previous.plan, 'this run', 'the matrix')}): resume it with the "
                             "jobs installed and the catalogue it was made with, or run it again")
        mine, shard, before = list(previous.tasks or ()), previous.shard, previous.elapsed
        finished = {Task(r.job, r.scenario): r for r in previous.results if Task(r.job, r.scenario) in mine}
        skipped = {**previous.skipped, **skipped}
    elif shard is not None:
        mine = assign(plan, shard.count, costs)[shard.index - 1]
    else:
        mine = list(plan)
    wanted = set(mine) - set(finished)
    todo = [task for task, key in zip(tasks, plan) if key in wanted]
    first = rows[0].values if rows else {}
    # what the markdown says of how rows ran: torchrun's layout, the launcher; a cold start where asked for
    shown = {name: first[name] for name in ("nproc_per_node", "nnodes", "launcher") if name in first}
    shown.update({"cold_start": True} if first.get("cold_start") else {})

    def matrix(stopped_by: Optional[str] = None) -> Matrix:
        return Matrix(rows[0].world_size if rows else 0, names, [finished[t] for t in plan if t in finished],
                      list(scenarios), before + time.monotonic() - started, versions(), skipped,
                      settings={"timeout": rows[0].timeout if rows else 0.0, "parallel": parallel, **shown},
                      rows=specs, plan=plan, tasks=mine if shard is not None else None, shard=shard,
                      stopped_by=stopped_by)

    root = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="ckpt-matrix-"))
    benches = [Bench(target, root / f"job{i}", parallel=parallel, reduce=reduce, name=name)
               for i, (target, name, _) in enumerate(plans)]
    left = [sum(task[0] == i for task in todo) for i in range(len(plans))]
    lock = threading.Lock()
    stopping = threading.Event()
    done = 0

    def one(task: tuple[int, str, Scenario]) -> ScenarioResult:
        nonlocal done
        i, name, scenario = task
        result = benches[i].run(scenario, progress=progress.piece(f"{name} {scenario.name}") if progress else None)
        with lock:
            if stopping.is_set():  # abandoned: what it says after its groups were killed is not its result
                return result
            done += 1
            if progress:
                progress.line(f"[{done:>3}/{len(todo)}] {name:16} {scenario.name:24} {result.verdict.value.upper():7} "
                              f"{result.cases:>3} cases {result.elapsed:6.1f}s")
            left[i] -= 1
            if not left[i] and not keep:  # the job's last scenario: its runs are no longer shared
                shutil.rmtree(root / f"job{i}", ignore_errors=True)
        return result

    pool = concurrent.futures.ThreadPoolExecutor(scenarios_at_once if parallel > 1 else 1)
    futures: dict[concurrent.futures.Future, Task] = {}
    try:
        for task in todo:
            futures[pool.submit(one, task)] = Task(task[1], task[2].name)
        for future in concurrent.futures.as_completed(futures):
            finished[futures[future]] = future.result()
    except KeyboardInterrupt as exc:
        with lock:  # what finished before the signal counts; nothing after it does
            stopping.set()
            finished.update({futures[f]: f.result() for f in futures
                             if f.done() and not f.cancelled() and f.exception() is None})
        if progress:
            progress.mute()
        pool.shutdown(wait=False, cancel_futures=True)
        from ckpt_harness.launch import cancel

        cancel()
        concurrent.futures.wait([f for f in futures if not f.cancelled()], timeout=ABANDON_WAIT)
        _discard(root, workdir, keep)
        signum = signal_of(exc)
        raise MatrixInterrupted(matrix(signal.Signals(signum).name), signum) from None
    except BaseException:  # a scenario's bad input: the runs not started are not made
        pool.shutdown(wait=True, cancel_futures=True)
        _discard(root, workdir, keep)
        raise
    pool.shutdown()
    _discard(root, workdir, keep)
    return matrix()


def _discard(root: Path, workdir: Optional[Path], keep: bool) -> None:
    if workdir is None and not keep:
        shutil.rmtree(root, ignore_errors=True)


def resume(previous: Matrix, *, workdir: Optional[Path] = None, keep: bool = False,
           progress: Optional[Progress] = None, source: str = "matrix.json") -> Matrix:
    """`previous` (a matrix or shard that was stopped) finished: the runs it
    lacks made with its rows (each rebuilt from its settings, `targets.rebuild`),
    catalogue and settings, on the versions it was measured with (UsageError
    otherwise: one matrix is one measurement)."""
    now = versions()
    if now != previous.versions:
        raise UsageError(f"{source} was measured on other versions ({_difference(previous.versions, now, '', '')}, "
                         "then vs. now): a matrix is one measurement; run it again whole")
    rows = [targets.rebuild(previous.rows[name]) for name in previous.jobs]
    return run_matrix(rows, previous.scenarios, parallel=previous.settings["parallel"], workdir=workdir, keep=keep,
                      progress=progress, previous=previous)
