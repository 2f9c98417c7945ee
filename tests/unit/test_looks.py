"""`looks.stuck` and `looks.reached`: the proofs an early cut by the process groups' own sequence numbers rests
on, case by case, on looks as a rank writes them (`looks.look`); and a look of a real gloo group."""

import json
import time

from ckpt_harness.launch import looks

NOW = 1000.0
LATER = NOW + 100  # when the watch would cut
BACKWARD = ["/site-packages/torch/autograd/graph.py", 979, "_engine_run_backward"]
BARRIER = ["/site-packages/torch/distributed/distributed_c10d.py", 4810, "barrier"]
SCRIPT = ["train.py", 40, "<module>"]


def pending(seq, op, frame, main=True, timeout=1800.0, p2p=False):
    return {"seq": seq, "op": op, "p2p": p2p, "main": main, "created": NOW - 5, "timeout": timeout,
            "frames": [frame, SCRIPT]}


def look(frame, groups, newest=None):
    """A rank's look: `groups` name -> (last, {seq: op} of the newest, [pending]), on gloo, ranks 0 and 1."""
    out = {"ask": 1, "at": NOW, "frame": frame, "groups": {}, "newest": newest}
    for name, (last, ops, waits) in groups.items():
        out["groups"][name] = {"ranks": [0, 1], "backend": "gloo", "last": last, "first": min(ops, default=last + 1),
                               "ops": {str(n): op for n, op in ops.items()}, "pending": waits}
        for p in waits:
            if p["main"]:
                out["newest"] = {"group": name, "seq": p["seq"], "p2p": p["p2p"], "retired": False}
    return out


def in_backward(seq=9, op="all_reduce", frame=BACKWARD, last=None, **kw):
    """Rank 0 in `backward`, DDP's bucket #seq pending, issued from the line it still sits on."""
    ops = {n: "barrier" for n in range(1, seq)} | {seq: op}
    return look(frame, {"0": (last or seq, ops, [pending(seq, op, BACKWARD, **kw)])})


def in_barrier(seq=9):
    """Rank 1 in a barrier it called from Python (its beacon says so)."""
    ops = {n: "barrier" for n in range(1, seq + 1)}
    return look(BARRIER, {"0": (seq, ops, [pending(seq, "barrier", BARRIER)])})


def finished(last=8, op="barrier"):
    """A rank that returned (held) after collective #last (`op`), every one completed."""
    ops = {n: "barrier" for n in range(1, last)} | {last: op}
    return look(SCRIPT, {"0": (last, ops, [])}, newest={"group": "0", "seq": last, "p2p": False, "retired": True})


def stuck(looks_, gone=frozenset(), python=frozenset({1})):
    running = set(looks_) - set(gone)
    return looks.stuck(looks_, {r: r in python for r in running}, set(gone), running, LATER)


def test_a_ddp_bucket_against_a_barrier_at_one_number_never_completes():
    found = stuck({0: in_backward(), 1: in_barrier()})
    assert found == {0: [("0", 9, "all_reduce")], 1: [("0", 9, "barrier")]}


def test_what_may_still_complete_or_move_is_not_claimed():
    assert stuck({0: in_backward(op="barrier"), 1: in_barrier()}) is None  # the same kind: they match
    assert stuck({0: in_backward(op="allreduce_coalesced"), 1: in_barrier()}) is None  # a name never measured
    assert stuck({0: in_backward(frame=SCRIPT), 1: in_barrier()}) is None  # back in Python: not waiting for it
    assert stuck({0: in_backward(main=False), 1: in_barrier()}) is None  # another thread's
    assert stuck({0: in_backward(timeout=10.0), 1: in_barrier()}) is None  # gives up before the cut
    assert stuck({0: in_backward(p2p=True), 1: in_barrier()}) is None  # point-to-point
    assert stuck({0: finished(9), 1: in_barrier()}) is None  # rank 0 runs, no collective pending
    nccl = in_backward()
    nccl["groups"]["0"]["backend"] = "nccl"
    assert stuck({0: nccl, 1: in_barrier()}) is None
    assert stuck({0: in_backward(), 1: {"ask": 1, "error": "RuntimeError: no recorder"}}) is None
    assert stuck({0: in_backward()}) is None  # rank 1 did not answer


def test_a_peer_that_parked_before_the_number_leaves_the_bucket_waiting_for_good():
    assert stuck({0: in_backward(), 1: finished(8)}, gone={1}, python=set()) == {0: [("0", 9, "all_reduce")]}
    assert stuck({0: in_backward(), 1: finished(9, "all_reduce")}, gone={1}, python=set()) is None  # may complete
    assert stuck({0: in_backward(), 1: finished(9)}, gone={1}, python=set()) is not None  # its #9 another kind


