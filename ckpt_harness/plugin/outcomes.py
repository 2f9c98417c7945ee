"""What the plugin's runs leave for people: each failing item's timelines and repro line (in JUnit XML,
and as pytest-html extras), and the HTML page of the session's results, gathered from every xdist worker.

Items and the fixture hand their results here (`outputs`, `results`, `fixture_reports`); the hooks of
`ckpt_harness.plugin` pass them on at the session's end. Nothing here runs a check or makes a target.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

_RESULTS = pytest.StashKey[list]()
#: What an item's failure carries for pytest-html: (name, repro line or timeline file).
_EXTRAS = pytest.StashKey[list]()


def _timeline_dir(config: pytest.Config) -> Path:
    given = config.getoption("ckpt_timeline_dir")
    if given:
        return Path(config.invocation_params.dir) / given
    return Path(config._tmp_path_factory.getbasetemp()) / "ckpt-timelines"  # type: ignore[attr-defined]


def outputs(item: pytest.Item, result: Any) -> Any:
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


def add_extras(item: pytest.Item, report: pytest.TestReport) -> None:
    """A failing ckpt item's report carries its repro line and timelines as
    pytest-html extras, when pytest-html is installed."""
    if not (report.when == "call" and report.failed and item.stash.get(_EXTRAS, None)):
        return
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
    report.extras = found  # type: ignore[attr-defined]


def results(config: pytest.Config) -> list:
    """The session's catalogue items with their results (for --ckpt-html)."""
    return config.stash.setdefault(_RESULTS, [])


def fixture_reports(config: pytest.Config) -> list:
    """(test node id, Report) of every call of the `ckpt` fixture this session (for --ckpt-html)."""
    return config.stash.setdefault(_REPORTS, [])


_REPORTS = pytest.StashKey[list]()
_FROM_WORKERS = pytest.StashKey[list]()
_REPORTS_FROM_WORKERS = pytest.StashKey[list]()


def finish(config: pytest.Config) -> None:
    """--ckpt-html at the session's end: an xdist worker hands its results to the controller; elsewhere,
    the page of every item's results, the workers' too, is written."""
    path = config.getoption("ckpt_html")
    if not path:
        return
    mine = [(item.world_size, item.scenario.to_json(), result.to_json()) for item, result in results(config)]
    reports = [(test, report_json(report)) for test, report in fixture_reports(config)]
    if hasattr(config, "workeroutput"):
        config.workeroutput["ckpt_results"] = mine  # type: ignore[attr-defined]
        config.workeroutput["ckpt_reports"] = reports  # type: ignore[attr-defined]
        return
    _write_html(config, Path(path), mine + config.stash.get(_FROM_WORKERS, []),
                reports + config.stash.get(_REPORTS_FROM_WORKERS, []))


def from_worker(config: pytest.Config, output: dict) -> None:
    """What an xdist worker handed over (`finish`), kept for the controller's page."""
    config.stash.setdefault(_FROM_WORKERS, []).extend(output.get("ckpt_results", ()))
    config.stash.setdefault(_REPORTS_FROM_WORKERS, []).extend(output.get("ckpt_reports", ()))


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
