"""s3torchconnector's `S3Writer` publishes an upload its writer abandoned: a shard cut short, under its final name.

    python docs/examples/s3writer_abandoned.py      # needs the s3 and s3torchconnector extras

Starts the harness's S3-compatible server (SeaweedFS, on loopback, its data in
a temporary directory; stopped at the end), then writes one object three ways,
each as a DCP shard is written (`S3Writer`, two `write` calls):

- whole: both writes, then `close()`: the object is there, every byte;
- abandoned: an exception between the two writes, as a failing serializer or
  a full staging buffer raises in the middle of a save. `S3Writer.__exit__`
  leaves the upload open on purpose (it closes only when nothing was
  raised), but the writer is an `io.BufferedIOBase`, whose `__del__` closes
  it once the exception that holds it is freed, and `close()` *completes*
  the multipart upload: the object appears, cut short, under its final name;
- killed: the same in a child process killed with SIGKILL between the writes:
  nothing appears, as an object store promises.

Prints what the bucket holds after each and exits 1 when the abandoned write
was published (the finding), 0 when it was not (a fixed release).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

FIRST, SECOND = b"a" * 5615, b"b" * 4096
BUCKET = "repro"


def s3client():
    """The client `S3StorageWriter` writes a DCP checkpoint's every file with, on the server's endpoint."""
    from s3torchconnector import S3ClientConfig
    from s3torchconnector._s3client import S3Client

    return S3Client(os.environ["AWS_REGION"], endpoint=os.environ["AWS_ENDPOINT_URL"],
                    s3client_config=S3ClientConfig(force_path_style=True))


def write(key: str, fail_between: bool) -> None:
    """As DCP's writer writes a file: in a `with` block, whose exit closes (completes) the upload only
    when nothing was raised (`S3Writer.__exit__`, on purpose)."""
    with s3client().put_object(BUCKET, key) as writer:
        writer.write(FIRST)
        if fail_between:
            raise RuntimeError("the save failed between two writes of one shard")
        writer.write(SECOND)


def main() -> int:
    from ckpt_harness.launch.s3server import S3Server, client

    with tempfile.TemporaryDirectory() as data, S3Server(Path(data)) as endpoint:
        os.environ.update(endpoint.env())
        s3 = client(endpoint)
        s3.create_bucket(Bucket=BUCKET)

        def held(key: str) -> str:
            try:
                size = s3.head_object(Bucket=BUCKET, Key=key)["ContentLength"]
            except s3.exceptions.ClientError:
                return "nothing"
            return f"{size} bytes" + (" (whole)" if size == len(FIRST) + len(SECOND) else " (cut short)")

        write("whole.distcp", fail_between=False)
        try:
            write("abandoned.distcp", fail_between=True)
        except RuntimeError:
            pass  # the exception freed here, as a trainer that catches and logs it would free it
        child = subprocess.Popen([sys.executable, "-c", (
            "import os, signal, sys; sys.path.insert(0, %r); import s3writer_abandoned as r\n"
            "w = r.s3client().put_object(r.BUCKET, 'killed.distcp'); w.write(r.FIRST); w.flush()\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n") % str(Path(__file__).parent)])
        child.wait()
        found = {name: held(f"{name}.distcp") for name in ("whole", "abandoned", "killed")}
    for name, what in found.items():
        print(f"{name:9}  {what}")
    published = found["abandoned"] != "nothing"
    print("FINDING: an upload its writer abandoned was published, cut short" if published else
          "fixed: an abandoned upload leaves nothing")
    return 1 if published else 0


if __name__ == "__main__":
    sys.exit(main())
