"""The launcher: real gloo groups forked from the warm server, deadlines, stacks, teardown."""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from ckpt_harness.inject.collectives import Recording, first_disagreement
from ckpt_harness.launch import GroupSpec, LaunchError, prestart, run_group
from ckpt_harness.launch.group import STACK_GRACE, STARTUP_TIMEOUT
from ckpt_harness.launch.outcome import Cut

ROOT = Path(__file__).resolve().parent.parent


def spec(tmp_path, entry, world_size=2, deadline=30.0, payload=None, **kw):
    return GroupSpec(world_size=world_size, entry=f"tests.entries:{entry}", payload=payload,
                     run_dir=tmp_path, deadline=deadline, **kw)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is as good as gone
        return f.read().split(") ")[1][0] != "Z"


@pytest.mark.parametrize("world_size", [1, 2, 4, 8])
def test_group_runs_a_real_collective(tmp_path, world_size):
    outcome = run_group(spec(tmp_path, "all_reduce", world_size))
    assert outcome.ok and not outcome.timed_out
    assert [r.status for r in outcome.ranks] == ["ok"] * world_size
    assert {(tmp_path / f"sum{r}").read_text() for r in range(world_size)} == {str(world_size)}
    assert not any(alive(r.pid) for r in outcome.ranks)
    assert all(r.collectives is None for r in outcome.ranks)  # read only when a run is stopped


def test_ranks_are_forks_of_the_warm_server_not_fresh_interpreters(tmp_path):
    """Every rank is a fork of the one server that imported torch (its
    command line is the server's; a fresh interpreter's would be its own),
    so a group costs a fork per rank, not an import of torch: what that
    saves is measured side by side in `ci/benchmark.py` (part 1), not timed here."""
    prestart(wait=True)
    assert run_group(spec(tmp_path / "a", "origin")).ok and run_group(spec(tmp_path / "b", "origin")).ok
    seen = [Path(tmp_path, run, f"origin{rank}").read_text().split("\n") for run in "ab" for rank in (0, 1)]
    assert len({parent for parent, _ in seen}) == 1, seen  # one server forked all four ranks of both runs
    assert all("ckpt_harness.launch.zygote" in cmdline.split("\0") for _, cmdline in seen), seen


def test_groups_at_once_run_on_forks_of_the_one_server_that_imported_torch(tmp_path):
    """Two groups at once need two servers (a group holds its server), but
    only one interpreter imports torch: the servers the groups run on are
    forks of it (`launch.group._Pool`), and each forks its group's ranks.
    What that saves is measured in `ci/benchmark.py` (part 11)."""
    from concurrent.futures import ThreadPoolExecutor

    from ckpt_harness.launch import group

    prestart(wait=True)
    runs = [tmp_path / "a", tmp_path / "b"]
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(lambda run: run_group(spec(run, "origin_at_once", payload=[str(r) for r in runs])),
                                 runs))
    assert all(o.ok for o in outcomes), outcomes
    servers = {run.name: {int(Path(run, f"origin{rank}").read_text().split("\n")[0]) for rank in (0, 1)}
               for run in runs}
    assert all(len(s) == 1 for s in servers.values()) and servers["a"] != servers["b"], servers
    mother = group._pool.mother.proc.pid
    for (server,) in servers.values():
        with open(f"/proc/{server}/stat") as f:
            assert int(f.read().rpartition(") ")[2].split()[1]) == mother  # its parent: the one that imported torch
        assert "ckpt_harness.launch.zygote" in Path(f"/proc/{server}/cmdline").read_bytes().decode().split("\0")


def test_hang_yields_every_rank_stack_within_the_deadline(tmp_path, pace):
    deadline = pace(2.0)  # long enough for rank 1 to finish first
    start = time.monotonic()
    outcome = run_group(spec(tmp_path, "rank0_barrier", deadline=deadline))
    elapsed = time.monotonic() - start
    assert outcome.timed_out and not outcome.stuck_after_failure
    assert elapsed < deadline + STACK_GRACE + pace(2.0), (elapsed, pace)
    hung, finished = outcome.ranks
    assert hung.status == "hung" and finished.status == "ok"
    assert "in barrier" in hung.stack and "rank0_barrier" in hung.stack
    assert "park" in finished.stack  # the finished rank's stack is shown too
    assert not any(alive(r.pid) for r in outcome.ranks)


def test_hang_yields_the_collective_each_rank_waits_in_even_when_cpp_issued_it(tmp_path, pace):
    prestart(wait=True)
    outcome = run_group(spec(tmp_path, "ddp_backward_vs_barrier", deadline=pace(2.0)))
    assert outcome.timed_out
    recordings = {r.rank: Recording.parse(r.collectives) for r in outcome.ranks}
    in_backward, in_barrier = recordings[0].blocked, recordings[1].blocked
    assert (in_backward.op, in_backward.library) == ("all_reduce", "DDP gradient bucket")
    assert in_backward.caller.startswith("entries.py:") and "ddp_backward_vs_barrier" in in_backward.caller
    assert in_barrier.op == "barrier" and in_barrier.library is None
    assert in_backward.seq == in_barrier.seq  # numbered per group, alike on every rank
    assert first_disagreement(recordings) == (
        f"collectives part at #{in_barrier.seq}: rank 0 all_reduce, rank 1 barrier")


