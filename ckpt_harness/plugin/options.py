"""The plugin's options and marker, derived from the kinds of target as the CLI's are (`targets.kinds`):
what they are, what each adds to the session, and the settings they give the fixture and the items.

Each setting is declared once, in `ckpt_harness.config`; here it becomes ``--ckpt-NAME`` and a keyword
of ``@pytest.mark.ckpt``. Bad values are usage errors naming the option, before any test runs.
"""

from __future__ import annotations

from typing import Any, Optional

import pytest


def marker_keys() -> dict:
    """The marker's keywords: every setting any kind of target's calls take
    (a job's first: its declarations win where kinds share a setting; a
    script's own defaults, such as its longer timeout, are `kind_defaults`)."""
    from ckpt_harness import targets
    from ckpt_harness.config import settings_of

    keys: dict = {}
    for kind in targets.kinds():
        for name, s in settings_of(kind.configs["explore"]).items():
            keys.setdefault(name, s)
    return keys


def kind_defaults() -> dict:
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


def kind_settings() -> dict:
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


def option(name: str) -> str:
    """A setting or a kind's option under pytest: ``--ckpt-script``, ``--ckpt-nproc-per-node``..."""
    return "--ckpt-" + name.replace("_", "-")


def _collects(kind: Any) -> str:
    """What the option picking `kind` adds to the session, for its help."""
    prefix = f"ckpt-{kind.name}"
    if kind.whole_catalogue:
        return (f"adds the scenario catalogue against it, an item per scenario and world size "
                f"({prefix}::NAME[ROW-wsN]; --ckpt-scenarios narrows it)")
    return f"adds the item {prefix}::verify, and with --ckpt-scenarios those scenarios against it ({prefix}::NAME)"


