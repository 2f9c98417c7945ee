"""Environments with a named set of package pins, made once and cached: releases as an axis (issue 67).

"Do my checkpoints written with lightning 2.5.2 still resume, bitwise, with 2.4.0?" needs the training script
run under each release. `made(pins, root, say)` gives an environment (`Env`) whose interpreter imports the
pinned releases and everything else (torch, the harness, the script's other imports) from the interpreter
the harness runs in, the *base*.

Why layered, not a full venv per pin set: a full environment is a torch install per release (gigabytes, minutes,
a download the box may not be allowed), and a different torch in each would make "release A vs release B" also
"torch X vs torch Y". A layered environment is a venv made without pip (``python -m venv --without-pip``, done
in-process with `venv.EnvBuilder`: a few files), whose site-packages holds only what the pins install and
ends with a ``.pth`` file that runs ``import site; site.addsitedir(<base site dir>)`` for each of the base's
site directories. Its ``sys.path`` is then the stdlib, the env's own site-packages (the pins: found first, so
they shadow the base's copies), then the base's site-packages, whose own ``.pth`` files run too (the harness's
editable install, setuptools' distutils shim). Seconds, no torch copy, and the same torch on every release.

The pins go in with the base interpreter's own pip pointed at the env (``pip --python <env python> install``;
pip re-runs itself under the env's interpreter, pip 22.3+). pip then sees what the env's interpreter sees, the
base's packages included: a pin whose requirements the base meets installs only itself (its ``torch``
requirement is "already satisfied" by the base's torch), and a pin that needs another version of a base
package installs that version into the env, where it shadows the base's, while pip leaves the base alone
("Not uninstalling X at <base>, outside environment <env>"). Not ``uv pip install --python``, though it is
much faster: uv reads the target's site-packages itself and does not run their ``.pth`` files, so it does not
see the base (uv 0.13.9 on such an env: with ``--no-index``, "torch was not found in the provided package
locations"; with an index, a plan to install torch and its CUDA wheels into the env), the copy of torch this
layering exists to avoid.

Caching: an environment lives at ``root/<Pins.key>``, a hash of the pins, the find-links, no_index and the base
interpreter. It is built in ``root/.building-<key>-<pid>`` and renamed into place whole, after a marker written
last inside it, so a path ``made`` returns is never half-made; a flock on ``root/<key>.lock`` makes two
processes asking for the same key build it once (the second waits, then uses it). An interrupted build (Ctrl-C,
SIGTERM, an exception, the deadline) ends pip's process group and removes its directory; one left by a process
killed with SIGKILL is removed, its pip ended, by the next build of that key. The cache is keyed by what the
pins say, not what an index holds: a range (``>=2,<3``) or a find-links directory whose wheels change is
resolved once, when the environment is made; `Env.versions` says what it got. Remove ``root/<key>`` to make it
again.

POSIX only (fcntl, process groups, ``bin/python``). Torch-free: the harness's controller imports it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import signal
import site
import subprocess
import sys
import threading
import time
import venv
from pathlib import Path
from typing import Callable, Iterable, Iterator, Union

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ckpt_harness.errors import HarnessError, Interrupted, UsageError
from ckpt_harness.launch import _proc

#: Bumped when the layout of an environment changes, so that caches made by an older harness are not reused.
LAYOUT = 1

#: Seconds a pip run may take by default: a large wheel from a slow index, well past any install that works.
DEADLINE = 900.0

#: Lines of pip's stderr an EnvError carries: its resolver's message, not the whole log.
TAIL_LINES = 20

#: The harness's files inside an environment: pip's output, its process group, the marker written last.
META = ".ckpt_harness"
MARKER = "made.json"

#: The .pth that layers the env over the base. Digits sort before letters and "_", so it runs before any .pth
#: a pin installs, which may import from the base.
LAYER_PTH = "00_ckpt_harness_base.pth"

#: pip settings that would send the install somewhere other than the env, add to what the pins say, or stop
#: --python from re-running pip under the env
_PLACEMENT = ("PIP_TARGET", "PIP_PREFIX", "PIP_ROOT", "PIP_USER", "PIP_EDITABLE", "PIP_REQUIREMENT",
              "_PIP_RUNNING_IN_SUBPROCESS")

EXAMPLE = "'lightning==2.5.2'"


class EnvError(HarnessError):
    """An environment for a set of pins could not be made: a pin that does not exist or does not install here,
    pip past its deadline, an interpreter that cannot make a venv. The message names the pins, carries pip's
    own words and says what to change.

    A HarnessError, not a UsageError: whether a pin installs depends on the index, the network and this
    platform, not on its text (a pin's text is checked when `Pins` is made, as a UsageError). Not Unavailable
    either, which the plugin turns into a skip: a release that does not install must be seen, not skipped."""


@dataclasses.dataclass(frozen=True)
class Pins:
    """A set of requirement pins and where pip finds them: what an environment is made of.

    `pins` are PEP 508 requirements (``lightning==2.5.2``, ``torchdata>=0.8,<0.9``), normalized (canonical
    names, sorted extras and specifiers) and sorted, so the same set written another way is the same
    environment. A string that is not a requirement is a UsageError (a ValueError) here, before anything runs:
    the pins reach pip as argument-list items only, never through a shell, and one that starts with "-" is no
    requirement, so none can be taken for an option. `find_links` are wheel directories (made absolute) or
    index pages, passed as ``--find-links``; `no_index` passes ``--no-index`` (offline: find_links only).
    """

    pins: tuple[str, ...]
    find_links: tuple[str, ...] = ()
    no_index: bool = False

    def __post_init__(self) -> None:
        given = (self.pins,) if isinstance(self.pins, str) else tuple(self.pins)
        if not given:
            raise UsageError(f"no pins: give at least one requirement, e.g. {EXAMPLE} (without pins, run with "
                             f"this interpreter, {sys.executable})")
        parsed = [_requirement(text) for text in given]
        names: dict[str, str] = {}
        for text, req in zip(given, parsed):
            name = canonicalize_name(req.name)
            if name in names:
                raise UsageError(f"{name} is pinned twice ({names[name]!r} and {text!r}): give one pin per "
                                 f"package, e.g. 'lightning>=2.4,<2.6'")
            names[name] = text
        object.__setattr__(self, "pins", tuple(sorted(_normalized(req) for req in parsed)))
        links = (self.find_links,) if isinstance(self.find_links, (str, os.PathLike)) else tuple(self.find_links)
        object.__setattr__(self, "find_links", tuple(_link(link) for link in links))
        object.__setattr__(self, "no_index", bool(self.no_index))

    @property
    def key(self) -> str:
        """The cache directory's name: a short hash of the pins, where they come from, and the base interpreter
        (its path and version: the env's ``.pth`` points at that interpreter's site-packages)."""
        ident = json.dumps([LAYOUT, self.pins, self.find_links, self.no_index, sys.executable, sys.version])
        return hashlib.sha256(ident.encode()).hexdigest()[:16]

    def pip_args(self) -> list[str]:
        """What follows ``pip install``: the pins and where to find them."""
        return [*self.pins, *(f"--find-links={link}" for link in self.find_links),
                *(["--no-index"] if self.no_index else [])]

    def __str__(self) -> str:
        return " ".join(self.pins)


def _requirement(text: object) -> Requirement:
    if not isinstance(text, str):
        raise UsageError(f"pin {text!r} is not a string: give a requirement, e.g. {EXAMPLE}")
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        why = str(exc).splitlines()[0] if str(exc) else "not a requirement"
        raise UsageError(f"pin {text!r} is not a requirement ({why}): give NAME==VERSION, e.g. {EXAMPLE}") \
            from None


def _normalized(req: Requirement) -> str:
    req.name = canonicalize_name(req.name)
    return str(req)


def _link(link: Union[str, "os.PathLike[str]"]) -> str:
    text = os.fspath(link)
    if not isinstance(text, str) or not text:
        raise UsageError(f"find_links entry {link!r} is not a directory or URL")
    return text if "://" in text else os.path.abspath(text)


@dataclasses.dataclass(frozen=True)
class Env:
    """A made environment: run `python` (never its resolved symlink, which is the base's interpreter without
    the env) to import the pinned releases over the base."""

    pins: Pins
    path: Path
    python: Path

    def versions(self, names: Iterable[str]) -> dict[str, str]:
        """The version of each named distribution this env's interpreter sees (``importlib.metadata``, in that
        interpreter): the pinned one, or the base's. A name it does not see is left out."""
        names = list(names)
        code = ("import json, sys\nfrom importlib import metadata\nfound = {}\nfor name in sys.argv[1:]:\n"
                "    try:\n        found[name] = metadata.version(name)\n"
                "    except metadata.PackageNotFoundError:\n        pass\nprint(json.dumps(found))\n")
        ran = subprocess.run([str(self.python), "-c", code, *names], capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL, check=False)
        if ran.returncode != 0:
            raise EnvError(f"the environment for {self.pins} ({self.path}) could not tell its versions: "
                           f"{_tail(ran.stderr)}\nremove {self.path} to make it again")
        return json.loads(ran.stdout.strip().splitlines()[-1])


