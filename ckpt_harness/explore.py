"""Systematic exploration: break one save at every point, judge every resume.

The golden run's trace of save k lists its *points*: every collective and
file operation of every rank. Each point × each applicable fault kind is one
case: a fresh directory, a run that trains to save k with the fault armed
(and stops there if the save returns), optionally the power-loss model
applied to the directory, then a fresh group that resumes by the job's own
logic and trains to the end. Corruption cases damage each file of the
committed save k in turn instead, and "power-loss-after" tests that a save
the job believed done survives a machine crash.

Writes are sampled: of each run of consecutive writes to one file, the
first, the middle and the last are points (torch.save alone issues hundreds
of small writes per file, and a crash between two of them differs only in
the length of the prefix left behind).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import shutil
import time
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

from ckpt_harness import oracle
from ckpt_harness.inject import corrupt, durability
from ckpt_harness.inject.faults import DEFAULT_DELAY, KINDS, OPS, Fault, applicable_kinds, parse_plan, plan_label
from ckpt_harness.jobref import resolve
from ckpt_harness.records import Run
from ckpt_harness.report import CaseResult, Report, Verdict
from ckpt_harness.runner import data_path
from ckpt_harness.verify import DEFAULT_TIMEOUT, Settings, prepare_workdir

#: What `explore` injects unless told otherwise. hang costs a deadline per
#: case and delay a sleep; both are opt-in (`kinds=`).
DEFAULT_KINDS = ("crash", "crash-mid", "torn", "error", "eio", "enospc", "power-loss")
CORRUPTIONS = tuple(corrupt.CORRUPTIONS)
#: How long peers of a failed rank get to fail too before the run counts as
#: stuck; also the budget of the *live* property.
PROPAGATION = 1.0


@dataclasses.dataclass(frozen=True)
class Point:
    rank: int
    phase: str
    index: int
    op: str
    #: The file (relative to the checkpoint dir) or the collective's name.
    target: str
    caller: str = ""

    def describe(self) -> str:
        target = self.target + (f" from {self.caller}" if self.caller else "")
        return f"rank {self.rank} #{self.index} {self.op} {target}"


@dataclasses.dataclass(frozen=True)
class Case:
    """One exploration case; `name` is what `--case` takes to replay it."""

    name: str
    #: The kind that decides the property judged (see `dominant`).
    kind: str
    points: tuple[Point, ...] = ()
    faults: tuple[Fault, ...] = ()
    #: For corruption cases: the file damaged (relative to the checkpoint dir).
    path: Optional[str] = None

    @classmethod
    def of(cls, faults: tuple[Fault, ...], points: Sequence[Point]) -> "Case":
        """A case of one or more faults; `points` describe where they fire."""
        where = {(p.rank, p.phase, p.index): p for p in points}
        chosen = tuple(where[(f.rank, f.phase, f.index)] for f in faults if (f.rank, f.phase, f.index) in where)
        return cls(plan_label(faults), dominant(faults), chosen, faults)

    def describe(self) -> str:
        if self.path is not None:
            return self.path
        if not self.faults:
            return "power loss right after the save returned"
        return " + ".join(
            f"{f.kind} at {p.describe()}" if p else f.label
            for f, p in zip(self.faults, [*self.points, *[None] * len(self.faults)])
        )


#: The kind of a multi-fault plan whose property is judged, most severe first.
SEVERITY = ("power-loss", "crash", "crash-mid", "crash-after", "hang", "error", "eio", "enospc", "torn", "delay")


def dominant(faults: Sequence[Fault]) -> str:
    return min((f.kind for f in faults), key=SEVERITY.index)


def fault_points(events_by_rank: dict[int, list[dict]], phase: str) -> list[Point]:
    """Every operation of `phase` on every rank, writes sampled per file run."""
    points = []
    for rank, events in sorted(events_by_rank.items()):
        ops = [{**e, "point": e["point"] + i} for e in events
               if e["phase"] == phase and e["kind"] in OPS and "point" in e for i in range(e.get("count", 1))]
        runs: list[list[dict]] = []
        for e in ops:
            if e["kind"] == "write" and runs and runs[-1][0]["kind"] == "write" and runs[-1][0]["fid"] == e["fid"]:
                runs[-1].append(e)
            else:
                runs.append([e])
        for run in runs:
            chosen = run if run[0]["kind"] != "write" else sorted({id(x): x for x in (run[0], run[len(run) // 2], run[-1])}.values(), key=lambda x: x["point"])
            for e in chosen:
                target = e.get("op") or e.get("path") or f"{e.get('src')} -> {e.get('dst')}"
                points.append(Point(rank, phase, e["point"], e["kind"], target, e.get("caller", "")))
    return points


def plan_cases(points: Iterable[Point], kinds: Sequence[str], committed: Sequence[str],
               corruptions: Sequence[str], durable_after: bool, delay: float = DEFAULT_DELAY) -> list[Case]:
    cases = []
    for p in points:
        for kind in applicable_kinds(p.op, tuple(kinds)):
            cases.append(Case.of((Fault(kind, p.rank, p.phase, p.index, delay),), [p]))
    if durable_after:
        cases.append(Case("power-loss-after", "power-loss-after"))
    for path in committed:
        for kind in corruptions:
            cases.append(Case(f"{kind}:{path}", kind, path=path))
    return cases


def explore(
    job: Union[str, type],
    *,
    cases: Optional[Sequence[str]] = None,
    progress=None,
    **settings,
) -> Report:
    """Break save `save_step` (default: the second save) at every point; judge each resume.

    Settings are those of `exploration`. `cases` replays only the named cases
    (the names the report prints, or any fault plan such as
    `crash@r0:save4#3+delay@r1:save4#0`). `progress(done, total, result)` is
    called after each case.
    """
    return exploration(job, **settings).run(cases, progress)


def exploration(
    job: Union[str, type],
    *,
    world_size: int = 2,
    total_steps: int = 4,
    save_every: int = 2,
    save_step: Optional[int] = None,
    keep_last: Optional[int] = None,
    overwrite: bool = False,
    nodes: int = 1,
    kinds: Sequence[str] = DEFAULT_KINDS,
    corruptions: Sequence[str] = CORRUPTIONS,
    durability_mode: str = "strict",
    seed: int = 0,
    timeout: float = DEFAULT_TIMEOUT,
    hang_timeout: float = 3.0,
    workdir: Optional[Union[str, Path]] = None,
    parallel: int = 2,
) -> "Exploration":
    """A validated, not yet started exploration (see `explore`).

    `keep_last` makes the job rotate, so the broken save's points include
    the deletion of old checkpoints; `nodes` simulates a multi-node layout
    (see `verify`).

    `parallel` cases run at once, each group forked from its own warm server.
    """
    ref, _ = resolve(job)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown fault kind {', '.join(unknown)}: choose from {', '.join(KINDS)}")
    bad = [c for c in corruptions if c not in corrupt.CORRUPTIONS]
    if bad:
        raise ValueError(f"unknown corruption {', '.join(bad)}: choose from {', '.join(corrupt.CORRUPTIONS)}")
    if durability_mode not in ("strict", "ordered"):
        raise ValueError(f"durability mode must be 'strict' or 'ordered', got {durability_mode!r}")
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, got {parallel}")
    settings = Settings(ref, world_size=world_size, total_steps=total_steps, save_every=save_every,
                        keep_last=keep_last, overwrite=overwrite, nodes=nodes, seed=seed, timeout=timeout)
    steps = settings.save_steps
    k = save_step if save_step is not None else steps[min(1, len(steps) - 1)]
    if k not in steps:
        raise ValueError(f"save step {k} is not a save step; choose from {', '.join(map(str, steps))}")
    return Exploration(settings, prepare_workdir(workdir), k, tuple(kinds), tuple(corruptions),
                       durability_mode, hang_timeout, parallel)


class Exploration:
    def __init__(self, settings: Settings, root: Path, k: int, kinds: tuple[str, ...],
                 corruptions: tuple[str, ...], mode: str, hang_timeout: float, parallel: int = 1):
        self.s = settings
        self.root = root
        self.k = k
        steps = settings.save_steps
        self.prev = steps[steps.index(k) - 1] if steps.index(k) > 0 else None
        self.kinds = kinds
        self.corruptions = corruptions
        self.mode = mode
        self.hang_timeout = hang_timeout
        self.parallel = parallel
        self.lock = threading.Lock()
        self.counter = 0

    def repro(self, case: str) -> str:
        extra = ["--save-step", str(self.k), "--durability", self.mode]
        if self.kinds != DEFAULT_KINDS:
            extra += ["--faults", ",".join(self.kinds)]
        return self.s.repro(case, "explore", extra)

    def prepare(self) -> Optional[CaseResult]:
        """The golden run, its fault points and the committed save; a failed
        golden run is returned (nothing can be judged against it)."""
        golden = self.s.launch("golden", self.s.plan(self.root / "golden" / "ckpt"), self.root / "golden" / "run")
        live = oracle.judge_live("golden", golden, self.repro("golden"))
        if live.verdict is not Verdict.PASS:
            return live
        self.golden = golden
        self.saved = {s: golden.states("saved", s) for s in golden.saved_steps()}
        self.committed = self._committed_files()
        self.points = fault_points({r.rank: r.events for r in golden.ranks}, f"save {self.k}")
        return None

    def run(self, only: Optional[Sequence[str]] = None, progress=None) -> Report:
        started = time.monotonic()
        problem = self.prepare()
        if problem is not None:
            return self._report([problem], started)
        if not self.points:
            return self._report([self.nothing_to_break()], started)
        cases = plan_cases(self.points, self.kinds, self.committed, self.corruptions,
                           durable_after="power-loss" in self.kinds)
        if only:
            by_name = {c.name: c for c in cases}
            cases = [by_name.get(n) or self.case(n) for n in only if n != "golden"]
        return self._report(self.run_cases(cases, progress), started)

    def nothing_to_break(self) -> CaseResult:
        return CaseResult(
            "golden", "trace", Verdict.UNKNOWN,
            f"no operation was recorded in phase 'save {self.k}': nothing to break. A job that owns its "
            f"loop must call ctx.phase(f'save {{step}}') when a save starts", repro=self.repro("golden"),
        )

    def run_cases(self, cases: Sequence[Case], progress=None) -> list[CaseResult]:
        """Run `cases` (after `prepare`), `parallel` at a time; results in order."""
        done = 0
        lock = threading.Lock()

        def one(case: Case) -> CaseResult:
            nonlocal done
            result = self.run_case(case)
            with lock:
                done += 1
                if progress is not None:
                    progress(done, len(cases), result)
            return result

        with concurrent.futures.ThreadPoolExecutor(self.parallel) as pool:
            return list(pool.map(one, cases))

    def case(self, name: str) -> Case:
        """The case a name denotes, also a multi-fault plan no enumeration lists."""
        try:
            faults = parse_plan(name)
        except ValueError:
            raise ValueError(
                f"no case named {name!r} in this exploration: give a name from its table or repro "
                "lines, or a fault plan like crash@r0:save4#3+delay@r1:save4#0"
            ) from None
        for f in faults:
            point = next((p for p in self.points if (p.rank, p.phase, p.index) == (f.rank, f.phase, f.index)), None)
            if point is None:
                raise ValueError(f"{f.label}: rank {f.rank} has no operation #{f.index} in {f.phase}")
            if not f.applies_to(point.op):
                raise ValueError(f"{f.label}: {f.kind} does not apply to {point.op} ({point.describe()})")
        return Case.of(faults, self.points)

    def run_case(self, case: Case) -> CaseResult:
        """Run one case against this exploration's golden run (after `run`)."""
        with self.lock:
            self.counter += 1
            i = self.counter
        return self._run_case(case, i)

    def _report(self, results: list[CaseResult], started: float) -> Report:
        return Report(self.s.job.display, self.s.world_size, results, time.monotonic() - started,
                      kind="explore", note=f"save {self.k} broken; durability model {self.mode}")

    def _committed_files(self) -> list[str]:
        """Files present right after save k returned (a stopped run, like a preemption)."""
        self.committed_dir = self.root / "committed" / "ckpt"
        run = self.s.launch("committed", self.s.plan(self.committed_dir, self.k), self.root / "committed" / "run")
        if not run.outcome.ok:
            return []
        written = _written_in(run, f"save {self.k}")
        return [f for f in corrupt.committed_files(self.committed_dir) if _covered(f, written)]

    # -- one case ----------------------------------------------------------------
    def _run_case(self, case: Case, i: int) -> CaseResult:
        case_dir = self.root / f"case{i:04d}"
        ckpt = case_dir / "ckpt"
        save_returned = True
        faulted: Optional[Run] = None
        if case.path is not None:  # corruption of the committed save
            shutil.copytree(self.committed_dir, ckpt)
            detail = corrupt.CORRUPTIONS[case.kind](ckpt / case.path)
            detail = f"{case.path} {detail}"
        else:
            faulted = self._faulted_run(case, ckpt, case_dir / "fault")
            save_returned = faulted.saved_steps()[-1:] == [self.k]
            detail = case.describe()
        resumed = self.s.launch("resumed run", self.s.plan(ckpt, trace_files=False), case_dir / "resume",
                                failure_grace=PROPAGATION)
        return self._judge(case, faulted, resumed, save_returned, detail)

    def _faulted_run(self, case: Case, ckpt: Path, run_dir: Path) -> Run:
        kinds = {f.kind for f in case.faults} | {case.kind}
        power = bool(kinds & {"power-loss", "power-loss-after"})
        plan = self.s.plan(ckpt, self.k, faults=case.faults, log_data=power)
        deadline = self.hang_timeout if "hang" in kinds else None
        run = self.s.launch("faulted run", plan, run_dir, deadline=deadline, failure_grace=PROPAGATION)
        if power:
            events = [e for r in run.ranks for e in r.events]
            if "power-loss" in kinds:
                moment = min((e["t"] for e in events if e.get("fault") == "power-loss"), default=None)
                if moment is not None:
                    events = durability.events_before(events, moment)
            durability.apply_power_loss(ckpt, durability.Snapshot(), events, _data_reader(run_dir), self.mode)
        return run

    def _judge(self, case: Case, faulted: Optional[Run], resumed: Run, save_returned: bool, detail: str) -> CaseResult:
        repro = self.repro(case.name)
        prop = oracle.property_for(case.kind)
        outcome = oracle.classify_resume(resumed, self.saved, self.k, self.prev)
        summary = f"{detail} → {outcome}"
        cells = self._cells(case, outcome)

        def result(check: str, verdict: Verdict, why: str = "", details: str = "") -> CaseResult:
            return CaseResult(case.name, check, verdict, f"{summary}{'; ' + why if why else ''}", details,
                              repro if verdict is not Verdict.PASS else None, cells)

        if faulted is not None and case.faults and not self._fired(faulted, case):
            return result(prop, Verdict.UNKNOWN, "the fault never fired: the run took another path than the golden one")
        if faulted is not None and case.kind in ("error", "eio", "enospc"):
            stuck = faulted.outcome.stuck_after_failure or (
                faulted.outcome.timed_out and any(r.outcome.status == "failed" for r in faulted.ranks)
            )
            if stuck:
                summary_live = oracle.health(faulted)
                return result("live", Verdict.FAIL, "the error did not reach every rank: "
                              + (summary_live[0] if summary_live else ""), summary_live[1] if summary_live else "")
        if case.kind == "delay" and faulted is not None and not faulted.outcome.ok:
            problem = oracle.health(faulted)
            return result("skew-safe", Verdict.FAIL, problem[0] if problem else "", problem[1] if problem else "")
        if outcome.kind in ("hang", "error on some ranks"):
            problem = oracle.health(resumed)
            return result("live", Verdict.FAIL, "", problem[1] if problem else "")
        if not oracle.accepted(prop, outcome, save_returned, self.prev is not None):
            return result(prop, Verdict.FAIL, "expected " + oracle.expected(prop, save_returned, self.prev is not None))
        if outcome.kind in ("S_k", "S_prev", "older", "fresh start"):
            problem = oracle.health(resumed)
            if problem is not None:
                return result("faithful", Verdict.FAIL, f"the resumed run did not finish: {problem[0]}", problem[1])
            final = oracle.judge_same_state(case.name, "faithful", self.golden.states("final"),
                                            resumed.states("final"), "final state vs. uninterrupted run", repro)
            if final.verdict is not Verdict.PASS:
                return result("faithful", Verdict.FAIL, final.summary, final.details)
        return result(prop, Verdict.PASS)

    def _fired(self, run: Run, case: Case) -> bool:
        return any(e["kind"] == "fault" for r in run.ranks for e in r.events)

    def _cells(self, case: Case, outcome: oracle.Outcome) -> tuple[str, ...]:
        if not case.points:
            return ("*", "", "corrupt" if case.path else "-", case.path or "", "", case.kind, str(outcome.kind))
        join = lambda values: "+".join(dict.fromkeys(values))  # noqa: E731
        ps = case.points
        return (join(str(p.rank) for p in ps), join(str(p.index) for p in ps), join(p.op for p in ps),
                join(p.target for p in ps), join(p.caller for p in ps), join(f.kind for f in case.faults),
                str(outcome.kind))


