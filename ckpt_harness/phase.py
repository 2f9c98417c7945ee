"""Phase names: what a rank is doing, as traces, fault points and reports say it.

A phase is a plain string in trace files ("save 4", "train_step 3"), because
jobs that own their loop name their own (`ctx.phase(...)`). The save phases
are the ones the controller aims at, so they are spelled and parsed here
only. Fault labels use the compact form without the space ("save4").
"""

from __future__ import annotations

import re
from typing import Optional

SETUP = "setup"
LOAD = "load"
RUN = "run"
STATE_AFTER_LOAD = "state after load"
FINAL_STATE = "final state"
TEARDOWN = "teardown"

_COMPACT = re.compile(r"([a-z_]+?)(\d+)")
_WORD = re.compile(r"[a-z_]+")
#: Phases in which the harness, not the job, is at work (capturing state).
OBSERVING = re.compile(r"state after (load|save \d+)|state before save \d+|final state")


def save(step: int) -> str:
    """The phase of the save of `step`; what `ctx.phase` must be told when it starts."""
    return f"save {step}"


def train_step(step: int) -> str:
    return f"train_step {step}"


def step_of(phase: str, kind: str) -> Optional[int]:
    """The step of a stepped phase of `kind` ("train_step 3" -> 3), None for any other phase."""
    name, _, step = phase.partition(" ")
    return int(step) if name == kind and step.isdigit() else None


def after_save(step: int) -> str:
    """What a job does once save `step` returned and was recorded, until it
    names another phase: the rest of an owned loop's step, or its end of
    training (deleting old checkpoints) after the last save."""
    return f"after_save {step}"


#: What `background` puts before the phase that handed the work over.
BACKGROUND = "bg_"


def background(name: str) -> str:
    """The phase of work another thread does for `name` ("save 4" -> "bg_save 4"):
    an async save's writer, numbered apart from the main thread (`probes.follow_threads`)."""
    return name if name.startswith(BACKGROUND) else BACKGROUND + name


def foreground(name: str) -> str:
    """The phase that handed the work of `name` over ("bg_save 4" -> "save 4"); other phases unchanged."""
    return name[len(BACKGROUND):] if name.startswith(BACKGROUND) else name


def state_after_save(step: int) -> str:
    return f"state after save {step}"


def state_before_save(step: int) -> str:
    """The harness capturing what a script is about to save (`ckpt_harness.full_state`)."""
    return f"state before save {step}"


_SAVE_WORK = re.compile(r"(?:save|after_save|state (?:after|before) save) (\d+)")


def save_work(name: str) -> Optional[int]:
    """The step of the save `name` belongs to: the save itself ("save 4", or
    its background share "bg_save 4"), the harness's capture of the state it
    saved ("state after save 4", or a script's "state before save 4"), and
    what the job does once it returned ("after_save 4"); None for any other
    phase. Where a run's time is split into saving and training
    (`records.runs.run_breakdown`)."""
    match = _SAVE_WORK.fullmatch(foreground(name))
    return int(match.group(1)) if match else None


def checkpointing(name: str) -> bool:
    """Is `name` a phase of the checkpointing under test (a save, or the
    load of a resume)? What fails in any other phase (setup, a train step,
    the job's `state`) says nothing about checkpoints. Work right after a
    save returned counts: there a job that owns its loop deletes old
    checkpoints, at the end of training too."""
    name = foreground(name)
    return name == LOAD or name.startswith(("save ", "after_save "))


def labelable(phase: str) -> bool:
    """Can a fault label name `phase` (and be read back to it)?"""
    try:
        return expand(compact(phase)) == phase
    except ValueError:
        return False


def compact(phase: str) -> str:
    """"save 4" -> "save4", for fault labels that must not contain spaces."""
    return phase.replace(" ", "")


def expand(compact_phase: str) -> str:
    """"save4" -> "save 4"; the inverse of `compact` for stepped phases and one-word ones ("teardown")."""
    if _WORD.fullmatch(compact_phase):
        return compact_phase
    match = _COMPACT.fullmatch(compact_phase)
    if match is None:
        raise ValueError(f"not a stepped phase: {compact_phase!r} (expected e.g. save4)")
    return f"{match.group(1)} {match.group(2)}"
