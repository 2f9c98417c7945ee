"""The worker side of a script run: record what the oracle judges, as `rankside.job` does for a Job.

The bootstrap (`launch/worker.py`) calls `arm`, the entry the script target
names in its `ScriptSpec` (`targets/script.py`), before the script runs; it arms the worker when
the harness put a `ScriptPlan` in the environment. From then on the worker
is traced like a Job rank (collectives, file operations under the
checkpoint directory, the armed faults) and writes the same records into
the same files: SAVED at every save boundary (`inject.saves`) with what the
save was handed, STOPPED where a preempted run stops, FINAL and FINISHED
when the script returns, ERROR when it raises. The script never calls the
harness; nothing here runs in a process that was not given a plan.

There is no LOADED record: a script resumes by its own logic and does not
say from where; its first save after the resume says it (see
`oracle.start`). A script that declares its full state
(`ckpt_harness.full_state`) has it recorded, in the runs that ask for it
(the world-size scenarios), as each save starts (SAVED_FULL) and, in a
run that starts on a checkpoint, at its first module forward (LOADED_FULL):
what it loaded, before anything trained on it.

A save is more than its entry points: a save lasts from its first entry
point until the script trains (its next optimizer step or module
forward), saves another step, or returns. The script's own routine around the entry
points (writing more files of the step, a barrier, the rename into place,
`latest`, rotation of old checkpoints, the final gather) is part of the
save: its operations are fault points of the save, a failure or hang there
is the checkpointing's (`phase.checkpointing`), and the save has returned
(SAVED) only once the routine is over, so no case expects S_k of a rank
still renaming. That holds for a save made before the script ever trained
too: OLMo-core saves step 0 first, and renames it into place after DCP's
entry point returned.

A run told to stop after save k stops each rank that made save k where it
trains again, at the start of its next save (of another step) or where it
would otherwise return: everything belonging to save k is done by then,
and nothing of the next save is. A save k that returned in the background
(`dcp.async_save`'s future, a pool task or a thread still writing it:
`inject.writers`) is waited for there until it landed (LANDED), as a
preemption that lets the save in flight finish does; a hard stop does not
wait (the hard-preemption scenario). A rank that made save k and then waits in a
collective outside any save while a peer already stopped counts as
stopped there (`STUCK_AFTER_PEER`): the peer will never join it (rank 0
stops at its final save while rank 1 waits in the barrier after it). The harness tears the group down once every
rank that made save k stopped, as a preemption would. A run told to crash
there instead dies (SIGKILL, once per run) for torchrun to restart the
group; each attempt starts its records anew.

A run told to stop between saves (`stop_between` K) stops each rank where
the main thread's optimizer step K+1 would start, K made (counted by
`inject.saves` through torch's optimizer step hook): a preemption after a
step that wrote nothing. A save before it still landing in the background
lands first, as above. Every SAVED says how many optimizer steps the rank
had made (`trained`), as does FINISHED: the golden run's tell which
stops lie between which saves.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from ckpt_harness import phase
from ckpt_harness import state as state_mod
from ckpt_harness.inject import probes, saves
from ckpt_harness.inject.faults import Fault, parse_plan, plan_label
from ckpt_harness.inject.writers import WRITERS
from ckpt_harness.launch.layout import crash_marker, records_path
from ckpt_harness.rankside.common import entries, install_probes, write_error
from ckpt_harness.rankside.identity import Identity
from ckpt_harness.records import Kind, Recorder

#: The plan, as JSON; set only by the harness.
PLAN_ENV = "CKPT_HARNESS_SCRIPT_PLAN"
#: The run's checkpoint directory, for scripts that read it from the
#: environment instead of their command line.
CKPT_DIR_ENV = "CKPT_HARNESS_CKPT_DIR"
#: Where the run's storage puts that directory (``{ckpt_url}``): its path, or a bucket's prefix.
CKPT_URL_ENV = "CKPT_HARNESS_CKPT_URL"


@dataclasses.dataclass(frozen=True)
class ScriptPlan:
    """What one script run records and arms; `RunPlan`'s counterpart."""

    ckpt_dir: str
    #: Where its checkpoints go when not `ckpt_dir` (a bucket: `{ckpt_url}` in its command).
    ckpt_url: str = ""
    #: Stop right after save k on the ranks that make it (see the module docstring).
    stop_after_save: Optional[int] = None
    #: Stop between saves instead: where the main thread's optimizer step K+1
    #: would start, K made (see the module docstring).
    stop_between: Optional[int] = None
    #: Instead of parking there, die by SIGKILL, once per run (the first rank
    #: to get there, in the first attempt): torchrun's agent restarts the group.
    crash: bool = False
    #: Stop there without waiting for save k, returned in the background, to land (a preemption that does not wait).
    hard_stop: bool = False
    #: Hold save k's writers until training went on past it, train on to the
    #: next save (or the end) and stop there once save k landed (`Stop.SLOW_WRITER`).
    slow_writer: bool = False
    faults: tuple[Fault, ...] = ()
    log_data: bool = False
    trace_files: bool = True
    #: List the checkpoint directory as each save ends: the script rotates its checkpoints.
    list_entries: bool = False
    #: Record what the script registered with `ckpt_harness.full_state` as each
    #: save starts (SAVED_FULL) and, in a run that starts on a checkpoint
    #: (`resumes`), at its first module forward: the state it loaded (LOADED_FULL).
    full_state: bool = False
    #: The run starts on a checkpoint directory that holds something.
    resumes: bool = False

    def to_env(self) -> str:
        return json.dumps({**dataclasses.asdict(self), "faults": plan_label(self.faults)})

    @classmethod
    def from_env(cls, text: str) -> "ScriptPlan":
        fields = json.loads(text)
        faults = fields.pop("faults")
        return cls(**fields, faults=parse_plan(faults) if faults else ())


