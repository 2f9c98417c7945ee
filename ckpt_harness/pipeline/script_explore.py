"""`explore --script`: break one save of an unmodified script at every point, judge every resume.

The same pipeline as a Job's exploration (`explore`), through the same run
layer (`run.launch` runs a script config under torchrun), baseline and
cases, judged by the same judge (`oracle.judge_fault`). What differs is
only what a script cannot say in advance:

* its save steps and which ranks make each save: the golden run tells them
  (`ScriptExploreConfig.knowing`), and the save broken is picked among them;
* what each save held: what it was handed (`script_runner`), all the saves
  of one step merged per rank (`oracle.script_resume.saves_by_step`);
* where a resume started: a script reports no load, so the oracle infers it
  from the resumed run's first save (`oracle.resumed.infer_start`) and
  judges its final state bitwise against the golden run's.

One golden run serves every case. A run stopped right after save k (the
committed directory) is made only when a corruption case needs it or the
golden trace does not replay to the golden directory. What a power loss
inside the save leaves is derived from the golden trace as for a Job, so
such a case costs one torchrun run, its resume; a crash runs its faulted
save too (`cases._derived`: a script's ranks go on to their next save, so
the golden trace does not tell what the peers do after it).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from ckpt_harness.pipeline import baseline as baselines
from ckpt_harness import oracle
from ckpt_harness.pipeline.baseline import Baseline, BaselineFailed
from ckpt_harness.config import ScriptExploreConfig, settings_of
from ckpt_harness.errors import UsageError
from ckpt_harness.pipeline.explore import Progress, explore_baseline
from ckpt_harness.records import Kind, Run
from ckpt_harness.report import Report
from ckpt_harness.run import prepare_workdir
from ckpt_harness.verdict import CaseResult


def explore_script(script: str, *, workdir: Optional[Union[str, Path]] = None,
                   cases: Optional[Sequence[str]] = None, progress: Optional[Progress] = None,
                   **settings: Any) -> Report:
    """Break save `save` (default: the second the script makes) of `script`
    at every point; judge each resume.

    `script` is its command as after ``python``, with ``{ckpt_dir}`` where the
    checkpoint directory goes; `settings` are those of `ScriptExploreConfig`
    (`nproc_per_node`, `nnodes`, `faults`, `ops`, `corruptions`, ...).
    `cases` replays only the named cases (the names the report prints).
    """
    known = settings_of(ScriptExploreConfig)
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise UsageError(f"unknown setting {', '.join(unknown)}: explore --script takes "
                         f"{', '.join(n for n in known if n != 'script')}")
    config = ScriptExploreConfig(script=script, **settings)
    return run_script_exploration(config, prepare_workdir(workdir), cases, progress)


def run_script_exploration(config: ScriptExploreConfig, root: Path, only: Optional[Sequence[str]] = None,
                           progress: Optional[Progress] = None) -> Report:
    started = time.monotonic()

    def report(results: list[CaseResult], warnings: tuple[str, ...] = (), note: str = "") -> Report:
        return Report(config.script, config.world_size, results, time.monotonic() - started, "explore", note,
                      config.values, warnings)

    try:
        golden = script_golden(config, root)
    except BaselineFailed as failed:
        return report([failed.result])
    base = script_baseline(config, root, golden, committed_run=False)
    known = base.config
    results, warnings = explore_baseline(base, only, progress)
    note = f"save {known.k} broken (the script saved at steps {', '.join(map(str, known.save_steps))}); " \
           f"durability model {known.durability}"
    return report(results, warnings, note)


def script_golden(config: ScriptExploreConfig, root: Path) -> Run:
    """The golden run every case of `config`'s script is judged against (traced,
    every byte logged); raises `BaselineFailed` if it failed or saved nothing
    the harness can number."""
    golden = baselines.golden_run(config, root)
    unnamed = oracle.judge_named_steps("golden", golden)
    if unnamed is not None or not oracle.save_steps(golden):
        raise BaselineFailed(unnamed or oracle.cannot_judge(
            "golden", "saves", "the script never saved into the checkpoint directory: there is no save to break "
                               "(give {ckpt_dir} where it writes its checkpoints)"))
    return golden


def script_baseline(config: ScriptExploreConfig, root: Path, golden: Run, *, committed_run: bool) -> Baseline:
    """The baseline of `config` once its golden run (`script_golden`) told the
    save steps: raises ConfigError for a `save` step the script never made.
    `committed_run` as `baseline.from_golden`'s."""
    known = knowing(config, golden)
    reference = oracle.Reference(oracle.saves_by_step(golden), known.k, known.prev, golden.states(Kind.FINAL))
    return baselines.from_golden(known, root, golden, reference, background=_saves_in_background(golden),
                                 committed_run=committed_run)


def knowing(config: ScriptExploreConfig, golden: Run) -> ScriptExploreConfig:
    """`config` once `golden` made its saves (`ScriptExploreConfig.knowing`)."""
    return config.knowing({step: oracle.savers(golden, step) for step in oracle.save_steps(golden)})


def _saves_in_background(golden: Run) -> bool:
    """Did a save of the golden run go on writing after it returned (an async
    checkpoint's writer thread, `inject.saves`)? Then a run stopped after save
    k waits for it, which the golden trace does not show: no state is derived."""
    return any(rec["event"] == Kind.SAVED and rec.get("background") for r in golden.ranks for rec in r.records)
