"""One memo: a value made once per key by its first caller, the others waiting for it.

Runs that several cases or scenarios would each make are made once and
shared: a golden run by the scenarios of a bench, the resume of one
checkpoint directory by the cases that leave it (`pipeline.resumes`), the
undelayed run of a stop, a baseline's cold twin. What they share is one
rule, kept here: callers of a key wait for the first one's value (or its
exception: a failure is not run again), callers of other keys go on, and a
caller can tell whose run it got, which a report names.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Callable, Hashable, Optional, TypeVar

T = TypeVar("T")


class Memo:
    """Each key's value, made once; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: dict[Hashable, tuple[str, Future]] = {}

    def once(self, key: Hashable, make: Callable[[], T], by: str = "") -> tuple[T, Optional[str]]:
        """The value of `key`, made by `make` if no caller made it yet; and
        who made it (the `by` of the first caller) when that is not this
        call (it made it, or is making it: this call waits for it)."""
        with self._lock:
            found = self._made.get(key)
            if found is None:
                future: Future = Future()
                self._made[key] = (by, future)
        if found is not None:
            first, future = found
            return future.result(), first
        try:
            future.set_result(make())
        except BaseException as exc:
            future.set_exception(exc)
            raise
        return future.result(), None

    def __len__(self) -> int:
        return len(self._made)

    def __repr__(self) -> str:
        return f"Memo({len(self)} made)"

