"""Stops anywhere (issue 64, item 5): a run stopped between saves, over hand-built runs.

A script's runs count their optimizer steps (`inject.saves`): every save
says how many were made (`trained`), a stop between saves after how many it
stopped. The resume must start from the newest save complete when the run
stopped, losing only the steps since, and make exactly the uninterrupted
run's later saves.
"""

from __future__ import annotations

import types

import pytest

from ckpt_harness.inject.saves import Saves
from ckpt_harness.oracle import judge_later_saves, judge_stop_point, judge_stopped_between, newest_complete
from ckpt_harness.pipeline.verify import _check_names, between_gaps, case_names
from ckpt_harness.errors import UsageError
from ckpt_harness.targets import Capabilities
from ckpt_harness.verdict import Verdict as V
from tests.unit.synthetic import both, rank, run, state

P = pytest.param
#: The golden run: saves at steps 2, 4, 6 (each after as many optimizer steps), 8 steps trained.
STEPS = (2, 4, 6)
TRAINED = {2: 2, 4: 4, 6: 6}


def saving(b, *steps, trained=None, **fields):
    for s in steps:
        b._record("saved", step=s, state=state(s, b.r), trained=(trained or TRAINED).get(s, s), **fields)
    return b


def golden(end=8, steps=STEPS, trained=None):
    return both(lambda b: saving(b, *steps, trained=trained).final()._record("finished", trained=end), name="golden")


def resumed_saving(*steps, **changes):
    """A resumed run that makes saves `steps` (as the golden run made them) and finishes."""
    return both(lambda b: saving(b, *steps).final(state(8, b.r, **changes)))


# -- where a stopped run resumes ------------------------------------------------------------
@pytest.mark.parametrize("resume, newest, verdict, words", [
    P(resumed_saving(4, 6), 2, V.PASS, "stopped after step 3, resumed from save 2: 1 step lost (its first save was "
                                       "step 4)", id="from-the-newest"),
    P(resumed_saving(6), 4, V.PASS, "stopped after step 5, resumed from save 4: 1 step lost", id="from-save-4"),
    P(resumed_saving(4, 6), 4, V.FAIL, "stopped after step 5, the script resumed from save 2, though save 4 was "
                                       "complete when it stopped: 3 steps lost, not 1", id="older-names-both"),
    P(resumed_saving(2, 4, 6), 2, V.FAIL, "resumed from scratch, though save 2 was complete", id="scratch"),
    P(resumed_saving(2, 4, 6), None, V.PASS, "resumed from scratch: 3 steps lost", id="nothing-complete"),
    P(both(lambda b: b.final()), 6, V.PASS, "resumed from save 6: 1 step lost (it finished without saving",
      id="after-the-last-save"),
    P(resumed_saving(6), 2, V.FAIL, "resumed from step 4, after save 2, the newest checkpoint complete when it "
                                    "stopped", id="later-than-complete"),
])
def test_a_resume_after_a_stop_between_saves_starts_from_the_newest_complete_save(resume, newest, verdict, words):
    at = {2: 3, 4: 5, 6: 7, None: 3}[newest]
    found = judge_stop_point("between@x", resume, at, newest, TRAINED, "repro", STEPS)
    assert (found.check, found.verdict) == ("load step", verdict), found.summary
    assert words in found.summary, found.summary
    assert (found.repro is None) == (verdict is V.PASS)


def test_steps_lost_are_optimizer_steps_whatever_the_saves_are_numbered():
    """Saves numbered by epoch (2, 4 optimizer steps apart): the steps lost count optimizer steps."""
    trained = {1: 4, 2: 8}
    found = judge_stop_point("between@7", resumed_saving(2), 7, 1, trained, "repro", (1, 2))
    assert found.verdict is V.PASS and "resumed from save 1: 3 steps lost" in found.summary, found.summary


def test_nothing_to_tell_where_a_failed_resume_started_adds_nothing_else_it_is_unknown():
    failed = both(lambda b: b.failed(phase="run"))
    assert judge_stop_point("between@3", failed, 3, 2, TRAINED, "repro", STEPS) is None
    silent = both(lambda b: b)  # no save, no end: nothing says where it started
    found = judge_stop_point("between@3", silent, 3, 2, TRAINED, "repro", STEPS)
    assert found.verdict is V.UNKNOWN and "nothing tells where it resumed" in found.summary, found.summary


