"""Process groups: warm forking, deadlines, stacks on hang, teardown."""

from ckpt_harness.launch.group import (
    MAX_WORLD_SIZE,
    Cut,
    GroupOutcome,
    GroupSpec,
    LaunchError,
    RankOutcome,
    RankStatus,
    check_layout,
    prestart,
    run_group,
)
from ckpt_harness.launch.rank import RankInfo

__all__ = [
    "MAX_WORLD_SIZE",
    "Cut",
    "GroupOutcome",
    "GroupSpec",
    "LaunchError",
    "RankInfo",
    "RankOutcome",
    "RankStatus",
    "check_layout",
    "prestart",
    "run_group",
]
