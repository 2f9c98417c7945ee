"""What other packages add through entry points: jobs (`ckpt_harness.jobs`) and checks (`ckpt_harness.checks`)."""

from __future__ import annotations

from importlib import metadata
from typing import Mapping


def with_entry_points(group: str, builtin: Mapping[str, str]) -> dict[str, str]:
    """`builtin` (name -> "module:attribute"), then the entry points of `group`
    in name order; a built-in name cannot be taken over."""
    found = dict(builtin)
    for ep in sorted(metadata.entry_points(group=group), key=lambda ep: ep.name):
        found.setdefault(ep.name, ep.value)
    return found
