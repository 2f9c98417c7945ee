"""Fault kinds, where each applies, and what arming one does inside a rank.

A fault is armed at a *point*: the n-th operation (collective or file
operation) that one rank performs during one phase ("save 4"). Points are
counted per rank and phase, so they are stable from the traced clean run to
the faulted one as long as the job is deterministic, whatever happened in
the phases before.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import itertools
import os
import re
import signal
import time
from typing import Callable, Optional

from ckpt_harness import phase

#: Operations that are fault points, by trace event kind.
#: "write" is a write(2), "buffered-write" the job's write() into its buffer
#: (see `inject.files`); the kinds below that name "write" act on the bytes
#: that reach the file.
FILE_OPS = ("open", "buffered-write", "write", "fsync", "rename", "unlink", "mkdir", "rmdir", "rmtree")
OPS = ("collective", *FILE_OPS)

#: kind -> operations it applies to, and a line for `--help` and reports.
KINDS: dict[str, tuple[tuple[str, ...], str]] = {
    "crash": (OPS, "SIGKILL the rank just before the operation"),
    "crash-after": (OPS, "SIGKILL the rank right after the operation"),
    "crash-mid": (("write",), "SIGKILL the rank halfway through a kernel write: a prefix stays on disk"),
    # Not at collectives: a collective that raises on one rank only is not
    # physical (a broken transport fails the peers too), and a rank that
    # dies there is `crash`.
    "error": (FILE_OPS, "raise an exception from the file operation"),
    "eio": (("open", "write", "fsync", "rename"), "fail the operation with OSError(EIO)"),
    "enospc": (("open", "write", "mkdir"), "fail the operation with OSError(ENOSPC)"),
    "torn": (("write",), "only a prefix of the write lands, the call reports success"),
    "hang": (OPS, "block forever before the operation"),
    "sigstop": (OPS, "stop the rank with SIGSTOP before the operation: neither dead nor raising, its sockets "
                     "open, none of its threads running"),
    "gil": (OPS, "hold the GIL in a C loop before the operation: no Python code of the rank runs again, "
                 "its signal handlers and helper threads included"),
    "delay": (OPS, "sleep before the operation (rank skew), then go on"),
    "power-loss": (OPS, "the machine loses power before the operation: every rank stops and the "
                        "checkpoint directory keeps only what was durable"),
}
DEFAULT_DELAY = 0.5
#: Kinds after which the rank never goes on by itself, and how a report says
#: where it is: a run with one is cut `hang_timeout` after it fired (under
#: torchrun, whose workers cannot report it, `hang_timeout` after the start).
BLOCKING: dict[str, str] = {
    "hang": "blocked by the injected hang",
    "sigstop": "stopped by the injected SIGSTOP",
    "gil": "holding the GIL in a C loop (injected gil fault)",
}


class InjectedError(RuntimeError):
    """The exception an `error` fault raises; its message names the point."""


@dataclasses.dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    phase: str
    #: 0-based index of the operation within `phase` on `rank`.
    index: int
    seconds: float = DEFAULT_DELAY

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}: choose from {', '.join(KINDS)}")

    def applies_to(self, op: str) -> bool:
        return op in KINDS[self.kind][0]

    @property
    def label(self) -> str:
        """`kind@r<rank>:<phase>#<index>`, e.g. `crash@r0:save4#7`, and `~seconds`
        for a delay of other than the default length; `parse` reads it back."""
        label = f"{self.kind}@r{self.rank}:{phase.compact(self.phase)}#{self.index}"
        if self.kind == "delay" and self.seconds != DEFAULT_DELAY:
            label += f"~{self.seconds:g}"
        return label

    @classmethod
    def parse(cls, label: str) -> "Fault":
        match = _LABEL.fullmatch(label)
        if match is None:
            raise ValueError(f"not a fault label: {label!r} (expected e.g. crash@r0:save4#7)")
        kind, rank, where, index, seconds = match.groups()
        return cls(kind, int(rank), phase.expand(where), int(index), float(seconds) if seconds else DEFAULT_DELAY)


_LABEL = re.compile(r"([a-z-]+)@r(\d+):([a-z_]+?\d*)#(\d+)(?:~([0-9.]+))?")


def plan_label(faults: "tuple[Fault, ...]") -> str:
    return "+".join(f.label for f in faults)


def parse_plan(name: str) -> "tuple[Fault, ...]":
    """The faults of a case name such as `crash@r0:save4#7+delay@r1:save4#2`."""
    return tuple(Fault.parse(part) for part in name.split("+"))


def applicable_kinds(op: str, kinds: tuple[str, ...]) -> list[str]:
    return [k for k in kinds if op in KINDS[k][0]]


class Injector:
    """Counts operations per phase in one rank and fires the faults armed there."""

    def __init__(self, rank: int, faults: "tuple[Fault, ...]", emit, on_block: Callable[[], None] = lambda: None):
        self.rank = rank
        self.pending = {(f.phase, f.index): f for f in faults if f.rank == rank}
        self.emit = emit
        #: Called right before a fault blocks the process for good: the
        #: launcher starts the peers' grace then (`launch.rank.report_blocked`).
        self.on_block = on_block
        self.counts: dict[str, int] = {}

    def point(self, phase: str) -> int:
        """Number the next operation of `phase`; call exactly once per operation."""
        index = self.counts.get(phase, 0)
        self.counts[phase] = index + 1
        return index

    def armed(self, phase: str, index: int, op: str) -> Optional[Fault]:
        f = self.pending.pop((phase, index), None) if self.pending else None
        if f is None:
            return None
        if not f.applies_to(op):
            raise ValueError(f"fault {f.kind} does not apply to {op} (point {f.label})")
        self.emit("fault", fault=f.kind, index=index)
        return f

    # -- what the faults do -------------------------------------------------
    def before(self, f: Fault, op: str, what: str) -> None:
        """Act on `f` before the operation runs (kinds that need the op itself
        — crash-after, crash-mid, torn — are handled by the probe)."""
        if f.kind in ("crash", "power-loss"):
            die()
        elif f.kind == "error":
            raise InjectedError(f"ckpt_harness injected an error into {op} {what}")
        elif f.kind == "eio":
            raise OSError(errno.EIO, f"ckpt_harness injected EIO into {op}", what)
        elif f.kind == "enospc":
            raise OSError(errno.ENOSPC, f"ckpt_harness injected ENOSPC into {op}", what)
        elif f.kind in BLOCKING:
            self.on_block()  # its peers' budget starts now, whatever the run took to get here
            if f.kind == "sigstop":
                os.kill(os.getpid(), signal.SIGSTOP)
            if f.kind == "gil":
                hold_gil()
            block()  # a stopped rank is continued only for the harness to take its stack: go no further
        elif f.kind == "delay":
            time.sleep(f.seconds)


def block() -> None:
    while True:
        time.sleep(3600)


def hold_gil() -> None:
    """Spin in C with the GIL held, for ever, as a C extension stuck in a loop does.

    `deque(..., maxlen=0)` drains an endless `repeat` inside one C call: no
    bytecode runs, nothing is allocated, and the eval loop that would hand
    the GIL to another thread or run a Python signal handler is never
    reached. So the rank's Python threads (the flight recorder's dumper
    among them) and its Python signal handlers are frozen, while its C++
    threads and C signal handlers (faulthandler) still run. A pathological
    `re` match would not do: the regex engine calls PyErr_CheckSignals every
    few thousand steps, which runs Python handlers. Needs a GIL (CPython
    built without free threading).
    """
    collections.deque(itertools.repeat(None), maxlen=0)


def die() -> None:
    """SIGKILL ourselves: no finally, no atexit, no flush, like a real crash."""
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # the signal is asynchronous; never run on
