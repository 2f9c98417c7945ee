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

This module is the plugin pytest registers: its hooks and fixtures, each
handing the work to the package's modules, as pytest-xdist's plugin.py
hands it to its session: `options` (the options and marker, derived from
the kinds of target), `fixture` (what ``ckpt`` gives a test), `collection`
(the target the options pick, and scenario files, as items), `outcomes`
(what a run leaves for people: timelines, repro lines, the HTML page) and
`baseline` (regression gating). Data flows one way: the collection and the
fixture use the options and hand their results on; nothing below imports
this module.

Importing it must stay cheap: pytest imports every plugin at start, for
every run, including runs that never touch a checkpoint; so the package's
modules import pytest and the standard library only, and the harness where
a hook first needs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pytest

from ckpt_harness.plugin import baseline, collection, options, outcomes
from ckpt_harness.plugin.fixture import CkptFixture
from ckpt_harness.plugin.collection import group_in_node_id

__all__ = ["CkptFixture", "group_in_node_id"]

_WS_PARAM = "_ckpt_world_size"


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", options.marker_line())
    options.check(config)
    baseline.load(config)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A misspelt @pytest.mark.ckpt keyword errors its own test, saying the
    keyword to write; the module's other tests run."""
    for marker in item.iter_markers("ckpt"):
        problem = options.marker_problem(marker)
        if problem:
            pytest.fail(problem, pytrace=False)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "ckpt" not in metafunc.fixturenames:
        return
    marked = options.marker_kwargs(metafunc.definition, strict=False).get("world_size")
    if marked is None:
        sizes = options.world_sizes(metafunc.config)
    else:
        sizes = list(marked) if isinstance(marked, (list, tuple)) else [marked]
    metafunc.parametrize(_WS_PARAM, sizes, ids=[f"ws{n}" for n in sizes], scope="function")


@pytest.fixture
def _ckpt_world_size() -> Optional[int]:
    return None


@pytest.fixture
def ckpt(request: pytest.FixtureRequest, tmp_path: Path, _ckpt_world_size: Optional[int]) -> CkptFixture:
    from ckpt_harness.config import SETTINGS

    defaults = {**options.given(request.config), **options.marker_kwargs(request.node)}
    defaults["world_size"] = _ckpt_world_size or defaults.get("world_size") or SETTINGS["world_size"].default
    return CkptFixture(defaults, tmp_path, request.node)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Optional[pytest.Collector]:
    """Any `*.toml` in a directory named `scenarios` is a scenario file."""
    if file_path.suffix == ".toml" and file_path.parent.name == "scenarios":
        return collection.ScenarioFile.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    collection.take_node_ids(session.config)


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups, and before -k and -m deselect
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    collection.add(session, config, items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    outcomes.add_extras(item, outcome.get_result())


def pytest_sessionfinish(session: pytest.Session) -> None:
    baseline.hand_over(session.config)
    outcomes.finish(session.config)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """An xdist worker's results, for --ckpt-html and the baseline's summary."""
    output = getattr(node, "workeroutput", {})
    outcomes.from_worker(node.config, output)
    baseline.from_worker(node.config, output)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    baseline.summary(terminalreporter, config)
