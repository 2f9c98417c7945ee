"""Where a run's checkpoints live, as the harness holds them: the seam of the `storage` axis.

The pipelines hold every checkpoint as a local directory: they copy a
committed one, damage a file of it, rebuild one from a trace, compare two.
A run on other storage sees that directory through a `Storage`, picked once
by name (`of`): mounted before the group starts (the directory's content put
where the ranks will read it, under the URL they are given,
`RankContext.ckpt_url`), and unmounted when the group ended, however it
ended (what the ranks left there brought back into the directory, in place
of what it held). The pipelines never learn which storage a run used.

That copy is faithful because of what the storage is. An object store keeps
an object whole once its upload completed, and nothing of one that did not;
it is durable by itself, so what a crash of the writers leaves in the bucket
is all that is left, and it is what the directory gets back. It has no
directories: a directory the ranks made and left empty is not brought back,
as no reader of the bucket could see it either.

A local directory is its own mount: nothing is copied, and the URL is its path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from pathlib import Path
from typing import ContextManager, Iterator, Mapping, Protocol

from ckpt_harness.errors import ConfigError, did_you_mean


@dataclasses.dataclass(frozen=True)
class Mount:
    """A checkpoint directory as one run's ranks reach it."""

    #: Where the ranks save (`RankContext.ckpt_url`): the directory's path, or a URL.
    url: str
    #: What the ranks' environment needs to reach it (an endpoint, credentials).
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: Modules every rank imports to reach it (fsspec's S3 file system), imported
    #: once by the fork server instead of by each rank of each run
    #: (`launch.GroupSpec.preload`, `launch.elastic.ScriptSpec.preload`; docs/probes.md, "Warm script workers").
    preload: tuple[str, ...] = ()


class Storage(Protocol):
    """One kind of place checkpoints go."""

    #: Its value of the `storage` axis.
    name: str
    #: What a target whose checkpoints are here cannot do, each with why
    #: (`targets.Capability` names): on a bucket, a power loss cannot be
    #: modelled; on a local directory, from the trace of the ranks' file
    #: operations, it can.
    lacks: Mapping[str, str]

    def mount(self, ckpt_dir: Path) -> ContextManager[Mount]:
        """`ckpt_dir` where the ranks of one run reach it, and back into `ckpt_dir` when they are done."""


class LocalStorage:
    """The directory itself."""

    name = "local"
    lacks: Mapping[str, str] = {}

    @contextlib.contextmanager
    def mount(self, ckpt_dir: Path) -> Iterator[Mount]:
        yield Mount(str(ckpt_dir))


#: Each value of the `storage` axis (`job.axes.STORAGES`) and where its `Storage` is.
KINDS: Mapping[str, str] = {"local": "ckpt_harness.storage:LocalStorage",
                            "s3": "ckpt_harness.storage.bucket:BucketStorage"}


def of(name: str) -> Storage:
    """The storage of `name`; a bucket's server starts at its first mount, not here."""
    if name not in KINDS:
        raise ConfigError(f"no storage {name!r}{did_you_mean(name, list(KINDS))}; choose from {', '.join(KINDS)}")
    module, _, attr = KINDS[name].partition(":")
    return getattr(importlib.import_module(module), attr)()

__all__ = ["KINDS", "LocalStorage", "Mount", "Storage", "of"]
