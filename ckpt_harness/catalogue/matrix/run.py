"""Running a matrix: its rows made from their settings, every scenario that
applies run against every row (a shard's part, or what a stopped matrix
lacks), and a stop by SIGINT or SIGTERM that keeps what finished.

The only part of the package that starts processes; the matrix it returns
(`model.Matrix`) is shown, written and merged by the other modules.
"""

from __future__ import annotations

import concurrent.futures
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ckpt_harness import targets
from ckpt_harness.catalogue.bench import Bench
from ckpt_harness.catalogue.matrix.merging import _difference
from ckpt_harness.catalogue.matrix.model import Matrix
from ckpt_harness.catalogue.scenario import Scenario, ScenarioResult
from ckpt_harness.catalogue.shards import Shard, Task, assign
from ckpt_harness.config import SETTINGS
from ckpt_harness.errors import UsageError, signal_of
from ckpt_harness.progress import Progress
from ckpt_harness.report import versions

#: Scenarios run at once (when `parallel` > 1), each running `parallel` cases
#: at once: a catalogue is mostly waiting (hang deadlines, failure grace,
#: delays), and a second scenario's work fills those waits. Two keep the
#: groups at once within 2 x `parallel`.
SCENARIOS_AT_ONCE = 2
#: After SIGINT or SIGTERM: how long the scenarios in flight get to notice
#: that their groups are gone (`launch.cancel`) before the matrix is written
#: without them. The whole stop is to take under 3 s.
ABANDON_WAIT = 1.5


class MatrixInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped `run_matrix`. `matrix` holds the scenarios
    finished before it (`Matrix.missing`: the rest; the ones in flight were
    abandoned, their groups killed); `signum` is the signal."""

    def __init__(self, matrix: Matrix, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.matrix = matrix
        self.signum = signum


def matrix_rows(given: Sequence[Mapping[str, Any]]) -> tuple[list[targets.Target], dict[str, str]]:
    """The rows the settings of each `given` make (``{"job": "dcp[bf16]",
    "world_size": 2, ...}``, ``{"script": "train.py {ckpt_dir}", ...}``),
    through the chooser every surface uses (`targets.make`), each checked
    before anything runs; and the rows this machine cannot run (a framework
    not installed), each with why, instead of a row of errors. Bad input
    (a script that is not there, an axis a job does not train with) raises."""
    from ckpt_harness.errors import Unavailable

    rows: list[targets.Target] = []
    skipped: dict[str, str] = {}
    for settings in given:
        kind = targets.chosen(settings, "run")
        try:
            target = targets.make(settings, "run").breakable()
            target.preflight()
        except Unavailable as exc:
            skipped[str(settings[kind.option])] = str(exc)
            continue
        rows.append(target)
    return rows, skipped


def run_matrix(
    rows: Sequence[targets.Target],
    scenarios: Sequence[Scenario],
    *,
    parallel: int = SETTINGS["parallel"].default,
    reduce: bool = True,
    scenarios_at_once: int = SCENARIOS_AT_ONCE,
    workdir: Optional[Path] = None,
    keep: bool = False,
    progress: Optional[Progress] = None,
    skipped: Mapping[str, str] = {},
    shard: Optional[Shard] = None,
    costs: Optional[Mapping[Task, float]] = None,
    previous: Optional[Matrix] = None,
) -> Matrix:
    """Run every scenario that applies against every row (a target of any
    kind: `matrix_rows`), showing cases as they finish and a line per
    finished scenario on `progress`. `reduce=False` runs every case's faulted
    save and resume (the naive catalogue, for comparison); `scenarios_at_once`
    applies when `parallel` > 1. `skipped`: rows not run, each with why.

    The rows' scenarios go in turn, row by row (every row's first scenario,
    then every row's second...): a row's first scenarios all wait for its
    golden run (a script's is a torchrun run of seconds), so the rows'
    golden runs go at once rather than one after the other.

    `shard`: only that shard's part of the runs (`shards.assign`, balanced by
    `costs`). `previous`: a matrix of the same rows and scenarios that was
    stopped (`resume`): only the runs it lacks are made, its results kept.

    On SIGINT (KeyboardInterrupt, or `errors.Interrupted` for SIGTERM) the
    runs not started are cancelled, every group is killed (`launch.cancel`:
    the process can start none after), the scenarios in flight are abandoned
    and `MatrixInterrupted` is raised with the matrix of those that finished,
    its temporary directory removed."""
    started = time.monotonic()
    if not rows and not skipped:
        raise UsageError("a matrix needs at least one row: give --job or --script")
    for target in rows:
        target.warm(parallel)  # before any run: no deadline pays for what the runs share
    names: list[str] = []
    for i, target in enumerate(rows):
        names.append(target.row if target.row not in names else f"{target.row} #{i + 1}")  # apart, if cut alike
    specs = {name: targets.spec(target) for name, target in zip(names, rows)}
    plans = [(target, name, [s for s in scenarios if s.applies_to(name)]) for target, name in zip(rows, names)]
    tasks = [(i, name, scenario) for i, (_, name, mine) in enumerate(plans) for scenario in mine]
    tasks.sort(key=lambda task: plans[task[0]][2].index(task[2]))
    plan = [Task(name, scenario.name) for _, name, scenario in tasks]
    finished: dict[Task, ScenarioResult] = {}
    before = 0.0
    skipped = dict(skipped)
    if previous is not None:
        if names != previous.names or plan != previous.plan:
            raise UsageError(f"the rows and scenarios are not those of the matrix to resume "
                             f"({_difference(plan, previous.plan, 'this run', 'the matrix')}): resume it with the "
                             "jobs installed and the catalogue it was made with, or run it again")
        mine, shard, before = list(previous.tasks or ()), previous.shard, previous.elapsed
        finished = {Task(r.job, r.scenario): r for r in previous.results if Task(r.job, r.scenario) in mine}
        skipped = {**previous.skipped, **skipped}
    elif shard is not None:
        mine = assign(plan, shard.count, costs)[shard.index - 1]
    else:
        mine = list(plan)
    wanted = set(mine) - set(finished)
    todo = [task for task, key in zip(tasks, plan) if key in wanted]
    first = rows[0].values if rows else {}
    # what the markdown says of how rows ran: torchrun's layout, the launcher; a cold start where asked for
    shown = {name: first[name] for name in ("nproc_per_node", "nnodes", "launcher") if name in first}
    shown.update({"cold_start": True} if first.get("cold_start") else {})

    def matrix(stopped_by: Optional[str] = None) -> Matrix:
        return Matrix(rows[0].world_size if rows else 0, names, [finished[t] for t in plan if t in finished],
                      list(scenarios), before + time.monotonic() - started, versions(), skipped,
                      settings={"timeout": rows[0].timeout if rows else 0.0, "parallel": parallel, **shown},
                      rows=specs, plan=plan, tasks=mine if shard is not None else None, shard=shard,
                      stopped_by=stopped_by)

    root = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="ckpt-matrix-"))
    benches = [Bench(target, root / f"job{i}", parallel=parallel, reduce=reduce, name=name)
               for i, (target, name, _) in enumerate(plans)]
    left = [sum(task[0] == i for task in todo) for i in range(len(plans))]
    lock = threading.Lock()
    stopping = threading.Event()
    done = 0

    def one(task: tuple[int, str, Scenario]) -> ScenarioResult:
        nonlocal done
        i, name, scenario = task
        result = benches[i].run(scenario, progress=progress.piece(f"{name} {scenario.name}") if progress else None)
        with lock:
            if stopping.is_set():  # abandoned: what it says after its groups were killed is not its result
                return result
            done += 1
            if progress:
                progress.line(f"[{done:>3}/{len(todo)}] {name:16} {scenario.name:24} {result.verdict.value.upper():7} "
                              f"{result.cases:>3} cases {result.elapsed:6.1f}s")
            left[i] -= 1
            if not left[i] and not keep:  # the job's last scenario: its runs are no longer shared
                shutil.rmtree(root / f"job{i}", ignore_errors=True)
        return result

    pool = concurrent.futures.ThreadPoolExecutor(scenarios_at_once if parallel > 1 else 1)
    futures: dict[concurrent.futures.Future, Task] = {}
    try:
        for task in todo:
            futures[pool.submit(one, task)] = Task(task[1], task[2].name)
        for future in concurrent.futures.as_completed(futures):
            finished[futures[future]] = future.result()
    except KeyboardInterrupt as exc:
        with lock:  # what finished before the signal counts; nothing after it does
            stopping.set()
            finished.update({futures[f]: f.result() for f in futures
                             if f.done() and not f.cancelled() and f.exception() is None})
        if progress:
            progress.mute()
        pool.shutdown(wait=False, cancel_futures=True)
        from ckpt_harness.launch import cancel

        cancel()
        concurrent.futures.wait([f for f in futures if not f.cancelled()], timeout=ABANDON_WAIT)
        _discard(root, workdir, keep)
        signum = signal_of(exc)
        raise MatrixInterrupted(matrix(signal.Signals(signum).name), signum) from None
    except BaseException:  # a scenario's bad input: the runs not started are not made
        pool.shutdown(wait=True, cancel_futures=True)
        _discard(root, workdir, keep)
        raise
    pool.shutdown()
    _discard(root, workdir, keep)
    return matrix()


def _discard(root: Path, workdir: Optional[Path], keep: bool) -> None:
    if workdir is None and not keep:
        shutil.rmtree(root, ignore_errors=True)


def resume(previous: Matrix, *, workdir: Optional[Path] = None, keep: bool = False,
           progress: Optional[Progress] = None, source: str = "matrix.json") -> Matrix:
    """`previous` (a matrix or shard that was stopped) finished: the runs it
    lacks made with its rows (each rebuilt from its settings, `targets.rebuild`),
    catalogue and settings, on the versions it was measured with (UsageError
    otherwise: one matrix is one measurement)."""
    now = versions()
    if now != previous.versions:
        raise UsageError(f"{source} was measured on other versions ({_difference(previous.versions, now, '', '')}, "
                         "then vs. now): a matrix is one measurement; run it again whole")
    rows = [targets.rebuild(previous.rows[name]) for name in previous.names]
    return run_matrix(rows, previous.scenarios, parallel=previous.settings["parallel"], workdir=workdir, keep=keep,
                      progress=progress, previous=previous)
