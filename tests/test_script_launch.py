"""The launch forms real projects use, under real torchrun: a module run as
``python -m`` runs it, given the arguments that tell it to resume on the
runs that start on a checkpoint (nanoGPT's ``--init_from=resume``; without
them it starts over, which verify flags as any fresh start:
tests/test_script_mode.py's from-scratch bug). Which runs get them is
tests/unit/test_targets.py's; a console script with a YAML config is
tests/test_extension.py's (it needs an installed package)."""

from ckpt_harness.pipeline.verify import verify_script

#: nanoGPT's shape: from scratch unless told to resume.
MODULE = "-m tests.scripts.resumable {ckpt_dir} --steps 4 --init_from=scratch --staging"
RESUME = "--init_from=resume"


def test_a_module_that_resumes_only_when_told_is_verified_given_its_resume_args(tmp_path):
    # one worker: how the module is started and resumed is what is tested, not its group
    report = verify_script(MODULE, resume_args=RESUME, workdir=tmp_path, cases=["resume@2"], nproc_per_node=1)
    assert report.ok, report.explain()
    loads = [r.summary for r in report.results if r.check == "load step"]
    assert loads and "saved step 2 again" not in loads[0], report.explain()
    assert report.job == MODULE
