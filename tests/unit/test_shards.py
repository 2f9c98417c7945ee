"""Splitting a matrix into shards: the same split on every machine, every run
once, balanced by the costs given, a row's scenarios kept on one shard where
that costs no balance; and a matrix rebuilt from its JSON, and merged. One
scenario's cases split likewise (`Shard.part`) and merged (`merge_parts`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt_harness.catalogue.matrix import Matrix, files, load, markdown, merge, read_costs
from ckpt_harness.catalogue.scenario import ScenarioResult, merge_parts, select, summarize
from ckpt_harness.catalogue.scenario_files import builtin_catalogue
from ckpt_harness.catalogue.shards import CasePart, Shard, Task, assign, task_costs
from ckpt_harness.errors import UsageError
from ckpt_harness.targets import TargetSpec
from ckpt_harness.verdict import CaseResult, Verdict

RECORDED = Path(__file__).resolve().parents[2] / "docs" / "matrix.json"


def recorded() -> tuple[list[Task], dict[Task, float]]:
    """The recorded full matrix's runs and the seconds each took."""
    entries = json.loads(RECORDED.read_text())["scenarios"]
    return [Task(e["job"], e["scenario"]) for e in entries], {Task(e["job"], e["scenario"]): e["elapsed"]
                                                             for e in entries}


tasks_strategy = st.lists(st.tuples(st.sampled_from("abcdefg"), st.sampled_from("stuvwxyz")), unique=True,
                          min_size=0, max_size=40).map(lambda pairs: [Task(*p) for p in pairs])


@given(tasks=tasks_strategy, count=st.integers(1, 7),
       costs=st.dictionaries(st.tuples(st.sampled_from("abcdefg"), st.sampled_from("stuvwxyz")),
                             st.floats(0, 500, allow_nan=False), max_size=30))
def test_every_run_is_in_exactly_one_shard_in_plan_order_and_the_split_is_deterministic(tasks, count, costs):
    known = {Task(*k): v for k, v in costs.items()}
    shards = assign(tasks, count, known)
    assert len(shards) == count
    assert sorted(t for shard in shards for t in shard) == sorted(tasks)
    for shard in shards:
        assert shard == [t for t in tasks if t in shard]  # each in the plan's order
    assert assign(list(tasks), count, dict(reversed(list(known.items())))) == shards  # no hidden state, no dict order


def test_shards_of_the_recorded_matrix_are_balanced_by_its_costs_and_split_only_the_row_too_big_for_one():
    tasks, costs = recorded()
    total = sum(costs.values())
    for count in (2, 3, 4):
        shards = assign(tasks, count, costs)
        loads = [sum(costs[t] for t in shard) for shard in shards]
        # no worse than greedy's bound over the fair share or the costliest single run
        assert max(loads) <= max(total / count * 1.1, max(costs.values())) + 1e-6, loads
        rows = [{t.row for t in shard} for shard in shards]
        split = {row for row in {t.row for t in tasks} if sum(row in r for r in rows) > 1}
        cost = {row: sum(c for t, c in costs.items() if t.row == row) for row in {t.row for t in tasks}}
        # only a row too big for a fair share is split (dcp_async_process, 30% of the matrix, fits a third)
        assert split <= {row for row in cost if cost[row] > total / count} or count == 4, (count, split)


def test_without_costs_every_run_costs_the_same_and_rows_stay_whole_where_they_fit():
    tasks = [Task(row, f"s{i}") for row in ("a", "b", "c", "d") for i in range(6)]
    shards = assign(tasks, 2)
    assert [len(s) for s in shards] == [12, 12]
    assert [{t.row for t in s} for s in shards] == [{"a", "c"}, {"b", "d"}]
    # 4 rows of 6 over 3 shards: whole rows would make 12/6/6, so one row is split, the others stay whole
    three = assign(tasks, 3)
    assert [len(s) for s in three] == [8, 8, 8]
    assert sum(len({t.row for t in s}) for s in three) == 6  # 3 whole rows, one row over 3 shards


def test_costs_are_read_from_any_matrix_json_even_one_too_old_to_resume(tmp_path):
    tasks, costs = recorded()
    assert read_costs(RECORDED) == costs and read_costs(RECORDED.parent) == costs  # the file or its directory
    older = {k: v for k, v in json.loads(RECORDED.read_text()).items() if k not in ("plan", "catalogue")}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "matrix.json").write_text(json.dumps(older))
    assert read_costs(tmp_path / "old") == costs
    with pytest.raises(UsageError, match="written by an older ckpt-harness, without the plan and catalogue"):
        load(tmp_path / "old" / "matrix.json")
    (tmp_path / "matrix.json").write_text('{"kind": "verify"}')
    with pytest.raises(UsageError, match="not a matrix.json written by `ckpt-harness matrix`"):
        read_costs(tmp_path)


