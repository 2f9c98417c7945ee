"""Fault-free verification: does every save resume bitwise?

A golden run records the state after every save and at the end. Then, for
each save step k, one run stops right after save k returned (on every rank
that made it; the group is torn down, as a preemption would) and a fresh
group resumes from the same directory by the target's own logic. The
oracle judges where the resume started, the state after it and the final
state against the golden run's.

One pipeline for every target; its judges are picked by what the target
can tell (`Capabilities`): a Job reports its load, so the state right after
it is compared; a script does not, so its start is inferred from the saves
it makes, and every later save is compared instead.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from ckpt_harness import oracle, targets
from ckpt_harness.oracle import diffs, inert
from ckpt_harness.errors import UsageError
from ckpt_harness.launch.layout import crash_marker
from ckpt_harness.pipeline import confirm
from ckpt_harness.pipeline.workdir import prepare_workdir
from ckpt_harness.records.timeline import of_runs
from ckpt_harness.records import Kind
from ckpt_harness.records.runs import (Run, save_steps, save_steps_by_rank, saves_by_step, saving_after,
                                       trained_at_saves, trained_by_end)
from ckpt_harness.pipeline.clock import CaseClock
from ckpt_harness.report import Report
from ckpt_harness.targets import RunRequest, Stop, Target
from ckpt_harness.verdict import PRECEDENCE, CaseResult, Verdict

#: A case's kind -> the capability it needs (None: every target) and how its run stops.
#: "hard@4": stop without waiting for a background save; "slow@4": its writers start only
#: once training went on past it (snapshot-consistent); "restart@4": the launcher's restart.
#: "chain@2": stop after save 2, resume, stop the resumed run after the save it makes next, resume from
#: what it wrote, and so on to the end (each link a graceful stop). "moved@4": stop after save 4, copy the
#: checkpoint directory elsewhere (`relocate`), remove it, resume from the copy. "between@3": stop between saves,
#: where optimizer step 4 would start (3 made; `between_case`), and resume: K counts optimizer steps, not saves.
#: "upgrade@4": stop after save 4 under the releases the target upgrades from, resume under its own: what the
#: new release loads is held, bitwise, to what the old one saved, and the rest to the run under the new one.
#: "downgrade@4": the other way, stop under its own releases and resume under the older ones, judged alike and
#: reported as information (`oracle.informational`): few frameworks promise that an older release reads a newer
#: one's checkpoint.
KINDS = {"resume": (None, Stop.GRACEFUL), "hard": ("background_saves", Stop.HARD),
         "slow": ("background_saves", Stop.SLOW_WRITER), "restart": ("launcher_restart", Stop.CRASH),
         "chain": (None, Stop.GRACEFUL), "moved": (None, Stop.GRACEFUL), "between": ("stops_between", Stop.GRACEFUL),
         "upgrade": ("upgrade", Stop.GRACEFUL), "downgrade": ("upgrade", Stop.GRACEFUL)}
#: Kinds whose runs cross releases -> whether its stopped run, and its resumed run, go under the releases the
#: target upgrades from (`RunRequest.before_upgrade`); every other run is under the target's own.
ACROSS = {"upgrade": (True, False), "downgrade": (False, True)}
#: The `stop` of `verify` (and of the resume check) -> the kind of its cases.
BY_STOP = {"graceful": "resume", "hard": "hard", "slow-writer": "slow", "chain": "chain", "relocated": "moved",
           "between": "between", "upgrade": "upgrade"}
#: Kinds whose save must have training after it: the last save has none to overlap.
TRAINED_PAST = ("slow",)
#: Kinds that start at the first save only: one chain runs through every save after it.
FIRST_ONLY = ("chain",)
#: Kinds whose stop a launcher's restart after save k stands beside by default (its own graceful stop).
RESTARTS_WITH = ("resume", "hard")


def verify(job: Union[str, type], *, workdir: Optional[Union[str, Path]] = None,
           cases: Optional[Sequence[str]] = None, stop: str = "graceful", **settings: Any) -> Report:
    """Verify that `job` resumes bitwise from every save; return the report.

    `job` is a Job subclass, a registered name or "module:Class"; `settings`
    are those of `RunConfig` (`world_size`, `steps`, `save_every`, `nodes`,
    ...). Runs go under `workdir` (a fresh temporary directory if None).
    `cases` limits the resume cases to names like "resume@4"; the golden run
    always runs. `stop="hard"` stops without waiting for a save in flight
    (cases "hard@4"; jobs that save in the background only);
    `stop="slow-writer"` holds each save's writers until training went on
    past it, then stops once it landed (cases "slow@4", every save but the
    last). `job` may also be a target of any kind (`ckpt_harness.targets`), ready made.
    """
    target, _ = targets.resolve(job, "run", settings)
    return run_verification(target, prepare_workdir(workdir), cases, stop)


def verify_script(script: str, *, workdir: Optional[Union[str, Path]] = None,
                  cases: Optional[Sequence[str]] = None, **settings: Any) -> Report:
    """Verify that `script` resumes bitwise from every save; return the report.

    `script` is its command as after ``python``, with ``{ckpt_dir}`` where
    the checkpoint directory goes; `settings` are those of `ScriptConfig`
    (`nproc_per_node`, `nnodes`, `max_restarts`, `timeout`). `cases` limits
    the resume cases to names like "resume@4".
    """
    target, _ = targets.resolve(script, "run", settings, kind="script")
    return run_verification(target, prepare_workdir(workdir), cases)


def case_names(target: Target, steps: Sequence[int], stop: str = "graceful", gaps: Sequence[tuple[int, int]] = (),
               between: bool = True) -> tuple[list[str], list[str]]:
    """The cases `target` can run at save `steps`, and those run unless named:
    resume@k (or hard@k, `stop="hard"`; slow@k, `stop="slow-writer"`), and
    restart@k where the launcher restarts (with resume@k and hard@k); chain@k, from
    the first save k (`stop="chain"`); moved@k (`stop="relocated"`). Stops
    between saves: `gaps` are the optimizer steps (lo, hi) of each save and
    the next (or the run's end, `between_gaps`); between@K is listed at K =
    hi - 1 in each, where the step of the next save would start, all of
    them run with `stop="between"`, and the first alone beside resume@k
    (`between`; none where a scenario stops right after each save). Any K of
    a gap can be named (`_check_names`)."""
    kinds = [kind for kind, (needs, _) in KINDS.items() if needs is None or target.caps.has(needs)]
    first = BY_STOP[stop]
    default = [first] + (["restart"] if "restart" in kinds and first in RESTARTS_WITH else [])
    stops = [hi - 1 for lo, hi in gaps if hi - 1 > lo] if "between" in kinds else []

    def at(kind: str) -> Sequence[int]:
        if kind == "between":
            return stops
        if kind in FIRST_ONLY:
            return steps[:1] if len(steps) > 1 else ()
        return steps[:-1] if kind in TRAINED_PAST else steps
    chosen = [f"{kind}@{k}" for k in steps for kind in default if k in at(kind) and kind != "between"]
    if first == "between":
        chosen = [f"between@{k}" for k in stops]
    elif first == "resume" and between and stops:  # one: where the step of the second save starts
        chosen.append(f"between@{stops[0]}")
    return [f"{kind}@{k}" for kind in kinds for k in at(kind)], chosen


def between_gaps(golden: Run) -> list[tuple[int, int]]:
    """The optimizer steps (lo, hi) the golden run had made at each save
    whose step is known and at the next (after the last: by its end), where
    a stop between saves, between@K, makes lo < K < hi: a script's runs
    count their optimizer steps (`trained`); a Job's do not (none)."""
    trained = trained_at_saves(golden)
    counts = [trained[s] for s in sorted(trained)]
    end = trained_by_end(golden)
    bounds = [*counts, *([end] if end is not None else [])]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


def _check_names(target: Target, names: Optional[Sequence[str]], steps: Sequence[int],
                 gaps: Optional[Sequence[tuple[int, int]]] = None) -> None:
    """Refuse names of no case the target runs; `gaps` None: its golden run did not run yet."""
    known, _ = case_names(target, steps, gaps=gaps or ())

    def between(name: str) -> bool:  # any K of a gap, not only the one listed there
        kind, _, k = name.partition("@")
        return kind == "between" and k.isdigit() and target.caps.has("stops_between") and \
            (gaps is None or any(lo < int(k) < hi for lo, hi in gaps))
    unknown = [c for c in names or () if c not in known and c != "golden" and not between(c)]
    if unknown:
        hint = "" if target.caps.has("launcher_restart") else f" (restart@K: {target.caps.lacks['launcher_restart']})"
        if not target.caps.has("stops_between"):
            hint += f" (between@K: {target.caps.lacks['stops_between']})"
        elif gaps is not None:
            hint += (" (between@K: K optimizer steps made, " + ", ".join(f"{lo} < K < {hi}" for lo, hi in gaps) + ")"
                     if gaps else " (between@K: the golden run made no optimizer step between saves that torch.optim's "
                                  "step hook sees)")
        raise UsageError(f"unknown case {', '.join(unknown)}: the {target.noun} saves at steps "
                         f"{', '.join(map(str, steps)) or 'none'}; choose from golden, {', '.join(known)}{hint}")


def run_verification(target: Target, root: Path, cases: Optional[Sequence[str]] = None, stop: str = "graceful", *,
                     golden: Optional[Run] = None,
                     progress: Optional[Callable[[int, int, CaseResult], None]] = None,
                     timelines: str = "failed", flake: Optional[int] = None, between: bool = True) -> Report:
    """`golden`: a finished golden run of the same target to judge against
    instead of launching one (a matrix row shares its explorations' one).
    `progress(done, total, result)` as the golden run and each case finish
    (a script's cases are known only once its golden run showed its saves).
    `timelines`: which cases keep a timeline of their runs (the setting of that name).
    `flake` N: the golden run N times in all, each judged (`flake_runs`).
    `between`: with `stop="graceful"`, one stop between saves among the
    default cases (`case_names`)."""
    started = time.monotonic()
    steps = target.save_steps()
    if steps is not None:  # known up front: a bad case name is refused before any run
        _check_names(target, cases, steps, () if not target.caps.has("stops_between") else None)
    target.preflight()
    keep_last = target.values.get("keep_last")  # then the trace tells which entries each save made
    line = target.repro("run", case="golden")
    if golden is None:  # its file operations traced: which entries each save made, which rank made them
        golden = target.run(RunRequest("golden"), root / "golden" / "ckpt", root / "golden" / "run")
    results = [oracle.judge_golden("golden", golden, line, target.noun)]
    again = flake_runs(target, root, results[0], flake, timelines) if flake else []
    if results[0].verdict is Verdict.PASS:  # else there is nothing to compare against
        known = target.knowing(golden)
        steps = known.save_steps() or []
        unseen = oracle.judge_saves_seen("golden", golden, known.caps.marks_saves)  # nothing checked: not a pass
        results += [unseen] if unseen else []
        if known.caps.reports:
            results.append(oracle.judge_fresh_start("golden", golden, line))
        unnamed = oracle.judge_named_steps("golden", golden)
        results += [unnamed] if unnamed else []
        landed = oracle.judge_landed("golden", golden, line)
        results += [landed] if landed else []
        shared = oracle.judge_single_writer("golden", golden, line)  # shown when it fails: the scenario says a pass
        results += [shared] if not shared.verdict.ok else []
        if keep_last is not None:
            results.append(oracle.judge_retention(
                "golden", golden, keep_last, line, background=known.saves_in_background() and known.caps.reports,
                keeps_best=known.caps.keeps_best))
        gaps = between_gaps(golden)
        _check_names(known, cases, steps, gaps)
        results = _golden_timeline(results, golden, timelines)
        every, default = case_names(known, steps, stop, gaps, between)
        nondeterminism: dict[int, Optional[CaseResult]] = {}
        consequences: dict[tuple[int, int], tuple[Optional[inert.Consequence], str]] = {}
        named = [c for c in cases or () if c not in every and c.startswith("between@")]  # a K not listed
        chosen = [case for case in (every + named if cases else default) if not cases or case in cases]
        if progress is not None:
            progress(1, 1 + len(chosen), results[0])
        for done, case in enumerate(chosen, 2):
            found = resume_case(known, root / case, case, golden, nondeterminism, every=timelines == "all",
                                consequences=consequences)
            results += found
            if progress is not None and found:
                progress(done, 1 + len(chosen), min(found, key=lambda r: PRECEDENCE.index(r.verdict)))
    if results[0].verdict is not Verdict.PASS:
        results = _golden_timeline(results, golden, timelines)
    results[1:1] = again
    if golden.warm_started:  # the golden run's own judgments: a warm start in it may have made them
        results = [dataclasses.replace(r, warm=True) if r.case == "golden" else r for r in results]
    results = confirm.confirm_cases(results, lambda names: run_verification(
        target.replace(cold_start=True), root / "cold", cases if names is None else names, stop,
        timelines=timelines, flake=flake if names is None else None, between=between).results)
    identity = oracle.identity_note(golden)
    noted = [r.note for r in results if r.note]
    return Report(target.name, target.world_size, results, time.monotonic() - started, settings=target.values,
                  noun=target.noun, warnings=(*([identity] if identity else []), *dict.fromkeys(noted)))


def flake_runs(target: Target, root: Path, first: CaseResult, n: int, timelines: str) -> list[CaseResult]:
    """The uninterrupted run again, `n` runs in all with the golden one
    (`first`, its judgment), each judged as it is (`judge_golden`): a race
    between ranks (two renaming one path, a pointer written through one
    temporary name) passes most runs and fails some. Each run that did not
    pass is a case of its own ("golden#7"), and one more ("flake",
    `oracle.judge_flake`) says how many of the `n` failed."""
    line = f"{target.repro('run', case='golden')} --flake {n}"
    found = []
    for i in range(2, n + 1):
        run = target.run(RunRequest("golden"), root / f"golden{i}" / "ckpt", root / f"golden{i}" / "run")
        judged = oracle.judge_golden(f"golden#{i}", run, line, target.noun)
        if not judged.verdict.ok:
            said = judged.summary.removeprefix(f"{run.name}: ")
            judged = dataclasses.replace(judged, summary=f"run {i} of {n}: {said}")
            found.append(_golden_timeline([judged], run, timelines)[0])
    return [*found, oracle.judge_flake(n, [first, *found], line)]


def _golden_timeline(results: list[CaseResult], golden: Run, timelines: str) -> list[CaseResult]:
    """The golden run's checks with its timeline, one for all of them, when one did not pass (or for all)."""
    if timelines != "all" and all(r.verdict.ok for r in results):
        return results
    timeline = of_runs("golden", [golden])
    return [dataclasses.replace(r, timeline=timeline) for r in results]


def resume_case(target: Target, root: Path, case: str, golden: Run,
                nondeterminism: dict[int, Optional[CaseResult]], every: bool = False,
                consequences: Optional[dict[tuple[int, int], tuple[Optional[inert.Consequence], str]]] = None,
                ) -> list[CaseResult]:
    """Stop right after save k (as the case's kind says), resume, judge.
    `nondeterminism` holds, per step, whether two identical runs differed at
    that save: a restart case has no second run of its own to tell it.
    A case whose every failure is a data position difference is judged by
    its consequence (`by_consequence`); `consequences` keeps what each
    resume made twice showed, for the other cases of the verification.
    Every result of the case carries where its seconds went."""
    clock = CaseClock(context=(golden,))
    results = _resume_case(target, root, case, golden, nondeterminism, clock)
    if not case.startswith("hard@"):  # a hard stop's resume is judged as S_k or a later save, not bitwise
        results = by_consequence(target, root / "again", case, golden, results,
                                 {} if consequences is None else consequences, clock)
    # one timeline for all of them, when one did not pass
    timeline = of_runs(case, clock.seen) if every or any(not r.verdict.ok for r in results) else None
    timings, warm = clock.done(), clock.warm
    return [dataclasses.replace(r, timings=timings, timeline=timeline, warm=warm) for r in results]


def _resume_case(target: Target, root: Path, case: str, golden: Run,
                 nondeterminism: dict[int, Optional[CaseResult]], clock: CaseClock) -> list[CaseResult]:
    kind, _, k = case.partition("@")
    step, stop = int(k), KINDS[kind][1]
    line = target.repro("run", case=case)
    if stop is Stop.CRASH:
        return restart_case(target, root, case, golden, step, nondeterminism.get(step), clock)
    if kind == "chain":
        return chain_case(target, root, case, golden, step, clock)
    if kind == "between":
        return between_case(target, root, case, golden, step, clock)
    ckpt = root / "ckpt"
    older_stop, older_resume = ACROSS.get(kind, (False, False))
    stopped, failed = _stop_after(target, root, case, step, stop, line, clock, before_upgrade=older_stop)
    if failed:
        return [failed]
    if stop is Stop.SLOW_WRITER:  # nothing trained while the save was in flight: nothing to judge its writer by
        idle = oracle.judge_overlap(case, stopped, step)
        if idle:
            return [idle]
    if older_stop:  # written by another release than the golden run: its save may differ from it by design
        found = None
    else:
        nondeterminism[step] = found = oracle.judge_deterministic(case, golden, stopped, step)
    results = [found] if found else []
    if kind == "moved":
        ckpt = relocate(ckpt, root / "moved" / "ckpt")
    resumed = clock.run(lambda: target.run(RunRequest("resumed run", trace_files=False, before_upgrade=older_resume),
                                           ckpt, root / "resume"), resume=True)
    clock.judging()
    refused = oracle.judge_refused(case, resumed, line) if kind in ACROSS else None
    if refused:
        return results + [refused]
    if stop is Stop.HARD:
        return results + [oracle.undecided_if(found, oracle.judge_hard_stop(case, golden, stopped, resumed, step,
                                                                            line, target.caps.live_state))]
    judged = results + judge_resumed(target, case, golden, stopped, resumed, step, line, found)
    if older_resume:
        return [oracle.informational(r, "an older release resuming a newer one's checkpoint, which few frameworks "
                                        "promise") for r in judged]
    return judged


def _stop_after(target: Target, root: Path, case: str, step: int, stop: Stop, line: str,
                clock: CaseClock, before_upgrade: bool = False) -> tuple[Run, Optional[CaseResult]]:
    """The run of a case stopped after save `step` (in root/ckpt; under the
    releases the target upgrades from if `before_upgrade`), and why it
    cannot be judged further: it failed, or did not stop there."""
    stopped = clock.run(lambda: target.run(
        RunRequest("stopped run", stop_after_save=step, stop=stop, trace_files=False, before_upgrade=before_upgrade),
        root / "ckpt", root / "stop"),
        broken=step)
    live = oracle.judge_golden(case, stopped, line, target.noun)
    return stopped, live if live.verdict is not Verdict.PASS else _not_stopped(target, case, stopped, step)


def _not_stopped(target: Target, case: str, run: Run, step: int) -> Optional[CaseResult]:
    """UNKNOWN when `run`, told to stop after save `step`, did not stop there on every rank that makes it."""
    ranks = target.savers(step)
    return oracle.judge_stopped(case, run, step, ranks if ranks is not None else frozenset(r.rank for r in run.ranks))


#: Seconds between the modification times `relocate` gives: more than any rotation's tie-breaking window
#: (transformers orders by time unless two are within a second of each other, PR #37260).
MTIME_GAP = 10.0


def relocate(ckpt: Path, to: Path) -> Path:
    """Copy a checkpoint directory elsewhere as a transfer between file
    systems, buckets or clusters does, and remove the original: contents
    alone (no modification times kept), then every entry's modification
    time set against the order of its name, `MTIME_GAP` apart (the
    greatest step the oldest): a resume that picks the newest checkpoint by
    time, or reads an absolute path a file holds, goes wrong."""
    shutil.copytree(ckpt, to, copy_function=shutil.copyfile, symlinks=True)
    entries = sorted((p for p in to.rglob("*") if not p.is_symlink()), key=lambda p: p.relative_to(to).parts)
    now = time.time()
    for i, path in enumerate(entries):  # the first name the newest, the last the oldest
        os.utime(path, (now - MTIME_GAP * i, now - MTIME_GAP * i))
    shutil.rmtree(ckpt)
    return to


def chain_case(target: Target, root: Path, case: str, golden: Run, step: int, clock: CaseClock) -> list[CaseResult]:
    """A resume chain: stop after save `step`, resume, stop the resumed run
    after the save it makes next, resume from what that run wrote, and on
    to the end. Every link is judged as a resume (its start, the state it
    loaded against the state its predecessor saved, or a script's saves
    against the golden run's); the last link also by its final state. A
    checkpoint a resumed run writes may differ from one an uninterrupted
    run writes (torch.compile's key prefix: pytorch/torchtitan#961): only a
    link after the first loads one."""
    line = target.repro("run", case=case)
    ckpt = root / "ckpt"
    stopped, failed = _stop_after(target, root, case, step, Stop.GRACEFUL, line, clock)
    if failed:
        return [failed]
    found = oracle.judge_deterministic(case, golden, stopped, step)
    results = [found] if found else []
    later = [s for s in target.save_steps() or () if s > step]
    before, prev = stopped, step
    for link, until in enumerate([*later, None], 1):
        request = RunRequest(f"resumed run {link}", stop_after_save=until, trace_files=False)
        run = clock.run(lambda: target.run(request, ckpt, root / f"link{link}"), resume=True, broken=until)
        judged = judge_resumed(target, case, golden, before, run, prev, line, found, until=until)
        if until is not None and all(r.verdict.ok for r in judged):
            judged += [r for r in [_not_stopped(target, case, run, until)] if r]
        how = f"link {link} of the chain, resumed from save {prev} " + (
            "(written by the uninterrupted run)" if link == 1 else "(written by a resumed run)")
        results += [dataclasses.replace(r, summary=f"{how}: {r.summary}") for r in judged]
        if not all(r.verdict.ok for r in judged):
            break
        before, prev = run, until
    clock.judging()
    return results


def between_case(target: Target, root: Path, case: str, golden: Run, at: int, clock: CaseClock) -> list[CaseResult]:
    """A preemption between saves: the run stops where optimizer step `at`+1
    would start (`at` made, whatever it wrote since its last save), and the
    same command resumes on the same directory. The resume must start from
    the newest save complete when it stopped (`oracle.newest_complete`), the
    steps lost said, and is judged from there as any resume: exactly the
    golden run's later saves, bitwise, and its end."""
    line = target.repro("run", case=case)
    ckpt = root / "ckpt"
    stopped = clock.run(lambda: target.run(RunRequest("stopped run", stop_between=at, trace_files=False), ckpt,
                                           root / "stop"))
    live = oracle.judge_golden(case, stopped, line, target.noun)
    if live.verdict is not Verdict.PASS:
        return [live]
    unstopped = oracle.judge_stopped_between(case, stopped, at)
    if unstopped is not None:
        return [unstopped]
    newest = oracle.newest_complete(stopped, {s: target.savers(s) or frozenset() for s in target.save_steps() or ()})
    found = oracle.judge_deterministic(case, golden, stopped, newest) if newest is not None else None
    results = [found] if found else []
    resumed = clock.run(lambda: target.run(RunRequest("resumed run", trace_files=False), ckpt, root / "resume"),
                        resume=True)
    clock.judging()
    return results + judge_resumed(target, case, golden, stopped, resumed, newest or 0, line, found, stopped_at=at)


def by_consequence(target: Target, root: Path, case: str, golden: Run, results: list[CaseResult],
                   seen: dict[tuple[int, int], tuple[Optional[inert.Consequence], str]],
                   clock: CaseClock) -> list[CaseResult]:
    """`results` as they stand unless their every failure is a data
    position difference (`oracle.inert`); then resumed once more from a save
    a resumed run wrote: stop after save `first` (the case's own, or the
    first save where the case's has no later save with training after it),
    resume and stop after save `again`, resume from what that run wrote to
    the end, and compare what training did with the uninterrupted run.
    `seen` holds the outcome for each (first, again) already made."""
    keys = inert.bookkeeping(results)
    if keys is None:
        return results
    saves = sorted(target.save_steps() or ())
    own = case.partition("@")[2]
    firsts = [int(own)] if own.isdigit() and int(own) in saves else []
    pair = next(((first, again) for first in [*firsts, *saves[:1]]
                 if (again := _trained_past(golden, saves, first)) is not None), None)
    if pair is None:
        return inert.judge(results, keys, None, f"no save after save {saves[0] if saves else '-'} has training "
                                                 "after it to resume once more from; give the script more saves")
    if pair not in seen:
        seen[pair] = _resumed_twice(target, root, golden, *pair, clock)
    return inert.judge(results, keys, *seen[pair])


def _trained_past(golden: Run, saves: Sequence[int], first: int) -> Optional[int]:
    """The first save after `first` that the golden run trained past (a
    resume from it trains): by its optimizer steps where a script counts
    them, else any save but the last."""
    trained, end = trained_at_saves(golden), trained_by_end(golden)
    for s in (s for s in saves if s > first):
        if (trained[s] < end) if s in trained and end is not None else s != saves[-1]:
            return s
    return None


def _resumed_twice(target: Target, root: Path, golden: Run, first: int, again: int,
                   clock: CaseClock) -> tuple[Optional[inert.Consequence], str]:
    """Stop after save `first`, resume and stop after save `again`, resume
    to the end: what diverged from the uninterrupted run in the last run
    but data position (`inert.Consequence`), or None and why it cannot tell."""
    line = target.repro("run")
    ckpt = root / "ckpt"
    _, failed = _stop_after(target, root, "again", first, Stop.GRACEFUL, line, clock)
    if failed is not None:
        return None, f"the run to stop after save {first} did not: {failed.summary}"
    request = RunRequest("resumed run", stop_after_save=again, trace_files=False)
    resumed = clock.run(lambda: target.run(request, ckpt, root / "resume"), resume=True, broken=again)
    failed = oracle.judge_golden("again", resumed, line, target.noun)
    failed = _not_stopped(target, "again", resumed, again) if failed.verdict.ok else failed
    if failed is not None:
        return None, f"the resumed run to stop after save {again} did not: {failed.summary}"
    last = clock.run(lambda: target.run(RunRequest("resumed run", trace_files=False), ckpt, root / "last"),
                     resume=True)
    how = inert.Consequence(first, again)
    live = oracle.judge_live("again", last, line)
    if live.verdict is Verdict.FAIL:  # its checkpointing broke there: a consequence
        return dataclasses.replace(how, diverged=f"that run failed: {live.summary}", details=live.details), ""
    if not live.verdict.ok:  # it could not run or be judged: that tells nothing of the difference
        return None, f"the run resumed once more from save {again} could not be judged: {live.summary}"
    expected, actual = saves_by_step(golden), saves_by_step(last)
    compared = [(f"save {s}", expected[s], actual.get(s, {})) for s in sorted(expected) if s > again]
    if target.caps.reports:
        compared.append(("the final state", golden.states(Kind.FINAL) or {}, last.states(Kind.FINAL) or {}))
    for what, want, got in compared:
        problems = inert.consequences(want, got)
        if problems:
            return dataclasses.replace(how, diverged=f"{what} differs from the uninterrupted run's: "
                                                     f"{diffs.summary(problems)}", details=diffs.listing(problems)), ""
    return how, ""


def restart_case(target: Target, root: Path, case: str, golden: Run, step: int,
                 nondeterminism: Optional[CaseResult], clock: Optional[CaseClock] = None) -> list[CaseResult]:
    """The launcher's own restart path: the first rank that made save `step`
    dies right after it (SIGKILL, where a preempted run stops), the launcher
    restarts the group on the same directory, and the restarted attempt is
    judged as a resume after save `step`.

    No second run tells here whether the target is deterministic: the
    resume case of the same step does, when it ran before."""
    line = target.repro("run", case=case)
    clock = clock or CaseClock()
    run = clock.run(lambda: target.run(
        RunRequest("restarted run", stop_after_save=step, stop=Stop.CRASH, trace_files=False), root / "ckpt",
        root / "run"), broken=step)
    clock.judging()
    if not crash_marker(root / "run").exists():
        live = oracle.judge_golden(case, run, line, target.noun)
        return [live if live.verdict is not Verdict.PASS else oracle.cannot_judge(
            case, "restart", f"no rank died after save {step}: the run did not save as the golden run did")]
    if run.outcome.restarts < 1:
        return [oracle.judge_live(case, run, line)]
    return judge_resumed(target, case, golden, None, run, step, line, nondeterminism)


def judge_resumed(target: Target, case: str, golden: Run, stopped: Optional[Run], resumed: Run, step: int,
                  line: str, nondeterminism: Optional[CaseResult], until: Optional[int] = None,
                  stopped_at: Optional[int] = None) -> list[CaseResult]:
    """The oracle on a run that resumed after save `step`: live; where it
    started (reported, or inferred); the state right after the load where
    it was reported, else every later save; the final state. A run stopped
    after save `until` (a link of a chain) is judged on its saves up to it,
    and has no final state. One stopped between saves, after optimizer
    step `stopped_at`, `step` the newest save complete then (0: none),
    says the steps it lost."""
    live = oracle.judge_live(case, resumed, line)
    results = [live]
    if not target.caps.reports and stopped_at is not None:
        point = oracle.judge_stop_point(case, resumed, stopped_at, step or None, trained_at_saves(golden), line,
                                        save_steps(golden))
        results += [point] if point else []
        later = oracle.judge_later_saves(case, golden, resumed, step, line, until)
        results += [oracle.undecided_if(nondeterminism, later)] if later else []
    elif not target.caps.reports:
        results.append(oracle.judge_resume_point(case, resumed, step, line, save_steps(golden)))
        later = oracle.judge_later_saves(case, golden, resumed, step, line, until)
        results += [oracle.undecided_if(nondeterminism, later)] if later else []
    elif not resumed.loaded_steps():  # judged from what it did instead
        inferred = oracle.judge_unreported_load(case, resumed, step, golden.saved_steps(), line)
        results += [inferred] if inferred else []
    elif resumed.states(Kind.LOADED) is not None and stopped is not None:
        # a resume that loaded and then failed still tells what it loaded
        results += [
            oracle.judge_load_step(case, resumed, step, line),
            oracle.judge_same_state(case, "state after load", stopped.states(Kind.SAVED, step),
                                    resumed.states(Kind.LOADED), f"state after load vs. state saved at step {step}",
                                    line),
        ]
    # A target whose final state is its last save's: only the ranks that save after `step` tell anything.
    ranks = frozenset(r.rank for r in golden.ranks) if target.caps.live_state else \
        saving_after(save_steps_by_rank(golden), step)
    if live.verdict is Verdict.PASS and ranks and until is None:
        expected, actual = _of(golden.states(Kind.FINAL), ranks), _of(resumed.states(Kind.FINAL), ranks)
        what = "final state vs. uninterrupted run" if target.caps.live_state else \
            "final state (the last save) vs. uninterrupted run"
        final = oracle.judge_same_state(case, "final state", expected, actual, what, line)
        bitwise = any(r.check == "state after load" and r.verdict is Verdict.PASS for r in results)
        final = oracle.float_noise(final, expected, actual, loaded_bitwise=bitwise)
        results.append(oracle.undecided_if(nondeterminism, final))
    return results


def _of(states: Optional[dict[int, Any]], ranks: frozenset[int]) -> Optional[dict[int, Any]]:
    return None if states is None else {rank: state for rank, state in states.items() if rank in ranks}