def test_a_job_that_turns_the_flight_recorder_off_keeps_it_off(tmp_path, pace):
    prestart(wait=True)
    outcome = run_group(spec(tmp_path, "ddp_backward_vs_barrier", deadline=pace(2.0),
                             env={"TORCH_FR_BUFFER_SIZE": "0"}))
    assert outcome.timed_out
    recordings = [Recording.parse(r.collectives) for r in outcome.ranks]
    assert all(r is not None and r.collectives == () for r in recordings)


def test_a_killed_rank_is_reported_as_crashed_and_its_peer_fails_fast(tmp_path, pace):
    outcome = run_group(spec(tmp_path, "rank1_sigkill", deadline=pace(30.0)))
    peer, killed = outcome.ranks
    assert killed.status == "crashed" and killed.signal == signal.SIGKILL
    assert peer.status == "failed"  # gloo: "connection reset by peer"
    assert outcome.elapsed < pace(10.0), (outcome.elapsed, pace)


def test_a_raising_rank_fails_and_a_stuck_peer_is_cut_after_the_grace(tmp_path, pace):
    outcome = run_group(spec(tmp_path, "rank1_raises", deadline=pace(60.0), failure_grace=1.0))
    stuck, raised = outcome.ranks
    assert raised.status == "failed" and "planted failure on rank 1" in raised.log_text()
    # The raising rank stays alive like a real process would, so its peer
    # stays blocked in the barrier instead of being rescued by a socket reset.
    assert stuck.status == "hung" and outcome.stuck_after_failure
    assert outcome.elapsed < pace(10.0), (outcome.elapsed, pace)


@pytest.mark.parametrize("reporter", ["rank", "child"])
def test_the_peers_of_a_blocked_rank_get_the_blocked_grace_from_the_moment_it_blocked(tmp_path, pace, reporter):
    """A run-up longer than the grace (a checkpoint process to spawn) must not eat it, and a process the rank
    spawned reports through the rank's pipe, its stack in the report; the deadline stays the backstop."""
    from tests.entries import RUN_UP

    grace = 2.0
    outcome = run_group(spec(tmp_path, "blocks_after_a_run_up", deadline=pace(60.0), blocked_grace=grace,
                             payload=reporter))
    blocked, waiting = outcome.ranks
    assert outcome.cut is Cut.BLOCKED and outcome.timed_out and not outcome.stuck_after_failure
    assert blocked.status == "hung" and waiting.status == "hung" and "barrier" in waiting.stack
    assert RUN_UP + grace <= outcome.elapsed < pace(60.0) / 2, (outcome.elapsed, pace)
    if reporter == "child":  # its stack is taken with its rank's, into a file of its own
        assert list(blocked.children) == ["blocked child"] and "in _blocked_child" in blocked.children["blocked child"]
        assert "_blocked_child" not in blocked.stack and "in join" in blocked.stack
    else:
        assert blocked.children == {} and waiting.children == {}


def test_a_child_link_is_only_handed_over_while_multiprocessing_spawns():
    """Elsewhere multiprocessing would share the pipe through a listening thread in the rank."""
    import pickle

    from ckpt_harness.launch.link import ChildLink

    with pytest.raises(TypeError, match="only handed to a process multiprocessing is spawning"):
        pickle.dumps(ChildLink(0, "/nonexistent", 0))


def test_grandchildren_die_with_their_rank(tmp_path, pace):
    outcome = run_group(spec(tmp_path, "spawn_sleeper_and_hang", deadline=pace(3.0)))
    assert outcome.timed_out
    children = [int((tmp_path / f"child{r}").read_text()) for r in range(2)]
    assert survivors(children, within=pace(1.0)) == []


@pytest.mark.parametrize("end", ["return", "crash", "hang"])
def test_a_ranks_multiprocessing_directory_goes_with_it(tmp_path, pace, end):
    """A process removes multiprocessing's temporary directory (``pymp-*``, where DCP's process executor
    shares a save's tensors through a listener) as its interpreter exits; a rank is torn down instead, so
    the launcher removes it, however the rank ended. Before, each such rank left one in /tmp."""
    outcome = run_group(spec(tmp_path, "shares_a_descriptor", world_size=1, deadline=pace(5.0), payload=end))
    assert outcome.ok is (end == "return"), outcome
    made = Path((tmp_path / "mp-tempdir0").read_text())
    assert made.name.startswith("pymp-") and made.parent == Path(tempfile.gettempdir()), made
    assert not made.exists(), sorted(made.iterdir())


@pytest.mark.parametrize("world_size", [0, 9])
def test_world_size_out_of_range_is_refused(tmp_path, world_size):
    with pytest.raises(ValueError, match="world_size must be between 1 and 8"):
        spec(tmp_path, "all_reduce", world_size)


