"""Save boundaries of an unmodified script: where its saves start and end, and what they were handed.

A Job tells the harness when it saves (`Job.save`, `ctx.saved`); a script
run under torchrun says nothing, so the bootstrap wraps the entry points
saves go through and a save is one call of them:

* `torch.save` to a path under the checkpoint directory (or to a file
  fsspec opened under the bucket's URL it is mounted at, ``{ckpt_url}``);
* `torch.distributed.checkpoint.save` / `async_save`, and Megatron-Core's
  `dist_checkpointing.save` (its writer writes no file a `torch.save` names);
* `safetensors.torch.save_file` to a path under the checkpoint directory;
* `transformers.Trainer._save_checkpoint`, `accelerate.Accelerator.save_state`,
  DeepSpeed's engine `save_checkpoint`, Lightning's `Trainer.save_checkpoint`
  (and, inside it, the dict its `AsyncCheckpointIO` hands its pool);
* ``with ckpt_harness.saving(step):`` around anything else (a save that
  renames its staging directory into place, say).

Framework modules are wrapped when the script imports them (an import
hook), never imported here: a script that does not use transformers must
not pay for it. Saves nest (the Trainer's `_save_checkpoint` calls
`torch.save` and safetensors): only the outermost is a boundary, and what
every call inside it was handed joins its state. That is the digest a
boundary records: the objects the script gave its saves, in the canonical
form of `state.capture`, keyed by the file each went to. For the Trainer
it is its model weights, optimizer, scheduler, RNG state and trainer state
as it writes them; objects with no canonical form (its `TrainingArguments`)
are named by their type only.

The step of a save, which golden and resumed runs are matched by, is the
first of: the step given to `saving(step)`; the framework's own counter
(Trainer and Lightning ``global_step``, DeepSpeed ``global_steps``); the
first number in the save's path under the checkpoint directory
(``step_4/state.pt``, ``checkpoint-500``, ``global_step4``); else one past
the last step this process saved (source ``count``), which a resumed run
cannot reproduce, so the oracle compares such saves only as the final one.

Only the main thread makes boundaries: a saver's background thread
(an async checkpoint's writer) writes inside the save that started it,
and what it is handed joins no save's state (what the main thread handed
the save is the state it was called with). A save that has writers
(`writers`: work it handed to a pool or a thread, a future its entry
point returned) may go on in the background after it returned, whether
or not this time they finished first; it has landed once they all
finished and none raised. A done-callback on a future says so, which
changes nothing the script sees of the future.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import sys
import threading
from typing import Any, Callable, Iterator, Mapping, Optional

from ckpt_harness.inject import imports
from ckpt_harness.inject.objects import Prefix
from ckpt_harness.inject.writers import WRITERS, Writers

#: Where a save's step came from, best first (see the module docstring).
SOURCES = ("saving", "framework", "path", "count")


@dataclasses.dataclass
class Save:
    """One save in progress: its step and what it was handed so far."""

    step: int
    source: str
    #: (name, object) per save call inside the boundary, in call order.
    handed: list[tuple[str, Any]] = dataclasses.field(default_factory=list)
    #: Saves inside add what they were handed: true for the boundaries that
    #: get no object of their own (a framework's method, `saving`); a
    #: `dcp.save` was handed the whole state, and its writer's inner
    #: `torch.save` of each piece would only repeat it.
    collects: bool = True
    #: The save may go on writing after it returned: its entry point returned a
    #: future (`dcp.async_save`), or it handed work to a writer (`writers`).
    background: bool = False
    #: A save begun by the script's own write under the checkpoint directory
    #: (`Saves.wrote`): the files it left there, as named now (renames
    #: followed), each with whether a serializer wrote its object into it
    #: (`Saves.covers`); None for a save begun at an entry point.
    written: Optional[dict[str, bool]] = None
    #: It took objects handed to serializers before it began (`Saves.stage`): what its files hold.
    took_staged: bool = False

    def add(self, name: str, obj: Any) -> None:
        taken = {n for n, _ in self.handed}
        self.handed.append((name if name not in taken else f"{len(self.handed)}:{name}", obj))

    def state(self, where: Callable[[str], Optional[str]] = lambda path: None) -> dict[str, Any]:
        """What the save was handed, as one mapping `state.capture` takes;
        `where` names a path string inside the checkpoint directory (`Saves.where`)."""
        return {name: plain(obj, where) for name, obj in self.handed}


class Saves:
    """One worker's save boundaries; `began` and `ended` are the runner's hooks."""

    def __init__(self, ckpt_dir: str, began: Callable[[int], None], ended: Callable[[Save], None],
                 trains: Callable[[], None] = lambda: None, landed: Callable[[int], None] = lambda step: None,
                 declared: Callable[[], None] = lambda: None, url: str = "",
                 stepping: Callable[[int], None] = lambda made: None):
        self.root = os.path.abspath(ckpt_dir)
        self.real_root = os.path.realpath(ckpt_dir)
        #: The bucket's prefix the run's storage put the directory at (``{ckpt_url}``), if it is one.
        self.bucket = Prefix(url) if _remote(url) else None
        self.began, self.ended, self.trains = began, ended, trains
        #: Told, at each of the main thread's optimizer steps outside a save, how many it made before it.
        self.stepping = stepping
        #: The optimizer steps the main thread made (`optimizer_step`).
        self.optimizer_steps = 0
        #: Called once a save that returned in the background landed: from its last writer's thread,
        #: or from the main thread, right after it returned, if its writers finished first.
        self.on_landed = landed
        self.writers: Writers = WRITERS
        self.writers.on_settled = self._settled
        #: Saves that returned with writers at work: they land when those finish (`_settled`).
        self._awaiting: set[int] = set()
        self._landing = threading.Lock()
        self.current: Optional[Save] = None
        self.last_step = 0
        self.observers: list[Callable[[], Mapping[str, Any]]] = []
        #: What the script registered with `full_state`: its state that is the same at every world size.
        self.full_states: list[Callable[[], Mapping[str, Any]]] = []
        #: Called as the script registers one.
        self.declared = declared
        #: A save whose entry points returned, while the script's own save
        #: routine goes on around them (renames it into place, waits in a
        #: barrier, writes `latest`, deletes old checkpoints, gathers the final model).
        self.pending: Optional[Save] = None
        self._forward_hook: Any = None
        #: The script's functions recorded so far, by event kind (`_note`).
        self.noted: dict[str, set[str]] = {"trains": set(), "saves": set()}
        #: What the script handed a serializer since it last trained, writing
        #: elsewhere (a buffer, a staging directory): a save that begins with a
        #: write under the directory takes it (`stage`, `inject.writes`).
        self.staged: list[tuple[str, Any]] = []
        #: A forked child (a data loader's worker) inherits the wrappers, not the saves.
        self.pid = os.getpid()
        #: The files the script's own code wrote outside the directory, by their directory: where a
        #: run that made no save put what it wrote (`oracle.start.judge_saves_seen` says it).
        self.elsewhere: dict[str, set[str]] = {}

    def rel(self, path: Any) -> Optional[str]:
        """`path` relative to the checkpoint directory, or None if it is not a
        path under it: a path, an URL under the bucket's prefix it is mounted
        at, or a file fsspec opened at either."""
        where = _location(path)
        if where is None:
            return None
        if _remote(where):
            bucket, _, key = where.partition("://")[2].lstrip("/").partition("/")
            return self.bucket.rel(bucket, key) if self.bucket is not None else None
        absolute = os.path.abspath(where.partition("://")[2] if "://" in where else where)
        for root in (self.root, self.real_root):
            if absolute == root or absolute.startswith(root + os.sep):
                return os.path.relpath(absolute, root)
        return None

    def where(self, path: str) -> Optional[str]:
        """An absolute path inside the checkpoint directory as `{ckpt_dir}/REL`:
        a checkpoint that records a path of its own (Lightning's
        `best_model_path`, the Trainer's `best_model_checkpoint`) holds the
        run's directory, and each run of one case has a directory of its own."""
        rel = self.rel(path) if os.path.isabs(path) or _remote(path) else None
        return None if rel is None else "{ckpt_dir}" if rel == "." else "{ckpt_dir}/" + rel.replace(os.sep, "/")

    def step_in(self, path: Any) -> Optional[int]:
        rel = self.rel(path)
        found = re.search(r"\d+", rel) if rel else None
        return int(found.group()) if found else None

    @contextlib.contextmanager
    def boundary(self, step: Optional[int], source: str, name: str = "", obj: Any = None,
                 background: bool = False) -> Iterator[None]:
        """A save: the outermost one records, one inside it adds what it was handed."""
        main = threading.current_thread() is threading.main_thread()
        if self.current is not None or not main:
            if main and self.current.collects and obj is not None:  # type: ignore[union-attr]
                self.current.add(name, obj)
            yield
            return
        if step is None and self.pending is not None and self.pending.written is not None:
            step, source = self.pending.step, self.pending.source  # a piece of the save the script's write began
        if step is None:
            step, source = self.last_step + 1, "count"
        if self.pending is not None and self.pending.step != step:
            self.flush()  # the routine of the previous save ended where this one begins
        save = self.current = Save(step, source, collects=obj is None, background=background)
        if obj is not None:
            save.add(name, obj)
        self._note("saves", every=False)
        try:
            self.began(step)
            yield
        finally:
            self.current = None
        self.last_step = max(self.last_step, step)
        if self.pending is not None:  # another piece of the same save (each file of a step is a torch.save)
            self.pending.handed += save.handed
            self.pending.background = self.pending.background or save.background
        else:  # the routine goes on until the script trains, saves another step, or returns
            self.pending = save
            self._watch_forward()

    def _end(self, save: Save) -> None:
        """Save `save` returned (its routine is over): record it, and its landing
        if its writers are done already; else the last of them records it."""
        if save.written is not None and not save.took_staged:  # the files no object was handed for
            for rel in (name for name, covered in save.written.items() if not covered):
                found = written_state(os.path.join(self.root, rel))
                if found is not None:
                    save.add(rel.replace(os.sep, "/"), found)
            if not any(plain(obj) not in ({}, []) for _, obj in save.handed):
                # It saved nothing a run could be compared by (an empty marker file): no save to record, and
                # what the script does next is no part of one (`began` put the rank in the save's phase).
                from ckpt_harness import phase
                from ckpt_harness.inject import probes

                probes.set_phase(phase.RUN)
                return
        with self._landing:  # a writer that finishes now waits: its landing is recorded after the save
            running = self.writers.running(save.step)
            # Handing work to a writer makes the save one that may return before it landed, whether this
            # time the writer happened to finish first or not: the golden run's saves tell the same every time.
            save.background = save.background or self.writers.had(save.step)
            if running:
                self._awaiting.add(save.step)
            self.ended(save)
        if save.background and not running and not self.writers.failed(save.step):
            self.on_landed(save.step)

    # -- saves begun by the script's own writes (`inject.writes`) ---------------------------------------
    def ours(self) -> bool:
        """Is this the process's main thread (not a saver's thread, not a forked child)?"""
        return threading.current_thread() is threading.main_thread() and os.getpid() == self.pid

    def wrote(self, path: Any, src: Any, frame: Any) -> None:
        """The script opens `path` for writing, or renames `src` to it: under
        the checkpoint directory, outside any save, made by its own code (not
        a framework's logger), that begins a save of its own, named by the
        number in the path as any save is. Inside such a save it is one more
        file of it (a rename moves the file, or a whole directory of them)."""
        if self.current is not None or not self.ours():
            return
        rel = self.rel(path)
        if rel is None:
            self.wrote_outside(path, frame)
            return
        save = self.pending
        if save is None:
            from ckpt_harness.inject.tracer import made_by_job

            if not made_by_job(frame):
                return
            step = self.step_in(path)  # saves go forward: a smaller number names a rank or a version, not a step
            save = self._begin_written(step if step is not None and step > self.last_step else None)
        if save.written is None:  # the routine of an entry point's save: its files are what it was handed
            return
        moved = self.rel(src) if src is not None else None
        if moved is not None:
            for name in [n for n in save.written if n == moved or n.startswith(moved + os.sep)]:
                save.written[rel + name[len(moved):]] = save.written.pop(name)
        else:
            save.written.setdefault(rel, False)

    def wrote_outside(self, path: Any, frame: Any) -> None:
        """The script's own code wrote `path`, outside the directory: counted by its directory (`elsewhere`)."""
        from ckpt_harness.inject.tracer import made_by_job

        where = _location(path)
        if where is None or not made_by_job(frame):
            return
        where = os.path.abspath(where)
        files = self.elsewhere.get(os.path.dirname(where))
        if files is None and len(self.elsewhere) < ELSEWHERE:
            files = self.elsewhere[os.path.dirname(where)] = set()
        if files is not None and len(files) < ELSEWHERE:
            files.add(where)

    def wrote_elsewhere(self) -> dict[str, int]:
        """How many files the script's own code wrote outside the directory, by their directory."""
        return {folder: len(files) for folder, files in self.elsewhere.items()}

    def covers(self, rel: str) -> None:
        """A serializer wrote what it was handed into `rel`, a file of the
        save the script's write began: its state is that object, not the bytes."""
        if self.pending is not None and self.pending.written is not None and rel in self.pending.written:
            self.pending.written[rel] = True

    def _begin_written(self, step: Optional[int]) -> Save:
        """A save the script's write begins: it lasts until training goes on, as any save's routine does, and
        takes what the script handed a serializer on the way (`staged`)."""
        save = Save(step if step is not None else self.last_step + 1, "path" if step is not None else "count",
                    written={})
        save.handed, self.staged = self.staged, []
        save.took_staged = bool(save.handed)
        self._note("saves", every=False)
        self.began(save.step)
        self.last_step = max(self.last_step, save.step)
        self.pending = save
        self._watch_forward()
        return save

    def stage(self, name: str, obj: Any, frame: Any) -> None:
        """The script handed `obj` to a serializer writing outside the directory (a `BytesIO`, a staging
        file): held for a save its next write under the directory begins, until it trains again."""
        from ckpt_harness.inject.tracer import made_by_job

        if obj is not None and self.ours() and made_by_job(frame):
            self.staged.append((name, obj))

    # -- background saves -----------------------------------------------------------------------------
    def in_flight(self, step: int, returned: Any) -> None:
        """A save of `step` returned `returned`: if that is a future (or DCP's
        `AsyncSaveResponse`, whose `upload_completion` is), it is one more
        writer of the save, done when the future completes."""
        future = getattr(returned, "upload_completion", returned)
        if not callable(getattr(future, "add_done_callback", None)):
            return
        self.writers.handed(step)

        def done(finished: Any) -> None:
            try:
                failed = finished.cancelled() or finished.exception() is not None
            except BaseException:  # noqa: BLE001 - whatever a foreign future raises, it did not land
                failed = True
            self.writers.finished(step, failed)
        future.add_done_callback(done)

    def _settled(self, step: int, failed: bool) -> None:
        """The last writer of save `step` finished (in its own thread)."""
        with self._landing:
            awaited = step in self._awaiting
            self._awaiting.discard(step)
        if awaited and not failed:
            self.on_landed(step)

    def in_background(self, step: int) -> bool:
        """Did save `step` hand work to a writer (it may have finished since)?"""
        return self.writers.had(step)

    def wait_settled(self, step: int) -> None:
        """Until every writer of save `step`, if any, finished (landed or failed)."""
        self.writers.wait(step)

    # -- where a save's routine ends ------------------------------------------------------------------
    def training(self) -> None:
        """The main thread is training again (an optimizer step, a module's
        forward): the save before is over, and the script's routine around
        its entry points with it."""
        if threading.current_thread() is not threading.main_thread() or self.current is not None:
            return
        self.staged.clear()
        self.flush()
        self._note("trains", every=True)
        self.trains()

    def optimizer_step(self) -> None:
        """The main thread's optimizer step is about to run: training goes on
        (`training`), and it counts; outside a save `stepping` is told how
        many it made before this one (a run stopped between saves stops here)."""
        self.training()
        if self.ours():
            if self.current is None:
                self.stepping(self.optimizer_steps)
            self.optimizer_steps += 1

    def _note(self, kind: str, every: bool) -> None:
        """Record, once each, the script's functions that train (`trains`:
        every one on the stack, the loop and `main`) or call a save entry
        point (`saves`: the innermost, its save routine). The oracle knows a
        script's save routine by them: where its checkpoint I/O happens, but
        not around an optimizer step (`oracle.problems.save_routines`)."""
        from ckpt_harness.inject.tracer import job_functions, tracer

        here = tracer()
        found = job_functions(sys._getframe(2))
        new = [f for f in (found if every else found[:1]) if f not in self.noted[kind]]
        if here is not None and new:
            self.noted[kind].update(new)
            here.emit(kind, functions=new)

    def flush(self) -> None:
        """End the save in progress, if any: at the next training, the next save, or the script's return."""
        save, self.pending = self.pending, None
        if self._forward_hook is not None:
            self._forward_hook.remove()
            self._forward_hook = None
        if save is not None:
            self._end(save)

    def watch_first_forward(self) -> None:
        """The functions on the stack at the script's first module forward
        train (the loop, `main`, the module itself): a rank that fails in
        its first step, before any optimizer step said so, fails in its
        training, not in a save routine that merely made a directory before
        (`oracle.problems.save_routines`). The hook is there only until that
        first forward: it takes `Module.__call__` off its fast path, once."""
        import torch.nn.modules.module as module

        def first(_module: Any, _args: Any) -> None:
            if threading.current_thread() is threading.main_thread() and os.getpid() == self.pid:
                hook.remove()
                if self.current is None and self.pending is None:
                    self._note("trains", every=True)
        hook = module.register_module_forward_pre_hook(first)

    def _watch_forward(self) -> None:
        """A module's forward also ends the routine: the next step's forward
        comes before its optimizer step, and a failure there is training.
        The global hook is there only until that first forward: it takes
        `Module.__call__` off its fast path, for that one call."""
        import torch.nn.modules.module as module

        self._forward_hook = module.register_module_forward_pre_hook(lambda _module, _args: self.training())

    def observed(self) -> dict[str, Any]:
        """What the script's observers expose now (`observe`), one mapping."""
        return _merged(self.observers)

    def full(self) -> dict[str, Any]:
        """The script's full state now (`full_state`), one mapping."""
        return _merged(self.full_states)


#: Directories outside the checkpoint directory a run's writes are counted in, at most.
ELSEWHERE = 8
#: URL schemes that name a local file.
LOCAL_SCHEMES = ("file", "local")


def _remote(where: str) -> bool:
    """Is `where` an URL of remote storage (``s3://...``), not a local path?"""
    scheme, sep, _ = where.partition("://")
    return bool(sep) and scheme not in LOCAL_SCHEMES


def _location(target: Any) -> Optional[str]:
    """Where a save was handed to write: a path (str, bytes, path-like), or
    an fsspec file, by the URL of what it writes (``s3://bucket/key``)."""
    if isinstance(target, (str, bytes, os.PathLike)):
        return os.fsdecode(os.fspath(target))
    name = getattr(target, "name", None)
    if isinstance(name, (str, bytes, os.PathLike)) and not hasattr(target, "fs"):  # a file `open` gave: its path
        return os.path.abspath(os.fsdecode(name))
    path, protocol = getattr(target, "path", None), getattr(getattr(target, "fs", None), "protocol", None)
    if not isinstance(path, str) or not protocol:
        return None
    scheme = protocol if isinstance(protocol, str) else protocol[0]
    return path if "://" in path else f"{scheme}://{path}"


def _merged(fns: list[Callable[[], Mapping[str, Any]]]) -> dict[str, Any]:
    """What each of `fns` returns now, by the function's name (else its place)."""
    out: dict[str, Any] = {}
    for i, fn in enumerate(fns):
        name = getattr(fn, "__name__", "")
        out[name if name.isidentifier() and name not in out else str(i)] = plain(fn())
    return out


_active: Optional[Saves] = None


# -- the public opt-ins: no-ops outside the harness ----------------------------------------
@contextlib.contextmanager
def saving(step: int) -> Iterator[None]:
    """Mark a save the harness cannot see by itself, and its step.

    ``with ckpt_harness.saving(step): ...`` around the code that writes a
    checkpoint (and commits it: renames, markers) makes it one save, as the
    wrapped entry points are: the phase ``save {step}`` for traces and fault
    points, and what the `torch.save`/safetensors calls inside were handed
    as its state. Outside a harness run it does nothing.
    """
    if _active is None:
        yield
        return
    with _active.boundary(int(step), "saving"):
        yield


def observe(fn: Callable[[], Mapping[str, Any]]) -> Callable[[], Mapping[str, Any]]:
    """Add `fn()` (a mapping: RNG states, data position...) to the state
    recorded at every save and at the end. Returns `fn` (usable as a
    decorator); outside a harness run it does nothing."""
    if _active is not None:
        _active.observers.append(fn)
    return fn


def full_state(fn: Callable[[], Mapping[str, Any]]) -> Callable[[], Mapping[str, Any]]:
    """Declare the script's state that is the same at every world size:
    `fn()` returns its full, unsharded model and optimizer (what
    `Job.full_state` is for a job). With it, the world-size scenarios run
    on the script: save k at N ranks, resumed at M by the script's own
    logic, must give this state, bitwise, where it starts to train.

    The harness calls `fn` only in those runs: as each save starts, on the
    ranks that make it, and, in a run that resumes, at the first module
    forward after it was declared, on every rank (so declare it before the
    script loads). It may gather (`get_state_dict` with
    `full_state_dict=True`) when every rank makes the save; it must not
    change the state. Returns `fn` (usable as a decorator); outside a
    harness run it does nothing."""
    if _active is not None:
        _active.full_states.append(fn)
        _active.declared()
    return fn


#: Classes (by qualified name, so nothing is imported to check) whose
#: objects frameworks hand their saves whole, pickled by their attributes,
#: and whose attributes are training state a resume must restore: a
#: DeepSpeed loss scaler's current scale and overflow counters (fp16), the
#: addresses of a ZeRO optimizer's parameter slices. Other objects with no
#: `state_dict` stay named by type: their attributes hold what differs
#: between identical runs (the Trainer's `TrainingArguments` holds the run's
#: output directory and a timestamped logging directory).
BY_ATTRIBUTES = frozenset({
    "deepspeed.runtime.fp16.loss_scaler.LossScalerBase",
    "deepspeed.utils.tensor_fragment.fragment_address",
})


def plain(value: Any, where: Callable[[str], Optional[str]] = lambda path: None) -> Any:
    """`value` in the shapes `state.capture` takes: modules and optimizers by
    their `state_dict()`, sets sorted, enum members by name, the
    `BY_ATTRIBUTES` classes by their attributes, other objects it has no
    leaf for by their type's name; a string `where` names as a path inside
    the checkpoint directory by that name."""
    import enum

    import numpy as np
    import torch

    if isinstance(value, str):
        named = where(value)
        return value if named is None else named
    if isinstance(value, (torch.Tensor, np.ndarray, np.generic, bool, int, float, bytes)) or value is None:
        return value
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    if isinstance(value, enum.Enum):
        return f"<{kind}.{value.name}>"
    if isinstance(value, Mapping):
        return {str(k): plain(v, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, where) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v, where) for v in value), key=repr)
    state_dict = getattr(value, "state_dict", None)
    if callable(state_dict):
        return plain(state_dict(), where)
    if any(f"{c.__module__}.{c.__qualname__}" in BY_ATTRIBUTES for c in type(value).__mro__):
        return {"type": kind, **{str(k): plain(v, where) for k, v in vars(value).items()}}
    return f"<{kind}>"