#: How long a rank past save k must wait in one collective, outside any
#: save and with a peer stopped, before it counts as stopped there too.
STUCK_AFTER_PEER = 0.5
_POLL = 0.05


class ScriptRank:
    """One worker's recorder and save hooks."""

    def __init__(self, rank: int, run_dir: Path, plan: ScriptPlan, park: Callable[[], None]):
        self.rank, self.plan, self.park = rank, plan, park
        install_probes(run_dir, rank, plan)
        # One attempt's records: a group torchrun restarted starts them anew (the run's ranks are the last attempt's).
        records_path(run_dir, rank).unlink(missing_ok=True)
        self.recorder = Recorder(records_path(run_dir, rank))
        self.run_dir = run_dir
        #: What names this run, not its training: rewritten in every state it records (`rankside.identity`).
        self.identity = Identity.of(plan.ckpt_dir, plan.ckpt_url)
        self.saves = saves.Saves(plan.ckpt_dir, self._began, self._ended, self._trains, self._landed,
                                 declared=self._declared, url=plan.ckpt_url, stepping=self._stepping)
        #: The step of this rank's last save and its state (saves of one step merged).
        self.last: Optional[tuple[int, dict[str, Any]]] = None
        self._watch: Optional[threading.Thread] = None
        #: The steps whose full state this rank recorded, and whether it watches for the one it loaded.
        self._full_saved: set[int] = set()
        self._watching_load = False
        if plan.slow_writer and plan.stop_after_save is not None:
            WRITERS.hold(plan.stop_after_save)  # before the save hooks: they arm it once torch is imported
        saves.install(self.saves)
        probes.set_phase(phase.RUN)

    def _began(self, step: int) -> None:
        stop = self.plan.stop_after_save
        if stop is not None and step != stop and self.last is not None and self.last[0] == stop:
            self._stop()
        if self.plan.full_state and self.saves.full_states and step not in self._full_saved:
            self._full_saved.add(step)
            probes.set_phase(phase.state_before_save(step))
            self._record_full(Kind.SAVED_FULL, step)
        probes.set_phase(phase.save(step))
        if step == stop:
            self._watch_for_stopped_peer()

    def _ended(self, save: saves.Save) -> None:
        probes.set_phase(phase.state_after_save(save.step))
        state = {**save.state(self.saves.where), **self._observed()}
        captured, normalized = self.identity.normalize(state_mod.capture(state))
        self.recorder.write(Kind.SAVED, step=save.step, source=save.source, state=captured,
                            trained=self.saves.optimizer_steps,
                            **({"normalized": normalized} if normalized else {}),
                            **({"background": True} if save.background else {}),
                            **({"full_state": True} if self.saves.full_states else {}),
                            **({"entries": entries(Path(self.plan.ckpt_dir), self.plan.ckpt_url)}
                               if self.plan.list_entries else {}))
        if self.last is not None and self.last[0] == save.step:
            state = {**self.last[1], **state}
        elif save.source != "count":  # a count is this process's own, not the run's
            state = {"step": save.step, **state}
        self.last = (save.step, state)
        probes.set_phase(phase.RUN)
        if save.step == self.plan.stop_after_save:
            self._watch_for_stopped_peer()

    def _landed(self, step: int) -> None:
        """A save that returned in the background finished writing (another thread)."""
        self.recorder.write(Kind.LANDED, step=step)

    def _watch_for_stopped_peer(self) -> None:
        if not self.plan.crash and self._watch is None:
            self._watch = probes.harness_thread(self._stop_if_stuck, "ckpt-harness stop watch")

    def _trains(self) -> None:
        """Training goes on: past save k, this rank stops here (its save's routine
        is over); with save k's writers held, it trains on to its next save."""
        if self.plan.stop_after_save is not None and self.last is not None \
                and self.last[0] == self.plan.stop_after_save and not self.plan.slow_writer:
            self._stop()

    def _stepping(self, made: int) -> None:
        """The main thread's optimizer step is about to run, `made` before it:
        a run stopped between saves stops here once it made K (`stop_between`),
        everything before the step done (its forward and backward, the save
        before it over) and nothing of the step itself."""
        stop = self.plan.stop_between
        if stop is None:
            return
        if made >= stop - 1:  # from the step before on, a peer may stop while this rank waits for it
            self._watch_for_stopped_peer()
        if made >= stop:
            self._stop()

    def _stop_if_stuck(self) -> None:
        """Stop (from this thread) once the main thread, in or past the save to
        stop after, has waited `STUCK_AFTER_PEER` in one collective while a
        peer is stopped: that collective cannot complete, so this rank is as
        far as it gets. A peer stops only once its own save k is over (its
        routine's collectives passed), so a save k still open here is over
        too, waiting only for what comes after it (the script's last
        barrier, with no training after the save to close it): it is closed
        first. Should the collective complete after all, the main thread
        stops at its next save or its return, as always."""
        seen, since = None, 0.0
        stop = self.plan.stop_after_save
        during = (phase.RUN, *((phase.save(stop),) if stop is not None else ()))
        while True:
            time.sleep(_POLL)
            tracer = probes.tracer()
            waiting = tracer.waiting if tracer is not None else None
            if waiting is None or probes.current_phase() not in during or not self._peer_stopped():
                seen = None
                continue
            if waiting != seen:
                seen, since = waiting, time.monotonic()
            elif time.monotonic() - since >= STUCK_AFTER_PEER:
                self.saves.flush()
                self._let_save_land()
                self._record_stop()
                self.park()  # this thread waits for good; the harness tears the group down

    def _peer_stopped(self) -> bool:
        from ckpt_harness.launch.worker import WorkerRecord

        return any(r.end == "stopped" and r.pid != os.getpid() for r in WorkerRecord.read_all(self.run_dir))

    def _declared(self) -> None:
        """The script declared its full state: in a run that resumes, the
        state it loaded is the one its first module forward starts from
        (not its first optimizer step: DCP's `get_state_dict` before a load
        makes one, with a zero learning rate, to create the optimizer's state)."""
        if not (self.plan.full_state and self.plan.resumes) or self._watching_load:
            return
        self._watching_load = True
        import torch.nn.modules.module as module

        def first_forward(_module: Any, _args: Any) -> None:
            if threading.current_thread() is not threading.main_thread():
                return
            hook.remove()
            before = probes.current_phase()
            probes.set_phase(phase.STATE_AFTER_LOAD)
            self._record_full(Kind.LOADED_FULL, None)
            probes.set_phase(before)
        hook = module.register_module_forward_pre_hook(first_forward)

    def _record_full(self, kind: Kind, step: Optional[int]) -> None:
        """The script's full state now; a function of its that raises is
        recorded as such (the oracle says so), never raised into the script."""
        try:
            state = state_mod.capture(self.saves.full())
        except Exception as exc:  # noqa: BLE001 - the script's observer, not its checkpointing
            self.recorder.write(kind, step=step, state=None, failed=f"{type(exc).__name__}: {exc}")
        else:
            self.recorder.write(kind, step=step, state=state)

    def _observed(self) -> dict[str, Any]:
        observed = self.saves.observed()
        return {"observed": observed} if observed else {}

    def _stop(self) -> None:
        if self.plan.crash:
            try:  # once per run: the restarted group goes on from here
                os.close(os.open(crash_marker(self.run_dir), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            except FileExistsError:
                return
            os.kill(os.getpid(), signal.SIGKILL)
        self._let_save_land()
        self._record_stop()
        self.park()

    def _let_save_land(self) -> None:
        """A preemption that waits: save k, returned in the background, lands
        before the stop (its writers, a pool's task, a thread or DCP's
        checkpoint process, go on while this one waits; held ones are let
        go). A hard stop does not wait. Stopped between saves, the save
        before the stop is the one that lands."""
        step = self.plan.stop_after_save
        if step is None and self.plan.stop_between is not None and self.last is not None:
            step = self.last[0]
        WRITERS.release("stop")
        if step is not None and self.saves.in_background(step) and not self.plan.hard_stop:
            probes.set_phase(phase.after_save(step))
            self.saves.wait_settled(step)

    def _record_stop(self) -> None:
        """STOPPED, and with save k's writers held, what let them go (`Writers.released_by`)."""
        held = {"held": WRITERS.released_by} if self.plan.slow_writer else {}
        between = {"between": self.plan.stop_between, "trained": self.saves.optimizer_steps} \
            if self.plan.stop_between is not None else {}
        self.recorder.write(Kind.STOPPED, step=self.plan.stop_after_save, **held, **between)

    def finished(self) -> None:
        """The script returned: its final state is its last save's, with what it observes now."""
        self.saves.flush()
        if self.plan.stop_after_save is not None and self.last is not None \
                and self.last[0] == self.plan.stop_after_save:
            self._stop()
        probes.set_phase(phase.FINAL_STATE)
        final = {"last save": self.last[1] if self.last is not None else {}, **self._observed()}
        self.recorder.write(Kind.FINAL, state=self.identity.normalize(state_mod.capture(final))[0])
        self.recorder.write(Kind.FINISHED, trained=self.saves.optimizer_steps,
                            **({"elsewhere": self.saves.wrote_elsewhere()} if self.saves.elsewhere else {}))

    def failed(self, exc: BaseException) -> None:
        write_error(self.recorder, exc)


def arm(rank: int, run_dir: Path, park: Callable[[], None]) -> Optional[ScriptRank]:
    """Arm this worker if the harness gave it a plan; None if it did not."""
    text = os.environ.get(PLAN_ENV)
    if not text:
        return None
    plan = ScriptPlan.from_env(text)
    Path(plan.ckpt_dir).mkdir(parents=True, exist_ok=True)
    return ScriptRank(rank, run_dir, plan, park)
