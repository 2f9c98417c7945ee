"""Findings from a real exploration (issue 44 item 3): a planted job that
publishes `latest` before the shards it names fails a crash at every point
in between, on both ranks; that is one finding, naming the two operations
and the job's lines, with its cases behind it, in the terminal, the JSON,
the HTML page and what CI shows. The reference checkpointer, explored the
same way, has none."""

import json
from pathlib import Path

import pytest

from ckpt_harness.present import ci
from tests.clirun import cli
from tests.test_html_report import browser  # noqa: F401 - the fixture: one Chromium for the module

ROOT = Path(__file__).resolve().parent.parent
#: Crashes at every file operation that moves or writes bytes; no power loss, no corruption: one mistake to find.
EXPLORE = ("explore", "--faults", "crash", "--ops", "rename,write,fsync", "--corruptions", "", "--json", "out.json",
           "--html", "out.html")


def test_a_pointer_first_jobs_crash_cases_are_one_finding_naming_both_operations_and_lines(
        tmp_path, browser):  # noqa: F811 - the fixture
    done = cli(*EXPLORE, "--job", "tests.planted.checkpointers:LatestBeforeShards", cwd=tmp_path,
               env_extra={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, done.stdout + done.stderr
    data = json.loads((tmp_path / "out.json").read_text())
    (finding,) = data["findings"]
    failing = {c["case"] for c in data["cases"] if c["verdict"] != "pass"}
    crashes = {c for c in failing if c.startswith("crash@")}
    assert len(crashes) >= 8 and set(finding["cases"]) == failing == crashes, finding
    assert (finding["kind"], finding["check"], finding["verdict"]) == ("window", "atomic", "fail")
    opened, closed = finding["opened_by"][0], finding["closed_by"]
    assert (opened["rank"], opened["op"], opened["target"]) == (0, "rename", "latest.tmp -> latest")
    assert opened["caller"].startswith("_common.py:") and "in atomic_write_text()" in opened["caller"]
    assert {(c["rank"], c["op"], c["target"]) for c in closed} == {(0, "write", "step_000004/rank0.pt"),
                                                                   (1, "write", "step_000004/rank1.pt")}
    assert {c["caller"] for c in closed} == {next(iter(closed))["caller"]}
    assert next(iter(closed))["caller"].startswith("checkpointers.py:")
    headline = finding["headline"]
    assert headline.startswith(f"`rename latest.tmp -> latest` (rank 0 #{opened['index']} · {opened['caller']}) "
                               f"comes before `write step_N/rankN.pt` (ranks 0, 1 · {closed[0]['caller']}) is "
                               "done, and the job relies on the reverse"), headline
    # the terminal: the finding first, one example, its cases behind it
    out = done.stdout
    assert out.count("\n=== ") == 1 and "=== finding 1 of 1: atomic FAIL" in out, out[-4000:]
    assert headline in out and "its other cases: " in out and "usual fix: write the save into a staging" in out
    # the page: the finding above every case, each of its cases a link to its page
    browser.get((tmp_path / "out.html").as_uri())
    shown = browser.execute_script("""
        const f = document.querySelector('#top ol.findings li.finding');
        return {text: f.querySelector('p.headline').textContent, links: f.querySelectorAll('a').length,
                before: f.compareDocumentPosition(document.querySelector('#top table.cases')) & 4};""")
    assert shown["text"] == headline and shown["links"] == len(failing) and shown["before"], shown
    # CI: one annotation, at the line of the operation that opens the window
    annotated = cli("summary", str(tmp_path / "out.json"), "--annotations", "--root", str(ROOT), cwd=tmp_path)
    errors = [line for line in annotated.stdout.splitlines() if line.startswith("::error")]
    line = opened["caller"].split(":")[1].split()[0]
    assert errors == [e for e in errors if e.startswith(f"::error file=ckpt_harness/jobs/_common.py,line={line},")]
    assert len(errors) == 1 and len(ci.findings(data)) == 1, annotated.stdout


def test_its_correct_twin_explored_alike_has_no_finding(tmp_path):
    done = cli(*EXPLORE, "--job", "tests.planted.checkpointers:ReferenceCheckpointer", cwd=tmp_path,
               env_extra={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["findings"] == [] and data["cases"] and "===" not in done.stdout


@pytest.mark.slow
def test_ckpt_html_shows_the_reports_of_tests_that_use_only_the_fixture(pytester, browser, monkeypatch):  # noqa: F811
    """`--ckpt-html` with no catalogue item: the page lists each report the
    `ckpt` fixture made, under xdist too (the workers hand theirs to the
    controller), and a failing exploration's report opens on its finding."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_user="""
        def test_a_correct_job(ckpt):
            ckpt.verify("tests.planted.checkpointers:ReferenceCheckpointer", steps=4).assert_ok()

        def test_a_pointer_first_job(ckpt):
            report = ckpt.explore("tests.planted.checkpointers:LatestBeforeShards", faults=("crash",),
                                  corruptions=(), ops=("rename", "write"))
            assert report.ok
        """)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider", "--ckpt-html=page.html",
                                           f"--basetemp={pytester.path / 'base'}")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*ckpt_harness HTML report: page.html*"])
    browser.get((pytester.path / "page.html").as_uri())
    rows = browser.execute_script("""return [...document.querySelectorAll('#top table.reports tbody tr')].map(
        tr => [...tr.querySelectorAll('td')].map(td => td.textContent.trim()));""")
    assert [(r[0], r[2]) for r in rows] == [("test_user.py::test_a_correct_job[ws2]", "PASS"),
                                            ("test_user.py::test_a_pointer_first_job[ws2]", "FAIL")], rows
    assert rows[1][4].startswith("`rename latest.tmp -> latest` (rank 0 #"), rows[1]
    browser.find_element("css selector", "#top table.reports tbody tr:nth-child(2) a").click()
    shown = browser.execute_script("""
        const page = document.querySelector('section.page.shown');
        return {id: page.id, finding: page.querySelector('ol.findings p.headline').textContent,
                cases: page.querySelectorAll('table.cases tbody tr').length};""")
    assert shown["id"].startswith("report-") and shown["finding"] == rows[1][4] and shown["cases"] > 2, shown
