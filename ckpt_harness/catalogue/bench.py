"""A bench: one target (a job at one world size, a script at one layout), and the runs its scenarios share.

Scenarios share what they can: one golden run per distinct target (a
script's scenarios all share its one, since its own arguments set its
shape), one baseline per target and broken save, so a catalogue costs one
golden run per distinct target rather than one per scenario. Running a
scenario on a bench is the one place its check's results become a
`ScenarioResult`, and where a check that needs what the target cannot do is
n/a, saying why.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from ckpt_harness.catalogue import checks
from ckpt_harness.catalogue.scenario import Scenario, ScenarioResult, not_applicable, summarize
from ckpt_harness.catalogue.shards import CasePart, Shard
from ckpt_harness.config import SETTINGS, ExplorePlan, settings_of
from ckpt_harness.errors import ConfigError, UsageError
from ckpt_harness.pipeline import baseline as baselines
from ckpt_harness.pipeline import budget as budgets
from ckpt_harness.pipeline import confirm
from ckpt_harness.pipeline.baseline import Baseline, BaselineFailed
from ckpt_harness.pipeline.memo import Memo
from ckpt_harness.records.runs import Run
from ckpt_harness.targets import NotApplicable, Target
from ckpt_harness.verdict import CaseResult, Verdict


class Bench:
    """`progress(done, total, result)` is called as cases finish, with counts
    within the current scenario.

    Thread-safe: scenarios may run on one bench at once (the matrix does), and
    each shared run is still made once; a scenario waiting for a baseline
    another one prepares waits for that one only.
    """

    def __init__(self, target: Target, root: Path, *, parallel: int = SETTINGS["parallel"].default,
                 progress: Optional[Callable[[int, int, CaseResult], None]] = None, reduce: bool = True,
                 name: Optional[str] = None, timelines: str = SETTINGS["timelines"].default,
                 shard: Optional[Shard] = None, max_cases: Optional[int] = None):
        self.target = target.breakable()
        #: The row its results are filed under (a matrix tells apart rows their targets do not).
        self.name = name or target.row
        self.parallel = SETTINGS["parallel"].check(parallel)
        self.root = Path(root)
        self.progress = progress
        #: False runs every case's faulted save and resume (`derive_states`,
        #: `share_resumes` off): the naive catalogue, to compare against.
        self.reduce = reduce
        #: Which cases keep a timeline of their runs (the setting of that name).
        self.timelines = SETTINGS["timelines"].check(timelines)
        #: Run only this part of each scenario's cases (`scenario --shard K/N`).
        self.shard = shard
        #: Run at most this many of a scenario's cases (`scenario --max-cases N`, `pipeline.budget`).
        self.max_cases = SETTINGS["max_cases"].check(max_cases)
        refuse_budget_and_shard(max_cases, shard)
        #: What each scenario run in part planned in all, by name (`split`).
        self._planned: dict[str, tuple[str, ...]] = {}
        #: What the case budget left out of each scenario, and how to run it (`within_budget`).
        self._left_out: dict[str, str] = {}
        self._memo = Memo()
        self._numbers = itertools.count()
        self._targets = itertools.count()

    @property
    def job(self) -> str:
        return self.name

    @property
    def world_size(self) -> int:
        return self.target.world_size

    def target_for(self, params: Mapping[str, Any], **changes: Any) -> Target:
        """The bench's target with a scenario's run settings; `NotApplicable`
        for a setting it cannot honour (a script's rotation)."""
        return self.target.with_settings({**params, **changes})

    def plan(self, params: Mapping[str, Any], **changes: Any) -> ExplorePlan:
        """How a scenario breaks a save: its explore settings, the bench's
        parallelism and reductions."""
        takes = settings_of(ExplorePlan)
        values = {k: v for k, v in {**params, **changes}.items() if k in takes}
        values.update(parallel=self.parallel, derive_states=self.reduce,
                      share_resumes=self.reduce, timelines=self.timelines)
        return ExplorePlan(**values)

    def golden(self, target: Target) -> Run:
        """The golden run of `target` (traced, every byte logged), shared by
        every scenario of this bench that runs it; raises `BaselineFailed`
        (every time) if it failed or saved nothing to break."""
        def make() -> Any:
            target.preflight()
            n = next(self._targets)  # the bench's own target's golden run in golden/, another's in targetN/golden/
            try:
                return baselines.golden_run(target, self.plan({}), self.root / f"target{n}" if n else self.root)
            except BaselineFailed as failed:
                return failed.result

        found = self.memo(("golden", target), make)
        if not isinstance(found, Run):
            raise BaselineFailed(found)
        return found

    def known(self, target: Target, requires: Sequence[str] = ()) -> Target:
        """`target` as its golden run showed it (its save steps, whether it
        saves in the background or declares a full state), made only for a
        target that does not know them beforehand; raises `NotApplicable`
        if it lacks one of `requires` after all, `BaselineFailed` as
        `golden` does."""
        known = target if target.caps.steps_known else target.knowing(self.golden(target))
        lacking = [name for name in requires if not known.caps.has(name)]
        if lacking:
            raise NotApplicable(known.caps.lacks[lacking[0]])
        return known

    def baseline(self, target: Target, plan: ExplorePlan, *, committed: bool = False) -> Baseline:
        """The baseline of `plan` on `target`, shared by every scenario that
        breaks the same save; raises `BaselineFailed` if its golden run failed,
        ConfigError for a save step the target does not make. The run stopped
        after save k is made where corruption cases (or `committed`) need its
        directory, or the golden trace does not replay to the golden run's."""
        plan = baselines.without_power_loss(target, plan)  # before the golden run: refused as explore refuses it
        golden = self.golden(target)
        known = target.knowing(golden)
        k = baselines.broken(known, plan)
        need = committed or bool(plan.corruptions)
        found = self.memo(("baseline", known, k, need), lambda: dataclasses.replace(baselines.from_golden(
            known, plan, self.root / f"ex{next(self._numbers)}", golden, committed_run=need),
            # a case confirmed cold stands on the cold golden run the bench's other checks confirm theirs on
            made_cold=lambda: self.cold(None).baseline(target.replace(cold_start=True), plan, committed=need)))
        return found.with_plan(plan)

    def split(self, scenario: Scenario, cases: Sequence[Any]) -> list[Any]:
        """The part of `scenario`'s planned `cases` this bench runs (all of
        them unless it has a `shard`), noting every one's name for the merge."""
        if self.shard is None:
            return list(cases)
        self._planned[scenario.name] = tuple(c.name for c in cases)
        return self.shard.part(cases)

    def within_budget(self, scenario: Scenario, base: Baseline, cases: Sequence[Any]) -> list[Any]:
        """The cases of `scenario` this bench runs within its case budget (all
        of them without one), noting what was left out and the command that
        runs it (the scenario's report says so)."""
        if self.max_cases is None:
            return list(cases)
        chosen, left = budgets.within(cases, self.max_cases)
        if left:
            self._left_out[scenario.name] = budgets.left_out(
                self.max_cases, chosen, left, self.target.shell(self._command(scenario)))
        return chosen

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        """`make()` once per key on this bench (runs several scenarios share):
        the pipelines' one memo (`pipeline.memo`)."""
        return self._memo.once(key, make)[0]

    def cold(self, names: Optional[Sequence[str]]) -> "Bench":
        """This bench with cold starts, to judge again the cases a warm start
        left in doubt (`confirm.confirm_cases`): in directories of its own (a
        check's runs go by scenario and case), sharing the runs already made.
        Its golden run is its own, cold (the memo goes by target): a script's
        ranks start warm themselves, so a warm golden run's states could be
        a warm start's, and a cold case judged against them would not be
        confirmed. Given those cases by name, it runs them all: a shard's
        part was taken already."""
        cold = copy.copy(self)
        cold.target, cold.root = self.target.replace(cold_start=True), self.root / "cold"
        if names is not None:
            cold.shard = None
        return cold

    def repro(self, scenario: Scenario, case: Optional[str] = None) -> str:
        return self.target.shell(self._command(scenario) + (["--case", case] if case else []))

    def _command(self, scenario: Scenario) -> list[str]:
        args = ["scenario", scenario.name, *self.target.bench_args()]
        return args + (["--file", scenario.source] if not scenario.builtin else [])

    def not_applicable(self, scenario: Scenario) -> Optional[str]:
        """Why `scenario` cannot run on this bench's target (None: it can):
        its check needs what the target lacks, or it sets what the target
        cannot take."""
        caps = self.target.caps
        check = checks.get(scenario.check)
        lacking = [name for name in getattr(check, "requires", ()) if not caps.has(name)]
        if lacking:
            return caps.lacks[lacking[0]]
        # the run settings it sets (a check's own parameter may share a setting's name, not its meaning)
        run = {s.name: scenario.params[s.name] for s in check.params
               if s.name in SETTINGS and s.kind is SETTINGS[s.name].kind}
        try:
            self.target_for(run)
        except (NotApplicable, ConfigError) as exc:  # e.g. nodes = 2 at world size 3
            return str(exc)
        return None

    def run(self, scenario: Scenario, cases: Optional[Sequence[str]] = None, *,
            progress: Optional[Callable[[int, int, CaseResult], None]] = None) -> ScenarioResult:
        """Run `scenario`'s check here and fold its results; a harness error in
        it is this scenario's ERROR, with the traceback, never a FAIL.
        `progress` replaces the bench's for this scenario (concurrent scenarios
        each count their own cases)."""
        started = time.monotonic()
        why = self.not_applicable(scenario)
        if why is not None:
            return _with_elapsed(not_applicable(self.job, scenario, why), time.monotonic() - started)
        check = checks.get(scenario.check)
        if self.shard is not None:
            refuse_split(scenario)
        bench = self
        if progress is not None:  # a view sharing every run made so far, reporting elsewhere
            bench = copy.copy(self)
            bench.progress = progress
        try:
            results = check.run(bench, scenario, cases)
            results = confirm.confirm_cases(results, lambda names: check.run(bench.cold(names), scenario,
                                                                             cases if names is None else names))
        except (NotApplicable, ConfigError) as exc:  # e.g. nodes = 2 at world size 3
            result = not_applicable(self.job, scenario, str(exc))
        except BaselineFailed as failed:
            result = summarize(self.job, scenario, [failed.result])
        except UsageError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported as ERROR, not swallowed
            result = ScenarioResult(scenario.name, self.job, scenario.property, Verdict.ERROR,
                                    f"the harness failed running it: {type(exc).__name__}: {exc}",
                                    details=traceback.format_exc())
        else:
            result = summarize(self.job, scenario, results, getattr(check, "unit", "cases"))
            if self.shard is not None and scenario.name in self._planned:
                result = dataclasses.replace(result, part=CasePart(self.shard, self._planned[scenario.name]))
            if scenario.name in self._left_out:
                result = dataclasses.replace(result, left_out=self._left_out[scenario.name])
        return _with_elapsed(result, time.monotonic() - started)


def refuse_split(scenario: Scenario) -> None:
    """UsageError unless `scenario`'s check splits its cases (`Bench.shard`)."""
    if not getattr(checks.get(scenario.check), "splits", False):
        raise UsageError(f"--shard: scenario {scenario.name} ({scenario.check} check) runs a handful of cases, too "
                         f"few to split; a faults scenario's cases are: run this one whole, or split a catalogue "
                         f"by scenario with `ckpt-harness matrix --shard K/N`")


def refuse_budget_and_shard(max_cases: Optional[int], shard: Optional[Shard]) -> None:
    """UsageError when both are given: a shard runs its part of every case, a budget a chosen few."""
    if max_cases is not None and shard is not None:
        raise UsageError("--shard and --max-cases: a shard runs its part of every case, a budget a chosen few of "
                         "them; give one of the two")


def _with_elapsed(result: ScenarioResult, elapsed: float) -> ScenarioResult:
    return dataclasses.replace(result, elapsed=elapsed)
