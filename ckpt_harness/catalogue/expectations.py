"""Regression gating: judge a run against what a baseline says it should give.

A framework whose saves are not atomic fails some scenarios on every
version, so "exit 1 on any failure" cannot tell a regression from the
known state. A baseline names the verdicts a team already knows about,
each with its reason; against it, a run fails only on what changed:

- a failure the baseline expects is an expected failure, shown with its reason;
- a new failure, or a verdict worse than the baseline's, fails;
- a known failure that now passes is reported so the baseline can be updated;
- an entry that matches nothing the run could have produced is stale.

A baseline is either a `matrix.json` written by `ckpt-harness matrix` (every
scenario verdict of that run) or an expectations file checked into the
user's repo:

    [[expect]]
    job = "dcp"                          # job name (a row's own: dcp[bf16]), fnmatch patterns allowed
    scenario = "power-loss-after-save"   # scenario name, patterns allowed
    verdict = "fail"                     # pass, fail, unknown, error or n/a
    reason = "metadata not fsynced before the rename, pytorch#NNN"
    cause = ["durable · S_prev"]         # optional: why it fails (`oracle.causes`)

A failure is expected only for the causes its entry records (`cause`; a
matrix.json records every scenario's, from its cases): one that fails for
another cause too is a regression hiding behind a known failure, and fails
the build. An entry without `cause` accepts any.

`run` and `explore` are gated case by case: their entries name a `case`
(as repro lines do, patterns allowed: `delay@r0:after_save6#*`) instead of
a scenario, and a case's verdict is the fold of its checks (`case_verdicts`).

A name is matched as itself first, then as a pattern (`catalogue.names`).

The first entry that matches a result decides it. Torch-free: the CLI and
the pytest plugin load a baseline before anything runs.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import sys
from pathlib import Path
from typing import Any, Collection, Iterable, Optional, Sequence, Union

from ckpt_harness.catalogue.names import named
from ckpt_harness.errors import UsageError
from ckpt_harness.verdict import PRECEDENCE, Verdict, fold

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

_KEYS = ("job", "scenario", "verdict", "reason")
#: The optional key of the causes a failure is expected for.
CAUSE = "cause"
#: What an entry may name instead of a scenario: a case of `run` or `explore`.
CASE = "case"
_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*expect[ \t]*\]\]", re.MULTILINE)


class BaselineError(UsageError):
    """A baseline file that cannot be used; the message names the entry and key to fix."""


@dataclasses.dataclass(frozen=True)
class Expectation:
    job: str
    scenario: str
    verdict: Verdict
    reason: str
    #: Where it was written ("ckpt-expect.toml:12"), for messages that say what to edit.
    where: str = ""
    #: What `scenario` names: "scenario", or "case" (a case of `run` or `explore`).
    key: str = "scenario"
    #: The causes (`oracle.causes`, as text) the failure is expected for; None: any.
    causes: Optional[frozenset[str]] = None

    def matches(self, job: str, scenario: str) -> bool:
        return named(job, self.job) and named(scenario, self.scenario)

    def describe(self) -> str:
        return f'job="{self.job}" {self.key}="{self.scenario}" verdict="{self.verdict.value}"'


@dataclasses.dataclass(frozen=True)
class Judged:
    """One result as a baseline gates it, with nothing else: a scenario's (sent
    from an xdist worker), or a case of a `run` or `explore` report, its name
    in the place of a scenario's."""

    job: str
    scenario: str
    verdict: Verdict
    reason: str
    #: Why it did not pass (`oracle.causes`): its judgments with its verdict.
    causes: frozenset[str] = frozenset()

    @classmethod
    def of(cls, result: Any) -> "Judged":
        """Of anything with job, scenario, verdict, reason and causes (a `ScenarioResult`)."""
        return cls(result.job, result.scenario, result.verdict, result.reason, frozenset(result.causes))

    def to_json(self) -> list:
        return [self.job, self.scenario, self.verdict.value, self.reason, sorted(self.causes)]

    @classmethod
    def from_json(cls, data: Sequence) -> "Judged":
        job, scenario, verdict, reason, causes = data
        return cls(job, scenario, Verdict(verdict), reason, frozenset(causes))


