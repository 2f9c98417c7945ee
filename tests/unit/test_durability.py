"""The power-loss model, on hand-built traces and real directories."""

from __future__ import annotations

import itertools
import random

import pytest

from ckpt_harness.inject.durability import (
    DurabilityError,
    LossKind,
    Snapshot,
    apply_power_loss,
    durable_state,
    events_before,
    merge_events,
    power_loss,
    snapshot,
)

BOTH = pytest.mark.parametrize("mode", ["strict", "ordered"])


# -- a tiny trace builder ---------------------------------------------------------
class Run:
    """Events of several ranks on one clock, and their data logs."""

    def __init__(self):
        self.events: list[dict] = []
        self.logs: dict[int, bytearray] = {}
        self.clock = itertools.count(1)
        self._ranks: dict[int, Rank] = {}

    def rank(self, r: int) -> "Rank":
        if r not in self._ranks:
            self._ranks[r] = Rank(self, r)
            self.logs[r] = bytearray()
        return self._ranks[r]

    def read_data(self, rank: int, offset: int, length: int) -> bytes:
        return bytes(self.logs[rank][offset:offset + length])

    def now(self) -> float:
        """The time of the next event: a power-loss moment right here."""
        return float(len(self.events) + 1) - 0.5

    def state(self, start=Snapshot(), mode="strict", until=None) -> Snapshot:
        events = self.events if until is None else events_before(self.events, until)
        return durable_state(start, events, self.read_data, mode)


class Rank:
    def __init__(self, run: Run, rank: int):
        self.run, self.r = run, rank
        self.seq = itertools.count(1)
        self.fids = itertools.count()
        self.ends: dict[str, int] = {}  # fid -> offset of the next write

    def emit(self, kind: str, **fields) -> dict:
        event = {"seq": next(self.seq), "rank": self.r, "kind": kind, "phase": "save 1",
                 "t": float(next(self.run.clock)), **fields}
        self.run.events.append(event)
        return event

    def open(self, path: str, mode: str = "wb") -> str:
        fid = f"r{self.r}f{next(self.fids)}"
        self.emit("open", path=path, fid=fid, mode=mode, trunc="w" in mode, create="r" not in mode,
                  append="a" in mode)
        self.ends[fid] = 0
        return fid

    def write(self, fid: str, data: bytes, offset: int | None = None, landed: int | None = None) -> None:
        offset = self.ends[fid] if offset is None else offset
        log = self.run.logs[self.r]
        ref = [len(log), len(data)]
        log += data
        n = len(data) if landed is None else landed
        self.emit("write", fid=fid, path="?", offset=offset, n=n, data=ref)
        self.ends[fid] = offset + n

    def fsync(self, fid: str) -> None:
        self.emit("fsync", path="?", fid=fid, is_dir=False)

    def fsync_dir(self, path: str = ".") -> None:
        self.emit("fsync", path=path, fid=None, is_dir=True)

    def close(self, fid: str) -> None:
        self.emit("close", fid=fid)

    def rename(self, src: str, dst: str) -> None:
        self.emit("rename", src=src, dst=dst)

    def unlink(self, path: str) -> None:
        self.emit("unlink", path=path)

    def mkdir(self, path: str) -> None:
        self.emit("mkdir", path=path)

    def rmdir(self, path: str) -> None:
        self.emit("rmdir", path=path)

    def rmtree(self, path: str) -> None:
        self.emit("rmtree", path=path)

    def write_file(self, path: str, data: bytes, fsync: bool = True) -> None:
        fid = self.open(path)
        self.write(fid, data)
        if fsync:
            self.fsync(fid)
        self.close(fid)

    def atomic_write(self, path: str, data: bytes, parent: str = ".") -> None:
        """The correct pattern: tmp, fsync, rename, fsync the directory."""
        self.write_file(path + ".tmp", data)
        self.rename(path + ".tmp", path)
        self.fsync_dir(parent)


def tree(files: dict[str, bytes], dirs=()) -> Snapshot:
    return Snapshot(files=dict(files), dirs=frozenset(dirs))


