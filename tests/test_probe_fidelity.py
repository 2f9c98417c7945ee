"""The probes observe without changing how the job writes (issue: they used to
make every file unbuffered, which hid fsync-before-flush and the bytes a crash
loses from a buffer)."""

import json
import zipfile

import pytest
import torch

from ckpt_harness.inject import durability
from ckpt_harness.inject.faults import Fault
from ckpt_harness.inject.trace import EventKind, read_events
from ckpt_harness.launch import GroupSpec, run_group
from ckpt_harness.launch.group import STARTUP_TIMEOUT
from ckpt_harness.records import data_reader


def run(tmp_path, entry, *faults, **payload):
    spec = GroupSpec(world_size=1, entry=f"tests.entries:{entry}", run_dir=tmp_path / "run",
                     payload={"ckpt": str(tmp_path / "ckpt"), "faults": list(faults), **payload},
                     deadline=STARTUP_TIMEOUT)
    rank = run_group(spec).ranks[0]
    events = [e for e in read_events(tmp_path / "run" / "rank0.trace") if e.kind is not EventKind.PHASE]
    return rank, events


def at(kind, index):
    return Fault(kind, 0, "save 1", index)


def test_files_fill_and_reach_the_kernel_exactly_as_unprobed(tmp_path):
    rank, events = run(tmp_path, "buffering_as_unprobed")
    assert rank.status == "ok", rank.log_text()
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["probed"] == result["unprobed"]  # sizes after every call, classes, isinstance
    default = result["probed"]["default"]["sizes"]
    assert default[0] == 0 and default[-1] == 15010  # small writes wait in the buffer, as unprobed
    assert result["probed"]["default"]["buffered"] and result["probed"]["unbuffered"]["io"] == ["FileIO"]
    kernel = [e for e in events if e.kind is EventKind.WRITE and e.path == "default.bin"]
    job = [e for e in events if e.kind is EventKind.BUFFERED_WRITE and e.path == "default.bin"]
    assert len(job) == 52 and sum(e.fields["n"] for e in kernel) == 15010
    assert len(kernel) < len(job)  # the kernel saw the buffer's flushes, not each write()


def test_fsync_before_flush_is_traced_in_the_order_it_runs_and_loses_the_file_at_power_loss(tmp_path):
    rank, events = run(tmp_path, "fsync_before_flush")
    assert rank.status == "ok", rank.log_text()
    ops = [(e.kind.value, e.path) for e in events if e.point is not None and e.path.startswith("meta.tmp")]
    assert ops == [("open", "meta.tmp"), ("buffered-write", "meta.tmp"), ("fsync", "meta.tmp"),
                   ("write", "meta.tmp")]  # the bytes reach the kernel at close, after the fsync
    lost = durability.power_loss(durability.Snapshot(), [e.fields for e in events], data_reader(tmp_path / "run"))
    assert lost.durable.files == {"meta": b""}, lost.durable
    assert "meta" in {loss.path for loss in lost.losses}


@pytest.mark.parametrize("fix", ["flush", "reopen"])
def test_the_metadata_is_durable_once_flushed_before_the_fsync_or_fsynced_again(tmp_path, fix):
    rank, events = run(tmp_path, "fsync_before_flush", **{fix: True})
    assert rank.status == "ok", rank.log_text()
    kept = durability.power_loss(durability.Snapshot(), [e.fields for e in events], data_reader(tmp_path / "run"))
    assert kept.durable.files["meta"] == (tmp_path / "ckpt" / "meta").read_bytes() != b""
    assert not kept.losses


@pytest.mark.parametrize("fault", [at("crash-after", 1), at("crash", 2)], ids=["after-write", "at-fsync"])
def test_bytes_still_in_the_buffer_are_absent_after_a_crash(tmp_path, fault):
    """Crash right after the job's write() returned, or at the fsync before
    any flush: the pickled bytes were only in the process's buffer."""
    rank, events = run(tmp_path, "fsync_before_flush", fault)
    assert rank.status == "crashed"
    assert (tmp_path / "ckpt" / "meta.tmp").read_bytes() == b""
    assert [e.kind for e in events if e.point is not None][1] is EventKind.BUFFERED_WRITE
    assert not any(e.kind is EventKind.WRITE for e in events)


def test_a_flushed_write_survives_a_crash_at_the_fsync(tmp_path):
    rank, _ = run(tmp_path, "fsync_before_flush", at("crash", 3), flush=True)  # open, bw, write, fsync
    assert rank.status == "crashed"
    assert len((tmp_path / "ckpt" / "meta.tmp").read_bytes()) > 100


def test_os_write_on_a_descriptor_is_seen_and_can_be_broken(tmp_path):
    rank, events = run(tmp_path, "raw_descriptor_writes")
    assert rank.status == "ok", rank.log_text()
    ops = [(e.kind.value, e.fields.get("offset"), e.fields.get("n")) for e in events if e.point is not None]
    assert ops == [("open", None, None), ("write", 0, 1000), ("write", 2000, 10), ("fsync", None, None)]
    assert any(e.kind is EventKind.CLOSE for e in events)
    lost = durability.power_loss(durability.Snapshot(), [e.fields for e in events], data_reader(tmp_path / "run"))
    assert lost.durable.files == {}  # never a directory fsync: the name is not durable
    rank, _ = run(tmp_path / "mid", "raw_descriptor_writes", at("crash-mid", 1))
    assert rank.status == "crashed" and (tmp_path / "mid" / "ckpt" / "raw.bin").read_bytes() == b"a" * 500


def test_native_savers_write_the_same_bytes_and_every_byte_is_traced(tmp_path):
    rank, events = run(tmp_path, "native_savers")
    assert rank.status == "ok", rank.log_text()
    ckpt, outside = tmp_path / "ckpt", tmp_path / "run" / "outside"
    # torch.save to a path, routed through a Python file, writes what torch
    # writes through a Python file: records named archive/ (natively: model/)
    assert (ckpt / "model.pt").read_bytes() == (outside / "through-python.pt").read_bytes()
    names = lambda path: [n.split("/", 1) for n in zipfile.ZipFile(path).namelist()]  # noqa: E731
    assert [rest for _, rest in names(ckpt / "model.pt")] == [rest for _, rest in names(outside / "model.pt")]
    assert {top for top, _ in names(outside / "model.pt")} == {"model"}
    loaded, native = torch.load(ckpt / "model.pt"), torch.load(outside / "model.pt")
    assert loaded.keys() == native.keys() and all(torch.equal(loaded[k], native[k]) for k in loaded)
    saved = ["model.pt"]
    try:
        import safetensors.torch  # noqa: F401
        saved.append("model.safetensors")
        assert (ckpt / "model.safetensors").read_bytes() == (outside / "model.safetensors").read_bytes()
    except ImportError:
        pass
    for name in saved:
        writes = [e.fields for e in events if e.kind is EventKind.WRITE and e.path == name]
        assert [w["offset"] for w in writes] == [sum(w["n"] for w in writes[:i]) for i in range(len(writes))]
        assert sum(w["n"] for w in writes) == (ckpt / name).stat().st_size  # in order, contiguous, complete
        assert any(e.kind is EventKind.BUFFERED_WRITE and e.path == name for e in events)
