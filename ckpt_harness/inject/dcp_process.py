"""Probes in DCP's checkpoint process: `dcp.async_save` with the PROCESS executor.

That executor spawns one long-lived process per rank
(`_AsyncCheckpointProcess`, `mp.get_context("spawn")`: a fresh interpreter)
and hands it every save; the save's file writes and collectives (on the
process's own gloo group) happen there, where nothing the rank installed
runs. Unprobed, a crash in a write there, or the bytes the power-loss model
must replay, cannot be seen (an exploration warned about unseen writes).

So, in the rank, every checkpoint process DCP spawns gets as its target
`_subprocess` with the rank's share of the probes (`probes.Child`, picklable):
it installs them, then runs DCP's own `_checkpointing_subprocess`. Each save
request runs in the phase of the rank's thread that sent it ("bg_save 4",
`probes.follow_threads`), which the rank tags onto the request's identifier:
DCP ignores the attribute, and the process's points are then numbered per
save in the order it performs them. A fault armed there fires there: a
crash kills the checkpoint process, not the rank, which learns of it at its
next wait for the save's future ("Checkpoint background process is dead").

The process starts warm when the rank has a template (`launch.warm`: the
one change to how DCP runs, its module's `mp` served through
`warm.Multiprocessing`), else as DCP spawns it.

The only module that imports DCP's executor internals (torch 2.13).
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Optional

import torch
import torch.distributed as dist
from torch.distributed.checkpoint import _async_process_executor as executor

from ckpt_harness.inject import probes
from ckpt_harness.inject.tracer import set_phase, thread_phase
from ckpt_harness.launch import warm

#: The file-name word of the checkpoint process's trace and data log (`launch.layout.trace_path`).
ACTOR = "ckpt"
#: The attribute a request's identifier carries the phase in.
_PHASE = "ckpt_harness_phase"


def follow() -> None:
    """From now on, run every checkpoint process DCP spawns in this rank with its probes."""
    cls = executor._AsyncCheckpointProcess
    if getattr(cls, "_ckpt_harness_follows", False):
        return
    init, send = cls.__init__, cls._send

    @functools.wraps(init)
    def init_probed(self: Any, pg_init_info: Any) -> None:
        spec = probes.child(ACTOR, _rank_timeout())
        if spec is not None:  # read by `__init__` as the spawned process's target
            self._checkpointing_subprocess = functools.partial(_subprocess, spec)
        init(self, pg_init_info)

    @functools.wraps(send)
    def send_in_phase(self: Any, data: Any) -> None:
        if isinstance(data, executor._AsyncCheckpointRequest):
            setattr(data.checkpoint_request_id, _PHASE, thread_phase())
        send(self, data)

    cls.__init__ = init_probed
    cls._send = send_in_phase
    cls._ckpt_harness_follows = True
    # DCP spawns through `mp.get_context("spawn")`: served from the rank's template when it has one.
    executor.mp = warm.Multiprocessing(executor.mp)


def _rank_timeout() -> Optional[float]:
    """Seconds of the rank's default group's timeout, which the launcher sets
    so that a rank whose peer died fails in time; None if there is none."""
    if not dist.is_initialized():
        return None
    default = dist.distributed_c10d._get_default_group()
    try:
        return default._get_backend(torch.device("cpu")).options._timeout.total_seconds()
    except (AttributeError, RuntimeError):
        return None


def _subprocess(spec: probes.Child, pg_init_info: Any, parent_conn: Any) -> None:
    """The checkpoint process's target: the probes, then DCP's own loop."""
    probes.install_child(spec, "checkpoint process")  # no pid: points name it alike in every run
    cls = executor._AsyncCheckpointProcess
    execute = cls._execute_save

    @functools.wraps(execute)
    def execute_in_phase(state_dict: Any, *, checkpoint_request_id: Any, **kwargs: Any) -> Any:
        where = getattr(checkpoint_request_id, _PHASE, None)
        if where is not None:
            set_phase(where)
        return execute(state_dict, checkpoint_request_id=checkpoint_request_id, **kwargs)

    cls._execute_save = staticmethod(execute_in_phase)
    cls._checkpointing_subprocess(pg_init_info, parent_conn)
    # DCP's loop returned (TERMINATE): its group is destroyed, its pipe closed,
    # every event already written. Exit now: finalizing a torch interpreter's
    # modules takes seconds on a loaded machine, past the 5 s the rank's
    # `__del__` gives it before SIGTERM (after which the rank died of SIGPIPE).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