# -- installing the wrappers ----------------------------------------------------------------
def install(saves: Saves) -> None:
    """Make `saves` the process's boundaries and wrap every save entry point:
    those of modules imported already now, the others when imported."""
    global _active
    _active = saves
    for name, hook in _HOOKS.items():
        imports.when_imported(name, hook)
    from ckpt_harness.inject import writes

    writes.install(saves)


def _wrap(owner: Any, attr: str, make: Callable[[Callable], Callable], rebind: bool = True) -> None:
    original = getattr(owner, attr, None)
    if original is None or getattr(original, "__ckpt_harness_save__", False):
        return
    wrapped = functools.wraps(original)(make(original))
    wrapped.__ckpt_harness_save__ = True
    setattr(owner, attr, wrapped)
    if rebind and isinstance(owner, type(sys)):  # a module: `from x import f` copies bound earlier
        from ckpt_harness.inject.files import _rebind

        _rebind(original, wrapped)


def _to_path(saves_of: Callable[[], Saves], path_arg: int, path_kw: str, obj_arg: int) -> Callable:
    """A saver of one object to one file (torch.save, save_file)."""
    def make(original: Callable) -> Callable:
        def save(*args: Any, **kwargs: Any) -> Any:
            saves = saves_of()
            path = args[path_arg] if len(args) > path_arg else kwargs.get(path_kw)
            obj = args[obj_arg] if len(args) > obj_arg else None
            rel = saves.rel(path)
            name = os.path.basename(rel) if rel else _type_name(path)
            if rel is None and saves.current is None:
                saves.stage(os.path.basename(_location(path) or "") or name, obj, sys._getframe(1))
                if isinstance(path, (str, bytes, os.PathLike)) and saves.ours():  # natively written: no `open`
                    saves.wrote_outside(path, sys._getframe(1))
                return original(*args, **kwargs)
            try:
                with saves.boundary(saves.step_in(path), "path", name, obj):
                    return original(*args, **kwargs)
            finally:
                saves.covers(rel) if rel is not None else None
        return save
    return make