def _quiet(line: str) -> None:
    pass


def made(pins: Pins, root: Union[Path, str], say: Callable[[str], None] = _quiet, *,
         deadline: float = DEADLINE) -> Env:
    """The environment for `pins` under ``root/<pins.key>``, made if it is not there yet.

    `say` hears one line when a build starts (the pins) and one when it ends (the seconds it took), one more
    if it has to wait for another process making the same environment, and nothing when the environment is
    there already. `deadline` bounds pip's run, in seconds. Raises EnvError when the pins do not install,
    and passes on KeyboardInterrupt (SIGTERM too, as `Interrupted`, while a build runs in the main thread)
    after removing what the build had made.
    """
    root = Path(os.path.abspath(root))
    final = root / pins.key
    env = Env(pins, final, final / "bin" / "python")
    if _complete(final):
        return env
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f"{pins.key}.lock", lambda: say(f"environment for {pins}: waiting for another process "
                                                          f"that is making it ({final})")):
        if _complete(final):
            return env  # another process made it while this one waited
        _clear_stale(root, pins.key, final)
        say(f"environment for {pins}: making it in {final}")
        started = time.monotonic()
        building = root / f".building-{pins.key}-{os.getpid()}"
        with _terminate_interrupts():
            try:
                warned = _build(pins, building, final, deadline)
                os.rename(building, final)  # the whole environment appears at once
            finally:
                if building.exists():  # not renamed: interrupted, failed or past its deadline
                    _remove(building)
        say(f"environment for {pins}: made in {time.monotonic() - started:.1f} s"
            + (f" (pip warned: {warned}; see {final / META / 'pip.err'})" if warned else ""))
    return env


