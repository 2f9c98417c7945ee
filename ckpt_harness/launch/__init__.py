"""Process groups: warm forking, deadlines, stacks on hang, teardown."""

from ckpt_harness.launch.group import (
    MAX_WORLD_SIZE,
    Cancelled,
    GroupSpec,
    LaunchError,
    cancel,
    check_layout,
    prestart,
    run_group,
)
from ckpt_harness.launch.outcome import Cut, GroupOutcome, RankOutcome, RankStatus
from ckpt_harness.launch.rank import RankInfo

__all__ = [
    "MAX_WORLD_SIZE",
    "Cancelled",
    "Cut",
    "GroupOutcome",
    "GroupSpec",
    "LaunchError",
    "RankInfo",
    "RankOutcome",
    "RankStatus",
    "cancel",
    "check_layout",
    "prestart",
    "run_group",
]
