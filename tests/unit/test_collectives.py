"""Reading flight recordings: what each rank waits in, and where the ranks part (no process)."""

from __future__ import annotations

import json

from ckpt_harness.inject.collectives import Collective, Recording, first_disagreement
from ckpt_harness.oracle import health
from tests.unit.synthetic import rank, run

TORCH = "/site/torch"
BACKWARD = ((f"{TORCH}/autograd/graph.py", 9, "_engine_run_backward"), ("/job/train.py", 30, "train_step"))
BARRIER = ((f"{TORCH}/distributed/distributed_c10d.py", 5, "barrier"), ("/job/train.py", 40, "save"))
DCP = ((f"{TORCH}/distributed/distributed_c10d.py", 5, "all_gather_object"),
       (f"{TORCH}/distributed/checkpoint/utils.py", 7, "gather_object"), ("/job/train.py", 50, "save"))


def c(seq, op, retired=True, frames=(), group="default_pg"):
    return Collective(seq, op, group, False, retired, frames)


def rec(*collectives):
    return Recording(tuple(collectives))


def dump(*collectives):
    """As `launch.flight` writes it."""
    return json.dumps({"entries": [{"seq": x.seq, "op": x.op, "group": x.group, "p2p": x.p2p, "retired": x.retired,
                                    "frames": [list(f) for f in x.frames]} for x in collectives]})


def test_origin_names_the_library_and_the_jobs_frame():
    assert c(4, "all_reduce", frames=BACKWARD).origin == "DDP gradient bucket, from train.py:30 in train_step()"
    assert c(4, "all_gather", frames=DCP).origin == "DCP, from train.py:50 in save()"
    assert c(4, "barrier", frames=BARRIER).origin == "from train.py:40 in save()"
    assert c(4, "barrier").origin == "" and c(4, "barrier", group="7").label == "barrier #4 of group 7"


def test_the_jobs_frame_is_the_scripts_line_not_a_librarys_wrapper():
    """DeepSpeed wraps its collectives in typing_extensions' decorator: the
    line to name is the script's that asked (issue 23), and a job that is an
    installed package still gets its own frame."""
    site = "/venv/lib/python3.11/site-packages"
    wrapped = ((f"{TORCH}/distributed/distributed_c10d.py", 5, "all_gather"),
               (f"{site}/deepspeed/comm/torch.py", 20, "all_gather"), (f"{site}/typing_extensions.py", 3140, "wrapper"),
               (f"{site}/deepspeed/runtime/zero/stage3.py", 99, "_gather"), ("/home/me/train.py", 77, "main"))
    assert c(84, "all_gather", frames=wrapped).origin == "DeepSpeed, from train.py:77 in main()"
    installed = ((f"{TORCH}/distributed/distributed_c10d.py", 5, "barrier"), (f"{site}/mypkg/jobs.py", 12, "save"))
    assert c(9, "barrier", frames=installed).origin == "from jobs.py:12 in save()"


def test_blocked_is_the_oldest_collective_not_completed():
    assert rec(c(1, "broadcast"), c(2, "all_reduce", False), c(3, "all_reduce", False)).blocked.seq == 2
    assert rec(c(1, "broadcast")).blocked is None
    assert Recording.parse(dump(c(1, "barrier", False, BARRIER))).blocked == c(1, "barrier", False, BARRIER)
    assert Recording.parse("{torn") is None and Recording.parse(None) is None


def test_ranks_part_at_the_first_number_whose_ops_differ():
    same = [c(1, "broadcast"), c(2, "all_reduce")]
    assert first_disagreement({0: rec(*same, c(3, "all_reduce", False)), 1: rec(*same, c(3, "barrier", False))}) \
        == "collectives part at #3: rank 0 all_reduce, rank 1 barrier"
    assert first_disagreement({0: rec(*same, c(3, "barrier", False)), 1: rec(*same)}) \
        == "collectives part at #3: rank 0 barrier, rank 1 none (its last was all_reduce #2)"
    assert first_disagreement({0: rec(*same), 1: rec(*same)}) is None