def case_verdicts(job: str, results: Iterable) -> list[Judged]:
    """The cases of a report's `results` (`CaseResult`s), each the fold of its
    checks, with the summary of its first worst one."""
    by_case: dict[str, list] = {}
    for r in results:
        by_case.setdefault(r.case, []).append(r)
    out = []
    for case, found in by_case.items():
        verdict = fold(r.verdict for r in found)
        first = next(r for r in found if r.verdict is verdict)
        causes = _causes(found, verdict) if not verdict.ok else frozenset()
        out.append(Judged(job, case, verdict, f"{first.check}: {first.summary}", causes))
    return out


class Outcome(str, enum.Enum):
    #: Passed (or n/a) as the baseline says, or passed with no entry.
    OK = "ok"
    #: Not ok, with the verdict the baseline expects: known, not a regression.
    EXPECTED = "expected"
    #: The baseline expects a failure and it no longer happens: update the baseline.
    FIXED = "fixed"
    #: Not ok, and the baseline has no entry for it.
    NEW = "new"
    #: Not ok, and the baseline expects something else: a pass (pass → error), or
    #: another failure (fail → error: the harness can no longer tell whether it still fails).
    WORSE = "worse"
    #: Not ok with the verdict the baseline expects, but for a cause it does not
    #: record: a regression behind a known failure (a resume that lost one RNG value
    #: is known; now the weights diverge too).
    OTHER_CAUSE = "other cause"

    @property
    def fails(self) -> bool:
        """This outcome fails the build."""
        return self in (Outcome.NEW, Outcome.WORSE, Outcome.OTHER_CAUSE)

    @property
    def label(self) -> str:
        """How reports show it: a regression is NEW whatever made it one."""
        return {Outcome.NEW: "NEW", Outcome.OTHER_CAUSE: "NEW", Outcome.WORSE: "WORSE"}.get(self, self.value)

    @property
    def weight(self) -> int:
        """What a cell of several results shows: a regression before a fix to
        record, a fix before a known failure, a known failure before a pass."""
        return 3 if self.fails else {Outcome.FIXED: 2, Outcome.EXPECTED: 1}.get(self, 0)


@dataclasses.dataclass(frozen=True)
class Gated:
    """One result (a scenario against a job) judged against the baseline."""

    job: str
    scenario: str
    verdict: Verdict
    outcome: Outcome
    expectation: Optional[Expectation]
    #: The result's own one-line reason.
    reason: str = ""
    #: Why the result did not pass (`oracle.causes`); empty when it passed or nothing says.
    causes: frozenset[str] = frozenset()

    @property
    def expected(self) -> bool:
        return self.outcome is Outcome.EXPECTED

    def to_json(self) -> dict[str, Any]:
        """What matrix.json keeps of it: the outcome, and the entry that decided it."""
        e = self.expectation
        return {"job": self.job, "scenario": self.scenario, "verdict": self.verdict.value,
                "outcome": self.outcome.value, "label": self.outcome.label, "causes": sorted(self.causes),
                "expected": None if e is None else {
                    "verdict": e.verdict.value, "reason": e.reason, "where": e.where,
                    "causes": None if e.causes is None else sorted(e.causes)}}

    def line(self) -> str:
        what = f"{self.job} · {self.scenario}: {self.verdict.value}"
        e = self.expectation
        if self.outcome is Outcome.EXPECTED:
            return f"{what}, expected: {e.reason} ({e.where})"
        if self.outcome is Outcome.FIXED:
            return f"{what}, the baseline expects {e.verdict.value} ({e.where}): fixed, update the baseline"
        if self.outcome is Outcome.WORSE:
            return f"{what}, the baseline expects {e.verdict.value} ({e.where}): {self.reason}"
        if self.outcome is Outcome.OTHER_CAUSE:
            known = "; ".join(sorted(e.causes or ()))
            new = "; ".join(sorted(self.causes - (e.causes or frozenset())))
            return (f"{what}, for another cause: observed {new}; the baseline expects it for {known} ({e.where}): "
                    f"{self.reason}")
        return f"{what}: {self.reason}"


