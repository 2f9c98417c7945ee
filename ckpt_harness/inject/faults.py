"""Fault kinds, where each applies, and what arming one does inside a rank.

A fault is armed at a *point*: one operation (collective, file operation,
look at the directory) of one rank during one phase ("save 4"), named by
what it acts on and how many of its namesakes came before it in the phase
(`address`: "the second barrier", "the rename of latest.tmp"). So a name
denotes the same operation in the traced clean run and the faulted one
whatever happened in the phases before, and whatever order the rank's
other operations take (one rank deleting a checkpoint before or after its
peer). Points also keep their position in the phase (`index`), which is
what a case derived from the golden trace cuts it at.

What the harness knows of a kind is one row of `FAULT_KINDS`, so that adding
a kind cannot leave a table elsewhere silently behind: the oracle, the
power-loss model, the case planner and the settings derive their views
(`KINDS`, `BLOCKING`, `durability.FAULTS_NOT_PERFORMED`,
`properties.CRASHES`, `cases.SEVERITY`, `config.DEFAULT_FAULTS`...) from the
rows. Kinds that act on the operation itself (crash-after, crash-mid, torn)
also need their code in the probes (`inject.probes`, `inject.files`).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
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
#: Looks at the checkpoint directory: `os.stat` (so `os.path.exists`,
#: `Path.exists`, `isdir`) and listings (`os.listdir`, `os.scandir`, so
#: `glob` and `Path.iterdir`). They change nothing, so only a delay there is a
#: case of its own: it opens the gap between a rank's check and its act (it
#: sees a checkpoint, then deletes it after a peer did). A crash or hang
#: before a look is the same case as before the rank's next operation.
LOOKS = ("stat", "list")
#: Requests that change a bucket (`objects`): an object put whole, a multipart
#: upload begun, one of its parts, its completion (the object appears), a
#: copy, a delete. Their looks are `list` and `stat` (HeadObject).
OBJECT_OPS = ("put", "upload", "part", "complete", "copy", "delete")
#: Operations that change something or wait on a peer: what every kind but delay is armed at.
ACTS = ("collective", *FILE_OPS, *OBJECT_OPS)
#: Every fault point.
OPS = (*ACTS, *LOOKS)
DEFAULT_DELAY = 0.5
#: What Slurm (KillWait) and Kubernetes (terminationGracePeriodSeconds) give by default.
DEFAULT_GRACE = 30.0


class InjectedError(RuntimeError):
    """The exception an `error` fault raises; its message names the point."""


# -- what a kind does before the operation ------------------------------------------------------
#: (injector, fault, op, what): run in the rank right before the faulted operation.
Action = Callable[["Injector", "Fault", str, str], None]


def die() -> None:
    """SIGKILL ourselves: no finally, no atexit, no flush, like a real crash."""
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # the signal is asynchronous; never run on


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


def _crash(injector: Injector, f: Fault, op: str, what: str) -> None:
    die()


def _raise_injected(injector: Injector, f: Fault, op: str, what: str) -> None:
    raise InjectedError(f"ckpt_harness injected an error into {op} {what}")


def _raise_os(code: int) -> Action:
    def act(injector: Injector, f: Fault, op: str, what: str) -> None:
        raise OSError(code, f"ckpt_harness injected {errno.errorcode[code]} into {op}", what)
    return act


def _block(stop: Callable[[], None]) -> Action:
    def act(injector: Injector, f: Fault, op: str, what: str) -> None:
        injector.on_block()  # its peers' budget starts now, whatever the run took to get here
        stop()
        block()  # a stopped rank is continued only for the harness to take its stack: go no further
    return act


def _sigstop() -> None:
    os.kill(os.getpid(), signal.SIGSTOP)


def _sleep(injector: Injector, f: Fault, op: str, what: str) -> None:
    time.sleep(f.seconds)


def _notice(injector: Injector, f: Fault, op: str, what: str) -> None:
    from ckpt_harness.inject import notice  # only where a notice fires

    notice.deliver(f.seconds)


# -- the kinds -----------------------------------------------------------------------------------
class Family(enum.Enum):
    """What the job sees of a fault: that, not the mechanism, decides the
    property its cases judge (`oracle.properties.FAMILY_PROPERTY`)."""

    #: The save stops and nobody tells the job: the rank dies or freezes, or the machine goes dark.
    CRASH = "crash"
    #: The operation fails and says so: the save raises.
    ERROR = "error"
    #: The operation reports success, but what landed is not what was written.
    DAMAGE = "damage"
    #: Nothing fails; only the timing between ranks changes.
    DELAY = "delay"


@dataclasses.dataclass(frozen=True)
class FaultKind:
    """One fault kind, whole: each field stands for a table that some module
    used to keep for itself, and could forget a kind in."""

    #: What `--faults`, case names and reports call it.
    name: str
    #: Its line in `ckpt-harness list`.
    help: str
    #: The operations it can be armed at (of `OPS`).
    ops: tuple[str, ...]
    family: Family
    #: Whether the operation it precedes still takes place (as the trace records it: a torn
    #: write records the prefix that landed); the power-loss replay relies on it.
    performed: bool
    #: Its rank when a plan of several faults is judged as one kind (`cases.dominant`): 0 is the most severe.
    severity: int
    #: What the rank does right before the operation; None for the kinds that need the
    #: operation itself (half a write, the moment after it): the probes carry those out.
    before: Optional[Action] = None
    #: For a kind after which the rank never goes on by itself: how a report says where it
    #: is. A run with one is cut `hang_timeout` after it fired (`launch.rank.report_blocked`).
    blocks: Optional[str] = None
    #: Why the directory its case leaves may be derived from the golden run's trace instead
    #: of running the faulted save (`cases._derived` decides when); None: never derived.
    derivable: Optional[str] = None
    #: Its place among the kinds `explore` injects unless told otherwise (that order is the
    #: order of a point's cases in a report); None for an opt-in kind.
    default: Optional[int] = None
    #: For a kind that lasts: the setting (`config.SETTINGS`) that says how many seconds,
    #: and their default there, which a fault's label leaves out (else `~seconds`).
    lasts: Optional[str] = None
    seconds: Optional[float] = None


_NO_PEER_WAITS = "no peer waits on the crashed rank, so each ends its save as in the golden run"

#: Every fault kind, in the order `ckpt-harness list` and `--help` show them.
FAULT_KINDS: tuple[FaultKind, ...] = (
    FaultKind("crash", "SIGKILL the rank just before the operation", ACTS, Family.CRASH,
              performed=False, severity=1, before=_crash, derivable=_NO_PEER_WAITS, default=0),
    FaultKind("crash-after", "SIGKILL the rank right after the operation", ACTS, Family.CRASH,
              performed=True, severity=3, derivable=_NO_PEER_WAITS),
    FaultKind("crash-mid", "SIGKILL the rank halfway through a kernel write: a prefix stays on disk", ("write",),
              Family.CRASH, performed=True, severity=2, default=1),
    # Not at collectives: a collective that raises on one rank only is not
    # physical (a broken transport fails the peers too), and a rank that
    # dies there is `crash`.
    FaultKind("error", "raise an exception from the file operation or object request", (*FILE_OPS, *OBJECT_OPS),
              Family.ERROR,
              performed=False, severity=7, before=_raise_injected, default=3),
    FaultKind("eio", "fail the operation with OSError(EIO)", ("open", "write", "fsync", "rename"), Family.ERROR,
              performed=False, severity=8, before=_raise_os(errno.EIO), default=4),
    FaultKind("enospc", "fail the operation with OSError(ENOSPC)", ("open", "write", "mkdir"), Family.ERROR,
              performed=False, severity=9, before=_raise_os(errno.ENOSPC), default=5),
    FaultKind("torn", "only a prefix of the write lands, the call reports success", ("write",), Family.DAMAGE,
              performed=True, severity=10, default=2),
    FaultKind("hang", "block forever before the operation", ACTS, Family.CRASH,
              performed=False, severity=4, before=_block(lambda: None), blocks="blocked by the injected hang"),
    FaultKind("sigstop", "stop the rank with SIGSTOP before the operation: neither dead nor raising, its sockets "
                         "open, none of its threads running", ACTS, Family.CRASH,
              performed=False, severity=5, before=_block(_sigstop), blocks="stopped by the injected SIGSTOP"),
    FaultKind("gil", "hold the GIL in a C loop before the operation: no Python code of the rank runs again, "
                     "its signal handlers and helper threads included", ACTS, Family.CRASH,
              performed=False, severity=6, before=_block(lambda: hold_gil()),  # looked up late: a test stands in
              blocks="holding the GIL in a C loop (injected gil fault)"),
    FaultKind("delay", "sleep before the operation (rank skew), then go on", OPS, Family.DELAY,
              performed=True, severity=12, before=_sleep, lasts="delay", seconds=DEFAULT_DELAY),
    # Performed: a handler that returns lets the operation run (one that exits, or
    # SIGTERM's default action, does not). Never replayed by the power-loss model.
    FaultKind("preempt", "a preemption notice before the operation, as a scheduler gives one: SIGTERM to every "
                         "rank, SIGKILL to what is left after --grace seconds", ACTS, Family.CRASH,
              performed=True, severity=11, before=_notice, lasts="grace", seconds=DEFAULT_GRACE),
    FaultKind("power-loss", "the machine loses power before the operation: every rank stops and the "
                            "checkpoint directory keeps only what was durable", ACTS, Family.CRASH,
              performed=False, severity=0, before=_crash, derivable="every rank stops at once", default=6),
)
BY_NAME: dict[str, FaultKind] = {k.name: k for k in FAULT_KINDS}


def _check(rows: tuple[FaultKind, ...]) -> None:
    """Refuse a table with holes or ties in its orders at import, before
    `cases.dominant` or `config.DEFAULT_FAULTS` would pick among them arbitrarily."""
    problems = []
    if len({k.name for k in rows}) != len(rows):
        problems.append("a name used twice")
    if sorted(k.severity for k in rows) != list(range(len(rows))):
        problems.append("severities are not 0..n-1")
    defaults = sorted(k.default for k in rows if k.default is not None)
    if defaults != list(range(len(defaults))):
        problems.append("defaults are not 0..m-1")
    problems += [f"{k.name}: ops {k.ops} not among OPS" for k in rows if not k.ops or not set(k.ops) <= set(OPS)]
    problems += [f"{k.name}: blocks, yet its operation is performed" for k in rows if k.blocks and k.performed]
    problems += [f"{k.name}: lasts without a default length" for k in rows if (k.lasts is None) != (k.seconds is None)]
    if problems:
        raise AssertionError(f"inject.faults.FAULT_KINDS: {'; '.join(problems)}")


_check(FAULT_KINDS)

#: kind -> operations it applies to, and its line for `ckpt-harness list`.
KINDS: dict[str, tuple[tuple[str, ...], str]] = {k.name: (k.ops, k.help) for k in FAULT_KINDS}
#: Kinds after which the rank never goes on by itself -> how a report says where it is.
BLOCKING: dict[str, str] = {k.name: k.blocks for k in FAULT_KINDS if k.blocks is not None}


#: A name `tempfile` made with its default prefix (`mkstemp`, `NamedTemporaryFile`, `mkdtemp`): "tmp",
#: eight random letters, digits or underscores, its suffix. Another in every run.
_TEMP_NAME = re.compile(r"(?<![^/])(tmp)[a-z0-9_]{8}(?=[./]|$| ->)")


def address(op: str, target: str) -> str:
    """How a point is named whatever the order of the run around it: a
    collective by its name ("barrier"), a file operation by what it acts on
    ("rename(latest.tmp->latest)", "write(step_4/model.pt)"). With its phase,
    rank and the count of its earlier namesakes there, it denotes one
    operation that a run reaches wherever its peers are, so a case named by it
    replays when the next run deletes in another order (`Fault.at`).

    A file `tempfile` named is named by its prefix and suffix, its random
    part starred ("rename(step2/tmp*->step2/.metadata.json)", OLMo-core's):
    the next run's file has other random letters, and a fault addressed by
    them would never fire."""
    if op == "collective":
        return target
    return f"{op}({_TEMP_NAME.sub(lambda m: m[1] + '*', target).replace(' -> ', '->')})"


@dataclasses.dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    phase: str
    #: 0-based index of the operation within `phase` on `rank` in the golden
    #: run; None for a fault named by `at` whose point that run did not reach.
    #: What the cases derived from the golden trace cut it at.
    index: Optional[int]
    #: How long it lasts, for a kind that does (`FaultKind.lasts`): None takes the kind's default.
    seconds: Optional[float] = None
    #: The operation's `address`: where the fault fires, whatever ran before it in the phase.
    at: Optional[str] = None
    #: Which of the operations with that address in the phase (1: the first).
    nth: int = 1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}: choose from {', '.join(KINDS)}")
        if self.index is None and self.at is None:
            raise ValueError("a fault needs the index or the address of its operation")
        default = BY_NAME[self.kind].seconds
        if default is None or self.seconds is None:  # only a kind that lasts has a length
            object.__setattr__(self, "seconds", default)

    def applies_to(self, op: str) -> bool:
        return op in BY_NAME[self.kind].ops

    @property
    def op(self) -> Optional[str]:
        """The operation its address names, when it has one."""
        if self.at is None:
            return None
        return self.at.split("(", 1)[0] if "(" in self.at else "collective"

    @property
    def label(self) -> str:
        """`kind@r<rank>:<phase>/<address>[#nth]`, e.g.
        `crash@r0:save4/rename(latest.tmp->latest)` or `hang@r1:save4/barrier#3`
        (the third barrier of rank 1 in save 4); `kind@r<rank>:<phase>#<index>`
        for a fault known only by its position. `~seconds` follows for a
        kind that lasts (a delay, a preemption's grace) when its length is not
        the kind's default; `parse` reads both back."""
        where = f"{self.kind}@r{self.rank}:{phase.compact(self.phase)}"
        if self.at is not None:
            label = f"{where}/{self.at}" + (f"#{self.nth}" if self.nth != 1 else "")
        else:
            label = f"{where}#{self.index}"
        if self.seconds != BY_NAME[self.kind].seconds:
            label += f"~{self.seconds:g}"
        return label

    @classmethod
    def parse(cls, label: str) -> "Fault":
        match = _LABEL.fullmatch(label)
        if match is None:
            raise ValueError(f"not a fault label: {label!r} (expected e.g. crash@r0:save4/barrier#2, "
                             "crash@r0:save4/rename(latest.tmp->latest) or crash@r0:save4#7)")
        kind, rank, where, index, at, nth, seconds = match.groups()
        return cls(kind, int(rank), phase.expand(where), int(index) if index is not None else None,
                   float(seconds) if seconds else None, at, int(nth) if nth else 1)

    def placed(self, index: int, at: str, nth: int) -> "Fault":
        """This fault at a point of the golden run, known both ways."""
        return dataclasses.replace(self, index=index, at=at, nth=nth)


_LABEL = re.compile(r"([a-z-]+)@r(\d+):([a-z_]+?\d*)(?:#(\d+)|/([a-z_-]+(?:\(.*\))?)(?:#(\d+))?)(?:~([0-9.]+))?")
#: Where one fault's label ends and the next one's begins in a plan ("+" may be in a path).
_NEXT = re.compile(r"\+(?=[a-z-]+@r\d+:)")


def plan_label(faults: "tuple[Fault, ...]") -> str:
    return "+".join(f.label for f in faults)


def parse_plan(name: str) -> "tuple[Fault, ...]":
    """The faults of a case name such as `crash@r0:save4/barrier#2+delay@r1:save4/barrier#2`."""
    return tuple(Fault.parse(part) for part in _NEXT.split(name))


def applicable_kinds(op: str, kinds: tuple[str, ...]) -> list[str]:
    return [k for k in kinds if op in BY_NAME[k].ops]


class Injector:
    """Counts operations per phase in one rank and fires the faults armed there."""

    def __init__(self, rank: int, faults: "tuple[Fault, ...]", emit, on_block: Callable[[], None] = lambda: None):
        self.rank = rank
        #: Faults still to fire, by where: (phase, address, nth) for one named
        #: by its address, (phase, index) for one known only by its position.
        self.pending: dict[tuple, Fault] = {
            (f.phase, f.at, f.nth) if f.at is not None else (f.phase, f.index): f for f in faults if f.rank == rank}
        self.by_address = any(f.at is not None for f in self.pending.values())
        self.emit = emit
        #: Called right before a fault blocks the process for good: the
        #: launcher starts the peers' grace then (`launch.rank.report_blocked`).
        self.on_block = on_block
        self.counts: dict[str, int] = {}
        #: (phase, address) -> operations of it so far, counted while a fault is pending.
        self.seen: dict[tuple[str, str], int] = {}

    def point(self, phase: str) -> int:
        """Number the next operation of `phase`; call exactly once per operation."""
        index = self.counts.get(phase, 0)
        self.counts[phase] = index + 1
        return index

    def armed(self, phase: str, index: int, op: str, target: str) -> Optional[Fault]:
        """The fault armed at this operation, if any; call once per operation
        numbered by `point`, with what it acts on (`address`)."""
        if not self.pending:
            return None
        f = self.pending.pop((phase, index), None)
        if self.by_address:
            at = address(op, target)
            nth = self.seen[(phase, at)] = self.seen.get((phase, at), 0) + 1
            f = f or self.pending.pop((phase, at, nth), None)
        if f is None:
            return None
        if not f.applies_to(op):
            # The run took another path than the golden one (an earlier fault of
            # the plan sent this rank down its error path): the operation the
            # fault was planned for never comes, so the fault never fires. Raised
            # here, the harness's mismatch would read as the job's own failure.
            return None
        self.emit("fault", fault=f.kind, index=index)
        return f

    # -- what the faults do -------------------------------------------------
    def before(self, f: Fault, op: str, what: str) -> None:
        """Act on `f` before the operation runs (kinds that need the op itself
        — crash-after, crash-mid, torn — have no `before`: the probe acts)."""
        act = BY_NAME[f.kind].before
        if act is not None:
            act(self, f, op, what)
