"""Naming a job so that a freshly forked rank can find it again.

A job reaches the harness as a `Job` subclass (pytest fixture), a built-in
name (``dcp``) or ``module:Class`` (CLI, ``--ckpt-job``). Ranks receive a
`JobRef` and import the class themselves; the file path is a fallback for
test modules that pytest imported under a name no one else can import.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Optional, Union

from ckpt_harness.errors import FrameworkMissing, JobError, did_you_mean
from ckpt_harness.job import Job
from ckpt_harness.jobs import registry

__all__ = ["JobError", "JobRef", "load", "resolve"]


@dataclasses.dataclass(frozen=True)
class JobRef:
    module: str
    qualname: str
    file: Optional[str] = None
    #: How the user named it; what repro lines print.
    spec: str = ""

    @property
    def display(self) -> str:
        return self.spec or f"{self.module}:{self.qualname}"

    @property
    def root(self) -> Optional[str]:
        """The sys.path entry that makes `module` importable from `file`, if
        it is not importable as installed (a test module, a user's repo)."""
        if self.file is None or "site-packages" in self.file:
            return None
        path = Path(self.file).resolve()
        parts = self.module.split(".")
        if path.name == "__init__.py":
            path = path.parent
        for _ in parts:
            path = path.parent
        return str(path)


def resolve(job: Union[str, type]) -> tuple[JobRef, type[Job]]:
    """Check that `job` names a runnable Job; return its ref and class."""
    if isinstance(job, str):
        spec = job
        named = registry()
        target = named.get(job, job)
        if ":" not in target:
            raise JobError(
                f"unknown job {job!r}{did_you_mean(job, named)}: use one of {', '.join(named)} "
                "or module:Class for your own Job subclass"
            )
        module, _, qualname = target.partition(":")
        ref = JobRef(module, qualname, spec=spec)
        cls = load(ref)
        if job not in named:  # so the repro line can set PYTHONPATH
            ref = dataclasses.replace(ref, file=getattr(sys.modules.get(module), "__file__", None))
    elif isinstance(job, type):
        cls = job
        if "<locals>" in cls.__qualname__:
            raise JobError(
                f"{cls.__qualname__} is defined inside a function; define Job classes at "
                "module level so every rank can import them"
            )
        module = sys.modules.get(cls.__module__)
        ref = JobRef(
            cls.__module__, cls.__qualname__, getattr(module, "__file__", None),
            spec=f"{cls.__module__}:{cls.__qualname__}",
        )
    else:
        raise JobError(f"expected a Job subclass or 'module:Class', got {job!r}")
    if not (isinstance(cls, type) and issubclass(cls, Job)):
        raise JobError(f"{ref.display} is not a subclass of ckpt_harness.Job")
    problems = cls.contract_errors()
    if problems:
        raise JobError(f"{ref.display} cannot run: " + "; ".join(problems))
    missing = cls.missing_frameworks()
    if missing:
        hints = sorted(set(missing.values()))
        raise FrameworkMissing(
            f"job {ref.display} needs {', '.join(sorted(missing))}, which is not installed here: "
            f"pip install {' '.join(repr(h) if '[' in h else h for h in hints)}")
    return ref, cls


def load(ref: JobRef) -> type:
    """Import the class a ref names; used by the harness and by every rank."""
    try:
        module = importlib.import_module(ref.module)
    except ImportError as exc:
        if ref.file is None:
            raise JobError(
                f"cannot import {ref.module!r} for job {ref.display}: {exc}. "
                "Is the module on sys.path (PYTHONPATH, or installed)?"
            ) from exc
        module = _load_file(ref)
    except Exception as exc:
        raise JobError(f"importing {ref.module!r} for job {ref.display} raised {exc!r}") from exc
    if ref.file is not None and not _same_file(getattr(module, "__file__", None), ref.file):
        module = _load_file(ref)  # another file answers to that module name
    target = module
    for part in ref.qualname.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise JobError(f"module {ref.module!r} has no attribute {ref.qualname!r}")
    return target


def _same_file(a: Optional[str], b: str) -> bool:
    try:
        return a is not None and Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def _load_file(ref: JobRef):
    spec = importlib.util.spec_from_file_location(ref.module, ref.file)
    if spec is None or spec.loader is None:
        raise JobError(f"cannot load {ref.file} for job {ref.display}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[ref.module] = module
    spec.loader.exec_module(module)
    return module
