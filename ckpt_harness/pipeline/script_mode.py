"""Script mode: verify an unmodified training script under torchrun, as `verify` does a Job.

The script is run by torch's elastic agents (`launch.elastic`), with
``{ckpt_dir}`` in its command replaced by the run's checkpoint directory
(also in the environment, `CKPT_DIR_ENV`), and recorded by the bootstrap
(`script_runner`): its saves are found at the entry points it calls, with
what it handed them. Then, as for a Job:

* a golden run on a fresh directory;
* for each save step k it made: a run on a new directory preempted right
  after save k (every rank that made save k stops, the group is torn down),
  then the same command again on that directory: the script resumes by its
  own logic, as after its scheduler restarted it;
* the oracle judges the resumed run: live, no step the checkpoint held
  saved again (else it started from scratch), every later save and the
  final state bitwise equal to the golden run's, per rank.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from ckpt_harness import oracle
from ckpt_harness.config import ScriptConfig, settings_of
from ckpt_harness.errors import UsageError
from ckpt_harness.inject.faults import Fault
from ckpt_harness.records import Kind, Run
from ckpt_harness.report import Report
from ckpt_harness import run
from ckpt_harness.run import FAILURE_GRACE, prepare_workdir
from ckpt_harness.verdict import CaseResult, Verdict

PLACEHOLDER = "{ckpt_dir}"


def command(config: ScriptConfig, ckpt_dir: Path) -> tuple[str, ...]:
    """The script's path and arguments with the checkpoint directory in place."""
    words = shlex.split(config.script)
    if words and Path(words[0]).name.startswith("python") and len(words) > 1:
        words = words[1:]  # 'python train.py ...' means train.py
    return tuple(w.replace(PLACEHOLDER, str(ckpt_dir)) for w in words)


def launch_script(config: ScriptConfig, name: str, ckpt_dir: Path, run_dir: Path, *,
                  stop_after_save: Optional[int] = None, stop_ranks: Optional[frozenset[int]] = None,
                  faults: tuple[Fault, ...] = (), log_data: bool = False, trace_files: bool = False,
                  deadline: Optional[float] = None, failure_grace: float = FAILURE_GRACE,
                  crash: bool = False) -> Run:
    """One torchrun run of the script on `ckpt_dir`; its records, trace and outcome (`run.launch`'s twin).

    `stop_after_save` with `stop_ranks` (the ranks that make that save)
    preempts the run right after that save; with `crash` instead, the first
    rank there dies and the run goes on under torchrun's restarts (the
    records are the last attempt's). `faults` are armed in the workers;
    `trace_files` probes file operations under `ckpt_dir`.
    """
    from ckpt_harness.launch.elastic import ScriptSpec, run_elastic
    from ckpt_harness.rankside.script import CKPT_DIR_ENV, PLAN_ENV, ScriptPlan

    ckpt_dir.mkdir(parents=True, exist_ok=True)
    plan = ScriptPlan(ckpt_dir=str(ckpt_dir.resolve()), stop_after_save=stop_after_save, crash=crash, faults=faults,
                      log_data=log_data, trace_files=trace_files)
    spec = ScriptSpec(
        command=command(config, ckpt_dir.resolve()), run_dir=run_dir, deadline=deadline or config.timeout,
        nproc_per_node=config.nproc_per_node, nnodes=config.nnodes, max_restarts=config.max_restarts,
        env={PLAN_ENV: plan.to_env(), CKPT_DIR_ENV: str(ckpt_dir.resolve())}, failure_grace=failure_grace,
        stop_ranks=stop_ranks if stop_after_save is not None and not crash else None,
        entry="ckpt_harness.rankside.script:arm",
    )
    return Run.collect(name, run_dir, run_elastic(spec))


def verify_script(script: str, *, workdir: Optional[Union[str, Path]] = None,
                  cases: Optional[Sequence[str]] = None, **settings: Any) -> Report:
    """Verify that `script` resumes bitwise from every save; return the report.

    `script` is its command as after ``python``, with ``{ckpt_dir}`` where
    the checkpoint directory goes; `settings` are those of `ScriptConfig`
    (`nproc_per_node`, `nnodes`, `max_restarts`, `timeout`). `cases` limits
    the resume cases to names like "resume@4".
    """
    unknown = sorted(set(settings) - set(settings_of(ScriptConfig)))
    if unknown:
        raise UsageError(f"unknown setting {', '.join(unknown)}: script mode takes "
                         f"{', '.join(n for n in settings_of(ScriptConfig) if n != 'script')}")
    return run_script_verification(ScriptConfig(script=script, **settings), prepare_workdir(workdir), cases)


def repro(config: ScriptConfig, case: str) -> str:
    """The line that replays `case` (the CLI's `run --script`)."""
    return run.repro("run", config, case)


