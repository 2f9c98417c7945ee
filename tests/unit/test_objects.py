"""Which S3 requests are the checkpoint's, and what the trace calls them (`inject.objects.Prefix`).

No server here: the parameters are those botocore hands `_make_api_call`
(tests/test_storage.py sees the same requests made by s3fs and DCP against
a real server)."""

import pytest

from ckpt_harness.inject.faults import ACTS, BY_NAME, OBJECT_OPS, OPS
from ckpt_harness.inject.objects import OPERATIONS, Prefix

P = Prefix("s3://ckpt/tmp/w/golden/ckpt")


@pytest.mark.parametrize("name, params, expected", [
    ("PutObject", {"Bucket": "ckpt", "Key": "tmp/w/golden/ckpt/latest", "Body": b"step_000004\n"},
     ("put", "latest", {"path": "latest", "n": 12})),
    ("UploadPart", {"Bucket": "ckpt", "Key": "tmp/w/golden/ckpt/step_000004/__0_0.distcp", "PartNumber": 2,
                    "ContentLength": 5242880},
     ("part", "step_000004/__0_0.distcp", {"path": "step_000004/__0_0.distcp", "part": 2, "n": 5242880})),
    ("CompleteMultipartUpload", {"Bucket": "ckpt", "Key": "tmp/w/golden/ckpt/a.pt", "UploadId": "x"},
     ("complete", "a.pt", {"path": "a.pt"})),
    ("CopyObject", {"Bucket": "ckpt", "Key": "tmp/w/golden/ckpt/s/.metadata",
                    "CopySource": {"Bucket": "ckpt", "Key": "tmp/w/golden/ckpt/s/.metadata.tmp"}},
     ("copy", "s/.metadata.tmp -> s/.metadata",
      {"path": "s/.metadata", "src": "s/.metadata.tmp", "dst": "s/.metadata"})),
    ("CopyObject", {"Bucket": "ckpt", "Key": "tmp/w/golden/ckpt/a", "CopySource": "ckpt/elsewhere/a"},
     ("copy", "None -> a", {"path": "a", "src": None, "dst": "a"})),
    ("DeleteObjects", {"Bucket": "ckpt", "Delete": {"Objects": [{"Key": "tmp/w/golden/ckpt/step_2/a"},
                                                               {"Key": "tmp/w/golden/ckpt/step_2/b"}]}},
     ("delete", "step_2", {"path": "step_2", "paths": ["step_2/a", "step_2/b"]})),
    ("ListObjectsV2", {"Bucket": "ckpt", "Prefix": "tmp/w/golden/ckpt/", "Delimiter": "/"},
     ("list", ".", {"path": "."})),
    ("HeadObject", {"Bucket": "ckpt", "Key": "tmp/w/golden/ckpt/latest"}, ("stat", "latest", {"path": "latest"})),
])
def test_a_request_under_the_checkpoint_url_is_an_operation_named_for_what_it_does(name, params, expected):
    assert P.request(name, params) == expected


@pytest.mark.parametrize("name, params", [
    ("PutObject", {"Bucket": "other", "Key": "tmp/w/golden/ckpt/latest"}),  # another bucket
    ("PutObject", {"Bucket": "ckpt", "Key": "tmp/w/golden/ckpt2/latest"}),  # a sibling prefix, not a child
    ("GetObject", {"Bucket": "ckpt", "Key": "tmp/w/golden/ckpt/latest"}),  # a read: untouched, as file reads
    ("DeleteObjects", {"Bucket": "ckpt", "Delete": {"Objects": [{"Key": "tmp/w/other/a"}]}}),
])
def test_a_request_elsewhere_or_a_read_is_no_operation(name, params):
    assert P.request(name, params) is None


def test_every_request_that_changes_a_bucket_is_a_fault_point_of_the_crash_and_error_kinds():
    changes = {op for op in OPERATIONS.values() if op not in ("list", "stat")}
    assert changes == set(OBJECT_OPS) and set(OBJECT_OPS) <= set(ACTS) <= set(OPS)
    assert set(OBJECT_OPS) <= set(BY_NAME["crash"].ops) & set(BY_NAME["crash-after"].ops) & set(BY_NAME["error"].ops)
    assert not set(OBJECT_OPS) & set(BY_NAME["torn"].ops)  # an object lands whole or not at all


def test_objects_put_whole_or_copied_in_are_seen_and_one_no_request_made_is_not():
    """`trace.unseen_writes` on a bucket's trace: an object's bytes travel in the request that makes it
    (before, every object of a bucket was warned about as written past the probes)."""
    from ckpt_harness.inject.trace import Event, unseen_writes

    def event(seq, kind, **fields):
        return Event.parse({"seq": seq, "rank": 0, "kind": kind, "phase": "save 2", "t": float(seq), "point": seq,
                            **fields})

    events = [event(1, "put", path="s.tmp/a", n=10), event(2, "complete", path="s.tmp/b"),
              event(3, "copy", path="s/a", src="s.tmp/a", dst="s/a"), event(4, "copy", path="s/b", src="s.tmp/b",
                                                                         dst="s/b"),
              event(5, "delete", path="s.tmp", paths=["s.tmp/a", "s.tmp/b"])]
    sizes = {"s/a": 10, "s/b": 7 * 1024 * 1024, "s/c": 3}
    assert [u.path for u in unseen_writes(events, sizes)] == ["s/c"]
    assert [u.path for u in unseen_writes(events, {"s.tmp/a": 10})] == ["s.tmp/a"]  # deleted: what is there is not it
