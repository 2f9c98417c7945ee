"""The harness's own errors, in two families that callers treat differently.

- `UsageError`: the input is wrong (a setting, a job, a scenario file). The
  command exits 2, pytest reports a usage error, nothing has run yet. It is
  a `ValueError` too, so plain Python callers can catch it as one.
- every other `HarnessError`: the harness could not do its own part for one
  case (model a power loss, start a group). That case becomes ERROR and the
  rest of the exploration or matrix goes on; it is never a FAIL, which is
  reserved for a property the checkpointing under test broke.

Torch-free: every layer, the launcher included, may import it.
"""

from __future__ import annotations

import difflib
import signal
from typing import Iterable


def did_you_mean(given: str, known: Iterable[str]) -> str:
    """" (did you mean 'torch_save'?)" for a name close to one of `known`, else ""."""
    close = difflib.get_close_matches(given, list(known), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


class HarnessError(Exception):
    """Base of every error the harness raises on purpose."""


class UsageError(HarnessError, ValueError):
    """Bad input; the message says what to change."""


class ConfigError(UsageError):
    """A setting out of range, of the wrong type, or inconsistent with another."""


class JobError(UsageError):
    """A job that cannot be run, with what to do about it."""


class ScenarioError(UsageError):
    """A scenario file that cannot be run; the message says which key to fix."""


class Unavailable(UsageError):
    """This machine cannot run it (no GPUs for nccl, a framework not
    installed): the plugin skips, the matrix lists the job as not run, the
    command exits 2 with what to install. Never a verdict on the job."""


class BackendUnavailable(Unavailable):
    """The requested backend cannot run on this machine."""


class FrameworkMissing(Unavailable):
    """A framework the job needs is not installed; the message names the extra to install."""


class ModelError(HarnessError):
    """The harness cannot model or judge this case (e.g. the durability model
    meets an operation it has no rule for): that case is an ERROR."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived: stop as on Ctrl-C (`cli.main` raises it on
    SIGTERM too, so every command cleans up the same way). `signum` makes the
    exit code, 128 + signum, as a shell reports a command a signal stopped."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


def signal_of(exc: KeyboardInterrupt) -> int:
    """The signal behind an interruption: a plain KeyboardInterrupt is SIGINT's."""
    return getattr(exc, "signum", signal.SIGINT)