@dataclasses.dataclass(frozen=True)
class Gating:
    """A whole run against a baseline; `ok` is the build's verdict."""

    source: str
    gated: tuple[Gated, ...]
    stale: tuple[Expectation, ...] = ()

    def of(self, outcome: Outcome) -> list[Gated]:
        return [g for g in self.gated if g.outcome is outcome]

    @property
    def ok(self) -> bool:
        return not any(g.outcome.fails for g in self.gated)

    @property
    def verdict(self) -> Verdict:
        """What the build gets: pass unless something fails it, then the fold of
        what does (so a new error exits as an error, a new failure as a failure)."""
        return fold(g.verdict for g in self.gated if g.outcome.fails) if not self.ok else Verdict.PASS

    @property
    def outdated(self) -> bool:
        """The baseline has entries to drop: fixed failures or stale entries."""
        return bool(self.of(Outcome.FIXED) or self.stale)

    def part(self, job: str, scenarios: Collection[str]) -> "CellGate":
        """What the baseline says of one cell of a matrix: of the results of
        `job` on `scenarios` (those behind the cell), and of its stale entries
        (an entry about the job and one of them that matched no result)."""
        gated = tuple(g for g in self.gated if g.job == job and g.scenario in scenarios)
        stale = tuple(e for e in self.stale if named(job, e.job) and any(named(s, e.scenario) for s in scenarios))
        return CellGate(gated, stale)

    def to_json(self) -> dict[str, Any]:
        counts = {o.value: len(self.of(o)) for o in Outcome}
        return {"source": self.source, "ok": self.ok, "verdict": self.verdict.value, "counts": counts,
                "gated": [g.to_json() for g in self.gated],
                "stale": [{"where": e.where, "entry": e.describe()} for e in self.stale]}

    def explain(self) -> str:
        lines = [f"against the baseline {self.source}:"]
        for outcome, label in ((Outcome.NEW, "NEW"), (Outcome.OTHER_CAUSE, "NEW"), (Outcome.WORSE, "WORSE"),
                               (Outcome.EXPECTED, "expected"), (Outcome.FIXED, "fixed")):
            lines += [f"  {label:8} {g.line()}" for g in self.of(outcome)]
        lines += [f"  {'stale':8} {e.where} {e.describe()}: matches nothing this run covered; remove it"
                  for e in self.stale]
        lines.append(self.summary())
        return "\n".join(lines)

    def summary(self) -> str:
        """"2 new failures, 4 expected, 1 fixed, 0 stale"."""
        counts = {o: len(self.of(o)) for o in Outcome}
        regressions = sum(n for o, n in counts.items() if o.fails)
        summary = (f"{regressions} new failure{'s' * (regressions != 1)}" if regressions else "no new failure")
        return (summary + f", {counts[Outcome.EXPECTED]} expected, {counts[Outcome.FIXED]} fixed, "
                f"{len(self.stale)} stale")


@dataclasses.dataclass(frozen=True)
class CellGate:
    """The baseline's word on a matrix cell: the gated results behind it, and
    its stale entries. Its `outcome` is the weightiest of its results'."""

    gated: tuple[Gated, ...]
    stale: tuple[Expectation, ...] = ()

    @property
    def outcome(self) -> Outcome:
        return max((g.outcome for g in self.gated), key=lambda o: o.weight, default=Outcome.OK)

    @property
    def label(self) -> str:
        """"NEW", "WORSE", "fixed", "expected", "stale", or "" (as the baseline says, nothing to tell)."""
        found = self.outcome
        if found is not Outcome.OK:
            return found.label
        return "stale" if self.stale else ""

    def lines(self) -> list[str]:
        """One line per result the baseline had a word on, and per stale entry."""
        return ([g.line() for g in self.gated if g.outcome is not Outcome.OK]
                + [f"stale: {e.where} {e.describe()} matches nothing this run covered; remove it" for e in self.stale])

    def to_json(self) -> dict[str, Any]:
        return {"outcome": self.outcome.value, "label": self.label,
                "scenarios": {g.scenario: g.outcome.value for g in self.gated},
                "stale": [e.where for e in self.stale]}


@dataclasses.dataclass(frozen=True)
class Checked:
    """A result (anything with `explain()`, e.g. a `ScenarioResult`) whose
    verdict for the command is the baseline's word rather than its own."""

    result: Any
    gating: Gating

    @property
    def ok(self) -> bool:
        return self.gating.ok

    @property
    def verdict(self) -> Verdict:
        return self.gating.verdict

    def explain(self) -> str:
        return f"{self.result.explain()}\n\n{self.gating.explain()}"

    def with_timelines(self, directory: Path) -> "Checked":
        return dataclasses.replace(self, result=self.result.with_timelines(directory))


