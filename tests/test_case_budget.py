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

import json
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


def test_a_scenario_runs_within_a_budget_and_names_the_command_that_runs_the_rest(tmp_path):
    """`scenario --max-cases N`: the faults check's cases, chosen as an exploration's; the rest run by the
    command its warning gives, and the two together are every case of the scenario."""
    def scenario(*more: str, json_out: str):
        out = cli("scenario", "power-loss-during-save", "--job", BROKEN, *more, "--json", str(tmp_path / json_out),
                  "--workdir", str(tmp_path / json_out.replace(".json", "")), cwd=tmp_path)
        return out, json.loads((tmp_path / json_out).read_text())

    out, cut = scenario("--max-cases", "3", json_out="cut.json")
    assert out.returncode == 1 and cut["verdict"] == "fail", out.stdout + out.stderr  # no fsync: still flagged
    ran = {c["case"] for c in cut["cases"]}
    (note,) = [w for w in cut["warnings"] if w.startswith("--max-cases 3: ran 3 of")]
    assert len(ran) == 3 and f"warning: {note}" in out.stdout, out.stdout
    rest = shlex.split(note.split("Run them: ")[1].split("   Run every case: ")[0])
    rest = rest[rest.index("ckpt-harness"):]  # after the job's PYTHONPATH
    assert rest[:3] == ["ckpt-harness", "scenario", "power-loss-during-save"] and "--max-cases" not in rest, rest
    _, left = scenario(*rest[3:], json_out="rest.json")
    assert not left["warnings"] and ran.isdisjoint(c["case"] for c in left["cases"])
    _, whole = scenario(json_out="whole.json")
    assert ran | {c["case"] for c in left["cases"]} == {c["case"] for c in whole["cases"]}

    refused = cli("scenario", "power-loss-during-save", "--job", BROKEN, "--max-cases", "3", "--shard", "1/2",
                  cwd=tmp_path)
    assert refused.returncode == 2 and "give one of the two" in refused.stderr, refused.stdout + refused.stderr
