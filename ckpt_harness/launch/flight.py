"""torch's flight recorder in every rank, read back when a run hangs.

A rank's Python stack cannot say which collective it waits in when the
collective was issued from C++: DDP's reducer all-reduces gradient buckets
from autograd hooks inside `backward`, DCP and DeepSpeed call c10d below
Python. The flight recorder (torch >= 2.5, gloo as well as NCCL) keeps a
ring of the last collectives each process group enqueued: the sequence
number, which is the same on every rank of the group, the op, whether it
completed, and the Python stack that issued it.

What this changes in a rank:

* ``TORCH_FR_BUFFER_SIZE`` is set to `BUFFER_SIZE` unless the job's
  environment sets it (torch 2.13 records 2000 entries by default; the
  harness states it so a later torch changing its default does not blind
  the hang summaries). ``TORCH_FR_BUFFER_SIZE=0`` turns it off; hang
  summaries then fall back to the Python-level probes.
* `DUMP_SIGNAL` (SIGUSR2) is blocked in every thread and taken by one
  daemon thread, which writes the recorder's entries when the harness asks
  (only when a run is stopped at its deadline). A job's own SIGUSR2 handler
  would never run.

The recorder is torch's own bookkeeping, on by default: the harness adds no
work per collective, it only keeps the recorder from being off. Its cost is
capturing the issuing Python stack: on this 2-core box, one gloo rank's
small all_reduce took 12.3 us with it and 10.9 us without (best of 5 x 2000,
quietest pair); a `verify` of `torch_save` (2 ranks, 8 steps) took 8.96-12.5 s
either way, the difference lost in the noise of a loaded machine.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any, Optional

#: The signal that asks a rank for its flight recorder entries.
DUMP_SIGNAL = signal.SIGUSR2
BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
BUFFER_SIZE = "2000"


def enable() -> None:
    """Turn the recorder on for process groups created from now on (in a rank, before init)."""
    os.environ.setdefault(BUFFER_ENV, BUFFER_SIZE)


def serve(path: str) -> None:
    """Answer `DUMP_SIGNAL` by writing the recorder's entries to `path`.

    Call while the rank has one thread: the mask is inherited by every thread
    started later (torch's and the job's), so the signal can only be taken by
    the dumper, which needs no Python bytecode from a main thread that may sit
    in C++ for ever.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {DUMP_SIGNAL})
    threading.Thread(target=_serve, args=(path,), name="ckpt-harness-flight-recorder", daemon=True).start()


def _serve(path: str) -> None:
    while True:
        signal.sigwait({DUMP_SIGNAL})
        try:
            dump: dict[str, Any] = {"at": time.time(), "entries": entries()}
        except Exception as exc:  # noqa: BLE001 - the harness reports it instead of a summary
            dump = {"error": f"{type(exc).__name__}: {exc}"}
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(dump, f)
        os.replace(tmp, path)  # the harness never reads half a dump


def entries() -> list[dict[str, Any]]:
    """The recorder's collectives, oldest first, in the harness's own schema.

    The pickled dump is the one that keeps the issuing stacks (the JSON one
    drops them).
    """
    import pickle

    from torch._C._distributed_c10d import _dump_fr_trace

    raw = pickle.loads(_dump_fr_trace(includeCollectives=True, includeStackTraces=True, onlyActive=False))
    return [
        {
            "seq": e["p2p_seq_id"] if e.get("is_p2p") else e["collective_seq_id"],
            "op": e["profiling_name"].rpartition(":")[2],
            "group": e["process_group"][1] if e.get("process_group") else "",
            "pg": e["process_group"][0] if e.get("process_group") else "",
            "p2p": bool(e.get("is_p2p")),
            "retired": bool(e.get("retired")),
            "created": (e.get("time_created_ns") or 0) / 1e9,
            "frames": [[f["filename"], f["line"], f["name"]] for f in e.get("frames", ())],
        }
        for e in raw.get("entries", ())
    ]


def read(path: str) -> Optional[str]:
    """A dump written by `serve`, or None if the rank did not answer."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None
