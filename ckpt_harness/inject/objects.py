"""Object-operation probes: the S3 requests a save makes, as points of the trace.

On a bucket a checkpoint is made of requests, not file operations: an
object appears whole when its upload completes (one ``PutObject``, or the
``CompleteMultipartUpload`` of its parts), a "rename" is a copy and a
delete of every object, and a listing is how a reader finds a save. Each
request under the run's checkpoint URL is an operation of the trace, named
for what it does to the bucket, and a fault point as a file operation is:

=========================  ==========  ================================================
request                    operation   what a crash right before it leaves
=========================  ==========  ================================================
PutObject                  put         no object (and the old one, if any)
CreateMultipartUpload      upload      nothing
UploadPart, UploadPartCopy part        nothing visible: parts are not objects
CompleteMultipartUpload    complete    nothing visible of this upload
CopyObject                 copy        the source only
DeleteObject(s)            delete      every object still there
ListObjectsV2, ListObjects list        (a look: a delay there is a case of its own)
HeadObject                 stat        (a look)
=========================  ==========  ================================================

Reads (GetObject) take their path untouched, as file reads do.

Where they are wrapped: botocore's ``BaseClient._make_api_call`` and
aiobotocore's ``AioBaseClient._make_api_call``, the one call every request
of boto3, s3fs (so fsspec, DCP's fsspec writer, Lightning and HF through
fsspec) goes through, after the client built the request's parameters and
before it signs and sends them: the request goes out as it would have, byte
for byte.

``s3torchconnector`` sends its requests through a native (CRT) client of
its own, which botocore never sees; its Python client is wrapped instead
(`CRT_OPERATIONS`, once the code under test imported it): ``put_object``
starts a multipart upload and returns a writer whose ``close()`` completes
it (every object it writes is one, whatever its size), then ``copy_object``,
``delete_object``, ``head_object``, ``list_objects``. Its parts go out from
native threads as the writer's buffer fills: not points of their own.

s3fs runs its requests on its own event-loop thread ("fsspecIO") for the
thread that called it, which waits. An operation is recorded in that
caller's phase, on its thread and at its line of code: `fsspec.asyn.sync`
hands them to the coroutine in a context variable, which every task the
coroutine starts inherits.
"""

from __future__ import annotations

import contextvars
import functools
import os
import sys
import threading
from typing import Any, Callable, Optional
from urllib.parse import unquote, urlsplit

from ckpt_harness.inject.tracer import Tracer, caller, frame_name, is_job_code, is_library, routine

#: S3 request -> the operation the trace calls it.
OPERATIONS = {
    "PutObject": "put", "CreateMultipartUpload": "upload", "UploadPart": "part", "UploadPartCopy": "part",
    "CompleteMultipartUpload": "complete", "CopyObject": "copy", "DeleteObject": "delete",
    "DeleteObjects": "delete", "ListObjectsV2": "list", "ListObjects": "list", "HeadObject": "stat",
}

#: (phase, thread, caller, routine) of the thread that handed a request to fsspec's loop.
_handed: contextvars.ContextVar[Optional[tuple[str, str, str, str]]] = contextvars.ContextVar(
    "ckpt_harness_object_caller", default=None)


