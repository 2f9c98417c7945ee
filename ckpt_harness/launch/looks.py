"""What the ranks' process groups wait in, by torch's own sequence numbers.

The beacons (`launch.beacon`) see the collectives a job calls through
torch.distributed's Python functions. A collective issued below Python
passes them by: DDP's reducer all-reduces each gradient bucket from an
autograd hook inside `backward`, FSDP from its hooks, a framework from its
C++. A rank waiting in one looks "running", and a run stuck there waited
out its whole deadline. Yet every process group counts its collectives
itself, one number per collective, the same on every rank of the group
(`ProcessGroup._get_sequence_number_for_group`), and its flight recorder
(`launch.flight`, on in every rank) keeps the last ones: the number, the
op, whether it completed, the thread and the Python stack that issued it.

So the watch may ask a rank for a *look*, while it waits: it writes a
number into the rank's pipe (`layout.ask_path`), and a daemon thread of the
rank, which sleeps in `read` on it otherwise, answers into
`layout.look_path`: the recorder's entries (`_dump_fr_trace`), the groups'
members and backends and their own sequence numbers, and where the main
thread is (its innermost Python frame, `sys._current_frames()` with the
cyclic collector off, as `inject.writers` reads it). Reading changes
nothing the ranks do: no collective, no store key, no signal; the answer
costs the rank's spare thread tens of milliseconds of CPU (the recorder's
2000 entries, measured 30-110 ms on the 2-core box), so it is asked only
while every running rank's main thread has been idle for `SETTLE` seconds
(its CPU time, read from /proc without asking it), and less often while
nothing moves (`MAX_EVERY`).

A run is stuck (`stuck`) when every running rank's main thread waits for
collectives that can never complete, the same two looks `SETTLE` apart:

* what a main thread waits for: the collective it called, when its beacon
  says it is in one (the newest its thread issued, still pending); else the
  pending collectives its thread issued from the very line it still sits
  on, which a call below Python issued and has not returned from (`backward`
  at autograd's `_engine_run_backward`, where DDP waits for every bucket
  it all-reduced);
* a collective #n of a group can never complete when a member of the group
  issued its own #n of another kind (gloo never matches collectives of
  different kinds: `beacon.mismatched`), or has not reached #n and never
  will: it parked (returned), blocked for good, or is itself stuck so
  (the ranks waiting for each other in a circle: a greatest fixed point);
* none of them gives up by itself before the cut (the recorder's timeout
  of each), no work in another thread or a spawned process, gloo groups
  only (NCCL runs a barrier as an all-reduce, and its recorder retires
  entries late), no point-to-point wait.

What is not claimed: a main thread that runs (CPU time moving), one in a
wait the look cannot tie to a pending collective (a Python `Work.wait()`
of an async collective at another line than the call: left to the cut), a
rank that did not answer (its main thread holds the GIL), a recorder the
job turned off (``TORCH_FR_BUFFER_SIZE=0``). A look leaves out the issuing
stacks in a process that has not imported ``torch._dynamo``: the
recorder's first symbolization imports it (800 modules, 7 s), which would
change what the rank has loaded; a process that trains has it (its
optimizer imports it), and one that does not waits in collectives it
called from Python, which its beacon names.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional

from ckpt_harness.launch import flight
from ckpt_harness.launch.layout import PathLike, ask_path, cut_path, flight_path, look_path

#: Seconds every running rank's main thread must have been idle before a look
#: is asked, and between the two looks that must agree.
SETTLE = 1.0
#: Seconds between looks at most, while the ranks stay idle and nothing is proven
#: (the wait doubles from `SETTLE`): a long idle wait costs a look every few seconds.
MAX_EVERY = 4.0
#: A look not answered by every rank within this long is given up (a main thread holding the GIL).
ANSWER_WAIT = 5.0
#: A main thread whose CPU time grew by more than this many clock ticks is not idle.
IDLE_TICKS = 2
#: Collectives of a group a look lists by number, the newest: a peer's pending
#: number further back than this is not found (and nothing is claimed).
KEEP = 256
#: Frames of an issuing stack a look keeps, innermost first.
FRAMES = 12
#: What gloo's collectives are called in the recorder, each never matching another of them
#: (measured pair by pair on torch 2.13: `beacon.mismatched`); any other name is never claimed.
KINDS = frozenset({"all_reduce", "barrier", "broadcast", "reduce", "gather", "all_gather", "scatter", "all_to_all"})
#: Why a run was proven stuck (`GroupOutcome.ended_why`) by the looks.
STUCK = ("every running rank waited in collectives that can never complete, by its process groups' own sequence "
         "numbers (torch's flight recorder)")
#: Seconds every collective still pending when a warm run was cut must have waited by then, for a cold
#: run that reaches the same ones to confirm the hang at once (`hang_of`).
HUNG_FOR = 5.0
#: Why a cold run was ended as the hang of the warm run it confirms (`hang_of`, `reached`).
REACHED = ("every rank reached the collectives the warm run hung in, the same ones in the same order (the hang "
           "confirmed with cold starts without waiting out the deadline again)")


# -- the rank's side ----------------------------------------------------------------------------------------------
def serve(run_dir: PathLike, rank: int) -> None:
    """Answer the watch's asks on this rank's pipe from a daemon thread (in a
    launched rank, before its entry). A file system without pipes: never asked."""
    path = ask_path(run_dir, rank)
    try:
        path.unlink(missing_ok=True)  # an earlier attempt's
        os.mkfifo(path, 0o600)
        fd = os.open(path, os.O_RDWR)  # a writer of its own: `read` waits, never sees an end
    except OSError:
        return
    threading.Thread(target=_answer, args=(fd, look_path(run_dir, rank)), name="ckpt-harness-looks",
                     daemon=True).start()


def _answer(fd: int, path: Path) -> None:
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:
            return
        words = data.split()
        try:
            ask = int(words[-1])
        except (IndexError, ValueError):
            continue
        try:
            found: dict[str, Any] = {"ask": ask, **look()}
        except Exception as exc:  # noqa: BLE001 - the watch claims nothing on it
            found = {"ask": ask, "error": f"{type(exc).__name__}: {exc}"}
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(found, f)
        os.replace(tmp, path)  # the watch never reads half a look


def look() -> dict[str, Any]:
    """This process's groups and what they wait in, and where its main thread is."""
    main = threading.main_thread()
    found: dict[str, Any] = {"at": time.time(), "frame": _innermost(main.ident), "groups": {}, "newest": None}
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is None or not c10d.is_initialized():
        return found
    from torch._C._distributed_c10d import _dump_fr_trace

    world = c10d._world
    groups: dict[str, dict[str, Any]] = {}
    for pg, name in list(world.pg_names.items()):
        try:
            last = int(pg._get_sequence_number_for_group())
        except Exception:  # noqa: BLE001 - a backend that does not count: the recorder's numbers alone
            last = 0
        groups[str(name)] = {"ranks": sorted(int(r) for r in world.pg_group_ranks.get(pg, {})),
                             "backend": str(world.pg_map.get(pg, ("",))[0]), "last": last, "ops": {},
                             "pending": []}
    # The issuing stacks only where symbolizing them imports nothing: its first call imports torch._dynamo
    # (800 modules, 7 s on this box), which a rank that trains has imported already (`torch.optim` does).
    stacks = "torch._dynamo" in sys.modules
    raw = pickle.loads(_dump_fr_trace(includeCollectives=True, includeStackTraces=stacks, onlyActive=False))
    me = str(main.ident)
    for e in raw.get("entries", ()):
        if not e.get("process_group"):
            continue
        group = groups.setdefault(str(e["process_group"][0]),
                                  {"ranks": None, "backend": "", "last": 0, "ops": {}, "pending": []})
        p2p = bool(e.get("is_p2p"))
        seq = int(e["p2p_seq_id"] if p2p else e["collective_seq_id"])
        op = str(e.get("profiling_name", "")).rpartition(":")[2]
        mine = str(e.get("thread_id")) == me
        if not p2p:
            group["last"] = max(group["last"], seq)
            group["ops"][seq] = op
        if mine:
            found["newest"] = {"group": str(e["process_group"][0]), "seq": seq, "p2p": p2p,
                               "retired": bool(e.get("retired"))}
        if not e.get("retired"):
            group["pending"].append({
                "seq": seq, "op": op, "p2p": p2p, "main": mine, "created": (e.get("time_created_ns") or 0) / 1e9,
                "timeout": (e.get("timeout_ms") or 0) / 1000,
                "frames": [[f["filename"], int(f["line"]), f["name"]] for f in list(e.get("frames") or ())[:FRAMES]],
            })
    for group in groups.values():
        numbers = sorted(group["ops"])
        group["first"] = numbers[-KEEP:][0] if numbers else group["last"] + 1
        group["ops"] = {str(n): group["ops"][n] for n in numbers[-KEEP:]}
    found["groups"] = groups
    return found


