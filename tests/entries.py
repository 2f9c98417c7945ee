"""Launcher entry points for the launcher's own tests (no Job involved)."""

import os
import signal
import subprocess
import time
from pathlib import Path

import torch
import torch.distributed as dist


def all_reduce(info, payload):
    t = torch.ones(1)
    dist.all_reduce(t)
    Path(info.run_dir, f"sum{info.rank}").write_text(str(int(t.item())))


def origin(info, payload):
    """Who forked this rank, and the command line it inherited."""
    cmdline = Path("/proc/self/cmdline").read_bytes().decode()
    Path(info.run_dir, f"origin{info.rank}").write_text(f"{os.getppid()}\n{cmdline}")


def origin_at_once(info, payload):
    """`origin`, then wait (up to 30 s) until every rank of the runs named in
    `payload` (run directories) wrote its own: the runs overlap for sure."""
    origin(info, payload)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(Path(run, f"origin{rank}").exists()
                                                  for run in payload for rank in range(info.world_size)):
        time.sleep(0.02)


def rank0_barrier(info, payload):
    if info.rank == 0:
        dist.barrier()


def ddp_backward_vs_barrier(info, payload):
    """Rank 0's gradient all-reduce is issued by DDP's C++ reducer inside
    backward; rank 1 sits in a barrier instead."""
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
    for _ in range(2):  # DDP rebuilds its buckets in the second forward (a broadcast)
        model(torch.ones(2, 4)).sum().backward()
    if info.rank == 0:
        model(torch.ones(2, 4)).sum().backward()
    else:
        dist.barrier()


def rank1_sigkill(info, payload):
    if info.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def rank1_raises(info, payload):
    if info.rank == 1:
        raise ValueError("planted failure on rank 1")
    dist.barrier()


def spawn_sleeper_and_hang(info, payload):
    child = subprocess.Popen(["sleep", "1000"])
    Path(info.run_dir, f"child{info.rank}").write_text(str(child.pid))
    time.sleep(1000)


def shares_a_descriptor(info, payload):
    """Share a descriptor as DCP's process executor hands its checkpoint process a save's tensors: outside
    a spawn, multiprocessing serves it from a listener in its temporary directory (`resource_sharer`),
    whose path is written to the run directory. Then end as `payload` says: "return", "crash" (SIGKILL)
    or "hang"."""
    import pickle
    from multiprocessing import reduction, util

    read, _ = os.pipe()
    pickle.dumps(reduction.DupFd(read))  # starts the listener
    listener = next(Path(util.get_temp_dir()).glob("listener-*"))
    Path(info.run_dir, f"mp-tempdir{info.rank}").write_text(str(listener.parent))
    if payload == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    if payload == "hang":
        time.sleep(1000)


def hang_forever(info, payload):
    Path(info.run_dir, f"started{info.rank}").write_text(str(os.getpid()))
    time.sleep(1000)


def file_ops_with_fault(info, payload):
    """Write, fsync, rename and save under a checkpoint dir with probes armed;
    report what each call returned or raised to `result.json`."""
    import errno
    import json

    from ckpt_harness.inject import probes

    ckpt = Path(payload["ckpt"])
    ckpt.mkdir(parents=True, exist_ok=True)
    probes.install(str(Path(info.run_dir, f"rank{info.rank}.trace")), info.rank, ckpt_dir=str(ckpt),
                   faults=tuple(payload["faults"]), data_log=str(Path(info.run_dir, f"rank{info.rank}.data")))
    probes.set_phase("save 1")
    result = {}
    try:
        os.makedirs(ckpt / "step", exist_ok=True)
        with open(ckpt / "step" / "blob.tmp", "wb") as f:
            result["written"] = f.write(b"x" * 1000)
            f.flush()
            os.fsync(f.fileno())
        os.replace(ckpt / "step" / "blob.tmp", ckpt / "step" / "blob")
        torch.save({"w": torch.ones(3)}, ckpt / "step" / "model.pt")  # a path: routed through open()
        with open(Path(info.run_dir) / "outside.txt", "w") as f:  # not under the checkpoint dir
            f.write("not traced")
    except OSError as exc:
        result["errno"] = errno.errorcode.get(exc.errno)
    result["finished"] = True
    Path(info.run_dir, "result.json").write_text(json.dumps(result))


def report_layout(info, payload):
    keys = ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
    Path(info.run_dir, f"layout{info.rank}").write_text(
        " ".join(os.environ[k] for k in keys) + f" {info.local_rank} {info.node}"
    )