class Prefix:
    """The run's checkpoint URL as a bucket and a key prefix: which requests are the checkpoint's."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/") + "/"

    def rel(self, bucket: Optional[str], key: Optional[str]) -> Optional[str]:
        """`key` relative to the checkpoint URL; None for a request elsewhere."""
        if bucket != self.bucket or key is None:
            return None
        key = key.lstrip("/")
        if key == self.prefix.rstrip("/"):
            return "."
        return (key[len(self.prefix):].rstrip("/") or ".") if key.startswith(self.prefix) else None

    def request(self, name: str, params: dict) -> Optional[tuple[str, str, dict]]:
        """(operation, what, fields) of a request on the checkpoint; None for any other."""
        op = OPERATIONS.get(name)
        if op is None:
            return None
        bucket = params.get("Bucket")
        if name == "DeleteObjects":
            rels = [self.rel(bucket, o.get("Key")) for o in params.get("Delete", {}).get("Objects", ())]
            mine = [r for r in rels if r is not None]
            if not mine:
                return None
            return op, _common(mine), {"path": _common(mine), "paths": mine}
        if name in ("ListObjectsV2", "ListObjects"):
            rel = self.rel(bucket, params.get("Prefix", ""))
            if rel is None and (params.get("Prefix", "") + "/").startswith(self.prefix):
                rel = "."
            return None if rel is None else (op, rel, {"path": rel})
        if name in ("CopyObject", "UploadPartCopy"):
            src = _source(params.get("CopySource"))
            src_rel = self.rel(*src) if src else None
            dst = self.rel(bucket, params.get("Key"))
            if dst is None:
                return None
            fields = {"path": dst, "src": src_rel, "dst": dst}
            return op, dst if name == "UploadPartCopy" else f"{src_rel} -> {dst}", fields
        rel = self.rel(bucket, params.get("Key"))
        if rel is None:
            return None
        fields: dict[str, Any] = {"path": rel}
        if name == "PutObject":
            fields["n"] = _size(params.get("Body"), params.get("ContentLength"))
        elif name == "UploadPart":
            fields.update(part=params.get("PartNumber"), n=_size(params.get("Body"), params.get("ContentLength")))
        return op, rel, fields


    def crt_request(self, op: str, call: dict[str, Any]) -> Optional[tuple[str, dict]]:
        """(what, fields) of an s3torchconnector client call (`CRT_OPERATIONS`) on the checkpoint; None else."""
        if op == "copy":
            dst = self.rel(call.get("dst_bucket"), call.get("dst_key"))
            if dst is None:
                return None
            src = self.rel(call.get("src_bucket"), unquote(call.get("src_key") or ""))
            return f"{src} -> {dst}", {"path": dst, "src": src, "dst": dst}
        if op == "list":
            rel = self.rel(call.get("bucket"), call.get("prefix", ""))
            if rel is None and (call.get("prefix", "") + "/").startswith(self.prefix):
                rel = "."
            return None if rel is None else (rel, {"path": rel})
        rel = self.rel(call.get("bucket"), call.get("key"))
        return None if rel is None else (rel, {"path": rel})


def _common(paths: list[str]) -> str:
    if len(paths) == 1:
        return paths[0]
    return os.path.commonpath(paths) or "."


def _source(source: Any) -> Optional[tuple[str, str]]:
    if isinstance(source, dict):
        return source.get("Bucket"), source.get("Key")
    if isinstance(source, str):
        bucket, _, key = source.lstrip("/").partition("/")
        return bucket, key.split("?versionId=")[0]
    return None


def _size(body: Any, length: Any) -> Optional[int]:
    if isinstance(length, int):
        return length
    if isinstance(body, (bytes, bytearray, memoryview)):
        return len(body)
    return None


#: s3torchconnector's client method -> the operation the trace calls it (`_crt_probe`).
CRT_OPERATIONS = {"put_object": "upload", "copy_object": "copy", "delete_object": "delete",
                  "head_object": "stat", "list_objects": "list"}
#: The module of s3torchconnector's Python client, and of the writer its `put_object` returns.
CRT_CLIENT, CRT_WRITER = "s3torchconnector._s3client._s3client", "s3torchconnector.s3writer"


def install(tracer: Tracer, url: str) -> None:
    """Probe every S3 request under `url` made by this process: through botocore and aiobotocore, and
    through s3torchconnector's client once the code under test imported it."""
    where = Prefix(url)
    from ckpt_harness.inject import imports

    imports.when_imported(CRT_CLIENT, lambda module: _probe_crt(tracer, where, module))
    import botocore.client

    botocore.client.BaseClient._make_api_call = _sync_probe(  # type: ignore[method-assign]
        tracer, where, botocore.client.BaseClient._make_api_call)
    try:
        import aiobotocore.client
        import fsspec.asyn
    except ImportError:  # boto3 alone: every request is made on the caller's thread
        return
    aiobotocore.client.AioBaseClient._make_api_call = _async_probe(  # type: ignore[method-assign]
        tracer, where, aiobotocore.client.AioBaseClient._make_api_call)
    fsspec.asyn.sync = _handing_over(fsspec.asyn.sync)