# -- the basic patterns -----------------------------------------------------------------
@BOTH
def test_write_fsync_rename_and_dir_fsync_is_durable(mode):
    run = Run()
    run.rank(0).atomic_write("latest", b"step_1")
    assert run.state(mode=mode) == tree({"latest": b"step_1"})


@BOTH
def test_rename_without_any_fsync_is_lost(mode):
    start = tree({"latest": b"step_1"})
    r0 = Run().rank(0)
    r0.write_file("latest.tmp", b"step_2", fsync=False)
    r0.rename("latest.tmp", "latest")
    assert r0.run.state(start, mode) == start


def test_rename_then_fsync_of_another_file_ordered_keeps_it_strict_does_not():
    start = tree({"latest": b"step_1"})
    for data_fsynced, expected in ((True, b"step_2"), (False, b"")):
        r0 = Run().rank(0)
        r0.write_file("latest.tmp", b"step_2", fsync=data_fsynced)
        r0.rename("latest.tmp", "latest")
        r0.write_file("other", b"x")  # any later fsync commits the journal
        # ordered: the rename is durable; without an fsync of its data, the
        # file is there with length 0 (the classic ext4 outcome)
        assert r0.run.state(start, "ordered") == tree({"latest": expected, "other": b"x"})
        # strict: no fsync of "." after the rename, nor after creating "other"
        assert r0.run.state(start, "strict") == start


@BOTH
def test_zero_length_file_after_rename_with_dir_fsync_but_no_data_fsync(mode):
    start = tree({"latest": b"step_1"})
    r0 = Run().rank(0)
    r0.write_file("latest.tmp", b"step_2", fsync=False)
    r0.rename("latest.tmp", "latest")
    r0.fsync_dir(".")
    assert r0.run.state(start, mode) == tree({"latest": b""})


@BOTH
def test_write_after_fsync_is_lost(mode):
    r0 = Run().rank(0)
    fid = r0.open("model.pt")
    r0.write(fid, b"head")
    r0.fsync(fid)
    r0.write(fid, b"tail")
    r0.write(fid, b"H", offset=0)
    r0.close(fid)
    r0.fsync_dir(".")
    assert r0.run.state(mode=mode) == tree({"model.pt": b"head"})
    r0.fsync(r0.open("model.pt", "r+b"))
    assert r0.run.state(mode=mode) == tree({"model.pt": b"Headtail"})


@BOTH
def test_truncation_at_open_is_a_data_change(mode):
    start = tree({"latest": b"step_1"})
    r0 = Run().rank(0)
    fid = r0.open("latest", "w")  # the same inode, cut to 0 in the page cache
    r0.write(fid, b"step_2")
    r0.close(fid)
    r0.fsync_dir(".")
    assert r0.run.state(start, mode) == start
    r0.fsync(r0.open("latest", "a"))
    assert r0.run.state(start, mode) == tree({"latest": b"step_2"})


def test_unlink_needs_a_dir_fsync_in_strict_mode():
    start = tree({"old.pt": b"old", "keep.pt": b"k"})
    r0 = Run().rank(0)
    r0.unlink("old.pt")
    r0.write_file("keep.pt", b"k2")  # an fsync of a file, not of the directory
    assert r0.run.state(start, "strict") == tree({"old.pt": b"old", "keep.pt": b"k2"})
    assert r0.run.state(start, "ordered") == tree({"keep.pt": b"k2"})
    r0.fsync_dir(".")
    assert r0.run.state(start, "strict") == tree({"keep.pt": b"k2"})


def test_fsync_of_a_file_does_not_make_its_name_durable_in_strict_mode():
    r0 = Run().rank(0)
    r0.write_file("new.pt", b"data")
    assert r0.run.state(mode="strict") == tree({})
    assert r0.run.state(mode="ordered") == tree({"new.pt": b"data"})


def test_ordered_mode_keeps_nothing_after_the_last_fsync():
    start = tree({"a": b"1"})
    r0 = Run().rank(0)
    r0.write_file("b", b"2")
    r0.rename("a", "c")
    r0.unlink("b")
    r0.mkdir("d")
    assert r0.run.state(start, "ordered") == tree({"a": b"1", "b": b"2"})


