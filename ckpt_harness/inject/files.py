"""File-operation probes under the checkpoint directory.

The probes observe; they do not change how the job writes. A file opened for
writing under the checkpoint directory gets the same stack `open` would
build — a raw file, the buffer of the size `open` would pick, a text layer —
with two observation points:

* **the job's `write()` calls** (``buffered-write``), on the object handed to
  the job: a crash there loses what is still in the buffer, as it would;
* **the kernel writes** (``write``), on the raw file under the buffer and on
  `os.write`/`os.pwrite` to a descriptor from `os.open`: the bytes, in the
  order and sizes the kernel gets them. Only these change the file, so only
  these are what the durability model replays and what a power loss keeps.

An fsync therefore lands in the trace where it really runs: `pickle.dump`
into a buffered file followed by `os.fsync` records the fsync *before* the
write that reaches the kernel at `close()`, which is the bug it is.

A file opened through an `opener` (`tempfile.NamedTemporaryFile(dir=d)`
hands `open` the directory and makes the file with `mkstemp`) is the file
whose descriptor the opener returned: its open is the opener's `os.open`,
probed there; an opener that opens some other way leaves the file unprobed.

Also wrapped: `os.fsync`/`os.fdatasync` of any descriptor under the
checkpoint directory (a directory, or a file opened only to read is found
where it is now through `/proc/self/fd`), `os.rename`/`os.replace` (so
`Path.rename` and `Path.replace`), `os.unlink`/`os.remove`, `os.mkdir` (so
`os.makedirs` and `Path.mkdir`), `os.rmdir`, `shutil.rmtree`; and the
looks that change nothing, `os.stat` and the listings `os.listdir` and
`os.scandir` (so `os.path.exists`, `glob`, `Path.exists`, `Path.iterdir`).

The savers that write from native code are routed through a probed Python
file of their native buffer size (8 KiB), so every byte is seen:
- `safetensors.torch.save_file` (natively a Rust `BufWriter` fed the header
  length, the header and each tensor) gets the same pieces: the same bytes;
- `torch.save` to a path (natively a libstdc++ `ofstream`) writes what torch
  writes to any Python file: the same records, named `archive/…` instead of
  after the file's stem, which `torch.load` does not read.
Where a large record follows buffered bytes, the native writers hand both
to the kernel in one call and the probed file in two, so a crash in the
middle of a kernel write cuts within one buffer of where it would natively.
`shutil.copyfile` copies through `write()`, not `os.sendfile`.

Outside the checkpoint directory, a save may stage a file and rename it in
(fsspec's local transactions, which Lightning writes through, put it in the
system's temp directory; so does `tempfile`). A file opened for writing
outside it *during a checkpointing phase* (`phase.checkpointing`: a save,
its writer, what follows it) is probed as any other: its operations are
named `<outside>` (`trace.OUTSIDE`, one name whatever the temporary name,
so a fault finds it again in the next run) and carry its absolute path in
`outside`, which the rename that brings it in names too (`src_outside`);
the durability model follows its bytes in, and the exploration breaks only
those that land (`trace.landings`). The harness's own directory (where the
trace lives) is never probed.

Not seen: `mmap`, `sendfile`, `os.writev`, `ftruncate` (an exploration warns
about files holding bytes no probe saw: `trace.unseen_writes`). Everything
else outside the checkpoint directory, and every read, takes the original
path untouched.
"""

from __future__ import annotations

import builtins
import functools
import io
import itertools
import os
import pathlib
import shutil
import stat
import sys
import warnings
from typing import Any, Callable, Optional

from ckpt_harness import phase
from ckpt_harness.inject.faults import die
from ckpt_harness.inject.trace import OUTSIDE, EventKind
from ckpt_harness.inject.tracer import Tracer

_WRITE_MODES = frozenset("wax+")
_WRITE = EventKind.WRITE.value
_BUFFERED_WRITE = EventKind.BUFFERED_WRITE.value
#: Bound before `install` wraps it: the data log is not the job's I/O.
_os_write = os.write
#: The buffer of libstdc++'s `ofstream` (BUFSIZ) and of Rust's `BufWriter`.
NATIVE_BUFFER = 8192