def _user_line() -> str:
    """The job's own line the request was made from: past fsspec's, s3fs's and botocore's frames (installed
    code, which `tracer.caller` would name: for a file operation the call into a library is the job's line)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if is_job_code(name) and not is_library(name):
            return frame_name(name, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return caller()


def _begin(tracer: Tracer, op: str, what: str, fields: dict) -> Any:
    handed = _handed.get()
    if handed is None:
        return tracer.begin(op, what, {**fields, "routine": routine(), "caller": _user_line()})
    phase, thread, at, made_in = handed
    return tracer.begin(op, what, {**fields, "routine": made_in, "caller": at}, phase=phase, thread=thread)


def _sync_probe(tracer: Tracer, where: Prefix, original: Callable) -> Callable:
    @functools.wraps(original)
    def probe(self: Any, operation_name: str, api_params: dict) -> Any:
        found = where.request(operation_name, api_params)
        if found is None or tracer.nested():
            return original(self, operation_name, api_params)
        op, what, fields = found
        fault = _begin(tracer, op, what, fields)
        result = original(self, operation_name, api_params)
        tracer.end(fault)
        return result

    return probe


def _async_probe(tracer: Tracer, where: Prefix, original: Callable) -> Callable:
    @functools.wraps(original)
    async def probe(self: Any, operation_name: str, api_params: dict) -> Any:
        found = where.request(operation_name, api_params)
        if found is None:
            return await original(self, operation_name, api_params)
        op, what, fields = found
        fault = _begin(tracer, op, what, fields)
        result = await original(self, operation_name, api_params)
        tracer.end(fault)
        return result

    return probe


def _probe_crt(tracer: Tracer, where: Prefix, module: Any) -> None:
    """Wrap s3torchconnector's `S3Client` and the close of the writers its `put_object` returns."""
    import importlib
    import weakref

    client = module.S3Client
    writer = importlib.import_module(CRT_WRITER).S3Writer  # imported by the client's module already
    uploads: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()  # writer -> its key, relative
    for name, op in CRT_OPERATIONS.items():
        setattr(client, name, _crt_probe(tracer, where, op, getattr(client, name), uploads))
    close = writer.close

    @functools.wraps(close)
    def closing(self: Any) -> Any:
        rel = uploads.pop(self, None)
        if rel is None or self.closed or tracer.nested():
            return close(self)
        fault = _begin(tracer, "complete", rel, {"path": rel, "n": getattr(self, "_position", None)})
        result = close(self)
        tracer.end(fault)
        return result

    writer.close = closing


def _crt_probe(tracer: Tracer, where: Prefix, op: str, original: Callable, uploads: Any) -> Callable:
    import inspect

    signature = inspect.signature(original)  # once: a request must not pay for reading its method's signature

    @functools.wraps(original)
    def probe(self: Any, *args: Any, **kwargs: Any) -> Any:
        # the arguments by name (`copy_object` is called by keyword, the others by position)
        call = signature.bind_partial(None, *args, **kwargs).arguments
        found = where.crt_request(op, call)
        if found is None or tracer.nested():
            return original(self, *args, **kwargs)
        what, fields = found
        fault = _begin(tracer, op, what, fields)
        result = original(self, *args, **kwargs)
        tracer.end(fault)
        if op == "upload":
            uploads[result] = fields["path"]
        return result

    return probe


def _handing_over(sync: Callable) -> Callable:
    """fsspec's `sync(loop, func, ...)`, with the calling thread's phase, name and line of code carried
    into the coroutine it runs on the loop's thread."""
    from ckpt_harness.inject.tracer import tracer as current

    @functools.wraps(sync)
    def handing_over(loop: Any, func: Callable, *args: Any, **kwargs: Any) -> Any:
        here = current()
        if here is None or _handed.get() is not None:
            return sync(loop, func, *args, **kwargs)
        thread = threading.current_thread()
        handed = (here.current(), "" if thread is threading.main_thread() else thread.name, _user_line(), routine())

        @functools.wraps(func)
        async def in_callers_context(*a: Any, **kw: Any) -> Any:
            _handed.set(handed)
            return await func(*a, **kw)

        return sync(loop, in_callers_context, *args, **kwargs)

    return handing_over


__all__ = ["CRT_OPERATIONS", "OPERATIONS", "Prefix", "install"]
