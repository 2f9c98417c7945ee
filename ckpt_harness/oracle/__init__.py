"""The oracle: every verdict the harness gives is decided here, from records only.

Checks and pipelines launch runs and take snapshots; they hand what they
got to a judge here and report the `CaseResult` it returns. Nothing else
builds a verdict.
"""

from ckpt_harness.oracle.judges import (
    Reference,
    cannot_judge,
    not_applicable,
    float_noise,
    harness_error,
    informational,
    judge_fault,
    judge_finished,
    judge_fresh_start,
    judge_flake,
    judge_golden,
    judge_hard_stop,
    judge_live,
    judge_load_step,
    judge_refused,
    judge_same_state,
    nothing_to_break,
    undecided_if,
)
from ckpt_harness.oracle.outcomes import Outcome, OutcomeKind, classify_resume
from ckpt_harness.oracle.problems import Problem, health
from ckpt_harness.oracle.retention import judge_retention
from ckpt_harness.oracle.properties import OTHER_LAYOUT, PROPERTIES, Background, accepted, expected, property_for
from ckpt_harness.oracle.start import (
    Inferred,
    identity_note,
    infer_start,
    judge_deterministic,
    judge_unreported_load,
    judge_later_saves,
    judge_named_steps,
    judge_landed,
    judge_overlap,
    judge_saves_seen,
    judge_resume_point,
    judge_stop_point,
    judge_stopped,
    judge_stopped_between,
    newest_complete,
)
from ckpt_harness.records.runs import save_steps, savers, saves_by_step
from ckpt_harness.oracle.conversions import judge_conversion, judge_converted_resume
from ckpt_harness.oracle.conflicts import judge_single_writer
from ckpt_harness.oracle.scenarios import (
    judge_blocked,
    judge_frozen_writer,
    judge_late,
    judge_overwriting_save,
    judge_replaced,
    judge_reshard,
    judge_reshard_save,
    saved_full,
)

__all__ = [
    "OTHER_LAYOUT", "PROPERTIES", "Background", "Outcome", "OutcomeKind", "Problem", "Reference", "accepted",
    "cannot_judge", "classify_resume", "expected", "judge_frozen_writer", "not_applicable",
    "float_noise", "harness_error", "health", "judge_blocked", "judge_conversion", "judge_converted_resume",
    "judge_deterministic",
    "judge_fault", "judge_finished",
    "judge_flake", "judge_fresh_start", "judge_golden", "judge_hard_stop", "judge_late", "judge_live",
    "informational", "judge_load_step", "judge_refused",
    "judge_overwriting_save",
    "judge_replaced",
    "judge_reshard", "judge_reshard_save", "judge_same_state", "nothing_to_break", "property_for", "saved_full",
    "undecided_if",
    "Inferred", "identity_note", "infer_start", "judge_unreported_load", "judge_retention",
    "judge_landed", "judge_later_saves", "judge_overlap",
    "judge_named_steps", "judge_resume_point", "judge_saves_seen", "judge_single_writer", "judge_stopped",
    "judge_stop_point", "judge_stopped_between", "newest_complete",
    "save_steps", "saves_by_step", "savers",
]