def _innermost(ident: Optional[int]) -> Optional[list]:
    """The innermost Python frame of thread `ident`, [file, line, function].

    `sys._current_frames()` with the cyclic collector off while it runs: on
    CPython 3.11 a collection started inside it deadlocks (python/cpython#106883;
    `inject.writers` does the same)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        frame = sys._current_frames().get(ident) if ident is not None else None
    finally:
        if enabled:
            gc.enable()
    if frame is None:
        return None
    return [frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name]


# -- the watch's side ---------------------------------------------------------------------------------------------
def waits_for(found: Mapping[str, Any], in_collective: bool, gives_up_after: float) -> Optional[list[tuple]]:
    """The collectives a rank's main thread waits for, as (group, number, op),
    by its look `found` (the module's docstring); None when the look does not
    show that it waits in collectives. `in_collective`: its beacon says its
    main thread is in a collective it called from Python. Each must give up by
    itself no sooner than `gives_up_after` (`time.time()`)."""
    if found.get("error") or not found.get("newest"):
        return None
    groups = found["groups"]
    newest = found["newest"]
    if newest["retired"] or newest["p2p"]:
        return None
    pending = [(name, p) for name, g in groups.items() for p in g["pending"] if p["main"]]
    last = next(((name, p) for name, p in pending if name == newest["group"] and p["seq"] == newest["seq"]
                 and not p["p2p"]), None)
    if last is None:
        return None
    if in_collective:
        chosen = [last]
    else:  # still on the line that issued it, inside the call below Python that has not returned
        frame = found.get("frame")
        if not frame or not last[1]["frames"] or last[1]["frames"][0] != frame:
            return None
        chosen = [(name, p) for name, p in pending if p["frames"] and p["frames"][0] == frame]
    for name, p in chosen:
        if p["p2p"] or groups[name]["backend"] != "gloo" or p["timeout"] <= 0:
            return None
        if p["created"] + p["timeout"] <= gives_up_after:
            return None
    return [(name, p["seq"], p["op"]) for name, p in chosen]


def never_completes(rank: int, collective: tuple, looks: Mapping[int, Mapping[str, Any]], stuck: set[int]) -> bool:
    """Can collective (group, n, op) of `rank` never complete: a member of its
    group issued its #n as another kind, or has not reached #n and is in
    `stuck` (parked, blocked for good, or itself waiting for good)?"""
    name, n, op = collective
    group = looks[rank]["groups"].get(name)
    if group is None or not group.get("ranks"):
        return False
    for peer in group["ranks"]:
        if peer == rank or peer not in looks:
            continue
        theirs = looks[peer].get("groups", {}).get(name)
        if theirs is None:
            continue
        other = theirs["ops"].get(str(n))
        if other is not None:
            if op in KINDS and other in KINDS and other != op:
                return True
        elif theirs["last"] < n and peer in stuck:
            return True
    return False


def stuck(looks: Mapping[int, Mapping[str, Any]], in_collective: Mapping[int, bool], gone: set[int],
          running: set[int], gives_up_after: float) -> Optional[dict[int, list[tuple]]]:
    """What each rank of `running` waits for, when every one of them waits in
    collectives that can never complete (the module's docstring); None when
    that is not shown. `looks`: every rank's, `gone` ranks' included (they
    parked or blocked for good); `in_collective`: a rank's beacon says its
    main thread is in a collective it called from Python."""
    if not running or any(r not in looks or looks[r].get("error") for r in gone | running):
        return None
    waits = {r: waits_for(looks[r], in_collective.get(r, False), gives_up_after) for r in running}
    if any(not w for w in waits.values()):
        return None
    held = set(running)
    changed = True
    while changed:  # the greatest set of ranks each waiting for one in it, or for one gone
        changed = False
        for r in sorted(held):
            if not all(never_completes(r, c, looks, gone | held) for c in waits[r]):  # type: ignore[union-attr]
                held.discard(r)
                changed = True
    return waits if held == running else None  # type: ignore[return-value]


def describe(found: Optional[Mapping[str, Any]]) -> str:
    """What a recent look says the main thread waits in, for a person ("in
    all_reduce #9 (issued in backward) for 12 s"); "" when it shows none."""
    now = time.time()
    if not found or found.get("error") or not found.get("newest") or found["newest"]["retired"] or \
            now - found.get("at", 0) > MAX_EVERY + ANSWER_WAIT:
        return ""
    newest = found["newest"]
    for name, group in found.get("groups", {}).items():
        for p in group["pending"]:
            if p["main"] and name == newest["group"] and p["seq"] == newest["seq"]:
                where = "" if name == "0" else f" of group {name}"
                inside = " (issued in backward)" if any(f[2] == "_engine_run_backward" for f in p["frames"]) else ""
                return f"in {p['op']} #{p['seq']}{where}{inside} for {max(now - p['created'], 0):.0f} s"
    return ""


def write_cut(run_dir: PathLike, statuses: Mapping[int, str]) -> None:
    """Say how the watch found each rank when it cut the run ("running",
    "blocked", "parked", "ended"), once their recorders were dumped: what a
    cold run confirming it is held to (`hang_of`)."""
    path = cut_path(run_dir)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"at": time.time(), "ranks": {str(r): s for r, s in sorted(statuses.items())}}))
    os.replace(tmp, path)


