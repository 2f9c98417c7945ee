"""Regression gating under pytest (`ckpt_harness.catalogue.expectations`): ``--ckpt-baseline FILE``
(or ini ``ckpt_baseline``) is read once; a scenario failure it expects is xfail with its reason, one that
now passes is XPASS, a new or worse one fails, and the summary says what the baseline should drop.
"""

from __future__ import annotations

from typing import Any, Optional

import pytest

_BASELINE = pytest.StashKey[Any]()
_GATED = pytest.StashKey[list]()


def load(config: pytest.Config) -> None:
    """Read the baseline once, at configure: a bad one is a usage error naming the option."""
    from ckpt_harness.catalogue import expectations
    from ckpt_harness.errors import UsageError

    path = config.getoption("--ckpt-baseline")
    if path is None and config.getini("ckpt_baseline"):
        path = (config.inipath.parent if config.inipath else config.rootpath) / config.getini("ckpt_baseline")
    if path is None:
        return
    try:
        config.stash[_BASELINE] = expectations.load(path)
    except UsageError as exc:
        raise pytest.UsageError(f"--ckpt-baseline: {exc}") from None


def expected_failure(config: pytest.Config, job: str, scenario: str) -> Optional[str]:
    """Why the baseline expects `scenario` against `job` to fail (its verdict, reason and where it is
    written), or None where it expects no failure: the item's xfail reason."""
    baseline = config.stash.get(_BASELINE, None)
    e = baseline.expected(job, scenario) if baseline is not None else None
    if e is None or e.verdict.ok:
        return None
    return f"expected {e.verdict.value}: {e.reason} ({e.where})"


def gate(config: pytest.Config, result: Any) -> Any:
    """The result against the baseline (None without one), kept for the summary."""
    baseline = config.stash.get(_BASELINE, None)
    if baseline is None:
        return None
    from ckpt_harness.catalogue.expectations import Judged

    config.stash.setdefault(_GATED, []).append(Judged.of(result))
    return baseline.judge(result.job, result.scenario, result.verdict, result.reason, result.causes)


def hand_over(config: pytest.Config) -> None:
    """In an xdist worker: what it gated, for the controller's summary."""
    if hasattr(config, "workeroutput"):
        config.workeroutput["ckpt_gated"] = [g.to_json() for g in config.stash.get(_GATED, [])]  # type: ignore


def from_worker(config: pytest.Config, output: dict) -> None:
    """What an xdist worker gated (`hand_over`), for the summary."""
    gated = output.get("ckpt_gated")
    if gated:
        from ckpt_harness.catalogue.expectations import Judged

        config.stash.setdefault(_GATED, []).extend(Judged.from_json(g) for g in gated)


def summary(terminalreporter: Any, config: pytest.Config) -> None:
    """What the run means against the baseline, fixed and stale entries included."""
    baseline = config.stash.get(_BASELINE, None)
    results = config.stash.get(_GATED, [])
    if baseline is None or not results:
        return
    from ckpt_harness.catalogue.scenario_files import builtin_catalogue

    catalogue = {s.name for s in builtin_catalogue()} | {r.scenario for r in results}
    gating = baseline.gate(results, catalogue=catalogue)
    terminalreporter.write_sep("-", "ckpt baseline")
    for line in gating.explain().splitlines():
        terminalreporter.write_line(line)
    if gating.outdated:
        terminalreporter.write_line(f"update the baseline {baseline.source}: drop its fixed and stale entries")