def run_script_verification(config: ScriptConfig, root: Path, cases: Optional[Sequence[str]] = None, *,
                            golden: Optional[Run] = None) -> Report:
    """`golden`: a finished golden run of the same script and layout to judge
    against instead of launching one (a matrix row shares its explorations' one)."""
    started = time.monotonic()
    line = repro(config, "golden")
    if golden is None:
        golden = launch_script(config, "golden", root / "golden" / "ckpt", root / "golden" / "run")
    results = [oracle.judge_golden("golden", golden, line)]
    if results[0].verdict is Verdict.PASS:
        steps = oracle.save_steps(golden)
        unnamed = oracle.judge_named_steps("golden", golden)
        results += [unnamed] if unnamed else []
        kinds = ("resume", "restart") if config.max_restarts else ("resume",)
        known = [f"{kind}@{k}" for k in steps for kind in kinds]
        wrong = [c for c in cases or () if c not in known and c != "golden"]
        if wrong:
            raise UsageError(f"unknown case {', '.join(wrong)}: the script saved at steps "
                             f"{', '.join(map(str, steps)) or 'none'}; choose from golden, {', '.join(known)}"
                             + ("" if config.max_restarts else " (restart@K with --max-restarts 1 or more)"))
        for k in steps:
            nondeterminism = None
            for kind, make in (("resume", resume_case), ("restart", restart_case))[:len(kinds)]:
                case = f"{kind}@{k}"
                if not cases or case in cases:
                    found, nondeterminism = make(config, root / case, case, golden, k, nondeterminism)
                    results += found
    return Report(config.script, config.world_size, results, time.monotonic() - started, settings=config.values)


def resume_case(config: ScriptConfig, root: Path, case: str, golden: Run, step: int,
                nondeterminism: Optional[CaseResult]) -> tuple[list[CaseResult], Optional[CaseResult]]:
    """Preempt right after save `step`, run the same command again on that
    directory, judge it; and whether two identical runs differed at that save."""
    line = repro(config, case)
    ckpt = root / "ckpt"
    ranks = oracle.savers(golden, step)
    stopped = launch_script(config, "stopped run", ckpt, root / "stop", stop_after_save=step, stop_ranks=ranks)
    live = oracle.judge_golden(case, stopped, line)
    if live.verdict is not Verdict.PASS:
        return [live], None
    not_stopped = oracle.judge_stopped(case, stopped, step, ranks)
    if not_stopped:
        return [not_stopped], None
    nondeterminism = oracle.judge_deterministic_saves(case, golden, stopped, step)
    resumed = launch_script(config, "resumed run", ckpt, root / "resume")
    results = [nondeterminism] if nondeterminism else []
    return results + judge_resumed(case, golden, resumed, step, line, nondeterminism), nondeterminism


def restart_case(config: ScriptConfig, root: Path, case: str, golden: Run, step: int,
                 nondeterminism: Optional[CaseResult]) -> tuple[list[CaseResult], Optional[CaseResult]]:
    """torchrun's own restart path: the first rank that made save `step`
    dies right after it (SIGKILL, where a preempted run stops), the elastic
    agents restart the group on the same directory (--max-restarts), and
    the restarted attempt is judged as a resume after save `step`.

    No second run tells here whether the script is deterministic: the
    resume case of the same step does, when it ran before."""
    from ckpt_harness.rankside.script import crash_marker

    line = repro(config, case)
    run = launch_script(config, "restarted run", root / "ckpt", root / "run", stop_after_save=step, crash=True)
    if not crash_marker(root / "run").exists():
        live = oracle.judge_golden(case, run, line)
        return [live if live.verdict is not Verdict.PASS else oracle.cannot_judge(
            case, "restart", f"no rank died after save {step}: the run did not save as the golden run did")], None
    if run.outcome.restarts < 1:
        return [oracle.judge_live(case, run, line)], None
    return judge_resumed(case, golden, run, step, line, nondeterminism), nondeterminism


def judge_resumed(case: str, golden: Run, resumed: Run, step: int, line: str,
                  nondeterminism: Optional[CaseResult]) -> list[CaseResult]:
    """The oracle on a run that resumed after save `step`: live, not from
    scratch, every later save and the final state bitwise the golden run's."""
    live = oracle.judge_live(case, resumed, line)
    results = [live, oracle.judge_resume_point(case, resumed, step, line)]
    later = oracle.judge_later_saves(case, golden, resumed, step, line)
    results += [oracle.undecided_if(nondeterminism, later)] if later else []
    after = saving_after(golden, step)
    if live.verdict is Verdict.PASS and after:
        final = oracle.judge_same_state(case, "final state", _of(golden.states(Kind.FINAL), after),
                                        _of(resumed.states(Kind.FINAL), after),
                                        "final state (the last save) vs. uninterrupted run", line)
        results.append(oracle.undecided_if(nondeterminism, final))
    return results


def saving_after(golden: Run, step: int) -> frozenset[int]:
    """The ranks that saved after save `step` in the golden run: only their
    final state (their last save) tells anything about a resume from it. A
    rank whose last save was `step` itself, or earlier, saves nothing once
    resumed there (resumable.py --staging's rank 1 after its last save)."""
    return frozenset(r.rank for r in golden.ranks
                     if any(rec["event"] == Kind.SAVED and rec["step"] > step for rec in r.records))


def _of(states: Optional[dict[int, Any]], ranks: frozenset[int]) -> Optional[dict[int, Any]]:
    return None if states is None else {rank: state for rank, state in states.items() if rank in ranks}
