"""A stack request waits for the whole dump, also from a writer stalled halfway.

Real processes and real faulthandler dumps; the stalled writer replays a real
dump in two halves with a pause between, as a worker descheduled in the middle
of its signal handler on a loaded machine wrote one (a CI run of 422e0b1
reported a stack that ended in ``File``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckpt_harness.launch import _proc
from ckpt_harness.launch.stacks import SETTLE_BUSY, SETTLE_UNSURE, StackRequest, await_answers, ends_whole

#: A sleeping main thread and a sleeping helper thread, dumping on SIGUSR1.
DUMPER = """
import faulthandler, signal, sys, threading, time
faulthandler.register(signal.SIGUSR1, file=open(sys.argv[1], "a"), all_threads=True, chain=False)
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("ready", flush=True)
time.sleep(60)
"""

#: Writes a given dump in two halves on SIGUSR1, `pause` seconds apart
#: asleep, or (a "go" file as argv[4]) runnable in between until that file
#: appears: a process descheduled in its handler, waiting for a core.
STALLED = """
import os, signal, sys, time
out, dump, pause = sys.argv[1], open(sys.argv[2]).read(), float(sys.argv[3])
go = sys.argv[4] if len(sys.argv) > 4 else None
def answer(*_):
    half = dump.index("\\n", len(dump) // 2) + 1
    with open(out, "a") as f:
        f.write(dump[:half]); f.flush()
        while go is not None and not os.path.exists(go):
            pass
        time.sleep(0 if go else pause)
        f.write(dump[half:])
signal.signal(signal.SIGUSR1, answer)
print("ready", flush=True)
while True:
    time.sleep(60)
"""


def _start(tmp_path: Path, code: str, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture
def real_dump(tmp_path) -> str:
    out = tmp_path / "real.txt"
    proc = _start(tmp_path, DUMPER, str(out))
    try:
        request = StackRequest(proc.pid, out)
        request.send()
        await_answers([request], grace=30, poll=0.01)
        return request.text()
    finally:
        proc.kill()
        proc.wait()


def test_a_real_dump_ends_whole_and_none_of_its_beginnings_does(real_dump):
    assert real_dump.count("hread 0x") == 2, real_dump  # both threads, the main one last
    assert ends_whole(real_dump)
    lines = real_dump.splitlines(keepends=True)
    for n in range(1, len(lines)):
        assert not ends_whole("".join(lines[:n])), lines[:n]
    assert not ends_whole(real_dump.rstrip("\n") + '  File "')  # cut inside a line


def test_a_dump_cut_by_faulthandler_at_its_frame_limit_ends_whole():
    assert ends_whole('Thread 0x1 (most recent call first):\n  File "a.py", line 1 in f\n  ...\n')


def test_a_request_waits_for_a_writer_stalled_in_the_middle_of_its_dump(tmp_path, real_dump):
    """With the rule it replaced (the file unchanged for one poll) the half
    before the pause was taken; the pause is far longer than that poll and
    shorter than `SETTLE_UNSURE`."""
    canned = tmp_path / "dump.txt"
    canned.write_text(real_dump)
    out = tmp_path / "stalled.txt"
    proc = _start(tmp_path, STALLED, str(out), str(canned), str(SETTLE_UNSURE / 3))
    try:
        request = StackRequest(proc.pid, out)
        request.send()
        await_answers([request], grace=30, poll=0.01)
        assert request.text() == real_dump
    finally:
        proc.kill()
        proc.wait()


def test_a_half_dump_is_not_taken_while_its_writer_is_runnable(tmp_path, real_dump):
    """A worker descheduled in its handler stays runnable (R) past
    `SETTLE_UNSURE`: its half dump is not taken while it is (up to
    `SETTLE_BUSY`), and the whole one is once it is written."""
    canned = tmp_path / "dump.txt"
    canned.write_text(real_dump)
    out, go = tmp_path / "spinning.txt", tmp_path / "go"
    proc = _start(tmp_path, STALLED, str(out), str(canned), "0", str(go))
    try:
        request = StackRequest(proc.pid, out)
        request.send()
        deadline = time.monotonic() + 30
        while not request.text() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert request.text(), "the writer never wrote its first half"
        await_answers([request], grace=2 * SETTLE_UNSURE, poll=0.01)
        assert not request.answered(), request.text()
        go.touch()
        await_answers([request], grace=30, poll=0.01)
        assert request.text() == real_dump
        assert SETTLE_BUSY > 2 * SETTLE_UNSURE
    finally:
        proc.kill()
        proc.wait()


def test_a_stopped_process_is_continued_for_its_dump_and_stopped_again(tmp_path):
    out = tmp_path / "stopped.txt"
    proc = _start(tmp_path, DUMPER, str(out))
    try:
        proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not _proc.is_stopped(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        request = StackRequest(proc.pid, out)
        request.send()
        assert request.stopped
        await_answers([request], grace=30, poll=0.01, on_answer=StackRequest.stop_again)
        assert ends_whole(request.text())
        while not _proc.is_stopped(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _proc.is_stopped(proc.pid)
    finally:
        proc.kill()
        proc.wait()
