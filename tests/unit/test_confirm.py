"""Confirmed cold (`pipeline.confirm`): what is run again with cold starts, and what keeps its warm result."""

from ckpt_harness.pipeline import confirm
from ckpt_harness.verdict import CaseResult, Verdict

P, F = Verdict.PASS, Verdict.FAIL


def results(*rows):
    return [CaseResult(case, check, verdict, summary=f"{case} {check} warm", warm=True)
            for case, check, verdict in rows]


def test_only_the_doubted_cases_run_again_cold_and_the_others_keep_their_places():
    warm = results(("golden", "live", P), ("resume@2", "load step", P), ("resume@2", "final state", F),
                   ("resume@4", "final state", P))
    asked = []

    def cold(names):
        asked.append(names)
        return [CaseResult("golden", "live", P, summary="cold"), CaseResult("resume@2", "load step", P),
                CaseResult("resume@2", "final state", F, summary="resume@2 final state cold")]

    out = confirm.confirm_cases(warm, cold)
    assert asked == [["resume@2"]]  # not the passing resume@4, nor the golden run's judgments
    assert [(r.case, r.check) for r in out] == [(r.case, r.check) for r in warm]
    assert out[0] is warm[0] and out[3] is warm[3]
    assert out[2].confirmed_cold and out[2].summary == "resume@2 final state cold"
    assert "the warm run said FAIL: resume@2 final state warm" in out[2].details


def test_a_doubted_golden_run_runs_every_case_again_and_nothing_doubted_runs_nothing():
    asked = []
    confirm.confirm_cases(results(("golden", "live", F), ("resume@2", "final state", P)),
                          lambda names: asked.append(names) or [CaseResult("golden", "live", F)])
    assert asked == [None]  # every case stands on the golden run
    assert confirm.confirm_cases(results(("golden", "live", P)), lambda names: asked.append(names)) == \
        results(("golden", "live", P)) and asked == [None]
