"""Checks: how each kind of catalogue scenario is run.

A scenario names its check (`check = "faults"`). A check declares the
parameters a scenario may set (`params`: run settings from
`config.SETTINGS` with the check's own defaults, and settings of its own),
validates them together, and runs the scenario on a bench: it launches what
it needs and returns the oracle's results of its cases, which the bench
folds into the scenario's verdict. A check is written once for every target
(`ckpt_harness.targets`): what it needs that some targets cannot do, it
names in `requires` (capabilities, see `targets.Capabilities`), and the
bench makes it n/a on those, in the target's words; anything else that
does not apply raises `NotApplicable` saying why.

Other packages add checks under the entry-point group `ckpt_harness.checks`:

    [project.entry-points."ckpt_harness.checks"]
    my-check = "my_package.checks:MY_CHECK"     # an object satisfying `Check`
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Protocol, Sequence, runtime_checkable

from ckpt_harness.config import SETTINGS, Setting
from ckpt_harness.errors import ScenarioError, UsageError
from ckpt_harness.extensions import registered, with_entry_points
from ckpt_harness.targets import NotApplicable
from ckpt_harness.targets.base import capability

if TYPE_CHECKING:
    from pathlib import Path

    from ckpt_harness.catalogue.scenario import Scenario
    from ckpt_harness.config import ExplorePlan
    from ckpt_harness.pipeline.baseline import Baseline
    from ckpt_harness.records.runs import Run
    from ckpt_harness.targets import Target
    from ckpt_harness.verdict import CaseResult

__all__ = ["BUILTIN_CHECKS", "Bench", "Check", "NotApplicable", "get", "registry", "run_settings"]

ENTRY_POINT_GROUP = "ckpt_harness.checks"

BUILTIN_CHECKS = {
    "resume": "ckpt_harness.catalogue.checks.resume:CHECK",
    "faults": "ckpt_harness.catalogue.checks.faults:CHECK",
    "overwrite": "ckpt_harness.catalogue.checks.overwrite:CHECK",
    "reshard": "ckpt_harness.catalogue.checks.reshard:CHECK",
    "stall": "ckpt_harness.catalogue.checks.stall:CHECK",
    "retention": "ckpt_harness.catalogue.checks.retention:CHECK",
    "convert": "ckpt_harness.catalogue.checks.convert:CHECK",
    "confuse": "ckpt_harness.catalogue.checks.convert:CONFUSE",
    "conflicts": "ckpt_harness.catalogue.checks.conflicts:CHECK",
    "neutral": "ckpt_harness.catalogue.checks.neutral:CHECK",
}


class Bench(Protocol):
    """What a check asks of the bench it runs on (`catalogue.bench.Bench` is
    the one): the target under a scenario's settings, the runs and baselines
    the bench's scenarios share, where its runs go and how a case is
    replayed. A protocol, so the checks know the bench by what they ask of
    it, as DCP's planner knows a storage writer, and the bench imports them
    without a way back."""

    #: The processes per run it gives a case's runs, and the directory they go under.
    parallel: int
    root: "Path"
    #: Which cases keep a timeline of their runs (the setting of that name).
    timelines: str
    #: What each finished case is told to (`progress(done, total, result)`), if anything.
    progress: Any

    @property
    def world_size(self) -> int: ...

    def target_for(self, params: Mapping[str, Any], **changes: Any) -> "Target":
        """The bench's target with a scenario's run settings (`NotApplicable` for one it cannot honour)."""

    def plan(self, params: Mapping[str, Any], **changes: Any) -> "ExplorePlan":
        """How a scenario breaks a save, with the bench's parallelism and reductions."""

    def golden(self, target: "Target") -> "Run":
        """The golden run of `target`, shared; `BaselineFailed` if it failed."""

    def known(self, target: "Target", requires: Sequence[str] = ()) -> "Target":
        """`target` as its golden run showed it; `NotApplicable` if it lacks one of `requires`."""

    def baseline(self, target: "Target", plan: "ExplorePlan", *, committed: bool = False) -> "Baseline":
        """The baseline of `plan` on `target`, shared by every scenario breaking the same save."""

    def split(self, scenario: "Scenario", cases: Sequence[Any]) -> list[Any]:
        """The part of `cases` this bench runs (its shard's)."""

    def within_budget(self, scenario: "Scenario", base: "Baseline", cases: Sequence[Any]) -> list[Any]:
        """The cases this bench runs within its case budget."""

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        """`make()` once per key on this bench; callers of one key wait for the first."""

    def repro(self, scenario: "Scenario", case: Optional[str] = None) -> str:
        """The command that runs `scenario` (its `case`) on this bench again."""


@runtime_checkable
class Check(Protocol):
    #: The parameters a scenario may set, with their defaults.
    params: Sequence[Setting]
    # Optionally `requires`: the capabilities its runs need ("full_state",
    # "overwrite_flag", ...: `targets.Capability`, checked as the check is
    # loaded); a target lacking one makes the scenario n/a with its reason.

    def validate(self, params: Mapping[str, Any]) -> Optional[str]:
        """A problem with these parameters together, in words, or None."""

    def run(self, bench: "Bench", scenario: "Scenario", only: Optional[Sequence[str]]) -> Sequence["CaseResult"]:
        """Run the scenario's cases (only those named in `only`, if given) and
        return the oracle's results."""


def run_settings(*names: str, **defaults: Any) -> tuple[Setting, ...]:
    """Shared run settings as a check's parameters: `names` with their own
    defaults, `defaults` with the check's."""
    return (*(SETTINGS[name] for name in names),
            *(SETTINGS[name].with_default(value) for name, value in defaults.items()))


@functools.lru_cache(maxsize=None)
def registry() -> dict[str, str]:
    """Every check by name -> "module:attribute": the built-in ones, then installed packages'."""
    return with_entry_points(ENTRY_POINT_GROUP, BUILTIN_CHECKS)


@functools.lru_cache(maxsize=None)
def get(name: str) -> Check:
    target = registry().get(name)
    if target is None:
        raise ScenarioError(f"unknown check {name!r}; choose from {', '.join(registry())}")
    check = registered("check", name, target, Check, ScenarioError,
                       "has no params, validate() and run(): see ckpt_harness.catalogue.checks.Check")
    for needed in getattr(check, "requires", ()):
        try:
            capability(needed)
        except UsageError as exc:
            raise ScenarioError(f"check {name!r} ({target}) requires {exc}") from None
    return check
