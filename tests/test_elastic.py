"""Script mode's launch layer: unmodified scripts under real torchrun agents.

Every run here starts fresh interpreters (agents, then workers), seconds
each on a loaded box, so deadlines are derived from a fault-free run of the
same kind measured first (`script_pace`), and the slack around them from
the fork server's pace, as in test_launch.py.
"""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from ckpt_harness.errors import ConfigError
from ckpt_harness.inject.collectives import Recording
from ckpt_harness.launch.elastic import STACK_GRACE, ScriptOutcome, ScriptSpec, run_elastic
from ckpt_harness.launch.group import STARTUP_TIMEOUT, LaunchError
from ckpt_harness.launch.outcome import Cut

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "scripts"


def script(name: str) -> str:
    return str(SCRIPTS / f"{name}.py")


def spec(tmp_path: Path, name: str, deadline: float, args: tuple[str, ...] = (), **kw) -> ScriptSpec:
    """`name` with the run directory as its first argument, so that every
    process of the run names it on its command line, then `args`."""
    return ScriptSpec(command=(script(name), str(tmp_path), *args), run_dir=tmp_path, deadline=deadline, **kw)


#: How DeepSpeed's launcher tells each worker its local rank, which a command under torchrun asks for.
LOCAL_RANK_ARG = ("--local_rank={local_rank}",)


@dataclasses.dataclass(frozen=True)
class PacedRun:
    """A fault-free two-worker torchrun run of ddp_train.py: how long it took
    here and now, and what it left (the layout test reads it too)."""

    seconds: float
    outcome: ScriptOutcome
    run_dir: Path


@pytest.fixture(scope="module")
def paced_run(tmp_path_factory) -> PacedRun:
    run_dir = tmp_path_factory.mktemp("script-pace")
    start = time.monotonic()
    outcome = run_elastic(spec(run_dir, "ddp_train", deadline=STARTUP_TIMEOUT, args=LOCAL_RANK_ARG, nproc_per_node=2))
    assert outcome.ok, "a fault-free script run failed while measuring the machine's pace"
    return PacedRun(time.monotonic() - start, outcome, run_dir)


@pytest.fixture(scope="module")
def script_pace(paced_run) -> float:
    """Seconds a fault-free two-worker torchrun run takes here and now."""
    return paced_run.seconds