class _Files:
    def __init__(self, tracer: Tracer, root: str, data_log: Optional[str], actor: str = "",
                 own: Optional[str] = None):
        self.tracer = tracer
        self.actor = actor
        self.root = os.path.abspath(root)
        self.real_root = os.path.realpath(root)
        #: The harness's directory of this run (traces, data logs): never the job's files.
        self.own = os.path.abspath(own) if own else None
        self.fids = itertools.count()
        #: Descriptors of files opened for writing: fd -> (fid, relpath). An
        #: fsync of any other descriptor is located by `_path_of`.
        self.by_fd: dict[int, tuple[str, str]] = {}
        #: Descriptors from `os.open` for writing: fd -> the handle `os.write` reports through.
        self.raw_fds: dict[int, _Handle] = {}
        self.data_fd = os.open(data_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if data_log else None
        self.data_size = 0

    def rel(self, path: Any) -> Optional[str]:
        """`path` relative to the checkpoint directory, or None if outside it."""
        if isinstance(path, int):
            return None
        try:
            absolute = os.path.abspath(os.fsdecode(os.fspath(path)))
        except TypeError:
            return None
        for root in (self.root, self.real_root):
            if absolute == root or absolute.startswith(root + os.sep):
                return os.path.relpath(absolute, root)
        return None

    def _outside(self, path: Any) -> Optional[str]:
        """The absolute path of `path`, not in the checkpoint directory
        (`name` asked `rel` first), when a checkpointing phase writes it (it
        may stage the file there and rename it in); None when no
        checkpointing phase runs, or it is the harness's own."""
        if isinstance(path, int) or not phase.checkpointing(self.tracer.current()):
            return None
        try:
            absolute = os.path.abspath(os.fsdecode(os.fspath(path)))
        except TypeError:
            return None
        return None if self.own and (absolute + os.sep).startswith(self.own + os.sep) else absolute

    def name(self, path: Any) -> Optional[tuple[str, dict]]:
        """How the trace names a file opened for writing (relative to the
        checkpoint directory, or `OUTSIDE` with its absolute path in the
        fields), or None: the probes leave it alone."""
        rel = self.rel(path)
        if rel is not None:
            return rel, {}
        outside = self._outside(path)
        return (OUTSIDE, {"outside": outside}) if outside is not None else None

    def exact(self) -> bool:
        """Whether each write must be its own trace event: in a rank with a
        fault still armed (the write may be the one it fires at) or whose
        bytes the durability model will replay. Other ranks record runs of
        writes as one event (`Tracer.record_write`)."""
        return self.data_fd is not None or bool(self.tracer.injector.pending)

    def log_data(self, data: memoryview) -> Optional[list[int]]:
        if self.data_fd is None:
            return None
        offset = self.data_size
        rest = data
        while rest:  # one write(2) moves at most ~2 GiB
            rest = rest[_os_write(self.data_fd, rest):]
        self.data_size += len(data)
        # A spawned process of the rank logs to a file of its own, which its refs name.
        return [offset, len(data), self.actor] if self.actor else [offset, len(data)]

    def new_fid(self) -> str:
        return f"r{self.tracer.rank}{self.actor}f{next(self.fids)}"


class _Handle:
    """One open file under the checkpoint directory, as both its layers report it."""

    def __init__(self, files: _Files, fid: str, rel: str, append: bool):
        self.files = files
        self.fid = fid
        self.rel = rel
        self.append = append

    def kernel_write(self, fd: int, data: Any, write: Callable[[memoryview], Optional[int]],
                     offset: Optional[int] = None) -> Optional[int]:
        """Record and perform one write(2) of `data` through `write`; a fault
        armed here acts on the bytes that reach the file."""
        if offset is None:
            offset = os.fstat(fd).st_size if self.append else os.lseek(fd, 0, os.SEEK_CUR)
        tracer, files = self.files.tracer, self.files
        if not files.exact():  # the fast path: count the point, extend the run
            n = len(data) if type(data) is bytes else memoryview(data).nbytes
            tracer.record_write(_WRITE, {"fid": self.fid, "path": self.rel, "offset": offset, "n": n, "data": None},
                                batch=True)
            return write(data)
        view = memoryview(data).cast("B")
        n = len(view)
        with tracer.lock:
            where = tracer.current()
            index = tracer.injector.point(where)
            fault = tracer.injector.armed(where, index, _WRITE, self.rel)
        lands = n // 2 if fault is not None and fault.kind in ("crash-mid", "torn") else n
        tracer.record_write(_WRITE, {"point": index, "fid": self.fid, "path": self.rel, "offset": offset,
                                     "n": lands, "data": files.log_data(view[:lands])}, batch=False)
        if fault is not None and fault.kind not in ("crash-mid", "torn", "crash-after"):
            tracer.injector.before(fault, _WRITE, self.rel)
        if fault is not None and fault.kind == "torn":
            while lands:
                lands -= write(view[n // 2 - lands:n // 2]) or 0
            return n  # the call reports success for bytes that never landed
        written = write(view[:lands])
        if fault is not None and fault.kind in ("crash-mid", "crash-after"):
            die()
        return written

    def job_write(self, data: Any, write: Callable[[Any], int]) -> int:
        """Record and perform the job's `write()` on a buffered or text file:
        where the job acts, before any byte may reach the kernel."""
        tracer, files = self.files.tracer, self.files
        n = len(data) if type(data) in (bytes, str) else memoryview(data).nbytes
        if not files.exact():
            tracer.record_write(_BUFFERED_WRITE, {"fid": self.fid, "path": self.rel, "n": n}, batch=True)
            return write(data)
        with tracer.lock:
            where = tracer.current()
            index = tracer.injector.point(where)
            fault = tracer.injector.armed(where, index, _BUFFERED_WRITE, self.rel)
        tracer.record_write(_BUFFERED_WRITE, {"point": index, "fid": self.fid, "path": self.rel, "n": n},
                            batch=False)
        if fault is not None and fault.kind != "crash-after":
            tracer.injector.before(fault, _BUFFERED_WRITE, self.rel)
        result = write(data)
        if fault is not None and fault.kind == "crash-after":  # what sits in the buffer dies with it
            die()
        return result

    def closed(self, fd: int) -> None:
        self.files.by_fd.pop(fd, None)
        self.files.tracer.emit("close", fid=self.fid, path=self.rel)


class ProbedRaw(io.FileIO):
    """The raw file under the job's buffer: each `write` here is a write(2).

    `handle` None: the file an `opener` opened, which `os.open`'s probe
    recorded (then its handle is taken over from the descriptor) or left
    alone (then so are its writes)."""

    def __init__(self, file: Any, mode: str, closefd: bool, opener: Any, handle: Optional[_Handle],
                 files: _Files):
        super().__init__(file, mode, closefd, opener=opener)
        self._handle = handle if handle is not None else files.raw_fds.pop(self.fileno(), None)
        if self._handle is not None:
            files.by_fd[self.fileno()] = (self._handle.fid, self._handle.rel)

    def write(self, data: Any) -> Optional[int]:
        if self._handle is None:
            return super().write(data)
        return self._handle.kernel_write(self.fileno(), data, super().write)

    def close(self) -> None:
        if not self.closed and self._handle is not None:
            self._handle.closed(self.fileno())
        super().close()


class _JobWrites:
    """The job's own `write()` on the object `open` handed it."""

    _handle: Optional[_Handle]

    def write(self, data: Any) -> int:
        if self._handle is None:
            return super().write(data)  # type: ignore[misc]
        return self._handle.job_write(data, super().write)  # type: ignore[misc]


class ProbedBufferedWriter(_JobWrites, io.BufferedWriter):
    pass


class ProbedBufferedRandom(_JobWrites, io.BufferedRandom):
    pass


class ProbedTextWrapper(_JobWrites, io.TextIOWrapper):
    pass


def _buffer_size(raw: io.FileIO, buffering: int, binary: bool) -> tuple[int, bool]:
    """(buffer size, line buffering) as `io.open` picks them for `raw`."""
    line_buffering = False
    if buffering == 1 and binary:
        warnings.warn("line buffering (buffering=1) isn't supported in binary mode, the default buffer size "
                      "will be used", RuntimeWarning, stacklevel=4)
        buffering = -1
    elif buffering == 1 or buffering < 0 and raw.isatty():
        buffering, line_buffering = -1, True
    if buffering < 0:
        buffering = getattr(raw, "_blksize", 0)
        buffering = buffering if buffering > 1 else io.DEFAULT_BUFFER_SIZE
    return buffering, line_buffering


def _open_probed(files: _Files, handle: Optional[_Handle], file: Any, mode: str, buffering: int, encoding: Any,
                 errors: Any, newline: Any, closefd: bool, opener: Any) -> Any:
    """What `io.open` returns for these arguments, with the probes in its layers."""
    binary = "b" in mode
    raw_mode = "".join(c for c in "xrwa+" if c in mode) + "b"
    # `io.open` hands its raw file a path as a string: the file's `name` is one (a `Path` given or not)
    raw = ProbedRaw(file if isinstance(file, int) else os.fspath(file), raw_mode, closefd, opener, handle, files)
    handle = raw._handle
    try:
        if buffering == 0:
            if binary:
                return raw
            raise ValueError("can't have unbuffered text I/O")
        size, line_buffering = _buffer_size(raw, buffering, binary)
        buffered_cls = ProbedBufferedRandom if "+" in mode else ProbedBufferedWriter
        if not binary:
            buffered_cls = io.BufferedRandom if "+" in mode else io.BufferedWriter
        buffer = buffered_cls(raw, size)
        if binary:
            buffer._handle = handle
            return buffer
        text = ProbedTextWrapper(buffer, encoding, errors, newline, line_buffering)
        text._handle = handle
        text.mode = mode
        return text
    except BaseException:
        raw.close()
        raise


def install(tracer: Tracer, ckpt_dir: str, data_log: Optional[str], actor: str = "",
            own: Optional[str] = None) -> None:
    """Probe file operations under `ckpt_dir` (and of files a checkpointing
    phase writes outside it, but in `own`, the harness's directory of the
    run); `actor` names a spawned process of the rank (its fids and
    data-log refs say it, `probes.Child`)."""
    files = _Files(tracer, ckpt_dir, data_log, actor, own)
    original_open = io.open

    @functools.wraps(original_open)
    def probed_open(file: Any, mode: str = "r", buffering: int = -1, encoding: Any = None,
                    errors: Any = None, newline: Any = None, closefd: bool = True, opener: Any = None) -> Any:
        if _WRITE_MODES.isdisjoint(mode) or tracer.nested():
            return original_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
        if opener is not None:
            # The opener opens what it likes: `tempfile.NamedTemporaryFile(dir=d)` hands `open` the directory
            # and its opener makes the file (`mkstemp`, through `os.open`). The file opened is the one whose
            # descriptor the opener returns, and its open is the opener's `os.open`, probed there.
            return _open_probed(files, None, file, mode, buffering, encoding, errors, newline, closefd, opener)
        named = files.name(file)
        if named is None:
            return original_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
        rel, where = named
        handle = _Handle(files, files.new_fid(), rel, append="a" in mode)
        return tracer.operation(
            "open", rel,
            lambda fault: _open_probed(files, handle, file, mode, buffering, encoding, errors, newline, closefd,
                                       opener),
            path=rel, fid=handle.fid, mode=mode, trunc="w" in mode, create="r" not in mode, append=handle.append,
            **where,
        )

    builtins.open = io.open = probed_open

    def path_op(op: str, original: Callable, *, argnames: tuple[str, ...]) -> Callable:
        @functools.wraps(original)
        def probe(*args: Any, **kwargs: Any) -> Any:
            if tracer.nested() or kwargs.get("dir_fd") is not None or kwargs.get("src_dir_fd") is not None:
                return original(*args, **kwargs)
            rels = [files.rel(a) for a in args[: len(argnames)]]
            if all(r is None for r in rels):
                return original(*args, **kwargs)
            fields: dict[str, Any] = dict(zip(argnames, rels))
            # A rename in from outside (or out): which file, so that the durability model follows its bytes.
            fields.update({f"{name}_outside": os.path.abspath(os.fsdecode(os.fspath(a)))
                           for name, a, r in zip(argnames, args, rels) if r is None})
            what = " -> ".join(r if r is not None else OUTSIDE for r in rels)
            return tracer.operation(op, what, lambda fault: original(*args, **kwargs), **fields)

        return probe

    def look_op(op: str, original: Callable) -> Callable:
        """A look at the directory (`faults.LOOKS`): recorded where it happens,
        so that a delay can open the gap between a rank's check and its act.
        Its result and its exceptions are the original's, untouched."""
        @functools.wraps(original)
        def probe(path: Any = ".", *args: Any, **kwargs: Any) -> Any:
            rel = None if tracer.nested() or kwargs.get("dir_fd") is not None else files.rel(path)
            if rel is None or _in_mkdir(sys._getframe(1)):
                return original(path, *args, **kwargs)
            return tracer.operation(op, rel, lambda fault: original(path, *args, **kwargs), path=rel)

        return probe

    # `os.path.exists`, `isdir`, `Path.exists`, `Path.is_dir` all call `os.stat`;
    # `glob` and `Path.glob` list with `os.scandir`, `Path.iterdir` with `os.listdir`.
    os.stat = look_op("stat", os.stat)
    os.listdir = look_op("list", os.listdir)
    os.scandir = look_op("list", os.scandir)
    os.rename = path_op("rename", os.rename, argnames=("src", "dst"))
    os.replace = path_op("rename", os.replace, argnames=("src", "dst"))
    os.unlink = path_op("unlink", os.unlink, argnames=("path",))
    os.remove = path_op("unlink", os.remove, argnames=("path",))
    os.mkdir = path_op("mkdir", os.mkdir, argnames=("path",))
    os.rmdir = path_op("rmdir", os.rmdir, argnames=("path",))
    rmtree = path_op("rmtree", shutil.rmtree, argnames=("path",))
    rmtree.avoids_symlink_attacks = shutil.rmtree.avoids_symlink_attacks  # type: ignore[attr-defined]
    shutil.rmtree = rmtree
    # shutil.copyfile's Linux fast path copies descriptor to descriptor with
    # os.sendfile, past the probed file object (DeepSpeed copies its
    # zero_to_fp32.py into every checkpoint so); off, it copies through write().
    shutil._USE_CP_SENDFILE = False  # type: ignore[attr-defined]

    original_os_open, original_close = os.open, os.close
    original_write, original_pwrite = os.write, os.pwrite

    @functools.wraps(original_os_open)
    def probed_os_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: Any = None) -> int:
        if dir_fd is not None or tracer.nested() or not flags & (os.O_WRONLY | os.O_RDWR):
            return original_os_open(path, flags, mode, dir_fd=dir_fd)
        named = files.name(path)
        if named is None:
            return original_os_open(path, flags, mode, dir_fd=dir_fd)
        rel, where = named
        handle = _Handle(files, files.new_fid(), rel, append=bool(flags & os.O_APPEND))
        fd = tracer.operation("open", rel, lambda fault: original_os_open(path, flags, mode),
                              path=rel, fid=handle.fid, mode=_mode_of(flags), trunc=bool(flags & os.O_TRUNC),
                              create=bool(flags & os.O_CREAT), append=handle.append, **where)
        files.by_fd[fd] = (handle.fid, rel)
        files.raw_fds[fd] = handle
        return fd

    @functools.wraps(original_close)
    def probed_close(fd: int) -> None:
        handle = files.raw_fds.pop(fd, None)
        if handle is not None:
            handle.closed(fd)
        files.by_fd.pop(fd, None)
        original_close(fd)

    @functools.wraps(original_write)
    def probed_write(fd: int, data: Any) -> int:
        handle = files.raw_fds.get(fd)
        if handle is None or tracer.nested():
            return original_write(fd, data)
        return handle.kernel_write(fd, data, lambda view: original_write(fd, view))

    @functools.wraps(original_pwrite)
    def probed_pwrite(fd: int, data: Any, offset: int) -> int:
        handle = files.raw_fds.get(fd)
        if handle is None or tracer.nested():
            return original_pwrite(fd, data, offset)
        return handle.kernel_write(fd, data, lambda view: original_pwrite(fd, view, offset), offset=offset)

    os.open, os.close, os.write, os.pwrite = probed_os_open, probed_close, probed_write, probed_pwrite

    def sync_op(original: Callable) -> Callable:
        @functools.wraps(original)
        def probe(fd: Any) -> None:
            number = fd if isinstance(fd, int) else fd.fileno()
            if tracer.nested():
                return original(fd)
            known = files.by_fd.get(number)
            if known is not None:  # a file opened for writing: its fid follows the inode
                fid, rel = known
                return tracer.operation("fsync", rel, lambda fault: original(fd), path=rel, fid=fid, is_dir=False)
            named = files.name(_path_of(number))  # a directory, or a file opened to read
            if named is None:
                return original(fd)
            rel, where = named
            is_dir = stat.S_ISDIR(os.fstat(number).st_mode)
            return tracer.operation("fsync", rel, lambda fault: original(fd), path=rel, fid=None, is_dir=is_dir,
                                    **where)

        return probe

    os.fsync = sync_op(os.fsync)
    os.fdatasync = sync_op(os.fdatasync)
    _route_native_savers(files)


def _in_mkdir(frame: Any) -> bool:
    """Whether a look is `os.makedirs` or `Path.mkdir` checking its way (the
    `exists` of a parent, the `isdir` after a mkdir that found the directory
    there): which of those it makes depends on which rank made the
    directory first, so as points they would come and go from run to run
    (a delay armed there never fired in some runs); its mkdirs are the points."""
    for _ in range(3):
        if frame is None:
            return False
        if frame.f_code in _MKDIRS:
            return True
        frame = frame.f_back
    return False


_MKDIRS = (os.makedirs.__code__, pathlib.Path.mkdir.__code__)


def _route_native_savers(files: _Files) -> None:
    """torch.save(obj, "path") and safetensors' save_file write from native
    code; give them a probed file of their native buffer size."""
    import importlib
    import importlib.util
    import sys

    import torch
    import torch.serialization

    original_save = torch.serialization.save

    @functools.wraps(original_save)
    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(f, (str, os.PathLike)) and files.name(f) is not None:
            with open(f, "wb", buffering=NATIVE_BUFFER) as handle:
                return original_save(obj, handle, *args, **kwargs)
        return original_save(obj, f, *args, **kwargs)

    torch.save = torch.serialization.save = save

    # imported here if installed: a job that imports it later would write past the probes
    loaded = set(sys.modules)
    st = sys.modules.get("safetensors.torch") or (
        importlib.import_module("safetensors.torch") if importlib.util.find_spec("safetensors") else None)
    if st is not None:
        original_save_file = st.save_file

        @functools.wraps(original_save_file)
        def save_file(tensors: Any, filename: Any, metadata: Any = None) -> None:
            if files.name(filename) is None:
                return original_save_file(tensors, filename, metadata)
            data = memoryview(st.save(tensors, metadata=metadata))
            with open(filename, "wb", buffering=NATIVE_BUFFER) as handle:
                for piece in _safetensors_pieces(data):
                    handle.write(piece)

        # Only a module loaded before safetensors.torch can have bound its save_file; when this install
        # imported it, those are the ones it imported: the walk of every module is skipped, and with it
        # the copy of the pages the rank shares with the fork server that touching every object costs.
        _rebind(original_save_file, save_file,
                None if "safetensors.torch" in loaded else [m for n, m in sys.modules.items() if n not in loaded])


def _safetensors_pieces(data: memoryview) -> list[memoryview]:
    """A serialized safetensors file cut as its Rust writer writes it: the
    header's length, the header, then each tensor's bytes in file order."""
    import json

    n = int.from_bytes(data[:8], "little")
    header = json.loads(bytes(data[8:8 + n]))
    spans = sorted(tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__")
    body = 8 + n
    return [data[:8], data[8:body], *(data[body + begin:body + end] for begin, end in spans if end > begin)]


def _path_of(fd: int) -> Optional[str]:
    """Where a descriptor's file or directory is now (renames followed), or None."""
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # not Linux, or a closed descriptor
        return None
    return None if path.endswith(" (deleted)") or not path.startswith("/") else path


def _mode_of(flags: int) -> str:
    """The `open` mode an `os.open` of `flags` amounts to, as the durability model reads modes."""
    if flags & os.O_CREAT and flags & os.O_EXCL:
        return "xb"
    if flags & os.O_APPEND:
        return "ab"
    return "wb" if flags & os.O_TRUNC else "r+b"


def _rebind(original: Any, replacement: Any, modules: Optional[list] = None) -> None:
    """Replace `original` wherever an imported module (of `modules`; None: any)
    holds it: frameworks bind savers at import time (`from safetensors.torch
    import save_file as safe_save_file` in transformers and accelerate), in
    the warm parent, before any rank installs probes."""
    import sys

    for module in list(sys.modules.values()) if modules is None else modules:
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            if value is original:
                namespace[name] = replacement
