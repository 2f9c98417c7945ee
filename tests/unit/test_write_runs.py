"""Runs of writes in a rank with nothing armed: one event for many writes,
every point kept with its own kind, the kernel bytes one range."""

from __future__ import annotations

from ckpt_harness.pipeline.baseline import fault_points
from ckpt_harness.inject.trace import EventKind, describe_phase, read_events
from ckpt_harness.inject.tracer import Tracer


def traced(tmp_path, writes):
    tracer = Tracer(str(tmp_path / "rank0.trace"), 0)
    tracer.set_phase("save 2")
    for kind, fid, offset, n in writes:
        fields = {"fid": fid, "path": f"{fid}.bin", "n": n}
        if kind == "write":
            fields.update(offset=offset, data=None)
        tracer.record_write(kind, fields, batch=True)
    tracer.emit("close", fid="f0", path="f0.bin")
    return [e for e in read_events(tmp_path / "rank0.trace") if e.kind is not EventKind.PHASE]


def test_a_buffer_interleaving_job_and_kernel_writes_is_one_event(tmp_path):
    events = traced(tmp_path, [("buffered-write", "f0", None, 30), ("buffered-write", "f0", None, 4000),
                               ("write", "f0", 0, 4030), ("buffered-write", "f0", None, 9000),
                               ("write", "f0", 4030, 9000), ("buffered-write", "f0", None, 10)])
    run, close = events
    assert run.kind is EventKind.WRITE and run.point == 0 and run.count == 6 and run.fields["ops"] == "b2w1b1w1b1"
    assert run.ops == ("buffered-write", "buffered-write", "write", "buffered-write", "write", "buffered-write")
    assert (run.fields["offset"], run.fields["n"], run.fields["job_n"]) == (0, 13030, 13040)
    assert describe_phase(events, "save 2") == "write f0.bin (13030 bytes, 10 buffered)"


def test_runs_break_at_another_file_and_at_a_gap_in_the_file(tmp_path):
    events = traced(tmp_path, [("write", "f0", 0, 10), ("write", "f0", 10, 10), ("write", "f0", 100, 5),
                               ("buffered-write", "f1", None, 7), ("buffered-write", "f1", None, 7)])
    runs = [(e.kind.value, e.point, e.count, e.fields.get("offset"), e.fields["n"], "ops" in e.fields)
            for e in events if e.kind is not EventKind.CLOSE]
    assert runs == [("write", 0, 2, 0, 20, False), ("write", 2, 1, 100, 5, False),
                    ("buffered-write", 3, 2, None, 14, False)]


def test_fault_points_sample_each_kind_of_a_run_by_its_own_points(tmp_path):
    kinds = ["buffered-write"] * 5 + ["write"] + ["buffered-write"] * 5 + ["write"] * 3
    offsets = iter(range(0, 1000, 10))
    events = traced(tmp_path, [(k, "f0", next(offsets) if k == "write" else None, 10) for k in kinds])
    points = [(p.index, p.op) for p in fault_points({0: events}, "save 2")]
    assert points == [(0, "buffered-write"), (5, "write"), (6, "buffered-write"), (10, "buffered-write"),
                      (12, "write"), (13, "write")]


def test_after_the_last_save_means_after_it_not_the_same_phase_name_earlier():
    """A script's "run" phase is everything outside its saves: the points after
    its last save are the run's operations after that save ended (by position
    on a rank that made the save, by time on one that did not), not the run's
    operations before it."""
    from ckpt_harness.pipeline.baseline import broken_events, broken_phases
    from ckpt_harness.inject.trace import Event

    def event(rank, kind, where, point, t, **fields):
        return Event.parse({"kind": kind, "rank": rank, "phase": where, "point": point, "t": t, **fields})

    events = {
        0: [event(0, "mkdir", "run", 0, 1.0, path="step_2"), event(0, "mkdir", "save 4", 0, 2.0, path="step_4"),
            event(0, "collective", "run", 1, 3.0, op="barrier")],
        1: [event(1, "collective", "run", 0, 0.5, op="barrier"), event(1, "collective", "run", 1, 3.5, op="barrier")],
    }
    chosen = broken_events(events, 4, last=True)
    points = [(p.rank, p.phase, p.index) for p in fault_points(chosen, broken_phases(events, 4, True))]
    assert points == [(0, "save 4", 0), (0, "run", 1), (1, "run", 1)]
    assert [(p.rank, p.phase, p.index) for p in fault_points(broken_events(events, 4, last=False), {"save 4"})] \
        == [(0, "save 4", 0)]


def test_an_earlier_saves_writer_still_at_work_after_the_last_save_is_not_its_work():
    """On a loaded machine save 4's background writer may still write after save 6 ended: a fault there
    breaks save 4, which the cases of save 6 are not judged for, and the golden run's timing must not
    decide which cases there are."""
    from ckpt_harness.pipeline.baseline import broken_events, broken_phases
    from ckpt_harness.inject.trace import Event

    def event(rank, kind, where, point, t, **fields):
        return Event.parse({"kind": kind, "rank": rank, "phase": where, "point": point, "t": t, **fields})

    events = {0: [event(0, "mkdir", "save 6", 0, 1.0, path="step_6"), event(0, "open", "bg_save 4", 0, 2.0,
                                                                         path="latest.tmp", fid="f0"),
                  event(0, "open", "bg_save 6", 0, 2.5, path="latest.tmp", fid="f1"),
                  event(0, "unlink", "after_save 6", 0, 3.0, path="step_2.pt")]}
    phases = broken_phases(events, 6, True)
    assert phases == {"save 6", "bg_save 6", "after_save 6"}
    points = [(p.phase, p.index) for p in fault_points(broken_events(events, 6, last=True), phases)]
    assert points == [("save 6", 0), ("bg_save 6", 0), ("after_save 6", 0)]