def test_mkdir_not_durable_takes_its_files_with_it():
    r0 = Run().rank(0)
    r0.mkdir("step_1")
    r0.write_file("step_1/model.pt", b"weights")
    r0.fsync_dir("step_1")  # the files' entries are durable in step_1 ...
    assert r0.run.state(mode="strict") == tree({})  # ... but step_1 itself is not
    r0.fsync_dir(".")
    assert r0.run.state(mode="strict") == tree({"step_1/model.pt": b"weights"}, ["step_1"])


def test_durable_mkdir_without_fsync_of_the_new_directory_is_empty():
    r0 = Run().rank(0)
    r0.mkdir("step_1")
    r0.fsync_dir(".")
    r0.write_file("step_1/model.pt", b"weights")
    assert r0.run.state(mode="strict") == tree({}, ["step_1"])
    assert r0.run.state(mode="ordered") == tree({"step_1/model.pt": b"weights"}, ["step_1"])


@BOTH
def test_nothing_fsynced_in_a_new_tree_is_lost(mode):
    r0 = Run().rank(0)
    r0.mkdir("step_1")
    r0.mkdir("step_1/shards")
    r0.write_file("step_1/shards/0.pt", b"w", fsync=False)
    assert r0.run.state(mode=mode) == tree({})


def test_rmtree_is_one_entry_removal():
    start = tree({"step_1/model.pt": b"m1", "step_1/sub/opt.pt": b"o1", "step_2/model.pt": b"m2"},
                 ["step_1", "step_1/sub", "step_2"])
    r0 = Run().rank(0)
    r0.rmtree("step_1")
    after = tree({"step_2/model.pt": b"m2"}, ["step_2"])
    # strict: the whole subtree stays until "." is fsynced, then goes at once
    assert r0.run.state(start, "strict") == start
    assert r0.run.state(start, "ordered") == start
    r0.write_file("step_2/extra", b"e", fsync=True)
    assert r0.run.state(start, "strict") == start
    assert r0.run.state(start, "ordered") == tree({**after.files, "step_2/extra": b"e"}, after.dirs)
    r0.fsync_dir(".")
    assert r0.run.state(start, "strict") == after


@BOTH
def test_rmdir(mode):
    start = tree({}, ["tmp"])
    r0 = Run().rank(0)
    r0.rmdir("tmp")
    r0.fsync_dir(".")
    assert r0.run.state(start, mode) == tree({})


# -- inodes: names and contents are separate ---------------------------------------------
@BOTH
def test_open_file_follows_its_inode_across_rename(mode):
    r0 = Run().rank(0)
    fid = r0.open("shard.tmp")
    r0.write(fid, b"abc")
    r0.rename("shard.tmp", "shard")
    r0.write(fid, b"def")
    r0.fsync(fid)  # reaches the file now named "shard"
    r0.close(fid)
    r0.fsync_dir(".")
    assert r0.run.state(mode=mode) == tree({"shard": b"abcdef"})


@BOTH
def test_unlinked_open_file_is_gone_whatever_its_fsyncs(mode):
    r0 = Run().rank(0)
    fid = r0.open("scratch")
    r0.unlink("scratch")
    r0.write(fid, b"data")
    r0.fsync(fid)
    r0.fsync_dir(".")
    assert r0.run.state(mode=mode) == tree({})


def test_rename_across_directories_has_two_halves_in_strict_mode():
    start = tree({"staging/model.pt": b"m"}, ["staging", "final"])

    def moved():
        r0 = Run().rank(0)
        r0.rename("staging/model.pt", "final/model.pt")
        return r0

    r0 = moved()
    r0.fsync_dir("final")  # only the insertion: both names, like a hard link
    assert r0.run.state(start, "strict") == tree(
        {"staging/model.pt": b"m", "final/model.pt": b"m"}, start.dirs)
    r0 = moved()
    r0.fsync_dir("staging")  # only the removal: the file is gone
    assert r0.run.state(start, "strict") == tree({}, start.dirs)
    r0.fsync_dir("final")
    assert r0.run.state(start, "strict") == tree({"final/model.pt": b"m"}, start.dirs)


