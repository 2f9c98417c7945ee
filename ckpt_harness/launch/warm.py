"""A warm start for the process a rank spawns to save: DCP's checkpoint process.

`dcp.async_save(..., async_checkpointer_type=PROCESS)` has each rank spawn
one long-lived process (multiprocessing's "spawn": a fresh interpreter) and
hand it every save. A fresh interpreter imports torch and DCP before it
serves its first save: 3.4-3.7 s of CPU per rank per run, where the save
itself takes a tenth of a second (`docs/speed.md`, "The expensive rows").

So a rank forks a *template* of itself as it starts (`prepare`), before it
has a thread, a process group or any state of the job: a copy of the warm
fork server's child with torch already imported, parked on a socket. When
the job's framework spawns, the spawn is served from it (`Multiprocessing`): the
rank pickles the process exactly as spawn does (its preparation data and
the `Process`, the descriptors a `Connection` or `ChildLink` carries passed
as SCM_RIGHTS), sends its environment as it is at that moment, and the
template takes them on: the environment, `sys.path`, `sys.argv`, the
working directory and the main module as spawn's `prepare` sets them, then
the process's `_bootstrap`. It is the rank's child, in the rank's process
group (so the harness's teardown ends it, and `Popen.poll` and `wait` are
fork's), and no longer dies with the rank once it runs (a spawned process
outlives a rank killed mid-save and goes on writing until it notices; only
the parked template dies with it).

What differs from a fresh interpreter, and so what `--cold-start` and the
cold confirmation of every case that does not pass exist for
(`docs/probes.md`, "A warm checkpoint process"): what was imported before
the code under test ran (the fork server's `WARM_MODULES` and the job's
preloads, among them the job's own module, whose import-time code already
ran there), state those imports read from the environment then (torch's
thread count, set to 1), `sys.stdout` line-buffered as the rank's, and the
descriptors the rank held as it started. One template per rank and run:
a second spawn in the same rank (its checkpoint process died and DCP
starts another) is a real spawn.
"""

from __future__ import annotations

import io
import os
import pickle
import socket
import struct
import sys
from multiprocessing import context as mp_context
from multiprocessing import popen_fork, process, reduction, resource_tracker, spawn, util
from typing import Any, NoReturn, Optional

from ckpt_harness.launch import _proc

#: The header of a spawn request: the length of its payload (the descriptors ride with it).
_HEADER = struct.Struct("!Q")
#: Descriptors a request may carry: the two sentinels, the resource tracker's, and the process's own.
_MAX_FDS = 64


class _Template:
    """The rank's end of its parked template."""

    def __init__(self, pid: int, sock: socket.socket):
        self.pid = pid
        self.sock = sock


_template: Optional[_Template] = None
#: In a process started from a template: the descriptors its spawn carried, by index (`_DupFd`).
_inherited: list[int] = []


def prepare(marker: "os.PathLike[str] | str") -> None:
    """In a rank that has no thread yet: fork its template, which makes
    `marker` once it serves a spawn (so a run knows it started one warm). A
    process with a thread is not forked (the thread would be missing in the
    copy, maybe in the middle of holding a lock): its spawns stay cold."""
    global _template
    if _threads() != 1:
        return
    ours, theirs = socket.socketpair()
    rank = os.getpid()
    pid = os.fork()
    if pid == 0:
        ours.close()
        _park(theirs, rank, os.fspath(marker))
    theirs.close()
    _template = _Template(pid, ours)


def _threads() -> int:
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 0


# -- the template -------------------------------------------------------------------------------
def _park(sock: socket.socket, rank: int, marker: str) -> NoReturn:
    """Wait for the one spawn this template serves; leave when the rank is gone."""
    code = 1
    try:
        _proc.die_with_parent(rank)  # parked, it is nobody's process: it goes with the rank
        header, fds, _, _ = socket.recv_fds(sock, _HEADER.size, _MAX_FDS)
        if len(header) < _HEADER.size:  # EOF: the rank closed its end, or left
            code = 0
            return  # to the finally
        (size,) = _HEADER.unpack(header)
        payload = bytearray()
        while len(payload) < size:
            chunk = sock.recv(min(size - len(payload), 1 << 20))
            if not chunk:
                return
            payload += chunk
        sock.close()
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT, 0o644))
        code = _become(bytes(payload), fds)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _become(payload: bytes, fds: list[int]) -> int:
    """Take on the spawn the rank asked for: what `multiprocessing.spawn._main` does in a fresh interpreter."""
    _proc.outlive_parent()
    environ, data = pickle.loads(payload)
    sentinel, parent_sentinel, tracker, *inherited = fds
    del sentinel  # held open until this process ends: the rank's `Popen.sentinel` reads EOF then
    _inherited[:] = inherited
    os.environ.clear()
    os.environ.update(environ)
    resource_tracker._resource_tracker._fd = tracker  # as `spawn_main` is handed it
    stream = io.BytesIO(data)
    current = process.current_process()
    current._inheriting = True
    try:
        spawn.prepare(reduction.pickle.load(stream))
        process_obj = reduction.pickle.load(stream)
    finally:
        del current._inheriting
    return process_obj._bootstrap(parent_sentinel=parent_sentinel)


# -- the rank's side: a spawn served from the template ---------------------------------------
class _DupFd:
    """A descriptor a spawn carries, as the started process finds it (`reduction.DupFd`)."""

    def __init__(self, index: int):
        self.index = index

    def detach(self) -> int:
        return _inherited[self.index]


class _Popen(popen_fork.Popen):
    """Spawn's pickling, fork's process handling: the template is the rank's child."""

    method = "spawn"
    DupFd = _DupFd

    def __init__(self, process_obj: Any):
        self._fds: list[int] = []
        super().__init__(process_obj)

    def duplicate_for_child(self, fd: int) -> int:
        self._fds.append(fd)
        return len(self._fds) - 1

    def _launch(self, process_obj: Any) -> None:
        global _template
        template, _template = _template, None
        assert template is not None
        tracker = resource_tracker.getfd()  # started at the first spawn, as spawn's own Popen does
        data = io.BytesIO()
        mp_context.set_spawning_popen(self)
        try:
            reduction.dump(spawn.get_preparation_data(process_obj._name), data)
            reduction.dump(process_obj, data)
        finally:
            mp_context.set_spawning_popen(None)
        payload = pickle.dumps((dict(os.environ), data.getvalue()))
        parent_r, child_w = os.pipe()
        child_r, parent_w = os.pipe()
        try:
            socket.send_fds(template.sock, [_HEADER.pack(len(payload))], [child_w, child_r, tracker, *self._fds])
            template.sock.sendall(payload)
        finally:
            os.close(child_w)
            os.close(child_r)
            template.sock.close()
        self.pid = template.pid
        self.sentinel = parent_r
        self.finalizer = util.Finalize(self, util.close_fds, (parent_r, parent_w))


class _WarmProcess(mp_context.SpawnProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        if _template is not None:
            return _Popen(process_obj)
        return mp_context.SpawnProcess._Popen(process_obj)


class _WarmSpawnContext(mp_context.SpawnContext):
    """Spawn, served from the rank's template while it has one."""

    Process = _WarmProcess


_WARM_SPAWN = _WarmSpawnContext()


class Multiprocessing:
    """A stand-in for the `multiprocessing` module a framework spawns through:
    its "spawn" context is served warm (`_WarmSpawnContext`); everything
    else is the module's own."""

    def __init__(self, module: Any):
        self._module = module

    def get_context(self, method: Optional[str] = None) -> Any:
        return _WARM_SPAWN if method == "spawn" else self._module.get_context(method)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