# -- exactly the golden run's later saves -----------------------------------------------------------
@pytest.mark.parametrize("resume, verdict, words", [
    P(resumed_saving(4, 6), V.PASS, "saves 4, 6 bitwise equal", id="exactly"),
    P(resumed_saving(4, 5, 6), V.FAIL, "the resumed run made save 5, which the uninterrupted run never made (its "
                                       "saves after step 2: 4, 6)", id="one-more"),
    P(resumed_saving(4), V.FAIL, "save 6 never returned on rank(s) 0, 1 after the resume", id="one-fewer"),
    P(resumed_saving(4, 6, 8), V.FAIL, "made save 8, which the uninterrupted run never made", id="past-its-end"),
    P(both(lambda b: saving(b, 4).saved(6, state(6, b.r, w=9.0))), V.FAIL, "save 6 differs", id="not-bitwise"),
])
def test_a_resumed_run_makes_exactly_the_saves_the_uninterrupted_run_makes_after_its_start(resume, verdict, words):
    found = judge_later_saves("between@3", golden(), resume, 2, "repro")
    assert (found.check, found.verdict) == ("saves after resume", verdict), found.summary
    assert words in found.summary, found.summary


def test_a_save_after_the_last_one_is_a_failure_even_where_none_was_expected():
    found = judge_later_saves("resume@6", golden(), resumed_saving(8), 6, "repro")
    assert found.verdict is V.FAIL and "made save 8" in found.summary and "after step 6: none" in found.summary
    assert judge_later_saves("resume@6", golden(), both(lambda b: b.final()), 6, "repro") is None


# -- what the stopped run left ----------------------------------------------------------------------
def test_the_newest_complete_save_is_on_every_rank_that_makes_it_and_landed():
    savers = {2: frozenset({0, 1}), 4: frozenset({0, 1})}
    made = run(saving(rank(0), 2, 4), saving(rank(1), 2, 4), name="stop")
    assert newest_complete(made, savers) == 4
    torn = run(saving(rank(0), 2, 4), saving(rank(1), 2), name="stop")  # rank 1 never made save 4
    assert newest_complete(torn, savers) == 2
    in_flight = run(saving(rank(0), 2, 4, background=True)._record("landed", step=2),
                    saving(rank(1), 2, 4, background=True)._record("landed", step=2), name="stop")
    assert newest_complete(in_flight, savers) == 2
    landed = run(*(saving(rank(r), 2, 4, background=True)._record("landed", step=2)._record("landed", step=4)
                   for r in (0, 1)), name="stop")
    assert newest_complete(landed, savers) == 4
    rank0_alone = run(saving(rank(0), 2, 4), rank(1), name="stop")  # rank 0 writes, rank 1 trains
    assert newest_complete(rank0_alone, {2: frozenset({0}), 4: frozenset({0})}) == 4
    assert newest_complete(run(rank(0), rank(1), name="stop"), savers) is None


def test_a_run_that_never_stopped_between_saves_on_every_rank_is_unknown():
    stopped = run(*(saving(rank(r), 2)._record("stopped", step=None, between=3, trained=3) for r in (0, 1)))
    assert judge_stopped_between("between@3", stopped, 3) is None
    short = run(saving(rank(0), 2)._record("stopped", step=None, between=3, trained=3), saving(rank(1), 2).final())
    found = judge_stopped_between("between@3", short, 3)
    assert found.verdict is V.UNKNOWN and "never stopped there on rank(s) 1" in found.summary, found.summary


# -- which cases there are ---------------------------------------------------------------------------
def script(lacks=None):
    """A script that saves synchronously and is not restarted by torchrun."""
    lacks = {"launcher_restart": "no --max-restarts", "background_saves": "synchronous", **(lacks or {})}
    return types.SimpleNamespace(caps=Capabilities(reports=False, steps_known=False, live_state=False, parks=False,
                                                   lacks=lacks), noun="script")


@pytest.mark.parametrize("run_, gaps", [
    P(golden(8), [(2, 4), (4, 6), (6, 8)], id="after-the-last-save-too"),
    P(golden(6), [(2, 4), (4, 6)], id="the-last-save-ends-it"),
    P(golden(8, trained={2: 0, 4: 0, 6: 0}), [(0, 8)], id="no-step-between-saves"),
    P(both(lambda b: b.saved(2).saved(4).final()._record("finished")), [], id="a-job-counts-none"),
])
def test_the_gaps_between_saves_are_the_golden_runs_optimizer_steps(run_, gaps):
    assert between_gaps(run_) == gaps


