"""The launch forms real projects use, under real torchrun: a module run as
``python -m`` runs it, and a script that resumes only when told, given the
arguments that tell it on the runs that start on a checkpoint (nanoGPT's
``--init_from=resume``). A console script with a YAML config is
tests/test_extension.py's (it needs an installed package)."""

from pathlib import Path

from ckpt_harness.pipeline.explore import explore_script
from ckpt_harness.pipeline.verify import verify_script
from ckpt_harness.verdict import Verdict

ROOT = Path(__file__).resolve().parent.parent
RESUMABLE = ROOT / "tests" / "scripts" / "resumable.py"
#: nanoGPT's shape: from scratch unless told to resume.
SCRATCH = "{ckpt_dir} --steps 4 --init_from=scratch"
RESUME = "--init_from=resume"


def test_a_module_that_resumes_only_when_told_is_verified_and_explored_given_its_resume_args(tmp_path):
    module = f"-m tests.scripts.resumable {SCRATCH} --staging"
    verified = verify_script(module, resume_args=RESUME, workdir=tmp_path / "verify", cases=["resume@2"],
                             nproc_per_node=2)
    assert verified.ok, verified.explain()
    explored = explore_script(module, resume_args=RESUME, workdir=tmp_path / "explore", nproc_per_node=2,
                              faults=("crash",), ops=("write",), corruptions=(), after=False)
    cases = [r for r in explored.results if r.case != "golden"]
    assert cases and explored.verdict is Verdict.PASS, explored.explain()
    (torn,) = [r for r in cases if "tmp-checkpoint-4/state.pt" in r.summary]
    assert "S_prev (step 2)" in torn.summary, explored.explain()  # the resume told to resume took checkpoint-2


def test_without_its_resume_args_the_same_script_starts_over_and_is_flagged(tmp_path):
    report = verify_script(f"{RESUMABLE} {SCRATCH}", workdir=tmp_path, cases=["resume@2"], nproc_per_node=2)
    (failure,) = report.failures()
    assert failure.check == "load step" and "resumed from scratch" in failure.summary, report.explain()
    assert "--init_from=resume" not in failure.repro