@dataclasses.dataclass(frozen=True)
class Expectations:
    expectations: tuple[Expectation, ...]
    source: str

    def expected(self, job: str, scenario: str) -> Optional[Expectation]:
        return next((e for e in self.expectations if e.matches(job, scenario)), None)

    def judge(self, job: str, scenario: str, verdict: Verdict, reason: str = "",
              causes: Iterable[str] = ()) -> Gated:
        """`causes`: why the result did not pass (`oracle.causes`); an entry that
        records causes expects the failure for those only."""
        e = self.expected(job, scenario)
        causes = frozenset(causes)
        found = outcome(verdict, e.verdict if e else None)
        if found is Outcome.EXPECTED and e is not None and e.causes is not None and not causes <= e.causes:
            found = Outcome.OTHER_CAUSE
        return Gated(job, scenario, verdict, found, e, reason, causes)

    def gate(
        self,
        results: Iterable,
        *,
        jobs: Optional[Collection[str]] = None,
        scenarios: Optional[Collection[str]] = None,
        catalogue: Collection[str] = (),
    ) -> Gating:
        """Judge `results` (anything with job, scenario, verdict and reason,
        e.g. `ScenarioResult`).

        An entry matching no result is stale only if this run covered it:
        its job was run (`jobs`, default the results' jobs), and its scenario
        was run (`scenarios`) or is not in the `catalogue` at all (renamed or
        removed). Entries about scenarios a narrowed run skipped are not stale.
        """
        gated = tuple(self.judge(r.job, r.scenario, r.verdict, r.reason, getattr(r, "causes", ())) for r in results)
        jobs = {g.job for g in gated} if jobs is None else set(jobs)
        scenarios = {g.scenario for g in gated} if scenarios is None else set(scenarios)
        used = {id(g.expectation) for g in gated}

        def covered(e: Expectation) -> bool:
            def hit(names: Collection[str], pattern: str) -> bool:
                return any(named(n, pattern) for n in names)

            return hit(jobs, e.job) and (hit(scenarios, e.scenario) or not hit(catalogue, e.scenario))

        return Gating(self.source, gated, tuple(e for e in self.expectations if id(e) not in used and covered(e)))


def outcome(verdict: Verdict, expected: Optional[Verdict]) -> Outcome:
    """What a verdict means for the build, given the baseline's (None: no entry)."""
    if verdict.ok:
        return Outcome.FIXED if expected is not None and not expected.ok else Outcome.OK
    if expected is None:
        return Outcome.NEW
    return Outcome.EXPECTED if verdict is expected else Outcome.WORSE


