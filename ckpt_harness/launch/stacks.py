"""Asking a process for its stack, and knowing when the answer is whole.

Both launchers (`group.py` for Job ranks, `elastic.py` for torchrun's
workers) ask a hung process for an all-threads `faulthandler` dump and its
flight recorder, and wait for both. faulthandler writes a dump in many
small writes from a signal handler and says nowhere that it is done, so a
file that stopped growing for a moment may hold half a dump: under a load
of 8 on two cores a worker was descheduled for longer than the harness's
settle time in the middle of its first thread, and the report showed a
stack ending in ``File`` (a clean-clone CI run of 422e0b1).

What makes a dump whole: CPython lists the threads newest first, so the
main thread comes last, and its outermost frame is the interpreter's entry
(``<module>`` of the script or of ``python -c``, or runpy's
``_run_module_as_main`` for ``python -m``); past 100 frames or threads the
dump ends in faulthandler's ``...``. A dump that ends on such a line and
stopped growing is taken at once. One that does not (another thread
printed to the same log after it, or the process was stalled halfway) is
taken once it stopped growing for `SETTLE_UNSURE` and the process is not
runnable: a process descheduled in its handler is in state R, waiting for a
core, and one that is done waits again where it hung (S) or is gone. A
process that stays runnable (a rank spinning in C) is waited for up to
`SETTLE_BUSY`, which bounds what a log of that kind costs. (A clean-clone
CI run on 2026-11-29 took a torchrun worker's dump stalled for over a
second after its first frame: the skipped-barrier report lost its stack.)
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

from ckpt_harness.launch import _proc
from ckpt_harness.launch.rank import STACK_SIGNAL

#: A whole dump that stopped growing for this long is taken.
SETTLE = 0.05
#: A dump that does not end on an outermost frame is taken after this long unchanged, the process not runnable.
SETTLE_UNSURE = 1.0
#: ... or after this long unchanged, runnable or not.
SETTLE_BUSY = 5.0

_OUTERMOST = re.compile(r'(?:^  File ".*", line \d+ in (?:<module>|_run_module_as_main)|^  \.\.\.)\s*\Z',
                        re.MULTILINE)


def ends_whole(text: str) -> bool:
    """Does `text` end where a faulthandler dump of every thread ends?"""
    return text.endswith("\n") and _OUTERMOST.search(text) is not None


@dataclasses.dataclass
class StackRequest:
    """One process asked for its stack, appended to `file`."""

    pid: int
    file: Path
    #: The flight recorder's dump it also writes, if it keeps one.
    recorder: Optional[Path] = None
    #: Sent before the stack signal (the recorder's), if any.
    first: Optional[signal.Signals] = None
    #: Where `file` ended when asked: the answer is what follows.
    offset: int = 0
    #: Stopped (SIGSTOP) when asked: continued for its dumps.
    stopped: bool = False
    _size: int = 0
    _grew: float = 0.0

    def send(self) -> None:
        """Ask; a stopped process takes no signal until continued, so continue it."""
        self.offset = self._size = _size(self.file)
        self._grew = time.monotonic()
        self.stopped = _proc.is_stopped(self.pid)
        if self.recorder is not None:
            self.recorder.unlink(missing_ok=True)
        try:
            if self.first is not None:
                os.kill(self.pid, self.first)
            os.kill(self.pid, STACK_SIGNAL)
            if self.stopped:
                os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def answered(self) -> bool:
        """Its stack is whole and its recorder written."""
        size, now = _size(self.file), time.monotonic()
        if size != self._size:
            self._size, self._grew = size, now
            return False
        if size <= self.offset or (self.recorder is not None and not self.recorder.exists()):
            return False
        quiet = now - self._grew
        if quiet >= SETTLE and ends_whole(self.text()):
            return True
        return quiet >= SETTLE_BUSY or (quiet >= SETTLE_UNSURE and _proc.state(self.pid) != "R")

    def stop_again(self) -> None:
        """Stop it again if it was stopped, so none of its threads goes on."""
        if self.stopped:
            try:
                os.kill(self.pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass

    def text(self) -> str:
        """What it wrote after it was asked, as written ("" if nothing, or no file)."""
        try:
            with open(self.file, "rb") as f:
                f.seek(self.offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""


def await_answers(requests: Iterable[StackRequest], grace: float, poll: float,
                  cancelled: Callable[[], bool] = lambda: False,
                  on_answer: Callable[[StackRequest], None] = lambda r: None) -> None:
    """Wait until every request is answered or `grace` ran out; `on_answer`
    runs for each as soon as it is (for a stopped one: stop it again)."""
    waiting = list(requests)
    until = time.monotonic() + grace
    while waiting and time.monotonic() < until and not cancelled():
        time.sleep(poll)
        for r in list(waiting):
            if r.answered():
                waiting.remove(r)
                on_answer(r)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