def processes_naming(word: str) -> list[int]:
    """Live processes whose command line mentions `word` (zombies are gone)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(") ")[2][:1]
        except OSError:
            continue
        if word.encode() in cmdline and state != "Z" and int(pid) != os.getpid():
            found.append(int(pid))
    return found


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(") ")[2].split()[1])


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(") ")[2][:1] != "Z"
    except OSError:
        return False


def survivors(pids: list[int], within: float) -> list[int]:
    until = time.monotonic() + within
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < until:
        time.sleep(0.05)
    return left


@pytest.mark.parametrize("nnodes, nproc_per_node", [(1, 2), (2, 1)])
def test_a_ddp_script_runs_under_torchrun_as_torchrun_lays_it_out(tmp_path, paced_run, nnodes, nproc_per_node):
    run_dir = paced_run.run_dir if nnodes == 1 else tmp_path
    if nnodes == 1:  # the run that measured the pace is this one
        outcome = paced_run.outcome
    else:
        outcome = run_elastic(spec(run_dir, "ddp_train", deadline=STARTUP_TIMEOUT, args=LOCAL_RANK_ARG,
                                   nnodes=nnodes, nproc_per_node=nproc_per_node))
    assert outcome.ok and not outcome.timed_out and outcome.restarts == 0, outcome
    assert len(outcome.agent_logs) == nnodes
    assert (run_dir / "model.pt").stat().st_size > 0
    layout = {r: json.loads((run_dir / f"layout{r}.json").read_text()) for r in range(2)}
    # RANK: (LOCAL_RANK, GROUP_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE), as torchrun itself sets them
    expected = {0: ("0", "0", "2", "2"), 1: ("1", "0", "2", "2")} if nnodes == 1 else \
        {0: ("0", "0", "1", "2"), 1: ("0", "1", "1", "2")}
    assert {r: (v["LOCAL_RANK"], v["GROUP_RANK"], v["LOCAL_WORLD_SIZE"], v["WORLD_SIZE"])
            for r, v in layout.items()} == expected
    # {local_rank} in the command is each worker's own, as DeepSpeed's launcher passes --local_rank=N
    assert {r: v["local_rank_arg"] for r, v in layout.items()} == {r: int(e[0]) for r, e in expected.items()}
    # the script sees what `python train.py` would show it
    assert {(v["argv0"], v["path0"]) for v in layout.values()} == {(script("ddp_train"), str(SCRIPTS))}
    # collectives without a timeout of the script's own give up soon after the deadline, not in 30 minutes
    assert {v["pg_timeout"] for v in layout.values()} == {STARTUP_TIMEOUT + 30}
    assert [r.pid for r in outcome.ranks if alive(r.pid)] == []
    assert processes_naming(str(run_dir)) == []
    # torchrun's own files (its workers' error files) are the run's: none is left in the temporary directory
    assert sorted(p.name for p in run_dir.glob("torchelastic*")) == [f"torchelastic{n}" for n in range(nnodes)]
    assert list(Path(tempfile.gettempdir()).glob("torchelastic_*")) == []


def test_a_skipped_barrier_is_a_hang_with_every_worker_stack(tmp_path, script_pace, pace):
    # The barrier comes right after init_process_group: well within a whole fault-free run (which
    # also trains, saves and exits), measured here just before; a quarter more for load swings.
    deadline = 1.25 * script_pace
    start = time.monotonic()
    outcome = run_elastic(spec(tmp_path, "skip_barrier", deadline=deadline, nproc_per_node=2))
    elapsed = time.monotonic() - start
    assert outcome.timed_out and not outcome.stuck_after_failure
    assert elapsed < deadline + STACK_GRACE + pace(2.0), (elapsed, deadline, pace)
    waiting, skipping = outcome.ranks
    assert waiting.status == "hung" and skipping.status == "hung"
    assert 'skip_barrier.py", line 17 in <module>' in waiting.stack and "in barrier" in waiting.stack
    assert 'skip_barrier.py", line 18 in <module>' in skipping.stack and "in all_reduce" in skipping.stack
    blocked = {r.rank: Recording.parse(r.collectives).blocked.op for r in outcome.ranks}
    assert blocked == {0: "barrier", 1: "all_reduce"}, blocked
    assert processes_naming(str(tmp_path)) == []


def test_a_peer_the_agent_stops_after_a_failure_ended_with_the_failure(tmp_path, script_pace):
    """torchrun SIGTERMs a failed worker's peers at once: the failure reached
    them through the launcher, no hang (a Job's peers get the failure grace
    to fail by themselves instead). Its stack says where it was. The worker
    that raised fails with its traceback."""
    outcome = run_elastic(spec(tmp_path, "busy_peer", deadline=10 * script_pace, nproc_per_node=2))
    stopped, raised = outcome.ranks
    assert raised.status == "failed" and raised.exit_code == 1 and not raised.ended_by_launcher
    assert "RuntimeError: planted failure on rank 1" in raised.log_text()
    assert stopped.status == "failed" and stopped.ended_by_launcher, stopped
    assert not outcome.stuck_after_failure and not outcome.timed_out
    assert 'busy_peer.py", line 11 in <module>' in stopped.stack
    assert outcome.elapsed < 3 * script_pace, (outcome.elapsed, script_pace)


def test_a_stuck_peer_on_another_node_is_cut_after_the_failure_grace(tmp_path, script_pace):
    """With no restarts left the failed node's agent exits; the other node's
    worker would wait for it until its collective timeout: cut after the
    failure grace, hung where it was. Unless the exiting agent hosted the
    rendezvous store: then the other agent loses it and stops its worker,
    and torchrun itself propagated the failure (as on one node)."""
    outcome = run_elastic(spec(tmp_path, "busy_peer", deadline=10 * script_pace, nnodes=2, failure_grace=1.0))
    stuck, raised = outcome.ranks
    assert raised.status == "failed" and not raised.ended_by_launcher, outcome
    if stuck.ended_by_launcher:
        assert stuck.status == "failed" and not outcome.stuck_after_failure, outcome
    else:
        assert stuck.status == "hung" and outcome.stuck_after_failure, outcome
    assert 'busy_peer.py", line 11 in <module>' in stuck.stack
    assert outcome.elapsed < 3 * script_pace, (outcome.elapsed, script_pace)
    assert processes_naming(str(tmp_path)) == []


def test_a_blocked_worker_left_alone_with_a_failed_peer_ends_the_run_at_once(tmp_path, script_pace):
    """Rank 0 blocked for good, rank 1 raised on the other node: no worker is
    left to do anything, and the run ends at once with the cut it would have
    had (the failure grace), as it was (test_early_end.py has the same rule
    in Job mode, and a run it must leave to its cut). Unless the exiting
    agent hosted the store: then torchrun stops the blocked worker itself,
    as in the test above."""
    grace = 3 * script_pace
    outcome = run_elastic(spec(tmp_path, "blocked_peer", deadline=30 * script_pace, nnodes=2, failure_grace=grace))
    blocked, raised = outcome.ranks
    assert raised.status == "failed" and "planted failure on rank 1" in raised.log_text(), outcome
    if not blocked.ended_by_launcher:
        assert blocked.status == "hung" and 'blocked_peer.py", line 15 in <module>' in blocked.stack, outcome
        assert outcome.cut is Cut.FAILURE and outcome.ended_early, outcome
        # Decided at once; tearing down an agent that lost the store it dialled is torchrun's own time
        # (20 s against a 16.5 s grace once in a clean-clone CI, decided early all the same).
        decided = outcome.decided_at - outcome.requested_at
        assert decided < grace, (decided, outcome.elapsed, grace)
    else:  # torchrun ended it; its agent, which lost the store, exits in its own time, within the grace
        assert outcome.elapsed < grace + script_pace, (outcome.elapsed, grace)


@pytest.mark.parametrize("nnodes, max_restarts", [(1, 0), (2, 1)])
def test_torchrun_restarts_the_group_after_a_crash(tmp_path, nnodes, max_restarts):
    """Across nodes the restart is counted by the agent that saw the failure
    only: the other node's workers restart with TORCHELASTIC_RESTART_COUNT 0
    (so both ways of counting are read here; one node restarts alike)."""
    outcome = run_elastic(spec(tmp_path, "crash_once", deadline=STARTUP_TIMEOUT, nnodes=nnodes,
                               nproc_per_node=2 // nnodes, max_restarts=max_restarts))
    if max_restarts:
        assert outcome.ok and outcome.restarts == 1, outcome
        assert all((tmp_path / f"finished{r}").exists() for r in range(2))
    else:  # the crash is the outcome: its signal, from the agent's own account
        crashed = outcome.ranks[1]
        assert crashed.status == "crashed" and crashed.signal == signal.SIGKILL, crashed
        assert outcome.restarts == 0 and not (tmp_path / "finished0").exists()
    assert processes_naming(str(tmp_path)) == []


# As in test_launch.py: Ctrl-C raises KeyboardInterrupt even when the suite
# was started with SIGINT ignored.
HARNESS = textwrap.dedent(
    """
    import signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from ckpt_harness.launch.elastic import ScriptSpec, run_elastic
    run_elastic(ScriptSpec(command=(sys.argv[1], sys.argv[2]), run_dir=sys.argv[2], deadline=600, nnodes=2))
    """
)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_no_agent_or_worker_outlives_its_harness(tmp_path, how):
    """SIGKILL runs no cleanup: the parent-death signals do it (harness ->
    agent server -> agents -> workers). Ctrl-C tears down, the workers' children too.
    Neither leaves the agent server's log in the temporary directory.

    Going may take as long as starting took, twice over (fresh interpreters
    importing torch against processes ending); load slows both alike.
    """
    start = time.monotonic()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, script("sleep_forever"), str(tmp_path)],
                               env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp)})
    try:
        # `write_text` creates the file before it writes the pid: a loaded box shows the file empty in between
        while not all((tmp_path / f"started{r}").exists() and (tmp_path / f"started{r}").read_text()
                      for r in range(2)):
            assert time.monotonic() < start + STARTUP_TIMEOUT, "workers never started"
            assert harness.poll() is None, "harness died early"
            time.sleep(0.05)
        budget = 2 * (time.monotonic() - start)
        workers = [int((tmp_path / f"started{r}").read_text()) for r in range(2)]
        agents = sorted({parent(w) for w in workers})  # forks of the harness's agent server
        assert len(agents) == 2, agents
        (server,) = {parent(a) for a in agents}
        assert parent(server) == harness.pid
        harness.send_signal(how)
        assert survivors([harness.pid], within=budget) == [], f"harness still running {budget:.1f} s after {how!r}"
        assert survivors([server, *agents, *workers], within=budget) == []
        assert processes_naming(str(tmp_path)) == []
        assert not list(tmp.glob("ckpt-harness-agents-*")), "the agent server's log was left behind"
        if how == signal.SIGINT:
            # A SIGKILLed harness cannot reach the workers' own children: they
            # die with their worker only if they ask for it (as in Job mode).
            children = [int((tmp_path / f"child{r}").read_text()) for r in range(2)]
            assert survivors(children, within=budget) == []
    finally:
        harness.kill()
        harness.wait()
        # The workers' children a SIGKILLed harness could not reach (still the
        # scripts' `sleep 1000`, not a stranger that inherited the pid).
        children = [int(p.read_text()) for p in tmp_path.glob("child*")]
        for pid in [*processes_naming(str(tmp_path)), *filter(is_our_sleeper, children)]:
            os.kill(pid, signal.SIGKILL)


def is_our_sleeper(pid: int) -> bool:
    try:
        return alive(pid) and Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x001000\x00"
    except OSError:
        return False


def test_a_missing_script_is_refused_with_what_to_give(tmp_path):
    with pytest.raises(ConfigError, match="no script at"):
        ScriptSpec(command=(str(tmp_path / "nope.py"),), run_dir=tmp_path, deadline=10)
    with pytest.raises(ConfigError, match="world_size must be between 1 and 8"):
        ScriptSpec(command=(script("ddp_train"),), run_dir=tmp_path, deadline=10, nnodes=3, nproc_per_node=3)


def test_agents_that_start_no_worker_are_a_launch_error_not_a_crash(tmp_path):
    """A broken Python under the agents is the harness's setup, not the script's fault."""
    broken = spec(tmp_path, "ddp_train", deadline=STARTUP_TIMEOUT, env={"PYTHONHOME": str(tmp_path / "nowhere")})
    with pytest.raises(LaunchError, match="torchrun started no worker before the agents ended"):
        run_elastic(broken)
    assert processes_naming(str(tmp_path)) == []
