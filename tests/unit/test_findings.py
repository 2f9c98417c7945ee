"""Findings: failing cases grouped by the dependency they share (`oracle.findings`), both ways.

The cases here are built as an exploration leaves them: a result per case,
with where its fault struck (`CaseResult.site`). The exploration itself, on
a real planted job, is `tests/test_findings.py`.
"""

from __future__ import annotations

import dataclasses

from ckpt_harness.oracle.findings import group
from ckpt_harness.pipeline.baseline import Point
from ckpt_harness.report import Report
from ckpt_harness.verdict import CaseResult, Site, Verdict

PROPERTY = {"crash": "atomic", "crash-mid": "atomic", "error": "preserving", "torn": "detecting",
            "power-loss": "atomic"}


def pointer_first(fails: bool = True) -> list[tuple[Point, bool]]:
    """A save of two ranks: rank 0 renames `latest` (#2) before either rank
    writes its shard; with `fails`, every stop from the rename to each rank's
    shard write breaks the resume (the twin: none does)."""
    r0 = [Point(0, "save 4", 0, "collective", "barrier", "job.py:10 in save()"),
          Point(0, "save 4", 1, "open", "latest.tmp", "job.py:20 in publish()"),
          Point(0, "save 4", 2, "rename", "latest.tmp -> latest", "job.py:21 in publish()"),
          Point(0, "save 4", 3, "collective", "barrier", "job.py:12 in save()"),
          Point(0, "save 4", 4, "open", "step_000004/rank0.pt", "job.py:30 in shard()"),
          Point(0, "save 4", 5, "write", "step_000004/rank0.pt", "job.py:31 in shard()"),
          Point(0, "save 4", 6, "fsync", "step_000004/rank0.pt", "job.py:32 in shard()"),
          Point(0, "save 4", 7, "collective", "barrier", "job.py:14 in save()")]
    r1 = [Point(1, "save 4", 0, "collective", "barrier", "job.py:10 in save()"),
          Point(1, "save 4", 1, "collective", "barrier", "job.py:12 in save()"),
          Point(1, "save 4", 2, "open", "step_000004/rank1.pt", "job.py:30 in shard()"),
          Point(1, "save 4", 3, "write", "step_000004/rank1.pt", "job.py:31 in shard()"),
          Point(1, "save 4", 4, "fsync", "step_000004/rank1.pt", "job.py:32 in shard()"),
          Point(1, "save 4", 5, "collective", "barrier", "job.py:14 in save()")]
    broken = {(0, 3), (0, 4), (0, 5), (1, 1), (1, 2), (1, 3)} if fails else set()
    return [(p, (p.rank, p.index) in broken) for p in r0 + r1]


def explored(points: list[tuple[Point, bool]], kinds=("crash", "error"), also_live: bool = False) -> Report:
    """A report of `kinds` at each point (`error` at file operations only), each failing where its point is broken."""
    results = []
    for p, broken in points:
        for kind in kinds:
            if kind != "crash" and p.op == "collective":
                continue
            name = f"{kind}@r{p.rank}:save4/{p.op}#{p.index}"
            live = (CaseResult(name, "live", Verdict.FAIL, "a peer hangs"),) if also_live and broken else ()
            results.append(CaseResult(
                name, PROPERTY[kind], Verdict.FAIL if broken else Verdict.PASS,
                f"{kind} at rank {p.rank} #{p.index} → {'refused' if broken else 'S_prev'}", repro=f"repro {name}",
                cells=(str(p.rank), str(p.index), p.op, p.target, p.caller, kind, "refused" if broken else "S_prev"),
                outcome="refused" if broken else "S_prev", also=live,
                site=Site.at(p, kind)))
    return Report("job", 2, results, kind="explore")


