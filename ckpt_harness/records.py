"""What one group run left behind, gathered for the oracle.

Joins the launcher's outcome (who finished, failed, crashed or hung, with
stacks) with each rank's records (states after load and saves, errors) and
trace (the collective each rank was last in). The oracle reads only this.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from ckpt_harness.inject import trace
from ckpt_harness.launch import GroupOutcome, RankOutcome
from ckpt_harness.runner import read_records, trace_path
from ckpt_harness.state import Record


@dataclasses.dataclass
class RankRun:
    outcome: RankOutcome
    records: list[dict]
    events: list[dict]

    @property
    def rank(self) -> int:
        return self.outcome.rank

    def find(self, event: str, step: Optional[int] = None) -> Optional[dict]:
        for record in self.records:
            if record["event"] == event and (step is None or record.get("step") == step):
                return record
        return None

    @property
    def error(self) -> Optional[dict]:
        return self.find("error")

    def where(self) -> str:
        return trace.where(self.events)


@dataclasses.dataclass
class Run:
    name: str
    run_dir: Path
    outcome: GroupOutcome
    ranks: list[RankRun]

    @classmethod
    def collect(cls, name: str, run_dir: Path, outcome: GroupOutcome) -> "Run":
        ranks = [
            RankRun(r, read_records(run_dir, r.rank), trace.read_events(trace_path(run_dir, r.rank)))
            for r in outcome.ranks
        ]
        return cls(name, run_dir, outcome, ranks)

    def states(self, event: str, step: Optional[int] = None) -> Optional[dict[int, Record]]:
        """Each rank's state at `event` (and `step`), or None if a rank lacks it."""
        found = {}
        for r in self.ranks:
            record = r.find(event, step)
            if record is None:
                return None
            found[r.rank] = record["state"]
        return found

    def loaded_steps(self) -> dict[int, Optional[int]]:
        return {r.rank: r.find("loaded")["step"] for r in self.ranks if r.find("loaded")}

    def saved_steps(self) -> list[int]:
        """Steps whose save returned on every rank, in order."""
        per_rank = [[rec["step"] for rec in r.records if rec["event"] == "saved"] for r in self.ranks]
        return [s for s in per_rank[0] if all(s in steps for steps in per_rank[1:])]