def test_a_renamed_directory_is_still_the_same_directory():
    r0 = Run().rank(0)
    r0.mkdir("step_1.tmp")
    r0.write_file("step_1.tmp/model.pt", b"m")
    r0.rename("step_1.tmp", "step_1")
    r0.fsync_dir("step_1")  # covers the entries created under the old name
    r0.fsync_dir(".")
    assert r0.run.state(mode="strict") == tree({"step_1/model.pt": b"m"}, ["step_1"])


@BOTH
def test_rename_replaces_an_empty_directory(mode):
    start = tree({"step_1/model.pt": b"old"}, ["step_1", "new"])
    r0 = Run().rank(0)
    r0.rename("new", "step_1.del")
    r0.rename("step_1", "new")
    r0.fsync_dir(".")
    assert r0.run.state(start, mode) == tree({"new/model.pt": b"old"}, ["new", "step_1.del"])


@BOTH
def test_torn_write_keeps_only_what_landed(mode):
    r0 = Run().rank(0)
    fid = r0.open("model.pt")
    r0.write(fid, b"0123456789", landed=4)
    r0.fsync(fid)
    r0.fsync_dir(".")
    assert r0.run.state(mode=mode) == tree({"model.pt": b"0123"})


@BOTH
def test_write_past_the_end_leaves_a_hole_of_zeros(mode):
    r0 = Run().rank(0)
    fid = r0.open("sparse")
    r0.write(fid, b"end", offset=5)
    r0.fsync(fid)
    r0.fsync_dir(".")
    assert r0.run.state(mode=mode) == tree({"sparse": b"\0\0\0\0\0end"})


# -- several ranks ------------------------------------------------------------------------
def test_two_ranks_are_interleaved_by_time_not_by_rank():
    run = Run()
    r0, r1 = run.rank(0), run.rank(1)
    r0.mkdir("step_1")
    r0.fsync_dir(".")
    r1.write_file("step_1/shard_1.pt", b"s1")
    r0.write_file("step_1/shard_0.pt", b"s0")
    r0.fsync_dir("step_1")  # after rank 1's file by the clock, though rank 1 > rank 0
    r1.write_file("step_1/late_1.pt", b"late")  # after the last directory fsync
    expected = tree({"step_1/shard_0.pt": b"s0", "step_1/shard_1.pt": b"s1"}, ["step_1"])
    shuffled = run.events[:]
    random.Random(0).shuffle(shuffled)
    assert durable_state(Snapshot(), shuffled, run.read_data, "strict") == expected
    # ordered: rank 1's own fsync of late_1.pt commits every entry before it
    assert run.state(mode="ordered") == tree({**expected.files, "step_1/late_1.pt": b"late"},
                                             ["step_1"])


def test_merge_keeps_rank_order_and_breaks_ties_by_rank_then_seq():
    events = [
        {"rank": 1, "seq": 2, "t": 1.0, "kind": "phase"},
        {"rank": 0, "seq": 1, "t": 1.0, "kind": "phase"},
        {"rank": 1, "seq": 1, "t": 1.0, "kind": "phase"},
        {"rank": 0, "seq": 2, "t": 0.5, "kind": "phase"},  # a clock that went back: seq wins
    ]
    assert [(e["rank"], e["seq"]) for e in merge_events(events)] == [(0, 1), (0, 2), (1, 1), (1, 2)]


def test_events_before_a_moment():
    run = Run()
    r0 = run.rank(0)
    r0.write_file("a", b"1")
    r0.fsync_dir(".")
    moment = run.now()
    r0.write_file("b", b"2")
    r0.fsync_dir(".")
    assert run.state(until=moment) == tree({"a": b"1"})
    assert run.state() == tree({"a": b"1", "b": b"2"})


# -- the "latest" pointer -----------------------------------------------------------------
def save(run: Run, step: int, pointer_first: bool) -> float:
    """Two ranks write shards of step_N; rank 0 publishes `latest`. Returns the
    moment right after `latest` was published."""
    r0, r1 = run.rank(0), run.rank(1)
    d = f"step_{step}"
    r0.mkdir(d)
    r0.fsync_dir(".")
    if pointer_first:  # the bug: the pointer vouches for shards not yet durable
        r0.atomic_write("latest", d.encode())
        published = run.now()
    for r in (r0, r1):
        r.write_file(f"{d}/shard_{r.r}.pt", f"{d}-{r.r}".encode())
    r0.fsync_dir(d)
    if not pointer_first:
        r0.atomic_write("latest", d.encode())
        published = run.now()
    return published


