"""The reduction of issue 12 (states cut from the golden trace, one resume per
distinct directory) must never change a verdict: the catalogue's per-case
results with it and without it, compared cell by cell.

CI runs a sample of the scenarios where the reduction acts (power loss cut
from the trace, crashes whose resumes are shared); `CKPT_HARNESS_FULL_CATALOGUE=1`
runs the whole catalogue for both reference jobs (minutes; `python
ci/benchmark.py reduction` runs it too and reports the times).
"""

from __future__ import annotations

import os

import pytest

from ckpt_harness import targets
from ckpt_harness.catalogue.bench import Bench
from ckpt_harness.catalogue.scenario_files import builtin_catalogue

FULL = os.environ.get("CKPT_HARNESS_FULL_CATALOGUE") == "1"
SAMPLE = {
    "torch_save": ("rotation-crash", "power-loss-during-save", "power-loss-after-save"),
    "dcp": ("power-loss-during-save",),
}


def judged_cells(result):
    """The table cells, without the resume's outcome where a real run races:
    a power loss as one rank enters a collective cuts its peers wherever they
    are at that moment, so two faulted runs of that case may already resume
    at different saves (S_k, S_prev); the verdict may not differ."""
    racing = "power-loss@" in result.case and result.cells[2:3] == ("collective",)
    return result.cells[:-1] if racing else result.cells


@pytest.mark.parametrize("job", [pytest.param(job, marks=[pytest.mark.slow] if job != "torch_save" else [])
                                 for job in sorted(SAMPLE)])  # one row proves it in `make test`
def test_the_reduction_changes_no_case_of_the_catalogue(tmp_path, job):
    scenarios = [s for s in builtin_catalogue() if s.applies_to(job) and (FULL or s.name in SAMPLE[job])]
    cases = {}
    for reduce in (True, False):
        bench = Bench(targets.job(job, world_size=2), tmp_path / f"reduce-{reduce}", reduce=reduce)
        results = [bench.run(s) for s in scenarios]
        cases[reduce] = {(s.scenario, r.case): (r.check, r.verdict, judged_cells(r))
                         for s in results for r in s.results}
        reduced = [r for s in results for r in s.results if "derived from the golden" in r.details or r.shares]
        assert bool(reduced) is reduce, [s.scenario for s in results]
    assert len(cases[True]) > 20
    assert cases[True] == cases[False]