def test_a_pointer_published_before_its_shards_is_one_finding_naming_both_operations_and_lines():
    report = explored(pointer_first(), also_live=True)
    (finding,) = report.findings()
    assert finding.kind == "window" and (finding.check, finding.verdict) == ("atomic", Verdict.FAIL)
    # rank 0's window opens at its rename, which leads; rank 1's after a barrier, so at its first file operation
    assert [(o.rank, o.op, o.caller) for o in finding.opened_by] == [(0, "rename", "job.py:21 in publish()"),
                                                                    (1, "open", "job.py:30 in shard()")]
    assert [(o.rank, o.op, o.target) for o in finding.closed_by] == [(0, "write", "step_000004/rank0.pt"),
                                                                    (1, "write", "step_000004/rank1.pt")]
    assert finding.headline.startswith(
        "`rename latest.tmp -> latest` (rank 0 #2 · job.py:21 in publish()) comes before "
        "`write step_N/rankN.pt` (ranks 0, 1 · job.py:31 in shard()) is done, and the job relies on the reverse: "
        "between them, crash, error on ranks 0, 1 break atomic"), finding.headline
    # every failing case is behind it, the crash's property first, the error's under it
    assert {c.case for c in finding.cases} == {r.case for r in report.failures()}
    checks = [c.check for c in finding.cases]
    assert checks == sorted(checks, key=lambda c: c != "atomic") and "preserving" in checks
    assert ("preserving", "fail", 4) in finding.secondary() and ("live", "fail", 10) in finding.secondary()
    assert finding.repro == "repro crash@r0:save4/collective#3"
    text = report.explain()
    assert text.count("=== ") == 1 and "=== finding 1 of 1: atomic FAIL, 10 cases (also preserving FAIL ×4" in text
    assert "its other cases:" in text and "usual fix: write the save into a staging directory" in text
    assert report.to_json()["findings"][0]["cases"] == [c.case for c in finding.cases]


def test_its_fixed_twin_has_no_finding():
    report = explored(pointer_first(fails=False))
    assert report.ok and report.findings() == [] and "===" not in report.explain()


def test_two_windows_of_one_rank_are_two_findings():
    points = pointer_first(fails=False)
    broken = {(0, 2), (0, 5), (0, 6)}  # a stop right before the rename; another after the shard's open
    report = explored([(p, (p.rank, p.index) in broken) for p, _ in points], kinds=("crash",))
    found = report.findings()
    assert [len(f.cases) for f in found] == [2, 1]
    assert [(f.opened_by[0].op, f.opened_by[0].target) for f in found] == [("open", "step_000004/rank0.pt"),
                                                                          ("open", "latest.tmp")]
    assert found[0].closed_by[0].op == "fsync" and found[1].closed_by[0].op == "rename"


def test_a_window_from_the_start_of_the_save_says_so():
    points = pointer_first(fails=False)
    report = explored([(p, p.rank == 0 and p.index < 3) for p, _ in points], kinds=("crash",))
    (finding,) = report.findings()
    assert finding.opened_by == () and finding.headline.startswith(
        "the job's save cannot stop anywhere before `rename latest.tmp -> latest` (rank 0 #2 · job.py:21 in "
        "publish()) is done"), finding.headline


def lost(name: str, lines: list[str], check: str = "atomic") -> CaseResult:
    first = lines[0].strip()
    return CaseResult(name, check, Verdict.FAIL, f"power-loss at x → refused; expected S_k or S_prev; power loss lost "
                      f"{first}; and {len(lines) - 1} more",
                      "what the power loss (strict durability model) did not keep, and why:\n" + "\n".join(lines)
                      + "\n\nmore details", cells=("0", "1", "fsync", "x", "", "power-loss", "refused"),
                      outcome="refused")