def test_an_entry_that_does_not_import_is_a_launch_error(tmp_path):
    bad = GroupSpec(world_size=2, entry="tests.no_such_module:fn", payload=None, run_dir=tmp_path, deadline=5)
    with pytest.raises(LaunchError, match="no_such_module"):
        run_group(bad)
    assert run_group(spec(tmp_path / "after", "all_reduce")).ok  # the server survived


# Ctrl-C raises KeyboardInterrupt as in a terminal, even when the suite was
# started in the background (`make test &`, nohup, some CI runners): those
# start it with SIGINT ignored, every child inherits that, and a harness that
# ignores SIGINT rightly never ends on one.
HARNESS = textwrap.dedent(
    """
    import signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from ckpt_harness.launch import GroupSpec, run_group
    print("harness up", flush=True)
    run_group(GroupSpec(world_size=2, entry="tests.entries:hang_forever", payload=None,
                        run_dir=sys.argv[1], deadline=120))
    """
)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_no_rank_outlives_its_harness(tmp_path, how):
    """SIGKILL runs no cleanup at all: the kernel's parent-death signal does it.

    Going may take the harness as long as starting its ranks took it (a fresh
    interpreter, a fork server importing torch), twice over: on a quiet box
    that is 0.3 s against 3 s, and load slows both alike.
    """
    start = time.monotonic()
    harness = subprocess.Popen(
        [sys.executable, "-c", HARNESS, str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        # `write_text` creates the file before it writes the pid: a loaded box shows the file empty in between
        while not all((tmp_path / f"started{r}").exists() and (tmp_path / f"started{r}").read_text()
                      for r in range(2)):
            assert time.monotonic() < start + STARTUP_TIMEOUT, "ranks never started"
            assert harness.poll() is None, "harness died early"
            time.sleep(0.05)
        budget = 2 * (time.monotonic() - start)
        ranks = [int((tmp_path / f"started{r}").read_text()) for r in range(2)]
        server = next(p for p in _processes_mentioning(str(harness.pid)) if p not in ranks)
        harness.send_signal(how)
        assert survivors([harness.pid], within=budget) == [], f"harness still running {budget:.1f} s after {how!r}"
        assert survivors([*ranks, server], within=budget) == []
    finally:
        harness.kill()
        harness.wait()


def test_the_harness_never_imports_torch(tmp_path):
    """Torch is the fork server's and the ranks': the harness stays quick to
    start, and to end, which is what a Ctrl-C waits for."""
    code = textwrap.dedent(
        f"""
        import sys
        from ckpt_harness.launch import GroupSpec, run_group
        assert run_group(GroupSpec(world_size=2, entry="tests.entries:all_reduce", payload=None,
                                   run_dir={str(tmp_path)!r}, deadline={STARTUP_TIMEOUT})).ok
        print(sorted(m for m in sys.modules if m.partition(".")[0] == "torch")[:3])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=2 * STARTUP_TIMEOUT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def survivors(pids: list[int], within: float) -> list[int]:
    """Those of `pids` still alive after waiting up to `within` seconds for them to go."""
    until = time.monotonic() + within
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < until:
        time.sleep(0.05)
    return left


def _processes_mentioning(word: str) -> list[int]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"ckpt_harness.launch.zygote" in cmdline and word.encode() in cmdline:
            out.append(int(pid))
    return out


def test_simulated_nodes_get_their_own_local_ranks(tmp_path):
    outcome = run_group(spec(tmp_path, "report_layout", world_size=4, nodes=2))
    assert outcome.ok
    layout = [(tmp_path / f"layout{r}").read_text().split() for r in range(4)]
    # RANK LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK, then RankInfo's local_rank and node
    assert layout == [["0", "0", "2", "0", "0", "0"], ["1", "1", "2", "0", "1", "0"],
                      ["2", "0", "2", "1", "0", "1"], ["3", "1", "2", "1", "1", "1"]]
    with pytest.raises(ValueError, match="3 simulated nodes cannot share 4 ranks evenly"):
        spec(tmp_path, "report_layout", world_size=4, nodes=3)


def test_a_rank_starts_with_the_signal_dispositions_of_a_fresh_interpreter(tmp_path):
    """Python ignores SIGPIPE at startup: a rank killed by one where a plain
    `python train.py` gets BrokenPipeError would fail where the job does not.
    SIGINT raises KeyboardInterrupt, as in an interpreter started from a
    terminal (one started with SIGINT ignored, as under `nohup` or `&` in
    CI, keeps it ignored: that one the rank does not copy)."""
    fresh = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import os, signal
        read, write = os.pipe(); os.close(read)
        try:
            os.write(write, b"x"); broken = "no error"
        except BrokenPipeError:
            broken = "BrokenPipeError"
        print(signal.getsignal(signal.SIGPIPE) is signal.SIG_IGN, broken)
    """)], capture_output=True, text=True, check=True).stdout.split()
    outcome = run_group(spec(tmp_path, "report_signals"))
    assert outcome.ok, outcome
    assert fresh == ["True", "BrokenPipeError"]
    assert ([(tmp_path / f"signals{r}").read_text().split() for r in range(2)]
            == [["True", "True", "BrokenPipeError"]] * 2)
