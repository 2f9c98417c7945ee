"""A line while a run waits on its deadline, so a hang is never silent.

A run that hangs waits for its cut: the deadline (180 s by default), a
grace. The report at the cut says where every rank was; until then a
person at a terminal or reading a CI log saw nothing move. Every `EVERY`
seconds of a run that is still going, its watch says how long it has run,
when it will be cut, and what each rank does by its beacon (`launch.beacon`:
"rank 0 in all_reduce #26 for 12 s"), read without asking the ranks.

Lines go where `report_to` says: the CLI's progress printer (`--quiet`
silences them), stderr by default (pytest keeps a test's stderr with it).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from ckpt_harness.launch import beacon, looks

#: Seconds between two lines of one run; its first comes after as many.
EVERY = 10.0


def default(line: str) -> None:
    """Where lines go unless `report_to` says otherwise: stderr as it is then."""
    print(line, file=sys.stderr, flush=True)


_sink: Optional[Callable[[str], None]] = default


def report_to(sink: Optional[Callable[[str], None]]) -> None:
    """Where the lines go (None: nowhere)."""
    global _sink
    _sink = sink


class Heartbeat:
    """One run's lines: call it as the watch wakes; it says something when due."""

    def __init__(self, run_dir: Path, world_size: int, start: float, deadline: float, every: float = EVERY):
        self.run_dir = Path(run_dir)
        self.world_size = world_size
        self.start = start
        self.deadline = deadline
        self.every = every
        #: When the next line is due (`time.monotonic()`): what the watch's wait is bounded by.
        self.due = start + every

    def __call__(self, ended: Mapping[int, str], cut_at: float, now: Optional[float] = None,
                 native: Mapping[int, Mapping[str, Any]] = {}) -> None:
        """`ended`: rank -> how it ended, for the ranks no longer running; `cut_at`: the watch's cut;
        `native`: rank -> its newest look (`launch.looks`), for a collective the probes do not see."""
        now = time.monotonic() if now is None else now
        if now < self.due or _sink is None:
            return
        self.due = now + self.every
        _sink(self.line(ended, cut_at, now, native))

    def line(self, ended: Mapping[int, str], cut_at: float, now: float,
             native: Mapping[int, Mapping[str, Any]] = {}) -> str:
        ranks = []
        for rank in range(self.world_size):
            slot = beacon.read(self.run_dir, rank)
            doing = ended.get(rank) or (slot.doing(now) if slot is not None else "starting")
            if slot is not None and not ended.get(rank) and not slot.blocked and not slot.waiting:
                doing = looks.describe(native.get(rank)) or doing  # a collective issued below Python
            ranks.append(f"rank {rank} {doing}")
        name = "/".join(self.run_dir.parts[-2:])
        return (f"[ckpt_harness] {name}: running for {now - self.start:.0f} s, cut in {max(cut_at - now, 0):.0f} s; "
                + ", ".join(ranks))