def _serializer(path_arg: int, path_kw: str, obj_of: Callable[[tuple, dict], Any]) -> Callable:
    """A general serializer (``pickle.dump``, ``json.dump``, ``numpy.save``):
    only for the saves the script's own writes make (`inject.writes`), so an
    entry point's save records what it recorded before. Into the checkpoint
    directory, outside a save, it begins one; elsewhere what it was handed is
    held for the save the script's next write there begins (`Saves.stage`)."""
    def make(original: Callable) -> Callable:
        def save(*args: Any, **kwargs: Any) -> Any:
            saves = _require()
            if saves.current is not None or saves.pending is not None and saves.pending.written is None:
                return original(*args, **kwargs)
            path = args[path_arg] if len(args) > path_arg else kwargs.get(path_kw)
            rel = saves.rel(path)
            if rel is None:
                saves.stage(os.path.basename(_location(path) or "") or _type_name(path), obj_of(args, kwargs),
                            sys._getframe(1))
                return original(*args, **kwargs)
            try:
                with saves.boundary(saves.step_in(path), "path", os.path.basename(rel), obj_of(args, kwargs)):
                    return original(*args, **kwargs)
            finally:
                saves.covers(rel)
        return save
    return make


def written_state(path: str) -> Any:
    """What a file of a save that was handed nothing holds (raw bytes the
    script wrote, a file it copied in): a JSON document as itself, its keys
    compared one by one; a short text as itself (`TEXT_BYTES`); any other
    file by the SHA-256 of its bytes. None
    where no file is any more (deleted, or a directory)."""
    import hashlib
    import json

    try:
        with open(path, "rb") as f:
            data = f.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    if path.endswith(".json"):
        try:
            return json.loads(data)
        except ValueError:
            pass
    if len(data) <= TEXT_BYTES:  # a pointer, a marker: as its text, where a run's identity can be told in it
        try:
            text = data.decode()
        except UnicodeDecodeError:
            text = None
        if text is not None and all(c.isprintable() or c.isspace() for c in text):
            return text
    return f"sha256:{hashlib.sha256(data).hexdigest()} ({len(data)} bytes)"


