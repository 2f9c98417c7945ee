"""What other packages add through entry points (jobs, checks, kinds of target,
conversions), and how a "module:attribute" is loaded."""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any, Mapping, TypeVar

T = TypeVar("T")


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


def registered(what: str, name: str, where: str, protocol: "type[T]", error: "type[Exception]",
               lacks: str) -> T:
    """The `what` registered as `name` at `where` ("module:attribute"),
    imported and held to its protocol: every registry loads its entries
    this one way, so a broken entry point reads the same whichever it is
    (`error`, naming it, where it points and what it lacks)."""
    try:
        found = load(where)
    except (ImportError, AttributeError) as exc:
        raise error(f"{what} {name!r} ({where}) cannot be loaded: {exc}") from exc
    if not isinstance(found, protocol):
        raise error(f"{what} {name!r} ({where}) {lacks}")
    return found
