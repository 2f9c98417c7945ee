"""The scenario catalogue: checks named in data files, run against a job.

A scenario file (TOML) holds one table per scenario:

    [crash-every-phase]
    property = "atomic"                 # what a failure breaks (oracle.PROPERTIES)
    check = "faults"                    # how it is run (ckpt_harness.checks)
    description = "SIGKILL one rank before every operation of a save"
    jobs = ["*"]                        # job names it applies to (fnmatch), default all
    faults = ["crash", "crash-mid"]     # the rest are the check's parameters

Files live in the repo's `scenarios/` directory (shipped inside the package
as `ckpt_harness/_scenarios`); the pytest plugin collects any `*.toml` in a
directory named `scenarios` as one item per scenario and job, and
`ckpt-harness matrix` runs the built-in ones against every built-in job.

A `Bench` is one job at one world size: scenarios run on the same bench
share its golden runs, so a catalogue costs one golden run per distinct
setting rather than one per scenario.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from ckpt_harness.report import CaseResult, Verdict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

#: check name -> module implementing `PARAMS` and `run(bench, scenario)`.
CHECKS = {
    "resume": "ckpt_harness.checks.resume",
    "faults": "ckpt_harness.checks.faults",
    "overwrite": "ckpt_harness.checks.overwrite",
    "reshard": "ckpt_harness.checks.reshard",
    "stall": "ckpt_harness.checks.stall",
}
#: A scenario that does not apply to a job (e.g. world-size change for a job
#: without `full_state`): judged, but neither pass nor fail.
NOT_APPLICABLE = "n/a"
_RESERVED = ("property", "check", "description", "jobs")


class ScenarioError(ValueError):
    """A scenario file that cannot be run; the message says which key to fix."""


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
        return any(fnmatch.fnmatchcase(job, pattern) for pattern in self.jobs)


@dataclasses.dataclass(frozen=True)
class ScenarioResult:
    """One scenario against one job: a matrix cell's worth of verdict."""

    scenario: str
    job: str
    property: str
    #: "pass", "fail", "unknown" or "n/a"
    verdict: str
    #: One line: what happened, or why it could not be judged.
    reason: str
    repro: Optional[str] = None
    details: str = ""
    cases: int = 0
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return self.verdict in (Verdict.PASS.value, NOT_APPLICABLE)

    def explain(self) -> str:
        lines = [f"{self.scenario} [{self.job}] {self.property}: {self.verdict.upper()} — {self.reason}"]
        if self.details:
            lines.append(self.details.rstrip())
        if self.repro and f"repro: {self.repro}" not in self.details:
            lines.append(f"repro: {self.repro}")
        return "\n".join(lines)


# -- loading ------------------------------------------------------------------------
def builtin_dir() -> Path:
    return Path(__file__).resolve().parent / "_scenarios"


def builtin_catalogue() -> list[Scenario]:
    return load_dir(builtin_dir())


def load_dir(path: Path) -> list[Scenario]:
    scenarios = [s for file in sorted(Path(path).glob("*.toml")) for s in load_file(file)]
    seen: dict[str, str] = {}
    for s in scenarios:
        if s.name in seen:
            raise ScenarioError(f"{s.source}: scenario {s.name!r} is also defined in {seen[s.name]}; rename one")
        seen[s.name] = s.source
    return scenarios


def load_paths(paths: Sequence[Union[str, Path]]) -> list[Scenario]:
    """Scenarios of files and directories (every *.toml in one)."""
    out: list[Scenario] = []
    for path in map(Path, paths):
        if path.is_dir():
            out += load_dir(path)
        elif path.is_file():
            out += load_file(path)
        else:
            raise ScenarioError(f"{path}: no such scenario file or directory")
    return out


def select(scenarios: Sequence[Scenario], patterns: Sequence[str]) -> list[Scenario]:
    """Scenarios whose name matches one of `patterns` (fnmatch); all if none given."""
    if not patterns:
        return list(scenarios)
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(s.name, p) for s in scenarios)]
    if unmatched:
        raise ScenarioError(
            f"no scenario named {', '.join(unmatched)}; choose from {', '.join(s.name for s in scenarios)}"
        )
    return [s for s in scenarios if any(fnmatch.fnmatchcase(s.name, p) for p in patterns)]


