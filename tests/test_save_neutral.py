"""Saves that change training (issue 45, item 2), through the CLI: scenario
`saves-change-nothing` runs the target again saving only at its last step,
and the two ends must be bitwise equal (property save-neutral).

A planted save that casts the live weights to bf16 and back in place
resumes bitwise from every save (the golden run was cast alike) and is
flagged here, naming the keys; the built-in `torch_save` passes; a job
whose identical runs end apart is UNKNOWN, not FAIL. A script
that saves where it always does, whatever it is told, is n/a: the second
run would be the first one again."""

from pathlib import Path

from tests.clirun import cli

RESUMABLE = Path(__file__).resolve().parent / "scripts" / "resumable.py"


def neutral(*target: str, where: Path):
    return cli("scenario", "saves-change-nothing", *target, "--workdir", str(where), cwd=where.parent)


def test_a_save_that_casts_the_weights_in_place_changes_the_run_and_is_flagged(tmp_path):
    cast = neutral("--job", "tests.planted.jobs:CastsInPlace", where=tmp_path / "cast")
    assert cast.returncode == 1, cast.stdout + cast.stderr
    assert "save-neutral: FAIL — the end of the run saving at 2, 4, 6 vs. the same run saving at step 6 only " \
           "differs (model or optimizer values): ranks 0-1 model/0.bias, model/0.weight (+16 more): values differ" \
           in cast.stdout, cast.stdout
    twin = neutral("--job", "torch_save", where=tmp_path / "twin")
    assert twin.returncode == 0, twin.stdout + twin.stderr
    assert "saves-change-nothing [torch_save] save-neutral: PASS" in twin.stdout, twin.stdout
    # a job whose identical runs end apart anyway is not blamed on its saves: the golden run once more tells
    noisy = neutral("--job", "tests.planted.jobs:Unseeded", where=tmp_path / "noisy")
    assert "save-neutral: UNKNOWN" in noisy.stdout and "the job is not deterministic, so a difference tells " \
        "nothing about its saves" in noisy.stdout, noisy.stdout + noisy.stderr


def test_a_script_that_is_not_told_its_save_interval_is_not_compared_with_itself(tmp_path):
    out = neutral("--script", f"{RESUMABLE} {{ckpt_dir}}", "--nproc-per-node", "2", where=tmp_path / "untold")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "save-neutral: N/A — told to save at step 6 only, it saved at 2, 4, 6: give it its save interval " \
           "(for a script: --script-args 'save_every=--save-every {}')" in out.stdout, out.stdout
