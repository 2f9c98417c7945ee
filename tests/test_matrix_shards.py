"""`ckpt-harness matrix` as N shards merged, stopped by SIGINT or SIGTERM, and
resumed: real processes, real signals, judged against one uninterrupted run
of the same small matrix (a planted job that fails one cell, and torch_save)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_cli import ROOT, cli

MERGES = "tests.planted.scenario_jobs:MergesIntoExisting"
#: Two rows of three scenarios: a failing cell, passing ones; seconds each.
MATRIX = ("matrix", "--job", MERGES, "--job", "torch_save", "--scenarios",
          "overwrite-larger-world,world-size-grow,resume-every-save")
ENV = {"PYTHONPATH": str(ROOT)}


def cells(out: Path) -> list[tuple]:
    """What two runs of one matrix must agree on: each cell's verdict, reason and repro."""
    data = json.loads((out / "matrix.json").read_text())
    return [(c["job"], c["property"], c["verdict"], c["reason"], c["repro"], c["scenarios"]) for c in data["cells"]]


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    """The matrix run once, uninterrupted and unsharded."""
    cwd = tmp_path_factory.mktemp("whole")
    out = cli(*MATRIX, "--out", "out", "--quiet", cwd=cwd, env_extra=ENV)
    assert out.returncode == 0, out.stdout + out.stderr
    return cwd / "out"


