"""What each rank waits in, where the launcher sees it without asking.

A rank parked after its entry returned or raised, or blocked for good by an
injected hang, never joins another collective. A peer waiting in one that
needs it waits until the harness cuts the run: the failure grace, the
blocked grace, the deadline. Nothing it could do in between would change
what the harness then finds, so the watch may cut the run at once, as the
cut it would have made (`launch.group`), if and only if it can prove that:

* every rank still running has its main thread in a collective of the
  default group, the n-th it issued, and some parked or blocked rank issued
  fewer than n: that collective needs a rank that will never call it;
* that collective would not give up by itself before the cut (its group's
  timeout, or `monitored_barrier`'s own): a job that detects a lost peer
  must be seen to detect it;
* no rank has work in another thread or a spawned process still going (a
  background save writes files, or issues collectives of its own).

Or, with no rank left waiting at all: every rank still running is blocked
for good, and each other one returned, raised or died (`nothing_left`).
No peer is left to see a death and raise, so what the cut would find is
what is there now (a correct job's peer that raised within its timeout of
a blocked rank, then waited out the failure grace).

Or, with every rank running: each waits in the n-th collective of the
default group, the same n, and not all in the same kind of collective
(rank 0 in `all_reduce` #26, rank 1 in `barrier` #26: a rank ran a
collective its peer never joins), on a backend where collectives of
different kinds never match (gloo: each then waits out its timeout; NCCL
runs a barrier as an all-reduce and is never claimed), for `SETTLE`
seconds, giving up by itself after the cut, no work elsewhere
(`mismatched`). A kind is what a collective first sends: an object
collective starts as its tensor one (`all_gather_object` with
`all_gather`), and a pair that partly matches moves on, which the watch
sees as a slot that changed.

Each rank keeps one fixed-size slot in a shared memory map (`layout.
beacon_path`), written by the collective probes with plain stores: no
system call and no lock in the rank (what the probes must not alter), and
the watcher reads it whenever it likes. Collectives issued below Python
(DDP's gradient buckets, a framework's C++) are not counted on any rank: a
rank waiting in one is not seen waiting here, so these proofs never cut
such a run (they never do when in doubt); the process groups' own numbers
do (`launch.looks`).
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import struct
import threading
import time
from typing import Mapping, Optional

from ckpt_harness.launch.layout import PathLike, beacon_path

#: issued, waiting, background, blocked, gives_up_at, pid, since, op, kinds_differ.
_OP = 24
_SLOT = struct.Struct(f"<qqqqdqd{_OP}sq")
#: `Beacon.waiting` while in a collective whose members the beacon does not
#: follow (a subgroup, point-to-point): never a reason to cut.
ELSEWHERE = -1
#: Seconds every rank must have waited in mismatched collectives before the
#: run is taken for stuck: a pair that partly matches (an object collective
#: against its tensor one) moves on well within it.
SETTLE = 1.0
#: What a collective sends first (`mismatched`): aliases, and object
#: collectives by the tensor collective they start with (`distributed_c10d`).
KIND = {
    "all_gather_object": "all_gather", "all_gather_into_tensor": "all_gather", "all_gather_coalesced": "all_gather",
    "gather_object": "all_gather", "broadcast_object_list": "broadcast", "scatter_object_list": "broadcast",
    "all_reduce_coalesced": "all_reduce", "reduce_scatter_tensor": "reduce_scatter",
    "all_to_all_single": "all_to_all",
}


@dataclasses.dataclass(frozen=True)
class Slot:
    """One rank's slot, as read."""

    #: Collectives of the default group this rank's probes issued (outermost calls, any thread).
    issued: int
    #: The number (in `issued`) of the default-group collective the main thread is in;
    #: 0: in none, `ELSEWHERE`: in one the beacon does not follow.
    waiting: int
    #: Work handed to other threads (`probes.follow_threads`) that has not returned.
    background: int
    #: The main thread blocked for good (an injected hang or SIGSTOP).
    blocked: bool
    #: When the collective it waits in gives up by itself (`time.monotonic()`).
    gives_up_at: float
    #: The rank's process: what a preemption notice signals (`inject.notice`).
    pid: int = 0
    #: When the main thread entered the collective it waits in (`time.monotonic()`).
    since: float = 0.0
    #: That collective's name ("all_reduce"); "" when in none.
    op: str = ""
    #: Its group's backend never matches collectives of different kinds (gloo).
    kinds_differ: bool = False

    def doing(self, now: float) -> str:
        """What the rank does, for a person: "in all_reduce #26 for 12 s"."""
        if self.blocked:
            return "blocked for good"
        if self.waiting == ELSEWHERE:
            return f"in {self.op or 'a collective'} of a subgroup for {now - self.since:.0f} s"
        if self.waiting > 0:
            return f"in {self.op or 'a collective'} #{self.waiting} for {now - self.since:.0f} s"
        return "running (in no collective the probes see)"


