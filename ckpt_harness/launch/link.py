"""Processes a rank spawns that count as part of it: DCP's checkpoint process.

A save may run in a process the rank spawned (`multiprocessing`, spawn: a
fresh interpreter), and hang or block there while its rank only waits for
it. Two things the launcher does for a rank must then reach that process
too: a blocking fault fired in it starts its peers' grace (`rank.
report_blocked`, through the rank's status pipe), and a hang report shows
its stack beside its rank's.

The rank hands the child a `ChildLink` with its target; the child calls
`join_rank` first thing. The harness finds the children that joined a rank
by their pid files (`helpers`) when it takes the stacks.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import os
from pathlib import Path
from typing import Any, Optional

from ckpt_harness.launch import beacon
from ckpt_harness.launch import rank as rank_side
from ckpt_harness.launch.layout import helper_paths, helper_pid_paths
from ckpt_harness.launch.rank import STACK_SIGNAL


@dataclasses.dataclass(frozen=True)
class ChildLink:
    """What a spawned child needs to join its rank.

    Pickled while multiprocessing spawns the child, it has multiprocessing
    pass the rank's status pipe itself to the new interpreter (as it passes
    a `Connection`): no thread or socket is added to the rank. Pickled at any
    other time it refuses, rather than fall back on multiprocessing's
    resource sharer (a listening thread in the rank)."""

    status_fd: int
    run_dir: str
    rank: int

    def __reduce__(self) -> tuple:
        from multiprocessing import context, reduction

        if context.get_spawning_popen() is None:
            raise TypeError("a ChildLink is only handed to a process multiprocessing is spawning")
        return _received, (reduction.DupFd(self.status_fd), self.run_dir, self.rank)


def _received(dup: Any, run_dir: str, rank: int) -> ChildLink:
    fd = dup.detach()
    os.set_inheritable(fd, False)  # the child's own children do not hold the rank's pipe
    return ChildLink(fd, run_dir, rank)


def link_for_child() -> Optional[ChildLink]:
    """The link for a process this rank is about to spawn; None outside a
    launched rank. Hand it to the child with its target."""
    here = rank_side.status_pipe()
    return ChildLink(*here) if here is not None else None


@dataclasses.dataclass(frozen=True)
class Helper:
    """A child that joined its rank, as the harness finds it."""

    #: What it is, in a report: "checkpoint process".
    name: str
    pid: int
    #: Where it dumps every thread's stack on `STACK_SIGNAL`.
    stack: Path


def join_rank(link: Optional[ChildLink], name: str) -> None:
    """In the spawned child: report blocks through its rank's pipe, and dump
    every thread's stack when the harness takes its rank's.

    The stack goes to a file of its own, not to the rank's log both share,
    where two dumps at once would interleave. The pid file is renamed into
    place last: the harness signals only a process that has one, so
    `STACK_SIGNAL` never meets a child whose default action is to die."""
    if link is None:
        return
    rank_side.report_on(link.status_fd)
    beacon.follow(link.run_dir)
    pid_file, stack_file = helper_paths(link.run_dir, link.rank, name)
    stack = open(stack_file, "w")  # kept open by faulthandler for the process's life
    faulthandler.register(STACK_SIGNAL, file=stack, all_threads=True, chain=False)
    written = pid_file.with_name(pid_file.name + ".tmp")
    written.write_text(f"{os.getpid()}\n{name}\n")
    os.rename(written, pid_file)


def helpers(run_dir: str, rank: int) -> list[Helper]:
    """The children of `rank` that joined it (`join_rank`)."""
    found = []
    for pid_file in helper_pid_paths(run_dir, rank):
        try:
            pid, name = pid_file.read_text().splitlines()[:2]
            found.append(Helper(name, int(pid), helper_paths(run_dir, rank, name)[1]))
        except (OSError, ValueError):
            continue
    return found
