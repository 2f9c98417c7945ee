"""A run's identity told apart from its state, before two runs' saves are compared.

Every run of a case has a checkpoint directory of its own, and a
checkpoint often records values that name the run rather than its
training: Lightning's `ModelCheckpoint` keeps ``dirpath`` and
``best_model_path`` and keys ``best_k_models`` by absolute path; the HF
Trainer keeps ``best_model_checkpoint``; scripts write the host, the
process id and the time of the save into a JSON file beside the weights.
Compared as they are, two identical runs "differ", and every case of the
script is UNKNOWN (not deterministic): nothing is judged, the real
regression included.

So a rank rewrites those values in the record it writes (`Identity.normalize`),
and records which keys it rewrote and why, which the report lists:

* the run's checkpoint directory, anywhere in a string or a mapping's key
  (a path, a URL, a sentence), becomes ``{ckpt_dir}``: the rest of the
  path still counts, so a path to step 4 still differs from one to step 8;
* a number or ISO date-time that falls within the run's own lifetime (it
  started at most `SLACK` seconds before the rank and ends now), as seconds,
  milliseconds or nanoseconds since the epoch, is a wall-clock time;
* an integer equal to this process's id or its parent's, under a key that
  says "pid" or as the whole of a text (a pid file), is a process id;
* this host's name, in a string, is the host.

Only such values are rewritten: a training counter, a learning rate or a
metric cannot fall in the run's few minutes of the epoch by chance (a
value that did would be a value of the epoch's own size). Tensors are never
touched.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import socket
import time
from typing import Optional

from ckpt_harness.state import Leaf, Record, ValueLeaf

#: How long before the rank started a time of its run may be (its launcher, a parent's clock).
SLACK = 600.0
#: What each kind of identity value becomes, and the reason the report gives.
CKPT_DIR, WALL_CLOCK, PID, HOST = "{ckpt_dir}", "<wall-clock time>", "<pid>", "<host>"
REASONS = {CKPT_DIR: "the run's checkpoint directory", WALL_CLOCK: "a wall-clock time", PID: "a process id",
           HOST: "the host's name"}
_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[T _]\d{2}[:\-]\d{2}[:\-]\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?")


@dataclasses.dataclass(frozen=True)
class Identity:
    """What names one run on one rank: its checkpoint directory (as given,
    absolute and resolved), when it started, its process ids and host."""

    roots: tuple[str, ...]
    started: float
    pids: frozenset[int]
    host: str

    @classmethod
    def of(cls, ckpt_dir: str, url: str = "") -> "Identity":
        roots = {r for r in (url, os.path.abspath(ckpt_dir), os.path.realpath(ckpt_dir)) if r}
        return cls(tuple(sorted(roots, key=len, reverse=True)), time.time() - SLACK,
                   frozenset({os.getpid(), os.getppid()}), socket.gethostname())

    def normalize(self, record: Record) -> tuple[Record, dict[str, str]]:
        """`record` with the run's identity rewritten, and the keys rewritten (as they are now) with why."""
        out: Record = {}
        why: dict[str, str] = {}
        now = time.time()
        for key, leaf in record.items():
            new_key, reasons = self._text(key)
            new_leaf, more = self._leaf(new_key, leaf, now)
            out[new_key] = new_leaf
            reasons += more
            if reasons:
                why[new_key] = ", ".join(dict.fromkeys(REASONS[r] for r in reasons))
        return out, why

    def _text(self, text: str) -> tuple[str, list[str]]:
        for root in self.roots:
            text = text.replace(root, CKPT_DIR)
        reasons = [CKPT_DIR] if CKPT_DIR in text else []  # or named so already (`saves.Saves.where`)
        if text == self.host or len(self.host) >= 3 and self.host in text:  # a short name only whole
            text, reasons = text.replace(self.host, HOST), reasons + [HOST]
        for found in list(_DATETIME.finditer(text)):
            if self._recent_text(found.group(), time.time()):
                text, reasons = text.replace(found.group(), WALL_CLOCK), reasons + [WALL_CLOCK]
        return text, reasons

    def _leaf(self, key: str, leaf: Leaf, now: float) -> tuple[Leaf, list[str]]:
        if not isinstance(leaf, ValueLeaf):
            return leaf, []
        if leaf.type == "str":
            if leaf.value.strip().isdigit() and int(leaf.value) in self.pids:  # a pid file: nothing but the pid
                return ValueLeaf("str", PID), [PID]
            text, reasons = self._text(leaf.value)
            return (ValueLeaf("str", text), reasons) if reasons else (leaf, [])
        if leaf.type in ("int", "float") and not isinstance(leaf.value, bool):
            number = float.fromhex(leaf.value) if leaf.type == "float" else leaf.value
            if leaf.type == "int" and number in self.pids and "pid" in key.rpartition(".")[2].lower():
                return ValueLeaf("str", PID), [PID]
            if self._recent(number, now):
                return ValueLeaf("str", WALL_CLOCK), [WALL_CLOCK]
        return leaf, []

    def _recent(self, number: float, now: float) -> bool:
        """Is `number` a time within this run, as seconds, milliseconds or nanoseconds since the epoch?"""
        return any(self.started <= number / scale <= now for scale in (1, 1e3, 1e6, 1e9))

    def _recent_text(self, text: str, now: float) -> bool:
        parsed = _parse(text)
        return parsed is not None and self.started <= parsed <= now


def _parse(text: str) -> Optional[float]:
    """Seconds since the epoch of an ISO-like date-time (local time when it names no zone)."""
    date, time_part = text[:10], text[11:]
    clock = time_part[:8].replace("-", ":")
    rest = time_part[8:]
    try:
        value = datetime.datetime.fromisoformat(f"{date}T{clock}{rest.replace('Z', '+00:00')}")
    except ValueError:
        return None
    return value.timestamp()
