"""Progress on stderr that a person at a terminal and a CI log can both follow.

On a terminal one line is rewritten in place as cases finish. Anywhere else
(a CI log, a file) `\\r` would pile every update into one unreadable line, and
printing each of a thousand cases would drown the log: there the printer
writes plain lines, the first and the last of each piece of work and at most
one every `every` seconds between them, so minutes of exploration are never
silent. `explore`, `scenario` and `matrix` all print through it.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from typing import Callable, Optional, TextIO

from ckpt_harness.verdict import CaseResult, Verdict

#: Seconds between two plain lines off a terminal.
EVERY = 10.0
#: Width of the line rewritten on a terminal.
WIDTH = 100


class Progress:
    """Counts of finished cases, shown as they come; `begin` starts a new piece
    of work, `piece` one that runs beside others (the matrix's concurrent
    scenarios), each with its own counts and clock."""

    def __init__(self, stream: Optional[TextIO] = None, *, quiet: bool = False, every: float = EVERY,
                 clock: Callable[[], float] = time.monotonic):
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.every = every
        self.clock = clock
        self.tty = self.stream.isatty()
        self._current = Piece(self, "")
        self._open = False  # a terminal line waits to be rewritten
        self._lock = threading.RLock()  # pieces report from the threads that run them

    def begin(self, label: str = "") -> None:
        """Start a new piece of work (a scenario of the matrix): counts and clock from zero."""
        self._current = Piece(self, label)

    def piece(self, label: str) -> "Piece":
        """A piece of work of its own, reported through this printer."""
        return Piece(self, label)

    def __call__(self, done: int, total: int, result: CaseResult) -> None:
        """`done` of `total` cases finished, `result` the latest (the signature
        `run_cases` and `Bench` call back with)."""
        self._current(done, total, result)

    def status(self, done: int, total: int, now: Optional[float] = None) -> str:
        return self._current.status(done, total, now)

    def line(self, text: str) -> None:
        """A line that stays (a finished scenario of the matrix)."""
        if not self.quiet:
            with self._lock:
                self._write(f"\r{text:{WIDTH}}" if self._open else text)
                self._open = False

    def mute(self) -> None:
        """Print nothing more: what the work still reports is not news (the
        scenarios a stopped matrix abandons, whose groups were killed)."""
        with self._lock:
            self.quiet = True

    def close(self) -> None:
        """End the line a terminal is still rewriting, so what follows starts clean."""
        with self._lock:
            if self._open:
                self._write("")
                self._open = False

    def _write(self, text: str, end: str = "\n") -> None:
        print(text, end=end, file=self.stream, flush=True)


class Piece:
    """One piece of work's counts, printed through its `Progress`: the first
    and last plain lines and one every `every` seconds between, or the one
    terminal line rewritten."""

    def __init__(self, printer: Progress, label: str):
        self.printer = printer
        self.label = label
        self.counts: collections.Counter[Verdict] = collections.Counter()
        self.started = printer.clock()
        self._printed: Optional[float] = None  # when the last plain line of this piece went out

    def __call__(self, done: int, total: int, result: CaseResult) -> None:
        out = self.printer
        with out._lock:
            self.counts[result.verdict] += 1
            if out.quiet:
                return
            now = out.clock()
            line = self.status(done, total, now)
            if out.tty:
                out._write(f"\r{line + ' | ' + result.case:{WIDTH}.{WIDTH}}", end="")
                out._open = True
            elif self._printed is None or done >= total or now - self._printed >= out.every:
                out._write(line)
                self._printed = now

    def status(self, done: int, total: int, now: Optional[float] = None) -> str:
        elapsed = (self.printer.clock() if now is None else now) - self.started
        tally = ", ".join(f"{n} {v.value}" for v in Verdict if (n := self.counts[v]))
        head = f"{self.label} " if self.label else ""
        return f"{head}[{done:>{len(str(total))}}/{total} cases] {_clock(elapsed)}: {tally or 'running'}"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"