def report_signals(info, payload):
    """What a rank does on SIGPIPE and SIGINT, and what a write to a closed pipe does."""
    import signal

    read, write = os.pipe()
    os.close(read)
    try:
        os.write(write, b"x")
        broken = "no error"
    except BrokenPipeError:
        broken = "BrokenPipeError"
    Path(info.run_dir, f"signals{info.rank}").write_text(
        f"{signal.getsignal(signal.SIGPIPE) is signal.SIG_IGN} "
        f"{signal.getsignal(signal.SIGINT) is signal.default_int_handler} {broken}"
    )


# -- probes keep the job's buffering (tests/test_probe_fidelity.py) ---------------------------
def _install_probes(info, payload):
    from ckpt_harness.inject import probes

    ckpt = Path(payload["ckpt"])
    ckpt.mkdir(parents=True, exist_ok=True)
    probes.install(str(Path(info.run_dir, f"rank{info.rank}.trace")), info.rank, ckpt_dir=str(ckpt),
                   faults=tuple(payload.get("faults", ())),
                   data_log=str(Path(info.run_dir, f"rank{info.rank}.data")))
    probes.set_phase("save 1")
    return ckpt


def _write_patterns(directory: Path) -> dict:
    """Each pattern's file size after every call: when the kernel got bytes."""
    import io

    def sizes(name, mode, calls, **kwargs):
        path = directory / name
        seen = []
        f = open(path, mode, **kwargs)
        kinds = [type(f).__mro__[i].__name__ for i in range(len(type(f).__mro__))]
        for call in calls:
            call(f)
            seen.append(os.stat(path).st_size)
        f.close()
        seen.append(os.stat(path).st_size)
        return {"sizes": seen, "name": type(f.name).__name__,
                "io": [k for k in kinds if k in ("BufferedWriter", "BufferedRandom", "TextIOWrapper", "FileIO")],
                "buffered": isinstance(f, (io.BufferedWriter, io.BufferedRandom, io.TextIOWrapper))}

    small = [lambda f: f.write(b"s" * 100)] * 50
    return {
        "default": sizes("default.bin", "wb", [*small, lambda f: f.write(b"L" * 10000), lambda f: f.write(b"t" * 10),
                                               lambda f: f.flush()]),
        "sized": sizes("sized.bin", "wb", [lambda f: f.write(b"a" * 10), lambda f: f.write(b"b" * 60),
                                           lambda f: f.write(b"c" * 100)], buffering=64),
        "unbuffered": sizes("raw.bin", "wb", [lambda f: f.write(b"r" * 10)] * 3, buffering=0),
        "text": sizes("text.txt", "w", [lambda f: f.write("x" * 3000), lambda f: f.write("y" * 9000),
                                        lambda f: f.write("z\n")]),
        "lines": sizes("lines.txt", "w", [lambda f: f.write("one"), lambda f: f.write(" line\n")], buffering=1),
        "random": sizes("random.bin", "w+b", [lambda f: f.write(b"q" * 100), lambda f: f.seek(0),
                                              lambda f: f.read(10), lambda f: f.write(b"Q" * 10)]),
    }


def buffering_as_unprobed(info, payload):
    """The same writes outside the checkpoint dir (unprobed) and under it."""
    import json

    ckpt = _install_probes(info, payload)
    outside = Path(info.run_dir, "outside")
    outside.mkdir()
    result = {"unprobed": _write_patterns(outside), "probed": _write_patterns(ckpt)}
    Path(info.run_dir, "result.json").write_text(json.dumps(result))