@BOTH
def test_latest_pointer_written_before_the_shards_vouches_for_nothing(mode):
    start = tree({"latest": b"step_1", "step_1/shard_0.pt": b"step_1-0", "step_1/shard_1.pt": b"step_1-1"},
                 ["step_1"])
    run = Run()
    published = save(run, 2, pointer_first=True)
    at = run.state(start, mode, until=published)
    assert at.files["latest"] == b"step_2"
    assert not any(p.startswith("step_2/") for p in at.files)  # the shards are not there
    assert run.state(start, mode) == tree(
        {**start.files, "latest": b"step_2", "step_2/shard_0.pt": b"step_2-0",
         "step_2/shard_1.pt": b"step_2-1"}, ["step_1", "step_2"])


@BOTH
def test_latest_pointer_written_after_the_shards_is_consistent_at_every_moment(mode):
    start = tree({"latest": b"step_1", "step_1/shard_0.pt": b"step_1-0", "step_1/shard_1.pt": b"step_1-1"},
                 ["step_1"])
    run = Run()
    save(run, 2, pointer_first=False)
    for event in run.events:
        at = run.state(start, mode, until=event["t"] + 0.5)
        step = at.files["latest"].decode()
        assert at.files[f"{step}/shard_0.pt"] == f"{step}-0".encode()
        assert at.files[f"{step}/shard_1.pt"] == f"{step}-1".encode()


# -- on disk --------------------------------------------------------------------------------
def test_preexisting_files_survive_untouched(tmp_path):
    ckpt = tmp_path / "ckpt"
    (ckpt / "step_1" / "sub").mkdir(parents=True)
    (ckpt / "step_1" / "model.pt").write_bytes(bytes(range(256)) * 4)
    (ckpt / "step_1" / "sub" / "opt.pt").write_bytes(b"opt")
    (ckpt / "empty").mkdir()
    (ckpt / "latest").write_text("step_1")
    start = snapshot(ckpt)
    assert start.paths() == ["empty", "latest", "step_1", "step_1/model.pt", "step_1/sub",
                             "step_1/sub/opt.pt"]
    run = Run()
    r0 = run.rank(0)
    r0.mkdir("step_2")
    r0.write_file("step_2/model.pt", b"new")
    # what the run did on disk, and more (a file the model never heard of)
    (ckpt / "step_2").mkdir()
    (ckpt / "step_2" / "model.pt").write_bytes(b"new")
    (ckpt / "latest").write_text("garbage")
    result = apply_power_loss(ckpt, start, run.events, run.read_data, "strict")  # after the run
    assert result.durable == start
    assert snapshot(ckpt) == start


def test_apply_power_loss_rebuilds_the_directory(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "latest").write_text("step_1")
    start = snapshot(ckpt)
    run = Run()
    r0 = run.rank(0)
    r0.write_file("latest.tmp", b"step_2", fsync=False)
    r0.rename("latest.tmp", "latest")
    r0.fsync_dir(".")
    (ckpt / "latest").write_text("step_2")  # the page cache view
    apply_power_loss(ckpt, start, run.events, run.read_data, "ordered")
    assert [p.name for p in ckpt.iterdir()] == ["latest"]
    assert (ckpt / "latest").read_bytes() == b""


def test_an_uninterpretable_trace_leaves_the_directory_as_it_was(tmp_path):
    (tmp_path / "keep").write_text("x")
    run = Run()
    run.rank(0).rename(None, "moved_in")
    with pytest.raises(DurabilityError, match="from outside"):
        apply_power_loss(tmp_path, Snapshot(), run.events, run.read_data, "strict")
    assert (tmp_path / "keep").read_text() == "x"


