"""Warm starts, confirmed cold (issue 48, item 2 and 3): DCP's checkpoint
process served from a template of its rank (`launch.warm`), and every case
that does not pass warm judged by a cold run of it (`pipeline.confirm`).

Under the harness's fork server at 2 ranks, `dcp.async_save` with the
PROCESS executor:

- warm and cold, the checkpoint process is its rank's child, in its rank's
  process group, with the environment the rank had at the spawn (set long
  after it started) and its working directory; only warm leaves the marker
  a run reads (`Run.warm_started`);
- a case of a broken job (it publishes a save whose checkpoint process
  died) fails warm, is run again cold, fails there too, and says it was
  confirmed; a case that passes warm is not run again;
- `--cold-start` (one setting: CLI, Python API) starts every one fresh.
"""

import json

import pytest

from ckpt_harness import targets
from ckpt_harness.inject.faults import Fault
from ckpt_harness.pipeline.cases import Case, run_case
from ckpt_harness.pipeline.explore import baseline
from ckpt_harness.targets import RunRequest
from ckpt_harness.verdict import Verdict
from tests.clirun import cli

WITNESS = "tests.planted.async_jobs:WitnessesItsCheckpointProcess"


@pytest.mark.parametrize("cold", [False, True], ids=["warm", "cold"])
def test_a_checkpoint_process_is_its_ranks_child_with_the_environment_of_the_spawn(tmp_path, cold):
    run = targets.job(WITNESS, world_size=2, steps=4, cold_start=cold).run(
        RunRequest("golden", trace_files=False), tmp_path / "ckpt", tmp_path / "run")
    assert run.ok, [r.outcome for r in run.ranks]
    assert run.warm_started is not cold
    for rank in run.outcome.ranks:
        seen = [json.loads(p.read_text()) for p in (tmp_path / "witness" / f"rank{rank.rank}").glob("*.json")]
        assert len({facts["pid"] for facts in seen}) == 1, seen  # one process served both saves
        facts = seen[0]
        assert (facts["ppid"], facts["pgid"]) == (rank.pid, rank.pid), (facts, rank.pid)
        assert facts["at_save"] in ("2", "4"), facts  # set by the rank right before its save, not at its start
        assert facts["pid"] != rank.pid


def test_a_case_that_fails_warm_is_confirmed_cold_and_one_that_passes_is_not_run_again(tmp_path):
    """SwallowsChildFailure publishes save 4 although its checkpoint process
    was killed writing it: a crash there leaves `latest` naming an incomplete
    checkpoint. Warm and cold alike."""
    base = baseline("tests.planted.async_jobs:SwallowsChildFailure", world_size=2, steps=4, save="last",
                    faults=("crash",), corruptions=(), after=False, workdir=tmp_path / "broken")
    assert base.golden.warm_started
    point = next(p for p in base.points if p.phase == "bg_save 4" and p.op == "write")
    failed = run_case(base, Case.of((Fault("crash", point.rank, point.phase, point.index),), [point]))
    assert failed.verdict is Verdict.FAIL and failed.confirmed_cold and not failed.warm, failed.explain()
    assert "confirmed with cold starts" in failed.details and "the warm run said the same" in failed.details
    assert len(list((tmp_path / "broken").glob("**/cases/*"))) == 2  # the case, then its cold run

    good = baseline("dcp_async_process", world_size=2, steps=4, save="last", faults=("crash",), corruptions=(),
                    after=False, workdir=tmp_path / "good")
    passed = run_case(good, Case.of((Fault("crash", point.rank, point.phase, point.index),), [point]))
    assert passed.verdict is Verdict.PASS and passed.warm and not passed.confirmed_cold, passed.explain()
    assert len(list((tmp_path / "good").glob("**/cases/*"))) == 1


def test_cold_start_is_a_setting_of_the_cli(tmp_path):
    """Without it the same run leaves a marker per rank (the test above)."""
    out = cli("run", "--job", WITNESS, "--steps", "2", "--cold-start", "--case", "resume@2", "--workdir",
              str(tmp_path / "work"), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert list((tmp_path / "work").glob("**/witness/rank*/*.json")), "no checkpoint process ran"
    assert not list((tmp_path / "work").glob("**/rank*.warm-started")), "a cold start left a warm marker"
