"""What one group run leaves behind: the rank↔harness contract over the run directory.

Ranks write their records (states after load and saves, the error that
ended them) and trace (every probed operation) into the run directory as
they go: this module is that format, the side a rank loads (`Kind`,
`Recorder`) and the raw readers of its files. The harness joins them with
the launcher's outcome (who finished, failed, crashed or hung, with
stacks) into a `runs.Run`, which the oracle reads; how long a case's parts
took is the controller's (`pipeline.clock`). Where each file is,
`launch.layout` says, for the launcher as for the ranks.
"""

from __future__ import annotations

import enum
import pickle
import time
from typing import Any

from ckpt_harness.inject import trace
from ckpt_harness.inject.trace import Event
from ckpt_harness.launch.layout import PathLike, child_trace_paths, data_path, records_path, trace_path


# -- the files of a run directory, read back ------------------------------------------------
def read_events(run_dir: PathLike, rank: int) -> list[Event]:
    """A rank's events, with those of the processes it spawned to save merged
    in by time (each names its process: `Event.fields["process"]`)."""
    own = trace.read_events(trace_path(run_dir, rank))
    children = child_trace_paths(run_dir, rank)
    if not children:
        return own
    return trace.merge_processes([own, *(trace.read_events(p) for p in children)])


def data_reader(run_dir: PathLike):
    """`read(rank, offset, length, actor)` over the ranks' data logs, as the
    durability model asks (a write's data ref names its log's `actor`)."""
    def read(rank: int, offset: int, length: int, actor: str = "") -> bytes:
        with open(data_path(run_dir, rank, actor), "rb") as f:
            f.seek(offset)
            return f.read(length)

    return read


class Kind(str, enum.Enum):
    """What a record marks in a rank's life."""

    LOADED = "loaded"
    LOADED_FULL = "loaded full"
    SAVED = "saved"
    SAVED_FULL = "saved full"
    #: A save that returned in the background landed and the job made it the
    #: one to resume (`ctx.published`, or its `wait_for_saves` returned).
    PUBLISHED = "published"
    #: A script's save that returned in the background finished writing: its
    #: writers (`inject.writers`: the future its entry point returned, as
    #: `dcp.async_save`'s; a pool task or a thread it handed work to) are
    #: done, and none raised. Not PUBLISHED: whether the script then makes it the one to
    #: resume (a `latest` it writes after) is the script's business.
    LANDED = "landed"
    STOPPED = "stopped"
    FINAL = "final"
    FINISHED = "finished"
    ERROR = "error"


class Recorder:
    """A rank's side of its record file: one pickle per record, each written
    whole and unbuffered, so a rank killed at any moment leaves every record
    up to that moment."""

    def __init__(self, path: PathLike):
        self.file = open(path, "ab", buffering=0)
        self.start = time.monotonic()

    def write(self, kind: Kind, **fields: Any) -> None:
        record = {"event": kind.value, "t": time.monotonic() - self.start, **fields}
        self.file.write(pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))


def read_records(run_dir: PathLike, rank: int) -> list[dict]:
    """Every complete record a rank wrote, in order."""
    out = []
    try:
        with open(records_path(run_dir, rank), "rb") as f:
            while True:
                try:
                    out.append(pickle.load(f))
                except (EOFError, pickle.UnpicklingError):
                    return out
    except OSError:
        return out
