"""How bad a difference in a resumed state is: which kind of training state each key is, and how severe a
difference of that kind is. The lead line of a state comparison (`diffs.summary`), the headline of a failure,
a baseline's cause (`causes`) and `matrix --fail-on` all read it here; nothing here imports the rest of the oracle.
"""

from __future__ import annotations

import enum
import re
from typing import Optional, Sequence

#: The kinds of state a key is read as, most specific first: the first whose
#: words a key's parts contain decides. Model weights are what is left.
KINDS: tuple[tuple[str, frozenset[str]], ...] = (
    ("rng", frozenset({"rng", "rng_state", "random", "generator", "cuda_rng", "numpy", "python", "torch_rng",
                       # accelerate's random_states_<rank>.pkl
                       "random_state", "numpy_random_seed", "torch_manual_seed", "torch_cuda_manual_seed", "seed"})),
    ("data position", frozenset({"sampler", "dataloader", "data", "epoch", "position", "consumed", "batch",
                                 "iteration", "iterations", "dataset", "loader"})),
    ("optimizer", frozenset({"optim", "optimizer", "optimizer_state", "exp_avg", "exp_avg_sq", "momentum_buffer",
                             "param_groups", "optimizer_states", "fp32_flat_groups"})),
    ("counters", frozenset({"step", "steps", "global_step", "scheduler", "lr_scheduler", "last_epoch",
                            "_step_count", "lr", "_last_lr", "base_lrs", "epoch_idx",
                            # Lightning's loops count what they completed (loops.fit_loop.epoch_progress.total...)
                            "epoch_progress", "batch_progress", "scheduler_progress", "_batches_that_stepped"})),
)
_PARTS = re.compile(r"[./:\[\]]+")


def kind_of_key(key: str) -> str:
    """What part of the training state `key` is ("optim/state/0/exp_avg" -> optimizer)."""
    parts = {p.lower() for p in _PARTS.split(key) if p}
    return next((kind for kind, words in KINDS if parts & words), "model")


class Severity(enum.IntEnum):
    """How bad a difference in the resumed state is, least first: a resume
    that lost one RNG value replays other dropout masks, one that lost the
    optimizer state trains another model. What a state comparison's failure
    is said to be (the headline, the grouping of an exploration's failures, a
    matrix cell) and what `matrix --fail-on` may take."""

    RNG = 1
    DATA = 2
    COUNTERS = 3
    VALUES = 4
    MISSING = 5

    @property
    def label(self) -> str:
        return _LABELS[self]

    @property
    def option(self) -> str:
        """Its name on the command line (`--fail-on values`)."""
        return self.name.lower()


_LABELS = {Severity.RNG: "RNG state only", Severity.DATA: "data position", Severity.COUNTERS: "counters",
           Severity.VALUES: "model or optimizer values", Severity.MISSING: "missing keys"}
_OF_KIND = {"rng": Severity.RNG, "data position": Severity.DATA, "counters": Severity.COUNTERS}


def severity(differences: Sequence) -> Optional[Severity]:
    """The worst of `differences` (`StateDiff`s): a key missing or unexpected
    is MISSING, else its kind of state says (model and optimizer: VALUES);
    None for none."""
    found = [Severity.MISSING if d.kind in ("missing", "unexpected") else _OF_KIND.get(kind_of_key(d.key),
                                                                                       Severity.VALUES)
             for d in differences]
    return max(found, default=None)


__all__ = ["KINDS", "Severity", "kind_of_key", "severity"]
