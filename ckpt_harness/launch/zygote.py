"""The warm fork server ("zygote") that ranks are forked from.

Importing torch costs 1-2 s per process; forking a process that already did
costs tens of milliseconds. So one long-lived process per harness imports
torch, torch.distributed.checkpoint and whatever a job asks to preload, and
forks ranks on request. It never runs a tensor op itself: a parent whose
OpenMP pool has started deadlocks every forked child in libgomp.

It runs as ``python -m ckpt_harness.launch.zygote FD PARENT_PID`` and talks
over the socket FD with `_wire` frames:

- harness → zygote: ``{"op": "spawn", "group": id, "ranks": [...], ...}``,
  ``{"op": "fork"}``, ``{"op": "shutdown"}``;
- zygote → harness: ``{"op": "spawned", "group", "pids"}``,
  ``{"op": "error", "group", "message"}``, ``{"op": "done", "group", "rank",
  "failed"}`` when a rank finished its entry and parked, ``{"op": "blocked",
  "group", "rank"}`` when it (or a process it spawned) is about to block for
  good (`rank.report_blocked`), ``{"op": "exit", "group", "rank", "code",
  "signal"}`` when a rank process ended.

A harness that runs several groups at once needs a server per group. Only
the first imports torch: the others are forks of it (``fork``), each on a
socket of its own whose other end is handed to the harness with the reply
(4 bytes, the new server's pid, and the socket as SCM_RIGHTS ancillary
data). Such a server is the zygote in every way but its parent, with which
it dies; the first server then runs no group itself, so what a fork
inherits is the imports, never another group's preloads or ranks.

Ranks are put in their own process group (so a kill reaches whatever they
spawned) and die with the zygote, which dies with the harness.
"""

from __future__ import annotations

import gc
import importlib
import os
import select
import signal
import socket
import struct
import sys
import traceback
from typing import NoReturn, Optional

from ckpt_harness.launch import _proc, _wire, preimport

#: Imported once here so no rank pays for them. torch._dynamo is pulled in by
#: the first optimizer step of a fresh process (~0.7 s) otherwise.
WARM_MODULES = (
    "numpy",
    "torch",
    "torch.distributed",
    "torch.distributed.checkpoint",
    "torch.distributed.checkpoint.state_dict",
    "torch.distributed.fsdp",
    "torch.nn.parallel",
    "torch.optim",
    "torch._dynamo",
    "ckpt_harness.launch.rank",
)
#: The reply to ``fork``: the new server's pid (-1: the fork failed), its socket as ancillary data.
FORKED = struct.Struct("!i")