#: A file a save wrote as raw bytes up to this size that decodes as text is recorded as that text.
TEXT_BYTES = 4096


def _type_name(target: Any) -> str:
    """What a save's state calls what it was handed when it wrote to no path
    (a file object, a buffer): its type, as the job would have it without the
    probes (a file the probes opened is an `io` class's subclass), so that
    runs with and without file tracing record the same keys."""
    plain = next((c for c in type(target).__mro__ if c.__module__ in ("io", "_io")), type(target))
    return plain.__name__


def _method(step_of: Callable[[Any, tuple, dict], Optional[int]], source: str) -> Callable:
    """A framework's save method: a boundary named by its own step counter."""
    def make(original: Callable) -> Callable:
        def save(self: Any, *args: Any, **kwargs: Any) -> Any:
            saves = _require()
            try:
                step = step_of(self, args, kwargs)
            except (AttributeError, TypeError, ValueError):
                step = None
            with saves.boundary(step, source if step is not None else "count"):
                return original(self, *args, **kwargs)
        return save
    return make


def _require() -> Saves:
    assert _active is not None, "save wrappers are installed only with a Saves"
    return _active


def _torch(module: Any) -> None:
    make = _to_path(_require, 1, "f", 0)
    _wrap(module, "save", make)
    sys.modules["torch.serialization"].save = module.save
    global _steps_hooked
    if not _steps_hooked:  # an optimizer step is training: a save before it has ended (`Saves.training`)
        import torch.optim.optimizer as optimizer

        optimizer.register_optimizer_step_pre_hook(_optimizer_step)
        _require().watch_first_forward()
        _steps_hooked = True
        WRITERS.arm()  # a run that holds a save's writers until training went on watches its steps from now


