"""The scenario catalogue: checks named in data files, run against a job.

A scenario file (TOML) holds one table per scenario:

    [crash-every-phase]
    property = "atomic"                 # what a failure breaks (oracle.PROPERTIES)
    check = "faults"                    # how it is run (ckpt_harness.catalogue.checks)
    description = "SIGKILL one rank before every operation of a save"
    jobs = ["*"]                        # rows it applies to (names, or fnmatch patterns), default all
    faults = ["crash"]                  # the rest are the check's parameters

Files live in the repo's `scenarios/` directory (shipped inside the package
as `ckpt_harness/_scenarios`); the pytest plugin collects any `*.toml` in a
directory named `scenarios` as one item per scenario and job, and
`ckpt-harness matrix` runs the built-in ones against every registered job.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Union

from ckpt_harness.catalogue.names import named
from ckpt_harness.catalogue.shards import CasePart
from ckpt_harness.errors import ScenarioError, UsageError, did_you_mean
from ckpt_harness.oracle.causes import severity_of
from ckpt_harness.oracle.properties import SIDE_PROPERTIES
from ckpt_harness.verdict import CaseResult, Site, StateDiff, Verdict, fold

if TYPE_CHECKING:
    from ckpt_harness.report import Report

#: The keys of a scenario's table that are not its check's parameters.
RESERVED = ("property", "check", "description", "jobs")


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    property: str
    check: str
    description: str
    params: Mapping[str, Any]
    jobs: tuple[str, ...] = ("*",)
    source: str = ""

    def applies_to(self, job: str) -> bool:
        """Whether it runs on a row: a row with axes (``dcp[bf16]``) is a row of its job (``dcp``) too."""
        names = {job, job.partition("[")[0]}
        return any(named(name, pattern) for name in names for pattern in self.jobs)

    @property
    def named_jobs(self) -> tuple[str, ...]:
        """Jobs `jobs` names outright as module:Class (not patterns of registered names)."""
        return tuple(j for j in self.jobs if ":" in j and not any(c in j for c in "*?["))

    @property
    def builtin(self) -> bool:
        return not Path(self.source).is_file() or Path(self.source).resolve().parent == builtin_dir().resolve()

    @property
    def definition(self) -> tuple[Any, ...]:
        """What it runs, wherever its file is (a catalogue installed elsewhere
        is the same catalogue): what matrices to be merged must agree on."""
        return (self.name, self.property, self.check, self.description, dict(self.params), self.jobs)

    def to_json(self) -> dict[str, Any]:
        """As a matrix.json records it, so that the matrix can be resumed without its files."""
        return {"name": self.name, "property": self.property, "check": self.check, "description": self.description,
                "jobs": list(self.jobs), "params": dict(self.params), "source": self.source}


def default_jobs(scenarios: Sequence[Scenario]) -> list[str]:
    """The jobs scenarios run against when no job is given: every registered
    job one of them applies to, then the jobs they name as module:Class."""
    from ckpt_harness.jobs import registry

    chosen = [j for j in registry() if any(s.applies_to(j) for s in scenarios)]
    return chosen + [j for j in dict.fromkeys(j for s in scenarios for j in s.named_jobs) if j not in chosen]


@dataclasses.dataclass(frozen=True)
class ScenarioResult:
    """One scenario against one job: a matrix cell's worth of verdict."""

    scenario: str
    job: str
    property: str
    verdict: Verdict
    #: One line: what happened, or why it could not be judged.
    reason: str
    repro: Optional[str] = None
    details: str = ""
    cases: int = 0
    elapsed: float = 0.0
    #: The judged cases behind the verdict (none when it was never run: n/a, a harness error).
    results: tuple[CaseResult, ...] = dataclasses.field(default=(), repr=False)
    #: Its cases folded per property they judged, when that is not only its
    #: own (error-every-phase judges `preserving`, and `live` where the error
    #: reached one rank only): what it puts in each matrix cell (`under`).
    by_property: tuple["ScenarioResult", ...] = ()
    #: Run as one shard of its cases (`scenario --shard K/N`): which, of what.
    part: Optional[CasePart] = None
    #: How bad its failing state comparisons are (`causes.Severity.option`); "" unless it fails,
    #: or when a failure of it is not a state comparison's (a hang, a torn file).
    severity: str = ""
    #: Run within a case budget (`scenario --max-cases N`): what it left out, and the command that runs it.
    left_out: str = ""

    def under(self, prop: str) -> Optional["ScenarioResult"]:
        """What this scenario says about `prop`, for that property's cell.

        About its own property: its cases judged under it, folded; when none
        was (n/a, never run, a golden run that failed), itself, its failure
        undecided there if another property's (that cell has it). About
        another property: only a failure of it (a pass there is incidental
        evidence, which would make a cell whose own scenarios are n/a pass);
        None when it says nothing."""
        part = next((r for r in self.by_property if r.property == prop), None)
        if prop != self.property:
            return part if part is not None and part.verdict is Verdict.FAIL else None
        if part is not None or not self.by_property:
            return part or self
        if self.verdict is Verdict.FAIL:
            return dataclasses.replace(self, verdict=Verdict.UNKNOWN, by_property=(),
                                       reason=f"not judged, since another property failed first: {self.reason}")
        return dataclasses.replace(self, by_property=())

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    @property
    def causes(self) -> frozenset[str]:
        """Why it did not pass (`oracle.causes`): the causes of its cases'
        judgments with its verdict; none when it passed, or was never run."""
        from ckpt_harness.oracle.causes import causes_of

        return causes_of(self.results, self.verdict) if not self.verdict.ok else frozenset()

    def report(self, world_size: int, settings: Mapping[str, Any]) -> "Report":
        """As a report of its cases; a scenario never run is one case of its own."""
        from ckpt_harness.report import Report

        cases = self.results or (CaseResult(self.scenario, self.property, self.verdict, self.reason, self.details,
                                            self.repro),)
        note = f"{self.scenario} [{self.property}]" + self._of_shard()
        shard = None
        if self.part is not None:
            shard = {**self.part.to_json(), "result": self.to_json()}
        return Report(self.job, world_size, list(cases), self.elapsed, "scenario", note, dict(settings), shard=shard,
                      warnings=(self.left_out,) if self.left_out else ())

    def with_timelines(self, directory: Path, base: Optional[Path] = None) -> "ScenarioResult":
        """This result, its cases' timelines written into `directory` (named relative to `base` if
        given: `records.timeline.write_all`), its details naming them."""
        from ckpt_harness.records.timeline import write_all

        if not any(r.timeline is not None for r in self.results):
            return self
        results = tuple(write_all(self.results, directory, base))
        return dataclasses.replace(self, results=results, details=_details(results),
                                   by_property=tuple(p.with_timelines(directory, base) for p in self.by_property))

    def to_json(self) -> dict[str, Any]:
        """Every field (the entries of matrix.json's "scenarios"), its cases' results as `case_json`
        says them; `by_property` only when it says more than the scenario's own verdict, without the
        parts' details or cases."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("results", "by_property", "part")} | {"verdict": self.verdict.value}
        if self.part is not None:
            out["part"] = self.part.to_json()
        out["results"] = [case_json(r) for r in self.results]
        out["causes"] = sorted(self.causes)
        if self.by_property:
            out["by_property"] = [{**part.to_json(), "details": "", "results": []} for part in self.by_property]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ScenarioResult":
        """Back from `to_json`, its cases without what matrix.json does not keep (timings, timelines but
        their files). A matrix.json older than `by_property` gives a scenario that speaks for its own
        property only; one older than `results`, a scenario without its cases."""
        names = {f.name for f in dataclasses.fields(cls)} - {"results", "by_property", "part"}
        part = CasePart.from_json(data["part"]) if data.get("part") else None
        return cls(**{**{k: v for k, v in data.items() if k in names}, "verdict": Verdict(data["verdict"]),
                      "part": part,
                      "results": tuple(case_from_json(r) for r in data.get("results", ())),
                      "by_property": tuple(cls.from_json(part) for part in data.get("by_property", ()))})

    def _of_shard(self) -> str:
        if self.part is None:
            return ""
        return (f" (shard {self.part.shard}: {len({r.case for r in self.results})} of the "
                f"{len(self.part.planned)} cases planned; `ckpt-harness scenario {self.scenario} --merge FILE...` "
                f"puts the shards' JSON reports together)")

    def explain(self) -> str:
        """Its verdict and reason, its failing cases as the findings they share
        (`oracle.findings`), then each in full."""
        from ckpt_harness.oracle.findings import group

        lines = [f"{self.scenario} [{self.job}] {self.property}: {self.verdict.value.upper()} — {self.reason}"
                 + self._of_shard()]
        found = group(self.results)
        if len(found) > 1 or any(len(f.cases) > 1 for f in found):
            lines.append("its failing cases, by the finding they share:")
            lines += [f"  {i}. {f.check} {f.verdict.value.upper()}, {len(f.cases)} case{'s' * (len(f.cases) > 1)}: "
                      f"{f.headline}" for i, f in enumerate(found, 1)]
        if self.details:
            lines.append(self.details.rstrip())
        if self.repro and f"repro: {self.repro}" not in self.details:
            lines.append(f"repro: {self.repro}")
        if self.left_out:
            lines.append(f"warning: {self.left_out}")
        return "\n".join(lines)


def summarize(job: str, scenario: Scenario, results: Sequence[CaseResult], unit: str = "cases") -> ScenarioResult:
    """Fold the results of one scenario's cases into its verdict (`verdict.fold`),
    with a reason that names the first case behind it and counts the rest;
    and per property its cases judged (`ScenarioResult.by_property`) when that
    is more than its own."""
    flat = [j for r in results for j in r.judgments()]
    whole = _fold(job, scenario.name, scenario.property, results, flat, unit)
    groups: dict[str, list[CaseResult]] = {}
    for j in flat:
        groups.setdefault(j.check if j.check in SIDE_PROPERTIES else scenario.property, []).append(j)
    if set(groups) - {scenario.property}:
        parts = tuple(_fold(job, scenario.name, prop, group, group, unit) for prop, group in groups.items())
        whole = dataclasses.replace(whole, by_property=parts)
    return whole


def merge_parts(scenario: Scenario, parts: Sequence[tuple[str, ScenarioResult]]) -> ScenarioResult:
    """The shards of one scenario's cases (`scenario --shard K/N`), each with
    where it came from, as the one result an unsharded run gives: the cases
    in their planned order, folded anew (`summarize`). UsageError for shards
    that are not exactly shards 1..N of one run: another scenario or target,
    another case list (their golden runs planned different cases), a shard
    twice or missing."""
    if not parts:
        raise UsageError("give the JSON report of every shard to merge")
    for source, r in parts:
        if r.scenario != scenario.name:
            raise UsageError(f"{source}: a report of scenario {r.scenario}, not {scenario.name}")
        if r.part is None:
            raise UsageError(f"{source}: not a shard of {scenario.name} ({r.verdict.value}: {r.reason}); "
                             f"make each with `ckpt-harness scenario {scenario.name} --shard K/N --json FILE`")
    first_source, first = parts[0]
    assert first.part is not None
    for source, r in parts[1:]:
        assert r.part is not None
        if r.job != first.job:
            raise UsageError(f"{source} ran {r.job} and {first_source} {first.job}: the shards of one run are of "
                             f"one target")
        if r.part.shard.count != first.part.shard.count:
            raise UsageError(f"{source} is a shard of {r.part.shard.count}, {first_source} of "
                             f"{first.part.shard.count}: give the shards of one split")
        if r.part.planned != first.part.planned:
            raise UsageError(f"{source} planned other cases than {first_source} ({len(r.part.planned)} and "
                             f"{len(first.part.planned)}): their golden runs differed; run every shard with the "
                             f"same code, versions and settings")
    count = first.part.shard.count
    given = [r.part.shard.index for _, r in parts]  # type: ignore[union-attr]
    twice = sorted({k for k in given if given.count(k) > 1})
    missing = sorted(set(range(1, count + 1)) - set(given))
    if twice or missing:
        raise UsageError("; ".join(
            [f"shard {k}/{count} given {given.count(k)} times" for k in twice]
            + ([f"shards {', '.join(f'{k}/{count}' for k in missing)} missing"] if missing else [])))
    order = {name: i for i, name in enumerate(first.part.planned)}
    results: list[CaseResult] = []
    seen: set[tuple[str, str]] = set()
    for _, r in sorted(parts, key=lambda p: p[1].part.shard.index):  # type: ignore[union-attr]
        for case in r.results:
            if (case.case, case.check) not in seen:  # what every shard says once (nothing to corrupt)
                seen.add((case.case, case.check))
                results.append(case)
    results.sort(key=lambda c: order.get(c.case, len(order)))  # stable: a case's own checks keep their order
    return dataclasses.replace(summarize(first.job, scenario, results), elapsed=max(r.elapsed for _, r in parts))


def load_part(path: Union[str, Path]) -> tuple[ScenarioResult, dict[str, Any]]:
    """One shard's result out of its JSON report (`scenario --shard K/N --json
    FILE`), and the report's run settings (world size, settings): the
    shards of one run share them, but for `parallel` (each machine's own)."""
    import json

    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{path}: not valid JSON: {exc}") from None
    shard = data.get("shard") if isinstance(data, dict) and data.get("kind") == "scenario" else None
    if not isinstance(shard, dict) or "result" not in shard:
        raise UsageError(f"{path}: not the JSON report of a scenario shard; make each with "
                         f"`ckpt-harness scenario NAME --shard K/N --json FILE`")
    try:
        result = ScenarioResult.from_json(shard["result"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}: its shard is not one `ckpt-harness scenario` wrote ({exc})") from None
    return result, {"world_size": data.get("world_size"), "settings": data.get("settings", {})}


def _fold(job: str, name: str, prop: str, results: Sequence[CaseResult], flat: Sequence[CaseResult],
          unit: str) -> ScenarioResult:
    cases = len({r.case for r in results})
    verdict = fold(r.verdict for r in flat) if flat else Verdict.UNKNOWN
    behind = [r for r in flat if r.verdict is verdict]
    first = behind[0] if behind else None

    worst = severity_of(flat) if verdict is Verdict.FAIL else None

    def make(reason: str) -> ScenarioResult:
        return ScenarioResult(name, job, prop, verdict, reason,
                              first.repro if first is not None and not verdict.ok else None,
                              _details(results), cases, results=tuple(results),
                              severity=worst.option if worst is not None else "")

    if first is None:
        return make(f"no {unit} to run")
    n = len({r.case for r in behind})
    # "golden: golden: hang ..." says the case twice: a summary that names its run starts with it
    said = first.summary if first.summary.startswith(f"{first.case}: ") else f"{first.case}: {first.summary}"
    if verdict is Verdict.FAIL:
        checks = ", ".join(dict.fromkeys(r.check for r in behind))
        return make(f"{n} of {cases} {unit} fail ({checks}): {said}")
    if verdict is Verdict.ERROR:
        return make(f"{n} of {cases} {unit} could not be run: {said}")
    if verdict is Verdict.UNKNOWN:
        return make(f"{n} of {cases} {unit} undecided: {said}")
    if verdict is Verdict.NA:
        return make(first.summary)
    if (cases <= 2 and unit == "cases") or len(results) == 1:  # few enough to say what happened
        return make("; ".join(f"{r.case}: {r.summary}" for r in results))
    return make(f"{cases} {unit} pass")


def _details(results: Sequence[CaseResult]) -> str:
    """Every case that did not pass, in full."""
    return "\n\n".join(r.explain() for r in results if not r.verdict.ok)


def case_json(r: CaseResult) -> dict[str, Any]:
    """A case as matrix.json keeps it: what the HTML report shows of it (the
    details of the cases that did not pass only, to keep the file small)."""
    return {"case": r.case, "check": r.check, "verdict": r.verdict.value, "summary": r.summary,
            "details": r.details if not r.verdict.ok else "", "repro": r.repro, "cells": list(r.cells),
            "timeline": r.timeline_file, "differences": [d.to_json() for d in r.differences],
            "outcome": r.outcome, "also": [case_json(a) for a in r.also],
            **({"confirmed_cold": True} if r.confirmed_cold else {}),
            **({"site": r.site.to_json()} if r.site is not None else {}),
            **({"note": r.note} if r.note else {})}


def case_from_json(data: Mapping[str, Any]) -> CaseResult:
    return CaseResult(
        str(data["case"]), str(data["check"]), Verdict(data["verdict"]), str(data.get("summary", "")),
        str(data.get("details", "")), data.get("repro"), tuple(data.get("cells", ())),
        also=tuple(case_from_json(a) for a in data.get("also", ())), timeline_file=data.get("timeline"),
        outcome=data.get("outcome"), confirmed_cold=bool(data.get("confirmed_cold", False)),
        site=Site(**data["site"]) if data.get("site") else None, note=data.get("note"),
        differences=tuple(StateDiff(d["key"], int(d["rank"]), d["what"], d["kind"],
                                    tuple(d["first_index"]) if d.get("first_index") is not None else None,
                                    d.get("max_abs")) for d in data.get("differences", ())))


def not_applicable(job: str, scenario: Scenario, reason: str) -> ScenarioResult:
    return ScenarioResult(scenario.name, job, scenario.property, Verdict.NA, reason)


# -- loading ------------------------------------------------------------------------
def builtin_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "_scenarios"


def select(scenarios: Sequence[Scenario], patterns: Sequence[str]) -> list[Scenario]:
    """Scenarios whose name matches one of `patterns` (fnmatch); all if none given."""
    if not patterns:
        return list(scenarios)
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(s.name, p) for s in scenarios)]
    if unmatched:
        names = [s.name for s in scenarios]
        raise ScenarioError(
            f"no scenario named {', '.join(unmatched)}{did_you_mean(unmatched[0], names)}; choose from "
            f"{', '.join(names)}"
        )
    return [s for s in scenarios if any(fnmatch.fnmatchcase(s.name, p) for p in patterns)]