def _complete(path: Path) -> bool:
    return (path / META / MARKER).is_file()


@contextlib.contextmanager
def _locked(path: Path, waiting: Callable[[], None]) -> Iterator[None]:
    """An exclusive flock on `path` (created if absent), released when the block ends or the process dies."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waiting()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _terminate_interrupts() -> Iterator[None]:
    """SIGTERM raises `Interrupted` while a build runs, so that its cleanup runs as on Ctrl-C: Python's default
    for SIGTERM ends the process at once, leaving the build's directory and pip behind. Only where Python
    allows a handler (the main thread) and nobody set one (the CLI's own raises Interrupted already)."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _clear_stale(root: Path, key: str, final: Path) -> None:
    """Under the key's lock: what an earlier build of `key` left. Every builder holds the lock while its
    directory exists, so a ``.building-<key>-*`` seen here belongs to a process that died without its cleanup
    (SIGKILL); its pip may still run, and is ended first. A `final` without the marker was not made by `made`
    (its rename comes after the marker) and is made again."""
    for stale in root.glob(f".building-{key}-*"):
        _end_pip(stale)
        _remove(stale)
    if final.exists():
        _remove(final)


def _end_pip(building: Path) -> None:
    """End the pip process group a dead builder started in `building`, if it still runs. The group's leader
    is only signalled while its command line names `building`: its pid may have been reused since."""
    try:
        pid = int((building / META / "pip.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if os.fsencode(str(building)) in cmdline:
        _proc.kill_group(pid)


def _remove(path: Path) -> None:
    """Remove a directory tree; a process just killed may still close files in it, so try a few times."""
    for _ in range(20):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            return
        time.sleep(0.05)


def base_site_dirs() -> tuple[str, ...]:
    """The base interpreter's site directories, in its own order (its user site first, where enabled): what an
    env's ``.pth`` adds after the env's own site-packages."""
    dirs = ([site.getusersitepackages()] if site.ENABLE_USER_SITE else []) + list(site.getsitepackages())
    return tuple(dict.fromkeys(d for d in dirs if os.path.isdir(d)))


def _build(pins: Pins, building: Path, final: Path, deadline: float) -> str:
    """Make the env in `building`, ready to be renamed to `final`; the marker is its last file. Returns the
    first line of what pip warned of on a successful install (dependency conflicts with the base), or ""."""
    if not sys.executable:
        raise EnvError(f"cannot make an environment for {pins}: this interpreter does not know its own path "
                       f"(sys.executable is empty); run the harness with a python on disk")
    building.mkdir()
    meta = building / META
    meta.mkdir()
    try:  # what `python -m venv --without-pip` does, without starting an interpreter for it
        venv.EnvBuilder(symlinks=os.name != "nt", with_pip=False, prompt=final.name).create(building)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise EnvError(f"cannot make a venv for {pins} in {building.parent} with {sys.executable}: {exc}; check "
                       f"that the directory is writable and that the interpreter has its venv module") from exc
    python = building / "bin" / "python"
    ran = subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
    if ran.returncode != 0:
        raise EnvError(f"the new venv's interpreter for {pins} ({python}) does not run: {_tail(ran.stderr)}")
    site_packages = Path(ran.stdout.strip())
    site_packages.mkdir(parents=True, exist_ok=True)
    (site_packages / LAYER_PTH).write_text(
        "".join(f"import site; site.addsitedir({d!r})\n" for d in base_site_dirs()))

    command = [sys.executable, "-m", "pip", "--python", str(python), "install", "--disable-pip-version-check",
               "--no-input", "--progress-bar=off", *pins.pip_args()]
    environ = {k: v for k, v in os.environ.items() if k not in _PLACEMENT}
    out, err = meta / "pip.out", meta / "pip.err"
    try:
        code = _run(command, out, err, meta / "pip.pid", deadline, environ)
    except subprocess.TimeoutExpired:
        raise EnvError(f"pip did not install {pins} within its deadline of {deadline:g} s and was ended; its last "
                       f"words:\n{_tail(_read(err))}\na slow index or a large download: give made() a longer "
                       f"deadline, or download the wheels first and give their directory as find_links") from None
    if code != 0:
        where = (f" in {', '.join(pins.find_links)}" if pins.find_links else "") + \
            (" (no index: find_links only)" if pins.no_index else "")
        raise EnvError(f"pip could not install {pins} (exit {code}):\n{_tail(_read(err))}\n"
                       f"check that each pin names a release that exists{where} for Python "
                       f"{sys.version.split()[0]} on this platform, and change the pin that pip names above")

    _rebase(building, final)
    made_in = {"key": pins.key, "pins": list(pins.pins), "find_links": list(pins.find_links),
               "no_index": pins.no_index, "base_python": sys.executable, "base_version": sys.version,
               "base_site_dirs": list(base_site_dirs()), "layout": LAYOUT}
    (meta / MARKER).write_text(json.dumps(made_in, indent=1) + "\n")  # last: the env is complete
    if not _complete(building):
        raise EnvError(f"the environment for {pins} was not written whole in {building}: check the disk")
    warned = [line.strip() for line in _read(err).splitlines() if line.strip()]
    return warned[-1] if warned else ""


def _run(command: list[str], out: Path, err: Path, pidfile: Path, timeout: float,
         environ: dict[str, str]) -> int:
    """Run `command` in a process group of its own, its output in `out` and `err`; whatever ends the wait
    (its deadline, Ctrl-C, SIGTERM) ends the whole group, pip's re-run under the env's interpreter included."""
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = _proc.Child(command, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                           start_new_session=True, env=environ)
    try:
        pidfile.write_text(str(proc.pid))
        return proc.wait(timeout=timeout)
    finally:
        if proc.returncode is None:  # not reaped yet, so its pid is still its group's
            _proc.kill_group(proc.pid)
            proc.reap()


def _rebase(building: Path, final: Path) -> None:
    """Point the env's own text files at `final`: the scripts pip wrote into bin/ (their ``#!`` names the
    building path) and the activate scripts. The interpreter and site-packages hold no absolute path of it."""
    old, new = os.fsencode(str(building)), os.fsencode(str(final))
    for path in [*(building / "bin").iterdir(), building / "pyvenv.cfg"]:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 20:
            continue
        data = path.read_bytes()
        if old in data and b"\0" not in data:
            path.write_bytes(data.replace(old, new))


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _tail(text: str, lines: int = TAIL_LINES) -> str:
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(kept) if kept else "(no output)"
