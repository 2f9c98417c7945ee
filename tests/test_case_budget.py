"""A case budget (`--max-cases N`, issue 48 item 5): N cases of an
exploration, chosen to see every rank, phase, operation and fault kind
before any twice (`pipeline.budget`), the rest named with the command that
runs them.

Against a checkpointer that renames without fsync (a power loss after the
rename loses the save) and the reference one: within a budget of 4 of its
cases the broken one is still flagged for the cause the whole exploration
finds, the reference one still passes, and the cases left out plus those
run are every case, as the printed command replays them.
"""

import shlex

from ckpt_harness.pipeline import budget
from ckpt_harness.pipeline.cases import plan_cases
from ckpt_harness.pipeline.explore import baseline, explore
from ckpt_harness.verdict import Verdict
from tests.clirun import cli

BROKEN = "tests.planted.checkpointers:RenameWithoutFsync"
REF = "tests.planted.checkpointers:ReferenceCheckpointer"
PLAN = {"world_size": 2, "faults": ("crash", "power-loss"), "corruptions": ()}


def test_the_budget_sees_every_aspect_before_any_twice_and_always_the_same(tmp_path):
    cases = plan_cases(baseline(BROKEN, workdir=tmp_path, **PLAN))
    every = set().union(*map(budget.aspects, cases))

    def covers(some) -> bool:
        return set().union(*map(budget.aspects, some)) == every

    # the fewest cases the budget needs to see everything once: at most one per aspect
    rounds = next(n for n in range(1, len(cases) + 1) if covers(budget.within(cases, n)[0]))
    assert rounds <= len(every) < len(cases)
    assert not covers(cases[:rounds])  # as many in plan order: one rank's first operations
    chosen, left = budget.within(cases, rounds + 2)
    assert covers(chosen) and len(chosen) == rounds + 2
    assert sorted(c.name for c in chosen + left) == sorted(c.name for c in cases)
    assert budget.within(cases, rounds + 2) == (chosen, left)  # the same plan, the same cases
    assert budget.within(cases, len(cases)) == (list(cases), [])


def test_a_budget_finds_the_cause_the_whole_exploration_finds_and_names_the_rest(tmp_path):
    whole = explore(BROKEN, workdir=tmp_path / "whole", **PLAN)
    cut = explore(BROKEN, workdir=tmp_path / "cut", max_cases=4, **PLAN)
    assert len({r.case for r in cut.results}) == 4
    failing = lambda report: {(r.check, r.cells[5]) for r in report.results if r.verdict is Verdict.FAIL}  # noqa: E731
    assert failing(cut) and failing(cut) <= failing(whole), (failing(cut), failing(whole))
    assert any(kind.startswith("power-loss") for _, kind in failing(cut))  # no fsync: only a power loss shows it
    (note,) = [w for w in cut.warnings if w.startswith("--max-cases 4")]
    rest = shlex.split(note.split("Run them: ")[1].split("   Run every case: ")[0])
    left = [rest[i + 1] for i, a in enumerate(rest) if a == "--case"]
    assert sorted({r.case for r in cut.results} | set(left)) == sorted({r.case for r in whole.results})
    assert "--max-cases" not in note.split("Run them: ")[1]


def test_a_budget_passes_the_reference_checkpointer_and_is_a_cli_option(tmp_path):
    out = cli("explore", "--job", REF, "--faults", "crash,power-loss", "--corruptions", "", "--max-cases", "3",
              "--workdir", str(tmp_path / "work"), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "--max-cases 3: ran 3 of" in out.stdout + out.stderr, out.stdout + out.stderr
