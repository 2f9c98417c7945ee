"""`explore --script`: an unmodified script's save broken at its file operations under real torchrun.

Every case is a torchrun run of fresh interpreters (a faulted save, then
the resume), so the cases are a targeted subset: a crash at the kernel
write of the checkpoint file on the rank that writes it. A script that
writes its checkpoint in place is flagged; the same script committing by
a rename of its staging directory passes. Likewise a trainer in
torchtitan's shape (FSDP2, `dcp.save`), at the rename that completes a
DCP checkpoint.
"""

import json
import shlex
from pathlib import Path

import pytest

from ckpt_harness.records import Kind, read_records
from ckpt_harness.pipeline.explore import explore_script
from ckpt_harness.verdict import Verdict
from tests.clirun import cli

ROOT = Path(__file__).resolve().parent.parent
RESUMABLE = ROOT / "tests" / "scripts" / "resumable.py"
#: The targeted subset: a crash at each kernel write of save 4; no
#: corruption or power-loss case (those would not tell the two scripts apart).
TARGETED = dict(nproc_per_node=2, faults=("crash",), ops=("write",), corruptions=(), after=False)


def script(*flags: str) -> str:
    return " ".join([str(RESUMABLE), "{ckpt_dir}", "--steps", "6", "--save-every", "2", *flags])


def test_a_checkpoint_written_in_place_is_not_atomic(tmp_path):
    # every case fails: cold at once, not warm and then again cold to confirm it (`pipeline.confirm`)
    report = explore_script(script(), workdir=tmp_path, cold_start=True, **TARGETED)
    assert report.note.startswith("save 4 broken (the script saved at steps 2, 4, 6)"), report.note
    cases = [r for r in report.results if r.case != "golden"]
    assert cases and all(r.verdict is Verdict.FAIL and r.check == "atomic" for r in cases), report.explain()
    for r in cases:  # the torn state.pt was taken, and every rank failed on it
        assert "crash at rank 0" in r.summary and "step_4/state.pt" in r.summary and "refused" in r.summary, r.summary
        words = shlex.split(r.repro)
        assert words[:4] == ["ckpt-harness", "explore", "--script", script()] and words[-2:] == ["--case", r.case]
        assert all(option in r.repro
                   for option in ("--nproc-per-node 2", "--faults crash", "--ops write", "--no-after"))
    # No committed run (no corruption case) and no state derived for a crash a peer notices: the faulted
    # save and the resume ran, under torchrun.
    assert not (tmp_path / "committed").exists()
    faulted = next((tmp_path / "cases").glob("*/fault"))
    assert any(rec["event"] == Kind.SAVED and rec["step"] == 2 for rec in read_records(faulted, 0))


def test_a_checkpoint_committed_by_a_rename_resumes_the_previous_one(tmp_path):
    report = explore_script(script("--staging"), workdir=tmp_path, **TARGETED)
    cases = [r for r in report.results if r.case != "golden"]
    assert cases and report.verdict is Verdict.PASS, report.explain()
    for r in cases:  # the staging directory was never renamed: the resume took checkpoint-2 and saved 4 again
        assert "tmp-checkpoint-4/state.pt" in r.summary and "S_prev (step 2)" in r.summary, r.summary


def test_the_rename_of_a_script_that_never_heard_of_the_harness_is_a_point_of_its_save(tmp_path):
    """No `ckpt_harness.saving` around the staging routine: its save is rank 0's
    `torch.save`, and it lasts until the script trains again, so the rename
    into place after it is an operation of save 4 (before, it was outside
    every save, and `--ops rename` found no case), and a crash there
    resumes the previous checkpoint, not an S_k the save never published."""
    report = explore_script(script("--staging", "--no-marker"), workdir=tmp_path,
                            **{**TARGETED, "ops": ("rename",)})
    cases = [r for r in report.results if r.case != "golden"]
    assert [r.case for r in cases] == ["crash@r0:save4/rename(tmp-checkpoint-4->checkpoint-4)"], report.explain()
    assert report.verdict is Verdict.PASS and "S_prev (step 2)" in cases[0].summary, report.explain()


TITAN = ROOT / "tests" / "scripts" / "titan_train.py"


