"""The HTML report, looked at in a real browser: Debian's Chromium, headless,
driven by selenium through Debian's ChromeDriver (`make test` installs both:
ci/install_browser.sh; without them these tests skip and say why).

A person clicks from a failing matrix cell to its scenario, to a failing
case, and reads the case: `walk` does the same with real clicks and says
everything it finds wrong (a link that opens another case, a verdict that
differs from the row's, a faulted case whose timeline lacks its fault).
It is tested both ways: it passes the page the harness wrote, and flags the
same page with a link swapped and with the fault markers taken out.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.clirun import cli

ROOT = Path(__file__).resolve().parent.parent
ENV = {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
BROKEN = "tests.planted.checkpointers:DeletesPreviousFirst"
#: Flags Chromium needs here: no sandbox as root, and no calls home (this
#: machine's network is closed; each refused call costs time).
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,1000")


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install '.[dev]')")
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if binary is None or driver is None:
        pytest.skip("no chromium and chromedriver on PATH: `make test` installs Debian's (ci/install_browser.sh)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in FLAGS:
        options.add_argument(flag)
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    try:
        yield chrome
    finally:
        chrome.quit()


def shown(browser) -> str:
    return browser.execute_script("return document.querySelector('section.page.shown').id")


def click(browser, element) -> str:
    """Click a link as a person would; the id of the page it opened (the
    page changes on the hashchange event, after the click returns)."""
    from selenium.webdriver.support.ui import WebDriverWait

    before = shown(browser)
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    element.click()
    WebDriverWait(browser, 10).until(lambda b: shown(b) != before)
    return shown(browser)


def open_case(browser, link) -> list[str]:
    """Open the case behind `link` (a row of a case table) and check the page
    is that case's: its name, property and verdict, and for a case with a
    fault plan, a timeline with the fault marked."""
    from selenium.webdriver.common.by import By

    row = link.find_element(By.XPATH, "./ancestor::tr")
    cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    name, check, verdict = cells[0], cells[1], cells[2]
    page = click(browser, link)
    section = browser.find_element(By.ID, page)
    problems = []
    heading = section.find_element(By.TAG_NAME, "h1").text
    if section.find_element(By.CLASS_NAME, "case-name").text != name or check not in heading:
        problems.append(f"the link of {name} / {check} opened {heading!r}")
    if verdict not in heading:
        problems.append(f"{name}: the row says {verdict}, its page {heading!r}")
    plan = section.find_elements(By.CSS_SELECTOR, "table.plan td")
    fault = plan[5].text if len(plan) > 5 else ""
    if fault and fault != "corrupt" and section.find_elements(By.CLASS_NAME, "timeline"):
        if not section.find_elements(By.CSS_SELECTOR, "svg .mark-fault"):
            problems.append(f"{name}: a {fault} case whose timeline shows no fault")
    if not section.find_elements(By.CSS_SELECTOR, "svg.timeline-svg"):
        problems.append(f"{name}: no timeline drawn")
    return problems


def walk(browser, url: str) -> tuple[int, list[str]]:
    """From the top of the page, every failing matrix cell, its failing
    scenarios and their failing cases, by clicks; (cases opened, problems)."""
    from selenium.webdriver.common.by import By

    browser.get(url + "#top")
    problems, opened = [], 0
    cells = [a.get_attribute("href").rpartition("#")[2]
             for a in browser.find_elements(By.CSS_SELECTOR, "table.grid td.v-fail a")]
    targets = cells or ["top"]
    for cell in targets:
        browser.get(f"{url}#{cell}")
        scenarios = [a.get_attribute("href").rpartition("#")[2]
                     for a in browser.find_elements(By.CSS_SELECTOR, f'[id="{cell}"] table.scenarios tr.v-fail a')]
        for scenario in scenarios or [cell]:
            browser.get(f"{url}#{scenario}")
            rows = browser.find_elements(By.CSS_SELECTOR, f'[id="{scenario}"] table.cases tr.v-fail a')
            for i in range(len(rows)):
                browser.get(f"{url}#{scenario}")
                link = browser.find_elements(By.CSS_SELECTOR, f'[id="{scenario}"] table.cases tr.v-fail a')[i]
                problems += open_case(browser, link)
                opened += 1
    return opened, problems


@pytest.fixture(scope="module")
def explored(tmp_path_factory):
    """An exploration of a checkpointer that deletes the previous checkpoint first: failing crash cases."""
    out = tmp_path_factory.mktemp("explored")
    done = cli("explore", "--job", BROKEN, "--steps", "4", "--faults", "crash", "--corruptions", "", "--ops",
               "rename,rmtree,mkdir,fsync", "--html", "report.html", "--json", "report.json",
               "--timeline-dir", "timelines", "--keep", "none", cwd=out, env_extra=ENV)
    assert done.returncode == 1, done.stdout + done.stderr
    return out


def test_a_failing_case_of_an_exploration_opens_with_its_timeline_and_repro(browser, explored):
    from selenium.webdriver.common.by import By

    data = json.loads((explored / "report.json").read_text())
    failing = [c for c in data["cases"] if c["verdict"] == "fail"]
    assert failing and all(c["timeline"] for c in failing), data["cases"]
    assert all((explored / c["timeline"]).is_file() and c["timeline"].startswith("timelines/") for c in failing)
    shared = [c for c in failing if c["shares_resume_with"]]
    assert shared, "no case judged against another's resume"  # its timeline still shows that resume
    for c in shared:
        runs = [r["name"] for r in json.loads((explored / c["timeline"]).read_text())["otherData"]["runs"]]
        assert runs[-1] == "resumed run", (c["case"], runs)
    url = (explored / "report.html").as_uri()
    opened, problems = walk(browser, url)
    assert opened == len(failing) and not problems, problems

    first = failing[0]
    browser.get(url + "#top")
    link = browser.find_element(By.LINK_TEXT, first["case"])
    section = browser.find_element(By.ID, click(browser, link))
    assert section.find_element(By.CSS_SELECTOR, ".repro code").text == first["repro"]
    assert section.find_element(By.CSS_SELECTOR, "p.reason").text == first["summary"]
    lanes = [t.text for t in section.find_elements(By.CSS_SELECTOR, "svg text.lane-label")]
    assert lanes == [f"{run} · rank {r}" for run in ("golden", "faulted run", "resumed run") for r in (0, 1)], lanes
    fault = section.find_element(By.CSS_SELECTOR, "svg .mark-fault")
    assert "fault: crash" in fault.text
    # zoomed to the faulted run, the fault is still there and the golden run's slices are pushed aside
    section.find_element(By.XPATH, ".//button[text()='faulted run']").click()
    assert section.find_elements(By.CSS_SELECTOR, "svg .mark-fault")


def test_walk_flags_a_link_to_the_wrong_case_and_a_missing_fault_marker(browser, explored, tmp_path):
    page = (explored / "report.html").read_text()
    links = re.findall(r'<a href="#(case-[^"]+)">', page)
    assert len(links) >= 2
    swapped = page.replace(f'href="#{links[0]}"', 'href="#SWAP"').replace(
        f'href="#{links[1]}"', f'href="#{links[0]}"').replace('href="#SWAP"', f'href="#{links[1]}"')
    (tmp_path / "swapped.html").write_text(swapped)
    _, problems = walk(browser, (tmp_path / "swapped.html").as_uri())
    assert any("opened" in p for p in problems), problems

    unmarked = page.replace(',"fault",', ',"something else",')
    (tmp_path / "unmarked.html").write_text(unmarked)
    _, problems = walk(browser, (tmp_path / "unmarked.html").as_uri())
    assert problems and all("shows no fault" in p for p in problems), problems


@pytest.fixture(scope="module")
def matrixed(tmp_path_factory):
    """A matrix of the checkpointer that deletes the previous checkpoint first:
    its atomic cell fails (crash-every-phase), its detecting cell passes."""
    out = tmp_path_factory.mktemp("matrixed")
    started = time.monotonic()
    done = cli("matrix", "--job", BROKEN, "--scenarios", "crash-every-phase,missing-shard", "--out", "out",
               "--html", "matrix.html", "--quiet", cwd=out, env_extra=ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "HTML report: matrix.html" in done.stdout
    assert time.monotonic() - started < 600
    return out


def test_a_matrix_opens_from_a_failing_cell_to_its_cases(browser, matrixed):
    from selenium.webdriver.common.by import By

    tmp_path = matrixed
    data = json.loads((tmp_path / "out" / "matrix.json").read_text())
    failing = {(c["job"], c["property"]) for c in data["cells"] if c["verdict"] == "fail"}
    assert failing, data["cells"]
    url = (tmp_path / "matrix.html").as_uri()
    browser.get(url)
    grid = {(td.get_attribute("class"), td.text) for td in browser.find_elements(By.CSS_SELECTOR, "table.grid td")}
    assert ("cell v-fail", "FAIL") in grid, grid
    opened, problems = walk(browser, url)
    assert opened and not problems, problems
    # the timelines the page draws are the files in out/timelines, named in matrix.json relative to it
    files = [c["timeline"] for s in data["scenarios"] for c in s["results"] if c["timeline"]]
    assert files and all((tmp_path / "out" / f).is_file() for f in files), files


BASELINE = f"""
[[expect]]
job = "{BROKEN.partition(':')[0]}:*"
scenario = "crash-every-phase"
verdict = "fail"
reason = "deletes the previous checkpoint before the new one is whole"
cause = [{{cause}}]

