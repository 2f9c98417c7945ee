"""A matrix in Markdown: matrix.md, and the summary a terminal shows of it.

What a person reads of a matrix, kept apart from the matrix itself (`model`):
the grid of marks (with what a baseline says of each cell), the findings with
their repro lines, every cell and every scenario.
"""

from __future__ import annotations

from typing import Mapping

from ckpt_harness import targets
from ckpt_harness.catalogue.expectations import CellGate
from ckpt_harness.catalogue.matrix.model import NOT_RUN, Cell, Matrix
from ckpt_harness.oracle import PROPERTIES
from ckpt_harness.oracle.causes import Severity
from ckpt_harness.report import one_line

#: A cell the baseline has no word on.
_NO_GATE = CellGate(())


def of(matrix: Matrix) -> str:
    """matrix.md: the grid, then every finding with its repro line, every cell and every scenario."""
    props = matrix.properties
    cells = {(c.job, c.property): c for c in matrix.cells()}
    layout = (f" under torchrun ({matrix.settings.get('nnodes')} node(s) x {matrix.settings.get('nproc_per_node')} "
              "workers)" if "nproc_per_node" in matrix.settings else "")
    lines = [
        "# Checkpoint compatibility matrix", "",
        f"`ckpt-harness matrix` at world size {matrix.world_size}{layout}, {len(matrix.scenarios)} scenarios, "
        f"{sum(r.cases for r in matrix.results)} cases in {matrix.elapsed / 60:.1f} min, on {matrix.date}.", "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in matrix.versions.items()) + ".", "",
    ]
    if matrix.shard is not None:
        lines += [f"**Shard {matrix.shard.index} of {matrix.shard.count}**: {len(matrix.tasks or ())} of the "
                  f"{len(matrix.plan)} (row, scenario) runs; `ckpt-harness matrix --merge` takes every shard's "
                  f"matrix.json and writes the whole matrix.", ""]
    if matrix.incomplete:
        stopped = f"stopped by {matrix.stopped_by}" if matrix.stopped_by else "stopped"
        lines += [f"**Incomplete**: {stopped} with {len(matrix.missing)} of its {len(matrix.tasks or ())} (row, "
                  f"scenario) runs not run ({NOT_RUN} below); `ckpt-harness matrix --resume DIR` on the "
                  "directory of this matrix.json runs them.", ""]
    named = commands(matrix)
    if named:
        lines += ["Commands: " + "; ".join(f"**{name}**: `{command}`" for name, command in named.items())
                  + ".", ""]
    row = noun(matrix)
    lines += _grid(matrix, cells)
    if matrix.skipped:
        lines += ["", "Not run: " + "; ".join(f"{j} ({why})" for j, why in matrix.skipped.items())]
    lines += ["", "Properties: " + "; ".join(f"**{p}**: {PROPERTIES[p]}" for p in props) + ".", ""]
    findings = [c for c in matrix.cells() if c.verdict is not None and not c.verdict.ok]
    if findings:
        lines += ["## Findings", ""]
        for c in findings:
            lines += [f"### {c.job} · {c.property}: {c.verdict.value}{_severity(c)}", "", _md(c.reason), ""]
            if c.repro:
                lines += ["```sh", c.repro, "```", ""]
    if matrix.gating is not None:
        lines += [f"## Against the baseline {matrix.gating.source}", "", "```text", matrix.gating.explain(), "```", ""]
    gated = matrix.gating is not None
    lines += ["## Every cell", "", f"| {row} | property | verdict | {'baseline | ' * gated}scenarios | reason |",
              "|---|---|---|" + "---|" * gated + "---|---|"]
    for c in matrix.cells():
        label = f"{(matrix.gate(c.job, c.property) or _NO_GATE).label} | " if gated else ""
        lines.append(f"| {c.job} | {c.property} | {c.shown} | {label}{', '.join(c.scenarios)} | "
                     f"{_md(c.reason, 240)} |")
    lines += ["", "## Scenarios", "", "| scenario | property | check | what it does |", "|---|---|---|---|"]
    for s in matrix.scenarios:
        lines.append(f"| {s.name} | {s.property} | {s.check} | {_md(s.description)} |")
    return "\n".join(lines) + "\n"


def _grid(matrix: Matrix, cells: Mapping[tuple[str, str], Cell]) -> list[str]:
    """The table: a row per job or script, a column per property."""
    props = matrix.properties
    lines = [f"| {noun(matrix)} | " + " | ".join(props) + " |",
             "|---|" + "---|" * len(props)]
    return lines + [f"| {job} | " + " | ".join(_mark(matrix, cells[job, p]) for p in props) + " |"
                    for job in matrix.names]


def noun(matrix: Matrix) -> str:
    """What its rows are: their kind's name ("job", "script"), or "row" for rows of several kinds."""
    kinds = {spec.kind for spec in matrix.rows.values()}
    return kinds.pop() if len(kinds) == 1 else "row"


def commands(matrix: Matrix) -> dict[str, str]:
    """Each row whose name does not start with what picked it (a script's
    command, which its name shows without directories) -> that."""
    picked = {name: str(targets.picked_by(spec)) for name, spec in matrix.rows.items()}
    return {name: value for name, value in picked.items() if not name.startswith(value)}


def summary(matrix: Matrix) -> str:
    """What a terminal shows of it (matrix.md holds the rest): the table,
    then a line per cell that did not pass."""
    cells = {(c.job, c.property): c for c in matrix.cells()}
    rows, props = len(matrix.names), len(matrix.properties)
    said = (f"INCOMPLETE ({len(matrix.missing)} of {len(matrix.tasks or ())} runs not run)" if matrix.incomplete
            else matrix.verdict.value.upper())
    lines = [f"ckpt-harness matrix: {rows} row{'s' * (rows != 1)} x {props} propert{'ies' if props != 1 else 'y'}, "
             f"{sum(r.cases for r in matrix.results)} cases in {matrix.elapsed / 60:.1f} min: {said}", "",
             *_grid(matrix, cells), ""]
    if matrix.skipped:
        lines += ["Not run: " + "; ".join(f"{j} ({why})" for j, why in matrix.skipped.items()), ""]
    findings = [c for c in cells.values() if c.verdict is not None and not c.verdict.ok]
    lines += [f"{c.job} · {c.property}: {c.verdict.value}{_severity(c)}: {one_line(c.reason, 160)}"
              for c in findings]
    lines += ["matrix.md: every finding with its repro line, every cell, every scenario"]
    return "\n".join(lines)


def _mark(matrix: Matrix, c: Cell) -> str:
    """A grid cell: its verdict, and what the baseline says of it if anything."""
    gate = matrix.gate(c.job, c.property)
    return f"{c.mark} · {gate.label}" if gate is not None and gate.label else c.mark


def _severity(c: Cell) -> str:
    """" (missing keys)" for a cell whose failure is a state comparison's."""
    return f" ({Severity[c.severity.upper()].label})" if c.severity else ""


def _md(text: str, limit: int = 400) -> str:
    return one_line(str(text).replace("|", "\\|"), limit)
