"""Files holding bytes no probe saw written, from hand-built traces."""

from __future__ import annotations

import itertools

from ckpt_harness.inject.trace import OUTSIDE, Event, Unseen, landing, landings, unseen_writes

_seq = itertools.count(1)


def ev(kind: str, rank: int = 0, **fields) -> Event:
    seq = next(_seq)
    return Event.parse({"kind": kind, "rank": rank, "phase": "save 2", "t": float(seq), "seq": seq, **fields})


def written(path: str, n: int, fid: str = "f0", rank: int = 0) -> list[Event]:
    return [ev("open", rank, path=path, fid=fid, trunc=True, create=True),
            ev("write", rank, fid=fid, path=path, offset=0, n=n, data=None), ev("close", rank, fid=fid)]


def test_a_file_no_probe_saw_is_unseen():
    assert unseen_writes(written("model.pt", 10), {"model.pt": 10, "raw.bin": 5}) == [Unseen("raw.bin")]


def test_more_bytes_than_traced_writes_is_unseen():
    """shutil.copyfile's sendfile, or a native writer on a descriptor of a probed open."""
    assert unseen_writes(written("model.pt", 10), {"model.pt": 4096}) == [Unseen("model.pt")]


def test_renames_of_files_and_directories_carry_what_was_seen():
    events = [*written("tmp/a.pt", 3, "f0"), *written("tmp/.metadata.tmp", 2, "f1"),
              ev("rename", src="tmp/.metadata.tmp", dst="tmp/.metadata"), ev("rename", rank=1, src="tmp", dst="step_2")]
    assert unseen_writes(events, {"step_2/a.pt": 3, "step_2/.metadata": 2}) == []


def test_a_removed_file_recreated_past_the_probes_is_unseen():
    events = [*written("latest", 1), ev("unlink", path="latest")]
    assert unseen_writes(events, {"latest": 1}) == [Unseen("latest")]


def test_empty_files_say_nothing():
    assert unseen_writes([], {"empty": 0}) == []


def test_a_file_renamed_in_from_outside_is_told_apart_and_follows_later_renames():
    """fsspec's local transaction (Lightning's writer): a temporary file outside the
    checkpoint directory, moved in; the trace records the rename with no source."""
    events = [ev("rename", src=None, dst="step_4.pt.part"), ev("rename", src="step_4.pt.part", dst="step_4.pt"),
              *written("latest", 10)]
    assert unseen_writes(events, {"step_4.pt": 4096, "latest": 10}) == [Unseen("step_4.pt", renamed_in=True)]
    replaced = [*written("step_4.pt", 4096), ev("rename", src=None, dst="step_4.pt")]  # over a file the probes saw
    assert unseen_writes(replaced, {"step_4.pt": 4096}) == [Unseen("step_4.pt", renamed_in=True)]


def test_a_file_staged_outside_under_the_probes_is_seen_and_where_it_lands_is_known():
    """A file a save writes outside the checkpoint directory is probed (`files`):
    its bytes follow it in; its operations name where it landed, and those of
    a file that never comes in touch no checkpoint."""
    staged = [ev("open", path=OUTSIDE, outside="/tmp/tmpab12", fid="f0", trunc=True, create=True),
              ev("write", fid="f0", path=OUTSIDE, offset=0, n=4096, data=None),
              ev("fsync", fid=None, path=OUTSIDE, outside="/tmp/tmpab12", is_dir=False),
              ev("close", fid="f0", path=OUTSIDE),
              ev("open", path=OUTSIDE, outside="/tmp/log", fid="f1", trunc=True, create=True),
              ev("rename", src=None, src_outside="/tmp/tmpab12", dst="step_4.pt")]
    assert unseen_writes(staged, {"step_4.pt": 4096}) == []
    assert unseen_writes(staged, {"step_4.pt": 8192}) == [Unseen("step_4.pt", renamed_in=True)]
    landed = landings(staged)
    assert [landing(e, landed) for e in staged] == ["step_4.pt"] * 4 + [None, None]
