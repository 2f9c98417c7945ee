"""Checkpoints in a bucket of a real S3-compatible server on loopback (`launch.s3server`).

One server serves every run of a harness process: started at the first
mount, its data in a temporary directory of its own, stopped (and that
directory removed) when the process exits, or by `shutdown`. It is started
from a thread that lives as long as it does, because the kernel's
parent-death signal, which kills it if the harness dies first, follows the
thread that started it, and pipelines mount from the threads of their pool.

A checkpoint directory is one prefix of one bucket: ``s3://ckpt/`` and the
directory's absolute path, so two runs never share objects and a report's
path names its objects. Mounting makes the prefix hold exactly the
directory's files; unmounting makes the directory hold exactly the
prefix's objects. A run that wrote into the directory itself instead (a
job or script that ignores the URL it is given) would lose those files
there, and look like a checkpointing that saved nothing: it is refused,
naming them, as the set-up error it is.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator, Optional

from ckpt_harness.errors import JobError
from ckpt_harness.launch.s3server import S3Endpoint, S3Server, ServerFailed, client
from ckpt_harness.storage import Mount

BUCKET = "ckpt"


class BucketStorage:
    """A bucket the harness's own server keeps."""

    name = "s3"
    lacks = {"power_loss": "its checkpoints are in an object store, which keeps every object whose upload "
                           "completed whatever happens to the writers' machines: a power loss there is a crash of "
                           "the writers (the crash scenarios)"}

    @contextlib.contextmanager
    def mount(self, ckpt_dir: Path) -> Iterator[Mount]:
        endpoint, s3 = _server().endpoint(), _server().client()
        prefix = Path(ckpt_dir).resolve().as_posix().strip("/") + "/"
        _clear(s3, prefix)
        root = Path(ckpt_dir)
        given = _files(root)
        for rel in given:
            s3.put_object(Bucket=BUCKET, Key=prefix + rel, Body=(root / rel).read_bytes())
        url = f"s3://{BUCKET}/{prefix.rstrip('/')}"
        try:
            yield Mount(url, endpoint.env(), preload=("s3fs",))
        finally:
            # a server that died under the run failed the ranks' requests: the harness's set-up, not their code
            _server().check_alive()
            local = sorted(rel for rel, seen in _files(root).items() if given.get(rel) != seen)
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True, exist_ok=True)
            for key in _keys(s3, prefix):
                path = root / key[len(prefix):]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
        if local:
            shown = ", ".join(local[:3]) + (f" and {len(local) - 3} more" if len(local) > 3 else "")
            raise JobError(f"the run wrote {shown} into its local checkpoint directory {root}, which on storage s3 "
                           f"stands for the bucket's prefix {url}: write the checkpoints there (a job's "
                           "ctx.ckpt_url; a script's {ckpt_url} in its command, or $CKPT_HARNESS_CKPT_URL), or run "
                           "it on --storage local")


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root`, by its path relative to it, with its size and modification time."""
    if not root.is_dir():
        return {}
    found = {}
    for path in root.rglob("*"):
        if path.is_file():
            stat = path.stat()
            found[path.relative_to(root).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return found


def _keys(s3: Any, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", ()))


def _clear(s3: Any, prefix: str) -> None:
    keys = _keys(s3, prefix)
    for i in range(0, len(keys), 1000):
        s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})


class _Keeper:
    """The process's one server, on a thread of its own from start to stop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._endpoint: Optional[S3Endpoint] = None
        self._error: Optional[BaseException] = None
        self._server: Optional[S3Server] = None
        #: One botocore client of the server for every mount (thread-safe; one costs 0.1-0.3 s of CPU to make).
        self._client: Any = None

    def endpoint(self) -> S3Endpoint:
        with self._lock:
            if self._thread is None or (self._error is not None and not self._thread.is_alive()):
                self._ready.clear()
                self._stop.clear()
                self._error = None
                self._thread = threading.Thread(target=self._serve, name="ckpt-harness-s3", daemon=True)
                self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        assert self._endpoint is not None
        return self._endpoint

    def _serve(self) -> None:
        root = Path(tempfile.mkdtemp(prefix="ckpt-harness-s3-"))
        try:
            self._server = S3Server(root)
            with self._server as endpoint:
                self._client = client(endpoint)
                self._client.create_bucket(Bucket=BUCKET)
                self._endpoint = endpoint
                self._ready.set()
                self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 — handed to the thread that asked for the server
            self._error = exc
        finally:
            self._endpoint = self._client = None
            self._ready.set()
            shutil.rmtree(root, ignore_errors=True)

    def client(self) -> Any:
        """The server's client (`endpoint` first: it starts the server)."""
        self.endpoint()
        assert self._client is not None
        return self._client

    def check_alive(self) -> None:
        """ServerFailed if the server exited while it was to serve (its log's tail says why)."""
        server = self._server
        process = server.process if server is not None else None
        if process is not None and process.poll() is not None:
            raise ServerFailed(f"the harness's S3 server exited with {process.returncode} during a run, so the "
                               f"run's requests failed for that, not for the code under test (log: {server.log})")

    def shutdown(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop.set()
        if thread is not None:
            thread.join()


_KEEPER = _Keeper()


def _server() -> _Keeper:
    return _KEEPER


def shutdown() -> None:
    """Stop the process's server, if it runs, and remove its data (at exit by itself)."""
    _KEEPER.shutdown()


atexit.register(shutdown)

__all__ = ["BUCKET", "BucketStorage", "shutdown"]
