"""torch elastic agents started warm: ``torch.distributed.run``'s own ``__main__``, forked.

An agent is torchrun's Python process: it imports torch, rendezvouses, and
starts the workers as fresh interpreters. A bare ``torchrun`` spends most
of its first seconds importing torch (2.7 s before the script's first line
on the 2-core machine, `docs/speed.md`), in every run and on every node.
Here a server imports torch once per harness (once per ``OMP_NUM_THREADS``
its agents' workers get, `_Server`), and each agent is a fork of it that
then runs torchrun's ``__main__`` exactly as ``python -m
torch.distributed.run ARGS`` would: its arguments, the environment and
working directory the harness gives, its own session, stdin from /dev/null,
its output to the agent's log. The workers it starts are torchrun's to
start; unless the run starts cold, the agent's `Popen` of a worker is
served from a template it forks of itself as it starts
(`launch.warm_workers`), which is why the server also imports what a
worker imports before its script (`warm_workers.PRELOAD`), records what
those imports read from the environment, and runs with ``-u`` as
torchrun's workers do.

What a fork keeps that a fresh interpreter would not have, and why it does
not matter to an agent: `torch` itself is already imported (with the
environment the harness had when the server started; the agent's own
modules, ``torch.distributed.elastic`` and ``torch.distributed.run``, are
imported after the agent's environment is set, so e.g. ``LOGLEVEL`` reaches
torchrun's loggers as usual), and its parent is the server, not the
harness. The server forks from its only thread.

Lifetimes: the server dies with the harness thread that started it (the
parent-death signal, see `_Server`), each agent with the server, each
worker with its agent (`worker.py`). The server never reaps an agent until
the harness `release`\\ s it, so the pid (and process group) the harness
signals is the agent's for as long as the harness holds it.

Wire (`_wire` frames over a socketpair): harness → server ``{"op": "start",
"argv", "env", "cwd", "log"}``, ``{"op": "release", "pid"}``; server →
harness ``{"op": "started", "pid"}`` or ``{"op": "error", "message"}``,
``{"op": "released", "code"}``.
"""

from __future__ import annotations

import atexit
import gc
import os
import queue
import runpy
import select
import signal
import site
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Collection, Mapping, Optional

from ckpt_harness.launch import _proc, _wire, preimport, warm_workers
from ckpt_harness.launch.group import LaunchError
from ckpt_harness.launch.warm_workers import worker_threads

#: How long the server may take to import torch before the harness gives up
#: on it (a cold import under load takes tens of seconds here).
STARTUP_TIMEOUT = 120.0


# -- in the server -----------------------------------------------------------

def _serve(sock: socket.socket) -> None:
    children: set[int] = set()
    while True:
        try:
            message = _wire.recv(sock)
        except EOFError:  # the harness is gone: its agents go too
            for pid in children:
                _proc.kill_group(pid)
            return
        if message["op"] == "start":
            try:
                if message.get("warm_workers"):
                    warm_workers.preload(message.get("preload", ()))
                pid = _fork_agent(sock, message)
            except Exception:
                _wire.send(sock, {"op": "error", "message": traceback.format_exc()})
                continue
            children.add(pid)
            _wire.send(sock, {"op": "started", "pid": pid, "notes": preimport.pending()})
        elif message["op"] == "release":
            pid = message["pid"]
            children.discard(pid)
            _, status = os.waitpid(pid, 0)
            _wire.send(sock, {"op": "released", "code": _proc.describe_status(status)})
        elif message["op"] == "shutdown":
            for pid in children:
                _proc.kill_group(pid)
            return


def _fork_agent(sock: socket.socket, request: dict) -> int:
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    server = os.getpid()
    pid = os.fork()
    if pid == 0:  # the agent; never returns
        code = 1
        try:
            sock.close()
            os.setsid()  # a terminal's Ctrl-C reaches the harness only, as with Popen(start_new_session=True)
            _proc.die_with_parent(server)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(null)
            os.close(log)
            sys.stdin = open(0, closefd=False)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            signal.signal(signal.SIGINT, signal.default_int_handler)
            sys.argv = ["torchrun", *request["argv"]]
            if request.get("warm_workers"):
                warm_workers.start_template()  # the template's workers leave from here (`Become`)
            runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
            code = 0
        except warm_workers.Become:
            raise
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    os.close(log)
    return pid


def main(argv: list[str]) -> None:
    fd, parent = int(argv[0]), int(argv[1])
    _proc.die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the harness's to handle
    sock = socket.socket(fileno=fd)
    # What every agent, and every worker before its script, would otherwise import.
    warm_workers.prepare_server(lambda: preimport.preimport(warm_workers.PRELOAD))
    # Out of the collector's sight for as long as the server lives: no fork pays for walking it.
    gc.freeze()
    _wire.send(sock, {"op": "ready", "notes": preimport.pending()})
    _serve(sock)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # finalizing torch costs a second of CPU that nobody waits for