def test_run_stops_once_between_saves_by_default_the_scenario_at_each_gap_any_step_by_name():
    gaps = [(2, 4), (4, 6), (6, 8)]
    every, default = case_names(script(), [2, 4, 6], "graceful", gaps)
    assert default == ["resume@2", "resume@4", "resume@6", "between@3"]
    assert [c for c in every if c.startswith("between")] == ["between@3", "between@5", "between@7"]
    assert case_names(script(), [2, 4, 6], "graceful", gaps, between=False)[1] == ["resume@2", "resume@4", "resume@6"]
    assert case_names(script(), [2, 4, 6], "between", gaps)[1] == ["between@3", "between@5", "between@7"]
    # saves every step: no step between them
    assert case_names(script(), [1, 2, 3], "graceful", [(1, 2), (2, 3)])[1] == ["resume@1", "resume@2", "resume@3"]
    wide = [(10, 20)]
    _check_names(script(), ["between@11", "between@19"], [10, 20], wide)  # any step of a gap
    with pytest.raises(UsageError, match=r"between@K: K optimizer steps made, 10 < K < 20"):
        _check_names(script(), ["between@20"], [10, 20], wide)
    with pytest.raises(UsageError, match="made no optimizer step between saves"):
        _check_names(script(), ["between@3"], [2, 4], [])
    job = script({"stops_between": "a Job's run is stopped only right after one of its saves"})
    assert case_names(job, [2, 4], "graceful", gaps)[1] == ["resume@2", "resume@4"]
    with pytest.raises(UsageError, match="between@K: a Job's run is stopped only right after"):
        _check_names(job, ["between@3"], [2, 4], ())


# -- counting optimizer steps -------------------------------------------------------------------------
def test_the_main_threads_optimizer_steps_are_counted_and_a_stop_is_offered_outside_saves_only(tmp_path):
    offered = []
    saves = Saves(str(tmp_path), lambda step: None, lambda save: None, stepping=offered.append)
    saves.optimizer_step()
    saves.optimizer_step()
    with saves.boundary(2, "path"):
        saves.optimizer_step()  # DCP's get_state_dict steps the optimizer to create its state, inside a save
    saves.optimizer_step()
    assert saves.optimizer_steps == 4 and offered == [0, 1, 3]


def _container(parts):
    """An optimizer that is a container of optimizers, as torchtitan's
    `OptimizersContainer`: itself a `torch.optim.Optimizer`, its step steps
    each model part's."""
    import torch

    class Container(torch.optim.Optimizer):
        def __init__(self):
            self.parts = [torch.optim.AdamW(part.parameters()) for part in parts]
            super().__init__([p for part in parts for p in part.parameters()], {})

        def step(self, closure=None):
            for optimizer in self.parts:
                optimizer.step()

    return Container()


@pytest.fixture
def hooked(tmp_path, monkeypatch):
    """The harness's optimizer-step hook on every optimizer, counting into a Saves of its own."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    from ckpt_harness.inject import saves as module

    saves = Saves(str(tmp_path), lambda step: None, lambda save: None, stepping=lambda n: None)
    monkeypatch.setattr(module, "_active", saves)
    handle = register_optimizer_step_pre_hook(module._optimizer_step)
    yield saves
    handle.remove()


def test_an_optimizer_that_steps_the_optimizers_it_holds_is_one_step(hooked):
    import torch

    parts = [torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)]
    container = _container(parts)
    for _ in range(3):
        sum(part(torch.ones(2)).sum() for part in parts).backward()
        container.step()
    assert hooked.optimizer_steps == 3  # not 9: the container's and each part's


def test_two_optimizers_stepped_one_after_the_other_are_two_steps(hooked):
    """Not nested: the count is each optimizer's, as before (a run with two
    optimizers makes two steps between its saves)."""
    import torch

    parts = [torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)]
    optimizers = [torch.optim.SGD(part.parameters(), lr=0.1) for part in parts]
    for part, optimizer in zip(parts, optimizers):
        part(torch.ones(2)).sum().backward()
        optimizer.step()
    assert hooked.optimizer_steps == 2
