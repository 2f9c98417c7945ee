"""The pytest plugin, registered under the entry point name ``ckpt_harness``.

- fixture ``ckpt``: ``ckpt.verify(job, ...)`` and ``ckpt.explore(job, ...)``
  return a report whose ``assert_ok()`` fails the test with the verdict table;
- marker ``@pytest.mark.ckpt(world_size=2, steps=8, ...)`` sets the
  fixture's defaults: any setting of `ckpt_harness.config` (each call takes
  those its config has); ``world_size`` may be a list, which parametrizes
  the test; a keyword no setting has errors that test alone, naming the
  closest one;
- ``ckpt.verify_script(script, ...)`` / ``ckpt.explore_script(script, ...)``: script
  mode (an unmodified script under torchrun), thin forms of ``verify``/``explore``;
- an option per kind of target, derived from the kinds as the CLI's are
  (`ckpt_harness.targets.kinds`, an installed package's too): ``--ckpt-job
  module:Class`` adds the built-in scenario catalogue against that job, one
  item per scenario and world size (``--ckpt-world-sizes``), with node ids
  such as ``ckpt-job::crash-every-phase[torch_save-ws2]`` that pytest takes
  back as arguments to rerun just those; ``--ckpt-script 'train.py
  {ckpt_dir}'`` (with ``--ckpt-nproc-per-node``, ``--ckpt-nnodes``, ...: the
  settings a kind adds, which also set the fixture's defaults) adds the item
  ``ckpt-script::verify``; ``--ckpt-scenarios`` narrows a job's catalogue,
  and adds those scenarios against a script (``ckpt-script::NAME``), as
  ``matrix --script`` runs them; the items are made from the same target
  specs a matrix's rows are (`targets.TargetSpec`);
- options ``--ckpt-timeout`` (unset, each run's config's own: a script's is
  longer than a job's, as on the command line), ``--ckpt-world-sizes``
  (parametrizes tests that use ``ckpt`` and whose marker names no world
  size);
- scenario files: any ``*.toml`` in a directory named ``scenarios`` is
  collected, one item per scenario, job and world size;
- over machines and workers: every item of one target (a job at one world
  size, the script) carries ``xdist_group``, so ``pytest -n N --dist
  loadgroup`` keeps them on one worker and their golden runs are made
  once; ``--ckpt-shard K/N`` keeps the K-th of N parts of the catalogue's
  items (a CI job matrix, a Slurm array), split as ``matrix --shard``
  splits (`catalogue.shards`), balanced by ``--ckpt-costs MATRIX_JSON``;
  other tests are not sharded;
- ``--ckpt-baseline FILE`` (or ini ``ckpt_baseline``): a previous
  ``matrix.json`` or an expectations file; a scenario failure it expects is
  xfail with its reason, one that now passes is XPASS and listed at the end
  for the baseline to be updated, a new or worse one fails.

Importing this module must stay cheap: pytest imports every plugin at start,
for every run, including runs that never touch a checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from pathlib import Path
from typing import Any, Optional, Union

import pytest

_WS_PARAM = "_ckpt_world_size"


def _marker_keys() -> dict:
    """The marker's keywords: every setting any kind of target's calls take
    (a job's first: its declarations win where kinds share a setting; a
    script's own defaults, such as its longer timeout, are `_kind_defaults`)."""
    from ckpt_harness import targets
    from ckpt_harness.config import settings_of

    keys: dict = {}
    for kind in targets.kinds():
        for name, s in settings_of(kind.configs["explore"]).items():
            keys.setdefault(name, s)
    return keys


def _kind_defaults() -> dict:
    """kind name -> the settings it declares with another default than the
    first kind's (a script's ``timeout``: `ScriptConfig`'s), as the
    marker's help line and --ckpt-timeout's say them."""
    from ckpt_harness import targets
    from ckpt_harness.config import settings_of

    kinds = targets.kinds()
    first = settings_of(kinds[0].configs["explore"])
    found = {kind.name: {name: s.default for name, s in settings_of(kind.configs["explore"]).items()
                         if name in first and s.default != first[name].default} for kind in kinds[1:]}
    return {name: differ for name, differ in found.items() if differ}


def _kind_settings() -> dict:
    """The settings the kinds of target add as options (``--ckpt-nproc-per-node``...), by name: those of
    each kind's run config that the first kind's (a job's: the marker sets them) does not take, each
    once, beside the option that picks each kind (``--ckpt-job``, ``--ckpt-script``), as the CLI's
    options are derived from the same kinds."""
    from ckpt_harness import targets
    from ckpt_harness.config import settings_of

    kinds = targets.kinds()
    first = settings_of(kinds[0].configs["run"])
    options = {kind.option for kind in kinds}
    found: dict = {}
    for kind in kinds[1:]:
        for name, s in settings_of(kind.configs["run"]).items():
            if name not in first and name not in options:
                found.setdefault(name, s)
    return found


def _option(name: str) -> str:
    """A setting or a kind's option under pytest: ``--ckpt-script``, ``--ckpt-nproc-per-node``..."""
    return "--ckpt-" + name.replace("_", "-")


def _collects(kind: Any) -> str:
    """What the option picking `kind` adds to the session, for its help."""
    prefix = f"ckpt-{kind.name}"
    if kind.whole_catalogue:
        return (f"adds the scenario catalogue against it, an item per scenario and world size "
                f"({prefix}::NAME[ROW-wsN]; --ckpt-scenarios narrows it)")
    return f"adds the item {prefix}::verify, and with --ckpt-scenarios those scenarios against it ({prefix}::NAME)"


def pytest_addoption(parser: pytest.Parser) -> None:
    from ckpt_harness import targets
    from ckpt_harness.config import SETTINGS, option_type

    timeout = SETTINGS["timeout"]
    group = parser.getgroup("ckpt_harness", "checkpoint verification (ckpt_harness)")
    # No default of its own: unset, each run takes its config's (a job's, a script's), declared once there.
    own = "".join(f"; with --ckpt-{kind}: {differ['timeout']:g}" for kind, differ in _kind_defaults().items()
                  if "timeout" in differ)
    group.addoption("--ckpt-timeout", type=float, default=None, metavar="SECONDS",
                    help=timeout.describe().rstrip(")") + own + ")")
    launcher = SETTINGS["launcher"]
    group.addoption("--ckpt-launcher", default=None, choices=launcher.choices,
                    help=launcher.describe() + " (marker: launcher=; script mode is judged elastic)")
    group.addoption(
        "--ckpt-world-sizes", default="2", metavar="N[,N...]",
        help="world sizes to run tests using the ckpt fixture at, and the rows of a kind of target that takes a "
             "world size (--ckpt-job), e.g. 1,2,4 (default 2)",
    )
    kinds = targets.kinds()
    for kind in kinds:
        group.addoption(_option(kind.option), dest=f"ckpt_{kind.option}", default=None,
                        metavar=kind.option.upper(), help=f"{kind.help}: {_collects(kind)}")
    group.addoption(
        "--ckpt-scenarios", default=None, metavar="NAME[,NAME...]",
        help=f"with {' or '.join(_option(kind.option) for kind in kinds)}: the catalogue scenarios to run against "
             "it (names or fnmatch patterns; see ckpt-harness list)",
    )
    for name, setting in _kind_settings().items():
        group.addoption(_option(name), dest=f"ckpt_{name}", default=None, type=option_type(setting),
                        metavar="true|false" if setting.kind is bool else name.upper(),
                        help=setting.describe() + " (marker: the same keyword)")
    baseline = ("a previous matrix.json or an expectations .toml: scenario failures it expects are xfail, "
                "new ones fail")
    group.addoption("--ckpt-baseline", default=None, metavar="FILE", help=f"{baseline} (ini: ckpt_baseline)")
    group.addoption("--ckpt-shard", default=None, metavar="K/N",
                    help="keep the K-th of N parts of the catalogue's items (as matrix --shard splits a matrix: a "
                         "target's items together where the costs allow); other tests are not sharded")
    group.addoption("--ckpt-costs", default=None, metavar="MATRIX_JSON",
                    help="with --ckpt-shard: balance the parts by the seconds each scenario took in this matrix.json")
    group.addoption("--ckpt-html", default=None, metavar="PATH",
                    help="write the ckpt items' results as one HTML page here (a grid per target and property, "
                         "each scenario's cases, each failing case's timeline), as `ckpt-harness matrix --html`")
    group.addoption("--ckpt-timeline-dir", default=None, metavar="DIR",
                    help="where the timelines of failing cases go, one Chrome trace file each for ui.perfetto.dev "
                         "(default: ckpt-timelines/ in pytest's base temporary directory); JUnit XML names them "
                         "(property ckpt_timeline), as pytest-html's extras do")
    parser.addini("ckpt_baseline", f"{baseline} (path relative to the ini file)", default=None)


def pytest_configure(config: pytest.Config) -> None:
    keys = ", ".join(f"{name}={s.default!r}" for name, s in _marker_keys().items())
    own = "".join(f" (a {kind}'s own: {', '.join(f'{name}={value!r}' for name, value in differ.items())})"
                  for kind, differ in _kind_defaults().items())
    config.addinivalue_line("markers", f"ckpt({keys}): defaults for the ckpt fixture{own}")
    _check_options(config)
    _load_baseline(config)


def _check_options(config: pytest.Config) -> None:
    """Bad options fail the session at once, naming the option, instead of every test."""
    from ckpt_harness.config import SETTINGS
    from ckpt_harness.errors import ConfigError

    _world_sizes(config)
    try:
        if config.getoption("--ckpt-timeout") is not None:
            SETTINGS["timeout"].check(config.getoption("--ckpt-timeout"))
    except ConfigError as exc:
        raise pytest.UsageError(f"--ckpt-timeout: {exc}") from None
    _shard(config)
    if config.getoption("--ckpt-costs") and not config.getoption("--ckpt-shard"):
        raise pytest.UsageError("--ckpt-costs balances the parts of --ckpt-shard K/N: give --ckpt-shard too, "
                                "or leave out --ckpt-costs")
    if config.getoption("--ckpt-scenarios") and not _picked(config):
        from ckpt_harness import targets

        raise pytest.UsageError("--ckpt-scenarios names the catalogue's scenarios to run against a target: add "
                                + " or ".join(f"{_option(kind.option)} ({kind.help})" for kind in targets.kinds()))


def _shard(config: pytest.Config) -> Any:
    """--ckpt-shard as a `Shard`, None without it; a bad one is a usage error."""
    from ckpt_harness.catalogue.shards import Shard
    from ckpt_harness.errors import UsageError

    text = config.getoption("--ckpt-shard")
    try:
        return Shard.parse(text) if text is not None else None
    except UsageError as exc:
        raise pytest.UsageError(str(exc).replace("--shard", "--ckpt-shard", 1)) from None


def _world_sizes(config: pytest.Config) -> list[int]:
    from ckpt_harness.launch import MAX_WORLD_SIZE

    raw = config.getoption("--ckpt-world-sizes")
    try:
        sizes = [int(x) for x in str(raw).split(",") if x.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(not 1 <= n <= MAX_WORLD_SIZE for n in sizes):
        raise pytest.UsageError(
            f"--ckpt-world-sizes={raw!r}: give comma-separated integers between 1 and {MAX_WORLD_SIZE}, e.g. 1,2,4"
        )
    return sizes


def _marker_kwargs(node: Any, strict: bool = True) -> dict:
    """The ckpt markers' keywords on `node`, the closest marker winning. A
    marker with a keyword no setting has raises `MarkerError` (`strict`) or
    is read for its known keywords only: parametrizing must not fail the
    module's collection, so the test alone errors (`pytest_runtest_setup`)."""
    kwargs: dict = {}
    keys = _marker_keys()
    for marker in reversed(list(node.iter_markers("ckpt"))):  # closest marker wins
        problem = _marker_problem(marker, keys)
        if problem and strict:
            raise MarkerError(problem)
        kwargs.update({name: value for name, value in marker.kwargs.items() if name in keys})
    return kwargs


class MarkerError(pytest.UsageError):
    """A @pytest.mark.ckpt keyword no setting has; the message names it, the closest one and every one."""


def _marker_problem(marker: Any, keys: Optional[dict] = None) -> Optional[str]:
    """What is wrong with one ``@pytest.mark.ckpt(...)``, said as the CLI says
    an unknown option: the bad keyword, the closest one (did you mean), then
    every keyword it takes; None when nothing is."""
    from ckpt_harness.errors import did_you_mean

    keys = _marker_keys() if keys is None else keys
    taken = (f"it takes {', '.join(keys)} (the settings of ckpt.verify, ckpt.explore and their _script forms; "
             "`pytest --markers` shows their defaults)")
    if marker.args:
        return (f"@pytest.mark.ckpt takes keyword arguments only, got {', '.join(map(repr, marker.args))}: "
                f"name each, e.g. @pytest.mark.ckpt(world_size=2); {taken}")
    unknown = [name for name in marker.kwargs if name not in keys]
    if not unknown:
        return None
    named = "; ".join(f"{name!r}{did_you_mean(name, keys)}" for name in unknown)
    return f"@pytest.mark.ckpt has no keyword {named}: {taken}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A misspelt @pytest.mark.ckpt keyword errors its own test, saying the
    keyword to write; the module's other tests run."""
    for marker in item.iter_markers("ckpt"):
        problem = _marker_problem(marker)
        if problem:
            pytest.fail(problem, pytrace=False)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "ckpt" not in metafunc.fixturenames:
        return
    marked = _marker_kwargs(metafunc.definition, strict=False).get("world_size")
    if marked is None:
        sizes = _world_sizes(metafunc.config)
    else:
        sizes = list(marked) if isinstance(marked, (list, tuple)) else [marked]
    metafunc.parametrize(_WS_PARAM, sizes, ids=[f"ws{n}" for n in sizes], scope="function")


@pytest.fixture
def _ckpt_world_size() -> Optional[int]:
    return None


class CkptFixture:
    """What the ``ckpt`` fixture gives a test; defaults come from marker and options."""

    def __init__(self, defaults: dict, tmp_path: Path, item: Optional[pytest.Item] = None):
        self.defaults = defaults
        self.tmp_path = tmp_path
        self._runs = 0
        #: The test using it: a failing report's repro line and timelines go to its JUnit and pytest-html report.
        self.item = item

    @property
    def world_size(self) -> int:
        return self.defaults["world_size"]

    def verify(self, job: Union[str, type, Any], **settings: Any):
        """`ckpt_harness.verify` with this test's defaults; returns the Report.
        `job` may be a target of any kind (`ckpt_harness.targets`)."""
        from ckpt_harness.pipeline.verify import verify

        return self._call(verify, "run", job, settings)

    def explore(self, job: Union[str, type, Any], **settings: Any):
        """`ckpt_harness.explore` with this test's defaults; returns the Report."""
        from ckpt_harness.pipeline.explore import explore

        return self._call(explore, "explore", job, settings)

    def verify_script(self, script: Optional[str] = None, **settings: Any):
        """`ckpt_harness.verify_script` (an unmodified script under torchrun)
        with this test's defaults; `script` defaults to the marker's, then
        to ``--ckpt-script``. Returns the Report."""
        from ckpt_harness.pipeline.verify import verify_script

        return self._call(verify_script, "run", self._script(script), settings, "script")

    def explore_script(self, script: Optional[str] = None, **settings: Any):
        """`explore --script` with this test's defaults; returns the Report."""
        from ckpt_harness.pipeline.explore import explore_script

        return self._call(explore_script, "explore", self._script(script), settings, "script")

    def bisect_script(self, package: str, good: str, bad: str, script: Optional[str] = None, *,
                      releases: Optional[list] = None, cases: Optional[list] = None, **settings: Any):
        """`ckpt-harness bisect --script` with this test's defaults: the first
        release of `package` from `good` to `bad` whose verdict on the script
        changed, by cause. Returns the `Bisection` (`culprit` None: none did)."""
        from ckpt_harness import targets
        from ckpt_harness.pipeline.bisect import bisect_script

        script = self._script(script)
        self._runs += 1
        return bisect_script(script, package, good, bad, releases=releases, cases=cases,
                             workdir=self.tmp_path / f"ckpt-{self._runs}",
                             **self._settings(targets.takes(script, "run", "script"), settings))

    def script_config(self, script: Optional[str] = None, **settings: Any):
        """The `ScriptConfig` that ``verify_script(script, **settings)``
        runs: the call's settings over the marker's and the options', script
        mode's own defaults for the rest (its timeout is `ScriptConfig`'s, as
        `run --script`'s is, unless --ckpt-timeout or the marker gives one)."""
        from ckpt_harness import targets

        script = self._script(script)
        given = {"script": script, **self._settings(targets.takes(script, "run", "script"), settings)}
        return targets.config_of(targets.named("script"), "run", given)

    def _settings(self, takes: Any, settings: dict) -> dict:
        """The marker's and options' settings that a call taking `takes` (the
        names `targets.takes` gives) takes, then the call's own (all of them:
        a setting the call does not take is an error)."""
        return {**{k: v for k, v in self.defaults.items() if k in takes}, **settings}

    def _script(self, script: Optional[str]) -> str:
        script = script or self.defaults.get("script")
        if not script:
            raise pytest.UsageError("ckpt.verify_script needs a script: pass it, set @pytest.mark.ckpt(script=...) "
                                    "or give --ckpt-script 'train.py {ckpt_dir} ...'")
        return script

    def _call(self, fn: Any, command: str, spec: Any, settings: dict, kind: str = "job"):
        """Marker defaults that `spec` (the value of kind `kind`'s option, or
        a target) takes for `command`, then the call's own settings (all of
        them: a setting the call does not take is an error)."""
        from ckpt_harness import targets
        from ckpt_harness.errors import Unavailable

        kwargs = self._settings(targets.takes(spec, command, kind), settings)
        self._runs += 1
        kwargs.setdefault("workdir", self.tmp_path / f"ckpt-{self._runs}")
        try:
            report = fn(spec, **kwargs)
        except Unavailable as exc:
            pytest.skip(str(exc))
        if self.item is None:
            return report
        report = _outputs(self.item, report) if not report.ok else report
        _fixture_reports(self.item.config).append((self.item.nodeid, report))
        return report


@pytest.fixture
def ckpt(request: pytest.FixtureRequest, tmp_path: Path, _ckpt_world_size: Optional[int]) -> CkptFixture:
    from ckpt_harness.config import SETTINGS

    defaults = {**_given(request.config), **_marker_kwargs(request.node)}
    defaults["world_size"] = _ckpt_world_size or defaults.get("world_size") or SETTINGS["world_size"].default
    return CkptFixture(defaults, tmp_path, request.node)


def _given(config: pytest.Config) -> dict:
    """The settings the kinds' options gave (``--ckpt-script``, ``--ckpt-nproc-per-node``...) by name, with
    --ckpt-timeout's and --ckpt-launcher's: the fixture's defaults, and the rows of the picked kind's items."""
    from ckpt_harness import targets

    names = [*(kind.option for kind in targets.kinds()), *_kind_settings()]
    return {**{name: value for name in names if (value := config.getoption(f"ckpt_{name}")) is not None},
            **_timeout(config), **_launcher(config)}


# -- the target the options pick, as test items: its verification, the catalogue against it ---------
def _picked(config: pytest.Config) -> list:
    """The kinds of target the options pick (``--ckpt-job``, ``--ckpt-script``...): each adds its own items."""
    from ckpt_harness import targets

    return [kind for kind in targets.kinds() if config.getoption(f"ckpt_{kind.option}") is not None]


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
    given = {name: value for name, value in _given(config).items() if name in takes or name == kind.option}
    sized = "world_size" in takes
    rows = []
    for settings in ([{**given, "world_size": n} for n in _world_sizes(config)] if sized else [given]):
        spec = targets.TargetSpec(kind.name, settings)
        try:
            target = targets.make(settings, "run")
            target.preflight()
        except Unavailable as exc:
            rows.append(Row(spec, str(given[kind.option]), settings.get("world_size", 0), sized, unavailable=str(exc)))
            continue
        except UsageError as exc:
            raise pytest.UsageError(f"{_option(kind.option)} {given[kind.option]}: {exc}") from None
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
        raise pytest.UsageError(f"{_option(kind.option)}: {exc}") from None


def _default_rows(config: pytest.Config, scenario: Any) -> list:
    """Without a kind's option: the built-in jobs `scenario` applies to, at every --ckpt-world-sizes, made
    where their items run (importing every framework at collection would slow every session)."""
    from ckpt_harness import targets
    from ckpt_harness.catalogue.scenario import default_jobs

    return [Row(targets.TargetSpec("job", {"job": job, "world_size": n, **_timeout(config), **_launcher(config)}),
                job, n, sized=True) for job in default_jobs([scenario]) for n in _world_sizes(config)]


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
        report = _outputs(self, report)
        if not report.ok:
            raise ScenarioFailed(report.explain())

    def reportinfo(self) -> tuple[str, Optional[int], str]:
        return self.row.name, None, f"verify {self.row.name} ({self.row.spec.kind})"


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Optional[pytest.Collector]:
    """Any `*.toml` in a directory named `scenarios` is a scenario file."""
    if file_path.suffix == ".toml" and file_path.parent.name == "scenarios":
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


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
        picked = [row for kind in _picked(self.config) for row in _breakable(kind, _target_rows(self.config, kind))]
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
        _expect(self)

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
        result = _outputs(self, result)
        _results(self.config).append((self, result))
        gated = _gate(self.config, result)
        if result.verdict is Verdict.NA:
            pytest.skip(f"n/a: {result.reason}")
        if result.verdict is not Verdict.PASS:
            gate = f"\n{gated.line()}" if gated is not None and gated.expectation is not None else ""
            raise (KnownFailure if gated is not None and gated.expected else ScenarioFailed)(result.explain() + gate)

    def reportinfo(self) -> tuple[str, Optional[int], str]:
        return (self.scenario.source, None,
                f"{self.scenario.name} [{self.scenario.property}] {self.job} ws{self.world_size}")


# -- what a failing item leaves for people: timelines, repro lines, the HTML page ------------
_RESULTS = pytest.StashKey[list]()
#: What an item's failure carries for pytest-html: (name, repro line or timeline file).
_EXTRAS = pytest.StashKey[list]()


def _timeline_dir(config: pytest.Config) -> Path:
    given = config.getoption("ckpt_timeline_dir")
    if given:
        return Path(config.invocation_params.dir) / given
    return Path(config._tmp_path_factory.getbasetemp()) / "ckpt-timelines"  # type: ignore[attr-defined]


def _outputs(item: pytest.Item, result: Any) -> Any:
    """`result` (a report or a scenario's result) with the timelines of its
    failing cases written (`--ckpt-timeline-dir`), and what JUnit XML and
    pytest-html carry of it: the repro line and each timeline's file."""
    written = result.with_timelines(_timeline_dir(item.config) / re.sub(r"[^\w.=+-]+", "_", item.nodeid))
    extras = item.stash.setdefault(_EXTRAS, [])
    for case, file in dict.fromkeys((r.case, r.timeline_file) for r in written.results if r.timeline_file):
        item.user_properties.append(("ckpt_timeline", file))
        extras.append((f"timeline of {case}", file))
    repro = getattr(written, "repro", None) or next((r.repro for r in written.results if r.repro and
                                                     not r.verdict.ok), None)
    if repro:
        item.user_properties.append(("ckpt_repro", repro))
        extras.insert(0, ("repro", repro))
    return written


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """A failing ckpt item's report carries its repro line and timelines as
    pytest-html extras, when pytest-html is installed."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and item.stash.get(_EXTRAS, None):
        try:
            from pytest_html import extras as html_extras
        except ImportError:
            return
        found = list(getattr(report, "extras", []))
        for name, value in item.stash[_EXTRAS]:
            if name == "repro":
                found.append(html_extras.text(value, name="repro"))
            else:
                try:
                    found.append(html_extras.json(json.loads(Path(value).read_text()), name=name))
                except (OSError, ValueError):
                    found.append(html_extras.url(Path(value).resolve().as_uri(), name=name))
        report.extras = found


def _results(config: pytest.Config) -> list:
    """The session's catalogue items with their results (for --ckpt-html)."""
    return config.stash.setdefault(_RESULTS, [])


def _fixture_reports(config: pytest.Config) -> list:
    """(test node id, Report) of every call of the `ckpt` fixture this session (for --ckpt-html)."""
    return config.stash.setdefault(_REPORTS, [])


_REPORTS = pytest.StashKey[list]()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """--ckpt-html: in an xdist worker, hand the results to the controller;
    elsewhere, write the page of every item's results, the workers' too."""
    config = session.config
    path = config.getoption("ckpt_html")
    if hasattr(config, "workeroutput"):  # the controller gates and writes what every worker judged
        config.workeroutput["ckpt_gated"] = [g.to_json() for g in config.stash.get(_GATED, [])]  # type: ignore
    if not path:
        return
    mine = [(item.world_size, item.scenario.to_json(), result.to_json()) for item, result in _results(config)]
    reports = [(test, report_json(report)) for test, report in _fixture_reports(config)]
    if hasattr(config, "workeroutput"):
        config.workeroutput["ckpt_results"] = mine  # type: ignore[attr-defined]
        config.workeroutput["ckpt_reports"] = reports  # type: ignore[attr-defined]
        return
    _write_html(config, Path(path), mine + config.stash.get(_FROM_WORKERS, []),
                reports + config.stash.get(_REPORTS_FROM_WORKERS, []))


_FROM_WORKERS = pytest.StashKey[list]()
_REPORTS_FROM_WORKERS = pytest.StashKey[list]()


def report_json(report: Any) -> dict:
    """A fixture's report as an xdist worker sends it: what the page shows of it."""
    from ckpt_harness.catalogue.scenario import case_json

    return {"job": report.job, "world_size": report.world_size, "kind": report.kind, "noun": report.noun,
            "note": report.note, "elapsed": report.elapsed, "warnings": list(report.warnings),
            "cases": [case_json(r) for r in report.results]}


def report_from_json(data: dict) -> Any:
    from ckpt_harness.catalogue.scenario import case_from_json
    from ckpt_harness.report import Report

    return Report(data["job"], data["world_size"], [case_from_json(c) for c in data["cases"]], data["elapsed"],
                  data["kind"], data["note"], warnings=tuple(data["warnings"]), noun=data["noun"])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """An xdist worker's results, for --ckpt-html and the baseline's summary."""
    output = getattr(node, "workeroutput", {})
    found = output.get("ckpt_results")
    if found:
        node.config.stash.setdefault(_FROM_WORKERS, []).extend(found)
    reports = output.get("ckpt_reports")
    if reports:
        node.config.stash.setdefault(_REPORTS_FROM_WORKERS, []).extend(reports)
    gated = output.get("ckpt_gated")
    if gated:
        from ckpt_harness.catalogue.expectations import Judged

        node.config.stash.setdefault(_GATED, []).extend(Judged.from_json(g) for g in gated)


def _write_html(config: pytest.Config, path: Path, results: list, reports: list) -> None:
    """The page of the ckpt items' results (a row per target, and world size
    when several ran) and of the reports the tests' `ckpt` fixture made."""
    from ckpt_harness.catalogue.matrix import Matrix
    from ckpt_harness.catalogue.scenario import ScenarioResult
    from ckpt_harness.catalogue.scenario_files import from_json
    from ckpt_harness.present import html
    from ckpt_harness.report import versions

    if not results and not reports:
        return
    named = [(test, report_from_json(data)) for test, data in sorted(reports, key=lambda r: r[0])]
    if not results:
        html.write(html.session_page(named, versions()), path)
        config.get_terminal_writer().line(f"ckpt_harness HTML report: {path}")
        return
    sizes = {ws for ws, _, _ in results}
    rows, scenarios, done = [], {}, []
    for ws, scenario, data in results:
        result = ScenarioResult.from_json(data)
        row = result.job if len(sizes) == 1 else f"{result.job} ws{ws}"
        rows.append(row)
        scenarios.setdefault(scenario["name"], from_json(scenario))
        done.append(dataclasses.replace(result, job=row))
    matrix = Matrix(world_size=min(sizes), names=list(dict.fromkeys(rows)), results=done,
                    scenarios=list(scenarios.values()), versions=versions(),
                    elapsed=sum(r.elapsed for r in done))
    html.write(html.matrix_page(matrix, reports=named), path)
    config.get_terminal_writer().line(f"ckpt_harness HTML report: {path}")


class ScenarioFailed(AssertionError):
    """A scenario judged fail or unknown; the message is its explanation."""


class KnownFailure(ScenarioFailed):
    """A scenario failing as the baseline expects: the item's xfail (and only
    this) is what its xfail marker accepts, so another failure still fails."""


# -- regression gating (ckpt_harness.catalogue.expectations) ----------------------------------------
_BASELINE = pytest.StashKey[Any]()
_GATED = pytest.StashKey[list]()


def _load_baseline(config: pytest.Config) -> None:
    from ckpt_harness.errors import UsageError
    from ckpt_harness.catalogue.expectations import load

    path = config.getoption("--ckpt-baseline")
    if path is None and config.getini("ckpt_baseline"):
        path = (config.inipath.parent if config.inipath else config.rootpath) / config.getini("ckpt_baseline")
    if path is None:
        return
    try:
        config.stash[_BASELINE] = load(path)
    except UsageError as exc:
        raise pytest.UsageError(f"--ckpt-baseline: {exc}") from None


def _expect(item: "ScenarioItem") -> None:
    """A failure the baseline expects is xfail; non-strict, so a pass is XPASS."""
    baseline = item.config.stash.get(_BASELINE, None)
    e = baseline.expected(item.job, item.scenario.name) if baseline is not None else None
    if e is not None and not e.verdict.ok:
        item.add_marker(pytest.mark.xfail(reason=f"expected {e.verdict.value}: {e.reason} ({e.where})",
                                          raises=KnownFailure, strict=False))


def _gate(config: pytest.Config, result: Any) -> Any:
    """The result against the baseline (None without one), kept for the summary."""
    baseline = config.stash.get(_BASELINE, None)
    if baseline is None:
        return None
    from ckpt_harness.catalogue.expectations import Judged

    config.stash.setdefault(_GATED, []).append(Judged.of(result))
    return baseline.judge(result.job, result.scenario, result.verdict, result.reason, result.causes)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
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


_BENCHES = pytest.StashKey[dict]()


def _bench(config: pytest.Config, row: Row):
    """Benches live for the session, so scenarios of one target share golden runs."""
    from ckpt_harness.catalogue.bench import Bench

    benches = config.stash.setdefault(_BENCHES, {})
    if row.group not in benches:
        root = config._tmp_path_factory.mktemp(f"ckpt-ws{row.world_size}")  # type: ignore[attr-defined]
        benches[row.group] = Bench(row.make(), root, name=row.name)
    return benches[row.group]


def _timeout(config: pytest.Config) -> dict:
    """--ckpt-timeout as a setting, if given. The option has no default of
    its own: unset, each run takes its config's, declared once in
    `ckpt_harness.config` (a job's `RunConfig`, a script's `ScriptConfig`,
    longer: torchrun and a script's imports start inside it), as the CLI's
    runs do; a default here would give a script a job's."""
    given = config.getoption("--ckpt-timeout")
    return {"timeout": given} if given is not None else {}


def _launcher(config: pytest.Config) -> dict:
    """--ckpt-launcher as a setting, if given (a script's runs are judged elastic, and refuse it)."""
    given = config.getoption("--ckpt-launcher")
    return {"launcher": given} if given is not None else {}


def _names_scenario_files(config: pytest.Config) -> bool:
    """Did the command line name scenario files or directories (not just a
    repo whose tests happen to hold a `scenarios/` directory)?"""
    here = Path(config.invocation_params.dir)
    for arg in config.args:
        path = (here / arg.split("::")[0]).resolve()
        if path.suffix == ".toml" or path.name == "scenarios" or path.parent.name == "scenarios":
            return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    """Take the picked target's node ids (``ckpt-job::NAME[JOB-wsN]``, ``ckpt-script::verify``) out of the
    arguments before pytest looks for them as files; its items are then narrowed to them."""
    from ckpt_harness import targets

    args = session.config.args
    prefixes = tuple(f"ckpt-{kind.name}" for kind in targets.kinds())
    wanted = [a for a in args if a.split("::")[0] in prefixes]
    if wanted:
        session.config.stash[_WANTED] = wanted
        args[:] = [a for a in args if a not in wanted]


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups, and before -k and -m deselect
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """The catalogue's items, then only this shard's of them (--ckpt-shard)."""
    _add_catalogue(session, config, items)
    shard = _shard(config)
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

    kinds = _picked(config)
    wanted = config.stash.get(_WANTED, [])
    stray = [arg for arg in wanted if arg.split("::")[0] not in {f"ckpt-{kind.name}" for kind in kinds}]
    if stray:
        named = stray[0].split("::")[0].removeprefix("ckpt-")
        raise pytest.UsageError(f"{stray[0]}: its items need {_option(named)} VALUE, the target they run against")
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
                                        f"pytest {_option(kind.option)} {value} --collect-only -q")
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