class Beacon:
    """A rank's side: its slot, written in place."""

    def __init__(self, path: PathLike):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, _SLOT.size)
            self._map = mmap.mmap(fd, _SLOT.size)
        finally:
            os.close(fd)
        self._lock = threading.Lock()
        self.pid = os.getpid()
        self.issued = self.waiting = self.background = 0
        self.blocked = False
        self.gives_up_at = self.since = 0.0
        self.op = ""
        self.kinds_differ = False
        self._store()

    def _store(self) -> None:
        _SLOT.pack_into(self._map, 0, self.issued, self.waiting, self.background, int(self.blocked),
                        self.gives_up_at, self.pid, self.since, self.op.encode()[:_OP], int(self.kinds_differ))

    def issue(self, followed: bool, main: bool, gives_up_at: float, op: str = "", kinds_differ: bool = False) -> None:
        """A collective is about to be called: of the default group (`followed`) or
        not, from the main thread or not, timing out by itself at `gives_up_at`;
        `op`, its name; `kinds_differ`, on a backend where collectives of
        different kinds never match."""
        with self._lock:
            if followed:
                self.issued += 1
            if main:
                self.waiting = self.issued if followed else ELSEWHERE
                self.gives_up_at = gives_up_at
                self.since, self.op, self.kinds_differ = time.monotonic(), op, kinds_differ
            self._store()

    def returned(self) -> None:
        """The main thread's collective returned or raised."""
        with self._lock:
            self.waiting, self.gives_up_at, self.since, self.op, self.kinds_differ = 0, 0.0, 0.0, "", False
            self._store()

    def handed_over(self, delta: int) -> None:
        with self._lock:
            self.background += delta
            self._store()

    def block(self) -> None:
        """The calling thread blocks for good: the rank's, if it is the main thread;
        a background thread's counts as background work that never ends."""
        with self._lock:
            if threading.current_thread() is threading.main_thread():
                self.blocked = True
            else:
                self.background += 1
            self._store()


def read(run_dir: PathLike, rank: int) -> Optional[Slot]:
    """A rank's slot, or None before the rank made it."""
    try:
        with open(beacon_path(run_dir, rank), "rb") as f:
            data = f.read(_SLOT.size)
    except OSError:
        return None
    if len(data) < _SLOT.size:
        return None
    issued, waiting, background, blocked, gives_up_at, pid, since, op, kinds_differ = _SLOT.unpack(data)
    return Slot(issued, waiting, background, bool(blocked), gives_up_at, pid, since,
                op.rstrip(b"\0").decode(errors="replace"), bool(kinds_differ))


#: Why a run was proven stuck (`GroupOutcome.ended_why`), by each proof.
PARKED_PEER = "every running rank waited in a collective for a rank that had ended or blocked for good"
NOTHING_LEFT = "every rank still running was blocked for good, and every other one had ended"
MISMATCH = ("every rank waited in the same collective, by number, in collectives of different kinds, which never "
            "match")


def why_stuck(slots: Mapping[int, Optional[Slot]], parked: set[int], running: set[int], cut_at: float,
              now: float) -> str:
    """Which proof (the module's docstring) shows that the ranks in `running`
    cannot progress before `cut_at`, as its text; "" when none does. Every
    rank is in `parked` or `running` (a rank that died is for the caller)."""
    if cannot_progress(slots, parked, running, cut_at):
        return PARKED_PEER
    if nothing_left(slots, running):
        return NOTHING_LEFT
    if not parked and mismatched(slots, running, cut_at, now):
        return MISMATCH
    return ""


