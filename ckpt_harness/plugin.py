"""The pytest plugin, registered under the entry point name ``ckpt_harness``.

- fixture ``ckpt``: ``ckpt.verify(job, ...)`` and ``ckpt.explore(job, ...)``
  return a report whose ``assert_ok()`` fails the test with the verdict table;
- marker ``@pytest.mark.ckpt(world_size=2, steps=8, ...)`` sets the
  fixture's defaults: any setting of `ckpt_harness.config` (each call takes
  those its config has); ``world_size`` may be a list, which parametrizes
  the test; a keyword no setting has errors that test alone, naming the
  closest one;
- ``ckpt.verify_script(script, ...)`` / ``ckpt.explore_script(script, ...)``: script
  mode (an unmodified script under torchrun); ``--ckpt-script 'train.py {ckpt_dir}'``
  with ``--ckpt-nproc-per-node``, ``--ckpt-nnodes``, ``--ckpt-max-restarts`` sets
  their defaults and adds the item ``ckpt-script::verify`` (with ``--ckpt-scenarios``
  also the catalogue against the script, ``ckpt-script::NAME``, as ``matrix --script``);
- options ``--ckpt-timeout`` (unset, each run's config's own: a script's is
  longer than a job's, as on the command line), ``--ckpt-world-sizes`` (parametrizes tests that
  use ``ckpt`` and whose marker names no world size), ``--ckpt-job
  module:Class`` (adds the built-in scenario catalogue against that job, one
  item per scenario and world size, with node ids such as
  ``ckpt-job::crash-every-phase[torch_save-ws2]`` that pytest takes back as
  arguments to rerun just those; ``--ckpt-scenarios`` narrows it);
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
from pathlib import Path
from typing import Any, Callable, Optional, Union

import pytest

_WS_PARAM = "_ckpt_world_size"


def _marker_keys() -> dict:
    """The marker's keywords: every setting of a job's and a script's calls,
    each with its job-mode declaration where both have it (a script's own
    defaults, such as its longer timeout, are `_script_defaults`)."""
    from ckpt_harness.config import ExploreConfig, ScriptExploreConfig, settings_of

    keys = dict(settings_of(ExploreConfig))
    for name, s in settings_of(ScriptExploreConfig).items():
        keys.setdefault(name, s)
    return keys


def _script_defaults() -> dict:
    """The settings script mode declares with another default than a job's
    (``timeout``: `ScriptConfig`'s), as the marker's help line says them."""
    from ckpt_harness.config import ExploreConfig, ScriptExploreConfig, settings_of

    jobs = settings_of(ExploreConfig)
    return {name: s.default for name, s in settings_of(ScriptExploreConfig).items()
            if name in jobs and s.default != jobs[name].default}


def _script_option(name: str) -> str:
    """Script mode's settings as options: ``--ckpt-script``, ``--ckpt-nproc-per-node``..."""
    return "--ckpt-" + name.replace("_", "-")


def pytest_addoption(parser: pytest.Parser) -> None:
    from ckpt_harness.config import SETTINGS, option_type, script_mode_settings

    from ckpt_harness.config import ScriptConfig, settings_of

    timeout = SETTINGS["timeout"]
    group = parser.getgroup("ckpt_harness", "checkpoint verification (ckpt_harness)")
    # No default of its own: unset, each run takes its config's (a job's, a script's), declared once there.
    group.addoption(
        "--ckpt-timeout", type=float, default=None, metavar="SECONDS",
        help=timeout.describe().rstrip(")") + f"; with --ckpt-script and ckpt.verify_script: "
                                              f"{settings_of(ScriptConfig)['timeout'].default})",
    )
    launcher = SETTINGS["launcher"]
    group.addoption("--ckpt-launcher", default=None, choices=launcher.choices,
                    help=launcher.describe() + " (marker: launcher=; script mode is judged elastic)")
    group.addoption(
        "--ckpt-world-sizes", default="2", metavar="N[,N...]",
        help="world sizes to run tests using the ckpt fixture at, e.g. 1,2,4 (default 2)",
    )
    group.addoption(
        "--ckpt-job", default=None, metavar="module:Class",
        help="run the scenario catalogue against this Job (or a built-in job name) at every --ckpt-world-sizes",
    )
    group.addoption(
        "--ckpt-scenarios", default=None, metavar="NAME[,NAME...]",
        help="with --ckpt-job: only these catalogue scenarios (names or fnmatch patterns; see ckpt-harness list); "
             "with --ckpt-script: these scenarios against the script, items ckpt-script::NAME",
    )
    for name in script_mode_settings():
        setting = SETTINGS[name]
        group.addoption(_script_option(name), dest=f"ckpt_{name}", default=None, type=option_type(setting),
                        metavar={"script": "'TRAIN.PY ARGS'", "script_args": "NAME=ARGS,...",
                                 "checkpoint_layout": "LAYOUT", "resume_args": "'ARGS'"}.get(
                                     name, "true|false" if setting.kind is bool else "N"),
                        help=setting.describe() + ("; adds the item ckpt-script::verify, which verifies the script"
                                                   if name == "script" else "") + " (marker: script mode's keys)")
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
    scripts = ", ".join(f"{name}={value!r}" for name, value in _script_defaults().items())
    config.addinivalue_line("markers", f"ckpt({keys}): defaults for the ckpt fixture"
                                       + (f" (a script's own: {scripts})" if scripts else ""))
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
    if config.getoption("--ckpt-scenarios") and not config.getoption("--ckpt-job") \
            and not config.getoption("ckpt_script"):
        raise pytest.UsageError("--ckpt-scenarios narrows the catalogue that --ckpt-job runs: "
                                "add --ckpt-job NAME (a built-in job or module:Class), or --ckpt-script "
                                "'train.py {ckpt_dir}' to run it against a script")


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
        from ckpt_harness.config import ScriptConfig
        from ckpt_harness.pipeline.verify import verify_script

        return self._call(verify_script, "run", self._script(script), settings, ScriptConfig)

    def explore_script(self, script: Optional[str] = None, **settings: Any):
        """`explore --script` with this test's defaults; returns the Report."""
        from ckpt_harness.config import ScriptExploreConfig
        from ckpt_harness.pipeline.explore import explore_script

        return self._call(explore_script, "explore", self._script(script), settings, ScriptExploreConfig)

    def bisect_script(self, package: str, good: str, bad: str, script: Optional[str] = None, *,
                      releases: Optional[list] = None, cases: Optional[list] = None, **settings: Any):
        """`ckpt-harness bisect --script` with this test's defaults: the first
        release of `package` from `good` to `bad` whose verdict on the script
        changed, by cause. Returns the `Bisection` (`culprit` None: none did)."""
        from ckpt_harness.config import ScriptConfig
        from ckpt_harness.pipeline.bisect import bisect_script

        self._runs += 1
        return bisect_script(self._script(script), package, good, bad, releases=releases, cases=cases,
                             workdir=self.tmp_path / f"ckpt-{self._runs}", **self._settings(ScriptConfig, settings))

    def script_config(self, script: Optional[str] = None, **settings: Any):
        """The `ScriptConfig` that ``verify_script(script, **settings)``
        runs: the call's settings over the marker's and the options', script
        mode's own defaults for the rest (its timeout is `ScriptConfig`'s, as
        `run --script`'s is, unless --ckpt-timeout or the marker gives one)."""
        from ckpt_harness.config import ScriptConfig

        return ScriptConfig(script=self._script(script), **self._settings(ScriptConfig, settings))

    def _settings(self, takes: Any, settings: dict) -> dict:
        """The marker's and options' settings that a call taking `takes` (a
        config class, or the names `targets.takes` gives) takes, then the
        call's own (all of them: a setting the call does not take is an error)."""
        from ckpt_harness.config import settings_of

        names = settings_of(takes) if isinstance(takes, type) else takes
        return {**{k: v for k, v in self.defaults.items() if k in names and k != "script"}, **settings}

    def _script(self, script: Optional[str]) -> str:
        script = script or self.defaults.get("script")
        if not script:
            raise pytest.UsageError("ckpt.verify_script needs a script: pass it, set @pytest.mark.ckpt(script=...) "
                                    "or give --ckpt-script 'train.py {ckpt_dir} ...'")
        return script

    def _call(self, fn: Any, command: str, job: Any, settings: dict, config: Optional[type] = None):
        """Marker defaults that `job` takes for `command` (those of `config`,
        if given), then the call's own settings (all of them: a setting the
        call does not take is an error)."""
        from ckpt_harness import targets
        from ckpt_harness.errors import Unavailable

        kwargs = self._settings(config if config is not None else targets.takes(job, command), settings)
        self._runs += 1
        kwargs.setdefault("workdir", self.tmp_path / f"ckpt-{self._runs}")
        try:
            report = fn(job, **kwargs)
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

    defaults = {**_script_options(request.config), **_timeout(request.config),
                **_launcher(request.config), **_marker_kwargs(request.node)}
    defaults["world_size"] = _ckpt_world_size or defaults.get("world_size") or SETTINGS["world_size"].default
    return CkptFixture(defaults, tmp_path, request.node)


def _script_options(config: pytest.Config) -> dict:
    """The script-mode settings given as options (``--ckpt-script`` ...)."""
    from ckpt_harness.config import script_mode_settings

    return {name: value for name in script_mode_settings() if (value := config.getoption(f"ckpt_{name}")) is not None}


# -- --ckpt-script: the script's verification as a test item ------------------------------
#: The node id of the item --ckpt-script adds.
SCRIPT_ITEM = "ckpt-script"


class ScriptCollector(pytest.Collector):
    """The --ckpt-script script; named by itself, as `Catalogue` is. Its
    items are made with the catalogue's, and counted as collected there
    (`_collected`)."""

    def collect(self) -> list:
        return []


class ScriptItem(pytest.Item):
    """``ckpt-harness run --script`` as a test: fails with the verdict table
    unless every case passes. Its timeout is script mode's own
    (`ScriptConfig`'s) unless ``--ckpt-timeout`` was given."""

    def runtest(self) -> None:
        from ckpt_harness.errors import Unavailable
        from ckpt_harness.pipeline.verify import verify_script

        settings = {**_script_options(self.config), **_timeout(self.config)}
        script = settings.pop("script")
        try:
            report = verify_script(script, workdir=self.config._tmp_path_factory.mktemp("ckpt-script"),  # type: ignore[attr-defined]
                                   **settings)
        except Unavailable as exc:
            pytest.skip(str(exc))
        self.user_properties.append(("ckpt_verdict", report.verdict.value))
        report = _outputs(self, report)
        if not report.ok:
            raise ScenarioFailed(report.explain())

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ScenarioFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[str, Optional[int], str]:
        return (self.config.getoption("ckpt_script"), None,
                f"verify {self.config.getoption('ckpt_script')} under torchrun")




def _script_config(config: pytest.Config) -> Any:
    """The --ckpt-script script's `ScriptConfig` for catalogue items (a matrix
    row's); bad settings are usage errors, at collection."""
    from ckpt_harness.config import ScriptConfig
    from ckpt_harness.errors import ConfigError

    settings = {**_script_options(config), **_timeout(config)}
    if settings.get("max_restarts"):
        raise pytest.UsageError("--ckpt-max-restarts applies to ckpt-script::verify only: the catalogue items "
                                "(--ckpt-scenarios) run each resume themselves, as `matrix --script` does")
    settings.pop("max_restarts", None)
    try:
        return ScriptConfig(**settings)
    except ConfigError as exc:
        raise pytest.UsageError(f"--ckpt-script: {exc}") from None


def _script_items(parent: pytest.Collector, config: pytest.Config) -> list:
    """--ckpt-script with --ckpt-scenarios: a catalogue item per scenario
    against the script (``ckpt-script::crash-every-phase``), run as a
    `matrix --script` row runs it; n/a skips with the reason."""
    from ckpt_harness.errors import ScenarioError
    from ckpt_harness.catalogue.scenario import builtin_catalogue, select
    from ckpt_harness.targets.script import row_name

    patterns = [p.strip() for p in (config.getoption("--ckpt-scenarios") or "").split(",") if p.strip()]
    if not patterns:
        return []
    script = _script_config(config)
    try:
        scenarios = select(builtin_catalogue(), patterns)
    except ScenarioError as exc:
        raise pytest.UsageError(f"--ckpt-scenarios: {exc}") from None
    from ckpt_harness import targets

    return [ScenarioItem.from_parent(parent, name=s.name, scenario=s, job=row_name(script.script),
                                     world_size=script.world_size, target=lambda: targets.of(script))
            for s in scenarios]


# -- the scenario catalogue as test items ---------------------------------------------
def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Optional[pytest.Collector]:
    """Any `*.toml` in a directory named `scenarios` is a scenario file."""
    if file_path.suffix == ".toml" and file_path.parent.name == "scenarios":
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


class ScenarioFile(pytest.File):
    """One item per scenario, target job and world size: the --ckpt-job job,
    or else the built-in jobs the scenario names."""

    def collect(self):
        from ckpt_harness.errors import ScenarioError
        from ckpt_harness.catalogue.scenario import load_file

        try:
            scenarios = load_file(self.path)
        except ScenarioError as exc:
            raise self.CollectError(str(exc)) from None
        for scenario in scenarios:
            yield from _items(self, scenario, self.config)


def _items(parent: pytest.Collector, scenario: Any, config: pytest.Config):
    from ckpt_harness.catalogue.scenario import default_jobs

    job = config.getoption("--ckpt-job")
    jobs = [job] if job else default_jobs([scenario])
    for name in jobs:
        for n in _world_sizes(config):
            yield ScenarioItem.from_parent(parent, name=f"{scenario.name}[{name}-ws{n}]", scenario=scenario,
                                           job=name, world_size=n, target=_job_target(config, name, n))


#: The first part of the node ids of the --ckpt-job catalogue: their JUnit class name.
CATALOGUE = "ckpt-job"
_WANTED = pytest.StashKey[list]()


class Catalogue(pytest.Collector):
    """The built-in catalogue against the --ckpt-job job. It has no file, so
    it names itself: without an id of its own its items' ids would start with
    "::" (and their JUnit class name with a dot)."""

    def collect(self) -> list:
        return []  # its items are made where the run's other items are known, and counted there (`_collected`)


class ScenarioItem(pytest.Item):
    """A catalogue scenario against one target (a job at one world size, the
    --ckpt-script script); n/a skips."""

    def __init__(self, *, scenario: Any, job: str, world_size: int, target: Callable[[], Any], **kwargs: Any):
        super().__init__(**kwargs)
        self.scenario = scenario
        #: Its row: the job's name, the script's command without directories.
        self.job = job
        self.world_size = world_size
        #: Makes its target when it runs (not at collection: a framework that is not installed skips the item).
        self.target = target
        # one worker per target under `--dist loadgroup`: the bench, and so the golden runs, are per process
        self.add_marker(pytest.mark.xdist_group(self.group))
        _expect(self)

    @property
    def group(self) -> str:
        """The target it runs against: the items of one share a bench."""
        return f"ckpt-{self.job}-ws{self.world_size}"

    def bench(self) -> Any:
        """The session's bench of its target, shared by every item of it (their golden runs too)."""
        return _bench(self.config, self.job, self.world_size, self.target)

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

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ScenarioFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

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
    from ckpt_harness.catalogue.scenario import Scenario, ScenarioResult
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
        scenarios.setdefault(scenario["name"], Scenario.from_json(scenario))
        done.append(dataclasses.replace(result, job=row))
    matrix = Matrix(world_size=min(sizes), jobs=list(dict.fromkeys(rows)), results=done,
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
    from ckpt_harness.catalogue.scenario import builtin_catalogue

    catalogue = {s.name for s in builtin_catalogue()} | {r.scenario for r in results}
    gating = baseline.gate(results, catalogue=catalogue)
    terminalreporter.write_sep("-", "ckpt baseline")
    for line in gating.explain().splitlines():
        terminalreporter.write_line(line)
    if gating.outdated:
        terminalreporter.write_line(f"update the baseline {baseline.source}: drop its fixed and stale entries")


_BENCHES = pytest.StashKey[dict]()


def _bench(config: pytest.Config, job: str, world_size: int, target: Callable[[], Any]):
    """Benches live for the session, so scenarios of one target share golden runs."""
    from ckpt_harness.catalogue.bench import Bench

    benches = config.stash.setdefault(_BENCHES, {})
    if (job, world_size) not in benches:
        root = config._tmp_path_factory.mktemp(f"ckpt-ws{world_size}")  # type: ignore[attr-defined]
        benches[job, world_size] = Bench(target(), root, name=job)
    return benches[job, world_size]


def _job_target(config: pytest.Config, job: str, world_size: int) -> Callable[[], Any]:
    def make() -> Any:
        from ckpt_harness import targets

        return targets.job(job, world_size=world_size, **_timeout(config), **_launcher(config))

    return make


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
    """Take catalogue node ids (`ckpt-job::NAME[JOB-wsN]`) out of the arguments
    before pytest looks for them as files; the catalogue's items are then
    narrowed to them."""
    args = session.config.args
    wanted = [a for a in args if a == CATALOGUE or a.startswith(f"{CATALOGUE}::")]
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
    """--ckpt-job: the built-in catalogue against that job (only the items
    named, if node ids of it were given), unless the run collected scenario
    files of its own (then only with --ckpt-scenarios)."""
    if config.getoption("ckpt_script"):
        scripts = ScriptCollector.from_parent(session, name=SCRIPT_ITEM, nodeid=SCRIPT_ITEM)
        items.extend(_collected(scripts, [ScriptItem.from_parent(scripts, name="verify"),
                                          *_script_items(scripts, config)]))
    job = config.getoption("--ckpt-job")
    wanted = config.stash.get(_WANTED, [])
    if wanted and not job:
        raise pytest.UsageError(f"{wanted[0]}: catalogue node ids need --ckpt-job JOB, the job they run against")
    if not job:
        return
    from ckpt_harness.errors import ConfigError, JobError, ScenarioError, Unavailable
    from ckpt_harness.jobref import resolve
    from ckpt_harness.job.axes import split_row
    from ckpt_harness.catalogue.scenario import builtin_catalogue, builtin_dir, select

    patterns = [p.strip() for p in (config.getoption("--ckpt-scenarios") or "").split(",") if p.strip()]
    try:  # before the job is imported: a misspelt scenario is said at once
        scenarios = select(builtin_catalogue(), patterns)
    except ScenarioError as exc:
        raise pytest.UsageError(f"--ckpt-scenarios: {exc}") from None
    try:
        resolve(split_row(job)[0])
    except Unavailable:
        pass  # a framework not installed here: its items skip, saying what to install
    except (JobError, ConfigError) as exc:
        raise pytest.UsageError(f"--ckpt-job {job}: {exc}") from None
    builtin = builtin_dir().resolve()
    files = {Path(i.scenario.source).resolve().parent for i in items  # collected as files: not --ckpt-script's
             if isinstance(i, ScenarioItem) and not isinstance(i.parent, ScriptCollector)}
    if not wanted and (builtin in files or (_names_scenario_files(config) and not patterns)):
        return  # the catalogue was collected as files, or the command line named the scenario files to run
    catalogue = Catalogue.from_parent(session, name=CATALOGUE, nodeid=CATALOGUE)
    made = [item for scenario in scenarios for item in _items(catalogue, scenario, config)]
    for arg in wanted:
        if not any(_names(arg, item) for item in made):
            raise pytest.UsageError(f"{arg}: no such item of the catalogue against {job}; "
                                    f"list them with: pytest --ckpt-job {job} --collect-only -q")
    items.extend(_collected(catalogue, [item for item in made
                                        if not wanted or any(_names(arg, item) for arg in wanted)]))


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


def _names(arg: str, item: "ScenarioItem") -> bool:
    """Whether node id `arg` selects `item`: its own id, its scenario at any job and world size, or all."""
    return arg in (item.nodeid, f"{CATALOGUE}::{item.scenario.name}", CATALOGUE)