def _written_in(run: Run, phase: str) -> set[str]:
    """Paths a phase created or renamed into place (files or directories)."""
    out = set()
    for r in run.ranks:
        for e in r.events:
            if e["phase"] == phase and e["kind"] in ("open", "rename", "mkdir"):
                out.add(e["dst"] if e["kind"] == "rename" else e["path"])
    return {p for p in out if p}


def _covered(path: str, written: set[str]) -> bool:
    return any(path == w or path.startswith(w.rstrip("/") + "/") for w in written)


def _data_reader(run_dir: Path):
    def read(rank: int, offset: int, length: int) -> bytes:
        with open(data_path(run_dir, rank), "rb") as f:
            f.seek(offset)
            return f.read(length)

    return read


def trace_phases(run: Run, phase: str) -> str:
    """`ckpt-harness trace`: one line per rank, the operations of `phase` in order."""
    lines = []
    for r in run.ranks:
        parts = []
        for e in r.events:
            if e["phase"] != phase or e["kind"] not in OPS or "point" not in e:
                continue
            if e["kind"] == "collective":
                parts.append(f"{e['op']}#{e['n']}")
            elif e["kind"] == "write":
                if parts and parts[-1].startswith(f"write {e['path']} "):
                    size = int(parts[-1].rsplit("(", 1)[1].split()[0]) + e["n"]
                    parts[-1] = f"write {e['path']} ({size} bytes)"
                else:
                    parts.append(f"write {e['path']} ({e['n']} bytes)")
            elif e["kind"] == "rename":
                parts.append(f"rename {e['src']} → {e['dst']}")
            elif e["kind"] == "open":
                continue  # the write that follows says which file
            else:
                parts.append(f"{e['kind']} {e.get('path', '')}".rstrip())
        lines.append(f"rank {r.rank}: " + " → ".join(parts))
    return "\n".join(lines)


def trace(job: Union[str, type], *, world_size: int = 2, total_steps: int = 4, save_every: int = 2,
          save_step: Optional[int] = None, seed: int = 0, timeout: float = DEFAULT_TIMEOUT,
          workdir: Optional[Union[str, Path]] = None) -> tuple[Run, str]:
    """Record a clean run and describe the phases of one save."""
    ref, _ = resolve(job)
    s = Settings(ref, world_size=world_size, total_steps=total_steps, save_every=save_every, seed=seed, timeout=timeout)
    k = save_step if save_step is not None else s.save_steps[min(1, len(s.save_steps) - 1)]
    root = prepare_workdir(workdir)
    run = s.launch("trace", s.plan(root / "ckpt"), root / "run")
    return run, f"save {k}"