# -- loading ------------------------------------------------------------------------
def load(path: Union[str, Path]) -> Expectations:
    """A baseline from a `matrix.json` (by its suffix) or an expectations TOML file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read the baseline ({exc.strerror or exc}); give a matrix.json "
                            "written by `ckpt-harness matrix` or an expectations .toml file") from None
    return from_matrix_json(text, str(path)) if path.suffix == ".json" else from_toml(text, str(path))


def from_toml(text: str, source: str = "<expectations>") -> Expectations:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BaselineError(f"{source}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"expect"})
    if unknown:
        raise BaselineError(f"{source}: unknown top-level key {unknown[0]!r}; write each expectation as an "
                            "[[expect]] table with job, scenario, verdict and reason")
    entries = data.get("expect", [])
    if not isinstance(entries, list):
        raise BaselineError(f"{source}: expect must be a list of tables; write [[expect]], not [expect]")
    lines = [text.count("\n", 0, m.start()) + 1 for m in _HEADER.finditer(text)]
    out = []
    for i, entry in enumerate(entries):
        where = f"{source}:{lines[i]}" if len(lines) == len(entries) else f"{source}: [[expect]] #{i + 1}"
        out.append(_entry(entry, where, need_reason=True))
    return Expectations(_unique(out), source)


def from_matrix_json(text: str, source: str = "<matrix.json>") -> Expectations:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BaselineError(f"{source}: not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("scenarios"), list):
        raise BaselineError(f"{source}: no 'scenarios' list; give a matrix.json written by `ckpt-harness matrix`, "
                            "or an expectations file ending in .toml")
    out = [_entry(r, f"{source}: scenarios[{i}]", need_reason=False) for i, r in enumerate(data["scenarios"])]
    return Expectations(_unique(out), source)


def _recorded_causes(entry: dict) -> Optional[frozenset[str]]:
    """The causes a matrix.json scenario entry failed for (its "causes"); None
    for one written before causes were recorded: any cause."""
    causes = entry.get("causes")
    if Verdict(entry["verdict"]).ok or not isinstance(causes, list):
        return None
    return frozenset(str(c) for c in causes)


def _causes(results: Iterable, verdict: Verdict) -> frozenset[str]:
    """`oracle.causes.causes_of`, imported when a cause is asked for: a TOML
    baseline is read before anything runs, and needs none of the oracle."""
    from ckpt_harness.oracle.causes import causes_of

    return causes_of(results, verdict)


def _entry(entry: object, where: str, need_reason: bool) -> Expectation:
    if not isinstance(entry, dict):
        raise BaselineError(f"{where}: an expectation must be a table with job, scenario, verdict and reason")
    key = "scenario"
    if need_reason:
        unknown = sorted(set(entry) - set(_KEYS) - {CASE, CAUSE})
        if unknown:
            raise BaselineError(f"{where}: unknown key {unknown[0]!r}; an expectation takes {', '.join(_KEYS)}, "
                                f"optionally {CAUSE} (or {CASE} instead of scenario, for run and explore)")
        if CASE in entry:
            if "scenario" in entry:
                raise BaselineError(f"{where}: give scenario (matrix, scenario) or case (run, explore), not both")
            entry, key = {**entry, "scenario": entry[CASE]}, CASE
    for name in _KEYS if need_reason else _KEYS[:3]:
        if not isinstance(entry.get(name), str) or not entry[name].strip():
            shown = key if name == "scenario" else name
            raise BaselineError(f'{where}: set {shown} = "..."' + (" (why the verdict is known, e.g. an issue link)"
                                                                   if name == "reason" else ""))
    try:
        verdict = Verdict(entry["verdict"])
    except ValueError:
        raise BaselineError(f"{where}: verdict {entry['verdict']!r} is not one of "
                            f"{', '.join(v.value for v in PRECEDENCE)}") from None
    if need_reason:
        causes = entry.get(CAUSE)
        if causes is not None and (not isinstance(causes, list) or not all(isinstance(c, str) and c for c in causes)):
            raise BaselineError(f'{where}: set {CAUSE} = ["..."], the causes a report names for this failure')
        causes = frozenset(causes) if causes is not None else None
    else:
        causes = _recorded_causes(entry)
    return Expectation(entry["job"], entry["scenario"], verdict, str(entry.get("reason") or ""), where, key, causes)


def _unique(entries: Sequence[Expectation]) -> tuple[Expectation, ...]:
    seen: dict[tuple[str, str], Expectation] = {}
    for e in entries:
        first = seen.setdefault((e.job, e.scenario), e)
        if first is not e:
            raise BaselineError(f"{e.where}: job {e.job!r} {e.key} {e.scenario!r} is also expected at "
                                f"{first.where}; keep one")
    return tuple(entries)


# -- writing ------------------------------------------------------------------------
def expectations_toml(results: Iterable, note: str = "", keep: Optional[Expectations] = None,
                      key: str = "scenario") -> str:
    """An expectations file that expects every result that is not ok, as it
    is: the start of a baseline, each reason to be replaced by why it is known.
    A failure `keep` already expects as it is keeps that entry's reason, so
    rewriting a baseline after a fix keeps what people wrote. `key`: what the
    entries name ("case" for `case_verdicts` of run and explore)."""
    command = "run/explore" if key == CASE else "matrix"
    lines = [f"# Expected verdicts for `ckpt-harness {command} --baseline`"
             + (" and `pytest --ckpt-baseline`." if key != CASE else "."),
             "# A failure listed here does not fail the build; a new one does. Replace each reason",
             "# with why the failure is known (an issue link); delete an entry once it is fixed."]
    if note:
        lines.append(f"# {note}")
    for r in results:
        if r.verdict.ok:
            continue
        known = keep.expected(r.job, r.scenario) if keep is not None else None
        if known is not None and known.verdict is r.verdict:
            reason = known.reason
        else:
            reason = " ".join(r.reason.split()) or f"TODO: why {r.verdict.value} is known here"
            reason = reason if len(reason) <= 200 else reason[:199] + "…"
        lines += ["", "[[expect]]", f"job = {_string(r.job)}", f"{key} = {_string(r.scenario)}",
                  f"verdict = {_string(r.verdict.value)}", f"reason = {_string(reason)}"]
        causes = sorted(getattr(r, "causes", ()))
        if causes:
            lines.append(f"{CAUSE} = [{', '.join(_string(c) for c in causes)}]")
    return "\n".join(lines) + "\n"


def _string(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value, ensure_ascii=False)