# -- files staged outside the checkpoint directory ------------------------------------------
def stage(r: "Rank", path: str, data: bytes, fsync: bool, mode: str = "wb") -> None:
    """A file written outside the checkpoint directory (`files`: path `<outside>`, its absolute path in `outside`)."""
    fid = f"r{r.r}f{next(r.fids)}"
    r.emit("open", path="<outside>", outside=path, fid=fid, mode=mode, trunc="w" in mode, create=True, append=False)
    r.ends[fid] = 0
    r.write(fid, data)
    if fsync:
        r.fsync(fid)
    r.close(fid)


def move_in(r: "Rank", src: str, dst: str) -> None:
    r.emit("rename", src=None, src_outside=src, dst=dst)


@BOTH
def test_a_staged_file_fsynced_moved_in_and_its_directory_fsynced_is_durable(mode):
    """The correct pattern through the system's temp directory (`tests/scripts/pool_writer.py`)."""
    run = Run()
    r0 = run.rank(0)
    stage(r0, "/tmp/tmpab12", b"weights", fsync=True)
    move_in(r0, "/tmp/tmpab12", "step_2.pt")
    before = run.now()
    r0.fsync_dir(".")
    assert run.state(mode=mode) == tree({"step_2.pt": b"weights"})
    assert run.state(mode=mode, until=before) == tree({})  # the move is durable with its directory


def test_a_staged_file_moved_in_without_an_fsync_of_its_bytes_comes_back_empty():
    """fsspec's local transaction (Lightning's saves): the move and the directory durable, the bytes not."""
    run = Run()
    r0 = run.rank(0)
    stage(r0, "/tmp/tmpab12", b"weights", fsync=False)
    move_in(r0, "/tmp/tmpab12", "step_2.pt")
    r0.fsync_dir(".")
    result = power_loss(Snapshot(), run.events, run.read_data)
    assert result.durable == tree({"step_2.pt": b""})
    assert [(loss.path, loss.kind) for loss in result.losses] == [("step_2.pt", LossKind.DATA)]
    assert "never fsynced" in result.losses[0].why


def test_a_staged_file_fsynced_by_path_and_one_moved_out_and_back_are_followed():
    """An fsync of a descriptor opened to read (`fid` None) reaches the staged file by
    its path; a file moved out of the directory is staged again, and may come back."""
    run = Run()
    r0 = run.rank(0)
    stage(r0, "/tmp/a", b"A", fsync=False)
    r0.emit("fsync", path="<outside>", outside="/tmp/a", fid=None, is_dir=False)
    r0.emit("fsync", path="<outside>", outside="/tmp", fid=None, is_dir=True)  # a directory outside: nothing kept
    move_in(r0, "/tmp/a", "a")
    r0.write_file("b", b"B")
    r0.emit("rename", src="b", dst=None, dst_outside="/tmp/b")
    move_in(r0, "/tmp/b", "c")
    r0.fsync_dir(".")
    assert run.state() == tree({"a": b"A", "c": b"B"})


def test_a_file_moved_in_that_was_not_written_from_its_start_is_refused():
    """Opened outside without truncating it: what it held before the run is unknown."""
    run = Run()
    r0 = run.rank(0)
    stage(r0, "/tmp/old", b"tail", fsync=True, mode="r+b")
    move_in(r0, "/tmp/old", "step_2.pt")
    with pytest.raises(DurabilityError, match="not see written from its start"):
        run.state()


def test_snapshot_refuses_symlinks(tmp_path):
    (tmp_path / "target").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(DurabilityError, match="symlinks"):
        snapshot(tmp_path)


