"""A matrix on disk: matrix.json (written, and read back to resume, merge or
balance shards by), matrix.md beside it, and its cases' timelines.

The "jobs" key of matrix.json holds `Matrix.names`: files written before keep
loading, as `--resume`, `--merge`, `--costs` and `--baseline` read them.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Mapping, Union

from ckpt_harness import targets
from ckpt_harness.catalogue import scenario_files
from ckpt_harness.catalogue.matrix import markdown
from ckpt_harness.catalogue.matrix.model import Cell, Matrix
from ckpt_harness.catalogue.scenario import ScenarioResult
from ckpt_harness.catalogue.shards import Shard, Task
from ckpt_harness.errors import UsageError


def to_json(matrix: Matrix) -> dict[str, Any]:
    """The envelope of `Report.to_json` (kind ... versions), then the matrix's
    own, then what it takes to resume or merge it (`from_json`)."""
    return {
        "kind": "matrix",
        "verdict": matrix.verdict.value,
        "world_size": matrix.world_size,
        "settings": {"world_size": matrix.world_size, **matrix.settings},
        "elapsed_seconds": round(matrix.elapsed, 1),
        "versions": matrix.versions,
        "date": matrix.date,
        "jobs": matrix.names,
        "skipped": matrix.skipped,
        "properties": matrix.properties,
        "complete": matrix.complete,
        "incomplete": matrix.incomplete,
        "stopped_by": matrix.stopped_by,
        "missing": [list(t) for t in matrix.missing],
        "shard": None if matrix.shard is None else {
            "index": matrix.shard.index, "count": matrix.shard.count, "tasks": [list(t) for t in matrix.tasks or ()]},
        "cells": [_cell_json(matrix, c) for c in matrix.cells()],
        "baseline": None if matrix.gating is None else matrix.gating.to_json(),
        "scenarios": [r.to_json() for r in matrix.results],
        "rows": {name: spec.to_json() for name, spec in matrix.rows.items()},
        "catalogue": [s.to_json() for s in matrix.scenarios],
        "plan": [list(t) for t in matrix.plan],
    }


def _cell_json(matrix: Matrix, c: Cell) -> dict[str, Any]:
    gate = matrix.gate(c.job, c.property)
    return {**dataclasses.asdict(c), **({} if gate is None else {"baseline": gate.to_json()})}


def from_json(data: Mapping[str, Any], source: str = "matrix.json") -> Matrix:
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
        return Matrix(
            world_size=int(data["world_size"]), names=list(data["jobs"]),
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


def with_timelines(matrix: Matrix, out: Path) -> Matrix:
    """`matrix`, the timelines of its cases written under `out`/timelines, a folder per row and
    scenario, and named relative to `out` (where matrix.json is): a sharded matrix merges to the
    same matrix.json as the whole, and the folder can be moved with it."""
    results = [r.with_timelines(out / TIMELINES / _folder(r.job) / r.scenario, base=out) for r in matrix.results]
    return dataclasses.replace(matrix, results=results)


def write(matrix: Matrix, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / "matrix.md", out / "matrix.json"
    md.write_text(markdown.of(matrix))
    js.write_text(json.dumps(to_json(matrix), indent=1) + "\n")
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
    return from_json(data, str(file))


def read_costs(path: Union[str, Path]) -> dict[Task, float]:
    """Each (row, scenario)'s seconds in a matrix.json, of any version (`--costs`)."""
    data, file = read_json(path)
    try:
        results = [ScenarioResult.from_json(r) for r in data["scenarios"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{file}: a scenario entry is not one `ckpt-harness matrix` wrote ({exc})") from None
    return {Task(r.job, r.scenario): float(r.elapsed) for r in results}