class Zygote:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        # pidfd -> (group, rank, pid); status pipe fd -> (group, rank)
        self.pidfds: dict[int, tuple[str, int, int]] = {}
        self.status_fds: dict[int, tuple[str, int]] = {}
        #: (warm-up, rank) -> a warmed template server's socket; None: warm-up failed
        self.templates: dict[tuple[str, int], Optional[socket.socket]] = {}
        #: pidfd -> pid of each server forked from this one (`fork`), reaped when it ends
        self.servers: dict[int, int] = {}

    def serve(self) -> None:
        while True:
            templates = [t for t in self.templates.values() if t is not None]
            readable, _, _ = select.select([self.sock, *self.pidfds, *self.status_fds, *templates, *self.servers],
                                           [], [])
            for fd in readable:
                if fd is self.sock:
                    if not self._handle_request():
                        return
                elif fd in self.servers:
                    os.waitpid(self.servers.pop(fd), 0)
                    os.close(fd)
                elif fd in self.status_fds:
                    self._handle_status(fd)
                elif fd in self.pidfds:
                    self._reap(fd)
                elif isinstance(fd, socket.socket):
                    self._relay(fd)

    def _handle_request(self) -> bool:
        try:
            message = _wire.recv(self.sock)
        except EOFError:  # the harness is gone: take every rank with us
            self._kill_all()
            return False
        if message["op"] == "shutdown":
            self._kill_all()
            return False
        if message["op"] == "spawn":
            self._spawn(message)
        elif message["op"] == "fork":
            self._fork_server()
        return True

    def _fork_server(self) -> None:
        """Another server, forked from this one, for a group run at the same
        time as others: the reply is its pid and its socket (-1 and none if
        the fork failed, the reason in the log)."""
        theirs, mine = socket.socketpair()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError:
            traceback.print_exc()
            socket.send_fds(self.sock, [FORKED.pack(-1)], [])
            theirs.close()
            mine.close()
            return
        if pid == 0:  # the new server; never returns
            theirs.close()
            self._close_inherited()
            _proc.die_with_parent(os.getppid())
            _serve_ready(mine)
        mine.close()
        socket.send_fds(self.sock, [FORKED.pack(pid)], [theirs.fileno()])
        theirs.close()
        self.servers[os.pidfd_open(pid)] = pid

    def _spawn(self, request: dict) -> None:
        group = request["group"]
        try:
            _prepare(request)
        except BaseException:
            _wire.send(self.sock, {"op": "error", "group": group, "message": traceback.format_exc()})
            return
        pids = []
        sys.stdout.flush()
        sys.stderr.flush()
        for spec in request["ranks"]:
            pid = self._fork_from_template(request, spec) if request.get("warmup") else None
            if pid is not None:
                pids.append(pid)
                continue
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:  # the rank; never returns
                os.close(read_fd)
                self._close_inherited()
                from ckpt_harness.launch import rank

                rank.become_rank(spec, request, write_fd, zygote_pid=os.getppid())
            os.close(write_fd)
            try:
                os.setpgid(pid, pid)  # also done in the child; whoever runs first wins
            except OSError:
                pass
            pidfd = os.pidfd_open(pid)
            self.pidfds[pidfd] = (group, spec["rank"], pid)
            self.status_fds[read_fd] = (group, spec["rank"])
            pids.append(pid)
        _wire.send(self.sock, {"op": "spawned", "group": group, "pids": pids, "notes": preimport.pending()})

    # -- warmed templates --------------------------------------------------------
    def _fork_from_template(self, request: dict, spec: dict) -> Optional[int]:
        """Have the template warmed for this rank fork it; None if there is none.

        A template is a child server that ran the job's warm-up as this very
        rank (caches such as DTensor's local-shard offsets depend on the
        rank), so each rank inherits caches that are right for it.
        """
        key = (repr(request["warmup"]), spec["rank"])
        if key not in self.templates:
            self.templates[key] = self._start_template(request, spec["rank"])
        template = self.templates[key]
        if template is None:
            return None
        _wire.send(template, {**request, "ranks": [spec], "warmup": None, "preload": []})
        while True:  # relay what the template says about other groups meanwhile
            try:
                message = _wire.recv(template)
            except EOFError:
                self.templates[key] = None
                return None
            if message["op"] == "spawned" and message["group"] == request["group"]:
                return message["pids"][0]
            if message["op"] == "error" and message["group"] == request["group"]:
                self.templates[key] = None
                return None
            _wire.send(self.sock, message)

    def _start_template(self, request: dict, rank: int) -> Optional[socket.socket]:
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            ours.close()
            self._close_inherited()
            _proc.die_with_parent(os.getppid())
            code = 0
            try:
                from ckpt_harness.launch.rank import resolve

                ref, argument = request["warmup"]
                before = _threads()
                resolve(ref)(argument, rank)
                if _threads() > before:  # it would be missing, maybe mid-lock, in every fork
                    raise RuntimeError(f"warm-up {ref} left {_threads() - before} thread(s) running")
                Zygote(theirs).serve()
            except BaseException:
                traceback.print_exc()  # to the zygote's log; ranks are then forked cold
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        return ours

    def _relay(self, template: socket.socket) -> None:
        try:
            _wire.send(self.sock, _wire.recv(template))
        except EOFError:
            for key, value in self.templates.items():
                if value is template:
                    self.templates[key] = None
            template.close()

    def _handle_status(self, fd: int) -> None:
        group, rank = self.status_fds[fd]
        data = os.read(fd, 16)
        if data:
            from ckpt_harness.launch.rank import BLOCKED, DONE, FAILED

            for status in (data[i:i + 1] for i in range(len(data))):  # one byte each; a read may hold several
                if status == BLOCKED:
                    _wire.send(self.sock, {"op": "blocked", "group": group, "rank": rank})
                elif status in (DONE, FAILED):
                    _wire.send(self.sock, {"op": "done", "group": group, "rank": rank, "failed": status == FAILED})
                else:  # the pipe is shared with the rank's joined children: never take noise for an end
                    print(f"[ckpt_harness zygote] rank {rank}: unknown status byte {status!r}", file=sys.stderr)
        else:
            os.close(fd)
            del self.status_fds[fd]

    def _reap(self, pidfd: int) -> None:
        group, rank, pid = self.pidfds.pop(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        code, sig = _proc.describe_status(status)
        _wire.send(self.sock, {"op": "exit", "group": group, "rank": rank, "code": code, "signal": sig})

    def _close_inherited(self) -> None:
        """In a fresh child: drop the zygote's descriptors so EOFs stay honest."""
        self.sock.close()
        for fd in [*self.pidfds, *self.status_fds, *self.servers]:
            os.close(fd)
        for template in self.templates.values():
            if template is not None:
                template.close()
        self.pidfds, self.status_fds, self.templates, self.servers = {}, {}, {}, {}

    def _kill_all(self) -> None:
        for _, _, pid in self.pidfds.values():
            _proc.kill_group(pid)


def _threads() -> int:
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1


def _prepare(request: dict) -> None:
    """Make the zygote ready for a group: its sys.path, env, the module of
    the ranks' entry (one that does not import is the launch's error: no
    rank could run) and the preloads. A preload that raises is skipped with
    a note (`preimport`): the ranks import it themselves if they need it,
    and one that cannot fails there, with its own traceback."""
    for entry in reversed(request.get("sys_path", [])):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    os.environ.update(request.get("env", {}))
    if request.get("entry"):
        importlib.import_module(request["entry"].partition(":")[0])
    preimport.preimport(request.get("preload", ()))
    gc.freeze()


def main(argv: list[str]) -> None:
    fd, parent = int(argv[0]), int(argv[1])
    _proc.die_with_parent(parent)
    # Ctrl-C is the harness's to handle; it tears the ranks down in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    preimport.preimport(WARM_MODULES)  # torch's own on a release without one of them: skipped, with a note
    import torch

    from ckpt_harness.launch import rank  # noqa: F401 - the harness's own: every rank runs it

    # Before any op could start OpenMP: forked ranks inherit one thread each,
    # which is also what N ranks sharing two cores want.
    torch.set_num_threads(1)
    # What is imported now lives as long as the server: out of the collector's
    # sight, so no forked rank pays for (or copies pages by) walking it.
    gc.freeze()
    _serve_ready(sock)


def _serve_ready(sock: socket.socket) -> NoReturn:
    """Say ready, serve until the harness is gone or says shutdown, exit."""
    import torch

    # str(): torch.__version__ is a TorchVersion, and unpickling one imports
    # torch into the harness (a second of CPU there, and as much again in
    # its finalization, which is what a Ctrl-C waits for).
    _wire.send(sock, {"op": "ready", "pid": os.getpid(), "torch": str(torch.__version__),
                      "notes": preimport.pending()})
    Zygote(sock).serve()
    # The ranks are killed; nothing of ours is left to clean up. Finalizing an
    # interpreter that holds torch costs a second of CPU or more, and the
    # harness waits for it on every exit, Ctrl-C included: on a loaded
    # machine that wait made Ctrl-C take longer than a user will sit through.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