_steps_hooked = False


def _optimizer_step(_optimizer: Any, _args: Any, _kwargs: Any) -> None:
    caller = sys._getframe(1)  # torch's step wrapper, which runs the hooks
    if not _creates_state(caller) and not _inside_another_step(caller):
        _require().optimizer_step()


def _inside_another_step(wrapper: Any) -> bool:
    """Is this step one that an outer optimizer's step makes? torchtitan's
    `OptimizersContainer` is itself an `Optimizer` whose step steps each
    model part's: one training step, which once counted as two (and a stop
    between saves landed inside it, after the outer step had begun). Every
    optimizer's step runs through the same wrapper code, so an outer step in
    progress on this thread is that code further up the stack."""
    code, frame = wrapper.f_code, wrapper.f_back
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _creates_state(frame: Any) -> bool:
    """Is this optimizer step the one DCP makes to create an optimizer's state
    (`_init_optim_state`: zero gradients, a zero learning rate), called by
    `get_state_dict` before a load or a save? Not training: OLMo-core's save
    of step 0 makes it, which once ended that save before its rename and
    counted a step no one trained."""
    for _ in range(8):  # the hook, torch's step wrappers, then its caller
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name == "_init_optim_state" and code.co_filename.endswith(
                os.path.join("checkpoint", "state_dict.py")):
            return True
        frame = frame.f_back
    return False