def test_costs_unknown_for_a_run_are_the_mean_of_the_known_ones():
    tasks = [Task("a", "x"), Task("a", "y"), Task("b", "x"), Task("b", "new")]
    costs = task_costs(tasks, {Task("a", "x"): 10, Task("a", "y"): 10, Task("b", "x"): 4, Task("gone", "x"): 99})
    assert costs == {Task("a", "x"): 10, Task("a", "y"): 10, Task("b", "x"): 4, Task("b", "new"): 8}
    assert set(task_costs(tasks).values()) == {1.0}


@pytest.mark.parametrize("text, message", [
    ("4/3", "--shard 4/3: K must be 1..N (1..3)"),
    ("0/3", "--shard 0/3: K must be 1..N (1..3)"),
    ("1/0", "--shard 1/0: N must be at least 1"),
    ("two/3", "--shard two/3: give K/N"),
    ("2", "--shard 2: give K/N"),
])
def test_a_bad_shard_says_what_to_give(text, message):
    with pytest.raises(UsageError, match=message.replace("(", "\\(").replace(")", "\\)")):
        Shard.parse(text)
    assert Shard.parse(" 2/3 ") == Shard(2, 3) and str(Shard(2, 3)) == "2/3"


# -- a matrix from its JSON, and merged ----------------------------------------------------------------
def _matrix(results, shard=None, tasks=None, **changes) -> Matrix:
    scenarios = [s for s in builtin_catalogue() if s.name in ("overwrite-complete", "world-size-grow")]
    plan = [Task(job, s.name) for job in ("a", "b") for s in scenarios]
    m = Matrix(2, ["a", "b"], results, scenarios, 10.0, {"torch": "2.13"}, settings={"timeout": 60.0, "parallel": 2},
               rows={name: TargetSpec("job", {"job": name}) for name in ("a", "b")}, plan=plan, tasks=tasks,
               shard=shard)
    for name, value in changes.items():
        setattr(m, name, value)
    return m


def _result(job: str, scenario: str, verdict: Verdict = Verdict.PASS) -> ScenarioResult:
    prop = {"overwrite-complete": "overwrite-safe", "world-size-grow": "reshardable"}[scenario]
    return ScenarioResult(scenario, job, prop, verdict, f"{job} {scenario} {verdict.value}", None, "", 2, 1.5)


ALL = [("a", "overwrite-complete"), ("a", "world-size-grow"), ("b", "overwrite-complete"), ("b", "world-size-grow")]


def test_a_matrix_comes_back_from_its_json_with_the_same_cells():
    whole = _matrix([_result(j, s, Verdict.FAIL if j == "b" else Verdict.PASS) for j, s in ALL])
    again = files.from_json(json.loads(json.dumps(files.to_json(whole))))
    assert files.to_json(again) == files.to_json(whole) and again.cells() == whole.cells()
    assert markdown.of(again) == markdown.of(whole)


def test_a_cell_whose_scenarios_did_not_all_run_is_not_judged():
    stopped = _matrix([_result("a", "overwrite-complete")], stopped_by="SIGTERM")
    cells = {(c.job, c.property): c for c in stopped.cells()}
    assert cells["a", "overwrite-safe"].verdict is Verdict.PASS
    assert cells["a", "reshardable"].verdict is None and cells["a", "reshardable"].pending == ("world-size-grow",)
    assert "the run was stopped first" in cells["a", "reshardable"].reason
    assert stopped.incomplete and not stopped.complete and len(stopped.missing) == 3
    data = files.to_json(stopped)
    assert data["incomplete"] and data["stopped_by"] == "SIGTERM" and len(data["missing"]) == 3
    assert "**Incomplete**: stopped by SIGTERM" in markdown.of(stopped)


def _shards(split=((0, 1), (2, 3)), count=2):
    out = []
    for k, picks in enumerate(split, 1):
        tasks = [Task(*ALL[i]) for i in picks]
        out.append((f"shard{k}.json", _matrix([_result(*t) for t in tasks], Shard(k, count), tasks)))
    return out


def test_shards_merge_into_the_whole_matrix():
    whole = _matrix([_result(*t) for t in ALL])
    merged = merge(_shards())
    assert files.to_json(merged) == files.to_json(whole)
    shard = _shards()[0][1]
    assert "another shard runs it" in {c.reason.split(": ")[-1] for c in shard.cells()}
    assert files.to_json(shard)["shard"] == {"index": 1, "count": 2, "tasks": [list(ALL[0]), list(ALL[1])]}