def hang_of(run_dir: Optional[PathLike]) -> Optional[dict[int, dict[str, Any]]]:
    """The hang run `run_dir` was cut in: rank -> how the watch found it and,
    per group, its collectives by number, its last and its pending ones, from
    its recorder's dump at the cut. None unless every rank was running,
    blocked or parked, each answered, and some collective was pending, every
    pending one for `HUNG_FOR` seconds or more: a run cut while its ranks
    moved through collectives (a deadline too short) is no hang to hold a
    cold run to."""
    if run_dir is None:
        return None
    try:
        cut = json.loads(cut_path(run_dir).read_text())
        statuses = {int(r): str(s) for r, s in cut["ranks"].items()}
    except (OSError, ValueError, KeyError, AttributeError):
        return None
    found: dict[int, dict[str, Any]] = {}
    waited = False
    for rank, status in statuses.items():
        if status == "ended":
            return None
        try:
            dump = json.loads(flight.read(str(flight_path(run_dir, rank))) or "")
            at, entries = float(dump["at"]), dump["entries"]
        except (ValueError, KeyError, TypeError):
            return None
        groups: dict[str, dict[str, Any]] = {}
        for e in entries:
            if "pg" not in e or "created" not in e:
                return None
            group = groups.setdefault(e["pg"], {"ops": {}, "last": 0, "pending": set()})
            if not e["p2p"]:
                group["ops"][int(e["seq"])] = e["op"]
                group["last"] = max(group["last"], int(e["seq"]))
            if not e["retired"]:
                if at - e["created"] < HUNG_FOR:
                    return None
                group["pending"].add((int(e["seq"]), e["op"], bool(e["p2p"])))
                waited = True
        found[rank] = {"status": status, "groups": groups}
    return found if waited else None