def _safetensors(module: Any) -> None:
    _wrap(module, "save_file", _to_path(_require, 1, "filename", 0))


def _pickle(module: Any) -> None:
    _wrap(module, "dump", _serializer(1, "file", lambda a, k: a[0] if a else k.get("obj")), rebind=False)


def _json(module: Any) -> None:
    _wrap(module, "dump", _serializer(1, "fp", lambda a, k: a[0] if a else k.get("obj")), rebind=False)


def _numpy(module: Any) -> None:
    # Called as `np.save`: a `from numpy import save` bound earlier is not
    # rebound (a walk of every module per rank, `files._rebind`).
    _wrap(module, "save", _serializer(0, "file", lambda a, k: a[1] if len(a) > 1 else k.get("arr")), rebind=False)
    arrays = _serializer(0, "file", lambda a, k: {**{f"arr_{i}": v for i, v in enumerate(a[1:])},
                                                   **{n: v for n, v in k.items() if n not in _NUMPY_OPTIONS}})
    _wrap(module, "savez", arrays, rebind=False)
    _wrap(module, "savez_compressed", arrays, rebind=False)


#: Keywords of `numpy.savez` that are options, not arrays.
_NUMPY_OPTIONS = frozenset({"file", "allow_pickle"})


def _dcp(module: Any) -> None:
    def dcp_save(background: bool) -> Callable[[Callable], Callable]:
        def make(original: Callable) -> Callable:
            def save(*args: Any, **kwargs: Any) -> Any:
                saves = _require()
                state = args[0] if args else kwargs.get("state_dict")
                where = kwargs.get("checkpoint_id") or getattr(kwargs.get("storage_writer"), "path", None)
                step = saves.step_in(where)
                with saves.boundary(step, "path", "state_dict", state, background):
                    save = saves.current  # the outer save, inside another one (the boundary is that one)
                    returned = original(*args, **kwargs)
                    if background and save is not None:  # a writer of the save before the save can end
                        saves.in_flight(save.step, returned)
                return returned
            return save
        return make

    for owner in (module, sys.modules.get("torch.distributed.checkpoint.state_dict_saver")):
        if owner is not None:
            _wrap(owner, "save", dcp_save(False))
            _wrap(owner, "async_save", dcp_save(True))


