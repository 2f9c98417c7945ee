"""The names of the files in a run directory: the only module that spells them.

A run directory is written and read by processes that share no memory and
mostly no code path: the launcher (fork server or torchrun agents), each
rank or worker, the processes a rank spawns to save, and the harness that
reads it all back once they are gone. Each finds the others' files by name
alone, so a name spelled in two places is a name that can drift apart
silently: the reader then finds nothing and reports a clean run.

It lives in `launch/`, the lowest layer that writes there, so the launcher
needs nothing above it; `records` and the rank side import it from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional, Union

PathLike = Union[Path, str]


# -- what a rank writes itself ------------------------------------------------------------
def records_path(run_dir: PathLike, rank: int) -> Path:
    return Path(run_dir) / f"rank{rank}.records"


def trace_path(run_dir: PathLike, rank: int, actor: str = "") -> Path:
    """A rank's trace; with `actor`, the trace of a process the rank spawned
    to save (`probes.Child`: "ckpt", DCP's checkpoint process)."""
    return Path(run_dir) / (f"rank{rank}.{actor}.trace" if actor else f"rank{rank}.trace")


def child_trace_paths(run_dir: PathLike, rank: int) -> list[Path]:
    """The traces of the processes `rank` spawned to save (`trace_path` with an actor)."""
    return sorted(Path(run_dir).glob(f"rank{rank}.*.trace"))


def data_path(run_dir: PathLike, rank: int, actor: str = "") -> Path:
    """Every byte a rank (or its process `actor`) wrote under the checkpoint
    dir, when the power-loss model needs them."""
    return Path(run_dir) / (f"rank{rank}.{actor}.data" if actor else f"rank{rank}.data")


def beacon_path(run_dir: PathLike, rank: int) -> Path:
    """The slot a rank keeps of the collective it waits in (`launch.beacon`)."""
    return Path(run_dir) / f"rank{rank}.beacon"


def warm_path(run_dir: PathLike, rank: int) -> Path:
    """Made by a process `rank` spawned that started from its template (`launch.warm`), not fresh."""
    return Path(run_dir) / f"rank{rank}.warm-started"


def mp_tempdir_path(run_dir: PathLike, rank: int) -> Path:
    """Holds the path of the temporary directory multiprocessing made for `rank` (`rank.own_mp_tempdir`),
    which the launcher removes once the group is torn down (`group`)."""
    return Path(run_dir) / f"rank{rank}.mp-tempdir"


def crash_marker(run_dir: PathLike) -> Path:
    """Made by the rank a `ScriptPlan.crash` run killed, just before it died."""
    return Path(run_dir) / "crashed-after-save"


# -- what the launcher sets up for a rank -------------------------------------------------
def log_path(run_dir: PathLike, rank: int) -> Path:
    """A rank's stdout and stderr, and its stacks when a Job rank is asked for them."""
    return Path(run_dir) / f"rank{rank}.log"


def stack_path(run_dir: PathLike, rank: int) -> Path:
    """A torchrun worker's stacks (a Job rank writes its own into its log)."""
    return Path(run_dir) / f"rank{rank}.stack"


def flight_path(run_dir: PathLike, rank: int) -> Path:
    """The flight recorder's dump (`flight.serve`)."""
    return Path(run_dir) / f"rank{rank}.collectives"


def ask_path(run_dir: PathLike, rank: int) -> Path:
    """The pipe on which the watch asks a rank what its process groups wait in (`launch.looks`)."""
    return Path(run_dir) / f"rank{rank}.ask"


def look_path(run_dir: PathLike, rank: int) -> Path:
    """A rank's answer on `ask_path` (`launch.looks`)."""
    return Path(run_dir) / f"rank{rank}.look"


def cut_path(run_dir: PathLike) -> Path:
    """How the launcher's watch found each rank when it cut the run (`looks.write_cut`)."""
    return Path(run_dir) / "cut.json"


def warm_twin(run_dir: PathLike) -> Optional[Path]:
    """The run a run with cold starts confirms: a case that did not pass with
    warm starts runs again under `<root>/cold`, in the place it had under
    `<root>` (`pipeline.confirm`); None for a run not under a `cold` directory."""
    parts = Path(run_dir).parts
    if "cold" not in parts:
        return None
    at = len(parts) - 1 - parts[::-1].index("cold")
    return Path(*parts[:at], *parts[at + 1:])


def store_path(run_dir: PathLike) -> Path:
    """The FileStore a fork-server group rendezvouses through."""
    return Path(run_dir) / "store"


def helper_paths(run_dir: PathLike, rank: int, name: str) -> tuple[Path, Path]:
    """Where a child of `rank` named `name` leaves its pid and its stack (`link.join_rank`)."""
    word = name.replace(" ", "-")
    return Path(run_dir, f"rank{rank}.{word}.pid"), Path(run_dir, f"rank{rank}.{word}.stack")


def helper_pid_paths(run_dir: PathLike, rank: int) -> list[Path]:
    """The pid files of every child that joined `rank` (`helper_paths`)."""
    return sorted(Path(run_dir).glob(f"rank{rank}.*.pid"))


# -- torchrun's share ----------------------------------------------------------------------
def workers_dir(run_dir: PathLike) -> Path:
    """Where every worker process's `WorkerRecord` goes, attempts side by side."""
    return Path(run_dir) / "workers"


def worker_record_path(run_dir: PathLike, pid: int) -> Path:
    return workers_dir(run_dir) / f"{pid}.json"


def worker_record_paths(run_dir: PathLike) -> Iterator[Path]:
    return workers_dir(run_dir).glob("*.json")


def elastic_log_dir(run_dir: PathLike, node: int) -> Path:
    """torchrun's `--log-dir` for the agent that is node `node`: its workers' error files."""
    return Path(run_dir) / f"torchelastic{node}"


def agent_log(run_dir: PathLike, node: int) -> Path:
    """The console of the torchrun agent that is node `node`."""
    return Path(run_dir) / f"agent{node}.log"