def test_where_the_call_sites_part_before_the_collectives_do_is_said():
    """Rank 0 skipped the first of two barriers in a row: its second meets rank
    1's first, and the counts part only at the all_reduce after; the line
    where the ranks' code parted comes along. Without a parting, no clause."""
    def at(line: int) -> tuple:
        return (("/home/me/train.py", line, "save"),)

    r0 = rec(c(1, "broadcast"), c(2, "barrier", frames=at(86)), c(3, "all_reduce", False))
    r1 = rec(c(1, "broadcast"), c(2, "barrier", frames=at(82)), c(3, "barrier", False))
    assert first_disagreement({0: r0, 1: r1}) == (
        "collectives part at #3: rank 0 all_reduce, rank 1 barrier; their call sites part earlier, at #2: "
        "rank 0 barrier from train.py:86 in save(), rank 1 barrier from train.py:82 in save()")
    r1 = rec(c(1, "broadcast"), c(2, "barrier", frames=at(86)), c(3, "barrier", False))
    assert first_disagreement({0: r0, 1: r1}) == "collectives part at #3: rank 0 all_reduce, rank 1 barrier"


def test_numbers_a_rank_no_longer_remembers_are_not_compared():
    """The recorder is a ring: rank 1 dropped #1-#2, which differ on rank 0 only in what it kept."""
    assert first_disagreement({0: rec(c(1, "x"), c(2, "y"), c(3, "all_reduce", False)),
                               1: rec(c(3, "all_reduce", False))}) is None


def test_groups_are_numbered_apart():
    sub = [c(1, "all_reduce", group="5")]
    assert first_disagreement({0: rec(c(1, "barrier"), *sub, c(2, "broadcast", False, group="5")),
                               1: rec(c(1, "barrier"), *sub, c(2, "all_gather", False, group="5"))}) \
        == "collectives part at #2 of group 5: rank 0 broadcast, rank 1 all_gather"


def test_hang_summary_names_a_collective_no_probe_saw():
    r0, r1 = rank(0).event("phase", "train_step 3").hung(), rank(1).collective("barrier", 3, phase="save 2").hung()
    hung = run(r0, r1, timed_out=True)
    hung.ranks[0].outcome.collectives = dump(c(1, "barrier"), c(2, "all_reduce", False, BACKWARD))
    hung.ranks[1].outcome.collectives = dump(c(1, "barrier"), c(2, "barrier", False, BARRIER))
    assert health(hung).summary == (
        "hang: rank 0 waiting in all_reduce #2 (DDP gradient bucket, from train.py:30 in train_step())"
        " during train_step 3; rank 1 waiting in barrier #2 called from train.py:40 in save() during save 2;"
        " collectives part at #2: rank 0 all_reduce, rank 1 barrier")


def test_without_a_recording_the_probes_still_speak():
    hung = run(rank(0).event("phase", "train_step 3").hung(), rank(1).collective("barrier", 3).hung(), timed_out=True)
    assert health(hung).summary == ("hang: rank 0 in train_step 3, not in a collective; "
                                    "rank 1 waiting in barrier #3 called from train.py:40 in save() during save 6")


def test_a_launch_whose_agents_lost_their_store_is_made_again_and_no_other():
    """The rendezvous port torchrun's agents were given was taken first (CI saw
    it once in a suite): the harness's set-up, retried; any other launch error
    (torch missing, a deadline) is reported as it is."""
    from ckpt_harness.launch.elastic import store_lost

    lost = ("torchrun started no worker before the agents ended: check that torch is installed ...\n--- agent0.log:\n"
            "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store "
            "has failed. See inner exception for details.")
    assert store_lost(lost)
    assert not store_lost("torchrun started no worker within the 5 s deadline: check that torch is installed ...\n"
                          "--- agent0.log:\nModuleNotFoundError: No module named 'torch'")
    assert not store_lost("RendezvousConnectionError after the workers started")


def test_a_run_whose_workers_store_port_was_taken_is_made_again_and_no_other():
    """torchrun picks MASTER_PORT free and releases it; CI saw rank 0 fail to
    bind it once (DeepSpeed's init_distributed, in init_process_group): the
    set-up, retried. A script's own EADDRINUSE elsewhere is its own."""
    from ckpt_harness.launch.elastic import port_taken

    taken = ('  File ".../torch/distributed/distributed_c10d.py", line 1892, in init_process_group\n'
             '  File ".../torch/distributed/rendezvous.py", line 199, in _create_c10d_store\n'
             "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
             "address. port: 49573, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")
    assert port_taken(taken)
    assert not port_taken('  File "train.py", line 9, in serve\nOSError: [Errno 98] EADDRINUSE')
    assert not port_taken('  File ".../distributed_c10d.py", in init_process_group\nRuntimeError: timed out')