@pytest.mark.parametrize("flags, nproc, corruptions, verdict, outcome", [
    ((), 2, (), Verdict.PASS, "S_prev"),
    # make test keeps it: test_a_checkpoint_written_in_place_is_not_atomic (FAIL), [newest-complete] (this script)
    pytest.param(("--bug", "newest-dir"), 2, (), Verdict.FAIL, "refused", marks=pytest.mark.slow),
    (("--async", "--slow-disk", "0.5"), 1, ("truncate",), Verdict.PASS, "S_prev"),
], ids=["newest-complete", "newest-dir", "async"])
def test_a_torchtitan_shaped_trainer_resumes_only_a_step_dcp_completed(tmp_path, flags, nproc, corruptions, verdict,
                                                                        outcome):
    """FSDP2 over gloo, `dcp.save` of the model's and optimizer's state into
    step-N, resumed from the newest step-N holding DCP's `.metadata`
    (torchtitan's `_find_load_step`). A crash before rank 0 renames
    `.metadata` into place leaves step-4 without it: the trainer resumes
    step 2, bitwise to the end; its twin takes the newest directory, which
    DCP refuses on every rank: not atomic.

    With `--async` the rename is made by `dcp.async_save`'s writer thread,
    after the save returned: a point of the save's background phase (it
    was recorded in the main thread's phase, training, where no case of
    save 4 reached it), and the save before is what a crash there leaves
    (a save returned in the background is done once it landed; expecting
    S_k there was a false FAIL). The files the writer made are the save's,
    which the corruptions damage (they had none to act on). One worker: the
    writer is rank 0's."""
    command = " ".join([str(TITAN), "{ckpt_dir}", "--steps", "6", *flags])
    report = explore_script(command, workdir=tmp_path, nproc_per_node=nproc, faults=("crash",), ops=("rename",),
                            corruptions=corruptions, after=False)
    (case,) = [r for r in report.results if r.case.startswith("crash@")]
    damaged = sorted(r.case for r in report.results if r.case.startswith(corruptions))
    files = (".metadata", "__0_0.distcp")
    assert damaged == sorted(f"{kind}:step-4/{name}" for kind in corruptions for name in files), report.explain()
    assert all(r.verdict is Verdict.PASS for r in report.results if r.case in damaged), report.explain()
    where = "bg_save4" if "--async" in flags else "save4"
    assert case.case == f"crash@r0:{where}/rename(step-4/.metadata.tmp->step-4/.metadata)", report.explain()
    assert (case.check, case.verdict, case.cells[-1]) == ("atomic", verdict, outcome), report.explain()
    if verdict is Verdict.FAIL:
        assert "CheckpointException" in case.summary, case.summary


#: A hang of rank 0 at the rename that commits save 4, while rank 1 waits in the barrier after it.
HANG = "hang@r0:save4/rename(tmp-checkpoint-4->checkpoint-4)"


@pytest.mark.parametrize("flags, code", [((), 1), (("--pg-timeout", "5"), 0)], ids=["waits-for-good", "times-out"])
def test_a_hang_that_leaves_a_peer_waiting_for_good_is_a_live_failure_whatever_it_was_armed_for(tmp_path, flags,
                                                                                                 code):
    """A hang is a crash-like fault, armed for `atomic`, which the resume
    passes (S_prev: the staging directory was never renamed). Rank 1 waits
    in the barrier after the rename for good: before, the case said only
    `atomic PASS`. Now a live FAIL leads, the atomic PASS riding along. Its
    twin bounds every collective (5 s): rank 1 raises, torchrun ends the
    group, and the case passes. The failing one runs cold at once (a
    failure is confirmed cold: not warm, then cold again)."""
    command = " ".join([str(RESUMABLE), "{ckpt_dir}", "--steps", "4", "--staging", *flags])
    out = cli("explore", "--script", command, "--nproc-per-node", "2", "--faults", "hang", "--ops", "rename",
              "--corruptions", "", "--hang-timeout", "15", *(("--cold-start",) if code else ()), "--json", "r.json",
              cwd=tmp_path)
    assert out.returncode == code, out.stdout + out.stderr
    (case,) = [c for c in json.loads((tmp_path / "r.json").read_text())["cases"] if c["case"] != "golden"]
    judged = [(case["check"], case["verdict"]), *((j["check"], j["verdict"]) for j in case.get("also", ()))]
    if code:
        assert judged == [("live", "fail"), ("atomic", "pass")], out.stdout
        assert "rank 1 waited for good (rank 0 blocked by the injected hang)" in case["summary"], case["summary"]
        assert "rank 1 waiting in barrier" in case["summary"] and "S_prev (step 2)" in case["summary"]
        assert "usual fix: give the waits of a save a timeout" in out.stdout, out.stdout
    else:
        assert judged == [("atomic", "pass")] and "S_prev (step 2)" in case["summary"], out.stdout
    assert case["case"] == HANG, out.stdout
