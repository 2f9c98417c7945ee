"""Scenario files: TOML tables read and validated against their check's parameters.

A `Scenario` is a value (`catalogue.scenario`) that the checks, the bench
and the matrix pass around; reading one from a file, or back from a
matrix.json, asks its check what it takes (`checks.get`). That is this
module's, so the value's module needs no check and the checks see
scenarios without a way back.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Mapping, Sequence, Union

from ckpt_harness.catalogue import checks
from ckpt_harness.catalogue.scenario import RESERVED, Scenario, builtin_dir
from ckpt_harness.errors import ConfigError, ScenarioError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["builtin_catalogue", "catalogue", "from_json", "load_dir", "load_file", "load_paths", "parse"]


def builtin_catalogue() -> list[Scenario]:
    return load_dir(builtin_dir())


def catalogue(files: Sequence[Union[str, Path]] = ()) -> list[Scenario]:
    """The scenarios of `files` (`--file`), or the built-in catalogue when none is given."""
    return load_paths(files) if files else builtin_catalogue()


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


def load_file(path: Union[str, Path]) -> list[Scenario]:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from None
    return [parse(name, table, str(path)) for name, table in data.items()]


def parse(name: str, table: Any, source: str = "<scenario>") -> Scenario:
    """Validate one scenario table against its check's parameters."""
    from ckpt_harness.job import axes
    from ckpt_harness.config import SETTINGS, check_run_settings
    from ckpt_harness.oracle import PROPERTIES

    where = f"{source}: [{name}]"
    if not isinstance(table, dict):
        raise ScenarioError(f"{source}: {name!r} must be a table ([{name}]) holding one scenario")
    for key in ("property", "check", "description"):
        if not isinstance(table.get(key), str) or not table[key]:
            raise ScenarioError(f"{where}: set {key} = \"...\"")
    if table["property"] not in PROPERTIES:
        raise ScenarioError(f"{where}: unknown property {table['property']!r}; choose from {', '.join(PROPERTIES)}")
    known = checks.registry()
    if table["check"] not in known:
        raise ScenarioError(f"{where}: unknown check {table['check']!r}; choose from {', '.join(known)}")
    jobs = table.get("jobs", ["*"])
    if not isinstance(jobs, list) or not jobs or not all(isinstance(j, str) for j in jobs):
        raise ScenarioError(f"{where}: jobs must be a non-empty list of job names or patterns, e.g. [\"*\"]")
    check = checks.get(table["check"])
    # any scenario may set the axes a target trains along (a job's `Job.axes`, a script's `script_args`)
    declared = {s.name: s for s in check.params}
    declared.update({name: SETTINGS[name] for name in axes.NAMES if name not in declared})
    params = {s.name: s.default for s in check.params}
    try:
        for key, value in table.items():
            if key in RESERVED:
                continue
            if key not in declared:
                raise ScenarioError(f"{where}: check {table['check']!r} has no parameter {key!r}; "
                                    f"it takes {', '.join(declared) or 'none'}")
            params[key] = declared[key].check(value)
        check_run_settings(params)
    except ConfigError as exc:
        raise ScenarioError(f"{where}: {exc}") from None
    problem = check.validate(params)
    if problem:
        raise ScenarioError(f"{where}: {problem}")
    return Scenario(name, table["property"], table["check"], table["description"], params, tuple(jobs), source)


def from_json(data: Mapping[str, Any]) -> Scenario:
    """A scenario back from `Scenario.to_json` (a matrix.json's catalogue), validated as a scenario file's
    table is (`parse`)."""
    table = {"property": data.get("property"), "check": data.get("check"),
             "description": data.get("description"), "jobs": data.get("jobs", ["*"]), **data.get("params", {})}
    return parse(str(data.get("name")), table, str(data.get("source") or "<matrix.json>"))
