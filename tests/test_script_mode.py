"""Script mode judged: unmodified scripts under real torchrun, their resumes verified bitwise by the oracle.

Each verification is a golden run, a run preempted right after save 2 and
the same command again on its directory (`--case resume@2`): three torchrun
runs of fresh interpreters, seconds each. So runs are shared: the correct
script's verifications serve several tests, a bug that shows in one run is
run once (a from-scratch resume on the golden directory, judged by
verify's own judges; a golden run that fails), and every broken script is
flagged under a named check while its correct twin passes.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from ckpt_harness.config import ScriptConfig
from ckpt_harness.records import Kind, read_records
from ckpt_harness.report import Report
from ckpt_harness.pipeline.verify import verify_script
from ckpt_harness.verdict import Verdict
from tests.clirun import cli

ROOT = Path(__file__).resolve().parent.parent
RESUMABLE = ROOT / "tests" / "scripts" / "resumable.py"


def script(*flags: str) -> str:
    return " ".join([str(RESUMABLE), "{ckpt_dir}", "--steps", "4", "--save-every", "2", *flags])


def verdicts(report) -> dict[tuple[str, str], Verdict]:
    return {(r.case, r.check): r.verdict for r in report.results}


@pytest.fixture(scope="module")
def correct_runs(tmp_path_factory) -> Callable[[int, int], tuple[Report, Path]]:
    """The correct script verified at 1 node x 2 (resume@2, and restart@2 with
    --max-restarts 1) and at 2 nodes x 1 (resume@2): its report and work
    directory per layout, shared by the tests that read them."""
    done = {}

    def at(nnodes: int, nproc_per_node: int) -> tuple[Report, Path]:
        if (nnodes, nproc_per_node) not in done:
            workdir = tmp_path_factory.mktemp(f"correct-{nnodes}x{nproc_per_node}")
            restarts = ({"max_restarts": 1, "cases": ["resume@2", "restart@2"]} if nnodes == 1
                        else {"cases": ["resume@2"]})
            done[nnodes, nproc_per_node] = verify_script(script(), workdir=workdir, nnodes=nnodes,
                                                         nproc_per_node=nproc_per_node, **restarts), workdir
        return done[nnodes, nproc_per_node]
    return at


@pytest.mark.parametrize("nnodes, nproc_per_node", [(1, 2), (2, 1)])
def test_a_correct_script_resumes_bitwise(correct_runs, nnodes, nproc_per_node):
    report, workdir = correct_runs(nnodes, nproc_per_node)
    assert report.verdict is Verdict.PASS, report.explain()
    found = {k: v for k, v in verdicts(report).items() if k[0] != "restart@2"}  # see the restart test
    assert found == {
        ("golden", "live"): Verdict.PASS, ("resume@2", "live"): Verdict.PASS,
        ("resume@2", "load step"): Verdict.PASS, ("resume@2", "saves after resume"): Verdict.PASS,
        ("resume@2", "final state"): Verdict.PASS,
    }
    # The preempted run stopped rank 0 right after save 2: the next save had not begun writing.
    assert [r["step"] for r in read_records(workdir / "resume@2" / "stop", 0) if r["event"] == Kind.STOPPED] == [2]
    golden = read_records(workdir / "golden" / "run", 0)
    saved = [(r["step"], r["source"], sorted(r["state"])[:2]) for r in golden if r["event"] == Kind.SAVED]
    assert saved[:2] == [(2, "path", ["observed.0.torch_rng", "state.pt.model.bias"]),
                         (4, "path", ["observed.0.torch_rng", "state.pt.model.bias"])]
    assert [r["event"] for r in golden][-2:] == [Kind.FINAL, Kind.FINISHED]


def test_a_script_that_resumes_from_scratch_is_flagged(correct_runs, tmp_path):
    """The bug run where verify runs a resume: on a directory holding saves 2
    and 4 (the correct script's golden one), judged by verify's own judges."""
    from ckpt_harness import oracle
    from ckpt_harness import targets
    from ckpt_harness.targets import RunRequest

    _, workdir = correct_runs(1, 2)
    ckpt = shutil.copytree(workdir / "golden" / "ckpt", tmp_path / "ckpt")
    assert sorted(p.name for p in ckpt.glob("step_*")) == ["step_2", "step_4"]
    resumed = targets.of(ScriptConfig(script=script("--bug", "from-scratch"), nproc_per_node=2)).run(
        RunRequest("resumed run", trace_files=False), ckpt, tmp_path / "resume")
    assert resumed.ok, [r.outcome for r in resumed.ranks]
    judged = oracle.judge_resume_point("resume@4", resumed, 4, None)
    assert judged.verdict is Verdict.FAIL, judged.summary
    assert "from scratch" in judged.summary and "saved step 2 again" in judged.summary
    # Starting over ends where the uninterrupted run ended: only the save it repeated tells.
    expected = {rank: next(rec["state"] for rec in read_records(workdir / "golden" / "run", rank)
                           if rec["event"] == Kind.FINAL) for rank in range(2)}
    final = oracle.judge_same_state("resume@4", "final state", expected, resumed.states(Kind.FINAL),
                                    "final state", None)
    assert final.verdict is Verdict.PASS, final.summary


# A script that forgets its optimizer state is flagged under "saves after resume", having resumed from 2:
# in `make test` by tests/test_script_matrix.py,
# test_a_broken_script_fails_under_its_property_and_the_correct_one_passes (--bug forget-optimizer, both ways);
# tests/test_warm_workers.py's [forget-optimizer-fail] (marked slow) verifies this very command warm, then cold.


@pytest.mark.parametrize("bug", [(), ("--bug", "from-scratch")], ids=["resumes", "from-scratch"])
def test_torchruns_own_restart_after_a_crash_is_judged_as_a_resume(correct_runs, tmp_path, bug):
    """--max-restarts: rank 0 dies right after save 2, torchrun's agent
    restarts the group on the same directory, and the restarted attempt is
    judged like any resume (one run more than the golden one)."""
    if not bug:
        report, tmp_path = correct_runs(1, 2)
    else:
        report = verify_script(script(*bug), workdir=tmp_path, cases=["restart@2"], nproc_per_node=2, max_restarts=1)
    found = verdicts(report)
    assert (tmp_path / "restart@2" / "run" / "crashed-after-save").exists()
    if not bug:
        assert {k: v for k, v in found.items() if k[0] == "restart@2"} == {
            ("restart@2", "live"): Verdict.PASS, ("restart@2", "load step"): Verdict.PASS,
            ("restart@2", "saves after resume"): Verdict.PASS, ("restart@2", "final state"): Verdict.PASS,
        }, report.explain()
        # the records are the restarted attempt's: it saved 4 only, after resuming from 2
        saved = [r["step"] for r in read_records(tmp_path / "restart@2" / "run", 0) if r["event"] == Kind.SAVED]
        assert saved[:1] == [4], saved
    else:
        assert found[("restart@2", "load step")] is Verdict.FAIL, report.explain()
        failed = next(r for r in report.results if r.check == "load step")
        assert "saved step 2 again" in failed.summary
        # judged by its cold run (`pipeline.confirm`), which its repro replays
        assert failed.repro.endswith("--nproc-per-node 2 --max-restarts 1 --cold-start --case restart@2"), failed.repro


def test_a_staging_rename_on_every_node_passes_on_one_node(tmp_path):
    """One node has one local rank 0: the per-node rename is the rank-0 rename
    there, and the run that fails at 2 nodes (its golden run, see the CLI
    test) passes. Resuming from a renamed staging directory is verified by
    test_script_explore.py, on the correct script."""
    report = verify_script(script("--staging", "--bug", "rename-per-node"), workdir=tmp_path, cases=["golden"],
                           nproc_per_node=2)
    assert report.verdict is Verdict.PASS, report.explain()
    bare = verify_script(script("--staging", "--no-marker", "--bug", "rename-per-node"), workdir=tmp_path / "bare",
                         cases=["golden"], nproc_per_node=2)
    assert bare.verdict is Verdict.PASS, bare.explain()
    # `ckpt_harness.saving(step)` made the whole block one save on every rank, rank 1 included.
    assert [r["step"] for r in read_records(tmp_path / "golden" / "run", 1) if r["event"] == Kind.SAVED] == [2, 4]


def test_the_opt_ins_do_nothing_outside_the_harness(tmp_path):
    """A script that imports ckpt_harness runs as before under plain python."""
    code = (
        "import ckpt_harness\n"
        "with ckpt_harness.saving(3):\n"
        "    x = 1\n"
        "fn = ckpt_harness.observe(lambda: {'x': x})\n"
        "print(fn()['x'], 'torch' in __import__('sys').modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "False"]


def test_a_script_run_is_recorded_and_traced_like_a_job_run(tmp_path):
    """dcp.save, imported by the script after the bootstrap, is a save on
    every rank: its phase in the trace (the file operations and collectives
    fault points are made of), what it was handed, in the records the
    oracle reads; no framework the script did not import is imported."""
    from ckpt_harness.inject.trace import EventKind
    from ckpt_harness import targets
    from ckpt_harness.targets import RunRequest

    config = ScriptConfig(script=f"{ROOT / 'tests' / 'scripts' / 'dcp_save.py'} {{ckpt_dir}}", nproc_per_node=2)
    run = targets.of(config).run(RunRequest("traced"), tmp_path / "ckpt", tmp_path / "run")
    assert run.ok, [r.outcome for r in run.ranks]
    for r in run.ranks:
        saved = [(rec["step"], rec["source"], sorted(rec["state"])) for rec in r.records if rec["event"] == Kind.SAVED]
        assert saved == [(2, "path", [f"state_dict.w{r.rank}"]), (4, "path", [f"state_dict.w{r.rank}"])]
        in_save = [e for e in r.events if e.phase == "save 2"]
        assert any(e.kind is EventKind.COLLECTIVE for e in in_save)
        assert any(e.kind is EventKind.OPEN and e.path.startswith("step_2/") for e in in_save)
        assert (tmp_path / "ckpt" / f"imported{r.rank}.json").read_text() == "[]"
    assert run.states(Kind.FINAL)[1]["last save.state_dict.w1"].shape == (4,)


def test_staging_renamed_on_every_node_fails_across_nodes_through_the_cli(tmp_path):
    """Every node's local rank 0 renames the staging directory: the second
    rename finds none (the LLaMA-Factory multi-node report). Through the CLI's
    `run --script`: its report, its JSON and the line that replays the case.
    The script never heard of the harness (no `ckpt_harness.saving`): its
    save is rank 0's `torch.save`, and the routine around it, the rename
    included, belongs to that save until the script trains again, so the
    failure is the checkpointing's (FAIL), not a broken job (ERROR)."""
    out = cli("run", "--script", script("--staging", "--no-marker", "--bug", "rename-per-node"), "--nnodes", "2",
              "--workdir", str(tmp_path / "work"), "--json", str(tmp_path / "report.json"), cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    # Which rank's rename comes second is a race: rank 0's (its save open) or rank 1's (no save open on it,
    # but inside the function rank 0's checkpoint I/O happens in).
    assert re.search(r"raised FileNotFoundError in (save 2|run, in the save routine save\(\))", out.stdout), \
        out.stdout
    repro = next(line for line in out.stdout.splitlines() if line.startswith("repro: "))
    assert repro.endswith("--nnodes 2 --cold-start --case golden") and "--script" in repro  # confirmed cold
    found = {(c["case"], c["check"]): c for c in json.loads((tmp_path / "report.json").read_text())["cases"]}
    assert {k: c["verdict"] for k, c in found.items()} == {("golden", "live"): "fail"}


def test_a_save_made_before_training_lasts_until_the_rename_after_its_entry_point(tmp_path):
    """OLMo-core saves step 0 before it trains: DCP writes into a staging
    directory, then the script renames it into place. A run stopped after
    save 0 stops where the script trains, the rename done (it stopped right
    after the entry point returned, before the rename: the resume found no
    checkpoint and started over, a false "resumed from scratch" FAIL)."""
    out = cli("run", "--script", script("--staging", "--no-marker", "--save-first", "--dcp-state"),
              "--nproc-per-node", "2", "--case", "resume@0", "--workdir", str(tmp_path / "work"), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"resume@0 +load step +PASS +its first save after the resume was step 2", out.stdout), out.stdout
    # DCP's `get_optimizer_state_dict` steps an optimizer with no state yet (a zero learning rate) to make it:
    # no training, so neither the end of save 0 nor an optimizer step counted
    for rank in range(2):  # rank 0's saves 0, 2, 4 and the final model, every rank's end
        records = read_records(tmp_path / "work" / "golden" / "run", rank)
        trained = [r["trained"] for r in records if r["event"] in (Kind.SAVED, Kind.FINISHED)]
        assert trained == ([0, 2, 4, 4, 4] if rank == 0 else [4]), (rank, trained)


def test_a_peer_left_waiting_in_a_save_routine_is_a_hang_of_the_checkpointing(tmp_path):
    """Rank 0 leaves its save routine without the barrier after the rename
    and trains on: its next `backward` all-reduces DDP's gradient bucket
    (issued from C++, in autograd's hook), while rank 1, which writes nothing
    there, waits in that barrier, the same number of the group: collectives
    that never match. A hang (live FAIL) of the checkpointing, since rank 1
    waits in the function the script's checkpoint I/O happens in (`save()`).
    Known as both wait, by the group's own sequence numbers (`launch.looks`),
    in the warm run and in its cold confirmation alike: at the default
    180 s deadline this run took 27 s on the loaded 2-core box, 2.2 s of it
    from the hang to the cut (it waited out the deadline twice before). The
    twin without the bug passes."""
    fixed = cli("run", "--script", script("--staging", "--no-marker"), "--nproc-per-node", "2", "--case", "golden",
                cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    out = cli("run", "--script", script("--staging", "--no-marker", "--bug", "skip-barrier"), "--nproc-per-node", "2",
              "--case", "golden", cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    line = next((x for x in out.stdout.splitlines() if x.startswith("--- golden / live: FAIL — golden: hang:")), "")
    assert re.search(r"rank 0 waiting in all_reduce #(\d+) \(DDP gradient bucket, from resumable\.py:\d+ in "
                     r"<module>\(\)\).*; rank 1 waiting in barrier #\1 called from resumable\.py:\d+ in save\(\)"
                     r".*in the save routine save\(\)", line), out.stdout
    assert "(ended at once: every running rank waited in collectives that can never complete" in line, out.stdout
    assert "confirmed with cold starts" in out.stdout and "the warm run said the same" in out.stdout, out.stdout


def test_a_rank_that_returns_past_the_final_barrier_leaves_its_peer_hung_as_on_nccl(tmp_path):
    """Rank 0 writes the final model and returns without the barrier after
    it, destroying its group. On NCCL rank 1 waits in that barrier for good
    ("training finishes, then hangs writing the final model"); on gloo the
    destroy would close its connections and rank 1 would raise instead. The
    finished worker is held, its group kept, until its peer ends, so the run
    is the hang it is on NCCL, ended at once (nothing can progress), not at
    the deadline."""
    deadline = 120.0
    report = verify_script(script("--staging", "--bug", "skip-final-barrier"), workdir=tmp_path,
                           cases=["golden"], nproc_per_node=2, timeout=deadline, cold_start=True)  # fails: cold
    (live,) = [r for r in report.results if r.check == "live"]
    assert live.verdict is Verdict.FAIL and live.summary.startswith("golden: hang:"), report.explain()
    assert "rank 1 waiting in barrier" in live.summary and "ended at once" in live.summary, live.summary
    finished = [r for r in read_records(tmp_path / "golden" / "run", 0) if r["event"] == Kind.FINISHED]
    assert finished, "rank 0 returned: held, not hung"
    assert report.elapsed < deadline / 2, report.elapsed


def test_a_script_that_fails_before_its_first_save_is_an_error_saying_so(tmp_path):
    """A training bug (here: a script given a step count it cannot parse) is
    not the checkpointing's: ERROR, with the words that it never reached a save."""
    out = cli("run", "--script", f"{RESUMABLE} {{ckpt_dir}} --steps four", "--nproc-per-node", "1", cwd=tmp_path)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "the script fails with no fault armed, before its first save" in out.stdout, out.stdout
    assert "fix the script" in out.stdout and "the job" not in out.stdout, out.stdout


def test_a_script_that_never_saves_is_an_error_not_a_pass(tmp_path):
    """It trains and writes nothing under {ckpt_dir}: nothing was checked, and
    the report says what to check instead of PASS (exit 3)."""
    never = ROOT / "tests" / "scripts" / "never_saves.py"
    out = cli("run", "--script", f"{never} {{ckpt_dir}} {tmp_path / 'elsewhere'}", "--nproc-per-node", "1",
              cwd=tmp_path)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "golden / saves: ERROR — the run made no save the harness could see, so nothing was checked" in out.stdout
    assert "{ckpt_dir}" in out.stdout and "ckpt_harness.saving" not in out.stdout  # never needed: any write is seen
    assert f"it wrote nothing there, but 1 file under {tmp_path / 'elsewhere'}" in out.stdout, out.stdout
    assert "job" not in out.stdout and "ctx." not in out.stdout, out.stdout  # words about the script


@pytest.mark.parametrize("args, says", [
    (("run",), "either --job"),
    (("run", "--job", "torch_save", "--script", "x.py"), "give --job or --script, not both"),
    (("run", "--script", "x.py {ckpt_dir}", "--steps", "4"), "--steps belong to job mode"),
    (("run", "--job", "torch_save", "--nnodes", "2"), "--nnodes belong to script mode"),
    (("run", "--script", "missing.py {ckpt_dir}"), "no script at 'missing.py'"),
    (("explore", "--script", "x.py {ckpt_dir}", "--world-size", "2"), "--world-size belong to job mode"),
    (("explore", "--job", "torch_save", "--nproc-per-node", "2"), "--nproc-per-node belong to script mode"),
    (("explore", "--script", "missing.py {ckpt_dir}"), "no script at 'missing.py'"),
    (("explore", "--script", "x.py {ckpt_dir}", "--max-restarts", "1"), "leave out --max-restarts"),
])
def test_the_cli_refuses_a_mixed_or_missing_mode_with_what_to_give(tmp_path, args, says):
    out = cli(*args, cwd=tmp_path)
    assert out.returncode == 2 and says in out.stderr, out.stderr


@pytest.mark.trainers
def test_a_tiny_hf_trainer_script_is_verified_through_its_save_checkpoint(tmp_path):
    """`Trainer._save_checkpoint` is the save, wrapped when the script imports
    transformers: its step is the Trainer's, its state what it wrote, the
    training fields of trainer_state.json included (its best checkpoint named
    relative to the checkpoint directory). A resume that forgets the best
    checkpoint (`--bug forget-best`) is flagged by them. The same Trainer
    started on a directory that holds checkpoints without being handed one
    saves their steps again: started from scratch."""
    pytest.importorskip("transformers")
    from ckpt_harness import oracle
    from ckpt_harness import targets
    from ckpt_harness.targets import RunRequest

    plain = f"{ROOT / 'tests' / 'scripts' / 'hf_train.py'} {{ckpt_dir}} 4 2"
    command = f"{plain} --load_best_model_at_end"
    report = verify_script(command, workdir=tmp_path / "verify", cases=["resume@2"], nproc_per_node=2)
    assert report.verdict is Verdict.PASS, report.explain()
    saved = [rec for rec in read_records(tmp_path / "verify" / "golden" / "run", 0) if rec["event"] == Kind.SAVED]
    assert [(rec["step"], rec["source"]) for rec in saved] == [(2, "framework"), (4, "framework")]
    assert {k.split(".")[0] for k in saved[0]["state"]} >= {"model", "optimizer", "scheduler", "rng_state_0",
                                                            "trainer_state"}
    best = saved[1]["state"]["trainer_state.json.best_model_checkpoint"]
    assert best.value == "{ckpt_dir}/checkpoint-2", best  # the metric's best comes first

    # The twins at one worker: what they break is rank 0's business, and a worker importing transformers
    # costs seconds of CPU (docs/speed.md).
    forgets = verify_script(f"{command} --bug forget-best", workdir=tmp_path / "forgets", cases=["resume@2"],
                            nproc_per_node=1)
    failed = {r.check: r for r in forgets.results if r.case == "resume@2"}
    assert failed["load step"].verdict is Verdict.PASS, forgets.explain()  # it resumed from 2...
    assert failed["saves after resume"].verdict is Verdict.FAIL, forgets.explain()  # ...the best forgotten
    assert "trainer_state.json.best_model_checkpoint: '{ckpt_dir}/checkpoint-4', expected " \
           "'{ckpt_dir}/checkpoint-2'" in failed["saves after resume"].details, failed["saves after resume"].details

    ckpt = shutil.copytree(tmp_path / "verify" / "golden" / "ckpt", tmp_path / "ckpt")  # checkpoints 2 and 4
    assert sorted(p.name for p in ckpt.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    config = ScriptConfig(script=f"{plain} from-scratch", nproc_per_node=1)
    resumed = targets.of(config).run(RunRequest("resumed run", trace_files=False), ckpt, tmp_path / "resume")
    assert resumed.ok, [r.outcome for r in resumed.ranks]
    judged = oracle.judge_resume_point("resume@4", resumed, 4, None)
    assert judged.verdict is Verdict.FAIL and "saved step 2 again" in judged.summary, judged.summary
