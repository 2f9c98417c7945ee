"""The catalogue's rotation, overwrite and stall scenarios against unmodified scripts under real torchrun.

A scenario that sets keep-last, overwrite or the run's shape reaches a script
through the script's own arguments, as `--script-args` spells them; a rank
an injected fault blocks says when, so its peers' grace counts from then.
One matrix over tests/scripts/resumable.py (staged saves renamed into place,
every rank's RNG state in a file of its own): a correct row, and a broken
one carrying a bug for each scenario, which must flag it:

* retention-order (keep-last 3 over 13 saves): the correct script deletes
  by step number; `rotate-by-name` deletes by name (checkpoint-10 before
  checkpoint-9) and keeps the wrong three;
* overwrite-larger-world (the step directory holds a save of a run at four
  ranks), with the overwrite flag on: the correct script replaces it whole;
  `overwrite-in-place` moves its files in and leaves the earlier run's
  rng_2.pt and rng_3.pt;
* final-save-blocked (a rank blocked for good before the final save's
  first collective): with --pg-timeout its peers raise within 5 s of the
  block; the broken row sets no timeout, so its peer waits: a hang,
  reported as such, cut by the blocked grace (not at the 120 s deadline).
"""

import dataclasses

import pytest

from ckpt_harness import targets
from ckpt_harness.catalogue.matrix import Matrix, run_matrix
from ckpt_harness.catalogue.scenario import select
from ckpt_harness.catalogue.scenario_files import builtin_catalogue
from ckpt_harness.config import ScriptConfig
from ckpt_harness.targets.script import row_name
from ckpt_harness.verdict import Verdict

from tests.test_script_matrix import RESUMABLE

TOLD = ("keep_last=--keep-last {}", "overwrite=--overwrite", "seed=--seed {}", "steps=--steps {}",
        "save_every=--save-every {}")
BASE = f"{RESUMABLE} {{ckpt_dir}} --staging --rng-files"
CORRECT = f"{BASE} --pg-timeout 2"
BROKEN = f"{BASE} --bug rotate-by-name --bug overwrite-in-place"
SCENARIOS = {"retention-order": "rotation-safe", "overwrite-larger-world": "overwrite-safe",
             "final-save-blocked": "live"}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> Matrix:
    # Both rows save with the overwrite flag on (the bug acts then; off, both refuse alike).
    scenarios = [dataclasses.replace(s, params={**s.params, "overwrite": (True,)}) if s.check == "overwrite" else s
                 for s in select(builtin_catalogue(), list(SCENARIOS))]
    # the broken row cold at once: warm, each case it fails would be run again cold to confirm it
    scripts = [ScriptConfig(script=s, script_args=TOLD, nproc_per_node=2, timeout=120.0, cold_start=s == BROKEN)
               for s in (CORRECT, BROKEN)]
    return run_matrix([targets.of(c) for c in scripts], scenarios, workdir=tmp_path_factory.mktemp("script-settings"))


def found(m: Matrix, script: str, scenario: str):
    return next(r for r in m.results if r.job == row_name(script) and r.scenario == scenario)


def explain(m: Matrix) -> str:
    return "\n".join(f"{r.job} · {r.scenario}: {r.verdict.value} {r.reason}" for r in m.results)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_correct_script_passes_and_its_twin_fails_under_the_scenarios_property(matrix, scenario):
    good = found(matrix, CORRECT, scenario)
    bad = found(matrix, BROKEN, scenario)
    assert good.verdict is Verdict.PASS, explain(matrix)
    assert bad.verdict is Verdict.FAIL, explain(matrix)
    assert bad.property == good.property == SCENARIOS[scenario]


def test_each_verdict_says_what_the_script_did(matrix):
    assert "kept the wrong checkpoints" in found(matrix, BROKEN, "retention-order").reason
    stale = found(matrix, BROKEN, "overwrite-larger-world").reason
    assert "stale files of the earlier run" in stale and "rng_2.pt" in stale, stale
    hang = found(matrix, BROKEN, "final-save-blocked").reason
    assert "hang" in hang and "blocked by the injected hang" in hang, hang
    (replaced,) = found(matrix, CORRECT, "overwrite-larger-world").results
    assert "replaced with no stale file; resumed bitwise" in replaced.summary, replaced


def test_a_blocked_ranks_peers_are_cut_from_the_block_not_the_scripts_deadline(matrix):
    """A stalled run of a script is cut by the blocked grace (the scenario's
    hang_timeout from the moment the worker blocked), not at the 120 s
    deadline the scripts were given: the cut each failing case's timeline
    records says which."""
    from ckpt_harness.timeline import CUT

    hang = found(matrix, BROKEN, "final-save-blocked")
    cuts = [mark.name for c in hang.results for _, mark in c.timeline.marks(CUT)]
    assert cuts and set(cuts) == {"cut: blocked grace"}, (cuts, hang)


HF_TRAIN = RESUMABLE.parent / "hf_train.py"
#: The Trainer's own options, as a user's script passes them through.
HF_TOLD = ("keep_last=--save_total_limit {}", "steps=--max_steps {}", "save_every=--save_steps {}")


@pytest.mark.trainers
def test_the_trainers_save_total_limit_keeps_the_newest_and_a_rotation_by_name_is_flagged(tmp_path):
    """transformers' own rotation (`save_total_limit`, told as the Trainer
    spells it) over 13 saves keeps the newest 3; its twin orders checkpoints
    as a string sort does (checkpoint-10 before checkpoint-9). With
    `load_best_model_at_end` the Trainer also keeps its best checkpoint (here
    the first: a metric whose best comes early), which `keeps_best` says:
    the newest 2 and checkpoint 1 pass. (Not told, the same listings fail
    naming the setting: tests/unit/test_oracle.py.) One worker each: the
    Trainer rotates on its main process alone, and a worker importing
    transformers costs seconds of CPU (docs/speed.md)."""
    pytest.importorskip("transformers")
    scripts = [ScriptConfig(script=f"{HF_TRAIN} {{ckpt_dir}}{flags}", script_args=HF_TOLD, nproc_per_node=1,
                            timeout=120.0, keeps_best=best)
               for flags, best in (("", False), (" --bug rotate-by-name", False), (" --load_best_model_at_end", True))]
    m = run_matrix([targets.of(c) for c in scripts], select(builtin_catalogue(), ["retention-order"]),
                   workdir=tmp_path)
    good, bad, best = (found(m, s.script, "retention-order") for s in scripts)
    assert good.verdict is Verdict.PASS and "best" not in good.reason, explain(m)
    assert bad.verdict is Verdict.FAIL and bad.property == good.property == "rotation-safe", explain(m)
    assert "after save 10: the checkpoints of steps 7, 8, 9 remain; expected the checkpoints of steps 8, 9, 10" in (
        bad.reason), bad.reason
    assert best.verdict is Verdict.PASS, explain(m)
    assert "or the newest 2 and an older one kept as the best (step 1, after 10 saves)" in best.reason, best.reason
