"""Shards put together (`ckpt-harness matrix --merge`): the whole matrix from the
matrix.json of every shard, as one run of the whole would have made it.

Its own module because a merge runs nothing and reads no file: it takes the
shards' matrices (`files.load`) and checks that they are the parts of one
matrix. `_difference`, what tells two of them apart, also says why a stopped
matrix cannot be resumed (`run.resume`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from ckpt_harness.catalogue.matrix.model import Matrix
from ckpt_harness.catalogue.shards import Task
from ckpt_harness.errors import UsageError

#: What the shards of one matrix share: (what it is called, how a matrix has it).
_SHARED = (
    ("world size", lambda m: m.world_size),
    ("settings", lambda m: m.settings),
    ("versions", lambda m: m.versions),
    ("rows", lambda m: m.names),
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
