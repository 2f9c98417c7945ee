"""Relocation (issue 45, item 3): scenario `relocated-resume` stops after
each save, copies the checkpoint directory elsewhere with its modification
times against the order of its names, removes the original, and resumes
from the copy (`verify.relocate`).

A planted job that resumes the step directory modified last passes every
resume where its checkpoints were written, and resumes save 2 from the
copy of a directory whose newest is save 4; the built-in `torch_save`,
which follows its `latest` pointer, passes both."""

import os

from ckpt_harness.pipeline.verify import relocate
from tests.clirun import cli

PLANTED = "tests.planted.jobs:NewestByTime"


def test_a_copy_keeps_every_byte_and_no_time_and_the_original_is_gone(tmp_path):
    src = tmp_path / "ckpt"
    for step in (2, 4, 6):
        (src / f"step_{step}").mkdir(parents=True)
        (src / f"step_{step}" / "model.pt").write_bytes(bytes([step]) * 100)
    (src / "latest").write_text("step_6")
    moved = relocate(src, tmp_path / "elsewhere" / "ckpt")
    assert not src.exists()
    assert (moved / "latest").read_text() == "step_6"
    assert all((moved / f"step_{s}" / "model.pt").read_bytes() == bytes([s]) * 100 for s in (2, 4, 6))
    times = [os.stat(moved / f"step_{s}").st_mtime for s in (2, 4, 6)]
    assert times[0] > times[1] > times[2], times  # the greatest step the oldest


def test_a_resume_that_takes_the_newest_checkpoint_by_time_resumes_the_wrong_one_after_a_copy(tmp_path):
    def scenario(name: str, job: str):
        where = tmp_path / f"{name}-{job.rpartition(':')[2]}"
        return cli("scenario", name, "--job", job, "--workdir", str(where), cwd=tmp_path)

    moved = scenario("relocated-resume", PLANTED)
    assert moved.returncode == 1, moved.stdout + moved.stderr
    assert "faithful: FAIL" in moved.stdout and "moved@4" in moved.stdout, moved.stdout
    # it resumed save 2, the newest by time, and tried to make save 4 again over the one it skipped
    assert "checkpoint directory already exists and overwrite=False" in moved.stdout, moved.stdout
    assert scenario("resume-every-save", PLANTED).returncode == 0
    twin = scenario("relocated-resume", "torch_save")
    assert twin.returncode == 0 and "relocated-resume [torch_save] faithful: PASS" in twin.stdout, twin.stdout


def test_saves_spaced_a_second_apart_take_a_rotation_that_orders_by_time_down_that_path(tmp_path):
    def run(job: str, spacing: str, *cases: str):
        return cli("run", "--job", job, "--keep-last", "2", "--steps", "6", "--save-spacing", spacing,
                   *(arg for case in cases for arg in ("--case", case)),
                   "--workdir", str(tmp_path / f"{job.rpartition(':')[2]}-{spacing}"), cwd=tmp_path)

    planted = "tests.planted.jobs:RotatesByTime"
    assert run(planted, "0").returncode == 0  # fast saves: its step-ordered path, which is right
    # the golden run alone: it is what keeps the wrong checkpoints (its resumes, spaced too, would only add
    # a resume@6 refused for the step 6 it deleted)
    spaced = run(planted, "1.2", "golden")
    assert spaced.returncode == 1, spaced.stdout + spaced.stderr
    assert "after save 6: the checkpoints of steps 2, 4 remain; expected the checkpoints of steps 4, 6" \
        in spaced.stdout, spaced.stdout
    assert "--save-spacing 1.2" in spaced.stdout  # the repro line spaces them too
    twin = run("torch_save", "1.2")
    assert twin.returncode == 0, twin.stdout


def test_a_pointer_holding_an_absolute_path_finds_nothing_in_a_copy_elsewhere(tmp_path):
    job = "tests.planted.jobs:FollowsAnAbsolutePath"
    moved = cli("scenario", "relocated-resume", "--job", job, "--workdir", str(tmp_path / "moved"), cwd=tmp_path)
    assert moved.returncode == 1, moved.stdout + moved.stderr
    # it reads the original, which the copy replaced
    assert "moved@2: resumed run: failure: rank 0 raised FileNotFoundError in load" in moved.stdout \
        or "moved@2: resumed run: failure: rank 1 raised FileNotFoundError in load" in moved.stdout, moved.stdout
    assert "/moved@2/ckpt/step_000002/model.pt" in moved.stdout, moved.stdout