def cannot_progress(slots: Mapping[int, Optional[Slot]], parked: set[int], running: set[int],
                    cut_at: float) -> bool:
    """True when the ranks in `running` provably cannot progress before `cut_at`
    (see the module's docstring); `parked`: the ranks whose entry returned or
    raised. Ranks in neither set died (their peers see it and raise: never cut)."""
    if not running:
        return False
    if any(slots.get(r) is None for r in parked | running):
        return False
    gone = parked | {r for r in running if slots[r].blocked}  # type: ignore[union-attr]
    waiting = running - gone
    if not gone or not waiting:
        return False
    if any(slots[r].background for r in parked | running):  # type: ignore[union-attr]
        return False
    for r in waiting:
        slot = slots[r]
        assert slot is not None
        if slot.waiting <= 0 or slot.gives_up_at <= cut_at:
            return False
        if not any(slots[g].issued < slot.waiting for g in gone):  # type: ignore[union-attr]
            return False
    return True


def mismatched(slots: Mapping[int, Optional[Slot]], running: set[int], cut_at: float, now: float) -> bool:
    """True when every rank (all in `running`) has waited `SETTLE` seconds in
    the same collective number of the default group, not all in the same kind
    of collective, on a backend where such collectives never match, none
    giving up by itself before `cut_at` and no work elsewhere (the module's
    docstring)."""
    if len(running) < 2 or any(slots.get(r) is None for r in running):
        return False
    mine = [slots[r] for r in running]
    if any(s.blocked or s.background or s.waiting <= 0 or not s.kinds_differ  # type: ignore[union-attr]
           or s.gives_up_at <= cut_at or now - s.since < SETTLE for s in mine):  # type: ignore[union-attr]
        return False
    if len({s.waiting for s in mine}) != 1:  # type: ignore[union-attr]
        return False
    return len({KIND.get(s.op, s.op) for s in mine}) > 1  # type: ignore[union-attr]


def nothing_left(slots: Mapping[int, Optional[Slot]], running: set[int]) -> bool:
    """True when every rank in `running` is blocked for good and no rank has
    work in another thread still going: the ranks not in it returned, raised
    or died, so nothing can happen before the cut."""
    if not running or any(slots.get(r) is None or not slots[r].blocked for r in running):  # type: ignore[union-attr]
        return False
    return not any(s is not None and s.background for s in slots.values())


def timeout_of(group: object) -> float:
    """Seconds until a collective on `group` gives up by itself; 0 when this
    torch does not say (never a reason to cut)."""
    import torch
    import torch.distributed.distributed_c10d as c10d

    try:
        pg = group if group is not None else c10d._get_default_group()
        for device in ("cpu", "cuda"):
            try:
                backend = pg._get_backend(torch.device(device))
            except RuntimeError:  # no backend for that device in this group
                continue
            return backend.options._timeout.total_seconds()
    except Exception:  # noqa: BLE001 - a torch that hides it: the run is not cut early
        pass
    return 0.0


_mine: Optional[Beacon] = None
_run_dir: Optional[PathLike] = None


def start(run_dir: PathLike, rank: int) -> None:
    """Make this rank's slot (in a rank the launcher started, before its entry)."""
    global _mine, _run_dir
    _mine, _run_dir = Beacon(beacon_path(run_dir, rank)), run_dir


def follow(run_dir: PathLike) -> None:
    """In a process a rank spawned that joined it (`link.join_rank`): read the
    slots of its rank's group (`group_pids`), as the rank itself does."""
    global _run_dir
    _run_dir = run_dir


def group_pids(world_size: int) -> Optional[dict[int, int]]:
    """rank -> pid of every rank of this process's group that made its slot,
    read from their slots: in a launched rank, a process it forked, or one it
    spawned that joined it; None elsewhere."""
    if _run_dir is None:
        return None
    slots = {rank: read(_run_dir, rank) for rank in range(world_size)}
    return {rank: slot.pid for rank, slot in slots.items() if slot is not None and slot.pid}


def mine() -> Optional[Beacon]:
    """This rank's slot; None outside a launched rank, and in a process it forked
    (which is not the rank: its collectives and threads are its own)."""
    return _mine if _mine is not None and _mine.pid == os.getpid() else None