def reached(hang: Mapping[int, Mapping[str, Any]], looks: Mapping[int, Mapping[str, Any]],
            statuses: Mapping[int, str]) -> bool:
    """Do these looks (and each rank's status) show the ranks where `hang`
    (`hang_of`) had them: the same collectives of every group, by number, up
    to the same last one, the same ones pending?"""
    if set(hang) != set(looks) or any(statuses.get(r) != h["status"] for r, h in hang.items()):
        return False
    for rank, want in hang.items():
        got = looks[rank]
        if got.get("error"):
            return False
        if any(g["last"] and name not in want["groups"] for name, g in got["groups"].items()):
            return False
        for name, group in want["groups"].items():
            mine = got["groups"].get(name)
            if mine is None or mine["last"] != group["last"]:
                return False
            if {(p["seq"], p["op"], p["p2p"]) for p in mine["pending"]} != group["pending"]:
                return False
            if any(group["ops"].get(int(n), op) != op for n, op in mine["ops"].items()):
                return False
    return True


def _ticks(pid: int) -> Optional[int]:
    """The CPU time (clock ticks) of a process's main thread, or None."""
    try:
        with open(f"/proc/{pid}/task/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat(5))
    except (OSError, IndexError, ValueError):
        return None


class Watch:
    """One run's looks, from its watch: `stuck` each time the watch looks.
    `hang`: the warm run's this cold run confirms (`hang_of`), if any: the
    idle ranks are then asked every `SETTLE` seconds, and the run ends as soon
    as two looks in a row find them there (`reached`), every running rank's
    main thread idle all along (a rank still at work there in the cold run
    may be on its way: a warm start's own deadlock is what the cold run is
    for)."""

    def __init__(self, run_dir: PathLike, hang: Optional[dict[int, dict[str, Any]]] = None):
        self.run_dir = Path(run_dir)
        self.hang = hang
        #: (when asked, the beacons then) of a look that found the ranks where `hang` had them.
        self._reached: Optional[tuple[float, tuple]] = None
        self._confirmed: Optional[tuple] = None
        #: Each rank's newest look (for the heartbeat's lines).
        self.latest: dict[int, dict[str, Any]] = {}
        self._asked = 0
        self._asked_at = -float("inf")
        self._answered = True
        self._every = SETTLE
        #: pid -> (since when its main thread is idle, its CPU ticks then)
        self._idle: dict[int, tuple[float, int]] = {}
        #: (when asked, what was proven) of the first look of an agreeing pair; then the proof, once made.
        self._first: Optional[tuple[float, tuple]] = None
        self._proven: Optional[tuple] = None

    def idle_for(self, pids: Mapping[int, int], now: float) -> float:
        """How long every one of these processes' main threads has used no CPU."""
        idle = float("inf")
        for pid in pids.values():
            ticks = _ticks(pid)
            if ticks is None:
                return 0.0
            since, then = self._idle.get(pid, (now, ticks))
            if ticks - then > IDLE_TICKS:
                since, then = now, ticks
            self._idle[pid] = (since, then)
            idle = min(idle, now - since)
        return 0.0 if idle == float("inf") else idle

    def stuck(self, pids: Mapping[int, int], slots: Mapping[int, Any], gone: set[int], running: set[int],
              cut_at: float) -> str:
        """Why the ranks in `running` (rank -> pid in `pids`) and `gone`
        (parked, or blocked for good) are stuck, or "": `STUCK` once proven
        to wait in collectives that can never complete, twice `SETTLE` apart
        with nothing changed since; `REACHED` once found twice where the warm
        run's `hang` had them. `slots`: every rank's beacon; `cut_at`: the
        watch's cut (`time.monotonic()`)."""
        now = time.monotonic()
        if any(s is None for s in slots.values()):
            return ""
        seen = tuple(slots[r] for r in sorted(slots))
        statuses = {**{r: "running" for r in running},
                    **{r: "blocked" if slots[r].blocked else "parked" for r in gone}}
        idle = self.idle_for({r: pids[r] for r in running if r in pids}, now)
        quiet = idle >= SETTLE and not any(s.background for s in slots.values()) and not any(
            slots[r].waiting and slots[r].gives_up_at <= cut_at for r in running)  # `monitored_barrier`: gives up
        if not quiet:
            self._first = self._proven = self._reached = self._confirmed = None
            self._every = SETTLE
        for proven, why in ((self._proven, STUCK), (self._confirmed, REACHED)):
            if proven is not None and proven[0] == seen:
                return why
        self._proven = self._confirmed = None
        if not self._answered:
            found = {r: self._read(r) for r in gone | running}
            if all(f is not None for f in found.values()):
                looks: dict[int, dict[str, Any]] = found  # type: ignore[assignment]
                self._answered = True
                self.latest.update(looks)
                if quiet:
                    self._judge(looks, slots, gone, running, cut_at, now, seen)
                    if self.hang is not None:
                        self._compare(looks, statuses, seen)
                for proven, why in ((self._proven, STUCK), (self._confirmed, REACHED)):
                    if proven is not None:
                        return why
            elif now - self._asked_at >= ANSWER_WAIT:
                self._answered = True
                self._first = self._reached = None
        wait = SETTLE if self.hang is not None or self._first is not None else self._every
        if self._answered and quiet and now - self._asked_at >= wait:
            self._ask(gone | running, now)
        return ""

    def _compare(self, looks: dict[int, dict[str, Any]], statuses: Mapping[int, str], seen: tuple) -> None:
        if not reached(self.hang, looks, statuses):  # type: ignore[arg-type]
            self._reached = None
        elif self._reached is not None and self._reached[1] == seen and self._asked_at - self._reached[0] >= SETTLE:
            self._confirmed = (seen,)
        elif self._reached is None or self._reached[1] != seen:
            self._reached = (self._asked_at, seen)

    def _judge(self, looks: dict[int, dict], slots: Mapping[int, Any], gone: set[int], running: set[int],
               cut_at: float, now: float, seen: tuple) -> None:
        gives_up_after = time.time() + (cut_at - now)
        waits = stuck(looks, {r: bool(slots[r].waiting) for r in running}, gone, running, gives_up_after)
        if waits is None:
            self._first = None
            self._every = min(self._every * 2, MAX_EVERY)
            return
        where = tuple((r, tuple(looks[r].get("frame") or ()),
                       tuple(sorted((n, g["last"]) for n, g in looks[r]["groups"].items()))) for r in sorted(looks))
        proof = (seen, tuple(sorted((r, tuple(w)) for r, w in waits.items())), where)
        if self._first is not None and self._first[1] == proof and self._asked_at - self._first[0] >= SETTLE:
            self._proven = (seen,)
        elif self._first is None or self._first[1] != proof:
            self._first = (self._asked_at, proof)

    def _ask(self, ranks: set[int], now: float) -> None:
        self._asked += 1
        self._asked_at, self._answered = now, False
        for rank in ranks:
            look_path(self.run_dir, rank).unlink(missing_ok=True)  # an answer found is this ask's
            try:
                fd = os.open(ask_path(self.run_dir, rank), os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no pipe, or no reader: that rank cannot answer
                continue
            try:
                os.write(fd, b"%d\n" % self._asked)
            except OSError:
                pass
            finally:
                os.close(fd)

    def _read(self, rank: int) -> Optional[dict[str, Any]]:
        try:
            with open(look_path(self.run_dir, rank)) as f:
                found = json.load(f)
        except (OSError, ValueError):
            return None
        return found if found.get("ask") == self._asked else None