# -- in the harness ------------------------------------------------------------

class Agent:
    """One agent as the harness holds it: alive until its pidfd says otherwise."""

    def __init__(self, server: "_Server", pid: int):
        self.server, self.pid = server, pid
        self.pidfd: Optional[int] = os.pidfd_open(pid)
        self.code: Optional[tuple[Optional[int], Optional[int]]] = None

    def poll(self) -> Optional[int]:
        """None while the agent runs; else 0 (the exit code is its log's business)."""
        if self.pidfd is None or select.select([self.pidfd], [], [], 0)[0]:
            return 0
        return None

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the agent to end; whether it has."""
        return self.pidfd is None or bool(select.select([self.pidfd], [], [], max(0.0, timeout))[0])

    def kill_group(self) -> None:
        """SIGKILL the agent's process group (its workers lead sessions of their own)."""
        if self.pidfd is not None:
            _proc.kill_group(self.pid)

    def release(self) -> None:
        """Let the server reap the agent, killed first if it still runs: its
        pid may be reused from here on."""
        if self.pidfd is None:
            return
        if self.poll() is None:
            self.kill_group()
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        os.close(self.pidfd)
        self.pidfd = None
        self.code = self.server.release(self.pid)


def _path_for(python: str) -> list[str]:
    """The ``PYTHONPATH`` a server running `python` is given: this process's
    ``sys.path``, so that it imports what the harness imports, but for
    another interpreter (an environment of pinned releases, `launch.envs`)
    without this one's site directories: they would come before that
    environment's own packages and shadow its pins, and it reaches them
    itself, after its own (its ``.pth``)."""
    if python == sys.executable:
        return [p for p in sys.path if p]
    sites = {os.path.realpath(p) for p in (*site.getsitepackages(), site.getusersitepackages())}
    return [p for p in sys.path if p and os.path.realpath(p) not in sites]


class _Server:
    """An agent server of the harness, started on first use: one per
    interpreter (`python`: this one, or an environment's) and
    ``OMP_NUM_THREADS`` its agents' workers run under (`threads`), the value
    it imports torch with, so that they start warm (`warm_workers.worker_threads`)."""

    def __init__(self, threads: Optional[str], python: str = sys.executable) -> None:
        self.lock = threading.Lock()
        ours, theirs = socket.socketpair()
        # The server's log, read back only into the error of a server that failed: unlinked at
        # once, so that no exit of the harness (Ctrl-C ends it without finalizing) leaves it behind.
        fd, path = tempfile.mkstemp(prefix="ckpt-harness-agents-", suffix=".log")
        os.unlink(path)
        self.log_fd = fd
        self.proc = _proc.Child(
            # -u: the flags a worker forked from an agent has are the server's (`warm_workers`).
            [python, "-u", "-m", "ckpt_harness.launch.agent", str(theirs.fileno()), str(os.getpid())],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=fd, stderr=fd,
            start_new_session=True,
            env=warm_workers.server_env({**os.environ, "PYTHONPATH": os.pathsep.join(_path_for(python))}, threads),
        )
        theirs.close()
        self.sock = ours
        self.ready = False

    def start(self, argv: list[str], env: Mapping[str, str], log: Path, warm_workers: bool,
              preload: tuple[str, ...]) -> Agent:
        with self.lock:
            self._await_ready()
            reply = self._ask({"op": "start", "argv": argv, "env": dict(env), "cwd": os.getcwd(), "log": str(log),
                               "warm_workers": warm_workers, "preload": preload})
            if reply["op"] != "started":
                raise LaunchError(f"the agent server could not start torchrun:\n{reply.get('message')}")
            preimport.tell(reply)  # what the server's warm-up skipped (`launch.preimport`)
            return Agent(self, reply["pid"])

    def release(self, pid: int) -> Optional[tuple[Optional[int], Optional[int]]]:
        with self.lock:
            if self.proc.poll() is not None:
                return None
            return self._ask({"op": "release", "pid": pid}).get("code")

    def _await_ready(self) -> None:
        if self.ready:
            return
        if not select.select([self.sock], [], [], STARTUP_TIMEOUT)[0]:
            self.close()
            raise LaunchError(f"the agent server did not import torch within {STARTUP_TIMEOUT:g} s:\n{self._log()}")
        reply = self._recv()
        if reply.get("op") != "ready":
            raise LaunchError(f"the agent server did not start:\n{self._log()}")
        preimport.tell(reply)
        self.ready = True

    def _ask(self, message: dict) -> dict:
        try:
            _wire.send(self.sock, message)
        except OSError as exc:
            raise LaunchError(f"the agent server is gone ({exc}):\n{self._log()}") from None
        return self._recv()

    def _recv(self) -> dict:
        try:
            return _wire.recv(self.sock)
        except (EOFError, OSError):
            raise LaunchError(f"the agent server died:\n{self._log()}") from None

    def _log(self) -> str:
        try:
            size = os.fstat(self.log_fd).st_size
            return os.pread(self.log_fd, 4000, max(0, size - 4000)).decode(errors="replace")
        except OSError:
            return "(no log)"

    def close(self, wait: float = 5.0) -> None:
        _wire.shut_down(self.sock, self.proc, wait)
        self.sock.close()
        try:
            os.close(self.log_fd)
        except OSError:
            pass


