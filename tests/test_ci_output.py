"""CI-native output (issue 44 item 6): `ckpt-harness summary` over a run's
JSON writes the step summary GitHub shows (under its 1 MiB limit for the
whole built-in matrix), an annotation per finding at the workspace's file
and line it names, and per finding a repro that runs from anywhere and an
issue draft without this machine's paths. The Action (action.yml) runs
exactly this after the command.

Issue 65, item 2: every finding carries what the console shows of it (the
exception text, the call site, the usual fix) into the summary and the
issue draft, its annotation is at the user's file and line where its
reason or its traceback names one, and the annotation's level is what the
finding does to the exit code: `::error` for what fails the command,
`::notice` for what a baseline expects or is fixed, `::warning` for a
matrix cell that `--fail-on` does not count."""

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
    annotated = [line for line in done.stdout.splitlines() if line.startswith("::")]
    assert len(annotated) == len(failing), done.stdout[-3000:]
    # the default --fail-on (unknown,error) does not fail the matrix on a FAIL cell: a warning, not an error
    fails = [c for c in failing if c["verdict"] == "fail"]
    assert sum(line.startswith("::warning") for line in annotated) == len(fails), annotated[:5]
    located = [line for line in annotated if line.startswith("::warning file=ckpt_harness/jobs/_common.py,line=")]
    assert located, annotated[:5]  # the barrier a blocked rank's peer waits in, at the job's own line
    # what the console shows under a finding: the exception text of a scenario's traceback, the usual fix
    assert "ValueError: the optimizer's state is keyed by" in text and "**Usual fix**: " in text, text[:3000]
    gated = cli("summary", str(MATRIX), "--annotations", "--root", str(ROOT), "--fail-on", "fail,unknown,error",
                cwd=tmp_path, env_extra={"GITHUB_STEP_SUMMARY": str(tmp_path / "gated.md")})
    errors = [line for line in gated.stdout.splitlines() if line.startswith("::error")]
    assert len(errors) == len(failing), gated.stdout[-3000:]  # the same cells, each failing the build now


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
    shown = [block.text for block in first.find_elements("css selector", "pre code")]
    assert "ckpt-harness scenario" in shown[-1], shown  # the repro line, under the exception text
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


#: A rank's traceback as the harness's report keeps it: the user's frames, then torch's in the environment.
TRACEBACK = """rank 0 raised FileNotFoundError in save 2: [Errno 2] No such file or directory: 'step_2.tmp':
Traceback (most recent call last):
  File "<frozen runpy>", line 88, in _run_code
  File "{ws}/train.py", line 91, in <module>
    save(step)
  File "{ws}/train.py", line 48, in save
    os.replace(written, final)
  File "{ws}/.venv/lib/python3.11/site-packages/torch/serialization.py", line 900, in save
    raise FileNotFoundError
FileNotFoundError: [Errno 2] No such file or directory: 'step_2.tmp'
"""


def test_a_finding_whose_traceback_names_the_users_line_is_annotated_there_and_its_summary_shows_it(tmp_path):
    (tmp_path / "train.py").write_text("x = 1\n")
    (tmp_path / ".venv/lib/python3.11/site-packages/torch").mkdir(parents=True)
    (tmp_path / ".venv/lib/python3.11/site-packages/torch/serialization.py").write_text("y = 2\n")
    found = ci.Finding("train.py · live", "fail", "golden: failure: rank 0 raised FileNotFoundError in save 2", None,
                       TRACEBACK.format(ws=tmp_path), fix="hand a rank's error to every rank")
    # the innermost frame of the user's own code, not the environment's, relative to the workspace
    assert ci.annotations([found], tmp_path) == [
        "::error file=train.py,line=48,title=train.py · live::golden: failure: rank 0 raised FileNotFoundError in "
        "save 2"]
    data = {"kind": "verify", "verdict": "fail", "job": "train.py", "cases": [
        {"case": "golden", "check": "live", "verdict": "fail", "summary": found.reason, "details": found.details,
         "repro": "ckpt-harness run --script 'train.py {ckpt_dir}' --case golden"}]}
    text = ci.summary(data, root=tmp_path)
    assert "**Call site**: `train.py:48`" in text and "os.replace(written, final)" in text, text
    assert "FileNotFoundError: [Errno 2]" in text and "**Usual fix**: hand a rank's error" in text, text
    ci.write_repros(ci.findings(data), tmp_path / "repros", tmp_path, {})
    issue = next((tmp_path / "repros").glob("*/ISSUE.md")).read_text()
    assert "Call site: `train.py:48`" in issue and "Usual fix: hand a rank's error" in issue, issue
    assert "FileNotFoundError: [Errno 2]" in issue and str(tmp_path) not in issue, issue
    # the other way: a traceback only through files outside the workspace (or in its environment) names no file
    elsewhere = ci.Finding("x · live", "fail", "rank 0 raised", None,
                           TRACEBACK.format(ws="/nowhere").replace("/nowhere/.venv", str(tmp_path / ".venv")))
    assert ci.annotations([elsewhere], tmp_path) == ["::error title=x · live::rank 0 raised"]


def test_against_a_baseline_an_expected_failure_is_a_notice_a_new_one_an_error_and_a_fixed_one_a_notice(tmp_path):
    """A real exploration gated case by case (as tests/test_cli.py's): the
    late rank's case fails, the crash case passes. Expected: a notice and
    exit 0; with a baseline that does not list it: NEW, an error and exit 1.
    The crash case the baseline expects to fail is fixed: a notice."""
    env = {"PYTHONPATH": str(ROOT)}
    explore = ("explore", "--job", "tests.planted.jobs:EveryRankDeletesOldCheckpoints", "--faults", "crash,delay",
               "--ops", "rmtree", "--corruptions", "", "--quiet")
    (tmp_path / "known.toml").write_text('[[expect]]\njob = "tests.planted.*"\ncase = "*@r0:after_save4/*"\n'
                                         'verdict = "fail"\nreason = "every rank deletes, issue #8"\n')
    (tmp_path / "other.toml").write_text('[[expect]]\njob = "tests.planted.*"\ncase = "crash@*"\n'
                                         'verdict = "fail"\nreason = "issue #9"\n')
    for baseline, code in (("known.toml", 0), ("other.toml", 1)):
        done = cli(*explore, "--baseline", baseline, "--json", f"{baseline}.json", cwd=tmp_path, env_extra=env)
        assert done.returncode == code, done.stdout + done.stderr
        data = json.loads((tmp_path / f"{baseline}.json").read_text())
        assert data["baseline"]["source"].endswith(baseline), data.get("baseline")
        shown = cli("summary", f"{baseline}.json", "--annotations", "--root", str(ROOT), cwd=tmp_path)
        lines = [line for line in shown.stdout.splitlines() if line.startswith("::")]
        findings = [line for line in lines if "title=fixed" not in line]
        assert findings and all(line.startswith("::notice " if code == 0 else "::error ") for line in findings), lines
        assert all(("(expected)" if code == 0 else "(new)") in line for line in findings), lines
        fixed = [line for line in lines if "title=fixed" in line]
        assert len(fixed) == 1 and fixed[0].startswith("::notice ") and "crash@r0:after_save4" in fixed[0], lines
        assert "fixed, update the baseline" in shown.stdout and ("· expected" if code == 0 else "· new") in shown.stdout