#: The fields of the Trainer's `TrainerState` (its trainer_state.json) that are
#: training state a resume must restore; the rest is its log (`log_history`
#: holds run times) and what describes the process (`is_world_process_zero`).
TRAINER_STATE = ("epoch", "global_step", "max_steps", "num_train_epochs", "num_input_tokens_seen", "total_flos",
                 "best_metric", "best_global_step", "best_model_checkpoint", "stateful_callbacks")


def _hf_trainer(module: Any) -> None:
    _wrap(module.Trainer, "_save_checkpoint", _method(lambda self, a, k: self.state.global_step, "framework"))

    def make(original: Callable) -> Callable:
        def save_to_json(self: Any, json_path: str) -> Any:
            """Inside a save, what trainer_state.json holds joins its state
            (json, not `torch.save`: else the best checkpoint, the epoch and
            the callbacks' state would go unchecked); outside one it is the
            script's own `save_state`, no save boundary."""
            saves = _require()
            if saves.current is None:
                return original(self, json_path)
            fields = {name: getattr(self, name, None) for name in TRAINER_STATE}
            with saves.boundary(None, "path", os.path.basename(json_path), fields):
                return original(self, json_path)
        return save_to_json

    state = getattr(sys.modules.get("transformers.trainer_callback"), "TrainerState", None)
    if state is not None:
        _wrap(state, "save_to_json", make)


