"""Resume chains (issue 45, item 1), through the CLI: scenario
`resume-chain` stops after the first save, resumes, stops the resumed run
after its next save, resumes from what that run wrote, and on to the end.

A planted job whose resumed run writes checkpoints without the scheduler
(the uninterrupted run writes it) passes every single resume, and is
flagged at the chain's second link, naming the keys; the built-in
`torch_save` passes both. A script's links are judged by their saves."""

from pathlib import Path

from tests.clirun import cli

PLANTED = "tests.planted.jobs:ResumedRunDropsScheduler"
RESUMABLE = Path(__file__).resolve().parent / "scripts" / "resumable.py"


def scenario(name: str, *target: str, where: Path):
    return cli("scenario", name, *target, "--workdir", str(where), cwd=where.parent)


def test_a_checkpoint_only_a_resumed_run_writes_wrong_is_flagged_by_the_chain_alone(tmp_path):
    chained = scenario("resume-chain", "--job", PLANTED, where=tmp_path / "chain")
    assert chained.returncode == 1, chained.stdout + chained.stderr
    assert "chain@2 / state after load: FAIL — link 2 of the chain, resumed from save 4 (written by a resumed " \
           "run): state after load vs. state saved at step 4 differs" in chained.stdout, chained.stdout
    assert "scheduler/_step_count: 1, expected 5" in chained.stdout, chained.stdout
    single = scenario("resume-every-save", "--job", PLANTED, where=tmp_path / "single")
    assert single.returncode == 0 and "faithful: PASS" in single.stdout, single.stdout + single.stderr
    twin = scenario("resume-chain", "--job", "torch_save", where=tmp_path / "twin")
    assert twin.returncode == 0 and "resume-chain [torch_save] faithful: PASS" in twin.stdout, twin.stdout


def test_a_scripts_chain_is_judged_link_by_link_on_its_saves(tmp_path):
    out = cli("run", "--script", f"{RESUMABLE} {{ckpt_dir}} --steps 4", "--nproc-per-node", "2", "--case", "chain@2",
              "--workdir", str(tmp_path / "work"), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "link 1 of the chain, resumed from save 2 (written by the uninterrupted run): save 4 bitwise equal" \
        in out.stdout, out.stdout
    assert "link 2 of the chain, resumed from save 4 (written by a resumed run): it saved no step up to 4 again" \
        in out.stdout, out.stdout
