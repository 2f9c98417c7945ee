"""A job whose warm-ups cannot all be done (issue 64): the harness must step
aside from each, with a note, and run and judge the job as usual.

Its preload list names a module that is not installed (`ABSENT`, as
DeepSpeed 0.18 lacks a module 0.19's warm-up names), one whose import raises
(`RAISES`) and one that imports (`FINE`); the last two are files the test
writes and puts on the path. Its JIT op's builder fails
(`tests.planted.jit:fail`). Its ranks check that `FINE` was pre-imported,
by the warm parent they are forked from: the warm-up still does what it can.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ckpt_harness import RankContext
from ckpt_harness.jobs.torch_save import TorchSaveJob

ABSENT = "ckpt_planted_warm_absent"
RAISES = "ckpt_planted_warm_raises"
FINE = "ckpt_planted_warm_fine"


class PreloadsWhatCannotBe(TorchSaveJob):
    preload = (*TorchSaveJob.preload, ABSENT, RAISES, FINE, __name__)

    @classmethod
    def jit_ops(cls):
        from ckpt_harness.jit import JitOp

        return (JitOp("the planted unbuildable op", Path(os.environ["CKPT_TEST_JIT_DIR"]) / "unbuildable_op",
                      "tests.planted.jit:fail", "unbuildable"),)

    def setup(self, ctx: RankContext) -> None:
        if FINE not in sys.modules:  # nothing in a rank imports it: only the warm parent did
            raise RuntimeError(f"{FINE} was not pre-imported by the warm parent")
        super().setup(ctx)
