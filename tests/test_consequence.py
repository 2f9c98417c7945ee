"""A data position difference is judged by what it causes (issue 64, item 6).

tests/scripts/loader_train.py keeps its loader's position in every save.
Its `inert` loader also counts its own loads, which nothing reads back: a
resumed run's saves differ in that key alone, and resumed once more from
one of them, training goes on bitwise, so the resume passes with a note.
Its `replay` loader saves the batches it handed out since the process
started: the first resume is right and its saves differ in `consumed`
alone, but resumed once more from one of them it replays data, so the
resume FAILs saying so. Both judged through the CLI and the plugin.
"""

import re
from pathlib import Path

from tests.clirun import cli

SCRIPT = Path(__file__).resolve().parent / "scripts" / "loader_train.py"


def command(loader: str) -> str:
    return f"{SCRIPT} {{ckpt_dir}} --loader {loader}"


def test_a_loader_that_replays_data_on_a_second_resume_fails_saying_so(tmp_path):
    # One worker: each rank's loader is its own, nothing in it is about a group (a second is a fresh interpreter).
    done = cli("run", "--script", command("replay"), "--nproc-per-node", "1", "--case", "resume@2", "--cold-start",
               "--keep", "none", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"resume@2 +saves after resume +FAIL", done.stdout), done.stdout
    said = next(line for line in done.stdout.splitlines() if line.startswith("--- resume@2 / saves after resume"))
    assert "loader.consumed: 2, expected 4" in said, said
    assert "it changes training: resumed once more, from save 4 as a run resumed from save 2 wrote it, save 6 " \
           "differs" in said and "model" in said, said


def test_through_the_plugin_inert_bookkeeping_passes_with_a_note(pytester):
    pytester.makepyfile(test_user=f"""
        import pytest

        @pytest.mark.ckpt(script="{command('inert')}", nproc_per_node=1)
        def test_my_script(ckpt):
            report = ckpt.verify_script(cases=["resume@2"])
            report.assert_ok()
            [later] = [r for r in report.results if r.check == "saves after resume"]
            assert "data position bookkeeping (loader.resumes), noted" in later.summary, later.summary
            assert [w for w in report.warnings if "loader.resumes" in w and "noted, not failed" in w], report.warnings
        """)
    result = pytester.runpytest_inprocess("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
