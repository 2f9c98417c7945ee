"""The properties a checkpointing scheme is judged on, and what each accepts after a fault."""

from __future__ import annotations

import dataclasses
from typing import Optional

from ckpt_harness.errors import ModelError
from ckpt_harness.inject.corrupt import CORRUPTIONS, UNSAFE_PICKLE
from ckpt_harness.inject.faults import BY_NAME, FAULT_KINDS, Family
from ckpt_harness.oracle.outcomes import Outcome, OutcomeKind

PROPERTIES = {
    "atomic": "a crash at any point of a save resumes the new checkpoint or the previous one",
    "durable": "power loss after a save returned still resumes that save",
    "preserving": "a failed save never destroys the previous checkpoint",
    "live": "no hang; an error on one rank becomes an error on every rank",
    "detecting": "a corrupt or missing file is refused or skipped, never loaded silently",
    "faithful": "after an accepted resume the run ends bitwise equal to the uninterrupted run",
    "skew-safe": "a delay alone never changes the result",
    "overwrite-safe": "saving into an existing step directory replaces it with no stale file, or refuses untouched",
    "rotation-safe": "keep-last-N rotation keeps exactly the newest N checkpoints, always leaves a complete one, "
                     "and the newest is resumed",
    "reshardable": "a checkpoint saved at N ranks resumes at M ranks with the full state bitwise equal",
    "safe-loading": "loading a checkpoint never runs code its files carry (a malicious pickle is refused or ignored)",
    "convertible": "the framework's conversions of a save (to another format, a weights export) keep every bit "
                   "of it but what they document to drop, or refuse",
    "snapshot-consistent": "a checkpoint holds the state of the moment its save was called, however long its "
                           "background writer takes and whatever training does meanwhile",
    "single-writer": "no two ranks write, rename or delete the same path in one save",
    "save-neutral": "saving changes nothing of training: a run ends bitwise where the same run saving at other "
                    "steps ends",
    "upgrade-safe": "a checkpoint an older release wrote is resumed by the newer one as the older saved it, "
                    "bitwise, or refused on every rank",
}

#: What every run is also judged on, whatever a scenario aims at: a hang or an
#: error left on some ranks (live), a resume that does not end bitwise
#: (faithful), two ranks on one path in a save (single-writer). A case's
#: judgment of one of these counts in that property's matrix cell; any other
#: judgment (the fault kind's own property: "atomic" for a crash) is the
#: scenario's own, whatever it is called.
SIDE_PROPERTIES = ("live", "faithful", "single-writer")

#: The property the cases of each family of fault kinds judge.
FAMILY_PROPERTY = {Family.CRASH: "atomic", Family.ERROR: "preserving", Family.DAMAGE: "detecting",
                   Family.DELAY: "skew-safe"}
#: Fault kinds whose cases break a save without telling the job (crash-like).
CRASHES = tuple(k.name for k in FAULT_KINDS if k.family is Family.CRASH)
#: Fault kinds the job is told about: the save raises.
ERRORS = tuple(k.name for k in FAULT_KINDS if k.family is Family.ERROR)


#: The case kind of a save handed to the resume in a layout the job does not
#: write (`catalogue.checks.convert.Confuse`): judged as a damaged checkpoint.
OTHER_LAYOUT = "other-layout"


def property_for(kind: str) -> str:
    """The property a case of fault (or corruption) `kind` judges. A kind
    known nowhere is a harness bug, refused rather than judged under a
    property chosen by default."""
    if kind in BY_NAME:
        return FAMILY_PROPERTY[BY_NAME[kind].family]
    if kind == "power-loss-after":  # a case kind (`cases.POWER_LOSS_AFTER`), no fault kind
        return "durable"
    if kind == UNSAFE_PICKLE:
        return "safe-loading"
    if kind in CORRUPTIONS or kind == OTHER_LAYOUT:
        return "detecting"
    raise ModelError(f"no property is defined for case kind {kind!r}: neither a fault kind "
                     "(inject.faults.FAULT_KINDS) nor a corruption (inject.corrupt.CORRUPTIONS)")


def expected(prop: str, save_returned: bool, has_prev: bool) -> str:
    """What `accepted` allows, in words for a failure message."""
    previous = "S_prev" if has_prev else "a fresh start (no earlier checkpoint)"
    if prop in ("durable", "skew-safe"):
        return "S_k"
    if prop == "detecting":
        return f"a refusal on every rank naming the file or rank, {previous}, or S_k intact"
    if save_returned:
        return "S_k (the save had returned on every rank)"
    return f"S_k or {previous}"


def accepted(prop: str, outcome: Outcome, save_returned: bool, has_prev: bool) -> bool:
    """Is this resume outcome allowed under `prop`? Without a previous
    checkpoint, a fresh start is what "the previous one" means."""
    previous = OutcomeKind.S_PREV if has_prev else OutcomeKind.FRESH
    if prop in ("durable", "skew-safe") or (save_returned and prop != "detecting"):
        return outcome.kind is OutcomeKind.S_K
    if prop in ("atomic", "preserving"):
        return outcome.kind in (OutcomeKind.S_K, previous)
    if prop == "detecting":
        return outcome.kind in (OutcomeKind.S_K, OutcomeKind.REFUSED, previous)
    raise ModelError(f"no resume outcome is defined for property {prop!r} after a fault")


# -- saves that land in the background ------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Background:
    """What a fault case of a job that saves in the background is judged by
    instead of "did save k return": a save there returns (`async_save`
    returned, its state is recorded) long before it lands, and counts as
    saved only once *published* (`ctx.published`, or `wait_for_saves`
    returned). A fault before that may resume the save before it."""

    #: The newest save published on every rank of the faulted run, None if none was.
    published: Optional[int]


def accepted_background(outcome: Outcome, background: Background, k: int) -> bool:
    """"atomic" and "preserving" for a job that saves in the background: S_k,
    or any save from the newest published one on (a fresh start if none was);
    only S_k once save k was published."""
    published = background.published
    if outcome.kind is OutcomeKind.S_K:
        return True
    if published is not None and published >= k:
        return False
    if outcome.kind is OutcomeKind.FRESH:
        return published is None
    return outcome.kind in (OutcomeKind.S_PREV, OutcomeKind.OLDER) and outcome.step is not None \
        and (published is None or outcome.step >= published)


def expected_background(background: Background, k: int) -> str:
    """What `accepted_background` allows, in words."""
    published = background.published
    if published is not None and published >= k:
        return "S_k (save k had been published on every rank: landed, and made the one to resume)"
    if published is None:
        return "S_k, a save not yet published, or a fresh start (no save had been published on every rank)"
    return f"S_k or a save from step {published} on (the newest published on every rank when the fault fired)"
