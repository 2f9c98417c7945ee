"""Probe overhead of two source trees, measured in one run.

    python ci/bench_probes.py [--before REV] [--after REV] [--repeat N]
    python ci/benchmark.py probes [--before REV]

The file probes change what a save costs in two ways: each probed operation
is recorded, and in a rank that logs its bytes (a faulted or power-loss run)
the probes decide how the job's writes reach the kernel. Comparing a probe
rewrite against the tree before it is only fair on the same machine under the
same load, so `REV` is exported with `git archive` and each repetition runs
the before tree and then the working tree (A B A B ...), each in its own
interpreter with only its own tree on `PYTHONPATH`: both go through the
harness code of their own tree (launcher, probes, trace), nothing is shared.

Per tree, mode and workload: wall time per save (medians over repetitions),
and the trace a save leaves on rank 0 (events, `write` events, bytes), since
buffering decides how many writes the trace sees. From e824b3a on, `write`
is a write that reached the kernel and the job's own write() calls are
`buffered-write` events, counted among the events only. The modes are what a rank
runs under: no probes, probes as in a golden run (trace only) and probes as
in a faulted run (`data_log`, every byte logged for the durability model).
The workloads are plain `dcp.save` of the built-in `dcp` job's state (torch's
code in both trees, so a job change cannot pass for a probe change) and two
single-file writers where buffering matters: `torch.save` of many small
tensors to `open(path, "wb")` and `json.dump` of a few-KB dict.

With `--before HEAD` on a clean tree both sides run the same code, and the
after/before ratios show the noise of the method (about 1). Wall time is what
a user waits, but other processes on the box stretch it; CPU time (user+sys
of the measuring ranks) holds within a few percent even at a load of 10 on 2
cores, so compare CPU when the box is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
#: main before issue 13 (probes that make exact-mode files unbuffered).
DEFAULT_BEFORE = "de96d55"
MODES = ("none", "trace", "exact")
#: name -> (saves timed per run, description)
WORKLOADS = {
    "dcp": (20, "dcp.save of the dcp job's state, ws=2"),
    "torch_save": (8, "torch.save, 2000 small tensors, open(p, 'wb')"),
    "json": (50, "json.dump of a ~6 KB dict to a text file"),
}
WORLD_SIZE = 2
#: Seconds one measurement (one tree, one mode) may take before the worker is
#: taken for stuck; it takes about 3 s on 2 busy cores.
STEP_TIMEOUT = 180


# -- in a rank -----------------------------------------------------------------------
def probed_saves(info, payload):
    """Time every workload in this rank under one probe mode.

    Each mode needs its own process: probes install once and stay. The
    first save of each workload is not timed (imports, first-call costs).
    Single-file workloads run on rank 0 alone, so the two ranks do not
    compete for the two cores the benchmark is meant to run on.
    """
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from ckpt_harness.inject import probes
    from ckpt_harness.job import RankContext
    from ckpt_harness.jobs.dcp import DcpJob

    run_dir = Path(info.run_dir)
    ckpt = run_dir / "ckpt"
    trace = run_dir / f"rank{info.rank}.trace"
    mode = payload["mode"]
    if mode != "none":
        data_log = str(run_dir / f"rank{info.rank}.data") if mode == "exact" else None
        probes.install(str(trace), info.rank, ckpt_dir=str(ckpt), data_log=data_log)
    ctx = RankContext(rank=info.rank, world_size=info.world_size, local_rank=info.rank, node=0, seed=0,
                      ckpt_dir=ckpt, total_steps=10, save_every=1, overwrite=True)
    job = DcpJob()
    job.setup(ctx)
    job.train_step(ctx, 1)
    ckpt.mkdir(parents=True, exist_ok=True)

    def dcp_save(i: int) -> None:
        model_sd, optim_sd = get_state_dict(job.model, job.optimizer)
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=ckpt / f"dcp-{i}")

    small = {f"layer{i}.weight": torch.randn(100) for i in range(2000)}

    def torch_save(i: int) -> None:
        with open(ckpt / f"small-{i}.pt", "wb") as f:
            torch.save(small, f)

    doc = {f"key{i}": {"step": i, "lr": 1e-3 * i, "tags": ["a", "b"], "ok": True} for i in range(100)}

    def json_dump(i: int) -> None:
        with open(ckpt / f"meta-{i}.json", "w") as f:
            json.dump(doc, f)

    savers = {"dcp": dcp_save, "torch_save": torch_save, "json": json_dump}
    results = {"probes_module": probes.__file__}
    for name, (count, _) in WORKLOADS.items():
        if name != "dcp" and info.rank != 0:
            continue
        save = savers[name]
        save(0)
        probes.set_phase(f"bench-{name}")  # flushes a pending run of writes into the trace
        before = _trace_stats(trace)
        wall, cpu = [], []
        for i in range(1, count + 1):
            start, start_cpu = time.perf_counter(), time.process_time()
            save(i)
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        probes.set_phase(f"bench-{name}-done")
        after = _trace_stats(trace)
        results[name] = {"wall": wall, "cpu": cpu, **{k: (after[k] - before[k]) / count for k in after}}
    dist.barrier()
    (run_dir / f"result{info.rank}.json").write_text(json.dumps(results))


def _trace_stats(trace: Path) -> dict[str, float]:
    """Events, write events and bytes in the trace so far. The `phase` event
    that ends a workload is counted in it, as a harness phase would be."""
    if not trace.exists():
        return {"events": 0, "writes": 0, "bytes": 0}
    data = trace.read_bytes()
    lines = data.splitlines()
    writes = sum(1 for line in lines if b'"kind": "write"' in line)
    return {"events": len(lines), "writes": writes, "bytes": len(data)}


# -- in a worker: one tree, one warm fork server, a mode per request -------------------
def worker() -> None:
    """Serve `{"mode", "run_dir"}` lines on stdin: run that mode's group and
    answer with its measurements, one JSON line on stdout."""
    import ckpt_harness
    from ckpt_harness.launch import GroupSpec, prestart, run_group

    prestart(1, wait=True)
    print(json.dumps({"harness": ckpt_harness.__file__}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        run_dir = Path(request["run_dir"])
        outcome = run_group(GroupSpec(world_size=WORLD_SIZE, entry="bench_probes:probed_saves",
                                      payload={"mode": request["mode"]}, run_dir=run_dir, deadline=STEP_TIMEOUT))
        if not outcome.ok:
            sys.exit(f"the {request['mode']} run failed:\n" + "\n".join(r.log_tail() for r in outcome.ranks))
        ranks = [json.loads((run_dir / f"result{r}.json").read_text()) for r in range(WORLD_SIZE)]
        measured = ranks[0]
        # A collective save takes as long as its slowest rank, and costs the CPU of both.
        measured["dcp"]["wall"] = [max(s) for s in zip(*(r["dcp"]["wall"] for r in ranks))]
        measured["dcp"]["cpu"] = [sum(s) for s in zip(*(r["dcp"]["cpu"] for r in ranks))]
        shutil.rmtree(run_dir, ignore_errors=True)
        print(json.dumps(measured), flush=True)


# -- in the parent ---------------------------------------------------------------------
def export(rev: str, into: Path) -> str:
    """Extract `rev` of this repository into `into`; its short hash."""
    try:
        short = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", f"{rev}^{{commit}}"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except subprocess.CalledProcessError:
        sys.exit(f"{rev!r} is not a commit of {ROOT}; pass a revision `git rev-parse` knows")
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", short], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        sys.exit(f"git archive {short} failed")
    return short


class Worker:
    """A measuring interpreter with only `tree` on PYTHONPATH, kept warm
    across repetitions so that interleaving costs no start-ups. It runs in
    `scratch`, outside any checkout: the fork server starts with
    `python -m`, which puts its working directory first on sys.path."""

    def __init__(self, tree: Path, scratch: Path):
        self.tree, self.scratch = tree, scratch
        self.log = scratch / "worker.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker"], cwd=scratch,
                                         env={**os.environ, "PYTHONPATH": str(tree)},
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
        self.runs = 0

    def answer(self) -> dict:
        ready, _, _ = select.select([self.proc.stdout], [], [], STEP_TIMEOUT)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            sys.exit(f"the benchmark worker on {self.tree} failed or hung "
                     f"(exit {self.proc.returncode}):\n{self.log.read_text()[-4000:]}")
        return json.loads(line)

    def check_tree(self, module: str) -> None:
        if not Path(module).resolve().is_relative_to(self.tree.resolve()):
            self.close()
            sys.exit(f"the worker on {self.tree} imported {module}: "
                     "another ckpt_harness shadows PYTHONPATH (run from outside any checkout)")

    def measure(self, mode: str) -> dict:
        self.runs += 1
        self.proc.stdin.write(json.dumps({"mode": mode, "run_dir": str(self.scratch / f"run-{self.runs}")}) + "\n")
        self.proc.stdin.flush()
        measured = self.answer()
        self.check_tree(measured["probes_module"])  # what the ranks ran, not only the worker
        return measured

    def close(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def compare(before: str = DEFAULT_BEFORE, repeat: int = 5, after: Optional[str] = None) -> None:
    """`after` None: the working tree, uncommitted changes included."""
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-harness-bench-trees-"))
    try:
        _compare(before, after, repeat, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _compare(before: str, after: Optional[str], repeat: int, tmp: Path) -> None:
    (tmp / "before").mkdir()
    short = export(before, tmp / "before")
    if after is None:
        trees = {"before": tmp / "before", "after": ROOT}
        head = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                              capture_output=True, text=True).stdout.strip()
        label = f"working tree {head}"
    else:
        (tmp / "after").mkdir()
        trees = {"before": tmp / "before", "after": tmp / "after"}
        label = f"{export(after, tmp / 'after')} (git archive)"
    print(f"   before = {short} (git archive), after = {label}; {repeat} repetitions, "
          f"each mode on both trees back to back (ABBA order); medians of every save", flush=True)
    start = time.perf_counter()
    workers = {}
    try:
        for side, tree in trees.items():
            (tmp / side / ".bench").mkdir(parents=True, exist_ok=True)
            workers[side] = Worker(tree, tmp / side / ".bench")
        for w in workers.values():
            w.check_tree(w.answer()["harness"])
        runs: dict[tuple[str, str], list[dict]] = {(side, mode): [] for side in trees for mode in MODES}
        for i in range(repeat):
            # Rotating the mode order and alternating which tree goes first
            # spread warm-up and drift over every cell alike.
            for j, mode in enumerate(MODES[i % 3:] + MODES[:i % 3]):
                for side in (("before", "after") if (i + j) % 2 == 0 else ("after", "before")):
                    runs[side, mode].append(workers[side].measure(mode))
    finally:
        for w in workers.values():
            w.close()
    print(f"   ({time.perf_counter() - start:.0f} s; load average now {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores: if the box is shared, trust the CPU table over the wall table)")
    _print(runs, trees)


def _print(runs: dict[tuple[str, str], list[dict]], trees: dict) -> None:
    def per_save(side: str, mode: str, workload: str, key: str) -> float:
        return statistics.median(run[workload][key] for run in runs[side, mode])

    for clock, title in (("wall", "wall ms per save"),
                         ("cpu", "CPU ms per save (user+sys; dcp: both ranks)")):
        def ms(side: str, mode: str, workload: str) -> float:
            return 1000 * statistics.median(s for run in runs[side, mode] for s in run[workload][clock])

        print(f"\n   {title:<48}{'before':>8}{'after':>8}{'after/before':>14}"
              f"{'cost of the probes: before':>28}{'after':>8}")
        for workload, (_, description) in WORKLOADS.items():
            print(f"   {description}")
            for mode in MODES:
                t = {side: ms(side, mode, workload) for side in trees}
                line = f"     {mode:<46}{t['before']:>8.1f}{t['after']:>8.1f}{t['after'] / t['before']:>14.2f}"
                if mode != "none":
                    cost = {side: t[side] / ms(side, "none", workload) - 1 for side in trees}
                    line += f"{cost['before']:>+28.0%}{cost['after']:>+8.0%}"
                print(line)

    print(f"\n   {'trace per save, rank 0 (before / after)':<48}{'events':>16}{'writes':>16}{'KB':>18}")
    for workload, (_, description) in WORKLOADS.items():
        print(f"   {description}")
        for mode in MODES[1:]:
            cells = [f"{per_save('before', mode, workload, k):.0f} / {per_save('after', mode, workload, k):.0f}"
                     for k in ("events", "writes")]
            kb = [per_save(side, mode, workload, "bytes") / 1024 for side in trees]
            print(f"     {mode:<46}{cells[0]:>16}{cells[1]:>16}{f'{kb[0]:.1f} / {kb[1]:.1f}':>18}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=DEFAULT_BEFORE,
                        help=f"revision to compare the working tree with (default {DEFAULT_BEFORE})")
    parser.add_argument("--after", help="revision to measure instead of the working tree")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions per tree and mode (default 5)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
    else:
        compare(args.before, args.repeat, args.after)


if __name__ == "__main__":
    main()