@pytest.mark.parametrize("shards, message", [
    (lambda: _shards()[:1], "shard 2/2 missing"),
    (lambda: [_shards()[0], _shards()[0]], "shard 1/2 given twice"),
    (lambda: _shards(((0, 1), (1, 2, 3))), "shard2.json and shard1.json both ran world-size-grow on a"),
    (lambda: _shards(((0,), (2, 3))), "no shard ran 1 of the matrix's runs"),
    (lambda: [_shards()[0], ("other.json", _matrix([], Shard(2, 2), [], versions={"torch": "2.14"}))],
     "other.json and shard1.json are shards of different matrices: their versions differ "
     r"\(torch: '2.14' vs. '2.13'\)"),
    (lambda: [_shards()[0], ("other.json", _matrix([], Shard(2, 2), [], settings={"timeout": 30.0, "parallel": 2}))],
     "their settings differ"),
    (lambda: [_shards()[0], ("whole.json", _matrix([_result(*t) for t in ALL]))], "whole.json is not a shard"),
    (lambda: [_shards()[0], ("s2.json", _matrix([], Shard(2, 2), [Task(*ALL[2])], stopped_by="SIGINT"))],
     "s2.json: shard 2/2 was stopped before it finished"),
])
def test_merge_refuses_shards_that_do_not_make_one_matrix(shards, message):
    with pytest.raises(UsageError, match=message):
        merge(shards())


@given(items=st.lists(st.integers(), max_size=50), count=st.integers(1, 9))
def test_a_scenarios_cases_split_into_contiguous_parts_of_near_equal_length(items, count):
    parts = [Shard(k, count).part(items) for k in range(1, count + 1)]
    assert [x for part in parts for x in part] == items  # each once, in order
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


CRASH = select(builtin_catalogue(), ["crash-every-phase"])[0]
PLANNED = tuple(f"crash@r{i % 2}:save4#{i}" for i in range(7))


def _case(name: str) -> CaseResult:
    failing = name.endswith("#3")
    return CaseResult(name, "atomic", Verdict.FAIL if failing else Verdict.PASS,
                      "torn state.pt" if failing else "S_prev", repro=f"ckpt-harness explore --case {name}")


def _parts(count=3, planned=PLANNED, job="torch_save", scenario=CRASH):
    cases = [_case(n) for n in planned]
    return [(f"part{k}.json", dataclasses.replace(
        summarize(job, scenario, Shard(k, count).part(cases)), part=CasePart(Shard(k, count), planned), elapsed=k))
        for k in range(1, count + 1)]


def test_the_parts_of_a_scenario_merge_into_its_unsplit_result():
    whole = summarize("torch_save", CRASH, [_case(n) for n in PLANNED])
    parts = _parts()
    assert parts[0][1].reason != whole.reason  # a part alone says its own cases only
    merged = merge_parts(CRASH, list(reversed(parts)))
    assert merged.to_json() == dataclasses.replace(whole, elapsed=3).to_json()  # the longest shard's seconds
    assert merged.reason.startswith("1 of 7 cases fail (atomic): crash@r1:save4#3: torn state.pt")
    back = ScenarioResult.from_json(json.loads(json.dumps(parts[1][1].to_json())))
    assert back.part == parts[1][1].part and back.results == parts[1][1].results


@pytest.mark.parametrize("parts, message", [
    (lambda: _parts()[:2], "shards 3/3 missing"),
    (lambda: [*_parts(), _parts()[0]], "shard 1/3 given 2 times"),
    (lambda: [*_parts()[:2], _parts(planned=PLANNED[:6])[2]], "part3.json planned other cases than part1.json"),
    (lambda: [*_parts()[:2], _parts(job="dcp")[2]], "part3.json ran dcp and part1.json torch_save"),
    (lambda: [*_parts()[:2], _parts(count=4)[2]], "part3.json is a shard of 4, part1.json of 3"),
    (lambda: [*_parts()[:2], ("whole.json", summarize("torch_save", CRASH, [_case(n) for n in PLANNED]))],
     "whole.json: not a shard of crash-every-phase"),
    (lambda: [("other.json", dataclasses.replace(_parts()[0][1], scenario="torn-write"))],
     "other.json: a report of scenario torn-write, not crash-every-phase"),
])
def test_merge_refuses_parts_that_do_not_make_one_scenario(parts, message):
    with pytest.raises(UsageError, match=message):
        merge_parts(CRASH, parts())
