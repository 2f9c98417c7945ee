"""What a process group's run came to: each rank's outcome, and the group's.

The launchers' answer, read by everything above them (records/, oracle/,
the pipelines): one small module of plain types that both launchers give
(the warm fork server's `launch.group` and torchrun's `launch.elastic`),
rather than types living inside one launcher's machinery.
"""

from __future__ import annotations

import dataclasses
import enum
import signal
from pathlib import Path
from typing import Optional

__all__ = ["Cut", "GroupOutcome", "RankOutcome", "RankStatus"]


class RankStatus(str, enum.Enum):
    RUNNING = "running"
    #: The entry returned.
    OK = "ok"
    #: The entry raised.
    FAILED = "failed"
    #: The process ended on its own (signal, exit).
    CRASHED = "crashed"
    #: Still running at the deadline.
    HUNG = "hung"

    @property
    def ended_badly(self) -> bool:
        return self in (RankStatus.FAILED, RankStatus.CRASHED)


@dataclasses.dataclass
class RankOutcome:
    rank: int
    pid: int
    log: Path
    status: RankStatus = RankStatus.RUNNING
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    #: Seconds from launch until the entry returned or raised.
    finished_at: Optional[float] = None
    #: All-threads Python stack taken at the deadline (every rank still alive).
    stack: Optional[str] = None
    #: The flight recorder's collectives at the deadline (`flight.serve`'s
    #: JSON), when the rank answered: what it waits in even below Python.
    #: None from a rank whose Python threads could not run (its GIL held).
    collectives: Optional[str] = None
    #: The process was stopped (SIGSTOP, SIGTSTP) at the deadline: the
    #: harness continued it only for as long as its dumps took.
    stopped: bool = False
    #: FAILED because the launcher ended it when another rank failed (torchrun's
    #: agent SIGTERMs every worker at once): the failure reached it that way.
    ended_by_launcher: bool = False
    #: The stack of each process it spawned that joined it (`link.join_rank`),
    #: by name ("checkpoint process"), taken with its own.
    children: dict[str, str] = dataclasses.field(default_factory=dict)
    #: HUNG on its way out: its script returned, every peer's ended too (so
    #: nothing of the harness held it), and the process was still alive at
    #: the deadline: an atexit handler, a non-daemon thread or a child
    #: process it joins never let it exit.
    exiting: bool = False

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def describe(self) -> str:
        if self.status is RankStatus.CRASHED:
            how = f"signal {signal.Signals(self.signal).name}" if self.signal else f"exit code {self.exit_code}"
            return f"died ({how})"
        return {RankStatus.OK: "finished", RankStatus.FAILED: "raised"}.get(self.status, self.status.value)


class Cut(enum.Enum):
    """Why the harness stopped following ranks that were still running."""

    DEADLINE = "deadline"
    FAILURE = "failure grace"
    BLOCKED = "blocked grace"


@dataclasses.dataclass
class GroupOutcome:
    ranks: list[RankOutcome]
    #: Ranks were still running when the watch ended: at the deadline,
    #: `failure_grace` after a peer failed (`stuck_after_failure`), or
    #: `blocked_grace` after a rank reported it blocked for good.
    timed_out: bool
    elapsed: float
    stuck_after_failure: bool = False
    #: When the watch ended (`time.monotonic()`, one clock for every process
    #: here): ranks run on while they dump their stacks, so what they did
    #: after it is not where the harness found them.
    stopped_at: Optional[float] = None
    #: Why the watch ended with ranks still running; None if none was.
    cut: Optional[Cut] = None
    #: The cut was made before its time, since no running rank could progress
    #: until then (`GroupSpec.early_end`).
    ended_early: bool = False
    #: Why no rank could progress (`beacon.PARKED_PEER`, `beacon.MISMATCH`); "" if the run was not ended early.
    ended_why: str = ""
    #: `time.monotonic()` when the launcher asked for the ranks, when they
    #: were all started, when it first heard of trouble (a rank failed, died
    #: or reported itself blocked), when it decided the run was over, and
    #: when every process was reaped: where a run's seconds went
    #: (`records.runs.run_breakdown`). None from a launcher that does not say.
    requested_at: Optional[float] = None
    started_at: Optional[float] = None
    troubled_at: Optional[float] = None
    decided_at: Optional[float] = None
    ended_at: Optional[float] = None

    @property
    def ok(self) -> bool:
        return all(r.status is RankStatus.OK for r in self.ranks)