def add(parser: pytest.Parser) -> None:
    """The plugin's options: one per kind of target and per setting a kind adds, and the session's own."""
    from ckpt_harness import targets
    from ckpt_harness.config import SETTINGS, option_type

    timeout = SETTINGS["timeout"]
    group = parser.getgroup("ckpt_harness", "checkpoint verification (ckpt_harness)")
    # No default of its own: unset, each run takes its config's (a job's, a script's), declared once there.
    own = "".join(f"; with --ckpt-{kind}: {differ['timeout']:g}" for kind, differ in kind_defaults().items()
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
        group.addoption(option(kind.option), dest=f"ckpt_{kind.option}", default=None,
                        metavar=kind.option.upper(), help=f"{kind.help}: {_collects(kind)}")
    group.addoption(
        "--ckpt-scenarios", default=None, metavar="NAME[,NAME...]",
        help=f"with {' or '.join(option(kind.option) for kind in kinds)}: the catalogue scenarios to run against "
             "it (names or fnmatch patterns; see ckpt-harness list)",
    )
    for name, setting in kind_settings().items():
        group.addoption(option(name), dest=f"ckpt_{name}", default=None, type=option_type(setting),
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


def marker_line() -> str:
    """The ckpt marker's line for ``pytest --markers``: every keyword with its default, and a kind's own."""
    keys = ", ".join(f"{name}={s.default!r}" for name, s in marker_keys().items())
    own = "".join(f" (a {kind}'s own: {', '.join(f'{name}={value!r}' for name, value in differ.items())})"
                  for kind, differ in kind_defaults().items())
    return f"ckpt({keys}): defaults for the ckpt fixture{own}"


def check(config: pytest.Config) -> None:
    """Bad options fail the session at once, naming the option, instead of every test."""
    from ckpt_harness.config import SETTINGS
    from ckpt_harness.errors import ConfigError

    world_sizes(config)
    try:
        if config.getoption("--ckpt-timeout") is not None:
            SETTINGS["timeout"].check(config.getoption("--ckpt-timeout"))
    except ConfigError as exc:
        raise pytest.UsageError(f"--ckpt-timeout: {exc}") from None
    shard(config)
    if config.getoption("--ckpt-costs") and not config.getoption("--ckpt-shard"):
        raise pytest.UsageError("--ckpt-costs balances the parts of --ckpt-shard K/N: give --ckpt-shard too, "
                                "or leave out --ckpt-costs")
    if config.getoption("--ckpt-scenarios") and not picked(config):
        from ckpt_harness import targets

        raise pytest.UsageError("--ckpt-scenarios names the catalogue's scenarios to run against a target: add "
                                + " or ".join(f"{option(kind.option)} ({kind.help})" for kind in targets.kinds()))


def shard(config: pytest.Config) -> Any:
    """--ckpt-shard as a `Shard`, None without it; a bad one is a usage error."""
    from ckpt_harness.catalogue.shards import Shard
    from ckpt_harness.errors import UsageError

    text = config.getoption("--ckpt-shard")
    try:
        return Shard.parse(text) if text is not None else None
    except UsageError as exc:
        raise pytest.UsageError(str(exc).replace("--shard", "--ckpt-shard", 1)) from None


def world_sizes(config: pytest.Config) -> list[int]:
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


def marker_kwargs(node: Any, strict: bool = True) -> dict:
    """The ckpt markers' keywords on `node`, the closest marker winning. A
    marker with a keyword no setting has raises `MarkerError` (`strict`) or
    is read for its known keywords only: parametrizing must not fail the
    module's collection, so the test alone errors (`pytest_runtest_setup`)."""
    kwargs: dict = {}
    keys = marker_keys()
    for marker in reversed(list(node.iter_markers("ckpt"))):  # closest marker wins
        problem = marker_problem(marker, keys)
        if problem and strict:
            raise MarkerError(problem)
        kwargs.update({name: value for name, value in marker.kwargs.items() if name in keys})
    return kwargs


class MarkerError(pytest.UsageError):
    """A @pytest.mark.ckpt keyword no setting has; the message names it, the closest one and every one."""


def marker_problem(marker: Any, keys: Optional[dict] = None) -> Optional[str]:
    """What is wrong with one ``@pytest.mark.ckpt(...)``, said as the CLI says
    an unknown option: the bad keyword, the closest one (did you mean), then
    every keyword it takes; None when nothing is."""
    from ckpt_harness.errors import did_you_mean

    keys = marker_keys() if keys is None else keys
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


def given(config: pytest.Config) -> dict:
    """The settings the kinds' options gave (``--ckpt-script``, ``--ckpt-nproc-per-node``...) by name, with
    --ckpt-timeout's and --ckpt-launcher's: the fixture's defaults, and the rows of the picked kind's items."""
    from ckpt_harness import targets

    names = [*(kind.option for kind in targets.kinds()), *kind_settings()]
    return {**{name: value for name in names if (value := config.getoption(f"ckpt_{name}")) is not None},
            **timeout_given(config), **launcher_given(config)}


def picked(config: pytest.Config) -> list:
    """The kinds of target the options pick (``--ckpt-job``, ``--ckpt-script``...): each adds its own items."""
    from ckpt_harness import targets

    return [kind for kind in targets.kinds() if config.getoption(f"ckpt_{kind.option}") is not None]


def timeout_given(config: pytest.Config) -> dict:
    """--ckpt-timeout as a setting, if given. The option has no default of
    its own: unset, each run takes its config's, declared once in
    `ckpt_harness.config` (a job's `RunConfig`, a script's `ScriptConfig`,
    longer: torchrun and a script's imports start inside it), as the CLI's
    runs do; a default here would give a script a job's."""
    given = config.getoption("--ckpt-timeout")
    return {"timeout": given} if given is not None else {}


def launcher_given(config: pytest.Config) -> dict:
    """--ckpt-launcher as a setting, if given (a script's runs are judged elastic, and refuse it)."""
    given = config.getoption("--ckpt-launcher")
    return {"launcher": given} if given is not None else {}