def fsync_before_flush(info, payload):
    """DCP's metadata commit: pickle into a buffered file, fsync, close,
    rename, fsync the directory; `flush` adds the flush it lacks, `reopen`
    an fsync of the renamed file through a read-only descriptor."""
    import pickle

    ckpt = _install_probes(info, payload)
    with open(ckpt / "meta.tmp", "wb") as f:
        pickle.dump({"shards": list(range(100))}, f)
        if payload.get("flush"):
            f.flush()
        os.fsync(f.fileno())
    os.rename(ckpt / "meta.tmp", ckpt / "meta")
    if payload.get("reopen"):  # vouch for the file after the fact, through a descriptor opened to read
        with open(ckpt / "meta", "rb") as f:
            os.fsync(f.fileno())
    fd = os.open(ckpt, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def raw_descriptor_writes(info, payload):
    """`os.open`/`os.write`/`os.pwrite` on a descriptor, as native-minded savers write."""
    ckpt = _install_probes(info, payload)
    fd = os.open(ckpt / "raw.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"a" * 1000)
    os.pwrite(fd, b"b" * 10, 2000)
    os.fsync(fd)
    os.close(fd)


def native_savers(info, payload):
    """torch.save and safetensors' save_file to a path, outside the checkpoint dir and under it."""
    ckpt = _install_probes(info, payload)
    outside = Path(info.run_dir, "outside")
    outside.mkdir()
    torch.manual_seed(0)
    state = {"big": torch.randn(64, 64), "small": torch.arange(10), "empty": torch.zeros(0)}
    for directory in (outside, ckpt):
        torch.save(state, directory / "model.pt")
    with open(outside / "through-python.pt", "wb") as f:
        torch.save(state, f)
    try:
        from safetensors.torch import save_file
    except ImportError:
        return
    for directory in (outside, ckpt):
        save_file(state, directory / "model.safetensors", metadata={"step": "1"})


#: Seconds rank 0 runs before it blocks: longer than the blocked grace the test gives.
RUN_UP = 3.0


def blocks_after_a_run_up(info, payload):
    """Rank 0 reports itself blocked for good after `RUN_UP` seconds, itself
    (payload "rank") or from a process it spawned (payload "child", as DCP's
    checkpoint process); rank 1 waits in a barrier for it."""
    from ckpt_harness.launch import link, rank

    if info.rank == 1:
        dist.barrier()
        return
    time.sleep(RUN_UP)
    if payload == "rank":
        rank.report_blocked()
        time.sleep(1000)
    import multiprocessing

    child = multiprocessing.get_context("spawn").Process(target=_blocked_child, args=(link.link_for_child(),))
    child.start()
    child.join()


def _blocked_child(to_rank):
    from ckpt_harness.launch import link, rank

    link.join_rank(to_rank, "blocked child")
    rank.report_blocked()
    time.sleep(1000)


# -- early end (`launch.beacon`): ranks with the collective probes installed --------------
def _probed(info):
    from ckpt_harness.inject import probes

    probes.install(str(Path(info.run_dir, f"rank{info.rank}.trace")), info.rank, thread_phases=True)


def peer_waits_for_a_parked_rank(info, payload):
    """Rank 1 raises, returns, blocks for good or sleeps for good without saying
    so (payload "raise", "return", "block", "sleep"); rank 0 then waits for it in a collective of the kind `payload`'s
    second word names: "barrier" (the default group), "subgroup" (a group of
    its own, which the beacon does not follow), "monitored" (a
    monitored_barrier that gives up after 2 s), "background" (a barrier while
    a thread it handed work to still runs), "monitored-background" (both)."""
    import datetime

    _probed(info)
    what, how = payload.split()
    subgroup = dist.new_group([0, 1]) if how == "subgroup" else None
    dist.barrier()  # both ranks up: rank 1's end comes after rank 0's probes see a collective
    if info.rank == 1:
        if what == "raise":
            raise ValueError("planted failure on rank 1")
        if what == "block":
            from ckpt_harness.launch import rank

            rank.report_blocked()
            time.sleep(1000)
        if what == "sleep":  # nothing tells the watch: a hang only its deadline ends
            time.sleep(1000)
        return
    time.sleep(0.3)  # rank 1 parks first: what the watch sees is rank 0 waiting
    if how.endswith("background"):
        from concurrent.futures import ThreadPoolExecutor

        ThreadPoolExecutor(1).submit(time.sleep, 1000)  # work handed over, still running (after a raise too)
    if how == "subgroup":
        dist.barrier(group=subgroup)
    elif how.startswith("monitored"):
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=2))
    else:
        dist.barrier()


def collectives_of_two_kinds(info, payload):
    """Each rank calls the collective `payload` names for it ("all_reduce
    barrier": rank 0 all_reduce, rank 1 barrier), after a barrier both
    join: "all_reduce barrier" never match (the seeds' final save, where
    rank 0 runs a collective its peer never joins); "all_gather_object
    all_gather2" match, partly (rank 1 runs the two all_gathers the object
    collective is made of); "all_reduce late-all_reduce" match, rank 1
    arriving 3 s later (slow, not stuck; a third word: that many seconds)."""
    _probed(info)
    dist.barrier()
    words = payload.split()
    op = words[info.rank]
    t = torch.ones(2)
    if op == "all_reduce":
        dist.all_reduce(t)
    elif op == "late-all_reduce":
        time.sleep(float(words[2]) if len(words) > 2 else 3.0)
        dist.all_reduce(t)
    elif op == "barrier":
        dist.barrier()
    elif op == "all_gather_object":
        out = [None, None]
        dist.all_gather_object(out, {"rank": info.rank})
    elif op == "all_gather2":  # what all_gather_object does, by hand (torch.distributed_c10d)
        import pickle

        data = torch.frombuffer(bytearray(pickle.dumps({"rank": info.rank})), dtype=torch.uint8)
        sizes = [torch.zeros(1, dtype=torch.long) for _ in range(2)]
        dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.long))
        largest = int(max(s.item() for s in sizes))
        padded = torch.zeros(largest, dtype=torch.uint8)
        padded[:data.numel()] = data
        dist.all_gather([torch.zeros(largest, dtype=torch.uint8) for _ in range(2)], padded)
