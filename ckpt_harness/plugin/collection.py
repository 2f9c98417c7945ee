"""The target the options pick, as test items: its verification (``ckpt-KIND::verify``) and the scenario
catalogue against it (``ckpt-KIND::NAME[ROW-wsN]``), made from the same target specs a matrix's rows are
(`targets.TargetSpec`); scenario files' items; the node ids given on the command line; a shard's part.

Every item of one target shares one bench, and so its golden runs: the items carry its xdist group.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any, Optional

import pytest

from ckpt_harness.plugin import baseline, options
from ckpt_harness.plugin.outcomes import outputs, results


@dataclasses.dataclass(frozen=True)
class Row:
    """One target the catalogue's items run against: as data (`TargetSpec`, the matrix's), its row's name
    and world size (its items' ids and xdist group), and the target made at collection, or why this
    machine cannot make it (a framework not installed: its items skip, saying so)."""

    spec: Any
    name: str
    world_size: int
    #: Its items' ids name the row and world size (``NAME[dcp-ws2]``): a kind that takes a world size has a row
    #: per --ckpt-world-sizes; a script's launch line sizes it, and its items are ``NAME``.
    sized: bool
    target: Any = None
    unavailable: Optional[str] = None

    @property
    def group(self) -> str:
        """The xdist group of its items: one worker per target, whose golden runs they share."""
        return f"ckpt-{self.name}-ws{self.world_size}"

    def item_name(self, name: str) -> str:
        return f"{name}[{self.name}-ws{self.world_size}]" if self.sized else name

    def make(self) -> Any:
        """The target, made where the item runs if collection did not (a built-in job a scenario file names)."""
        from ckpt_harness import targets

        if self.unavailable:
            pytest.skip(self.unavailable)
        return self.target if self.target is not None else targets.rebuild(self.spec)


def _rows(config: pytest.Config, kind: Any) -> list:
    """The rows of `kind` the options make, each made and checked now (bad settings are a usage error
    naming the option), as a matrix makes its rows (`catalogue.matrix.run.matrix_rows`): a row per
    --ckpt-world-sizes for a kind that takes a world size (a job), else one."""
    from ckpt_harness import targets
    from ckpt_harness.config import settings_of
    from ckpt_harness.errors import Unavailable, UsageError

    takes = settings_of(kind.configs["run"])
    given = {name: value for name, value in options.given(config).items() if name in takes or name == kind.option}
    sized = "world_size" in takes
    rows = []
    for settings in ([{**given, "world_size": n} for n in options.world_sizes(config)] if sized else [given]):
        spec = targets.TargetSpec(kind.name, settings)
        try:
            target = targets.make(settings, "run")
            target.preflight()
        except Unavailable as exc:
            rows.append(Row(spec, str(given[kind.option]), settings.get("world_size", 0), sized, unavailable=str(exc)))
            continue
        except UsageError as exc:
            raise pytest.UsageError(f"{options.option(kind.option)} {given[kind.option]}: {exc}") from None
        rows.append(Row(spec, target.row, target.world_size, sized, target))
    return rows


def _breakable(kind: Any, rows: list) -> list:
    """`rows`, to be broken on purpose by the catalogue's scenarios (`Target.breakable`): a setting that
    cannot be (torchrun's restarts) is a usage error now."""
    from ckpt_harness.errors import UsageError

    try:
        return [dataclasses.replace(row, target=row.target.breakable()) if row.target is not None else row
                for row in rows]
    except UsageError as exc:
        raise pytest.UsageError(f"{options.option(kind.option)}: {exc}") from None


def _default_rows(config: pytest.Config, scenario: Any) -> list:
    """Without a kind's option: the built-in jobs `scenario` applies to, at every --ckpt-world-sizes, made
    where their items run (importing every framework at collection would slow every session)."""
    from ckpt_harness import targets
    from ckpt_harness.catalogue.scenario import default_jobs

    given = {**options.timeout_given(config), **options.launcher_given(config)}
    return [Row(targets.TargetSpec("job", {"job": job, "world_size": n, **given}), job, n, sized=True)
            for job in default_jobs([scenario]) for n in options.world_sizes(config)]


_ROWS = pytest.StashKey[dict]()


def _target_rows(config: pytest.Config, kind: Any) -> list:
    """The rows of a picked kind, made once a session (scenario files and the catalogue share them)."""
    made = config.stash.setdefault(_ROWS, {})
    if kind.name not in made:
        made[kind.name] = _rows(config, kind)
    return made[kind.name]


class Catalogue(pytest.Collector):
    """The items the picked target adds, ``ckpt-KIND::...``. It has no file, so it names itself: without
    an id of its own its items' ids would start with "::" (and their JUnit class name with a dot)."""

    def collect(self) -> list:
        return []  # its items are made where the run's other items are known, and counted there (`_collected`)


class ScenarioFailed(AssertionError):
    """A scenario judged fail or unknown; the message is its explanation."""


class KnownFailure(ScenarioFailed):
    """A scenario failing as the baseline expects: the item's xfail (and only
    this) is what its xfail marker accepts, so another failure still fails."""


class _Judged(pytest.Item):
    """An item whose failure is a verdict: shown as its explanation (the verdict table), not a traceback."""

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ScenarioFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)


class VerifyItem(_Judged):
    """``ckpt-harness run`` against the picked target as a test (``ckpt-script::verify``): fails with the
    verdict table unless every case passes. Its timeout is its kind's own (a script's is longer) unless
    ``--ckpt-timeout`` was given."""

    def __init__(self, *, row: Row, **kwargs: Any):
        super().__init__(**kwargs)
        self.row = row

    def runtest(self) -> None:
        from ckpt_harness.errors import Unavailable
        from ckpt_harness.pipeline.verify import verify

        try:
            report = verify(self.row.make(), workdir=self.config._tmp_path_factory.mktemp("ckpt-verify"))  # type: ignore[attr-defined]
        except Unavailable as exc:
            pytest.skip(str(exc))
        self.user_properties.append(("ckpt_verdict", report.verdict.value))
        report = outputs(self, report)
        if not report.ok:
            raise ScenarioFailed(report.explain())

    def reportinfo(self) -> tuple[str, Optional[int], str]:
        return self.row.name, None, f"verify {self.row.name} ({self.row.spec.kind})"


class ScenarioFile(pytest.File):
    """One item per scenario and row: the picked target's (``--ckpt-job``, ``--ckpt-script``...), or else
    the built-in jobs the scenario names, at every --ckpt-world-sizes."""

    def collect(self):
        from ckpt_harness.errors import ScenarioError
        from ckpt_harness.catalogue.scenario_files import load_file

        try:
            scenarios = load_file(self.path)
        except ScenarioError as exc:
            raise self.CollectError(str(exc)) from None
        picked = [row for kind in options.picked(self.config)
                  for row in _breakable(kind, _target_rows(self.config, kind))]
        for scenario in scenarios:
            for row in picked or _default_rows(self.config, scenario):
                yield ScenarioItem.from_parent(self, name=row.item_name(scenario.name), scenario=scenario, row=row)


_WANTED = pytest.StashKey[list]()


class ScenarioItem(_Judged):
    """A catalogue scenario against one row (a job at one world size, the --ckpt-script script); n/a skips."""

    def __init__(self, *, scenario: Any, row: Row, **kwargs: Any):
        super().__init__(**kwargs)
        self.scenario = scenario
        self.row = row
        #: Its row's name: the job's, the script's command without directories.
        self.job = row.name
        self.world_size = row.world_size
        # one worker per target under `--dist loadgroup`: the bench, and so the golden runs, are per process
        self.add_marker(pytest.mark.xdist_group(self.group))
        expected = baseline.expected_failure(self.config, self.job, scenario.name)
        if expected is not None:  # non-strict: a pass is XPASS, for the baseline to be updated
            self.add_marker(pytest.mark.xfail(reason=expected, raises=KnownFailure, strict=False))

    @property
    def group(self) -> str:
        """The target it runs against: the items of one share a bench."""
        return self.row.group

    def bench(self) -> Any:
        """The session's bench of its target, shared by every item of it (their golden runs too)."""
        return _bench(self.config, self.row)

    def runtest(self) -> None:
        from ckpt_harness.errors import Unavailable
        from ckpt_harness.verdict import Verdict

        try:
            result = self.bench().run(self.scenario)
        except Unavailable as exc:
            pytest.skip(str(exc))
        self.user_properties.append(("ckpt_verdict", result.verdict.value))
        result = outputs(self, result)
        results(self.config).append((self, result))
        gated = baseline.gate(self.config, result)
        if result.verdict is Verdict.NA:
            pytest.skip(f"n/a: {result.reason}")
        if result.verdict is not Verdict.PASS:
            gate = f"\n{gated.line()}" if gated is not None and gated.expectation is not None else ""
            raise (KnownFailure if gated is not None and gated.expected else ScenarioFailed)(result.explain() + gate)

    def reportinfo(self) -> tuple[str, Optional[int], str]:
        return (self.scenario.source, None,
                f"{self.scenario.name} [{self.scenario.property}] {self.job} ws{self.world_size}")


_BENCHES = pytest.StashKey[dict]()


def _bench(config: pytest.Config, row: Row):
    """Benches live for the session, so scenarios of one target share golden runs."""
    from ckpt_harness.catalogue.bench import Bench

    benches = config.stash.setdefault(_BENCHES, {})
    if row.group not in benches:
        root = config._tmp_path_factory.mktemp(f"ckpt-ws{row.world_size}")  # type: ignore[attr-defined]
        benches[row.group] = Bench(row.make(), root, name=row.name)
    return benches[row.group]


def _names_scenario_files(config: pytest.Config) -> bool:
    """Did the command line name scenario files or directories (not just a
    repo whose tests happen to hold a `scenarios/` directory)?"""
    here = Path(config.invocation_params.dir)
    for arg in config.args:
        path = (here / arg.split("::")[0]).resolve()
        if path.suffix == ".toml" or path.name == "scenarios" or path.parent.name == "scenarios":
            return True
    return False


def take_node_ids(config: pytest.Config) -> None:
    """Take the picked targets' node ids (``ckpt-job::NAME[JOB-wsN]``, ``ckpt-script::verify``) out of the
    arguments before pytest looks for them as files; `add` then narrows those targets' items to them."""
    from ckpt_harness import targets

    args = config.args
    prefixes = tuple(f"ckpt-{kind.name}" for kind in targets.kinds())
    wanted = [a for a in args if a.split("::")[0] in prefixes]
    if wanted:
        config.stash[_WANTED] = wanted
        args[:] = [a for a in args if a not in wanted]


def add(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """The catalogue's items, then only this shard's of them (--ckpt-shard); each scenario item's xdist
    group put where xdist's scheduler reads it."""
    _add_catalogue(session, config, items)
    shard = options.shard(config)
    if shard is not None:
        _keep_shard(config, items, shard)
    for item in items:
        if isinstance(item, ScenarioItem):
            group_in_node_id(item, item.group)


def group_in_node_id(item: pytest.Item, group: str) -> None:
    """Under `pytest -n N --dist loadgroup`, `group` in the node id of `item`
    (which carries the `xdist_group` mark), where xdist's scheduler reads it.

    xdist's worker sends the group to the scheduler as a node id suffix,
    ``ID@group``, written to ``item._nodeid``; since pytest 9.2 a node id is
    ``str(item._id)`` and that write reaches nothing (pytest-xdist#1386):
    every item is then scheduled alone, silently, and each worker its items
    reach makes their target's golden runs again. Here the suffix goes into
    the id itself, once, only in an xdist worker scheduling by group; with
    an older pytest xdist's own write works and nothing is done.
    """
    nodeid = item.nodeid
    if not getattr(item.config.option, "loadgroup", False) or nodeid.rfind("@") > nodeid.rfind("]"):
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # pytest < 9.2: node ids are strings, which xdist's suffix reaches
        return
    if isinstance(getattr(item, "_id", None), NodeId):
        item._id = NodeId.parse(f"{nodeid}@{group}")


def _add_catalogue(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """The items of each target the options pick (only those named, if node ids of them were given): its
    verification (unless its kind runs its whole catalogue, `TargetKind.whole_catalogue`), then the
    catalogue's scenarios against each of its rows (--ckpt-scenarios, or all for such a kind), unless the
    run collected scenario files of its own (then only with --ckpt-scenarios)."""
    from ckpt_harness.errors import ScenarioError
    from ckpt_harness.catalogue.scenario import builtin_dir, select
    from ckpt_harness.catalogue.scenario_files import builtin_catalogue

    kinds = options.picked(config)
    wanted = config.stash.get(_WANTED, [])
    stray = [arg for arg in wanted if arg.split("::")[0] not in {f"ckpt-{kind.name}" for kind in kinds}]
    if stray:
        named = stray[0].split("::")[0].removeprefix("ckpt-")
        raise pytest.UsageError(f"{stray[0]}: its items need {options.option(named)} VALUE, the target they run "
                                "against")
    patterns = [p.strip() for p in (config.getoption("--ckpt-scenarios") or "").split(",") if p.strip()]
    try:  # before a target is made: a misspelt scenario is said at once
        selected = select(builtin_catalogue(), patterns) if kinds else []
    except ScenarioError as exc:
        raise pytest.UsageError(f"--ckpt-scenarios: {exc}") from None
    files = {Path(i.scenario.source).resolve().parent for i in items if isinstance(i, ScenarioItem)}
    if not wanted and (builtin_dir().resolve() in files or (_names_scenario_files(config) and not patterns)):
        selected = []  # the catalogue was collected as files, or the command line named the scenario files to run
    for kind in kinds:
        prefix = f"ckpt-{kind.name}"
        mine = [arg for arg in wanted if arg.split("::")[0] == prefix]
        if wanted and not mine:
            continue  # node ids named other targets' items
        scenarios = selected if patterns or kind.whole_catalogue else []
        rows = _target_rows(config, kind)
        catalogue = Catalogue.from_parent(session, name=prefix, nodeid=prefix)
        made = [VerifyItem.from_parent(catalogue, name=row.item_name("verify"), row=row)
                for row in rows if not kind.whole_catalogue]
        rows = _breakable(kind, rows) if scenarios else rows
        made += [ScenarioItem.from_parent(catalogue, name=row.item_name(scenario.name), scenario=scenario, row=row)
                 for scenario in scenarios for row in rows]
        for arg in mine:
            if not any(_names(arg, item) for item in made):
                value = shlex.quote(str(config.getoption(f"ckpt_{kind.option}")))
                raise pytest.UsageError(f"{arg}: no such item of the catalogue against {value}; list them with: "
                                        f"pytest {options.option(kind.option)} {value} --collect-only -q")
        items.extend(_collected(catalogue, [item for item in made
                                            if not mine or any(_names(arg, item) for arg in mine)]))


def _collected(collector: pytest.Collector, items: list) -> list:
    """`items`, made by `collector` after pytest's collection, told to pytest
    as a collector's own items are: its collect report (what the terminal
    counts in "collected N items", -k's and --ckpt-shard's deselections
    then taken from that) and each item's pytest_itemcollected. Made in
    pytest_collection_modifyitems, where the run's other items are known,
    they would otherwise be listed but not counted ("1 test collected" over
    four items)."""
    collector.ihook.pytest_collectreport(report=pytest.CollectReport(collector.nodeid, "passed", None, items))
    for item in items:
        collector.ihook.pytest_itemcollected(item=item)
    return items


def _keep_shard(config: pytest.Config, items: list, shard: Any) -> None:
    """Deselect the catalogue items of the other shards. Every machine
    computes the same split from the same items and costs: a row is a
    target (its items share a golden run), kept whole where the costs allow."""
    from ckpt_harness.catalogue.matrix import read_costs
    from ckpt_harness.catalogue.shards import Task, assign
    from ckpt_harness.errors import UsageError

    scenario_items = [i for i in items if isinstance(i, ScenarioItem)]
    task = {i: Task(i.group, i.scenario.name) for i in scenario_items}
    costs = None
    if config.getoption("--ckpt-costs"):
        try:
            recorded = read_costs(config.getoption("--ckpt-costs"))
        except UsageError as exc:
            raise pytest.UsageError(f"--ckpt-costs: {exc}") from None
        costs = {t: recorded[i.job, i.scenario.name] for i, t in task.items() if (i.job, i.scenario.name) in recorded}
    kept = set(assign(list(dict.fromkeys(task.values())), shard.count, costs)[shard.index - 1])
    dropped = [i for i in scenario_items if task[i] not in kept]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if not (isinstance(i, ScenarioItem) and task[i] not in kept)]


def _names(arg: str, item: pytest.Item) -> bool:
    """Whether node id `arg` selects `item`: its own id, its name at any row (``ckpt-job::NAME``), or all."""
    prefix = item.parent.nodeid  # type: ignore[union-attr]
    return arg in (item.nodeid, f"{prefix}::{item.name.split('[')[0]}", prefix)