# -- what the model refuses to guess ------------------------------------------------------
def test_other_event_kinds_are_ignored():
    run = Run()
    r0 = run.rank(0)
    r0.emit("collective", op="barrier", n=1, at="enter", caller="x")
    r0.emit("phase")
    r0.emit("fault", fault="crash", index=3)
    assert run.state() == tree({})


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda r: r.emit("write", fid="r0f9", path="x", offset=0, n=1, data=[0, 1]), "not open"),
        (lambda r: r.emit("fsync", fid="r0f9", path="x", is_dir=False), "not open"),
        (lambda r: r.emit("link", src="a", dst="b"), "does not know"),
        (lambda r: r.emit("open", path="a", fid="r0f1"), "open event without field 'trunc'"),
        (lambda r: r.emit("open", path="../a", fid="r0f1", trunc=True, create=True, append=False),
         "not relative"),
        (lambda r: r.emit("rmdir", path="."), "checkpoint directory itself"),
        (lambda r: r.emit("rename", src="x", dst="."), "checkpoint directory itself"),
        (lambda r: r.emit("fsync", path=".", fid=None, is_dir=False), "is_dir=False"),
        (lambda r: r.emit("fsync", path="gone", fid=None, is_dir=True), "does not exist"),
        (lambda r: r.emit("write", fid="r0f0", path="x", offset=0, n=5, data=[0, 2]), "landed 5"),
        (lambda r: r.emit("fault", fault="meteor", index=0), "fault event"),
    ],
    ids=["write-unknown-fid", "fsync-unknown-fid", "unknown-kind", "missing-field", "outside",
         "rmdir-root", "rename-onto-root", "is-dir-mismatch", "fsync-missing-dir", "short-data-log",
         "unknown-fault"],
)
def test_uninterpretable_events_raise(build, message):
    run = Run()
    r0 = run.rank(0)
    r0.write(r0.open("x"), b"ab")
    build(r0)
    with pytest.raises(DurabilityError, match=message):
        run.state()


@BOTH
def test_bytes_never_logged_raise_only_if_they_become_durable(mode):
    run = Run()
    r0 = run.rank(0)
    fid = r0.open("model.pt")
    r0.write(fid, b"known")
    r0.fsync(fid)
    r0.emit("write", fid=fid, path="model.pt", offset=2, n=10, data=None)
    r0.fsync_dir(".")
    assert run.state(mode=mode) == tree({"model.pt": b"known"})  # not fsynced: no need to know
    r0.write(fid, b"0123456789", offset=2)  # overwritten with known bytes
    r0.fsync(fid)
    assert run.state(mode=mode) == tree({"model.pt": b"kn0123456789"})
    r0.emit("write", fid=fid, path="model.pt", offset=0, n=1, data=None)
    r0.fsync(fid)
    with pytest.raises(DurabilityError, match="never logged"):
        run.state(mode=mode)


@BOTH
def test_operations_that_fail_in_the_job_change_nothing(mode):
    """Probes record an operation before it runs; the mirror says which failed."""
    start = tree({"a": b"A", "full/f": b"F", "x": b"X"}, ["full", "empty"])
    r0 = Run().rank(0)
    r0.unlink("missing")  # "remove if present"
    r0.unlink("full")  # EISDIR
    r0.rmtree("missing_dir")  # ignore_errors=True
    r0.rmdir("full")  # ENOTEMPTY
    r0.mkdir("full")  # EEXIST under makedirs(exist_ok=True)
    r0.mkdir(".")
    r0.mkdir("no/such")  # ENOENT
    r0.rename("missing", "b")  # ENOENT
    r0.rename("a", "no/such/b")  # ENOENT
    r0.rename("a", "full")  # EISDIR
    r0.rename("empty", "full")  # ENOTEMPTY
    r0.rename("full", "full/sub")  # EINVAL
    r0.rename("a", "a")  # the same file
    r0.open("no/such/file")  # ENOENT
    r0.open("missing", "r+b")  # ENOENT
    r0.open("full", "wb")  # EISDIR
    r0.open("x", "xb")  # EEXIST: the content stays
    r0.fsync_dir(".")
    r0.fsync_dir("full")
    assert r0.run.state(start, mode) == start


@BOTH
def test_an_operation_stopped_by_a_fault_did_not_happen(mode):
    start = tree({"latest": b"step_1"})
    r0 = Run().rank(0)
    r0.write_file("latest.tmp", b"step_2")
    r0.emit("fault", fault="eio", index=7)
    r0.emit("rename", src="latest.tmp", dst="latest", point=7)  # recorded, then EIO
    r0.fsync_dir(".")
    assert r0.run.state(start, mode) == tree({"latest": b"step_1", "latest.tmp": b"step_2"})


