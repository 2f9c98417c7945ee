"""`ckpt-harness matrix`: the catalogue against jobs, as a compatibility matrix.

Rows are jobs, columns are properties; a cell folds the verdicts of every
scenario that judges that property for that job. Findings against real
frameworks are results: the matrix is complete when every cell is judged
(pass, fail or n/a), whatever the verdicts.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from ckpt_harness import targets
from ckpt_harness.catalogue.bench import Bench
from ckpt_harness.catalogue.scenario import Scenario, ScenarioResult
from ckpt_harness.config import SETTINGS, RunConfig, ScriptConfig
from ckpt_harness.oracle import PROPERTIES
from ckpt_harness.progress import Progress
from ckpt_harness.report import versions
from ckpt_harness.verdict import Verdict, fold

#: Scenarios run at once (when `parallel` > 1), each running `parallel` cases
#: at once: a catalogue is mostly waiting (hang deadlines, failure grace,
#: delays), and a second scenario's work fills those waits. Two keep the
#: groups at once within 2 x `parallel`.
SCENARIOS_AT_ONCE = 2


@dataclasses.dataclass(frozen=True)
class Cell:
    job: str
    property: str
    verdict: Verdict
    reason: str
    repro: Optional[str]
    scenarios: tuple[str, ...]


def cell(job: str, prop: str, results: Sequence[ScenarioResult]) -> Cell:
    """One cell from the scenarios of one property (`verdict.fold`), with the
    reason of the first scenario behind its verdict."""
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
    return Cell(job, prop, verdict, f"{hit[0].scenario}: {hit[0].reason}{more}", hit[0].repro, names)


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
    #: Script rows (`matrix --script`): row name -> the script's whole command.
    scripts: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def properties(self) -> list[str]:
        used = {s.property for s in self.scenarios}
        return [p for p in PROPERTIES if p in used]

    def cells(self) -> list[Cell]:
        return [cell(job, prop, [r for r in self.results if r.job == job and r.property == prop])
                for job in self.jobs for prop in self.properties]

    @property
    def complete(self) -> bool:
        """Every cell judged: the command's success, whatever the verdicts."""
        return all(c.verdict.judged for c in self.cells())

    def markdown(self) -> str:
        props = self.properties
        cells = {(c.job, c.property): c for c in self.cells()}
        layout = (f" under torchrun ({self.settings.get('nnodes')} node(s) x {self.settings.get('nproc_per_node')} "
                  "workers)" if self.scripts else "")
        lines = [
            "# Checkpoint compatibility matrix", "",
            f"`ckpt-harness matrix` at world size {self.world_size}{layout}, {len(self.scenarios)} scenarios, "
            f"{sum(r.cases for r in self.results)} cases in {self.elapsed / 60:.1f} min, on {self.date}.", "",
            "Versions: " + ", ".join(f"{k} {v}" for k, v in self.versions.items()) + ".", "",
        ]
        if self.scripts:
            lines += ["Scripts: " + "; ".join(f"**{name}**: `{command}`" for name, command in self.scripts.items())
                      + ".", ""]
        row = "script" if self.scripts else "job"
        lines += [
            f"| {row} | " + " | ".join(props) + " |",
            "|---|" + "---|" * len(props),
        ]
        for job in self.jobs:
            lines.append(f"| {job} | " + " | ".join(cells[job, p].verdict.mark for p in props) + " |")
        if self.skipped:
            lines += ["", "Not run: " + "; ".join(f"{j} ({why})" for j, why in self.skipped.items())]
        lines += ["", "Properties: " + "; ".join(f"**{p}**: {PROPERTIES[p]}" for p in props) + ".", ""]
        findings = [c for c in self.cells() if not c.verdict.ok]
        if findings:
            lines += ["## Findings", ""]
            for c in findings:
                lines += [f"### {c.job} · {c.property}: {c.verdict.value}", "", _md(c.reason), ""]
                if c.repro:
                    lines += ["```sh", c.repro, "```", ""]
        lines += ["## Every cell", "", f"| {row} | property | verdict | scenarios | reason |", "|---|---|---|---|---|"]
        for c in self.cells():
            lines.append(f"| {c.job} | {c.property} | {c.verdict.value} | {', '.join(c.scenarios)} | "
                         f"{_md(c.reason, 240)} |")
        lines += ["", "## Scenarios", "", "| scenario | property | check | what it does |", "|---|---|---|---|"]
        for s in self.scenarios:
            lines.append(f"| {s.name} | {s.property} | {s.check} | {_md(s.description)} |")
        return "\n".join(lines) + "\n"

    @property
    def verdict(self) -> Verdict:
        return fold(c.verdict for c in self.cells())

    def to_json(self) -> dict[str, Any]:
        """The envelope of `Report.to_json` (kind ... versions), then the matrix's own."""
        return {
            "kind": "matrix",
            "verdict": self.verdict.value,
            "world_size": self.world_size,
            "settings": {"world_size": self.world_size, **self.settings},
            "elapsed_seconds": round(self.elapsed, 1),
            "versions": self.versions,
            "date": self.date,
            "jobs": self.jobs,
            "scripts": self.scripts,
            "skipped": self.skipped,
            "properties": self.properties,
            "complete": self.complete,
            "cells": [dataclasses.asdict(c) for c in self.cells()],
            "scenarios": [{f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name != "results"}
                          for r in self.results],
        }

    def write(self, out: Path) -> tuple[Path, Path]:
        out.mkdir(parents=True, exist_ok=True)
        md, js = out / "matrix.md", out / "matrix.json"
        md.write_text(self.markdown())
        js.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        return md, js


