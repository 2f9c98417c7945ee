"""The built-in jobs' checkpoint root on either storage: a local `Path`, or an `ObjectPath` in a bucket.

A trainer that saves to S3 keeps its checkpoint code and swaps the file
system under it (fsspec), as torchtitan, Lightning and DCP's fsspec writer
do; so do the built-in jobs. `root(ctx)` is the one place that picks: a
`Path` for a local directory (what every job did before the storage axis,
byte for byte), an `ObjectPath` for a URL. An `ObjectPath` answers the few
`pathlib` calls the jobs make (``/``, ``name``, ``exists``, ``is_dir``,
``iterdir``, ``mkdir``, ``read_text``, ``open``) through fsspec; what has
no meaning on a bucket (fsyncing a directory, renaming a file into place)
is done the bucket's way by `_common`, which asks `is_local`.

It has no ``__fspath__`` on purpose: a call that would write a local file
named ``s3:/...`` fails instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Union

from ckpt_harness.job import RankContext


class ObjectPath:
    """``s3://bucket/key`` as a path: objects under it are its "files", their prefixes its "directories"."""

    def __init__(self, url: str, fs: Any = None) -> None:
        self.url = url.rstrip("/")
        if fs is None:
            import fsspec

            # no listings cache: a rank must see what its peers put a moment ago
            fs = fsspec.url_to_fs(self.url, use_listings_cache=False)[0]
        self.fs = fs

    def __truediv__(self, name: str) -> "ObjectPath":
        return ObjectPath(f"{self.url}/{name}", self.fs)

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"ObjectPath({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[-1]

    @property
    def parent(self) -> "ObjectPath":
        return ObjectPath(self.url.rsplit("/", 1)[0], self.fs)

    def with_name(self, name: str) -> "ObjectPath":
        return self.parent / name

    def exists(self) -> bool:
        return self.fs.exists(self.url)

    def is_dir(self) -> bool:
        return self.fs.isdir(self.url)

    def is_file(self) -> bool:
        return self.fs.isfile(self.url)

    def iterdir(self) -> Iterator["ObjectPath"]:
        """What is under it; nothing when nothing is (a prefix without objects is an empty listing, not an
        error: a bucket has no directory to be missing)."""
        if not self.fs.exists(self.url):
            return
        for entry in sorted(self.fs.ls(self.url, detail=False)):
            yield self / entry.rstrip("/").rsplit("/", 1)[-1]

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing: a bucket has no directories, a key's prefix exists once an object under it does."""

    def read_text(self) -> str:
        with self.fs.open(self.url, "rb") as f:
            return f.read().decode()

    def read_bytes(self) -> bytes:
        with self.fs.open(self.url, "rb") as f:
            return f.read()

    def write_text(self, text: str) -> None:
        with self.fs.open(self.url, "wb") as f:
            f.write(text.encode())

    def open(self, mode: str = "rb") -> Any:
        return self.fs.open(self.url, mode)

    def rmtree(self) -> None:
        """Every object under it (a bucket deletes them one request at a time, not as one directory)."""
        if self.fs.exists(self.url):
            self.fs.rm(self.url, recursive=True)


#: Where a built-in job's checkpoints are.
Root = Union[Path, ObjectPath]


def root(ctx: RankContext) -> Root:
    """The job's checkpoint root: its directory, or its URL on other storage (`RankContext.ckpt_url`)."""
    url = ctx.ckpt_url
    return ObjectPath(url) if url and "://" in url else Path(ctx.ckpt_dir)


def is_local(path: Root) -> bool:
    return isinstance(path, Path)


__all__ = ["ObjectPath", "Root", "is_local", "root"]