[[expect]]
job = "{BROKEN}"
scenario = "missing-shard"
verdict = "fail"
reason = "flagged by an older release"
"""


@pytest.mark.parametrize("cause, label, gated", [
    ('"atomic · refused"', "NEW", "other cause"),
    ('"atomic · fresh start"', "expected", "expected"),
])
def test_a_matrix_against_a_baseline_marks_each_cell_new_expected_or_fixed(browser, matrixed, tmp_path, cause,
                                                                           label, gated):
    """The baseline's word per cell, in matrix.json and on the grid a person
    reads: the failing cell is NEW when the baseline expects it for another
    cause and expected for its own; the cell the baseline expects to fail and
    that passes is fixed. (`--resume` of a whole matrix runs nothing and gates
    it again.)"""
    from selenium.webdriver.common.by import By

    (tmp_path / "base.toml").write_text(BASELINE.format(cause=cause))
    done = cli("matrix", "--resume", str(matrixed / "out"), "--out", "out", "--baseline", "base.toml",
               "--html", "matrix.html", "--quiet", cwd=tmp_path, env_extra=ENV)
    assert done.returncode == (1 if label == "NEW" else 0), done.stdout + done.stderr
    data = json.loads((tmp_path / "out" / "matrix.json").read_text())
    cells = {c["property"]: c for c in data["cells"]}
    assert cells["atomic"]["baseline"]["label"] == label, cells["atomic"]
    assert cells["atomic"]["baseline"]["scenarios"] == {"crash-every-phase": gated}
    assert cells["detecting"]["baseline"]["label"] == "fixed", cells["detecting"]
    assert data["baseline"]["counts"]["fixed"] == 1 and data["baseline"]["ok"] is (label != "NEW")
    assert f"❌ fail · {label} | ✅ pass · fixed |" in (tmp_path / "out" / "matrix.md").read_text()

    url = (tmp_path / "matrix.html").as_uri()
    browser.get(url)
    grid = {td.get_attribute("class"): td.text for td in browser.find_elements(By.CSS_SELECTOR, "table.grid td")}
    assert grid == {f"cell v-fail b-{label}": f"FAIL {label}", "cell v-pass b-fixed": "PASS fixed"}, grid
    click(browser, browser.find_element(By.CSS_SELECTOR, "table.grid td.v-fail a"))
    said = browser.find_element(By.CSS_SELECTOR, "section.page.shown ul.baseline").text
    if label == "NEW":
        assert "for another cause: observed atomic · fresh start; the baseline expects it for atomic · refused" in said
    else:
        assert "expected: deletes the previous checkpoint before the new one is whole (base.toml:2)" in said, said
    row = browser.find_element(By.CSS_SELECTOR, "section.page.shown table.scenarios tbody tr").text
    assert row.startswith(f"crash-every-phase FAIL {label} "), row
