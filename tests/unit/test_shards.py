"""Splitting a matrix into shards: the same split on every machine, every run
once, balanced by the costs given, a row's scenarios kept on one shard where
that costs no balance; and a matrix rebuilt from its JSON, and merged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt_harness.catalogue.matrix import Matrix, load, merge, read_costs
from ckpt_harness.catalogue.scenario import ScenarioResult, builtin_catalogue
from ckpt_harness.catalogue.shards import Shard, Task, assign, task_costs
from ckpt_harness.errors import UsageError
from ckpt_harness.verdict import Verdict

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
        # dcp_async_process is two thirds of the matrix: the only row too big for one shard of 2 or 3
        assert split == {"dcp_async_process"} or count == 4, (count, split)


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
               job_refs={"a": "a", "b": "b"}, plan=plan, tasks=tasks, shard=shard)
    for name, value in changes.items():
        setattr(m, name, value)
    return m


def _result(job: str, scenario: str, verdict: Verdict = Verdict.PASS) -> ScenarioResult:
    prop = {"overwrite-complete": "overwrite-safe", "world-size-grow": "reshardable"}[scenario]
    return ScenarioResult(scenario, job, prop, verdict, f"{job} {scenario} {verdict.value}", None, "", 2, 1.5)


ALL = [("a", "overwrite-complete"), ("a", "world-size-grow"), ("b", "overwrite-complete"), ("b", "world-size-grow")]


def test_a_matrix_comes_back_from_its_json_with_the_same_cells():
    whole = _matrix([_result(j, s, Verdict.FAIL if j == "b" else Verdict.PASS) for j, s in ALL])
    again = Matrix.from_json(json.loads(json.dumps(whole.to_json())))
    assert again.to_json() == whole.to_json() and again.cells() == whole.cells()
    assert again.markdown() == whole.markdown()


def test_a_cell_whose_scenarios_did_not_all_run_is_not_judged():
    stopped = _matrix([_result("a", "overwrite-complete")], stopped_by="SIGTERM")
    cells = {(c.job, c.property): c for c in stopped.cells()}
    assert cells["a", "overwrite-safe"].verdict is Verdict.PASS
    assert cells["a", "reshardable"].verdict is None and cells["a", "reshardable"].pending == ("world-size-grow",)
    assert "the run was stopped first" in cells["a", "reshardable"].reason
    assert stopped.incomplete and not stopped.complete and len(stopped.missing) == 3
    data = stopped.to_json()
    assert data["incomplete"] and data["stopped_by"] == "SIGTERM" and len(data["missing"]) == 3
    assert "**Incomplete**: stopped by SIGTERM" in stopped.markdown()


def _shards(split=((0, 1), (2, 3)), count=2):
    out = []
    for k, picks in enumerate(split, 1):
        tasks = [Task(*ALL[i]) for i in picks]
        out.append((f"shard{k}.json", _matrix([_result(*t) for t in tasks], Shard(k, count), tasks)))
    return out


def test_shards_merge_into_the_whole_matrix():
    whole = _matrix([_result(*t) for t in ALL])
    merged = merge(_shards())
    assert merged.to_json() == whole.to_json()
    shard = _shards()[0][1]
    assert "another shard runs it" in {c.reason.split(": ")[-1] for c in shard.cells()}
    assert shard.to_json()["shard"] == {"index": 1, "count": 2, "tasks": [list(ALL[0]), list(ALL[1])]}


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