def load_file(path: Union[str, Path]) -> list[Scenario]:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from None
    return [parse(name, table, str(path)) for name, table in data.items()]


def parse(name: str, table: Any, source: str = "<scenario>") -> Scenario:
    """Validate one scenario table against its check's parameters."""
    from ckpt_harness.oracle import PROPERTIES

    where = f"{source}: [{name}]"
    if not isinstance(table, dict):
        raise ScenarioError(f"{source}: {name!r} must be a table ([{name}]) holding one scenario")
    for key in ("property", "check", "description"):
        if not isinstance(table.get(key), str) or not table[key]:
            raise ScenarioError(f"{where}: set {key} = \"...\"")
    if table["property"] not in PROPERTIES:
        raise ScenarioError(f"{where}: unknown property {table['property']!r}; choose from {', '.join(PROPERTIES)}")
    if table["check"] not in CHECKS:
        raise ScenarioError(f"{where}: unknown check {table['check']!r}; choose from {', '.join(CHECKS)}")
    jobs = table.get("jobs", ["*"])
    if not isinstance(jobs, list) or not jobs or not all(isinstance(j, str) for j in jobs):
        raise ScenarioError(f"{where}: jobs must be a non-empty list of job names or patterns, e.g. [\"*\"]")
    module = _check_module(table["check"])
    params = dict(module.PARAMS)
    for key, value in table.items():
        if key in _RESERVED:
            continue
        if key not in params:
            raise ScenarioError(
                f"{where}: check {table['check']!r} has no parameter {key!r}; it takes {', '.join(module.PARAMS) or 'none'}"
            )
        params[key] = _typed(where, key, value, module.PARAMS[key])
    problem = _limits(params) or getattr(module, "validate", lambda p: None)(params)
    if problem:
        raise ScenarioError(f"{where}: {problem}")
    return Scenario(name, table["property"], table["check"], table["description"], params, tuple(jobs), source)


def _typed(where: str, key: str, value: Any, default: Any) -> Any:
    if default is None:
        ok = isinstance(value, int) and not isinstance(value, bool)
        want = "an integer"
    elif isinstance(default, tuple):
        ok = isinstance(value, list) and all(isinstance(v, type(default[0]) if default else (str, bool)) for v in value)
        want = "a list"
        value = tuple(value) if ok else value
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        want = "a number"
    else:
        ok = isinstance(value, type(default)) and not (isinstance(value, bool) and not isinstance(default, bool))
        want = f"a {type(default).__name__}"
    if not ok:
        raise ScenarioError(f"{where}: {key} must be {want}, got {value!r}")
    return value


def _limits(params: Mapping[str, Any]) -> Optional[str]:
    """Ranges shared by every check's run settings, caught before any run."""
    for key in ("steps", "save_every", "nodes", "keep_last"):
        if params.get(key) is not None and params[key] < 1:
            return f"{key} must be at least 1, got {params[key]}"
    if "save_every" in params and params["save_every"] > params["steps"]:
        return f"save_every ({params['save_every']}) must not exceed steps ({params['steps']})"
    for key in ("delay", "seconds", "hang_timeout"):
        if key in params and params[key] <= 0:
            return f"{key} must be a positive number of seconds, got {params[key]}"
    return None


def _check_module(check: str) -> Any:
    return importlib.import_module(CHECKS[check])