def _accelerate(module: Any) -> None:
    def step_of(self: Any, args: tuple, kwargs: dict) -> Optional[int]:
        """The number in the directory given, or under automatic checkpoint
        naming (no directory: ``checkpoints/checkpoint_<iteration>``) the
        iteration, which names the directory accelerate writes."""
        path = args[0] if args else kwargs.get("output_dir")
        if path is None and self.project_configuration.automatic_checkpoint_naming:
            return self.save_iteration
        return _require().step_in(path)

    _wrap(module.Accelerator, "save_state", _method(step_of, "path"))


def _deepspeed(module: Any) -> None:
    _wrap(module.DeepSpeedEngine, "save_checkpoint", _method(lambda self, a, k: self.global_steps, "framework"))


def _lightning(module: Any) -> None:
    _wrap(module.Trainer, "save_checkpoint", _method(lambda self, a, k: self.global_step, "framework"))


def _lightning_async(module: Any) -> None:
    """Lightning's `AsyncCheckpointIO` hands the checkpoint dict to its pool,
    whose `torch.save` then runs in another thread (and joins no save): the
    dict it was handed, on the main thread inside the Trainer's save, is
    the save's state, as `torch.save` is handed it in a synchronous save."""
    def make(original: Callable) -> Callable:
        def save_checkpoint(self: Any, *args: Any, **kwargs: Any) -> Any:
            saves = _require()
            if saves.current is None:  # not inside the Trainer's save: nothing to join
                return original(self, *args, **kwargs)
            with saves.boundary(None, "path", "checkpoint", args[0] if args else kwargs.get("checkpoint")):
                return original(self, *args, **kwargs)
        return save_checkpoint

    _wrap(module.AsyncCheckpointIO, "save_checkpoint", make)


def _megatron(module: Any) -> None:
    """Megatron-Core's `dist_checkpointing.save(sharded_state_dict, checkpoint_dir)`.
    Its writer (`FileSystemWriterAsync`, used by a synchronous save too)
    writes each tensor with `torch.save` into a stream of DCP's transforms,
    not a file, and every other object as bytes: no save the `torch.save`
    hook sees, but for the `.metadata` pickled last. What the save was
    handed is the sharded state dict, whose values a save writes are each
    `ShardedTensor`'s and `ShardedObject`'s `data` (`megatron_state`)."""
    def make(original: Callable) -> Callable:
        def save(*args: Any, **kwargs: Any) -> Any:
            saves = _require()
            state = args[0] if args else kwargs.get("sharded_state_dict")
            where = args[1] if len(args) > 1 else kwargs.get("checkpoint_dir")
            with saves.boundary(saves.step_in(where), "path", "sharded_state_dict", megatron_state(state)):
                return original(*args, **kwargs)
        return save

    for owner in (module, sys.modules.get("megatron.core.dist_checkpointing.serialization")):
        if owner is not None:
            _wrap(owner, "save", make)


#: Megatron-Core's sharded values: what a save of one writes is their `data` (a tensor's local shard, an object).
MEGATRON_SHARDED = ("ShardedTensor", "ShardedObject", "ShardedTensorFactory")


def megatron_state(obj: Any) -> Any:
    """A Megatron-Core sharded state dict as the values its save writes:
    each sharded value's `data` in its place, the rest as it is (by type
    name: Megatron-Core is not imported here)."""
    if isinstance(obj, dict):
        return {key: megatron_state(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [megatron_state(value) for value in obj]
    if isinstance(obj, tuple):
        return tuple(megatron_state(value) for value in obj)
    return obj.data if type(obj).__name__ in MEGATRON_SHARDED else obj


#: Module -> what wraps its save entry points once it has run.
_HOOKS: dict[str, Callable[[Any], None]] = {
    "torch": _torch,
    "pickle": _pickle,
    "json": _json,
    "numpy": _numpy,
    "safetensors.torch": _safetensors,
    "torch.distributed.checkpoint": _dcp,
    "megatron.core.dist_checkpointing": _megatron,
    "transformers.trainer": _hf_trainer,
    "accelerate.accelerator": _accelerate,
    "deepspeed.runtime.engine": _deepspeed,
    "lightning.pytorch.trainer.trainer": _lightning,
    "pytorch_lightning.trainer.trainer": _lightning,
    "lightning.pytorch.plugins.io.async_plugin": _lightning_async,
    "pytorch_lightning.plugins.io.async_plugin": _lightning_async,
}
