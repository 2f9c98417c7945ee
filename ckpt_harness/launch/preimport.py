"""Warm-ups that step aside: what the harness prepares for a framework never fails a run.

The harness pays per-process first-use costs once, before ranks exist: the
warm fork server (`zygote`) and the agent server (`agent`,
`warm_workers`) import modules a job or script will need (`Job.preload`,
`warm_workers.PRELOAD`), and a job module may do more at import in the warm
parent (`deepspeed_job.warm_deepspeed` loads DeepSpeed's CPU comm op and
imports what `deepspeed.initialize` imports lazily). Those lists are the
harness's guesses about one release of each framework: DeepSpeed 0.18 has
no ``deepspeed.module_inject.auto_ep_layer``, and naming it made every
DeepSpeed run on 0.18 an ERROR before it started (issue 64).

So every such step goes through here: a module that raises on import (any
`Exception`: missing, broken, a framework refusing its environment) is
simply not pre-imported, and the rest go on; a ranked process that needs it
imports it itself, as a cold start would, and fails there with its own
traceback if it really cannot. Each step aside is a note: said once per
process on stderr, as the harness's other set-up lines are (`jit.say`), and
a server hands its notes back to the harness with its next reply
(`pending`), which says them once (`tell`). A warm-up is an optimisation,
never a verdict.

Torch-free and cheap: the servers import it before torch.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Iterable, Optional

#: Notes said in this process and not yet handed to the harness (`pending`).
_pending: list[str] = []
#: Every note said in (or told to) this process: each is said once.
_said: set[str] = set()
#: Modules whose pre-import raised here: never tried again in this process (nor in its forks).
_failed: set[str] = set()


def _say(line: str) -> None:
    from ckpt_harness.jit import say  # lazily: jit imports `launch`, which imports this

    say(line)


def note(text: str) -> None:
    """Say `text` once in this process (stderr: a server's log, the harness's
    terminal) and keep it for the harness (`pending`)."""
    if text in _said:
        return
    _said.add(text)
    _pending.append(text)
    _say(text)


def _reason(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def attempt(what: str, step: Callable[..., Any], *args: Any) -> bool:
    """Run one warm-up `step(*args)`; if it raises, note that `what` was
    skipped and why, and go on. Whether it ran."""
    try:
        step(*args)
    except Exception as exc:  # noqa: BLE001 - a warm-up never fails a run: what it skipped is done cold
        note(f"warm-up skipped: {what} ({_reason(exc)}); the ranks do without it, as a cold start would")
        return False
    return True


def preimport(modules: Iterable[str]) -> list[str]:
    """Import each of `modules` that is not imported yet; one that raises is
    skipped with a note (once: not retried here), the rest still imported.
    The modules skipped."""
    skipped = []
    for module in modules:
        if module in sys.modules:
            continue
        if module in _failed or not attempt(f"pre-importing {module}", importlib.import_module, module):
            _failed.add(module)
            skipped.append(module)
    return skipped


def pending() -> list[str]:
    """In a server: the notes said since the last call, to send with its reply."""
    out = list(_pending)
    _pending.clear()
    return out


def tell(message: Optional[dict]) -> None:
    """In the harness: say the notes a server's reply carries, each once per process."""
    for text in (message or {}).get("notes", ()):
        if text not in _said:
            _said.add(text)
            _say(text)
