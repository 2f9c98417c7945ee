"""safe-loading: a committed file replaced by a pickle that runs code when
loaded must never be run by the resume.

The payload is checked against the real loaders (no process group), the
judge against synthetic runs, and the `unsafe-load` scenario end to end
against planted loaders: two that run the file (flagged) and the correct
one (passes every file).
"""

from __future__ import annotations

import json
import os
import pickle

import pytest
import torch

from ckpt_harness import targets
from ckpt_harness.catalogue.bench import Bench
from ckpt_harness.inject.corrupt import CORRUPTIONS, UNSAFE_PICKLE
from ckpt_harness.inject.payload import ran
from ckpt_harness.oracle import judge_fault
from ckpt_harness.catalogue.scenario import select
from ckpt_harness.catalogue.scenario_files import builtin_catalogue
from ckpt_harness.verdict import Verdict
from tests.unit.synthetic import K, both, rank, reference, resumed, run

PLANT = CORRUPTIONS[UNSAFE_PICKLE]


# -- the payload against the real loaders ---------------------------------------------------------
@pytest.fixture
def files(tmp_path):
    """A torch.save archive and a non-zip file (a pointer), each planted."""
    canary = tmp_path / "canary"
    archive, pointer = tmp_path / "model.pt", tmp_path / "latest"
    torch.save({"w": torch.ones(3)}, archive)
    pointer.write_text("step_000004\n")
    inode = os.stat(archive).st_ino
    said = PLANT(archive, canary), PLANT(pointer, canary)
    assert "by a torch.save archive" in said[0] and "by a plain pickle" in said[1]
    assert os.stat(archive).st_ino == inode  # in place, as the other corruptions
    assert canary.is_dir() and ran(canary) == ()  # planting ran nothing
    return canary, archive, pointer


def _loads(canary, load):
    try:
        load()
    except Exception:  # noqa: BLE001 - a refusal is what a safe loader does
        pass
    found = ran(canary)
    for entry in canary.iterdir():
        entry.unlink()
    return found


def test_unsafe_loaders_run_the_payload_and_safe_ones_refuse_it(files):
    canary, archive, pointer = files
    assert _loads(canary, lambda: torch.load(archive, weights_only=True)) == ()
    assert _loads(canary, lambda: torch.load(pointer, weights_only=True)) == ()
    assert _loads(canary, lambda: json.loads(pointer.read_bytes())) == ()
    (unsafe,) = _loads(canary, lambda: torch.load(archive, weights_only=False))
    assert unsafe.pid == os.getpid() and unsafe.loader.startswith("_load (torch/serialization.py:")
    (legacy,) = _loads(canary, lambda: torch.load(pointer, weights_only=False))  # unpickles before its magic check
    assert legacy.loader.startswith("_legacy_load (torch/serialization.py:")
    with open(pointer, "rb") as f:
        (raw,) = _loads(canary, lambda: pickle.load(f))
    assert "test_safe_loading.py" in raw.loader


# -- the judge ---------------------------------------------------------------------------------
R = reference()


def _judge(resume, found=()):
    return judge_fault("c", UNSAFE_PICKLE, R, None, resume, save_returned=True, detail="model.pt replaced",
                       repro="REPRO", ran=found)


def test_the_judge_fails_only_code_execution(tmp_path):
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "4242").write_text('  File "/x/site-packages/torch/serialization.py", line 9, in _load\n')
    ran_it = _judge(resumed(K), ran(canary))
    assert ran_it.verdict is Verdict.FAIL and ran_it.check == "safe-loading" and ran_it.repro == "REPRO"
    assert "process 4242 (no rank of the group) ran code the file carries, via _load (torch/serialization.py:9)" \
        in ran_it.summary
    refused = both(lambda b: b.failed(message="model.pt: Weights only load failed"))
    garbage_or_refusal = [_judge(resumed(K)), _judge(refused), _judge(run(rank(0).failed(), rank(1).loaded(K)))]
    assert [r.verdict for r in garbage_or_refusal] == [Verdict.PASS] * 3, [r.explain() for r in garbage_or_refusal]
    stopped_mid_load = _judge(run(rank(0).collective("barrier", 2).hung(), rank(1).hung(), timed_out=True))
    assert (stopped_mid_load.verdict is Verdict.UNKNOWN
            and "rank(s) 0, 1 were stopped before" in stopped_mid_load.summary)


# -- the scenario against planted loaders -------------------------------------------------------
(UNSAFE_LOAD,) = select(builtin_catalogue(), ["unsafe-load"])
PLANTED = "tests.planted.loaders:"


def test_a_loader_with_weights_only_false_is_flagged_naming_file_rank_and_loader(tmp_path):
    case = "unsafe-pickle:step_000004/model.pt"
    result = Bench(targets.job(PLANTED + "UnsafeTorchLoad", world_size=2, timeout=30),
                   tmp_path).run(UNSAFE_LOAD, [case])
    assert result.verdict is Verdict.FAIL and result.property == "safe-loading", result.explain()
    assert f"{case}: step_000004/model.pt replaced" in result.reason
    assert "rank 0 and rank 1 ran code the file carries, via _load (torch/serialization.py:" in result.reason
    assert "_read (planted/loaders.py:" in result.reason
    assert "rank 1 unpickled the planted payload from:\n  File" in result.details
    assert "in _read" in result.details and "zygote.py" not in result.details  # the job's stack, not the launcher's
    assert result.repro.endswith(f"--case {case}")
    (canary,) = tmp_path.glob("**/canary")  # in the case's own directory, one file per process that ran it
    assert "cases" in canary.parts and len(list(canary.iterdir())) == 2


def test_a_pickled_side_file_is_flagged_and_the_correct_loader_passes_every_file(tmp_path):
    side = Bench(targets.job(PLANTED + "UnpicklesSideFile", world_size=2, timeout=30), tmp_path / "side").run(
        UNSAFE_LOAD, ["unsafe-pickle:step_000004/run_meta.pkl"])
    assert side.verdict is Verdict.FAIL, side.explain()
    assert "by a plain pickle" in side.reason and "_load_meta (planted/loaders.py:" in side.reason

    safe = Bench(targets.job(PLANTED + "SafeLoad", world_size=2, timeout=30), tmp_path / "safe").run(UNSAFE_LOAD)
    assert safe.verdict is Verdict.PASS, safe.explain()
    planted = {r.case.split(":", 1)[1] for r in safe.results}
    assert {"step_000004/model.pt", "step_000004/run_meta.json", "latest"} <= planted
    # Each case's canary is its own: the planted files name different directories.
    canaries = {p for p in tmp_path.glob("safe/**/canary")}
    assert len(canaries) == len(planted) and all(not any(c.iterdir()) for c in canaries)