def test_ranks_waiting_for_each_other_in_two_groups_wait_for_good():
    """skip_barrier.py: rank 0 in the default group's barrier #3, which rank 1
    never reaches; rank 1 in its subgroup's all_reduce #1, which rank 0 never reaches."""
    sub = [0, 1]
    rank0 = look(BARRIER, {"0": (3, {1: "all_gather", 2: "barrier", 3: "barrier"},
                                 [pending(3, "barrier", BARRIER)]), "1": (0, {}, [])})
    rank1 = look(BARRIER, {"0": (2, {1: "all_gather", 2: "barrier"}, []),
                           "1": (1, {1: "all_reduce"}, [pending(1, "all_reduce", BARRIER)])})
    assert rank0["groups"]["1"]["ranks"] == sub
    assert stuck({0: rank0, 1: rank1}, python={0, 1}) == {0: [("0", 3, "barrier")], 1: [("1", 1, "all_reduce")]}
    rank1["groups"]["0"]["pending"] = [pending(3, "barrier", BARRIER, main=False)]  # a thread of rank 1's joins #3
    rank1["groups"]["0"]["last"], rank1["groups"]["0"]["ops"]["3"] = 3, "barrier"
    assert stuck({0: rank0, 1: rank1}, python={0, 1}) is None


def test_a_cold_run_is_where_the_warm_one_hung_only_with_the_same_collectives_in_the_same_order(tmp_path):
    warm = tmp_path / "run"
    warm.mkdir()
    entries = {0: [(n, "barrier", True) for n in range(1, 9)] + [(9, "all_reduce", False)],
               1: [(n, "barrier", True) for n in range(1, 10)]}
    entries[1][-1] = (9, "barrier", False)
    for rank, found in entries.items():
        (warm / f"rank{rank}.collectives").write_text(json.dumps({"at": NOW, "entries": [
            {"seq": seq, "op": op, "group": "default_pg", "pg": "0", "p2p": False, "retired": retired,
             "created": NOW - 60, "frames": []} for seq, op, retired in found]}))
    looks.write_cut(warm, {0: "running", 1: "running"})
    hang = looks.hang_of(warm)
    assert hang is not None and hang[0]["groups"]["0"]["pending"] == {(9, "all_reduce", False)}
    running = {0: "running", 1: "running"}
    assert looks.reached(hang, {0: in_backward(), 1: in_barrier()}, running)
    assert not looks.reached(hang, {0: in_backward(), 1: in_barrier()}, {0: "running", 1: "parked"})
    assert not looks.reached(hang, {0: in_backward(10), 1: in_barrier(10)}, running)  # further on
    assert not looks.reached(hang, {0: in_backward(op="broadcast"), 1: in_barrier()}, running)  # another op
    assert not looks.reached(hang, {0: in_backward(), 1: finished(8)}, running)  # rank 1 not in it yet
    earlier = in_backward()
    earlier["groups"]["0"]["ops"]["4"] = "all_reduce"  # the same numbers reached by other collectives
    assert not looks.reached(hang, {0: earlier, 1: in_barrier()}, running)
    looks.write_cut(warm, {0: "running", 1: "ended"})  # a rank raised: a failure, not a hang to hold a run to
    assert looks.hang_of(warm) is None
    looks.write_cut(warm, {0: "running", 1: "running"})
    data = json.loads((warm / "rank0.collectives").read_text())
    data["at"] = NOW - 57  # pending for 3 s when cut: ranks in transit, not hung
    (warm / "rank0.collectives").write_text(json.dumps(data))
    assert looks.hang_of(warm) is None


def test_a_look_answers_with_the_groups_numbers_and_the_main_threads_line(tmp_path):
    """On a real gloo group of one: the pipe, the thread, the recorder read back."""
    import datetime
    import threading

    import torch
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=60))
    try:
        dist.all_reduce(torch.ones(1))
        dist.barrier()
        looks.serve(tmp_path, 0)
        watch = looks.Watch(tmp_path)
        watch._ask({0}, time.monotonic())
        until = time.monotonic() + 30
        while (found := watch._read(0)) is None and time.monotonic() < until:
            time.sleep(0.02)
        assert found is not None, "no answer"
        group = found["groups"]["0"]
        assert group["ranks"] == [0] and group["backend"] == "gloo" and group["last"] == 2
        assert group["ops"] == {"1": "all_reduce", "2": "barrier"} and group["pending"] == []
        assert found["newest"] == {"group": "0", "seq": 2, "p2p": False, "retired": True}
        assert found["frame"][0].endswith(".py") and isinstance(found["frame"][1], int)  # where this thread polled
        assert any(t.name == "ckpt-harness-looks" and t.daemon for t in threading.enumerate())
    finally:
        dist.destroy_process_group()
