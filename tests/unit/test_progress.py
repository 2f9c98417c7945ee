"""The progress printer: rate-limited plain lines off a terminal, one rewritten line on one."""

import io

from ckpt_harness.progress import Progress
from ckpt_harness.verdict import CaseResult, Verdict


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def result(verdict: Verdict, case: str = "crash@r0:save4#0") -> CaseResult:
    return CaseResult(case, "atomic", verdict)


def test_off_a_terminal_first_last_and_one_line_per_interval():
    out, clock = io.StringIO(), Clock()
    progress = Progress(out, every=10, clock=clock)
    verdicts = [Verdict.PASS, Verdict.FAIL, Verdict.PASS, Verdict.ERROR, Verdict.UNKNOWN, Verdict.PASS]
    for done, (at, verdict) in enumerate(zip([1, 2, 5, 12, 13, 14], verdicts), 1):
        clock.now = at
        progress(done, 6, result(verdict))
    progress.close()
    assert "\r" not in out.getvalue()
    assert out.getvalue().splitlines() == [
        "[1/6 cases] 1.0s: 1 pass",  # the first
        "[4/6 cases] 12.0s: 2 pass, 1 fail, 1 error",  # 10 s after the first
        "[6/6 cases] 14.0s: 3 pass, 1 fail, 1 unknown, 1 error",  # the last
    ]


def test_each_piece_of_work_starts_its_own_lines_and_counts():
    out, clock = io.StringIO(), Clock()
    progress = Progress(out, every=10, clock=clock)
    progress.begin("[1/2] dcp crash-every-phase")
    progress(1, 1, result(Verdict.FAIL))
    progress.line("[1/2] dcp crash-every-phase FAIL")
    clock.now = 61
    progress.begin("[2/2] dcp torn-every-phase")
    clock.now = 62
    progress(1, 2, result(Verdict.PASS))
    assert out.getvalue().splitlines() == [
        "[1/2] dcp crash-every-phase [1/1 cases] 0.0s: 1 fail",
        "[1/2] dcp crash-every-phase FAIL",
        "[2/2] dcp torn-every-phase [1/2 cases] 1.0s: 1 pass",
    ]


def test_on_a_terminal_one_line_is_rewritten_and_ended():
    out, clock = Terminal(), Clock()
    progress = Progress(out, clock=clock)
    for done in (1, 2, 3):
        clock.now = 65 * done
        progress(done, 3, result(Verdict.PASS, f"case{done}"))
    progress.close()
    text = out.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n") and text.count("\n") == 1
    assert text.split("\r")[-1].startswith("[3/3 cases] 3m15s: 3 pass | case3")


def test_quiet_prints_nothing():
    out = io.StringIO()
    progress = Progress(out, quiet=True)
    progress(1, 1, result(Verdict.PASS))
    progress.line("done")
    progress.close()
    assert out.getvalue() == ""
