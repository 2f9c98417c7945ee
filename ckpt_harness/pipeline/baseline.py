"""The baseline every fault case is judged against, prepared once.

A golden run (traced, uninterrupted) gives the states after every save and
at the end, and the trace of save k: its *points*, every collective and
file operation of every rank. A stopped run gives the directory as it is
right after save k returned (what corruption cases damage). Both are done
once per target and save; a `Baseline` is a frozen value, so any number of cases,
scenarios and threads can run against it in any order.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Collection, Mapping, Optional, Sequence, Union

from ckpt_harness import oracle, phase
from ckpt_harness.config import ExplorePlan, save_before
from ckpt_harness.errors import ConfigError
from ckpt_harness.inject import corrupt, durability
from ckpt_harness.inject.faults import OPS, Fault, address
from ckpt_harness.inject.trace import OUTSIDE, Event, EventKind, Unseen, fields, landing, landings, unseen_writes
from ckpt_harness.pipeline import confirm
from ckpt_harness.pipeline.memo import Memo
from ckpt_harness.records.timeline import attach
from ckpt_harness.records import Kind, data_reader
from ckpt_harness.records.runs import Run, save_steps_by_rank
from ckpt_harness.targets import RunRequest, Target
from ckpt_harness.verdict import CaseResult, Operation, Verdict


@dataclasses.dataclass(frozen=True)
class Point(Operation):
    """One operation of one rank in the broken save: where a fault can be armed."""

    #: Its name whatever the order around it (`faults.address`), and which of its namesakes in the phase it is.
    at: str = ""
    nth: int = 1

    def fault(self, kind: str, seconds: Optional[float] = None) -> Fault:
        """`kind` armed here, named by address; `seconds` for a kind that lasts (its default if None)."""
        return Fault(kind, self.rank, self.phase, self.index, seconds, self.at or None, self.nth)

    def describe(self) -> str:
        target = self.target + (f" from {self.caller}" if self.caller else "")
        during = "" if self.phase.startswith("save ") else f" in {self.phase}"
        return f"rank {self.rank} #{self.index} {self.op} {target}{during}"


def broken_phases(events_by_rank: Mapping[int, Sequence[Event]], k: int, last: bool) -> set[str]:
    """The phases a fault case of save `k` may break: that save, the work it
    handed to other threads (an async save's writer, `phase.background`),
    and if it is the last one, every phase of the job after it to the end of
    the run (the end-of-training deletion of old checkpoints) but the
    harness's own, and but an earlier save's writer still at work then
    (`_others_writer`)."""
    where = phase.save(k)
    phases = {where, phase.background(where)}
    for events in events_by_rank.values() if last else ():
        ends = [i for i, e in enumerate(events) if e.phase == where]
        phases |= {e.phase for e in events[ends[-1] + 1 if ends else len(events):]
                   if not phase.OBSERVING.fullmatch(e.phase) and phase.labelable(e.phase)
                   and not _others_writer(e.phase, k)}
    return phases


def _others_writer(name: str, k: int) -> bool:
    """Is `name` the background share of a save other than `k` ("bg_save 4"
    for k = 6)? On a loaded machine save 4's writer may still write after
    save 6 ended, and a fault there breaks save 4, which a case of save 6 is
    not judged for: the cases of a save must not depend on the golden run's
    timing."""
    return phase.foreground(name) != name and phase.save_work(name) not in (None, k)


def broken_events(events_by_rank: Mapping[int, Sequence[Event]], k: int, last: bool) -> dict[int, list[Event]]:
    """The events of each rank a fault case of save `k` may break (of the
    phases `broken_phases` names): every one of that save and of the work it
    handed to other threads, and if it is the last save, every one after it.
    A phase may span the whole run (a script's "run" is everything outside
    its saves), so "after" is told by position, not by phase name: after the
    rank's own last event of the save or, for a rank that had no part in it
    (a script whose rank 0 alone saves), from its first collective the save
    took part in (by number, as every rank counts them: the barrier a peer
    waits in while rank 0 writes), else after the save ended on the ranks
    that made it (the golden run's clock: one machine's monotonic time). The
    collective's number, unlike a time, is the same in every run, and so are
    the cases."""
    if not last:
        return {rank: list(events) for rank, events in events_by_rank.items()}
    where = phase.save(k)
    own = {where, phase.background(where)}
    ends = {rank: max((i for i, e in enumerate(events) if e.phase == where), default=None)
            for rank, events in events_by_rank.items()}
    ended = max((events_by_rank[rank][i].t for rank, i in ends.items() if i is not None), default=None)
    joined = min((e.fields["n"] for events in events_by_rank.values() for e in events
                  if e.phase in own and e.entering and e.fields.get("n") is not None), default=None)
    out = {}
    for rank, events in events_by_rank.items():
        end = ends[rank]
        if end is not None:
            out[rank] = [e for i, e in enumerate(events)
                         if e.phase in own or (i > end and not _others_writer(e.phase, k))]
            continue
        start = next((i for i, e in enumerate(events) if e.entering and e.fields.get("n", -1) >= joined), None) \
            if joined is not None else None
        if start is not None:
            out[rank] = [e for e in events[start:] if not _others_writer(e.phase, k)]
        else:
            out[rank] = [e for e in events if e.phase in own
                         or (ended is not None and e.t > ended and not _others_writer(e.phase, k))]
    return out


def addresses(events_by_rank: Mapping[int, Sequence[Event]]) -> dict[tuple[int, str, int], tuple[str, int]]:
    """(rank, phase, index) -> (address, nth) of every point, counted from
    the start of its phase in its process as the rank's injector counts
    them (`faults.Injector.armed`): give it every event of the run, since
    a script's "run" phase starts long before the save it breaks."""
    names = {}
    for rank, events in events_by_rank.items():
        seen: dict[tuple, int] = {}
        for e in events:
            if e.point is None or e.kind.value not in OPS:
                continue
            for i, op in enumerate(e.ops):
                at = address(op, e.target)
                key = (e.fields.get("process", ""), e.phase, at)
                seen[key] = seen.get(key, 0) + 1
                names[(rank, e.phase, e.point + i)] = (at, seen[key])
    return names


def fault_points(events_by_rank: Mapping[int, Sequence[Event]], where: Union[str, Collection[str]],
                 names: Optional[Mapping[tuple[int, str, int], tuple[str, int]]] = None) -> list[Point]:
    """Every operation of phase(s) `where` on every rank, writes sampled per
    file, each named by `names` (`addresses` of the whole run; by default of
    these events).

    Of each run of consecutive writes to one file, the first, the middle and
    the last of the job's buffered writes and of the kernel writes are
    points: torch.save alone issues hundreds of small writes per file, and a
    crash between two of them differs only in how much of the file is left.
    """
    names = addresses(events_by_rank) if names is None else names
    phases = {where} if isinstance(where, str) else set(where)
    landed = landings(e for events in events_by_rank.values() for e in events)
    points = []
    for rank, events in sorted(events_by_rank.items()):
        ops = [(e, e.point + i, op) for e in events
               if e.phase in phases and e.point is not None and e.kind.value in OPS and _touches(e, landed)
               for i, op in enumerate(e.ops)]
        runs: list[list[tuple[Event, int, str]]] = []
        for e, index, op in ops:
            first = runs[-1][0] if runs else None
            if op in _WRITES and first is not None and first[2] in _WRITES \
                    and first[0].fields["fid"] == e.fields["fid"]:
                runs[-1].append((e, index, op))
            else:
                runs.append([(e, index, op)])
        for run in runs:
            chosen = run if run[0][2] not in _WRITES else sorted(
                {i: (e, i, op) for kind in _WRITES for same in [[w for w in run if w[2] == kind]] if same
                 for e, i, op in (same[0], same[len(same) // 2], same[-1])}.values(), key=lambda w: w[1])
            points += [Point(rank, e.phase, i, op, _named(e, landed), e.caller, *names[(rank, e.phase, i)])
                       for e, i, op in chosen]
    return points


def _touches(e: Event, landed: Mapping[str, str]) -> bool:
    """Whether a fault at `e` can touch a checkpoint: every operation but
    those on a file written outside the checkpoint directory that never
    came in (a log, a cache)."""
    return e.fields.get("path") != OUTSIDE or e.kind is EventKind.RENAME or landing(e, landed) is not None


def _named(e: Event, landed: Mapping[str, str]) -> str:
    """What a report calls the operation's target: a staged file by where it lands."""
    dst = landing(e, landed)
    return e.target if dst is None else f"{OUTSIDE} (renamed in as {dst})"


_WRITES = (EventKind.BUFFERED_WRITE.value, EventKind.WRITE.value)


class BaselineFailed(Exception):
    """The golden run itself failed: there is nothing to judge cases against.
    `result` is that failure, reported in place of the cases."""

    def __init__(self, result: CaseResult):
        super().__init__(result.summary)
        self.result = result


@dataclasses.dataclass(frozen=True)
class Baseline:
    #: What runs, once its golden run told its saves (`Target.knowing`).
    target: Target
    #: How its save `k` is broken.
    plan: ExplorePlan
    root: Path
    golden: Run
    reference: oracle.Reference
    points: tuple[Point, ...]
    #: The directory right after save k returned, or None if that run failed
    #: (or was not needed: `from_golden`).
    committed: Optional[Path]
    #: Files of save k in it (relative), the targets of corruption cases.
    committed_files: tuple[str, ...]
    #: Files in it with bytes no probe saw written (see `trace.unseen_writes`).
    unseen: tuple[Unseen, ...] = ()
    #: Why the run stopped after save k left no committed directory ("" when it
    #: did, or was not made): corruption cases have no file to damage then.
    committed_problem: str = ""
    #: Why the golden trace does not rebuild the golden run's directory ("" when
    #: it does, byte for byte); states are derived from the trace only if it does.
    replay_gap: str = ""
    #: The resume of each post-fault directory state, shared by its cases.
    resumes: Memo = dataclasses.field(default_factory=Memo, compare=False, repr=False)
    #: What the run a delay case delays ends as without the delay, per where it
    #: stops (`cases.undelayed`), made once for all its cases.
    undelayed: Memo = dataclasses.field(default_factory=Memo, compare=False, repr=False)
    #: Why its golden run is a cold one the target was not asked for ("": it is
    #: the run asked for): the warm golden run failed and a cold one passed (`prepare`).
    cold_because: str = ""
    #: This baseline with cold starts (`cold`), made once for all the cases that ask.
    _cold: Memo = dataclasses.field(default_factory=Memo, compare=False, repr=False)
    #: How that one is made where its golden run is shared with other checks
    #: (a bench's: `Bench.baseline`); None: `prepare`d under `root`/cold.
    made_cold: Optional[Callable[[], "Baseline"]] = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def k(self) -> int:
        return self.reference.k

    @property
    def prev(self) -> Optional[int]:
        return self.reference.prev

    @property
    def phase(self) -> str:
        return phase.save(self.k)

    @property
    def runs(self) -> tuple[Target, int]:
        """What it depends on: the target and the save broken (not which
        faults, corruptions or models the cases then apply)."""
        return self.target, self.k

    def repro(self, case: str) -> str:
        return self.target.repro("explore", self.plan.values, case)

    def cold(self) -> "Baseline":
        """This baseline with cold starts, to confirm a case on (`pipeline.confirm`); made once, shared by
        every case that asks, sharing no warm resume. If the golden run started a process warm, on a golden
        run of its own, made cold: a script's ranks start warm themselves, so the warm golden run's states
        could be a warm start's (a str hash seed every warm worker shares, say), and a cold case judged
        against them would be judged against what no cold run makes. (A Job's golden run starts warm only
        the process a rank spawns to save, which writes what the rank recorded; it is made again all the
        same: one more run per exploration that has a doubted case, for one rule.) Raises `BaselineFailed`
        if that golden run fails."""
        made = self._cold.once("cold", self._made_cold)[0]
        return made if made.plan == self.plan else made.with_plan(self.plan)  # shared by `with_plan`'s copies

    def _made_cold(self) -> "Baseline":
        target = self.target.replace(cold_start=True)
        if self.target.values.get("cold_start") or not self.golden.warm_started:
            return dataclasses.replace(self, target=target, resumes=Memo(), undelayed=Memo(),
                                       _cold=self._cold)
        base = self.made_cold() if self.made_cold is not None else \
            prepare(target, self.plan, self.root / "cold", committed_run=self.committed is not None)
        return dataclasses.replace(base, _cold=self._cold)

    def with_plan(self, plan: ExplorePlan) -> "Baseline":
        """The same baseline, with the cases (faults, corruptions, ...) of another plan breaking the same save."""
        if broken(self.target, plan) != self.k:
            raise ValueError(f"a baseline of save {self.k} cannot serve a plan breaking save {plan.save}")
        return dataclasses.replace(self, plan=plan)

    def nothing_to_break(self) -> Optional[CaseResult]:
        """UNKNOWN when save k recorded no operation (an owned loop that names no phases)."""
        return None if self.points else oracle.nothing_to_break(self.phase, self.repro("golden"),
                                                                self.target.caps.marks_saves)

    def nothing_to_corrupt(self) -> Optional[CaseResult]:
        """UNKNOWN when corruptions were asked for and the run stopped after
        save k failed: saying so, rather than running no corruption case in silence."""
        if not self.plan.corruptions or self.committed is not None:
            return None
        return oracle.cannot_judge("committed run", "corruptions", f"no corruption case was run: the run stopped "
                                   f"after save {self.k} (whose files they damage) failed: {self.committed_problem}")


def broken(target: Target, plan: ExplorePlan) -> int:
    """The step of the save `plan` breaks among `target`'s (known) save steps;
    ConfigError for a step it does not save at."""
    steps = target.save_steps() or []
    if isinstance(plan.save, int) and plan.save not in steps:
        raise ConfigError(f"save {plan.save} is not a step the {target.noun} saved; choose from "
                          f"{', '.join(map(str, steps)) or 'none (it never saved)'}")
    return plan.broken(steps)


def prepare(target: Target, plan: ExplorePlan, root: Path, *, committed_run: bool = False) -> Baseline:
    """The golden run, its fault points and the committed save; raises
    `BaselineFailed` if the golden run did not finish or saved nothing to
    break, ConfigError for a save step the target does not make.
    `committed_run` as `from_golden`'s."""
    target.preflight()
    plan = without_power_loss(target, plan)
    if target.save_steps() is not None:
        broken(target, plan)  # a bad step is bad input: refused before any run
    because = ""
    try:
        golden = golden_run(target, plan, root)
    except BaselineFailed as failed:
        if not confirm.doubted([failed.result]):
            raise
        target, root = target.replace(cold_start=True), root / "cold"
        try:  # a golden run that failed warm is judged by a cold one; if that passes, every case stands on it
            golden = golden_run(target, plan, root)
        except BaselineFailed as also:
            raise BaselineFailed(confirm.confirmed(failed.result, also.result)) from None
        because = (f"the golden run failed with warm starts and passed with cold ones, so every case ran cold "
                   f"(as with --cold-start); the warm run said: {failed.result.summary}")
    base = from_golden(target.knowing(golden), plan, root, golden, committed_run=committed_run)
    return dataclasses.replace(base, cold_because=because) if because else base


def without_power_loss(target: Target, plan: ExplorePlan) -> ExplorePlan:
    """`plan` without power loss on a target whose storage it cannot touch (a bucket:
    `Capabilities` "power_loss"); ConfigError, with the target's reason, if nothing else is left."""
    why = target.caps.lacks.get("power_loss")
    if why is None or not ("power-loss" in plan.faults or plan.power_loss_after):
        return plan
    kept = plan.replace(faults=tuple(f for f in plan.faults if f != "power-loss"), after=False)
    if not (kept.faults or kept.corruptions):
        raise ConfigError(f"no power loss can be modelled for {target.noun} {target.row}: {why}")
    return kept


def golden_run(target: Target, plan: ExplorePlan, root: Path) -> Run:
    """The uninterrupted run every case is judged against (traced, every byte
    logged: power-loss cases are cut from its trace, `cases._derived_power_loss`);
    raises `BaselineFailed` if it did not finish, or if it saved nothing whose
    step the harness can tell."""
    golden = target.run(RunRequest("golden", log_data=True), root / "golden" / "ckpt", root / "golden" / "run")
    live = oracle.judge_golden("golden", golden, target.repro("explore", plan.values, "golden"), target.noun)
    if live.verdict is not Verdict.PASS:
        raise BaselineFailed(attach(dataclasses.replace(live, warm=golden.warm_started), [golden]))
    unnamed = oracle.judge_named_steps("golden", golden)
    if unnamed is not None or not oracle.save_steps(golden):
        raise BaselineFailed(unnamed or oracle.cannot_judge(
            "golden", "saves", "the script never saved into the checkpoint directory: there is no save to break "
                               "(give {ckpt_dir} where it writes its checkpoints)"))
    return golden


def from_golden(target: Target, plan: ExplorePlan, root: Path, golden: Run, *, committed_run: bool = False) -> Baseline:
    """The baseline of a finished golden run of `target` (which knows its
    saves): its fault points, the committed save. Without `committed_run`,
    no run is stopped after save k unless a corruption case needs its
    directory or the golden trace does not replay to the golden directory
    (then it finds the writes no probe saw); a replay that matches byte for
    byte already shows there are none."""
    steps = target.save_steps() or []
    k = broken(target, plan)
    reference = oracle.Reference(oracle.saves_by_step(golden), k, save_before(steps, k), golden.states(Kind.FINAL),
                                 final_savers=None if target.caps.live_state else save_steps_by_rank(golden))
    where = phase.save(k)
    events = {r.rank: r.events for r in golden.ranks}
    last = k == steps[-1]
    points = fault_points(broken_events(events, k, last), broken_phases(events, k, last), addresses(events))
    golden_ckpt = Path(golden.run_dir).parent / "ckpt"  # golden_run's layout
    gap = _replay_gap(golden, golden_ckpt, target.saves_in_background(), target.noun)
    committed = root / "committed" / "ckpt"
    files: tuple[str, ...] = ()
    unseen: tuple[Unseen, ...] = ()
    ok, problem = False, ""
    if committed_run or plan.corruptions or gap:
        stopped = target.run(RunRequest("committed", stop_after_save=k), committed, root / "committed" / "run")
        ok = stopped.ok
        if not ok:
            found = oracle.health(stopped)
            problem = found.summary if found is not None else "it did not end as asked"
        if ok:
            # with what the save handed to its writer (a background save creates its files there)
            written = stopped.created_in(where) | stopped.created_in(phase.background(where))
            present = corrupt.committed_files(committed)
            files = tuple(f for f in present if _covered(f, written))
            unseen = tuple(unseen_writes(stopped.events(), {f: (committed / f).stat().st_size for f in present}))
    return Baseline(target, plan, root, golden, reference, tuple(points), committed if ok else None, files, unseen,
                    problem, gap)


def _replay_gap(golden: Run, ckpt: Path, background: bool, noun: str) -> str:
    """Why the golden trace, replayed, does not leave the directory the golden
    run left ("" when it does). A write through mmap or native code, an
    ftruncate, a file changed outside the probes: any of them would make a
    state derived from the trace a state no run reaches, so one mismatch turns
    derivation off for the whole baseline. So does a save in the background:
    a run stopped after save k waits for it, which the golden run did not."""
    if background:
        return f"the {noun} saves in the background, and a run stopped after a save first waits for it to land"
    try:
        rebuilt = durability.process_crash(durability.Snapshot(), fields(golden.events()), data_reader(golden.run_dir))
        actual = durability.snapshot(ckpt)
    except durability.DurabilityError as exc:
        return f"the durability model cannot replay it: {exc}"
    if rebuilt == actual:
        return ""
    differ = sorted((set(rebuilt.paths()) ^ set(actual.paths()))
                    | {f for f in rebuilt.files.keys() & actual.files.keys() if rebuilt.files[f] != actual.files[f]})
    return f"replayed, it leaves {', '.join(differ[:3])}{' and more' if len(differ) > 3 else ''} other than the run did"


def unseen_warning(unseen: Sequence[Unseen], limit: int = 3) -> str:
    """What a person must know when a save wrote past the probes: files
    written outside the checkpoint directory and renamed in (their rename is
    a point, their writes are not), and files written through a channel the
    probes cannot see."""
    def listed(paths: Sequence[str]) -> str:
        return ", ".join(paths[:limit]) + (f" and {len(paths) - limit} more" if len(paths) > limit else "")

    renamed = [u.path for u in unseen if u.renamed_in]
    hidden = [u.path for u in unseen if not u.renamed_in]
    said = []
    if renamed:
        said.append(f"{listed(renamed)} {'was' if len(renamed) == 1 else 'were'} written outside the checkpoint "
                    "directory (a temporary file elsewhere) and renamed in: the rename is a fault point, the writes "
                    "before it are not, and power loss cannot be modelled for them; write the temporary file inside "
                    "the checkpoint directory to have them explored")
    if hidden:
        said.append(f"exploration did not see writes to {listed(hidden)}: written through a channel the probes "
                    "cannot see (mmap, sendfile, or native code not routed through Python), so no fault or power "
                    "loss touched those bytes; write them through open()/torch.save to have them explored")
    return "; ".join(said)


def _covered(path: str, written: set[str]) -> bool:
    return any(path == w or path.startswith(w.rstrip("/") + "/") for w in written)
