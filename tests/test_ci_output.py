"""CI-native output (issue 44 item 6): `ckpt-harness summary` over a run's
JSON writes the step summary GitHub shows (under its 1 MiB limit for the
whole built-in matrix), an annotation per finding at the workspace's file
and line it names, and per finding a repro that runs from anywhere and an
issue draft without this machine's paths. The Action (action.yml) runs
exactly this after the command."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_harness.present import ci
from tests.clirun import cli
from tests.test_html_report import browser  # noqa: F401 - the fixture: one Chromium for the module

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "docs" / "matrix.json"


def test_the_step_summary_of_the_whole_built_in_matrix_fits_githubs_limit(tmp_path):
    target = tmp_path / "summary.md"
    done = cli("summary", str(MATRIX), "--annotations", "--root", str(ROOT), cwd=tmp_path,
               env_extra={"GITHUB_STEP_SUMMARY": str(target)})
    assert done.returncode == 0, done.stdout + done.stderr
    text = target.read_text()
    data = json.loads(MATRIX.read_text())
    failing = [c for c in data["cells"] if c["verdict"] in ("fail", "error", "unknown")]
    assert len(text.encode()) < ci.LIMIT, len(text.encode())
    assert all(f"| {job} | " in text for job in data["jobs"]), text[:2000]
    assert f"### Findings ({len(failing)})" in text and text.count("<details>") == len(failing)
    errors = [line for line in done.stdout.splitlines() if line.startswith(("::error", "::warning"))]
    assert len(errors) == len(failing), done.stdout[-3000:]
    located = [line for line in errors if line.startswith("::error file=ckpt_harness/jobs/_common.py,line=")]
    assert located, errors[:5]  # the barrier a blocked rank's peer waits in, at the job's own line


def test_a_summary_over_the_budget_keeps_the_table_and_counts_the_findings_left_out():
    data = json.loads(MATRIX.read_text())
    text = ci.summary(data, budget=12_000)
    assert len(text.encode()) <= 12_000
    assert "more findings: see the uploaded matrix.md" in text and f"| {data['jobs'][-1]} | " in text


def test_a_findings_repro_runs_from_another_directory_and_its_issue_draft_has_no_local_paths(tmp_path):
    done = cli("run", "--job", "tests.planted.jobs:NoOptimizerState", "--case", "resume@2", "--json", "r.json",
               cwd=tmp_path, env_extra={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, done.stdout + done.stderr
    made = cli("summary", "r.json", "--repro-dir", "repros", "--root", str(ROOT), cwd=tmp_path)
    assert made.returncode == 0 and "wrote 2 repros and issue drafts under repros" in made.stdout, made.stdout
    folder = sorted((tmp_path / "repros").iterdir())[0]  # state after load, then final state: one repro each
    issue = (folder / "ISSUE.md").read_text()
    assert "## Reproduce" in issue and "ckpt-harness run --job tests.planted.jobs:NoOptimizerState" in issue
    assert str(ROOT) not in issue and "/tmp/" not in issue, issue
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["CKPT_HARNESS"] = f"{sys.executable} -m ckpt_harness.cli"
    again = subprocess.run(["sh", str(folder / "repro.sh")], cwd=elsewhere, env=env, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "resume@2" in again.stdout and "FAIL" in again.stdout and "optim" in again.stdout, again.stdout


def test_the_summary_renders_as_github_shows_it(browser, tmp_path):  # noqa: F811 - the imported fixture
    """Looked at: the Markdown rendered (CommonMark with tables, HTML kept,
    as GitHub renders a step summary) in headless Chromium: the table is a
    table with a row per job and words for verdicts (a runner without an
    emoji font showed emoji as boxes), and a finding opens to its repro line."""
    markdown_it = pytest.importorskip("markdown_it")

    data = json.loads(MATRIX.read_text())
    body = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(ci.summary(data))
    page = tmp_path / "summary.html"
    page.write_text(f"<!doctype html><meta charset=utf-8><body style='font:14px sans-serif'>{body}</body>")
    browser.get(page.as_uri())
    rows = browser.find_elements("css selector", "table tbody tr")
    assert [r.find_element("css selector", "td").text for r in rows] == data["jobs"]
    shown = {(c["job"], c["property"]): c["verdict"] for c in data["cells"]}
    cell = rows[0].find_elements("css selector", "td")[1 + data["properties"].index("live")]
    assert cell.text == {"fail": "FAIL", "pass": "pass"}[shown[data["jobs"][0], "live"]], cell.text
    first = browser.find_element("css selector", "details")
    first.find_element("css selector", "summary").click()
    assert "ckpt-harness scenario" in first.find_element("css selector", "code").text
    browser.save_screenshot(str(tmp_path / "summary.png"))  # docs/ci-summary.png was taken so


def test_an_annotation_finds_the_workspaces_file_not_the_copy_a_build_left(tmp_path):
    """`pip install .` leaves build/lib/<package>/ beside the sources: the same
    file name twice, so before, the annotation named no file at all."""
    for where in ("src/pkg", "build/lib/pkg"):
        (tmp_path / where).mkdir(parents=True)
        (tmp_path / where / "train.py").write_text("x = 1\n")
    found = [ci.Finding("job · atomic", "fail", "`rename a -> b` (rank 0 #3 · train.py:1 in save())", None)]
    assert ci.annotations(found, tmp_path) == [
        "::error file=src/pkg/train.py,line=1,title=job · atomic::`rename a -> b` (rank 0 #3 · train.py:1 in save())"]
    (tmp_path / "src" / "other").mkdir()
    (tmp_path / "src" / "other" / "train.py").write_text("y = 2\n")  # two of the workspace's own: no guess
    assert ci.annotations(found, tmp_path)[0].startswith("::error title=")