def test_power_losses_are_grouped_by_the_missing_fsync_most_of_them_share():
    step = ["  step_000002/model.pt: created, but `step_000002` was never fsynced",
            "  step_000002/rank0.pt: created, but `step_000002` was never fsynced"]
    tmp = "  latest.tmp: created, but the checkpoint directory was not fsynced after that"
    data = "  current/model.pt: written after its last fsync (10 bytes now, 4 bytes as of that fsync)"
    cases = [lost("power-loss@a", step), lost("power-loss@b", [tmp, *step]), lost("power-loss-after", step, "durable"),
             lost("power-loss@c", [data]), lost("power-loss@d", [data.replace("model", "optimizer")])]
    found = group(cases)
    assert [(f.kind, len(f.cases)) for f in found] == [("power loss", 3), ("power loss", 2)]
    assert found[0].headline == ("a power loss drops what the job never made durable: `step_N` was never fsynced "
                                 "(lost: step_N/model.pt, step_N/rankN.pt); 3 cases break atomic")
    assert found[0].check == "atomic" and found[0].cases[-1].check == "durable"
    assert "data written after its last fsync (lost: current/model.pt, current/optimizer.pt)" in found[1].headline


def test_damaged_files_the_load_took_are_one_finding_whatever_it_made_of_each():
    """Corruptions of committed files and a torn write outside any window: one
    mistake (the load checks nothing it reads), each outcome said once; its
    own property's judgments lead, a hang on one rank they caused under it."""
    def damaged(kind, path, outcome, check="detecting", site=None):
        return CaseResult(f"{kind}:{path}", check, Verdict.FAIL, f"{path} damaged → {outcome}",
                          cells=("*", "", "corrupt", path, "", kind, outcome), outcome=outcome, site=site)

    torn = Site(1, "save 4", 3, "write", "step_000004/rank1.pt", "job.py:31 in shard()", fault="torn")
    found = group([damaged("bit-flip", "step_000004/model.pt", "partial"),
                   damaged("zero-page", "step_000004/rank1.pt", "error on some ranks", check="live"),
                   damaged("bit-flip", "step_000004/rank1.pt", "partial"),
                   CaseResult("torn@r1", "detecting", Verdict.FAIL, "torn → partial", outcome="partial",
                              cells=("1", "3", "write", "step_000004/rank1.pt", "", "torn", "partial"), site=torn),
                   CaseResult("delete:latest", "detecting", Verdict.PASS, "refused",
                              cells=("*", "", "corrupt", "latest", "", "delete", "refused"))])
    (finding,) = found
    assert (finding.kind, finding.check, len(finding.cases)) == ("damaged", "detecting", 4)
    assert finding.cases[-1].check == "live" and ("live", "fail", 1) in finding.secondary()
    assert finding.headline == ("the job's load takes a checkpoint damaged on disk for good: bit-flip of "
                                "step_N/model.pt, step_N/rankN.pt; torn of step_N/rankN.pt → partial · zero-page "
                                "of step_N/rankN.pt → error on some ranks"), finding.headline


def test_a_case_without_a_point_is_grouped_with_those_that_failed_alike():
    cases = [CaseResult(f"delay@r{r}", "skew-safe", Verdict.FAIL, f"delay at rank {r} #3 rmtree x → refused; "
                        f"rank {r} deleted what its peer read",
                        cells=(str(r), "3", "rmtree", "x", "", "delay", "refused"), outcome="refused")
             for r in (0, 1)]
    (finding,) = group(cases)
    assert finding.kind == "alike" and len(finding.cases) == 2
    assert finding.headline == "refused after delay at rmtree: rank N deleted what its peer read"


def test_a_harness_error_at_a_point_opens_no_window():
    """An ERROR (or UNKNOWN) says nothing of the job's order: it is grouped
    with the cases alike, and a window is drawn by FAILs only."""
    report = explored(pointer_first(fails=False), kinds=("crash",))
    at = next(i for i, r in enumerate(report.results) if r.case == "crash@r0:save4/rename#2")
    report.results[at] = dataclasses.replace(report.results[at], verdict=Verdict.ERROR,
                                             summary="harness error: the fork server died")
    (finding,) = report.findings()
    assert (finding.kind, finding.verdict, len(finding.cases)) == ("alike", Verdict.ERROR, 1)
    assert finding.opened_by == () and finding.closed_by == ()
