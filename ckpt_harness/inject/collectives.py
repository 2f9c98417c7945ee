"""What the ranks' flight recorders say about a hang.

Each rank of a stopped run hands over the collectives torch's flight
recorder kept (`ckpt_harness.launch.flight`): the Python-level probes see
only what the job calls through `torch.distributed`, the recorder also
what C++ issued (DDP's gradient buckets inside `backward`, DCP, DeepSpeed).
A collective's sequence number is counted per process group and is the same
on every rank, so the recordings line up: the first number at which the
ranks' ops differ is the mismatch that hung the run.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Mapping, Optional

from ckpt_harness.inject.tracer import frame_name, is_job_code, is_library

#: Libraries that issue collectives on a job's behalf, by a path in their
#: frames (innermost first wins).
_LIBRARIES = (
    ("/torch/distributed/checkpoint/", "DCP"),
    ("/torch/distributed/fsdp/", "FSDP"),
    ("/torch/nn/parallel/distributed.py", "DDP"),
    ("/deepspeed/", "DeepSpeed"),
)
_DEFAULT_GROUP = "default_pg"


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective as the recorder kept it."""

    #: Its number in its process group (point-to-point ops are counted apart).
    seq: int
    op: str
    group: str
    p2p: bool
    #: It completed on this rank.
    retired: bool
    #: (file, line, function) of the Python stack that issued it, innermost first.
    frames: tuple[tuple[str, int, str], ...] = ()

    @property
    def label(self) -> str:
        """"all_reduce #9", with the group when it is not the default one."""
        group = "" if self.group in ("", _DEFAULT_GROUP) else f" of group {self.group}"
        return f"{self.op} #{self.seq}{group}"

    @property
    def caller(self) -> Optional[str]:
        """The job's own frame that led to it ("train.py:40 in train_step()"):
        the innermost outside torch, the harness and installed packages (the
        line of the script that asked, not a library's wrapper around the
        call), else the innermost outside torch and the harness (a job that
        is itself an installed package)."""
        own = [f for f in self.frames if is_job_code(f[0])]
        found = next((f for f in own if not is_library(f[0])), own[0] if own else None)
        return frame_name(*found) if found is not None else None

    @property
    def library(self) -> Optional[str]:
        """Who issued it when the job did not call it itself."""
        if any(name == "_engine_run_backward" for _, _, name in self.frames):
            return "DDP gradient bucket" if self.op == "all_reduce" else "gradient reduction in backward"
        for filename, _, _ in self.frames:
            for marker, library in _LIBRARIES:
                if marker in filename:
                    return library
        return None

    @property
    def origin(self) -> str:
        """ "DDP gradient bucket, from train.py:40 in train_step()", as far as known."""
        caller = self.caller
        return ", ".join(part for part in (self.library, f"from {caller}" if caller else None) if part)


@dataclasses.dataclass(frozen=True)
class Recording:
    """One rank's flight recorder at the moment the run was stopped."""

    collectives: tuple[Collective, ...]

    @classmethod
    def parse(cls, text: Optional[str]) -> Optional["Recording"]:
        """A rank's dump, or None if there is none or it cannot be read."""
        if not text:
            return None
        try:
            dump = json.loads(text)
            return cls(tuple(
                Collective(e["seq"], e["op"], e["group"], e["p2p"], e["retired"],
                           tuple((f, int(line), name) for f, line, name in e["frames"]))
                for e in dump["entries"]
            ))
        except (ValueError, KeyError, TypeError):
            return None

    @property
    def blocked(self) -> Optional[Collective]:
        """The oldest collective that never completed: what the rank waits in."""
        return next((c for c in self.collectives if not c.retired), None)

    def stream(self, group: str) -> dict[int, Collective]:
        """The group's collectives by sequence number."""
        return {c.seq: c for c in self.collectives if c.group == group and not c.p2p}


def first_disagreement(recordings: Mapping[int, Recording]) -> Optional[str]:
    """Where the ranks' collective sequences first differ, in one clause
    ("collectives part at #9: rank 0 all_reduce, rank 1 barrier"), or None.

    When the same collective was called from different lines before that
    number, the clause says where first ("their call sites part earlier, at
    #7: rank 0 barrier from train.py:86, rank 1 barrier from train.py:82"):
    a rank that skips one barrier of two meets its peer's first barrier with
    its second, and the counts part only at the collective after them, while
    the line that is the bug is where the call sites first differ (or a
    rank-dependent path the job means; the clause says which lines, not why).

    Only numbers every rank still remembers are compared (the recorder is a
    ring); a rank that never got to a number says where it stopped.
    """
    groups = sorted({c.group for r in recordings.values() for c in r.collectives if not c.p2p},
                    key=lambda g: (g != _DEFAULT_GROUP, g))
    for group in groups:
        streams = {rank: recordings[rank].stream(group) for rank in sorted(recordings)}
        streams = {rank: s for rank, s in streams.items() if s or group == _DEFAULT_GROUP}
        if len(streams) < 2:
            continue
        start = max(min(s) for s in streams.values() if s)
        end = max(max(s) for s in streams.values() if s)
        where = "" if group == _DEFAULT_GROUP else f" of group {group}"
        sites = None  # the first number the same collective was called from different lines
        for seq in range(start, end + 1):
            found = {rank: s.get(seq) for rank, s in streams.items()}
            if len({c.op if c else None for c in found.values()}) > 1:
                return f"collectives part at #{seq}{where}: " + ", ".join(
                    f"rank {rank} {c.op}" if c else f"rank {rank} {_stopped(streams[rank])}"
                    for rank, c in found.items()) + (sites or "")
            callers = {c.caller for c in found.values() if c is not None}
            if sites is None and None not in callers and len(callers) > 1:
                sites = f"; their call sites part earlier, at #{seq}: " + ", ".join(
                    f"rank {rank} {c.op} from {c.caller}" for rank, c in found.items() if c is not None)
    return None


def _stopped(stream: dict[int, Collective]) -> str:
    if not stream:
        return "none"
    last = stream[max(stream)]
    return f"none (its last was {last.op} #{last.seq})"
