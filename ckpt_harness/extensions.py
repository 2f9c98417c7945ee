"""What other packages add through entry points (jobs, checks, kinds of target,
conversions), and how a "module:attribute" is loaded."""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any, Mapping


def with_entry_points(group: str, builtin: Mapping[str, str]) -> dict[str, str]:
    """`builtin` (name -> "module:attribute"), then the entry points of `group`
    in name order; a built-in name cannot be taken over."""
    found = dict(builtin)
    for ep in sorted(metadata.entry_points(group=group), key=lambda ep: ep.name):
        found.setdefault(ep.name, ep.value)
    return found


def load(where: str) -> Any:
    """The object "module:attribute" names (the module itself without an
    attribute), imported. ImportError and AttributeError are the caller's
    to turn into an error that names what it was loading."""
    module, _, attribute = where.partition(":")
    found = importlib.import_module(module)
    return getattr(found, attribute) if attribute else found