def test_two_shards_merged_are_the_unsharded_matrix(whole, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | ENV
    shards = [subprocess.Popen([sys.executable, "-m", "ckpt_harness.cli", *MATRIX, "--shard", f"{k}/2", "--out",
                                f"shard{k}", "--quiet"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for k in (1, 2)]
    for p in shards:
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stdout + stderr
    ran = []
    for k in (1, 2):
        data = json.loads((tmp_path / f"shard{k}" / "matrix.json").read_text())
        assert (data["shard"]["index"], data["shard"]["count"]) == (k, 2) and not data["incomplete"]
        assert [[r["job"], r["scenario"]] for r in data["scenarios"]] == data["shard"]["tasks"]
        ran.append({tuple(t) for t in data["shard"]["tasks"]})
        md = (tmp_path / f"shard{k}" / "matrix.md").read_text()
        assert f"**Shard {k} of 2**: 3 of the 6 (row, scenario) runs" in md
    # equal costs: each row whole on one shard (its golden run made once)
    assert ran[0].isdisjoint(ran[1]) and {len({row for row, _ in r}) for r in ran} == {1}

    merged = cli("matrix", "--merge", "shard1/matrix.json", "shard2", "--out", "merged", cwd=tmp_path, env_extra=ENV)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert cells(tmp_path / "merged") == cells(whole)
    ours, theirs = (json.loads((d / "matrix.json").read_text()) for d in (tmp_path / "merged", whole))
    drop = {"elapsed_seconds", "date", "scenarios"}
    assert {k: v for k, v in ours.items() if k not in drop} == {k: v for k, v in theirs.items() if k not in drop}
    # the same scenarios, cases and verdicts (a passing case's summary may say how long it took)
    same = lambda r: {k: v for k, v in r.items() if k != "elapsed"} | {  # noqa: E731
        "results": [(c["case"], c["check"], c["verdict"], c["timeline"]) for c in r["results"]]}
    assert [same(r) for r in ours["scenarios"]] == [same(r) for r in theirs["scenarios"]]
    assert (tmp_path / "merged" / "matrix.md").read_text().split("\n", 4)[4] == (
        whole / "matrix.md").read_text().split("\n", 4)[4]  # all but the title's time and date

    # the same shard twice, one missing; a shard of another matrix
    twice = cli("matrix", "--merge", "shard1", "shard1", "--out", "bad", cwd=tmp_path, env_extra=ENV, timeout=60)
    assert twice.returncode == 2 and "shard 1/2 given twice: shard1 and shard1" in twice.stderr, twice.stderr
    data = json.loads((tmp_path / "shard2" / "matrix.json").read_text())
    data["versions"]["torch"] = "0.0"
    (tmp_path / "other.json").write_text(json.dumps(data))
    other = cli("matrix", "--merge", "shard1", "other.json", "--out", "bad", cwd=tmp_path, env_extra=ENV, timeout=60)
    assert other.returncode == 2, other.stdout + other.stderr
    assert "other.json and shard1 are shards of different matrices: their versions differ (torch: '0.0'" in other.stderr
    assert not (tmp_path / "bad").exists()


def _harness_processes(pid: int) -> list[str]:
    """Live processes the harness `pid` left: in its session or process group,
    or a fork server, rank or torchrun agent it started (they name its pid)."""
    left = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        state, pgid, session = fields[0], int(fields[2]), int(fields[3])
        ours = any(b"ckpt_harness.launch" in a for a in argv) and str(pid).encode() in argv
        if state not in "ZX" and (pgid == pid or session == pid or ours):
            left.append(f"{entry} ({state}): {b' '.join(argv).decode(errors='replace')}")
    return left


@pytest.mark.parametrize("sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)],
                         ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_matrix_within_seconds_writing_what_finished_and_resume_completes_it(
        whole, tmp_path, pace, sig):
    tmp = tmp_path / "tmp"  # the harness's temporary work directory goes here
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | ENV | {"TMPDIR": str(tmp)}
    p = subprocess.Popen([sys.executable, "-m", "ckpt_harness.cli", *MATRIX, "--out", "out"], cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen = []
    for line in p.stderr:  # progress: one line per case, and one per finished scenario
        seen.append(line)
        if line.startswith("[  1/6] "):
            break
    else:
        pytest.fail("the matrix ended before a scenario finished:\n" + "".join(seen))
    sent = time.monotonic()
    p.send_signal(sig)
    _, stderr = p.communicate(timeout=120)
    took = time.monotonic() - sent
    budget = pace(3.0)
    assert p.returncode == 128 + sig, "".join(seen) + stderr
    assert took < budget, f"stopped {took:.1f} s after {sig.name} (budget {budget:.1f} s)"
    assert [e for e in os.listdir(tmp) if e.startswith("ckpt")] == []  # the work directory and server logs
    deadline = time.monotonic() + 5  # ranks killed just now may take a moment to be gone
    while (left := _harness_processes(p.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, left

    data = json.loads((tmp_path / "out" / "matrix.json").read_text())
    assert data["incomplete"] and not data["complete"] and data["stopped_by"] == sig.name
    assert f"interrupted by {sig.name}: wrote the {len(data['scenarios'])} of 6" in stderr
    assert "`ckpt-harness matrix --resume out` runs the other" in stderr
    assert "**Incomplete**: stopped by " + sig.name in (tmp_path / "out" / "matrix.md").read_text()
    finished = [list(m.groups()) for m in map(re.compile(r"\[\s*\d+/6\] (\S+)\s+(\S+)").match, seen) if m]
    assert 1 <= len(data["scenarios"]) < 6 and len(data["missing"]) == 6 - len(data["scenarios"])
    # the scenarios finished before the signal, as the uninterrupted run judged them; none abandoned
    expected = {(r["job"], r["scenario"]): r for r in json.loads((whole / "matrix.json").read_text())["scenarios"]}
    for r in data["scenarios"]:
        assert (r["verdict"], r["reason"]) == (expected[r["job"], r["scenario"]]["verdict"],
                                               expected[r["job"], r["scenario"]]["reason"])
    assert finished and all(f in [[r["job"], r["scenario"]] for r in data["scenarios"]] for f in finished)
    assert any(c["verdict"] is None and "the run was stopped first" in c["reason"] for c in data["cells"])

    resumed = cli("matrix", "--resume", "out", "--quiet", cwd=tmp_path, env_extra=ENV | {"TMPDIR": str(tmp)})
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert cells(tmp_path / "out") == cells(whole)
    done = json.loads((tmp_path / "out" / "matrix.json").read_text())
    assert not done["incomplete"] and done["complete"] and done["stopped_by"] is None
    assert [(r["job"], r["scenario"]) for r in done["scenarios"]] == list(expected)
    for r in data["scenarios"]:  # what had finished was kept, not run again
        assert r in done["scenarios"]


def test_resume_and_merge_refuse_what_they_cannot_finish(tmp_path):
    """Before anything runs: a matrix.json of an older version, options --resume takes from the file."""
    recorded = json.loads((ROOT / "docs" / "matrix.json").read_text())
    old = tmp_path.parent / f"{tmp_path.name}-old.json"  # outside tmp_path, which must stay empty
    old.write_text(json.dumps({k: v for k, v in recorded.items() if k not in ("plan", "catalogue")}))
    out = cli("matrix", "--resume", str(old), "--out", "out", cwd=tmp_path, env_extra=ENV, timeout=60)
    assert out.returncode == 2 and "written by an older ckpt-harness, without the plan and catalogue" in out.stderr
    both = cli("matrix", "--resume", "out", "--job", "dcp", cwd=tmp_path, env_extra=ENV, timeout=60)
    assert both.returncode == 2 and "--resume runs the rest of a matrix with its own jobs" in both.stderr
    assert "leave out --job" in both.stderr
    bad = cli("matrix", "--shard", "4/3", cwd=tmp_path, env_extra=ENV, timeout=60)
    assert bad.returncode == 2 and "--shard 4/3: K must be 1..N (1..3)" in bad.stderr
    assert os.listdir(tmp_path) == []


SCENARIO = ("scenario", "power-loss-during-save", "--job", "torch_save", "--quiet")


def test_a_scenario_split_in_two_and_merged_is_the_unsplit_scenario(tmp_path):
    """Each part makes its own golden run, plans the same cases and runs its
    contiguous half; the merge is the table, verdict and exit of one run."""
    whole = cli(*SCENARIO, "--json", "whole.json", cwd=tmp_path)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    parts = [cli(*SCENARIO, "--shard", f"{k}/2", "--json", f"part{k}.json", cwd=tmp_path) for k in (1, 2)]
    assert [p.returncode for p in parts] == [0, 0], [p.stdout + p.stderr for p in parts]
    assert " (shard 1/2: 9 of the 18 cases planned; `ckpt-harness scenario power-loss-during-save --merge" in (
        parts[0].stdout)
    merged = cli("scenario", "power-loss-during-save", "--merge", "part2.json", "part1.json", "--json", "merged.json",
                 cwd=tmp_path)
    assert merged.returncode == whole.returncode, merged.stdout + merged.stderr
    data = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in ("whole", "part1", "part2", "merged")}
    cases = {name: [(c["case"], c["check"], c["verdict"]) for c in d["cases"]] for name, d in data.items()}
    assert cases["merged"] == cases["whole"] and cases["part1"] + cases["part2"] == cases["whole"]
    assert abs(len(cases["part1"]) - len(cases["part2"])) <= 1 and len(cases["whole"]) > 10
    assert data["part1"]["shard"]["planned"] == [case for case, _, _ in cases["whole"]]
    assert "shard" not in data["merged"] and data["merged"]["verdict"] == data["whole"]["verdict"]
    assert data["merged"]["note"] == data["whole"]["note"] and data["merged"]["settings"] == data["whole"]["settings"]

    alone = cli("scenario", "power-loss-during-save", "--merge", "part1.json", cwd=tmp_path)
    assert alone.returncode == 2 and "shards 2/2 missing" in alone.stderr, alone.stderr
    whole_given = cli("scenario", "power-loss-during-save", "--merge", "part1.json", "whole.json", cwd=tmp_path)
    assert whole_given.returncode == 2 and "whole.json: not the JSON report of a scenario shard" in whole_given.stderr
    other = data["part2"] | {"settings": data["part2"]["settings"] | {"timeout": 1.0, "parallel": 7}}
    (tmp_path / "other.json").write_text(json.dumps(other))
    refused = cli("scenario", "power-loss-during-save", "--merge", "part1.json", "other.json", cwd=tmp_path)
    assert refused.returncode == 2 and "other.json ran with other settings than part1.json" in refused.stderr
    (tmp_path / "other.json").write_text(json.dumps(data["part2"] | {"settings": other["settings"] | {"timeout": (
        data["part2"]["settings"]["timeout"])}}))  # another machine's parallel only: merged
    merged_anyway = cli("scenario", "power-loss-during-save", "--merge", "part1.json", "other.json", cwd=tmp_path)
    assert merged_anyway.returncode == 0, merged_anyway.stderr


def test_a_scenario_of_a_handful_of_cases_is_not_split(tmp_path):
    out = cli("scenario", "resume-every-save", "--job", "torch_save", "--shard", "1/2", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "resume-every-save (resume check) runs a handful of cases, too few to split" in out.stderr
    assert "matrix --shard K/N" in out.stderr and out.stdout == ""
