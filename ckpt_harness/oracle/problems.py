"""What went wrong in a run, in words: which rank did what, with stacks and logs."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import signal
from typing import Optional

from ckpt_harness import phase
from ckpt_harness.inject.collectives import first_disagreement
from ckpt_harness.inject.trace import Event, EventKind, pending_collective
from ckpt_harness.launch import RankStatus, beacon
from ckpt_harness.launch.group import STACK_GRACE
from ckpt_harness.launch.outcome import Cut
from ckpt_harness.records.runs import RankRun, Run


@dataclasses.dataclass(frozen=True)
class Problem:
    """A run that did not end with every rank finished."""

    #: One line: "hang: rank 0 waiting in barrier ...; rank 1 finished".
    summary: str
    #: Each rank's stack, error and log, for the failure's full text.
    details: str
    #: Some rank ended badly in a save or a load, i.e. inside the
    #: checkpointing under test (see `phase.checkpointing`).
    checkpointing: bool = False


#: Why a run was cut before its grace or deadline, when its outcome does not say (`GroupOutcome.ended_why`).
STALLED = beacon.PARKED_PEER


def never_fired(run: Run) -> str:
    """Why a faulted run's fault did not fire: the harness's deadline came
    first (its own set-up, not the job's doing), or the run went elsewhere."""
    o = run.outcome
    if o.ended_early:
        return f"the fault never fired: the run stopped before the fault's point, {o.ended_why or STALLED}"
    if o.cut is Cut.DEADLINE:
        return (f"the fault never fired: the run reached the harness's deadline after {o.elapsed:.0f}s, before the "
                "fault's point; give runs longer (--timeout; a blocking fault in a script: --hang-timeout)")
    return "the fault never fired: the run took another path than the golden one"


def health(run: Run) -> Optional[Problem]:
    """What went wrong in `run`, or None if every rank finished."""
    ranks = run.ranks
    if all(r.status is RankStatus.OK for r in ranks):
        return None
    if run.outcome.stuck_after_failure:
        head = "failure, and peers stuck after it"
    else:
        head = "hang" if run.outcome.timed_out else "failure"
    routines, sites = save_routines(run), save_sites(run)
    summary = f"{head}: " + "; ".join(f"rank {r.rank} {rank_state(r, routines, sites)}" for r in _cause_first(ranks))
    if run.outcome.ended_early:
        summary += f" (ended at once: {run.outcome.ended_why or STALLED})"
    parted = first_disagreement({r.rank: r.recording for r in ranks if r.recording is not None})
    if parted:
        summary += f"; {parted}"
    details = []
    # A traceback every rank that raised shares is shown once, under the first of them.
    raised: dict[str, list[int]] = {}
    for r in ranks:
        if r.outcome.status.ended_badly:
            raised.setdefault(_hide_harness(r.error.traceback) if r.error else r.outcome.log_tail(), []).append(r.rank)
    for r in ranks:
        o = r.outcome
        if o.stack is not None:
            details.append(f"rank {r.rank} stack when the run was stopped ({rank_state(r, routines)}):\n"
                           f"{_unseen(r)}{_job_frames(o.stack)}")
        details += [f"rank {r.rank}'s {child} stack when the run was stopped:\n{_job_frames(stack)}"
                    for child, stack in o.children.items()]
        if o.status.ended_badly:
            text = next(t for t, rs in raised.items() if r.rank in rs)
            alike = raised[text]
            if alike[0] == r.rank:
                who = (f"rank {r.rank}" if len(alike) == 1
                       else f"ranks {', '.join(map(str, alike))} (the same traceback)")
                details.append(f"{who} {rank_state(r, routines)}:\n{text}")
        if o.status is not RankStatus.OK:
            details.append(f"rank {r.rank} log: {o.log}")
    return Problem(summary, "\n\n".join(details), _in_checkpointing(ranks, routines, sites))


def _cause_first(ranks: list[RankRun]) -> list[RankRun]:
    """The ranks as a reader needs them: those that raised or died of their
    own, first in time first (the cause: a peer's "Connection closed" comes
    after the exit that closed it), then those the launcher ended, then the
    ones still running, each group by rank."""
    def key(r: RankRun) -> tuple[int, float, int]:
        o = r.outcome
        if o.status.ended_badly:
            return (1 if o.ended_by_launcher else 0), o.finished_at if o.finished_at is not None else math.inf, r.rank
        return 2, 0.0, r.rank

    return sorted(ranks, key=key)


def _in_checkpointing(ranks: list[RankRun], routines: set[str], sites: set[str] = frozenset()) -> bool:
    """Did the run go wrong in a save or a load? The ranks that raised or
    died say where; peers only wait for them (rank 0 in `load`'s collective
    because rank 1 raised in `setup` is a setup failure). Only when no rank
    failed do the hung ranks' phases say it. Where is told by the phase,
    or by the stack: a rank in a save routine of the job's own (`routines`)
    is checkpointing whatever its phase (rank 1 waiting in the barrier of
    a save only rank 0 writes, a rename of the staging directory); and so
    is a hung rank waiting at a call site of its earlier saves (`sites`:
    the barrier that closed every save, written inline in the loop). A
    module's top level is never a routine by its name (`save_routines`):
    where the loop is the module, its inline save is known by its phase
    and its call sites alone."""
    failed = [r for r in ranks if r.status.ended_badly and not r.outcome.ended_by_launcher]
    blamed = failed or [r for r in ranks if r.status is not RankStatus.OK]
    return any((r.phase is not None and phase.checkpointing(r.phase)) or bool(routines.intersection(_frames(r)))
               or _at_save_site(r, sites) is not None for r in blamed)


def save_sites(run: Run) -> set[str]:
    """The call sites ("script.py:71 in <module>()") of collectives that
    belong to the job's save routine by what its earlier saves did, wherever
    the routine is written (a loop body, `main`, no function of its own):
    every call made there, matched across ranks by its number, was made
    while some rank was in a save (the rank that writes; its peers, which
    write nothing, meet it there outside any save), and none while no rank
    was (a helper that also syncs a train step is not one). Only calls that
    every rank which entered them also left count: the one a hang waits in
    says nothing yet. From the run's trace; empty without one."""
    entered: dict[int, list[tuple[int, Event]]] = {}
    left: set[tuple[int, int]] = set()
    for r in run.ranks:
        for e in r.events:
            if e.kind is not EventKind.COLLECTIVE or e.fields.get("process") or "n" not in e.fields:
                continue
            if e.entering:
                entered.setdefault(e.fields["n"], []).append((r.rank, e))
            else:
                left.add((r.rank, e.fields["n"]))
    inside: set[str] = set()
    outside: set[str] = set()
    for n, calls in entered.items():
        if not all((rank, n) in left for rank, _ in calls):
            continue
        found = {e.caller for _, e in calls if e.caller}
        (inside if any(phase.checkpointing(e.phase) for _, e in calls) else outside).update(found)
    return inside - outside


def _at_save_site(r: RankRun, sites: set[str]) -> Optional[str]:
    """The call site of the job's save routine (`save_sites`) that the hung
    rank `r` waits in, if it does."""
    if r.status is not RankStatus.HUNG or not sites:
        return None
    pending = pending_collective(r.events)
    return pending.caller if pending is not None and pending.caller in sites else None


def save_routines(run: Run) -> set[str]:
    """The job's own functions its checkpoint I/O happened in, on any rank,
    but those that also train (the loop, `main`): a script's save routine,
    its barriers and the ranks that write nothing in it included. From the
    run's trace (`tracer.routine`, the `trains` events); empty without one.

    Never a module's top level (`<module>`), by its name: a function is
    known to train only once a rank made an optimizer step in it (the
    `trains` events), and a plain script's module holds its training loop
    and its setup (the `mkdir` of the checkpoint directory is checkpoint
    I/O there). By name, a rank that raised in its first training step,
    before any optimizer step and any save, was "in the save routine
    <module>()": a false FAIL of a script that fails outside its saves
    (issue 64). A module's inline save is told apart by where, not by
    name: a rank in a save's phase (`phase.checkpointing`: the inline save
    lasts until the script trains again), or hung at the call site of a
    collective its earlier saves, and only they, ran (`save_sites`: the
    barrier that closes each save). Nor any other code without a name of
    its own (`<genexpr>`, `<lambda>`, `<listcomp>`): every one of its kind in
    a file is called so, the listing that finds the newest checkpoint and
    a sum over the losses alike."""
    events = run.events()
    made = {e.fields["routine"] for e in events if e.fields.get("routine")}
    made |= {f for e in events if e.kind is EventKind.SAVES for f in e.fields.get("functions", ())}
    trains = {f for e in events if e.kind is EventKind.TRAINS for f in e.fields.get("functions", ())}
    return {f for f in made - trains if not _unnamed(f)}


def _unnamed(function: str) -> bool:
    """Is "file:function" (`tracer.job_functions`) code without a name of
    its own: a module's top level, a generator expression, a lambda
    ("<module>", "<genexpr>", "<lambda>")?"""
    return function.rpartition(":")[2].startswith("<")


def _inside(r: RankRun, routines: frozenset[str] | set[str]) -> Optional[str]:
    """The innermost of `routines` on the rank's stack, by its function's name."""
    return next((f.rpartition(":")[2] for f in _frames(r) if f in routines), None)


def _frames(r: RankRun) -> list[str]:
    """The functions on the rank's stack where it stopped or raised, as
    "file:function", innermost first: a faulthandler dump lists it first,
    a traceback last, and the stack, when there is one, says."""
    text = (r.outcome.stack or "") + "\n" + (r.error.traceback if r.error is not None else "")
    frames = [f"{path}:{function}" for path, function in _FRAME.findall(text)]
    return frames if r.outcome.stack is not None else frames[::-1]


#: A frame of a traceback ('File "x.py", line 3, in f') or of faulthandler's dump ('File "x.py", line 3 in f').
_FRAME = re.compile(r'File "([^"]+)", line \d+,? in (\S+)')


def rank_state(r: RankRun, routines: frozenset[str] | set[str] = frozenset(),
               sites: frozenset[str] | set[str] = frozenset()) -> str:
    """One rank's end, in a few words; in one of the job's save `routines`
    outside any save phase, it says so (a script's rank that writes nothing
    in the routine, waiting or failing there), and so at a call site of its
    earlier saves (`save_sites`)."""
    o = r.outcome
    inside = ""
    if (routines or sites) and not (r.phase is not None and phase.checkpointing(r.phase)):
        found = _inside(r, routines) if routines else None
        site = _at_save_site(r, set(sites))
        inside = (f", in the save routine {found}()" if found else
                  ", at a call site of the save routine (every earlier save ran it)" if site else "")
    if o.exiting:
        return ("returned from the script, then never exited: it waits at exit for an atexit handler, a non-daemon "
                "thread or a child process (its stack says which: a writer never told to stop?)")
    if o.status is RankStatus.HUNG:
        stopped = o.stopped and r.blocked_by != "sigstop"  # else its where says it
        return (f"stopped (SIGSTOP or SIGTSTP), {r.where()}" if stopped else r.where()) + inside
    if o.status is RankStatus.FAILED:
        error = r.error
        if o.ended_by_launcher:
            return "stopped by torchrun (SIGTERM to every worker) when another worker failed"
        if error is None:
            return "failed before the job started (see its log)"
        return f"raised {error.name} in {error.phase}{inside}: {error.message}"
    if o.status is RankStatus.CRASHED:
        how = f"signal {signal.Signals(o.signal).name}" if o.signal else f"exit code {o.exit_code}"
        return f"died ({how}) {r.where()}"
    if o.stack is not None:
        return "finished, waiting for its peers"
    return "finished"


def _unseen(r: RankRun) -> str:
    """What a frozen rank's stack does not say by itself, a line each."""
    notes = []
    if r.outcome.stopped:
        notes.append("the process was stopped (SIGSTOP): none of its threads ran, C++ ones included; the harness "
                     "continued it only to take this stack")
    if r.outcome.collectives is None:
        why = ("it held the GIL (the injected gil fault), so no Python thread of it could run" if r.blocked_by == "gil"
               else "its Python threads did not run: something held the GIL (native code that never releases it), "
                    "or the machine was too busy")
        notes.append(f"no flight recorder entries: the recorder's dumper, a Python thread, did not answer within "
                     f"{STACK_GRACE:g}s; {why}")
    return "".join(f"({note})\n" for note in notes)


#: Frames of the harness's own code in a rank's stack or traceback: the launcher below the job, the
#: probes between the job's call and the library it called. Hidden, as pytest hides `__tracebackhide__`.
_HARNESS = tuple(f"{os.sep}ckpt_harness{os.sep}{layer}{os.sep}" for layer in ("launch", "inject", "rankside"))


def _job_frames(stack: str) -> str:
    """A faulthandler dump without the harness's own frames (`_HARNESS`)."""
    noise = (*_HARNESS, "<frozen runpy>")
    # the threads that dump collectives (`launch.flight`) and answer the watch's looks (`launch.looks`)
    harness = [f"{os.sep}ckpt_harness{os.sep}launch{os.sep}{name}.py" for name in ("flight", "looks")]
    threads = [block for block in stack.split("\n\n") if not any(path in block for path in harness)]
    lines = [line for line in "\n\n".join(threads).splitlines() if not any(n in line for n in noise)]
    if not any(line.lstrip().startswith("File ") for line in lines):
        return "(only the harness's own frames: the rank is parked until the group is torn down)"
    return "\n".join(lines)


def _hide_harness(traceback: str) -> str:
    """A Python traceback without the harness's own frames (`_HARNESS`): each
    is a 'File' line and, below it, more indented, the line of code it ran."""
    out: list[str] = []
    lines = traceback.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("File ") and any(n in line for n in _HARNESS):
            indent = len(line) - len(line.lstrip())
            i += 1
            while i < len(lines) and lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) > indent \
                    and not lines[i].lstrip().startswith("File "):
                i += 1  # its code line, and the ^^^ markers under it
            continue
        out.append(line)
        i += 1
    return "\n".join(out)
