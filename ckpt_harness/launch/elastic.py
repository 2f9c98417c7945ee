"""Unmodified training scripts under torch's own elastic agent (torchrun).

A Job runs on the harness's warm fork server; a script runs the way its
users run it: M agents of ``torch.distributed.run`` meeting at one c10d
rendezvous are M nodes sharing this machine's file system (on a cluster the
same agent command runs once per node). The agents start, restart and stop
the workers (forked warm from a template of their agent unless the run
starts cold: `launch.warm_workers`); the harness only watches, to a
deadline, and tears down. Its answer is the fork server's `GroupOutcome`,
so records and the oracle read a script run exactly like a Job run.

torch elastic's process model, as far as it matters here (torch 2.13):

* An agent spawns its workers with `subprocess.Popen(start_new_session=True)`
  from its main thread, on every restart too: each worker leads its own
  session, so killing an agent's process group leaves its workers running,
  and a SIGKILLed agent orphans them. The bootstrap (`worker.py`) ties each
  worker to its agent with the parent-death signal; each agent, a fork of
  the harness's warm agent server (`agent.py`), dies with that server, and
  the server with the harness. On teardown the harness kills every
  process carrying the run's tag in its environment.
* When one worker exits non-zero the agent SIGTERMs the others at once
  (``_pcontext.close``, SIGKILL after ``--shutdown-timeout``); with restarts
  left it rendezvouses again and starts a new group, and an agent whose
  workers are healthy restarts too when it sees another node waiting (that
  restart is not counted in its ``TORCHELASTIC_RESTART_COUNT``). With none
  left it exits, and the workers of the other nodes stay blocked in their
  collectives: the harness gives them `failure_grace`, as for a Job.
* A worker whose script returned is held, its default group kept, until
  every worker of its attempt ended (`worker._hold`), as a Job rank parks:
  a peer left waiting in a collective it skipped hangs, as on NCCL,
  instead of raising when gloo's sockets close. The watch then ends the run
  as soon as no running worker can progress (`launch.beacon`, proven twice
  in a row), with the cut it would have made at the deadline or a grace.
* Workers get RANK, LOCAL_RANK, GROUP_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
  GROUP_WORLD_SIZE, ROLE_*, MASTER_ADDR/PORT, TORCHELASTIC_RESTART_COUNT,
  TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID, TORCHELASTIC_ERROR_FILE,
  and OMP_NUM_THREADS=1 when more than one per node and it was unset.
  With c10d, ``--node-rank`` is ignored: GROUP_RANK goes by join order.
* ``--event-log-handler console`` makes the agent log one JSON event per
  worker when its last attempt ends, with the exit code (negative: the
  signal). It is the only place the signal that killed a worker is known,
  and only when the agent returns normally: one that raised (e.g. it lost
  the c10d rendezvous store, hosted by whichever agent bound the endpoint
  first, when that agent exited) stops its workers and logs nothing. A
  worker SIGTERMed leaves its stack, which says so instead.

How a worker of the last attempt reads: the script returned -> OK (HUNG,
`exiting`, if every script returned and it was still alive at the
deadline: something at its exit never let it go); raised
or exited non-zero -> FAILED; still in the script when the watch ended ->
HUNG; died otherwise -> CRASHED, with torch's exit code. Every worker alive
when the watch ended gives its stack and collectives, also one that
returned and is stuck on its way out (it reads as a Job rank parked after
finishing: "finished, waiting for its peers").
A worker the agent SIGTERMed because a peer failed is FAILED, marked
`ended_by_launcher`, with the stack where the SIGTERM found it: torchrun
propagates a failure to every worker at once, by design, so the group did
not hang (a Job's peers get `failure_grace` to fail by themselves instead),
and whether the peer would have raised on its own too is a race the
verdict must not depend on.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Mapping, Optional

from ckpt_harness.errors import ConfigError
from ckpt_harness.launch import _proc, beacon, flight, group, looks
from ckpt_harness.launch.agent import Agent, start_agent
from ckpt_harness.launch.group import (
    Cancelled,
    LaunchError,
    cancelled,
    check_layout,
)
from ckpt_harness.launch.outcome import Cut, GroupOutcome, RankOutcome, RankStatus
from ckpt_harness.launch.layout import (
    agent_log,
    data_path,
    elastic_log_dir,
    flight_path,
    log_path,
    stack_path,
    trace_path,
    warm_twin,
    workers_dir,
)
from ckpt_harness.launch.heartbeat import Heartbeat
from ckpt_harness.launch.link import helpers
from ckpt_harness.launch.stacks import StackRequest, await_answers
from ckpt_harness.launch.worker import ENTRY_ENV, PG_TIMEOUT_ENV, RUN_DIR_ENV, RUN_TAG_ENV, WorkerRecord

#: torch >= 2.4 lets the workers' default process group live in the
#: rendezvous's TCPStore, which outlives a restart with the previous
#: attempt's keys in it: the restarted workers' gloo mesh then hangs in
#: `init_process_group` (3 of 3 runs here; pytorch/pytorch#135712 is the
#: NCCL face of it). Opting out (a store per attempt, hosted by rank 0, as
#: before 2.4) is the harness's default; a script's environment may say 0.
SHARE_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
#: How often the harness looks at the workers; the agents look as often.
POLL = 0.05
#: How a worker that ended (`WorkerRecord.end`) is told in a heartbeat line.
_ENDED = {"ok": "finished", "raised": "raised", "stopped": "stopped where a preempted run stops"}
#: After a deadline: how long workers get to write their stacks and
#: collectives. Longer than a Job rank's: a fresh interpreter does its
#: first recorder dump cold (1.0 s seen under a load of 7 on two cores;
#: more than 5 s, in both workers, with the suite's three xdist workers
#: running torchrun tests beside it: tests/test_elastic.py's skipped
#: barrier, measured with `pytest -n 3 tests/test_elastic.py
#: tests/test_script_explore.py`, failed at 5 s on this commit and the one
#: before, passed at 15 s). The wait ends as soon as every worker answered,
#: so only a worker that cannot answer costs it.
STACK_GRACE = 15.0
#: Teardown: how long killed processes get to be gone before the harness says so.
KILL_WAIT = 10.0
#: Once every worker of the last attempt ended with a failure: how long the
#: agents get to log their workers' exit codes and exit (a fresh
#: interpreter tearing torch down, seconds under load). Not a deadline of
#: the script's: the run has ended, this only waits for its account.
AGENT_EXIT = 10.0


@dataclasses.dataclass(frozen=True)
class ScriptSpec:
    """An unmodified script and how torchrun should run it on this machine."""

    #: The script's path (or ``-m MODULE``), then its arguments, as after ``python``.
    command: tuple[str, ...]
    run_dir: Path
    deadline: float
    nproc_per_node: int = 1
    #: Agents on this machine, each one "node" of a c10d rendezvous.
    nnodes: int = 1
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: "module:function" every worker calls as ``fn(rank, run_dir, park)``
    #: before the script runs (`worker.prepare`), as `GroupSpec.entry` is
    #: called in a Job rank; what it returns, unless None, is told
    #: ``finished()`` or ``failed(exc)`` when the script ends. None: the
    #: script runs alone.
    entry: Optional[str] = None
    #: torchrun's ``--max-restarts``: the agents restart the whole group
    #: after a worker fails, this many times.
    max_restarts: int = 0
    #: Once a worker of the last attempt failed or died, how long the
    #: others get to end too (see `GroupSpec.failure_grace`).
    failure_grace: float = 5.0
    #: Once a worker reports it is blocked for good (`WorkerRecord.blocked`),
    #: how long the others get to fail (`GroupSpec.blocked_grace`); None: the deadline.
    blocked_grace: Optional[float] = None
    #: A preempted run: once each of these ranks has stopped (parked, its
    #: record says "stopped"), the group is torn down where it is. The
    #: other ranks count as finished: the harness stopped them.
    stop_ranks: Optional[frozenset[int]] = None
    #: End the run as soon as no running worker can progress (`GroupSpec.early_end`).
    early_end: bool = dataclasses.field(default_factory=lambda: group.EARLY_END)  # read when made: a benchmark sets it
    #: Workers forked from a template of their agent (`launch.warm_workers`), not fresh interpreters.
    warm_workers: bool = False
    #: Modules the template imports besides the entry's, for what every worker imports to reach its
    #: storage (`storage.Mount.preload`); a warm start only.
    preload: tuple[str, ...] = ()
    #: The interpreter torchrun and its workers run: this one, or an environment's of pinned releases
    #: (`launch.envs`), which sees the harness's packages after its own.
    python: str = sys.executable

    def __post_init__(self) -> None:
        if not self.command:
            raise ConfigError("a script spec needs a command: the script's path, then its arguments")
        if self.command[0] == "-m" and len(self.command) < 2:
            raise ConfigError("-m needs a module to run: give -m MODULE, then its arguments")
        if self.command[0] != "-m" and not Path(self.command[0]).is_file():
            raise ConfigError(f"no script at {self.command[0]!r}: give the path of a Python file to run, or -m MODULE")
        check_layout(self.world_size, self.nnodes)
        if self.deadline <= 0:
            raise ConfigError(f"deadline must be positive, got {self.deadline}")
        if self.max_restarts < 0:
            raise ConfigError(f"max_restarts must be 0 or more, got {self.max_restarts}")
        if self.blocked_grace is not None and self.blocked_grace <= 0:
            raise ConfigError(f"blocked_grace must be positive, got {self.blocked_grace}")

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def agent_args(self, port: int, run_id: str, node_rank: int) -> list[str]:
        """torchrun's arguments for one agent: what a user types on each node
        (docs/scripts.md lists them, and why each)."""
        return [
            "--nnodes", str(self.nnodes), "--node-rank", str(node_rank),
            "--nproc-per-node", str(self.nproc_per_node),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
            "--max-restarts", str(self.max_restarts), "--monitor-interval", str(POLL),
            "--event-log-handler", "console",
            # torchrun's own default is a fresh torchelastic_* in the system's temporary directory,
            # which it never removes (and a killed agent could not): one left per run of an exploration.
            "--log-dir", str(elastic_log_dir(Path(self.run_dir).resolve(), node_rank)),
            "-m", "ckpt_harness.launch.worker", *self.command,
        ]


@dataclasses.dataclass
class ScriptOutcome(GroupOutcome):
    """A `GroupOutcome` with what only torchrun has: restarts and agents."""

    #: How often the group was restarted; the ranks are the last attempt's.
    restarts: int = 0
    agent_logs: tuple[Path, ...] = ()


def run_elastic(spec: ScriptSpec) -> ScriptOutcome:
    """Run `spec` under torchrun to its end, a failure or the deadline; tear down.

    Returns within the deadline plus a few seconds, with no agent, worker
    or child of theirs left, also on Ctrl-C (then it raises
    KeyboardInterrupt after teardown). A SIGKILLed harness takes its
    agents along, and they their workers (the parent-death signal).
    Raises `LaunchError` (a harness problem, not the script's) when no
    worker started at all, and `Cancelled` (after teardown) once the
    launcher was cancelled (`group.cancel`).

    The rendezvous store's port is picked free and released for torchrun to
    bind, as `--standalone` does, so another process may take it first; the
    agents then fail to reach the store before any worker starts. So may
    the port torchrun picks for the workers' own store (MASTER_PORT), which
    rank 0 then fails to bind in `init_process_group`, before the script
    got its group. Either is the set-up, not the script: the run is made
    again on new ports, once.
    """
    for attempt in range(STORE_ATTEMPTS):
        last = attempt + 1 == STORE_ATTEMPTS
        try:
            outcome = _ElasticRun(spec).run()
        except LaunchError as exc:
            if last or not store_lost(str(exc)):
                raise
            continue
        if last or not any(r.status is RankStatus.FAILED and port_taken(_tail(r.log, 40)) for r in outcome.ranks):
            return outcome
        for rank in range(spec.world_size):  # the next attempt's traces start anew (logs go on, saying both)
            trace_path(spec.run_dir, rank).unlink(missing_ok=True)
            data_path(spec.run_dir, rank).unlink(missing_ok=True)
    raise AssertionError("unreachable")


#: Launches tried when the agents could not reach their rendezvous store.
STORE_ATTEMPTS = 2
#: What torchrun's agents log when the store's port was taken or never came up.
_STORE_LOST = ("RendezvousConnectionError", "The connection to the C10d store has failed", "EADDRINUSE",
               "Address already in use")


def store_lost(message: str) -> bool:
    """Did no worker start because the agents could not reach their store (`run_elastic`)?"""
    return "started no worker" in message and any(sign in message for sign in _STORE_LOST)


def port_taken(log: str) -> bool:
    """Did a worker fail because its group's store port was taken before it
    bound it, in `init_process_group` (`run_elastic`)?"""
    return "EADDRINUSE" in log and "_create_c10d_store" in log and "init_process_group" in log


class _ElasticRun:
    def __init__(self, spec: ScriptSpec):
        self.spec = spec
        self.run_dir = Path(spec.run_dir).resolve()
        self.tag = uuid.uuid4().hex
        self.agents: list[Agent] = []
        #: Workers alive when the watch ended, by pid.
        self.alive_at_stop: set[int] = set()
        #: Where each hung rank's stack file ended before it was asked for a stack.
        self.stack_offsets: dict[int, int] = {}
        #: The watch ended because every rank of `spec.stop_ranks` stopped; when (`time.monotonic()`).
        self.preempted = False
        self.preempted_at = float("inf")
        #: When the watch ends at the latest, and why (`Cut`): the deadline unless a grace came first.
        self.bound_at, self.bound = float("inf"), Cut.DEADLINE
        #: The watch ended at once, no worker able to progress before `bound_at` (`_stuck`).
        self.ended_early = False
        #: Why the run was proven stuck (`beacon.why_stuck`), once it was.
        self.ended_why = ""
        #: What `_stuck` last proved (None: nothing), to prove it twice in a row.
        self._proven: Optional[tuple] = None
        #: What the workers' process groups wait in, asked while they are idle (`launch.looks`); in a run with
        #: cold starts that confirms a warm one's hang, where the warm run hung.
        self.looks = looks.Watch(self.run_dir, None if spec.warm_workers else looks.hang_of(warm_twin(self.run_dir)))

    def run(self) -> ScriptOutcome:
        spec = self.spec
        self.run_dir.mkdir(parents=True, exist_ok=True)
        workers_dir(self.run_dir).mkdir(exist_ok=True)
        for old in workers_dir(self.run_dir).iterdir():  # an earlier run in this directory
            old.unlink()
        start = time.monotonic()
        timed_out, stopped_at = False, None
        if cancelled():
            raise Cancelled()
        try:
            self._start_agents()
            timed_out = not self._watch(start + spec.deadline)
            ended = time.monotonic()
            last = self._last_attempt()
            self.alive_at_stop = {r.pid for r in last.values() if _proc.alive(r.pid)}
            if timed_out:
                stopped_at = ended
                statuses = self._statuses(last)
                self._collect_stacks(last)
                looks.write_cut(self.run_dir, statuses)
        finally:
            self._teardown()
        if not self._last_attempt():
            raise LaunchError(self._no_worker(timed_out))
        outcome = self._outcome(start, timed_out, stopped_at)
        # torchrun says neither when its workers all started nor when one first failed: no launch, no waits
        outcome.requested_at, outcome.decided_at, outcome.ended_at = start, ended, time.monotonic()
        return outcome

    def _no_worker(self, timed_out: bool) -> str:
        """Not one worker reached the bootstrap: torchrun itself did not get going."""
        when = f"within the {self.spec.deadline:g} s deadline" if timed_out else "before the agents ended"
        logs = "\n".join(f"--- {p}:\n{_tail(p)}" for p in self.agent_logs)
        return (f"torchrun started no worker {when}: check that torch is installed for {self.spec.python} "
                f"and that the agents' logs below show no error (a deadline shorter than interpreters "
                f"take to import torch here also does it)\n{logs}")

    def _start_agents(self) -> None:
        spec = self.spec
        port = _free_port()
        package_root = str(Path(__file__).resolve().parents[2])
        env = {
            SHARE_STORE_ENV: "1",
            **os.environ, **spec.env,
            RUN_TAG_ENV: self.tag,
            RUN_DIR_ENV: str(self.run_dir),
            # A backstop only: the deadline fires first and takes the stacks.
            PG_TIMEOUT_ENV: str(spec.deadline + 30),
            "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p),
        }
        if spec.entry is None:
            env.pop(ENTRY_ENV, None)  # not one inherited from a harness that runs in a worker itself
        else:
            env[ENTRY_ENV] = spec.entry
        for node in range(spec.nnodes):
            self.agents.append(start_agent(spec.agent_args(port, self.tag, node), env, agent_log(self.run_dir, node),
                                           spec.nproc_per_node, warm_workers=spec.warm_workers,
                                           preload=(*((spec.entry.partition(":")[0],) if spec.entry else ()),
                                                    *spec.preload), python=spec.python))

    def _watch(self, until: float) -> bool:
        """Follow the run until the agents ended or every worker exited for
        good (finished, or failed with no restart left); False at the
        deadline, or when a failed worker's peers outstay the failure grace
        or a blocked one's the blocked grace.

        Agents whose workers all finished only wait for each other and tear
        torch down (seconds of a fresh interpreter's exit under load): they
        are killed rather than waited for. After a failure they are waited
        for up to `AGENT_EXIT`, outside the deadline and the failure grace:
        their log has the exit codes (unless every worker raised, and
        recorded its own).
        """
        graced = False
        ended: Optional[float] = None
        self.bound_at, self.bound = until, Cut.DEADLINE
        pulse = Heartbeat(self.run_dir, self.spec.world_size, time.monotonic(), until)
        while any(a.poll() is None for a in self.agents):
            if cancelled():  # the harness is stopping: `run`'s teardown takes every process down
                raise Cancelled()
            now = time.monotonic()
            if ended is not None:
                if now >= ended + AGENT_EXIT:
                    return True
                time.sleep(POLL)
                continue
            if now >= self.bound_at:
                return False
            last = self._last_attempt()
            # A worker that raised has ended, also while its interpreter is still on its way out
            # (seconds with torch under load): no grace is spent on its exit.
            if len(last) == self.spec.world_size and all(
                    r.end == "raised" or not _proc.alive(r.pid) for r in last.values()):
                if all(r.end == "ok" for r in last.values()):
                    return True
                if any(self._failed_for_good(r) for r in last.values()):
                    # No restart will follow: the agents only log the workers' exit codes (the
                    # signal that killed one is known from there alone) and exit. Every worker
                    # that raised recorded its exit code itself: then there is nothing to wait for.
                    if all(r.end == "raised" for r in last.values()):
                        return True
                    ended = now
                    continue
            if self._stopped(last):
                self.preempted, self.preempted_at = True, time.monotonic()
                return True
            # Bounds first: a run found stuck ends early with the cut it would have come to.
            if not graced and any(self._failed_for_good(r) for r in last.values()):
                graced = True
                self._bound(now + self.spec.failure_grace, Cut.FAILURE)
            blocked = [r.blocked for r in last.values() if r.blocked is not None]
            if self.spec.blocked_grace is not None and blocked and self.bound is not Cut.BLOCKED:
                self._bound(min(blocked) + self.spec.blocked_grace, Cut.BLOCKED)
            if self.spec.early_end and self._stuck(last):
                self.ended_early = True
                return False
            how = {r.rank: _ENDED.get(r.end, "ended") for r in last.values() if r.end is not None}
            if len(last) == self.spec.world_size and all(r.end == "ok" for r in last.values()):
                how = dict.fromkeys(how, "returned, not exited yet")  # nothing of the harness holds it now
            pulse(how, self.bound_at, native=self.looks.latest)
            time.sleep(POLL)
        return True

    def _stuck(self, last: dict[int, WorkerRecord]) -> bool:
        """No running worker can progress before the watch's cut: each waits
        in a collective of the default group that a held (returned) or
        blocked worker never issued, and would not give up before the cut
        (`beacon.cannot_progress`), or every worker waits in the same
        collective by number, of different kinds (`beacon.mismatched`);
        proven twice in a row, nothing changed. Never once a worker raised or died (gloo tells its peers, and the
        failure grace is the cut) unless no worker is left to hear it, every
        one still running blocked for good (`beacon.nothing_left`); nor once
        one stopped where a preempted run stops (a peer waiting for it stops
        too: `rankside.script`), nor while torchrun will restart the group."""
        if len(last) < self.spec.world_size:
            self._proven = None
            return False
        alive = {r.rank for r in last.values() if _proc.alive(r.pid)}
        parked = {r.rank for r in last.values() if r.end == "ok"}
        running = {r.rank for r in last.values() if r.end is None} & alive
        ended = {r.rank for r in last.values() if self._failed_for_good(r)}
        slots = {rank: beacon.read(self.run_dir, rank) for rank in last}
        if len(alive) == len(parked | running) == self.spec.world_size:
            why = beacon.why_stuck(slots, parked, running, self.bound_at, time.monotonic())
            if not why and all(s is not None for s in slots.values()):  # collectives issued below Python too
                blocked = {r for r in running if slots[r].blocked}  # type: ignore[union-attr]
                why = self.looks.stuck({r.rank: r.pid for r in last.values()}, slots, parked | blocked,
                                       running - blocked, self.bound_at)
        elif len(parked | running | ended) == self.spec.world_size and beacon.nothing_left(slots, running):
            why = beacon.NOTHING_LEFT
        else:
            why = ""
        proven = bool(why) and not any(helpers(str(self.run_dir), rank) for rank in parked | running)
        seen = (tuple(sorted(parked)), tuple(slots[r] for r in sorted(slots))) if proven else None
        stuck, self._proven = proven and seen == self._proven, seen
        self.ended_why = why
        return stuck

    def _bound(self, at: float, cut: Cut) -> None:
        """End the watch at `at` at the latest, for `cut`'s reason."""
        if at < self.bound_at:
            self.bound_at, self.bound = at, cut

    def _stopped(self, last: dict[int, WorkerRecord]) -> bool:
        """Every rank the run is to stop at has stopped (or finished)."""
        ranks = self.spec.stop_ranks
        if not ranks or not all(r in last for r in ranks):
            return False
        ends = [last[r].end for r in ranks]
        return "stopped" in ends and all(e in ("stopped", "ok") for e in ends)

    def _failed_for_good(self, record: WorkerRecord) -> bool:
        """The worker ended badly in an attempt its agent will not restart."""
        if record.restart < record.max_restarts or record.end == "ok":
            return False
        return record.end == "raised" or not _proc.alive(record.pid)

    def _last_attempt(self) -> dict[int, WorkerRecord]:
        """Each rank's worker that started last: the attempt the outcome is about."""
        return WorkerRecord.newest(self.run_dir)

    def _statuses(self, last: dict[int, WorkerRecord]) -> dict[int, str]:
        """How the watch found each worker as it ended (`looks.write_cut`)."""
        found = {}
        for rank in range(self.spec.world_size):
            r, slot = last.get(rank), beacon.read(self.run_dir, rank)
            if r is None or r.end not in (None, "ok") or not _proc.alive(r.pid):
                found[rank] = "ended"
            elif r.end == "ok":
                found[rank] = "parked"
            else:
                found[rank] = "blocked" if slot is not None and slot.blocked else "running"
        return found

    def _collect_stacks(self, last: dict[int, WorkerRecord]) -> None:
        """Ask every live worker for its stack and collectives (as `group.py`
        does for Job ranks) and give them `STACK_GRACE` to answer. Not one
        that raised: its traceback says where it was, and one still on its
        way out (a gloo group's teardown waiting for a blocked peer) never
        answers, which cost every such run the whole grace."""
        alive = [r for r in last.values() if r.pid in self.alive_at_stop and r.end != "raised"]
        requests = {r.rank: StackRequest(r.pid, stack_path(self.run_dir, r.rank), flight_path(self.run_dir, r.rank),
                                         flight.DUMP_SIGNAL) for r in alive}
        for request in requests.values():
            request.send()  # one stopped by an injected SIGSTOP is continued; it blocks again after
        await_answers(requests.values(), STACK_GRACE, POLL, cancelled)
        self.stack_offsets = {rank: request.offset for rank, request in requests.items()}

    def _teardown(self) -> None:
        """Kill the agents, their workers and whatever those started; wait until gone.

        Processes are found by the run's tag in their environment, never by a
        pid alone: pids wrap around fast on a busy machine, and a worker that
        exited may have handed its number to a stranger. Agents and workers
        each lead a session; their groups go too (children that cleared
        their environment).
        """
        for agent in self.agents:
            agent.kill_group()  # not released yet: the pid is still the agent's
        until = time.monotonic() + KILL_WAIT
        while (tagged := _tagged(self.tag)) and time.monotonic() < until:
            for pid in tagged:
                try:
                    if os.getpgid(pid) == pid:
                        _proc.kill_group(pid)
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(POLL)
        for agent in self.agents:
            agent.wait(max(0.0, until - time.monotonic()))
            agent.release()

    def _outcome(self, start: float, timed_out: bool, stopped_at: Optional[float]) -> ScriptOutcome:
        last = self._last_attempt()
        exits = _worker_exits(self.agent_logs)
        ranks = [self._rank(rank, last.get(rank), exits, start, timed_out, stopped_at)
                 for rank in range(self.spec.world_size)]
        if timed_out and not self.preempted and len(last) == self.spec.world_size and all(
                r.end == "ok" for r in last.values()):
            # Every script returned, so no worker was held for a peer (`worker._hold`): one alive at the
            # deadline could not exit.
            for o in ranks:
                if o.pid in self.alive_at_stop:
                    o.status, o.exit_code, o.exiting = RankStatus.HUNG, None, True
        stopped = [o for o in ranks if o.status is RankStatus.CRASHED and o.signal == signal.SIGTERM]
        if any(o.status.ended_badly and o not in stopped for o in ranks):
            # The SIGTERMs were the agent's, after another worker's failure.
            for o in stopped:
                o.status, o.signal, o.exit_code, o.ended_by_launcher = RankStatus.FAILED, None, None, True
                o.stack = self._stack(o.rank, 0) or "(no stack: the worker replaced the SIGTERM handler)"
        if timed_out and self.bound is Cut.FAILURE and all(o.pid and o.pid not in self.alive_at_stop for o in ranks):
            # Every worker had ended when the failure grace ran out (torchrun stopped them: an agent that
            # lost the rendezvous store stops its workers, and is slow to exit itself): nothing was cut.
            timed_out = False
        hung = any(o.status is RankStatus.HUNG for o in ranks)
        # Cut by the failure grace, the peers were stuck then, also one that raised only as the failed
        # worker's interpreter finally exited and closed its sockets ("Connection closed by peer").
        stuck = (timed_out and self.bound is Cut.FAILURE) or (hung and not self.ended_early and (
            self.bound is not Cut.BLOCKED) and (not timed_out or (stopped_at or 0) - start < self.spec.deadline))
        cut = Cut.FAILURE if stuck else (self.bound if timed_out else None)
        return ScriptOutcome(
            ranks=ranks, timed_out=timed_out or stuck, elapsed=time.monotonic() - start,
            stuck_after_failure=stuck, stopped_at=stopped_at, cut=cut,
            restarts=_restarts(WorkerRecord.read_all(self.run_dir)), agent_logs=self.agent_logs,
            ended_early=self.ended_early, ended_why=self.ended_why if self.ended_early else "",
        )

    def _rank(self, rank: int, record: Optional[WorkerRecord], exits: dict[int, int],
              start: float, timed_out: bool, stopped_at: Optional[float] = None) -> RankOutcome:
        o = RankOutcome(rank=rank, pid=record.pid if record else 0, log=log_path(self.run_dir, rank))
        if (record is not None and record.end == "raised" and record.pid in self.alive_at_stop
                and stopped_at is not None and record.finished is not None and record.finished >= stopped_at):
            # Running when the watch cut the run, it raised only after: its stack was being taken, or the
            # teardown killed a peer first and its collective raised "Connection closed by peer" before it
            # was killed too. It is where the cut found it.
            record = dataclasses.replace(record, end=None, finished=None)
        if record is None:  # never reached the bootstrap
            o.status = RankStatus.HUNG if timed_out else RankStatus.CRASHED
            o.stack = "(no stack: the worker never reached the harness's bootstrap; see the agent logs)"
            return o
        if record.finished is not None:
            o.finished_at = record.finished - start
        if record.pid in self.alive_at_stop and not self.preempted and record.end != "raised":
            # its stack, also if only slow to exit after it returned (one that raised has its traceback)
            o.stack = self._stack(rank, self.stack_offsets.get(rank, 0))
            o.stack = o.stack or "(no stack: the worker did not answer)"
            o.collectives = flight.read(str(flight_path(self.run_dir, rank)))
        # Running when the run was preempted, a worker is as a preempted one is, also if it raised after
        # that moment: the teardown killed a stopped peer first, and under load this one's collective
        # could still raise "Connection closed by peer" before it was killed too.
        preempted = self.preempted and (
            (record.end is None and record.pid in self.alive_at_stop)
            or (record.end == "raised" and record.finished is not None and record.finished >= self.preempted_at))
        if record.end in ("ok", "stopped") or preempted:
            o.status, o.exit_code = RankStatus.OK, 0
        elif record.end == "raised":
            o.status, o.exit_code = RankStatus.FAILED, record.exit_code
        elif record.pid in self.alive_at_stop:
            o.status = RankStatus.HUNG
        else:
            code = exits.get(record.pid)
            if code is None and self._stack(rank, 0):
                # Not asked for a stack, yet it left one: its SIGTERM's. An
                # agent that lost the rendezvous store (the agent hosting it
                # exited after its own worker failed) stops its workers and
                # dies without reporting their exit codes.
                code = -signal.SIGTERM
            o.status = RankStatus.CRASHED
            o.exit_code, o.signal = (None, -code) if code is not None and code < 0 else (code, None)
        return o

    def _stack(self, rank: int, offset: int) -> str:
        try:
            with open(stack_path(self.run_dir, rank), "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace").strip()
        except OSError:
            return ""

    @property
    def agent_logs(self) -> tuple[Path, ...]:
        return tuple(agent_log(self.run_dir, i) for i in range(len(self.agents)))


def _restarts(records: list[WorkerRecord]) -> int:
    """Group restarts seen: every restart starts every rank again, and an agent
    restarted by another node's failure does not count it in its own number."""
    attempts: dict[int, int] = {}
    for r in records:
        attempts[r.rank] = attempts.get(r.rank, 0) + 1
    return max([0, *(n - 1 for n in attempts.values()), *(r.restart for r in records)])


_EVENT = b'{"name": "torchelastic.worker.status.'


def _worker_exits(agent_logs: tuple[Path, ...]) -> dict[int, int]:
    """Exit code by worker pid, from the agents' final worker events (negative: a signal)."""
    exits = {}
    for path in agent_logs:
        try:
            lines = path.read_bytes().splitlines()
        except OSError:
            continue
        for line in lines:
            if not line.startswith(_EVENT):
                continue
            try:
                meta = json.loads(json.loads(line)["metadata"]["metadata"])
                pid, code = meta["worker_pid"][0], meta["exit_code"][0]
            except (ValueError, KeyError, IndexError, TypeError):
                continue
            if pid is not None and code is not None:
                exits[int(pid)] = int(code)
    return exits


def _tagged(tag: str) -> list[int]:
    """Processes whose environment carries the run's tag (only our own are readable)."""
    needle = f"{RUN_TAG_ENV}={tag}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0") and _proc.alive(int(pid)):
                    found.append(int(pid))
        except OSError:
            continue
    return found


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _free_port() -> int:
    """A port for the rendezvous store (torchrun's ``--standalone`` picks one the same way)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
