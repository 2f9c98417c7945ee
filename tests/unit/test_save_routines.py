"""Which of a script's functions are its save routine by name (`problems.save_routines`, issue 64).

Synthetic traces, as a rank writes them: each rank made checkpoint I/O
(the `mkdir` of the directory) outside any save, no rank made an optimizer
step yet (no `trains` event), and rank 1 raised where that I/O was made.
"""

from __future__ import annotations

from ckpt_harness.oracle import health
from ckpt_harness.oracle.judges import judge_golden
from ckpt_harness.oracle.problems import save_routines
from ckpt_harness.verdict import Verdict as V
from tests.unit.synthetic import rank, run

GONE = "Connection closed by peer"


def _raised_in(function: str):
    """Rank 1 raised in `function` of /job/train.py, its peer in `<module>`
    after it, both in `run`, having made their checkpoint I/O in `function`."""
    def tb(where: str, message: str) -> str:
        return (f'Traceback (most recent call last):\n  File "/job/train.py", line 40, in {where}\n'
                f'    go()\nRuntimeError: {message}\n')

    routine = f"/job/train.py:{function}"
    r0 = rank(0).event("mkdir", "run", point=0, path=".", routine=routine) \
        .failed("run", GONE, "builtins.RuntimeError", tb("<module>", GONE))
    r1 = rank(1).event("mkdir", "run", point=0, path=".", routine=routine) \
        .failed("run", "boom", "builtins.RuntimeError", tb(function, "boom"))
    return run(r0, r1, name="golden")


def test_the_module_is_no_save_routine_by_its_name():
    """The loop is the module: before its first optimizer step nothing says
    the module trains, and its setup's I/O named it; a rank that raised in
    it (its first training step) is the script's failure: ERROR."""
    crashed = _raised_in("<module>")
    assert save_routines(crashed) == set()
    problem = health(crashed)
    assert not problem.checkpointing and "save routine" not in problem.summary, problem.summary
    assert judge_golden("golden", crashed, None).verdict is V.ERROR


def test_a_function_of_its_own_still_is_one_before_any_training():
    """The other way: a function of the script's own where its checkpoint
    I/O happened (a save before the first optimizer step, which gets its
    entry points alone as its phase) is its save routine: FAIL there."""
    crashed = _raised_in("save")
    assert save_routines(crashed) == {"/job/train.py:save"}
    problem = health(crashed)
    assert problem.checkpointing and "rank 1 raised RuntimeError in run, in the save routine save(): boom" \
        in problem.summary, problem.summary
    assert judge_golden("golden", crashed, None).verdict is V.FAIL
