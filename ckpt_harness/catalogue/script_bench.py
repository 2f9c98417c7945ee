"""A bench for an unmodified script under torchrun: a `matrix --script` row.

The catalogue's scenarios run on it as on a Job's bench, through the same
checks: a scenario's settings become a `ScriptConfig` (for `RunConfig`) or
a `ScriptExploreConfig` (for `ExploreConfig`), whose runs `run.launch`
starts under torchrun, and the script pipelines judge them (`script_mode`'s
verification, `script_explore`'s baseline). What stays a Job's:

* the run's shape (`steps`, `save_every`, `seed`): a script's own arguments
  set it, so a scenario's values are not used;
* settings whose Job value does not carry over to torchrun runs
  (`hang_timeout` and the bench's timeout: fresh interpreters take seconds
  to start), which the script config keeps as its own;
* any other setting a scenario sets that a script cannot take (`keep_last`,
  `nodes`, `rotates`...), and checks that run Jobs only (`checks.script_mode`):
  the scenario is n/a, saying why; never a FAIL or an ERROR.

One golden run (traced, as an exploration's) serves every scenario of the
row: the explorations' baselines and the verification alike.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ckpt_harness.catalogue import checks
from ckpt_harness.pipeline.baseline import Baseline, BaselineFailed
from ckpt_harness.catalogue.bench import Bench
from ckpt_harness.config import SETTINGS, ExploreConfig, ScriptConfig, ScriptExploreConfig, cli_args, settings_of
from ckpt_harness.errors import ConfigError
from ckpt_harness.records import Run
from ckpt_harness.catalogue.scenario import Scenario, ScenarioResult, not_applicable
from ckpt_harness.verdict import CaseResult

#: A Job run's shape, which a script's own arguments set.
SHAPE = ("steps", "save_every", "seed")
#: Settings a script config keeps as its own whatever a scenario says: a
#: Job's deadlines do not fit a torchrun run of fresh interpreters.
OWN = ("hang_timeout",)
#: Why a Job setting a scenario sets makes it n/a for a script (others: generic).
JOB_ONLY = {
    "keep_last": "a script keeps its checkpoints by its own arguments, which a scenario cannot set "
                 "(give them in --script)",
    "rotates": "it needs a save that rotates out the previous one through keep_last, a Job's setting",
    "nodes": "simulated nodes are a Job's; a script gets real ones from --nnodes",
    "overwrite": "the harness cannot set a script's overwrite flag",
    "backend": "a script picks its own backend in init_process_group",
}
#: The longest row name before it is cut.
NAME_LENGTH = 80


def row_name(script: str, limit: int = NAME_LENGTH) -> str:
    """The script's command as a row of the matrix: its file's name, then its
    arguments, cut to `limit`. Left out: its directories, a leading
    ``python``, and the checkpoint directory (with the option naming it),
    which every row has and which tells rows nothing apart."""
    from ckpt_harness.pipeline.script_mode import PLACEHOLDER

    words = shlex.split(script)
    if words and Path(words[0]).name.startswith("python") and len(words) > 1:
        words = words[1:]
    if words:
        words[0] = Path(words[0]).name
    kept: list[str] = []
    for word in words:
        if PLACEHOLDER in word:
            if kept and kept[-1].startswith("-") and "=" not in kept[-1] and len(kept) > 1:
                kept.pop()  # --output_dir {ckpt_dir}
            continue
        kept.append(word)
    name = " ".join(kept)
    return name if len(name) <= limit else name[: limit - 1] + "…"


def check_script(script: ScriptConfig) -> None:
    """Refuse a script that is not there (ConfigError), before any run: else
    every scenario of its row would be n/a, each saying so, for bad input."""
    from ckpt_harness.pipeline.script_mode import command

    path = command(script, Path("ckpt"))[0]
    if not Path(path).is_file():
        raise ConfigError(f"no script at {path!r} (--script {script.script!r}): give the path of a Python file "
                          "to run, then its arguments")


class ScriptBench(Bench):
    """`script` (its layout, timeout and command) is what every scenario's runs share."""

    def __init__(self, script: ScriptConfig, root: Path, *, parallel: int = SETTINGS["parallel"].default,
                 progress: Optional[Callable[[int, int, CaseResult], None]] = None, reduce: bool = True,
                 name: Optional[str] = None):
        if script.max_restarts:
            raise ConfigError("a matrix row runs each resume itself, and torchrun restarting a faulted "
                              "group would run its fault again: leave out --max-restarts")
        check_script(script)
        self.script = script
        self.name = name or row_name(script.script)
        self.ref = self.job_class = None  # no Job: checks that need one are n/a (`not_applicable`)
        self.world_size = script.world_size
        self.timeout = script.timeout
        self._shared(root, parallel, progress, reduce)

    @property
    def job(self) -> str:
        return self.name

    def config(self, params: dict[str, Any], cls: type = ExploreConfig, **changes: Any) -> Any:
        """The script config for a scenario's parameters: `ScriptExploreConfig`
        where a check asks for an `ExploreConfig`, else `ScriptConfig`; of the
        parameters, those the script config takes but `OWN`."""
        target = ScriptExploreConfig if issubclass(cls, ExploreConfig) else ScriptConfig
        takes = settings_of(target)
        values = {k: v for k, v in {**params, **changes}.items() if k in takes and k not in OWN}
        values.update(self.script.values)
        if target is ScriptExploreConfig:
            values.update(parallel=self.parallel, derive_states=self.reduce, share_resumes=self.reduce)
        return target(**values)

    def golden(self) -> Run:
        """The row's one golden run (traced, every byte logged); raises
        `BaselineFailed` (every time) if it failed or saved nothing numbered."""
        from ckpt_harness.pipeline.script_explore import script_golden

        def make() -> Any:
            try:
                return script_golden(self.config({}), self.root)
            except BaselineFailed as failed:
                return failed.result

        found = self.memo(("golden",), make)
        if not isinstance(found, Run):
            raise BaselineFailed(found)
        return found

    def baseline(self, config: ScriptExploreConfig) -> Baseline:
        """As `Bench.baseline`, from the row's golden run. The run stopped after
        save k is made only for scenarios that corrupt its files (as
        `explore --script`), so those share a baseline of their own."""
        from ckpt_harness.pipeline.script_explore import knowing, script_baseline

        golden = self.golden()
        known = knowing(config, golden)  # a save step the script never made: ConfigError, n/a
        committed = bool(known.corruptions)
        found = self.memo(("baseline", known.runs, committed), lambda: script_baseline(
            known, self.root / f"ex{next(self._numbers)}", golden, committed_run=committed))
        return found.with_config(known)

    def repro(self, scenario: Scenario, case: Optional[str] = None) -> str:
        """The line that runs `scenario` on this script again (a matrix of one cell)."""
        args = ["ckpt-harness", "matrix", *cli_args(self.script), "--scenarios", scenario.name]
        return shlex.join(args + ([] if scenario.builtin else ["--file", scenario.source]))

    def not_applicable(self, scenario: Scenario) -> Optional[str]:
        """Why `scenario` cannot run on a script (None: it can)."""
        check = checks.get(scenario.check)
        why = checks.script_mode(check)
        if why is not None:
            return f"check {scenario.check!r} does not run scripts: {why}"
        defaults = {s.name: s.default for s in check.params}
        takes = settings_of(ScriptExploreConfig)
        job_only = [name for name, value in scenario.params.items()
                    if name not in takes and name not in SHAPE and value != defaults.get(name)]
        if not job_only:
            return None
        given = ", ".join(f"{name} = {_toml(scenario.params[name])}" for name in job_only)
        reasons = "; ".join(dict.fromkeys(JOB_ONLY.get(name, f"{name} is a Job's setting") for name in job_only))
        return f"it sets {given}, which only a Job takes: {reasons}"

    def run(self, scenario: Scenario, cases: Optional[Sequence[str]] = None, *,
            progress: Optional[Callable[[int, int, CaseResult], None]] = None) -> ScenarioResult:
        why = self.not_applicable(scenario)
        if why is not None:
            return not_applicable(self.job, scenario, why)
        return super().run(scenario, cases, progress=progress)


def _toml(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else repr(value)