def _md(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"




def run_matrix(
    jobs: Sequence[Union[str, type]],
    scenarios: Sequence[Scenario],
    *,
    world_size: int = SETTINGS["world_size"].default,
    timeout: float = SETTINGS["timeout"].default,
    parallel: int = SETTINGS["parallel"].default,
    reduce: bool = True,
    scenarios_at_once: int = SCENARIOS_AT_ONCE,
    workdir: Optional[Path] = None,
    keep: bool = False,
    progress: Optional[Progress] = None,
    scripts: Sequence[ScriptConfig] = (),
) -> Matrix:
    """Run every scenario that applies against every job, showing cases as
    they finish and a line per finished scenario on `progress`. `reduce=False`
    runs every case's faulted save and resume (the naive catalogue, for comparison);
    `scenarios_at_once` applies when `parallel` > 1.

    `scripts` instead of `jobs`: a row per unmodified script under torchrun
    (`targets.ScriptTarget`), all at one layout and timeout (theirs: `world_size` and
    `timeout` are not used), named by their commands (`row_name`)."""
    from ckpt_harness.errors import Unavailable, UsageError
    from ckpt_harness.jobref import resolve

    started = time.monotonic()
    rows: list[tuple[targets.Target, str]] = []
    skipped: dict[str, str] = {}
    if scripts:
        if jobs:
            raise UsageError("a matrix has rows of jobs or of scripts, not both: run one matrix of each")
        layouts = {(s.nproc_per_node, s.nnodes, s.timeout) for s in scripts}
        if len(layouts) > 1:
            raise UsageError("the scripts of one matrix share one layout and timeout (nproc_per_node, nnodes, "
                             f"timeout); got {', '.join(map(str, sorted(layouts)))}")
        if any(s.max_restarts for s in scripts):
            raise UsageError("a matrix row runs each resume itself, and torchrun restarting a faulted group would "
                             "run its fault again: leave out --max-restarts")
        world_size, timeout = scripts[0].world_size, scripts[0].timeout
    for config in scripts:
        target = targets.of(config)
        target.preflight()  # a script that is not there is bad input, not a row of n/a cells
        rows.append((target, target.row))
    for job in jobs:
        try:
            ref, _ = resolve(job)
        except Unavailable as exc:  # a framework not installed here: not run, and said why
            skipped[job if isinstance(job, str) else job.__qualname__] = str(exc)
            continue
        rows.append((targets.of(RunConfig.build(ref, world_size=world_size, timeout=timeout)), ref.display))
    names: list[str] = []
    for i, (_, name) in enumerate(rows):
        names.append(name if name not in names else f"{name} #{i + 1}")  # rows apart, if cut alike
    commands = {names[i]: config.script for i, config in enumerate(scripts)}  # script rows come first
    plans = [(target, name, [s for s in scenarios if s.applies_to(name)]) for (target, _), name in zip(rows, names)]
    root = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="ckpt-matrix-"))
    tasks = [(i, name, scenario) for i, (_, name, mine) in enumerate(plans) for scenario in mine]
    if scripts:  # row by row in turn: a script row's first scenarios all wait for its golden torchrun run,
        # so the rows' golden runs go at once rather than one row after the other
        tasks.sort(key=lambda task: plans[task[0]][2].index(task[2]))
    benches = [Bench(target, root / f"job{i}", parallel=parallel, reduce=reduce, name=name)
               for i, (target, name, _) in enumerate(plans)]
    left = [len(mine) for _, _, mine in plans]
    lock = threading.Lock()
    done = 0

    def one(task: tuple[int, str, Scenario]) -> ScenarioResult:
        nonlocal done
        i, name, scenario = task
        result = benches[i].run(scenario, progress=progress.piece(f"{name} {scenario.name}") if progress else None)
        with lock:
            done += 1
            if progress:
                progress.line(f"[{done:>3}/{len(tasks)}] {name:16} {scenario.name:24} {result.verdict.value.upper():7} "
                              f"{result.cases:>3} cases {result.elapsed:6.1f}s")
            left[i] -= 1
            if not left[i] and not keep:  # the job's last scenario: its runs are no longer shared
                shutil.rmtree(root / f"job{i}", ignore_errors=True)
        return result

    try:
        with concurrent.futures.ThreadPoolExecutor(scenarios_at_once if parallel > 1 else 1) as pool:
            results = list(pool.map(one, tasks))
    finally:
        if workdir is None and not keep:
            shutil.rmtree(root, ignore_errors=True)
    layout = {"nproc_per_node": scripts[0].nproc_per_node, "nnodes": scripts[0].nnodes} if scripts else {}
    return Matrix(world_size, names, results, list(scenarios), time.monotonic() - started, versions(), skipped,
                  settings={"timeout": timeout, "parallel": parallel, **layout}, scripts=commands)
