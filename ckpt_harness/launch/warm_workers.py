"""torchrun's workers started warm: forked from a template of their agent, not fresh interpreters.

torchrun's agent starts each worker as ``python -u -m
ckpt_harness.launch.worker SCRIPT ARGS`` (`subprocess.Popen`, a new
session): a fresh interpreter that imports torch before the script's first
line, 2-3.5 s of CPU per worker, per attempt, per run. The harness's
agents are forks of its agent server (`agent.py`), which imported torch
(and what a worker imports before its script: `PRELOAD`) once. So an
agent, as it starts and while it still has one thread, forks a *template*
of itself, and the agent's `Popen` of a worker (`WarmPopen`, the one
class torchrun's `SubprocessHandler` is handed; torchrun's code is
otherwise its own) asks the template for the process instead of
``fork``+``exec``:

* the template forks an intermediate that forks the worker and exits; the
  agent is a child subreaper, so the worker becomes the *agent's* child,
  as a Popen'd one is: torchrun's `poll`, `wait`, `send_signal` and
  `os.killpg` act on it unchanged, and its parent-death signal is the
  agent's (`worker._die_with_agent` checks it once reparented);
* the worker takes what Popen and a fresh interpreter would have given it:
  the environment torchrun built (also as the kernel shows it in
  ``/proc``, for the run's tag that teardown finds processes by:
  `_show_tag`), the working directory, its own session, stdin, stdout and
  stderr as Popen had them and no other descriptor, the agent's ignored
  signals and signal mask with Python's own handlers, ``sys.path`` as
  the worker's ``PYTHONPATH`` makes it, ``sys.argv``, ``sys.orig_argv``
  and a fresh ``__main__``; then it leaves every frame of the template
  (`Become`) and runs ``-m ckpt_harness.launch.worker`` at the top of the
  interpreter, so that its exit is Python's own (non-daemon threads
  joined, atexit, objects finalized, the exit code or the traceback).

What it cannot give, and what `--cold-start` and the cold confirmation of
every case that does not pass exist for (`docs/probes.md`, "Warm script
workers"): the modules of `PRELOAD` were imported before the script, in
the agent server's environment, so a worker is started warm only if every
variable those imports read (`ImportEnv`) has the value it had then
(torchrun sets ``OMP_NUM_THREADS=1`` for several workers per node and
leaves a single one's unset: a server imports torch under the value its
workers will have, `worker_threads`); str hashes share the server's seed on
every warm worker (a fresh interpreter draws its own); and the
interpreter's start-up flags are the server's (``-u``, as torchrun's).
A request the template cannot serve is a real ``fork``+``exec``, and says
why in the agent's log.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import types
from typing import Any, Callable, Mapping, NoReturn, Optional, Sequence

from ckpt_harness.launch import _proc, preimport
from ckpt_harness.launch.layout import warm_path

#: What every worker imports before its script runs (the bootstrap; the entry that arms it, named
#: by the run, is preloaded at its first run: `preload`), and `torch._dynamo`, which the first
#: `torch.optim` optimizer a script makes imports (1.1 s of a worker's ~3, `docs/speed.md`).
PRELOAD = ("torch", "torch.distributed", "torch.distributed.checkpoint", "torch._dynamo",
           "ckpt_harness.launch.worker")
#: The worker command torchrun runs (``-u`` and ``-m`` are its own; `elastic.ScriptSpec.agent_args`).
WORKER = ("-u", "-m", "ckpt_harness.launch.worker")
#: Read by native code as a library loads (OpenMP, MKL, glibc, the interpreter's own start-up):
#: out of the recorder's sight, so compared by name.
NATIVE_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "LD_", "MALLOC_", "GLIBC_TUNABLES", "LC_", "LANG",
                   "TORCH_CPP_", "TORCH_SHOW_", "PYTHON")
#: The run's tag, reserved in the server's own environment (`server_env`) so a forked worker can show it.
TAG_ENV = "CKPT_HARNESS_ELASTIC_RUN"
#: Set by the interpreter's flags, or made again for the worker (`_sys_path`, `_show_tag`), whatever the
#: server had: an import that walks the whole environment reads these too.
REMADE = frozenset({"PYTHONPATH", "PYTHONUNBUFFERED", TAG_ENV})
TAG_LENGTH = 32
_PR_SET_CHILD_SUBREAPER = 36
#: How much of a request the template reads at once (its environment and command; descriptors ride along).
_MAX_REQUEST = 1 << 20


#: Imports that walk the whole environment, and the prefix of the names they keep: tqdm (which
#: `import torch` imports, through `torch.hub`) reads its ``TQDM_*`` defaults with `tqdm.utils.envwrap`;
#: fsspec (which a bucket's `s3fs` preload imports) its ``FSSPEC_*`` configuration with `fsspec.config`'s
#: `set_conf_env`. Unknown, either walk would make every worker after it start cold.
KNOWN_WALKS = {"tqdm.utils": "TQDM_", "fsspec.config": "FSSPEC_"}
#: Modules whose frames are the environment's own machinery, not a reader of it.
_MAPPING_MODULES = ("os", "_collections_abc", "collections.abc")


class ImportEnv:
    """What the preloaded modules could have read from the environment as
    they were imported: the server's environment then, the names read
    (recorded at Python's level, `record_reads`), the prefixes of those
    read by a walk of the whole environment (`KNOWN_WALKS`) or by native
    code, and whether a walk of unknown purpose happened (then any
    difference at all counts)."""

    def __init__(self, values: Mapping[str, str], read: frozenset[str], prefixes: tuple[str, ...] = (),
                 walked_by: frozenset[str] = frozenset(), made: Optional[Mapping[str, str]] = None):
        self.values, self.read, self.walked_by = dict(values), read, walked_by
        self.prefixes = (*NATIVE_PREFIXES, *prefixes)
        #: Read names the imports then set themselves, with the value they set: `torch._dynamo` sets
        #: ``TORCHINDUCTOR_CACHE_DIR`` to the default it computed when unset, so a process that
        #: imported it carries that value on to its children, where the import reads it back.
        self.made = dict(made or {})

    def differs(self, env: Mapping[str, str]) -> list[str]:
        """The names whose value in `env` is not the one the imports saw (or made)."""
        every = {*self.values, *env}
        names = every if self.walked_by else self.read | {n for n in every if n.startswith(self.prefixes)}
        return sorted(n for n in names - REMADE
                      if env.get(n) != self.values.get(n) and not (n in self.made and env.get(n) == self.made[n]))


def record_reads(imports: Callable[[], None]) -> ImportEnv:
    """Run `imports`, recording every environment variable Python code reads meanwhile."""
    values = dict(os.environ)
    read: set[str] = set()
    prefixes: list[str] = []
    walked_by: set[str] = set()
    environ = type(os.environ)
    getitem, contains, iterate = environ.__getitem__, environ.__contains__, environ.__iter__

    def seen_getitem(self: Any, key: str) -> str:
        caller = sys._getframe(1)
        module = caller.f_globals.get("__name__")
        if caller.f_code.co_name == "__iter__" and module in _MAPPING_MODULES:
            pass  # a walk's (items, values): its `__iter__`'s business
        elif module in KNOWN_WALKS and not key.startswith(KNOWN_WALKS[module]):
            pass  # a known walk copying the environment (`dict(os.environ)`: C code, no frame between)
        else:
            read.add(key)  # a lookup by name
        return getitem(self, key)

    def seen_contains(self: Any, key: object) -> bool:
        if isinstance(key, str):
            read.add(key)
        return contains(self, key)

    def seen_iter(self: Any) -> Any:
        frame: Optional[types.FrameType] = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__") in _MAPPING_MODULES:
            frame = frame.f_back
        walker = frame.f_globals.get("__name__", "?") if frame is not None else "?"
        if walker in KNOWN_WALKS:
            prefixes.append(KNOWN_WALKS[walker])
        else:
            walked_by.add(walker)
        return iterate(self)

    environ.__getitem__, environ.__contains__, environ.__iter__ = (  # type: ignore[method-assign]
        seen_getitem, seen_contains, seen_iter)
    try:
        imports()
    finally:
        environ.__getitem__, environ.__contains__, environ.__iter__ = (  # type: ignore[method-assign]
            getitem, contains, iterate)
    after = dict(os.environ)
    made = {n: after[n] for n in read if n in after and after[n] != values.get(n)}
    return ImportEnv(values, frozenset(read), tuple(prefixes), frozenset(walked_by), made)


# -- in the agent server, as it starts -------------------------------------------------------------
class _Server:
    """What the server learnt before any agent forked: inherited by every fork."""

    #: What each preload read (`prepare_server`, then each `preload`).
    import_envs: list[ImportEnv] = []
    #: Where the run's tag's value sits in the environment block the kernel shows (`_show_tag`).
    tag_at: Optional[int] = None
    #: ``sys.path`` after ``PYTHONPATH``'s entries in a fresh interpreter (`_sys_path`).
    base_path: Optional[list[str]] = None


def worker_threads(env: Mapping[str, str], nproc_per_node: int) -> Optional[str]:
    """The ``OMP_NUM_THREADS`` torchrun gives its workers when started with
    `env` (``torch.distributed.run``: 1 for two or more workers per node
    unless set; a single worker keeps what it was given): the server's
    torch must have been imported under that value for them to start warm."""
    return env.get("OMP_NUM_THREADS", "1" if nproc_per_node > 1 else None)


def server_env(env: Mapping[str, str], threads: Optional[str]) -> dict[str, str]:
    """`env` as an agent server for workers of `threads` runs under: the
    run's tag reserved (so its forks can show one) and ``OMP_NUM_THREADS``
    the workers' (`worker_threads`), unset where theirs is."""
    out = {**env, TAG_ENV: "0" * TAG_LENGTH}
    out.pop("OMP_NUM_THREADS", None)
    return out if threads is None else {**out, "OMP_NUM_THREADS": threads}


def prepare_server(import_modules: Callable[[], None]) -> None:
    """In the agent server, before it imports torch: note where its tag
    lives, what a fresh interpreter's ``sys.path`` ends with, and what
    importing `PRELOAD` reads."""
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_void_p
    at = libc.getenv(TAG_ENV.encode())
    if at is not None and os.environ.get(TAG_ENV) == "0" * TAG_LENGTH:
        _Server.tag_at = at
    mark = "/ckpt-harness-pythonpath"
    probe = subprocess.run([sys.executable, "-c", "import sys, json; print(json.dumps(sys.path))"],
                           env={**os.environ, "PYTHONPATH": mark}, cwd="/", capture_output=True, text=True)
    if probe.returncode == 0:
        fresh = json.loads(probe.stdout)
        if mark in fresh:
            _Server.base_path = fresh[fresh.index(mark) + 1:]
    _Server.import_envs.append(record_reads(import_modules))


def preload(modules: Sequence[str]) -> None:
    """In the agent server, before it forks an agent: import `modules` too
    (the entry a run arms its workers with), recording what they read. One
    that fails to import is skipped with a note (`preimport`) and left to
    the worker, which imports it again and says why, with its traceback."""
    new = [m for m in modules if m not in sys.modules]
    if not new or _Server.base_path is None:
        return
    _Server.import_envs.append(record_reads(lambda: preimport.preimport(new)))
    gc.freeze()


# -- in an agent, as it starts -----------------------------------------------------------------------
class Become(BaseException):
    """Raised in a worker forked from the template: every frame of the
    template unwinds, and the top of the interpreter runs the worker
    (`run`), so that it ends as Python ends a program."""

    def __init__(self, request: dict):
        super().__init__()
        self.request = request

    def run(self) -> None:
        """Run ``-m ckpt_harness.launch.worker ARGS`` as a fresh interpreter would."""
        import runpy

        _close_inherited()
        sys.modules["__main__"] = types.ModuleType("__main__")
        sys.argv = ["-m", *self.request["argv"][len(WORKER) + 1:]]
        runpy._run_module_as_main(WORKER[-1])  # type: ignore[attr-defined]


class _Template:
    """The agent's end of its parked template."""

    lock = threading.Lock()
    sock: Optional[socket.socket] = None


def start_template() -> None:
    """In an agent that has no thread yet: become a child subreaper, fork the
    template, and hand torchrun's `SubprocessHandler` the `WarmPopen`. Does
    nothing where the server could not prepare (`prepare_server`) or the
    agent already runs a thread."""
    if not _Server.import_envs or _Server.base_path is None or _threads() != 1:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    agent = os.getpid()
    if os.fork() == 0:
        ours.close()
        _serve(theirs, agent)
    theirs.close()
    _Template.sock = ours
    from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler

    subprocess_handler.Popen = WarmPopen  # type: ignore[attr-defined,misc]


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


# -- the template --------------------------------------------------------------------------------------
def _serve(sock: socket.socket, agent: int) -> NoReturn:
    """Serve worker requests until the agent is gone; raise `Become` in each worker."""
    code = 1
    try:
        _proc.die_with_parent(agent)
        while True:
            message, fds, _, _ = socket.recv_fds(sock, _MAX_REQUEST, 3)
            if not message:
                code = 0
                break
            request = pickle.loads(message)
            try:
                pid: Optional[int] = _fork_worker(sock, request, fds)
            except OSError:
                pid = None
            for fd in fds:
                os.close(fd)
            sock.send(pickle.dumps({"pid": pid}))
    except Become:
        raise
    except BaseException:
        import traceback

        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _fork_worker(sock: socket.socket, request: dict, fds: list[int]) -> int:
    """Fork the worker through an intermediate that exits, so the agent (a
    subreaper) adopts it; in the worker, once adopted, raise `Become`."""
    pid_r, pid_w = os.pipe()
    go_r, go_w = os.pipe()
    middle = os.fork()
    if middle == 0:
        worker = -1
        try:
            worker = os.fork()
        finally:
            if worker != 0:
                if worker > 0:
                    os.write(pid_w, worker.to_bytes(8, "little"))
                os._exit(0)
        # the worker: marked warm first, so that whatever happens next is confirmed cold
        try:
            _mark_warm(request["env"])
            for fd in (pid_r, pid_w, go_w):
                os.close(fd)
            _adopted(go_r)
            _take_on(sock, request, fds)
        except BaseException:
            import traceback

            traceback.print_exc()
            os._exit(70)
        raise Become(request)
    os.close(pid_w)
    os.close(go_r)
    try:
        raw = os.read(pid_r, 8)
        os.waitpid(middle, 0)  # gone: the worker is the agent's child now
        if len(raw) != 8:
            raise OSError("the template could not fork a worker")
        os.write(go_w, b"g")
        return int.from_bytes(raw, "little")
    finally:
        os.close(pid_r)
        os.close(go_w)


def _mark_warm(env: Mapping[str, str]) -> None:
    """The marker `Run.warm_started` looks for: this rank's process started warm."""
    if "RANK" in env and "CKPT_HARNESS_RUN_DIR" in env:
        os.close(os.open(warm_path(env["CKPT_HARNESS_RUN_DIR"], int(env["RANK"])), os.O_WRONLY | os.O_CREAT, 0o644))


def _adopted(go: int) -> None:
    """Wait for the template's word that the intermediate is gone."""
    if os.read(go, 1) != b"g":
        os._exit(70)  # the template died first: no agent will ever wait for this process
    os.close(go)


def _take_on(sock: socket.socket, request: dict, fds: list[int]) -> None:
    """Everything Popen's child and a fresh interpreter's start-up would have done."""
    sock.close()
    _Template.sock = None
    if request["new_session"]:
        os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    sys.stdin = sys.__stdin__ = open(0, closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", closefd=False, errors="backslashreplace")
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _show_tag(request["env"].get(TAG_ENV))
    _signals(request["ignored"], request["mask"])
    sys.path[:] = _sys_path(request["env"], request["cwd"])
    sys.orig_argv = list(request["argv"])
    gc.unfreeze()
    _fresh_state()


def _show_tag(tag: Optional[str]) -> None:
    """Write the run's tag into the environment block the kernel shows in
    ``/proc/PID/environ`` (the server's, reserved by `server_env`), where
    the harness's teardown looks for it; `os.environ` alone does not reach there."""
    if _Server.tag_at is not None and tag is not None and len(tag) == TAG_LENGTH:
        ctypes.memmove(_Server.tag_at, tag.encode(), TAG_LENGTH)


#: What a fresh interpreter ignores on its own (and SIGINT raises KeyboardInterrupt).
_PYTHON_IGNORES = (signal.SIGPIPE, signal.SIGXFSZ)


def _signals(ignored: list[int], mask: list[int]) -> None:
    """Dispositions as exec leaves them (an ignored signal stays ignored, any
    other is default) and then as Python sets its own; the agent's mask."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(sig, signal.SIG_IGN if sig in ignored or sig in _PYTHON_IGNORES else signal.SIG_DFL)
        except (OSError, ValueError):
            continue
    if signal.SIGINT not in ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _sys_path(env: Mapping[str, str], cwd: str) -> list[str]:
    """``sys.path`` as ``python -m`` makes it in `cwd` with `env`'s
    ``PYTHONPATH``: the working directory, then the entries made absolute,
    then the interpreter's own, the first of any duplicates kept."""
    entries = [os.path.join(cwd, p) if p else cwd for p in env.get("PYTHONPATH", "").split(os.pathsep)] \
        if env.get("PYTHONPATH") else []
    seen: set[str] = set()
    path = [cwd]
    for entry in [*(os.path.abspath(e) for e in entries), *(_Server.base_path or [])]:
        key = os.path.normcase(os.path.abspath(entry))
        if key not in seen:
            seen.add(key)
            path.append(entry)
    return path


def _fresh_state() -> None:
    """State a module drew at import from the process's entropy, drawn again
    as a fresh import would (`random` reseeds itself after a fork)."""
    from multiprocessing import process

    process.current_process()._config["authkey"] = process.AuthenticationString(os.urandom(32))
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def _close_inherited() -> None:
    """Close every descriptor above 2, as Popen's close_fds does; after the
    template's frames unwound, so none of their objects closes one later."""
    gc.collect()
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            try:
                os.close(fd)
            except OSError:
                pass


# -- the agent's side --------------------------------------------------------------------------------------
class WarmPopen(subprocess.Popen):
    """torchrun's Popen of a worker, served by the agent's template when the
    command is the harness's worker and its environment allows (`ImportEnv`);
    any other command, or option the template does not serve, is Popen's."""

    def _execute_child(self, args: Any, executable: Any, preexec_fn: Any, close_fds: bool, pass_fds: Any,
                       cwd: Any, env: Any, startupinfo: Any, creationflags: Any, shell: bool,
                       p2cread: int, p2cwrite: int, c2pread: int, c2pwrite: int, errread: int, errwrite: int,
                       restore_signals: bool, gid: Any, gids: Any, uid: Any, umask: int,
                       start_new_session: bool, *rest: Any) -> None:
        reason = _refused(args, executable, preexec_fn, close_fds, pass_fds, env, shell, gid, gids, uid, umask, rest)
        pid = None if reason else _ask(args, env, cwd, start_new_session, [
            p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1, errwrite if errwrite != -1 else 2])
        if pid is None:
            if reason:
                print(f"[ckpt_harness] worker started cold: {reason}", file=sys.stderr, flush=True)
            return super()._execute_child(  # type: ignore[misc]
                args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags, shell,
                p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, restore_signals, gid, gids, uid, umask,
                start_new_session, *rest)
        self.pid = pid
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)  # type: ignore[attr-defined]


def _refused(args: Any, executable: Any, preexec_fn: Any, close_fds: bool, pass_fds: Any, env: Any, shell: bool,
             gid: Any, gids: Any, uid: Any, umask: int, rest: tuple) -> str:
    """Why the template cannot serve this Popen ("" if it can)."""
    if _Template.sock is None:
        return "no template (the agent had a thread, or the server could not prepare one)"
    if shell or executable is not None or preexec_fn is not None or not close_fds or pass_fds:
        return "Popen options the template does not serve"
    if gid is not None or gids is not None or uid is not None or umask != -1 or any(r not in (None, -1) for r in rest):
        return "a user, group, umask or process group to set"
    argv = [os.fspath(a) for a in args] if not isinstance(args, (str, bytes)) else []
    if len(argv) < 5 or argv[0] != sys.executable or tuple(argv[1:4]) != WORKER:
        return "not the harness's worker command"
    if env is None:
        return "no environment given"
    differs = sorted({n for seen in _Server.import_envs for n in seen.differs(env)})
    if differs:
        walked = {w for seen in _Server.import_envs for w in seen.walked_by}
        why = f" ({', '.join(sorted(walked))} read the whole environment as it was imported)" if walked else ""
        return f"{', '.join(differs)} differ from the environment the warm template imported torch in{why}"
    return ""


def _ask(args: Any, env: Mapping[str, str], cwd: Any, new_session: bool, fds: list[int]) -> Optional[int]:
    """The worker's pid, forked by the template; None if it is gone."""
    request = {"argv": [os.fspath(a) for a in args], "env": dict(env),
               "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(), "new_session": new_session,
               "ignored": [s for s in signal.valid_signals() if _ignored(s)],
               "mask": list(signal.pthread_sigmask(signal.SIG_BLOCK, []))}
    with _Template.lock:
        sock = _Template.sock
        if sock is None:
            return None
        try:
            socket.send_fds(sock, [pickle.dumps(request)], fds)
            reply = sock.recv(_MAX_REQUEST)
        except OSError:
            reply = b""
        if not reply:
            _Template.sock = None
            print("[ckpt_harness] the warm template is gone: workers start cold", file=sys.stderr, flush=True)
            return None
        return pickle.loads(reply)["pid"]


def _ignored(sig: int) -> bool:
    try:
        return signal.getsignal(sig) == signal.SIG_IGN
    except (OSError, ValueError):
        return False

