"""A bench: one job at one world size, and the runs its scenarios share.

Scenarios that ask for the same config share one baseline (golden run,
fault points, committed save), so a catalogue costs one golden run per
distinct config rather than one per scenario. Running a scenario on a bench
is the one place its check's results become a `ScenarioResult`.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from ckpt_harness.pipeline import baseline as baselines
from ckpt_harness.catalogue import checks
from ckpt_harness.pipeline.baseline import Baseline, BaselineFailed
from ckpt_harness.config import SETTINGS, ExploreConfig, settings_of, shown
from ckpt_harness.errors import ConfigError, UsageError
from ckpt_harness.jobref import resolve
from ckpt_harness.run import repro_line
from ckpt_harness.catalogue.scenario import Scenario, ScenarioResult, not_applicable, summarize
from ckpt_harness.verdict import CaseResult, Verdict


class Bench:
    """`progress(done, total, result)` is called as cases finish, with counts
    within the current scenario.

    Thread-safe: scenarios may run on one bench at once (the matrix does), and
    each shared run is still made once; a scenario waiting for a baseline
    another one prepares waits for that one only.
    """

    def __init__(self, job: Union[str, type], world_size: int, root: Path, *,
                 timeout: float = SETTINGS["timeout"].default, parallel: int = SETTINGS["parallel"].default,
                 progress: Optional[Callable[[int, int, CaseResult], None]] = None, reduce: bool = True):
        self.ref, self.job_class = resolve(job)
        self.world_size = SETTINGS["world_size"].check(world_size)
        self.timeout = SETTINGS["timeout"].check(timeout)
        self._shared(root, parallel, progress, reduce)

    def _shared(self, root: Path, parallel: int, progress: Optional[Callable[[int, int, CaseResult], None]],
                reduce: bool) -> None:
        """What every bench has, whatever runs on it (a Job here, a script in `script_bench`)."""
        self.parallel = SETTINGS["parallel"].check(parallel)
        self.root = Path(root)
        self.progress = progress
        #: False runs every case's faulted save and resume (`derive_states`,
        #: `share_resumes` off): the naive catalogue, to compare against.
        self.reduce = reduce
        self._memo: dict[Any, _Once] = {}
        self._numbers = itertools.count()
        self._lock = threading.Lock()

    @property
    def job(self) -> str:
        return self.ref.display

    def config(self, params: dict[str, Any], cls: type = ExploreConfig, **changes: Any) -> Any:
        """The config of `cls` for this bench and a scenario's parameters (those `cls` takes)."""
        takes = settings_of(cls)
        values = {k: v for k, v in params.items() if k in takes}
        values.update(world_size=self.world_size, timeout=self.timeout, **changes)
        if "parallel" in takes:
            values["parallel"] = self.parallel
        values.update({name: self.reduce for name in ("derive_states", "share_resumes") if name in takes})
        return cls.build(self.ref, **values)

    def baseline(self, config: ExploreConfig) -> Baseline:
        """The prepared baseline of `config`, shared by every scenario that asks
        for the same one; raises `BaselineFailed` (every time) if its golden run failed."""
        def prepare() -> Any:
            try:
                return baselines.prepare(config, self.root / f"ex{next(self._numbers)}")
            except BaselineFailed as failed:
                return failed.result

        found = self.memo(("baseline", config.runs), prepare)
        if not isinstance(found, Baseline):
            raise BaselineFailed(found)
        return found.with_config(config)

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        """`make()` once per key on this bench (runs several scenarios share);
        callers of the same key wait for the first, other keys go on."""
        with self._lock:
            once = self._memo.setdefault(key, _Once())
        return once.get(make)

    def repro(self, scenario: Scenario, case: Optional[str] = None) -> str:
        args = ["scenario", scenario.name, "--job", self.job, "--world-size", shown(self.world_size),
                "--timeout", shown(self.timeout)]
        if not scenario.builtin:
            args += ["--file", scenario.source]
        return repro_line(self.ref, args + (["--case", case] if case else []))

    def run(self, scenario: Scenario, cases: Optional[Sequence[str]] = None, *,
            progress: Optional[Callable[[int, int, CaseResult], None]] = None) -> ScenarioResult:
        """Run `scenario`'s check here and fold its results; a harness error in
        it is this scenario's ERROR, with the traceback, never a FAIL.
        `progress` replaces the bench's for this scenario (concurrent scenarios
        each count their own cases)."""
        started = time.monotonic()
        check = checks.get(scenario.check)
        bench = self
        if progress is not None:  # a view sharing every run made so far, reporting elsewhere
            bench = copy.copy(self)
            bench.progress = progress
        try:
            results = check.run(bench, scenario, cases)
        except (checks.NotApplicable, ConfigError) as exc:  # e.g. nodes = 2 at world size 3
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
        return _with_elapsed(result, time.monotonic() - started)


class _Once:
    """A value made by the first caller; later callers wait for it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.made = False
        self.value: Any = None

    def get(self, make: Callable[[], Any]) -> Any:
        with self.lock:
            if not self.made:
                self.value, self.made = make(), True
            return self.value


def _with_elapsed(result: ScenarioResult, elapsed: float) -> ScenarioResult:
    return dataclasses.replace(result, elapsed=elapsed)

