"""Preemption with notice (issue 43, item 4): the `preempt` fault SIGTERMs
every rank at a point of the save and SIGKILLs what is left after the grace,
as Slurm and Kubernetes do (`inject.notice`).

`tests/scripts/sigterm_save.py` writes an emergency checkpoint in its
SIGTERM handler, slower than the grace the tests give (4 s against 1 s).
Under real torchrun at 2 ranks, through the CLI:

- written in place, the handler's cut file is taken for the checkpoint of
  its step and the resume fails on it: flagged atomic, with the notice's fix;
- written to a temporary name and renamed once whole, the cut write is
  ignored and the checkpoint before it resumes: every case passes, and the
  cut temporary file shows the grace ended the handler mid-write.

And a Job with no handler dies at the notice on every rank at once: the
built-in torch_save job passes the catalogue's `preemption-notice`, while a
checkpointer that moves `latest` before its shards are written is flagged.
"""

import json
from pathlib import Path

import pytest

from tests.clirun import cli

SIGTERM_SAVE = Path(__file__).resolve().parent / "scripts" / "sigterm_save.py"
#: Where a notice leaves save 4 in another state: before and after its rename, at its closing barrier.
POINTS = ("preempt@r0:save4/rename(step_4.pt.tmp->step_4.pt)~1", "preempt@r0:save4/barrier~1",
          "preempt@r1:save4/barrier~1")


def explore(tmp_path: Path, *flags: str, points: tuple[str, ...] = POINTS, cold: bool = False):
    """`points`: the cases run (`--case`) where not all of them are judged;
    `cold`: workers started cold, for a script whose cases are expected to
    fail, which warm would each be run twice (warm, then cold to confirm)."""
    script = " ".join([str(SIGTERM_SAVE), "{ckpt_dir}", "--emergency-seconds", "4", *flags])
    only = [arg for point in points for arg in ("--case", point)] if points != POINTS else []
    out = cli("explore", "--script", script, "--nproc-per-node", "2", "--save", "4", "--faults", "preempt",
              "--grace", "1", "--ops", "rename,collective", "--corruptions", "", "--no-after", *only,
              *(("--cold-start",) if cold else ()), "--json", "report.json", "--workdir", "work", cwd=tmp_path)
    cases = [c for c in json.loads((tmp_path / "report.json").read_text())["cases"] if c["case"] != "golden"]
    assert {c["case"] for c in cases} == set(points), cases
    return out, {c["case"]: c for c in cases}


def test_an_emergency_checkpoint_written_in_place_is_flagged_when_the_grace_runs_out(tmp_path):
    # rank 0's two points alone: every run of a failing twin is cold, a fresh interpreter per worker
    out, cases = explore(tmp_path, "--bug", "in-place", points=POINTS[:2], cold=True)
    assert out.returncode == 1, out.stdout + out.stderr
    # rank 0's handler, wherever the notice found save 4, left a cut step_4.pt that the resume took for save 4
    for case in cases.values():
        outcome = "refused without naming a file or rank"
        assert (case["check"], case["verdict"], case["row"]["outcome"]) == ("atomic", "fail", outcome), case
        assert "PytorchStreamReader failed" in case["summary"] and "expected S_k or S_prev" in case["summary"]
    assert "usual fix: write a SIGTERM handler's emergency checkpoint as any save: to a temporary name" in out.stdout
    assert "--grace 1" in out.stdout  # the repro gives the same notice


def test_an_emergency_checkpoint_renamed_into_place_once_whole_passes(tmp_path):
    out, cases = explore(tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert all(c["verdict"] == "pass" and c["check"] == "atomic" for c in cases.values()), cases
    # before the rename the notice leaves save 2 the newest whole checkpoint; at the barrier, save 4
    assert cases[POINTS[0]]["row"]["outcome"] == "S_prev" and cases[POINTS[1]]["row"]["outcome"] == "S_k", cases
    # the grace, not the handler, ended rank 0: its emergency file was cut short of the checkpoint's size
    for case_dir in (tmp_path / "work" / "cases").iterdir():
        ckpt = case_dir / "ckpt"
        cut = ckpt / "step_4.pt.sigterm"
        assert cut.exists() and 0 < cut.stat().st_size < (ckpt / "step_2.pt").stat().st_size, case_dir


@pytest.mark.parametrize("job, verdict", [("torch_save", "pass"), ("tests.planted.checkpointers:LatestBeforeShards",
                                                                     "fail")])
def test_a_job_without_a_handler_dies_at_the_notice_on_every_rank(tmp_path, job, verdict):
    out = cli("scenario", "preemption-notice", "--job", job, "--json", "report.json", "--workdir", str(tmp_path / "w"),
              cwd=tmp_path)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verdict"] == verdict, out.stdout + out.stderr
    assert out.returncode == (verdict == "fail"), out.stdout + out.stderr
    failed = [c for c in report["cases"] if c["verdict"] == "fail"]
    assert all(c["check"] == "atomic" and c["case"].startswith("preempt@") for c in failed), failed