# -- running ------------------------------------------------------------------------
class Bench:
    """One job at one world size, and the runs its scenarios share.

    `progress(done, total)` is called as cases finish, with counts within
    the current scenario.
    """

    def __init__(self, job: Union[str, type], world_size: int, root: Path, *, timeout: float = 60.0,
                 parallel: int = 2, progress: Optional[Callable[[int, int], None]] = None):
        from ckpt_harness.jobref import resolve
        from ckpt_harness.launch import check_layout

        check_layout(world_size, 1)
        self.job_arg = job
        self.ref, self.job_class = resolve(job)
        self.world_size = world_size
        self.root = Path(root)
        self.timeout = timeout
        self.parallel = parallel
        self.progress = progress
        self._memo: dict[tuple, Any] = {}
        self._lock = threading.RLock()

    @property
    def job(self) -> str:
        return self.ref.display

    def exploration(self, *, steps: int, save_every: int, save: str, keep_last: Optional[int] = None,
                    nodes: int = 1, durability: str = "strict", hang_timeout: float = 3.0):
        """A prepared exploration (golden run and committed save done) for these
        settings, shared by every scenario that asks for the same ones.
        Returns (exploration, problem): a failed golden run is the problem."""
        from ckpt_harness.explore import exploration

        def prepared():
            saves = list(range(save_every, steps + 1, save_every))
            step = {"first": saves[0], "second": saves[min(1, len(saves) - 1)], "last": saves[-1]}[save]
            ex = exploration(
                self.job_arg, world_size=self.world_size,
                total_steps=steps, save_every=save_every, save_step=step, keep_last=keep_last, nodes=nodes,
                durability_mode=durability, timeout=self.timeout, hang_timeout=hang_timeout,
                workdir=self.root / f"ex{len(self._memo)}", parallel=self.parallel,
            )
            return ex, ex.prepare()

        return self.memo(("exploration", steps, save_every, save, keep_last, nodes, durability, hang_timeout), prepared)

    def memo(self, key: tuple, make: Callable[[], Any]) -> Any:
        """`make()` once per key on this bench (runs several scenarios share)."""
        with self._lock:
            if key not in self._memo:
                self._memo[key] = make()
            return self._memo[key]

    def scenario_repro(self, scenario: Scenario, case: Optional[str] = None) -> str:
        import shlex

        args = ["ckpt-harness", "scenario", scenario.name, "--job", self.job, "--world-size", str(self.world_size),
                "--timeout", f"{self.timeout:g}"]
        if Path(scenario.source).is_file() and Path(scenario.source).resolve().parent != builtin_dir().resolve():
            args += ["--file", scenario.source]
        if case:
            args += ["--case", case]
        prefix = f"PYTHONPATH={shlex.quote(self.ref.root)} " if self.ref.root else ""
        return prefix + shlex.join(args)

    def run(self, scenario: Scenario, cases: Optional[Sequence[str]] = None) -> ScenarioResult:
        started = time.monotonic()
        result = _check_module(scenario.check).run(self, scenario, cases)
        return dataclasses.replace(result, elapsed=time.monotonic() - started)


def summarize(bench: Bench, scenario: Scenario, results: Sequence[CaseResult], *, what: str = "cases") -> ScenarioResult:
    """Fold the cases of one scenario into one verdict: any failure fails it;
    only undecided cases leave it unknown; undecided cases beside passing
    ones are counted in the reason, not hidden."""
    fails = [r for r in results if r.verdict is Verdict.FAIL]
    unknown = [r for r in results if r.verdict is Verdict.UNKNOWN]
    cases = len({r.case for r in results})
    make = lambda verdict, reason, first=None: ScenarioResult(  # noqa: E731
        scenario.name, bench.job, scenario.property, verdict, reason,
        first.repro if first is not None else None,
        "\n\n".join(_case_block(r) for r in (fails or unknown)), cases,
    )
    if not results:
        return make(Verdict.UNKNOWN.value, f"no {what} to run")
    if fails:
        first = fails[0]
        checks = ", ".join(dict.fromkeys(r.check for r in fails))
        return make(Verdict.FAIL.value, f"{len(fails)} of {cases} {what} fail ({checks}): {first.case}: {first.summary}", first)
    if len(unknown) == len(results):
        return make(Verdict.UNKNOWN.value, f"no {what[:-1]} decided: {unknown[0].summary}", unknown[0])
    undecided = f", {len(unknown)} undecided ({unknown[0].summary})" if unknown else ""
    if cases <= 2 and not unknown and what == "cases":  # few enough to say what happened
        return make(Verdict.PASS.value, "; ".join(f"{r.case}: {r.summary}" for r in results))
    return make(Verdict.PASS.value, f"{cases - len({r.case for r in unknown})} {what} pass{undecided}")


def _case_block(r: CaseResult) -> str:
    block = [f"--- {r.case} / {r.check}: {r.verdict.value.upper()} — {r.summary}"]
    if r.details:
        block.append(r.details.rstrip())
    if r.repro:
        block.append(f"repro: {r.repro}")
    return "\n".join(block)


def not_applicable(bench: Bench, scenario: Scenario, reason: str) -> ScenarioResult:
    return ScenarioResult(scenario.name, bench.job, scenario.property, NOT_APPLICABLE, reason)
