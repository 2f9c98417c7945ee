"""Run one process group to completion, to a failure, or to its deadline.

The harness side of the launcher. It asks the warm fork server for N ranks,
watches them, and makes sure that whatever happens the call returns by the
deadline (plus a few seconds to collect stacks) with no rank left alive.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import queue
import select
import signal
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from ckpt_harness.errors import ConfigError, HarnessError
from ckpt_harness.launch import _proc, _wire, beacon, flight, looks, preimport
from ckpt_harness.launch.heartbeat import Heartbeat
from ckpt_harness.launch.layout import beacon_path, flight_path, log_path, mp_tempdir_path, store_path, warm_twin
from ckpt_harness.launch.link import helpers
from ckpt_harness.launch.outcome import Cut, GroupOutcome, RankOutcome, RankStatus
from ckpt_harness.launch.stacks import StackRequest, await_answers
from ckpt_harness.launch.zygote import FORKED

MAX_WORLD_SIZE = 8
#: `GroupSpec.early_end`'s default; a benchmark turns it off to measure what it saves.
EARLY_END = True
#: How often the watch asks the beacons whether anything can still happen.
_LOOK = 0.02
#: The same with every rank running: a stall there (`beacon.mismatched`) needs a second of waiting.
_LOOK_ALL_RUNNING = 0.25
#: How long the warm parent may take to import torch and a job's preloads.
STARTUP_TIMEOUT = 180.0
#: After a deadline: how long ranks get to print their stacks.
STACK_GRACE = 2.0
#: How often the harness looks: a stopped rank runs from when it is
#: continued for its dumps until the harness has seen them.
_DUMP_POLL = 0.01


class LaunchError(HarnessError):
    """The group could not be started (a dead fork server; a preload that
    cannot be imported is skipped instead, `launch.preimport`)."""


class Cancelled(BaseException):
    """The harness stopped every group (`cancel`): a run cut short by it is no
    case's result. A BaseException, as KeyboardInterrupt, so that no
    `except Exception` takes it for a failure of the case."""


#: How a rank that is no longer running is told in a heartbeat line.
_ENDED = {RankStatus.OK: "finished", RankStatus.FAILED: "raised", RankStatus.CRASHED: "died",
          RankStatus.HUNG: "hung"}


def check_layout(world_size: int, nodes: int = 1) -> None:
    """Refuse a group the launcher cannot start, saying what to change."""
    if not 1 <= world_size <= MAX_WORLD_SIZE:
        raise ConfigError(f"world_size must be between 1 and {MAX_WORLD_SIZE}, got {world_size}")
    if nodes < 1 or world_size % nodes:
        raise ConfigError(
            f"{nodes} simulated nodes cannot share {world_size} ranks evenly; "
            "pick a node count that divides the world size"
        )


@dataclasses.dataclass(frozen=True)
class GroupSpec:
    world_size: int
    #: "module:function" called in every rank as ``fn(RankInfo, payload)``.
    entry: str
    payload: Any
    run_dir: Path
    deadline: float
    backend: str = "gloo"
    nodes: int = 1
    preload: Sequence[str] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: Once a rank failed or died, how long its peers get to end too before
    #: they are taken for stuck. A real job would hang until its collective
    #: timeout; waiting out the whole deadline here teaches nothing more.
    failure_grace: float = 5.0
    #: Once a rank reports it is blocked for good (`rank.report_blocked`: an
    #: injected hang or freeze), how long its peers get to end before the
    #: run counts as hung; None: only the deadline cuts it. Counted from the
    #: report, so the time a run takes to reach the fault is not the peers'.
    blocked_grace: Optional[float] = None
    #: ("module:function", argument): `function(argument, rank)` runs once
    #: per rank in a template server forked from the warm parent, and ranks
    #: are then forked from their template: per-process first-call work
    #: (DTensor sharding propagation, lazy imports) is done once instead of in
    #: every rank of every run. It must start no thread; if it fails, ranks
    #: are forked cold and the failure is in the fork server's log.
    warmup: Optional[tuple[str, Any]] = None
    #: Cut the run as soon as no running rank can progress before the cut
    #: (`launch.beacon`), instead of when the cut is due: the same outcome,
    #: sooner. Off, for comparing the two (`EARLY_END`).
    early_end: bool = dataclasses.field(default_factory=lambda: EARLY_END)
    #: Serve a process a rank spawns (DCP's checkpoint process) from a
    #: template the rank forked as it started, instead of a fresh interpreter
    #: (`launch.warm`).
    warm_children: bool = False

    def __post_init__(self) -> None:
        check_layout(self.world_size, self.nodes)
        if self.deadline <= 0:
            raise ValueError(f"deadline must be positive, got {self.deadline}")
        if self.blocked_grace is not None and self.blocked_grace <= 0:
            raise ValueError(f"blocked_grace must be positive, got {self.blocked_grace}")


class _ZygoteClient:
    """A warm fork server of this harness process: the first one started
    (`start`), or a fork of it (`fork`) to run another group at once."""

    def __init__(self, sock: socket.socket, proc: Union[_proc.Child, "_Forked"], log_path: str,
                 owns_log: bool) -> None:
        self.owner = os.getpid()
        self.lock = threading.Lock()
        self.sock = sock
        self.proc = proc
        self.log_path = log_path
        self.owns_log = owns_log
        self.ready = False

    @classmethod
    def start(cls) -> "_ZygoteClient":
        """A fresh interpreter that imports torch (seconds of CPU)."""
        ours, theirs = socket.socketpair()
        fd, log_path = tempfile.mkstemp(prefix="ckpt-harness-zygote-", suffix=".log")
        proc = _proc.Child(
            [sys.executable, "-m", "ckpt_harness.launch.zygote", str(theirs.fileno()), str(os.getpid())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,  # terminal Ctrl-C reaches the harness only
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
        os.close(fd)
        theirs.close()
        return cls(ours, proc, log_path, owns_log=True)

    def fork(self) -> "_ZygoteClient":
        """Another server, forked from this one once it is ready: warm from
        the start (milliseconds). This one must run no group of its own."""
        with self.lock:
            self._await_ready()
            self.send({"op": "fork"})
            answered = select.select([self.sock], [], [], STARTUP_TIMEOUT)[0]
            data, fds, _, _ = socket.recv_fds(self.sock, FORKED.size, 1) if answered else (b"", [], 0, None)
        if len(data) != FORKED.size or not fds:
            for fd in fds:
                os.close(fd)
            raise LaunchError(f"the warm fork server could not fork another:\n{self._log()}")
        (pid,) = FORKED.unpack(data)
        return _ZygoteClient(socket.socket(fileno=fds[0]), _Forked(pid), self.log_path, owns_log=False)

    def run(self, spec: GroupSpec) -> GroupOutcome:
        with self.lock:
            self._await_ready()
            return _GroupRun(self, spec).run()

    def _await_ready(self) -> None:
        """The server imports torch while the caller does its own start-up."""
        if self.ready:
            return
        message = self._recv(time.monotonic() + STARTUP_TIMEOUT)
        if message is None or message.get("op") != "ready":
            self.close()
            raise LaunchError(f"the warm fork server did not start:\n{self._log()}")
        preimport.tell(message)
        self.ready = True

    def send(self, message: dict) -> None:
        try:
            _wire.send(self.sock, message)
        except OSError as exc:
            raise LaunchError(f"the warm fork server is gone ({exc}):\n{self._log()}") from None

    def _recv(self, until: float) -> Optional[dict]:
        """Next message, or None when `until` (monotonic) passes first."""
        remaining = until - time.monotonic()
        if remaining > 0 and select.select([self.sock], [], [], remaining)[0]:
            try:
                return _wire.recv(self.sock)
            except (EOFError, OSError):
                raise LaunchError(f"the warm fork server died:\n{self._log()}") from None
        return None

    def _log(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-4000:]
        except OSError:
            return "(no log)"

    def close(self, wait: float = 5.0) -> None:
        _wire.shut_down(self.sock, self.proc, wait)
        self.sock.close()
        if self.owns_log:
            try:
                os.unlink(self.log_path)
            except OSError:
                pass


class _Forked:
    """The process of a server forked by the first one, as `close` and the
    pool use a `Popen`: not this process's child, so it is watched and
    signalled through a pidfd (never a pid the kernel may have reused)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self.pidfd: Optional[int] = os.pidfd_open(pid)
        except OSError:  # already gone
            self.pidfd = None

    def poll(self) -> Optional[int]:
        if self.pidfd is not None and not select.select([self.pidfd], [], [], 0)[0]:
            return None
        self._forget()
        return 0

    def wait(self, timeout: float) -> int:
        if self.pidfd is not None and not select.select([self.pidfd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(f"zygote {self.pid}", timeout)
        self._forget()
        return 0

    def kill(self) -> None:
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def reap(self) -> None:
        """Wait for it to die, just killed (its parent, the first server, reaps it)."""
        if self.pidfd is not None:
            select.select([self.pidfd], [], [])
        self._forget()

    def _forget(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


class _Stall:
    """Whether the running ranks can still progress, by their beacons: a cut
    made early must be one the watch would have made anyway, so the proof is
    asked to hold twice, `_LOOK` apart, with no slot changed in between."""

    def __init__(self, spec: GroupSpec):
        self.run_dir = Path(spec.run_dir)
        self.last: Optional[tuple] = None
        #: Why the last look proved the ranks stuck (`beacon.PARKED_PEER`, `beacon.MISMATCH`, `looks.STUCK`).
        self.why = ""
        #: What the ranks' process groups wait in, asked while they are idle (`launch.looks`); in a run with
        #: cold starts that confirms a warm one's hang, where the warm run hung.
        self.looks = looks.Watch(self.run_dir, None if spec.warm_children else looks.hang_of(warm_twin(self.run_dir)))

    def look_in(self, ranks: Sequence[RankOutcome], blocked: bool) -> float:
        """Seconds to the next look: `_LOOK` once a rank parked, or one said it
        blocks for good, while others run; else `_LOOK_ALL_RUNNING` (ranks in
        collectives that never match: `beacon.mismatched` waits `SETTLE` anyway)."""
        if blocked or any(r.status in (RankStatus.OK, RankStatus.FAILED) for r in ranks):
            return _LOOK
        return _LOOK_ALL_RUNNING

    def stuck(self, ranks: Sequence[RankOutcome], exited: set[int], cut_at: float) -> bool:
        """Proven twice in a row. Never once a rank's process is gone (gloo tells its peers,
        which then raise by themselves, also when it had parked first), unless no rank is
        left to hear it: every one still running is blocked for good (`beacon.nothing_left`)."""
        slots = {r.rank: beacon.read(self.run_dir, r.rank) for r in ranks}
        parked = {r.rank for r in ranks if r.status in (RankStatus.OK, RankStatus.FAILED)}
        running = {r.rank for r in ranks if r.status is RankStatus.RUNNING}
        if exited:
            why = beacon.PARKED_PEER if beacon.nothing_left(slots, running) else ""
        else:
            why = beacon.why_stuck(slots, parked, running, cut_at, time.monotonic())
            if not why and all(s is not None for s in slots.values()):  # collectives issued below Python too
                blocked = {r for r in running if slots[r].blocked}  # type: ignore[union-attr]
                why = self.looks.stuck({r.rank: r.pid for r in ranks}, slots, parked | blocked, running - blocked,
                                       cut_at)
        proven = bool(why) and not any(helpers(str(self.run_dir), r) for r in parked | running)
        seen = (tuple(sorted(parked)), tuple(sorted(running)), tuple(slots[r] for r in sorted(slots)))
        stuck, self.last = proven and seen == self.last, seen if proven else None
        self.why = why
        return stuck


class _GroupRun:
    def __init__(self, zygote: _ZygoteClient, spec: GroupSpec):
        self.zygote = zygote
        self.spec = spec
        self.group = uuid.uuid4().hex
        self.ranks: list[RankOutcome] = []
        self.exited: set[int] = set()
        self.ended_early = False
        self.ended_why = ""
        #: When a rank first failed, died or reported itself blocked (`GroupOutcome.troubled_at`).
        self.troubled_at: Optional[float] = None

    def run(self) -> GroupOutcome:
        spec = self.spec
        run_dir = Path(spec.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        store = store_path(run_dir)
        store.unlink(missing_ok=True)
        for r in range(spec.world_size):  # an earlier run's slots would speak for ranks not yet started
            beacon_path(run_dir, r).unlink(missing_ok=True)
        requested = time.monotonic()
        self.zygote.send(self._spawn_request(run_dir, store))
        spawned = self._next(time.monotonic() + STARTUP_TIMEOUT)
        if spawned is None or spawned["op"] == "error":
            detail = spawned["message"] if spawned else "no answer from the warm fork server"
            raise LaunchError(f"could not start ranks: {detail}")
        preimport.tell(spawned)  # what the server's warm-up skipped (`launch.preimport`)
        self.ranks = [
            RankOutcome(rank=r, pid=pid, log=log_path(run_dir, r))
            for r, pid in enumerate(spawned["pids"])
        ]
        start = time.monotonic()
        cut, stopped_at, decided = None, None, None
        try:
            cut = self._watch(start, start + spec.deadline)
            decided = time.monotonic()
            if cut is not None:
                stopped_at = decided
                statuses = self._statuses()
                self._collect_stacks()
                looks.write_cut(run_dir, statuses)
        finally:
            self._teardown()
        ended = time.monotonic()
        return GroupOutcome(self.ranks, cut is not None, ended - start, cut is Cut.FAILURE, stopped_at, cut,
                            self.ended_early, self.ended_why, requested_at=requested, started_at=start,
                            troubled_at=self.troubled_at, decided_at=decided, ended_at=ended)

    def _spawn_request(self, run_dir: Path, store: Path) -> dict:
        spec = self.spec
        per_node = spec.world_size // spec.nodes
        base_env = {**os.environ, **spec.env}
        ranks = []
        for r in range(spec.world_size):
            env = {
                **base_env,
                "RANK": str(r),
                "WORLD_SIZE": str(spec.world_size),
                "LOCAL_RANK": str(r % per_node),
                "LOCAL_WORLD_SIZE": str(per_node),
                "GROUP_RANK": str(r // per_node),
                "NODE_RANK": str(r // per_node),
                "MASTER_ADDR": "127.0.0.1",
            }
            ranks.append(
                {"rank": r, "local_rank": r % per_node, "node": r // per_node,
                 "log": str(log_path(run_dir, r)), "flight": str(flight_path(run_dir, r)), "env": env}
            )
        return {
            "op": "spawn",
            "group": self.group,
            "ranks": ranks,
            "world_size": spec.world_size,
            "backend": spec.backend,
            "store": str(store),
            # A backstop only: the deadline fires first and takes the stacks.
            "pg_timeout": spec.deadline + 30,
            "entry": spec.entry,
            "payload": spec.payload,
            "run_dir": str(run_dir),
            "sys_path": [p for p in sys.path if p],
            "env": dict(spec.env),
            "preload": [spec.entry.partition(":")[0], *spec.preload],
            "warmup": spec.warmup,
            "warm_children": spec.warm_children,
        }

    def _next(self, until: float) -> Optional[dict]:
        """Next message of this group; stale ones from an interrupted group are dropped."""
        while True:
            message = self.zygote._recv(until)
            if message is None or message.get("group") == self.group:
                return message

    def _watch(self, start: float, deadline: float) -> Optional[Cut]:
        """Follow the ranks until each finished or died (None), or until the
        watch is cut: at the deadline, when peers of a failed rank outstay
        the failure grace, or peers of a blocked one the blocked grace; or
        as soon as no running rank can progress before that cut (`beacon`),
        with the cut it would have been."""
        bounds = {Cut.DEADLINE: deadline}
        stall = _Stall(self.spec) if self.spec.early_end else None
        pulse = Heartbeat(self.spec.run_dir, self.spec.world_size, start, deadline)
        blocked = False
        while any(r.status is RankStatus.RUNNING for r in self.ranks):
            cut = min(bounds, key=bounds.__getitem__)
            until = min(bounds[cut], pulse.due)
            if stall is not None:
                until = min(until, time.monotonic() + stall.look_in(self.ranks, blocked))
            message = self._next(until)
            pulse({r.rank: _ENDED[r.status] for r in self.ranks if r.status is not RankStatus.RUNNING}, bounds[cut],
                  native=stall.looks.latest if stall is not None else {})
            if message is None:
                if time.monotonic() >= bounds[cut]:
                    return cut
                if stall is not None and stall.stuck(self.ranks, self.exited, bounds[cut]):
                    self.ended_early, self.ended_why = True, stall.why
                    return cut
                continue
            failed_before = any(r.status.ended_badly for r in self.ranks)
            rank = self.ranks[message["rank"]]
            if message["op"] == "blocked":
                blocked = True
                self.troubled_at = self.troubled_at or time.monotonic()
                if self.spec.blocked_grace is not None and Cut.BLOCKED not in bounds:
                    bounds[Cut.BLOCKED] = time.monotonic() + self.spec.blocked_grace
            elif message["op"] == "done":
                rank.status = RankStatus.FAILED if message["failed"] else RankStatus.OK
                rank.finished_at = time.monotonic() - start
            elif message["op"] == "exit":
                self.exited.add(rank.rank)
                rank.exit_code, rank.signal = message["code"], message["signal"]
                if rank.status is RankStatus.RUNNING:
                    rank.status = RankStatus.CRASHED
                    rank.finished_at = time.monotonic() - start
            if not failed_before and rank.status.ended_badly:
                self.troubled_at = self.troubled_at or time.monotonic()
                bounds[Cut.FAILURE] = time.monotonic() + self.spec.failure_grace
        return None

    def _statuses(self) -> dict[int, str]:
        """How the watch found each rank as it ended (`looks.write_cut`)."""
        found = {}
        for r in self.ranks:
            slot = beacon.read(self.spec.run_dir, r.rank)
            if r.rank in self.exited or r.status is RankStatus.CRASHED:
                found[r.rank] = "ended"
            elif r.status in (RankStatus.OK, RankStatus.FAILED):
                found[r.rank] = "parked"
            else:
                found[r.rank] = "blocked" if slot is not None and slot.blocked else "running"
        return found

    def _collect_stacks(self) -> None:
        """Every live rank's stack and flight recorder, the finished ones too:
        "rank 1 is parked after the run" is half of the explanation of a hang.
        And the stack of every process a rank spawned that joined it
        (`link.join_rank`: DCP's checkpoint process), where a save may hang
        while its rank only waits for it.

        faulthandler dumps every thread even while a rank sits in native code,
        or holds the GIL; the recorder names the collective it sits in even
        when C++ issued it, but its dumper is a Python thread, which a rank
        holding the GIL never lets run (its recorder stays None). A stopped
        process takes no signal until it is continued: it is continued for
        its dumps, and stopped again as soon as they are in, so that none of
        its threads goes on with the save the stop froze.
        """
        run_dir = Path(self.spec.run_dir)
        asked: list[tuple[RankOutcome, Optional[str], StackRequest]] = []
        for r in self.ranks:
            if r.rank not in self.exited:
                if r.status is RankStatus.RUNNING:
                    r.status = RankStatus.HUNG
                asked.append((r, None, StackRequest(r.pid, r.log, flight_path(run_dir, r.rank), flight.DUMP_SIGNAL)))
            asked += [(r, h.name, StackRequest(h.pid, h.stack)) for h in helpers(str(run_dir), r.rank)
                      if _answers(h.pid, r.pid)]
        for r, child, request in asked:
            request.send()
            if child is None:
                r.stopped = request.stopped
        requests = [request for _, _, request in asked]
        await_answers(requests, STACK_GRACE, _DUMP_POLL, on_answer=StackRequest.stop_again)
        for r, child, request in asked:
            request.stop_again()  # idempotent: one that did not answer in time is stopped here
            stack = request.text().strip()  # "" if cut before it opened its log (a deadline shorter than a start)
            if child is not None:
                if stack:
                    r.children[child] = stack
                continue
            r.stack = stack or "(no stack: the rank did not answer)"
            r.collectives = flight.read(str(request.recorder))

    def _teardown(self) -> None:
        for r in self.ranks:  # an exited rank's group too: a child it spawned may outlive it
            _proc.kill_group(r.pid)
        until = time.monotonic() + 10
        while len(self.exited) < len(self.ranks):
            message = self._next(until)
            if message is None:
                break
            if message["op"] == "exit":
                self.exited.add(message["rank"])
        for r in self.ranks:  # what each rank's exit would have removed, had it exited (`rank.own_mp_tempdir`)
            _remove_mp_tempdir(mp_tempdir_path(self.spec.run_dir, r.rank))


def _remove_mp_tempdir(named_in: Path) -> None:
    """The multiprocessing temporary directory a rank named in `named_in`, removed; only a ``pymp-*``
    directory, and only once its processes are gone (the rank's process group was killed)."""
    try:
        path = Path(named_in.read_text())
    except OSError:
        return
    if path.name.startswith("pymp-") and path.is_absolute():
        shutil.rmtree(path, ignore_errors=True)


def _answers(pid: int, rank_pid: int) -> bool:
    """Can a rank's child answer a stack request: alive (not a zombie its rank
    has not reaped) and still in the rank's process group (not a reused pid)?"""
    try:
        return os.getpgid(pid) == rank_pid and _proc.state(pid) not in ("Z", "X", "")
    except OSError:
        return False


class _Pool:
    """Warm fork servers of this process: one per group running at once.

    A caller that finds every server busy (another thread is running a
    group on it) gets a new one, so N threads run N groups in parallel.
    Only the first server (the mother) imports torch. It runs no group:
    every server a group runs on is a fork of it, so N servers cost one
    import, not N (4 s of CPU each on the 2-core machine, docs/speed.md).

    The mother is started from one long-lived thread: the kernel's
    parent-death signal fires when the *thread* that started a child exits,
    so a server started from a worker thread would die with that thread.
    Its forks die with it.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[_ZygoteClient] = []
        self.all: list[_ZygoteClient] = []
        self.mother: Optional[_ZygoteClient] = None
        self.owner = os.getpid()
        self.requests: "queue.Queue[queue.Queue]" = queue.Queue()
        self.spawner: Optional[threading.Thread] = None
        #: `cancel` was called: no server starts any more.
        self.cancelled = False

    def _start_mother(self) -> _ZygoteClient:
        """The mother, started (not awaited) unless it is running."""
        if self.mother is not None and self.mother.proc.poll() is None:
            return self.mother
        if self.mother is not None:
            self.mother.close(0.0)
        if self.spawner is None or not self.spawner.is_alive():
            self.spawner = threading.Thread(target=self._spawn_forever, name="ckpt-harness-spawner", daemon=True)
            self.spawner.start()
        reply: queue.Queue = queue.Queue()
        self.requests.put(reply)
        client = reply.get()
        if isinstance(client, BaseException):
            raise client
        self.mother = client
        return client

    def _spawn_forever(self) -> None:
        while True:
            reply = self.requests.get()
            try:
                reply.put(_ZygoteClient.start())
            except BaseException as exc:  # handed to the caller
                reply.put(exc)

    def acquire(self) -> _ZygoteClient:
        with self.lock:
            if self.cancelled:
                raise Cancelled()
            self._forget_foreign()
            while self.idle:
                client = self.idle.pop()
                if client.proc.poll() is None:
                    return client
                self.all.remove(client)
            mother = self._start_mother()
        return self._adopt(mother)

    def _adopt(self, mother: _ZygoteClient) -> _ZygoteClient:
        """A new fork of `mother`, in `all`. Made outside the pool's lock: it
        waits for the mother's imports, which a cancel must not wait for."""
        try:
            client = mother.fork()
        except (LaunchError, OSError):
            if self.cancelled:  # the mother was shut down under it
                raise Cancelled() from None
            raise
        with self.lock:
            if self.cancelled:
                client.close(0.0)
                raise Cancelled()
            self.all.append(client)
        return client

    def release(self, client: _ZygoteClient) -> None:
        with self.lock:
            if client in self.all:
                self.idle.append(client)

    def warm(self, count: int, wait: bool = False) -> None:
        """Start the mother now, so its imports overlap the caller's; with
        `wait`, once it is ready, have `count` servers forked and idle."""
        with self.lock:
            if self.cancelled:
                raise Cancelled()
            self._forget_foreign()
            mother = self._start_mother()
            missing = count - len(self.all) if wait else 0
        for _ in range(missing):
            client = self._adopt(mother)
            with client.lock:
                client._await_ready()
            self.release(client)

    def close(self, wait: float = 5.0) -> None:
        with self.lock:
            if self.owner == os.getpid():
                for client in self.all:  # each kills its ranks; then the mother, whose forks die with it
                    # one still importing torch has no rank yet: nothing to wait for
                    client.close(wait if client.ready else 0.0)
                if self.mother is not None:
                    self.mother.close(wait if self.mother.ready else 0.0)
            self.all, self.idle, self.mother = [], [], None

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True
        self.close(wait=1.0)  # a server busy importing a job's preloads is killed; its ranks die with it

    def _forget_foreign(self) -> None:
        if self.owner != os.getpid():  # a forked harness: the servers are the parent's
            self.all, self.idle, self.mother, self.owner = [], [], None, os.getpid()
            self.requests, self.spawner = queue.Queue(), None


_pool = _Pool()


def run_group(spec: GroupSpec) -> GroupOutcome:
    """Launch `spec`, wait for every rank to finish or the deadline, tear down.

    Thread-safe: concurrent calls run their groups in parallel.
    """
    client = _pool.acquire()
    try:
        return client.run(spec)
    except Exception:
        if _pool.cancelled:  # its server was shut down under it
            raise Cancelled() from None
        raise
    finally:
        _pool.release(client)


def cancel() -> None:
    """Stop every group of this process now and start none after (the matrix
    on SIGINT or SIGTERM): each warm fork server kills its ranks' process
    groups and exits, and `run_group`, running or called later, raises
    `Cancelled`. Returns once the servers are gone (about a second at most)."""
    _pool.cancel()


def cancelled() -> bool:
    """`cancel` was called: a launcher that runs groups of its own stops them too."""
    return _pool.cancelled


def prestart(count: int = 1, wait: bool = False) -> None:
    """Start the warm fork server now, so its torch import overlaps the
    caller's; with `wait`, return once `count` servers (forks of it) are
    ready to fork ranks."""
    _pool.warm(count, wait)


@atexit.register
def shutdown() -> None:
    """Stop the warm fork servers; ranks die with them."""
    _pool.close()