class _Holder:
    """This process's servers, by the interpreter and thread count they
    serve, each started from one long-lived thread: the parent-death signal
    follows the *thread* that started a child, so a server started from a
    short-lived one would die with it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.servers: dict[tuple[str, Optional[str]], _Server] = {}
        self.owner = os.getpid()
        self.requests: "queue.Queue[tuple[tuple[str, Optional[str]], queue.Queue]]" = queue.Queue()
        self.thread: Optional[threading.Thread] = None

    def get(self, threads: Optional[str], exact: bool = True, python: str = sys.executable) -> _Server:
        """The server running `python` for workers of `threads`, started if
        need be; with `exact` false (workers started cold: any server of that
        interpreter starts them alike) any running one of it first."""
        key = (python, threads)
        with self.lock:
            if self.owner != os.getpid():  # a forked harness: the servers are the parent's
                self.servers, self.thread, self.owner, self.requests = {}, None, os.getpid(), queue.Queue()
            live = {k: s for k, s in self.servers.items() if s.proc.poll() is None}
            if key not in live and not exact:
                for (theirs, _), server in live.items():
                    if theirs == python:
                        return server
            if key not in live:
                if self.thread is None:
                    self.thread = threading.Thread(target=self._start_forever, name="ckpt-harness-agents",
                                                   daemon=True)
                    self.thread.start()
                reply: queue.Queue = queue.Queue()
                self.requests.put((key, reply))
                server = reply.get()
                if isinstance(server, BaseException):
                    raise server
                self.servers[key] = server
            return self.servers[key]

    def _start_forever(self) -> None:
        while True:
            (python, threads), reply = self.requests.get()
            try:
                reply.put(_Server(threads, python))
            except BaseException as exc:
                reply.put(exc)

    def close(self, keep: Collection["_Server"] = ()) -> None:
        with self.lock:
            mine = self.owner == os.getpid()
            if mine:
                for server in self.servers.values():
                    if server not in keep:
                        server.close(wait=1.0)
            self.servers = {key: s for key, s in self.servers.items() if mine and s in keep}


_holder = _Holder()


def start_agent(argv: list[str], env: Mapping[str, str], log: Path, nproc_per_node: int,
                warm_workers: bool = False, preload: tuple[str, ...] = (), python: str = sys.executable) -> Agent:
    """Start ``torchrun ARGV`` (as a warm fork of a server running `python`)
    with `env`, in this process's working directory, its output to `log`;
    its `nproc_per_node` workers forked from a template of it if
    `warm_workers` (`launch.warm_workers`), which has imported `preload`
    too, else fresh (torchrun starts them with its own interpreter: `python`)."""
    server = _holder.get(worker_threads(env, nproc_per_node), exact=warm_workers, python=python)
    return server.start(argv, env, log, warm_workers, preload)


def prestart(nproc_per_node: int, python: str = sys.executable) -> None:
    """Start the server (running `python`) for runs of `nproc_per_node`
    workers now, so its torch import overlaps the caller's start-up."""
    _holder.get(worker_threads(os.environ, nproc_per_node), python=python)


def running() -> frozenset:
    """The servers running now: what `shutdown(keep=...)` is told to leave."""
    with _holder.lock:
        return frozenset(_holder.servers.values())


def shutdown(keep: Collection[_Server] = ()) -> None:
    """Stop the servers but those in `keep` (`running`); agents still running die with them."""
    _holder.close(keep)


atexit.register(shutdown)

if __name__ == "__main__":
    worker: Optional[warm_workers.Become] = None
    try:
        main(sys.argv[1:])
    except warm_workers.Become as become:  # a worker forked from an agent's template, every frame of it left
        worker = become
    if worker is not None:
        worker.run()
