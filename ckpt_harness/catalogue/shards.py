"""A matrix split into N shards: which (row, scenario) runs each shard makes;
and one scenario's cases split into N parts (`Shard.part`, `CasePart`).

`ckpt-harness matrix --shard K/N` runs the K-th of N parts of the matrix, so
that N machines (a CI job matrix, a Slurm array) run one matrix at once and
`matrix --merge` puts their matrix.json files together. Every shard computes
the same split from the same inputs, with no coordination: the split is a
pure function of the matrix's runs, their costs and N, with every tie broken
by names, so it is the same on every machine.

A shard's cost is the sum of its runs' costs: their `elapsed` in a previous
matrix.json (`--costs`), or one each without one. Work is assigned costliest
first to the least-loaded shard. A row's scenarios share its golden run (the
bench makes it once per row and process), so a row goes to one shard whole,
unless that would fill the emptiest shard past `ROW_SLACK` times its fair
share (the total over N): then the row is split into its scenarios, which
are placed one by one like the rest. Every shard that gets part of a split
row makes that row's golden run itself (one more golden run per extra shard).

`ckpt-harness scenario NAME --shard K/N` splits one scenario instead: the
K-th contiguous part of the cases its check plans (a faults scenario's,
the only kind with more than a handful). Each shard makes the scenario's
golden run and plans the same case list from it; it records that list
(`CasePart`), and `scenario NAME --merge` refuses shards that planned
different ones, or that are not exactly shards 1..N.

Torch-free and light: the command line checks `--shard` with it before
anything heavy is imported.
"""

from __future__ import annotations

import dataclasses
import heapq
import re
from typing import Any, Mapping, NamedTuple, Optional, Sequence, TypeVar

from ckpt_harness.errors import UsageError

#: How far past its fair share (the total cost over N) a shard may be filled
#: by a whole row before the row is split: a split row costs each of its
#: shards a golden run, which the costs do not show.
ROW_SLACK = 1.1

T = TypeVar("T")


class Task(NamedTuple):
    """One scenario against one row of a matrix: the unit shards split."""

    row: str
    scenario: str


@dataclasses.dataclass(frozen=True)
class Shard:
    """The `index`-th (1-based) of `count` shards."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> "Shard":
        """`K/N` as given to `--shard`; UsageError saying what to give."""
        found = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if found is None:
            raise UsageError(f"--shard {text}: give K/N, the shard to run (K, from 1) of N, e.g. --shard 2/3")
        index, count = int(found[1]), int(found[2])
        if count < 1:
            raise UsageError(f"--shard {text}: N must be at least 1 (the number of shards)")
        if not 1 <= index <= count:
            raise UsageError(f"--shard {text}: K must be 1..N (1..{count}): shards are numbered from 1, "
                             f"e.g. --shard 1/{count} to --shard {count}/{count}")
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def part(self, items: Sequence[T]) -> list[T]:
        """This shard's contiguous part of `items`, the parts' lengths differing
        by one at most. Contiguous, not every N-th: a save's neighbouring cases
        often leave the same directory and share one resume (`pipeline.resumes`),
        which a split then keeps within one shard."""
        n = len(items)
        return list(items[(self.index - 1) * n // self.count:self.index * n // self.count])


@dataclasses.dataclass(frozen=True)
class CasePart:
    """The part of one scenario's cases a shard ran, and every case the
    scenario planned: what the shards of one run must agree on."""

    shard: Shard
    planned: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"index": self.shard.index, "count": self.shard.count, "planned": list(self.planned)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CasePart":
        return cls(Shard(int(data["index"]), int(data["count"])), tuple(str(c) for c in data["planned"]))


def assign(tasks: Sequence[Task], count: int, costs: Optional[Mapping[Task, float]] = None) -> list[list[Task]]:
    """`tasks` split into `count` shards, each in the order of `tasks`.

    `costs` holds known costs (seconds); a task it lacks costs their mean
    (a row or scenario added since), and with no costs every task costs 1.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    cost = task_costs(tasks, costs)
    order = {task: i for i, task in enumerate(tasks)}
    rows: dict[str, list[Task]] = {}
    for task in tasks:
        rows.setdefault(task.row, []).append(task)
    room = ROW_SLACK * sum(cost.values()) / count
    shards: list[list[Task]] = [[] for _ in range(count)]
    loads = [0.0] * count
    # costliest first; ties by row, then scenario: a row's item sorts by its first scenario
    waiting = [(-sum(cost[t] for t in group), group[0].row, group[0].scenario, tuple(group)) for group in rows.values()]
    heapq.heapify(waiting)
    while waiting:
        minus, _, _, item = heapq.heappop(waiting)
        k = min(range(count), key=lambda i: (loads[i], i))
        if len(item) > 1 and loads[k] - minus > room:  # a whole row would overfill the emptiest shard
            for t in item:
                heapq.heappush(waiting, (-cost[t], t.row, t.scenario, (t,)))
            continue
        shards[k] += item
        loads[k] -= minus
    return [sorted(shard, key=order.__getitem__) for shard in shards]


def task_costs(tasks: Sequence[Task], costs: Optional[Mapping[Task, float]] = None) -> dict[Task, float]:
    """Each task's cost: its known one, else the mean of the known ones (1 if none is known)."""
    known = {t: float(costs[t]) for t in tasks if costs and t in costs}
    default = sum(known.values()) / len(known) if known else 1.0
    return {t: known.get(t, default) for t in tasks}