@BOTH
def test_a_fault_stops_the_operation_at_its_point_not_the_next_event(mode):
    r0 = Run().rank(0)
    r0.emit("fault", fault="error", index=3)
    r0.emit("collective", op="barrier", n=1, at="exit")  # another thread, no point
    r0.emit("mkdir", path="other", point=2)  # another thread's operation
    r0.emit("collective", op="barrier", n=2, at="enter", point=3)  # the faulted one
    r0.emit("mkdir", path="kept", point=4)
    r0.fsync_dir(".")
    assert r0.run.state(mode=mode) == tree({}, ["other", "kept"])


@BOTH
def test_faults_that_let_the_operation_run(mode):
    r0 = Run().rank(0)
    fid = r0.open("model.pt")
    r0.emit("fault", fault="torn", index=1)
    r0.write(fid, b"0123456789", landed=5)  # what the torn write recorded: the prefix
    r0.emit("fault", fault="delay", index=2)
    r0.fsync(fid)
    r0.fsync_dir(".")
    assert r0.run.state(mode=mode) == tree({"model.pt": b"01234"})


@BOTH
def test_rename_out_of_the_checkpoint_directory_is_a_removal(mode):
    start = tree({"step_1/m": b"m"}, ["step_1"])
    r0 = Run().rank(0)
    r0.rename("step_1", None)  # to a trash directory elsewhere
    r0.fsync_dir(".")
    assert r0.run.state(start, mode) == tree({})


def test_unknown_mode():
    with pytest.raises(ValueError, match="strict, ordered"):
        durable_state(Snapshot(), [], lambda *a: b"", "writeback")


# -- why a path is lost ----------------------------------------------------------------
def losses(run: Run, start=Snapshot(), mode="strict") -> dict[str, tuple[LossKind, str]]:
    return {loss.path: (loss.kind, loss.why) for loss in power_loss(start, run.events, run.read_data, mode).losses}


def test_a_rename_without_a_directory_fsync_is_explained():
    r0 = Run().rank(0)
    r0.mkdir("step4")
    r0.fsync_dir(".")
    r0.write_file("step4/.metadata.tmp", b"meta")
    r0.fsync_dir("step4")
    r0.rename("step4/.metadata.tmp", "step4/.metadata")
    assert losses(r0.run) == {"step4/.metadata": (
        LossKind.ENTRY, "renamed from step4/.metadata.tmp, but `step4` was not fsynced after that"),
        "step4/.metadata.tmp": (LossKind.REMOVAL, "renamed to step4/.metadata, but `step4` was not fsynced after "
                                                  "that: it comes back")}


def test_data_written_but_never_fsynced_is_explained():
    r0 = Run().rank(0)
    r0.write_file("model.pt", b"weights", fsync=False)
    r0.fsync_dir(".")
    assert losses(r0.run) == {"model.pt": (LossKind.DATA,
                                           "7 bytes written but never fsynced: it comes back with 0 bytes")}


def test_a_directory_never_fsynced_takes_its_subtree_as_one_loss():
    r0 = Run().rank(0)
    r0.mkdir("tmp.step_2")
    r0.write_file("tmp.step_2/rank0.pt", b"x")
    r0.fsync_dir("tmp.step_2")
    r0.rename("tmp.step_2", "step_2")
    assert losses(r0.run) == {"step_2": (
        LossKind.ENTRY, "renamed from tmp.step_2, but the checkpoint directory was never fsynced")}


def test_ordered_mode_names_the_missing_fsync_of_anything():
    r0 = Run().rank(0)
    r0.write_file("latest", b"2")
    r0.rename("latest", "latest.old")
    found = losses(r0.run, mode="ordered")
    assert found["latest.old"] == (LossKind.ENTRY, "renamed from latest, but nothing was fsynced after that "
                                                   "(ordered mode: the journal commits at the next fsync)")
    assert found["latest"][0] is LossKind.REMOVAL


@BOTH
def test_a_durable_save_loses_nothing(mode):
    run = Run()
    run.rank(0).atomic_write("latest", b"step_1")
    assert power_loss(Snapshot(), run.events, run.read_data, mode).losses == ()
