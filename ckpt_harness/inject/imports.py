"""Code that runs right after a module first ran: how probes wrap what a job or script imports later.

A probe must not import a framework itself (a script that never uses
transformers must not pay for it, and an import can change what the code
under test sees), so it asks to be called once the code under test imported
it: now, if it is imported already; else right after the module's own code
ran, at its first import, before the importer gets it back.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any, Callable

#: Module name -> what runs once it has run.
_hooks: dict[str, list[Callable[[Any], None]]] = {}


def when_imported(name: str, hook: Callable[[Any], None]) -> None:
    """Call `hook(module)` once module `name` has run: now if it has."""
    module = sys.modules.get(name)
    if module is not None:
        hook(module)
        return
    _hooks.setdefault(name, []).append(hook)
    if not any(isinstance(f, _PostImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImport())


class _PostImport(importlib.abc.MetaPathFinder):
    """Runs a module's hooks right after the module itself ran, at its first import."""

    def __init__(self) -> None:
        self.finding: set[str] = set()

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _hooks or name in self.finding:
            return None
        self.finding.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.finding.discard(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _HookedLoader(spec.loader, name)
        return spec


class _HookedLoader(importlib.abc.Loader):
    def __init__(self, inner: Any, name: str):
        self.inner, self.name = inner, name

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.inner.exec_module(module)
        for hook in _hooks.pop(self.name, ()):
            hook(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, get_source, ...
        return getattr(self.inner, name)


__all__ = ["when_imported"]
