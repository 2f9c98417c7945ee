"""Where the seconds of the expensive rows go: DCP's checkpoint process, and a torchrun start.

    python ci/bench_async_process.py [SECTION ...] [--repeat N] [--before REV]

Run it from outside any checkout's root (a `ckpt_harness` in the current
directory would shadow the trees measured). Sections (all by default):

- ``child``: the fresh interpreters the harness starts, each import set in
  an interpreter of its own, CPU (user+sys) per interpreter: DCP's
  checkpoint process (DCP's own imports, then what the harness adds: the
  rank's `__main__`, re-imported there as `__mp_main__`, and the probes),
  torchrun's agent and a worker's bootstrap. The harness's parts are
  measured in two trees, `--before REV` (exported with `git archive`) and
  this one, interleaved (A B A B): their ratio is the change's.
- ``runs``: whole runs on the warm fork server, `dcp_async` (THREAD: the
  rank's own thread writes) and `dcp_async_process` (PROCESS: a checkpoint
  process per rank), from both trees, each in a measuring interpreter with
  its own fork server, interleaved: wall, CPU of the fork server's whole
  process tree, and the PROCESS run's timeline from its traces.
- ``warm``: DCP's real `_AsyncCheckpointProcess` in a one-rank world,
  started as DCP starts it (spawn: a fresh interpreter), the same with the
  harness's probes in it (as in a run: what the probes cost the process),
  and forked from a server that imported DCP's executor once
  (multiprocessing's forkserver, the server started once and timed apart):
  what a warm start would save. DCP asks `mp.get_context("spawn")` itself; here
  the benchmark swaps the `mp` DCP's module holds, which the harness does
  not do (docs/speed.md, "The expensive rows").
- ``script``: a bare ``torchrun --nproc-per-node 2`` of a minimal script
  (gloo group, one barrier) next to the harness's launch of the same
  script (`run_elastic`, no plan) from both trees, interleaved, twice in
  each harness ("first": it starts its agent server too; "next": the
  server is warm): until each worker's script starts (its CPU then:
  interpreter and bootstrap), until its group is up, until the command
  returned.

Every line says the load average when it was measured; compare the ratios
of sides measured in the same section, not seconds across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("child", "runs", "warm", "script")
WORLD = 2


def load() -> str:
    return "load {:.1f}".format(os.getloadavg()[0])


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def base_rev() -> str:
    """Where this branch left main: the tree before its changes."""
    out = subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], capture_output=True, text=True)
    return out.stdout.strip() or "HEAD"


def export(rev: str, into: Path) -> Path:
    """`rev`'s ckpt_harness package in `into` (git archive); returns `into`."""
    into.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", rev, "ckpt_harness"], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        sys.exit(f"git archive {rev} failed")
    return into


def compiled(tree: Path, into: Path) -> Path:
    """A copy of `tree`'s package with its bytecode written (`compileall`): what a fresh
    interpreter reads instead of compiling the harness's modules, which it does in every
    start when PYTHONDONTWRITEBYTECODE is set (it is on the project's 2-core box) and no
    `__pycache__` is there (an editable install writes none)."""
    import compileall
    import shutil

    shutil.copytree(tree / "ckpt_harness", into / "ckpt_harness", ignore=shutil.ignore_patterns("__pycache__"))
    compileall.compile_dir(str(into / "ckpt_harness"), quiet=1)
    return into


def fresh(code: str, tree: Optional[Path], cwd: Path) -> tuple[float, float, dict]:
    """Run `code` in a fresh interpreter with only `tree` on PYTHONPATH: its
    wall and CPU seconds (interpreter start to exit) and what it printed last (JSON)."""
    env = {**os.environ, "PYTHONPATH": str(tree) if tree else ""}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=cwd, env=env, stdout=subprocess.PIPE)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"failed ({proc.returncode}): {code}")
    lines = out.decode().strip().splitlines()
    return wall, usage.ru_utime + usage.ru_stime, json.loads(lines[-1]) if lines else {}


# -- child: the fresh interpreters -----------------------------------------------------
#: Prints the CPU seconds of each step, in the order the harness's checkpoint process takes them:
#: spawn re-imports the rank's `__main__` (the zygote), then unpickling its target imports
#: the harness's `dcp_process`, which imports torch and DCP's executor, then the probes install.
CHECKPOINT_PROCESS = """
import json, time
cpu = {}
t = time.process_time()
def step(name):
    global t
    now = time.process_time(); cpu[name] = now - t; t = now
import ckpt_harness.launch.zygote
step("main module")
import torch.distributed.checkpoint._async_process_executor
step("dcp")
from ckpt_harness.inject import dcp_process, probes
probes.install("%(scratch)s/trace", 0, ckpt_dir="%(scratch)s/ckpt")
step("probes")
print(json.dumps(cpu), flush=True)
import os
os._exit(0)  # as the harness's checkpoint process leaves (`dcp_process._subprocess`): no finalization
"""
#: DCP's own checkpoint process: its executor's imports; it leaves through `sys.exit` (spawn_main's).
DCP_ONLY = "import torch.distributed.checkpoint._async_process_executor"
#: multiprocessing's resource tracker, which a rank's first spawn starts (another fresh interpreter).
TRACKER = "import multiprocessing.resource_tracker"
BOOTSTRAPS = {
    "agent": "import ckpt_harness.launch.agent",
    "worker": "import ckpt_harness.launch.worker",
    "armed worker": "import ckpt_harness.launch.worker, ckpt_harness.rankside.script",
}
TIMED = "import json, time\nt = time.process_time()\n%s\nprint(json.dumps({'cpu': time.process_time() - t}))"


def child(repeat: int, trees: dict[str, Path], scratch: Path) -> None:
    print(f"== child: fresh interpreters, CPU s (user+sys), medians of {repeat}; {load()}")
    rows: dict[tuple[str, str], list[Any]] = {}
    (scratch / "ckpt").mkdir(exist_ok=True)
    for i in range(repeat):
        rows.setdefault(("python", ""), []).append(fresh("pass", None, scratch)[1])
        rows.setdefault(("dcp's own", ""), []).append(fresh(DCP_ONLY, None, scratch)[1])
        rows.setdefault(("tracker", ""), []).append(fresh(TRACKER, None, scratch)[1])
        for side, tree in trees.items():
            _, cpu, parts = fresh(CHECKPOINT_PROCESS % {"scratch": scratch}, tree, scratch)
            rows.setdefault(("checkpoint process", side), []).append((cpu, parts))
        for name, code in BOOTSTRAPS.items():
            for side, tree in trees.items():
                rows.setdefault((name, side), []).append(fresh(TIMED % code, tree, scratch)[2]["cpu"])
        print(f"  round {i + 1}/{repeat} done, {load()}", flush=True)
    python, dcp = med(rows[("python", "")]), med(rows[("dcp's own", "")])
    print(f"interpreter start and exit (python -c pass): {python:.2f}")
    print(f"DCP's own process (import its executor; interpreter included): {dcp:.2f}")
    print(f"multiprocessing's resource tracker, started by a rank's first spawn: {med(rows[('tracker', '')]):.2f}")
    sides = list(trees)
    for side in sides:
        runs = rows[("checkpoint process", side)]
        total = med([r[0] for r in runs])
        parts = {k: med([r[1][k] for r in runs]) for k in runs[0][1]}
        harness = parts["main module"] + parts["probes"]
        print(f"the harness's checkpoint process, {side}: {total:.2f} in all; main module "
              f"{parts['main module']:.2f}, torch and DCP {parts['dcp']:.2f}, probes {parts['probes']:.2f}: "
              f"the harness's share {harness:.2f} ({harness / total:.0%})")
    for name in BOOTSTRAPS:
        values = {side: med(rows[(name, side)]) for side in sides}
        print(f"{name} bootstrap imports: " + ", ".join(f"{s} {v:.3f}" for s, v in values.items()) + " ("
              + ", ".join(f"{s}/before {values[s] / values[sides[0]]:.2f}" for s in sides[1:]) + ")")
    print(f"  ({load()})")


# -- runs: THREAD vs PROCESS on the fork server -------------------------------------------
def tree_cpu(pid: int) -> float:
    """CPU seconds of `pid` and every live descendant, with what each reaped (its children's)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total


def timeline(run_dir: Path, start: float, end: float) -> dict[str, float]:
    """A PROCESS run's seconds, from its traces (one monotonic clock for every process)."""
    def events(path: Path) -> list[dict]:
        return [json.loads(line) for line in path.read_text().splitlines()]

    out: dict[str, float] = {}
    spawned, ready, saved, installed = [], [], [], []
    for r in range(WORLD):
        rank, ckpt = events(run_dir / f"rank{r}.trace"), events(run_dir / f"rank{r}.ckpt.trace")
        first_save = next(e["phase"] for e in rank if e["phase"].startswith("save "))
        # DCP spawns its process right after the rank's last collective of the first save
        # (`_ProcessGroupInitInfo`'s broadcast of the store's address).
        spawned.append(max(e["t"] for e in rank if e["phase"] == first_save and e["kind"] == "collective"))
        installed.append(ckpt[0]["t"])
        ready.append(next(e["t"] for e in ckpt if e.get("op") == "barrier" and e.get("at") == "exit"))
        saved.append(ckpt[-1]["t"])
    out["before the first save"] = min(spawned) - start
    out["checkpoint process start (the slower rank's)"] = max(i - s for i, s in zip(installed, spawned))
    out["its group up (waiting for the peer's)"] = max(ready) - max(installed)
    out["the saves"] = max(saved) - max(ready)
    out["after the last save (teardown included)"] = end - max(saved)
    return out


def run_pairs() -> None:
    """A measuring interpreter (`_runs` mode) with one tree on PYTHONPATH and its own
    fork server: per line "DIR" on stdin, one THREAD and one PROCESS run, a JSON line back."""
    from ckpt_harness.config import RunConfig
    from ckpt_harness.jobref import resolve
    from ckpt_harness.launch import group, prestart
    from ckpt_harness.targets import RunRequest, of

    prestart(wait=True)
    zygote = group._pool.all[0].proc.pid
    for line in sys.stdin:
        where, answer = Path(line.strip()), {}
        for job in ("dcp_async", "dcp_async_process"):
            ref, _ = resolve(job)
            config = RunConfig.build(ref, world_size=WORLD, steps=4, save_every=2)
            cpu0, start = tree_cpu(zygote), time.monotonic()
            run = of(config).run(RunRequest(job), where / job / "ckpt", where / job / "run")
            end, cpu = time.monotonic(), tree_cpu(zygote) - cpu0
            assert run.outcome.ok, run.outcome
            answer[job] = {"wall": end - start, "cpu": cpu}
            if job == "dcp_async_process":
                answer["timeline"] = timeline(where / job / "run", start, end)
        print(json.dumps(answer), flush=True)


def runs(repeat: int, trees: dict[str, Path], scratch: Path) -> None:
    print(f"== runs: ws={WORLD}, 4 steps, saves at 2 and 4, fault-free; one measuring interpreter and fork "
          f"server per tree, a warm-up pair each, then medians of {repeat}; {load()}")
    workers = {side: subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "_runs"], cwd=scratch,
                                      env={**os.environ, "PYTHONPATH": str(tree)}, text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
               for side, tree in trees.items()}
    results: dict[str, list[dict]] = {side: [] for side in trees}
    try:
        for i in range(-1, repeat):
            for side, worker in workers.items():
                assert worker.stdin and worker.stdout
                worker.stdin.write(f"{scratch / f'runs-{side[:6]}-{i + 1}'}\n")
                worker.stdin.flush()
                answer = json.loads(worker.stdout.readline())
                if i >= 0:
                    results[side].append(answer)
                print(f"  {'warm-up' if i < 0 else f'round {i + 1}'}, {side}: " + ", ".join(
                    f"{job} {answer[job]['wall']:.2f} s wall {answer[job]['cpu']:.2f} s CPU"
                    for job in ("dcp_async", "dcp_async_process")) + f"; {load()}", flush=True)
    finally:
        for worker in workers.values():
            if worker.stdin:
                worker.stdin.close()
            worker.wait()
    for side, rows in results.items():
        thread, process = ([med([r[job][k] for r in rows]) for k in ("wall", "cpu")]
                           for job in ("dcp_async", "dcp_async_process"))
        print(f"{side}: dcp_async (THREAD) {thread[0]:.2f} s wall, {thread[1]:.2f} s CPU; dcp_async_process "
              f"(PROCESS) {process[0]:.2f} s wall, {process[1]:.2f} s CPU ({process[0] / thread[0]:.1f}x wall, "
              f"{process[1] / max(thread[1], 0.01):.1f}x CPU)")
        for key in rows[0]["timeline"]:
            value = med([r["timeline"][key] for r in rows])
            print(f"  PROCESS run, {key}: {value:.2f} s ({value / process[0]:.0%})")
    sides = list(results)
    if len(sides) == 2:
        for k in ("wall", "cpu"):
            a, b = (med([r["dcp_async_process"][k] for r in results[s]]) for s in sides)
            print(f"PROCESS run {k}, {sides[1]}/{sides[0]}: {b / a:.2f}")
    print(f"  ({load()})")


# -- warm: DCP's own process, spawned vs forked warm --------------------------------------
def warm(repeat: int, scratch: Path) -> None:
    import multiprocessing

    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint import _async_process_executor as executor

    print(f"== warm: DCP's _AsyncCheckpointProcess, one rank, medians of {repeat}; {load()}")
    dist.init_process_group("gloo", init_method=f"file://{scratch / 'warm-store'}", rank=0, world_size=1)
    state = {"w": torch.randn(256, 256), "b": torch.randn(256)}

    class Shim:
        """What DCP's `mp.get_context("spawn")` gets instead of torch.multiprocessing."""

        def __init__(self, ctx: Any) -> None:
            self.ctx = ctx

        def get_context(self, method: str) -> Any:
            assert method == "spawn", method
            return self.ctx

    # The checkpoint processes log every request to the stderr they inherit (a forkserver's
    # children the server's): to a file instead, from before the server starts.
    stderr = os.dup(2)
    with open(scratch / "warm.log", "wb") as log:
        os.dup2(log.fileno(), 2)
    # The harness's probes in this process, as in a rank; its checkpoint processes get
    # them (`dcp_process.follow`) only while `probes._child_paths` is set: the probed variant.
    from ckpt_harness.inject import dcp_process, probes

    ckpt = scratch / "warm-ckpt"
    ckpt.mkdir()

    def child_paths(actor: str) -> tuple[str, None]:
        return str(scratch / f"warm-{actor}.trace"), None

    probes.install(str(scratch / "warm-rank.trace"), 0, ckpt_dir=str(ckpt), thread_phases=True,
                   child_paths=child_paths)
    dcp_process.follow()
    original = executor.mp
    variants = (("spawn (as DCP does)", original, None), ("spawn, probed (as in a run)", original, child_paths))
    try:
        forkserver = multiprocessing.get_context("forkserver")
        forkserver.set_forkserver_preload(["torch.distributed.checkpoint._async_process_executor"])
        start = time.perf_counter()
        first = forkserver.Process(target=time.sleep, args=(0,))  # waits for the server's preload
        first.start()
        first.join()
        print(f"forkserver start, once per harness (a fresh interpreter importing DCP's executor, then a "
              f"first fork): {time.perf_counter() - start:.2f} s wall", flush=True)
        results: dict[str, list[tuple[float, float, float]]] = {}
        variants += (("forked warm", Shim(forkserver), None),)
        for i in range(repeat):
            for name, mp, paths in variants:
                executor.mp, probes._child_paths = mp, paths
                t0 = time.perf_counter()
                proc = executor._AsyncCheckpointProcess(executor._ProcessGroupInitInfo())
                t1 = time.perf_counter()
                proc.save(state, checkpoint_id=ckpt / f"{i}-{name.split()[0]}-{paths is None}")
                t2 = time.perf_counter()
                cpu = _cpu_of(proc._save_process.pid)
                proc._send(executor._CheckpointSaveProcessControlOpts.TERMINATE)
                proc._save_process.join()
                results.setdefault(name, []).append((t1 - t0, t2 - t1, cpu))
                print(f"  {name}: ready in {t1 - t0:.2f} s, save {t2 - t1:.3f} s, its CPU {cpu:.2f} s, {load()}",
                      flush=True)
        assert (scratch / "warm-ckpt.trace").stat().st_size, "the probed checkpoint processes traced nothing"
    finally:
        os.dup2(stderr, 2)
        os.close(stderr)
        executor.mp = original
        dist.destroy_process_group()
    base = None
    for name, rows in results.items():
        ready, save, cpu = (med([r[k] for r in rows]) for k in range(3))
        base = base or (ready, cpu)
        print(f"{name}: ready {ready:.2f} s, a save {save:.3f} s, its CPU until then {cpu:.2f} s"
              + ("" if base == (ready, cpu) else f" (ready {ready / base[0]:.2f}x, CPU {cpu / base[1]:.2f}x "
                                                 "of spawn as DCP does)"))
    print(f"  ({load()})")


def _cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- script: bare torchrun vs the harness's launch -----------------------------------------
#: The script every side runs: where it stands at its first line, once its group is up, at its end.
#: The harness's bootstrap imports torch before the script (`worker._default_timeouts`), the
#: bare worker in it: compare CPU until the group is up, which both include.
SCRIPT = """
import json, os, sys, time
first = (time.monotonic(), sum(os.times()[:2]))
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
up, cpu_up = time.monotonic(), sum(os.times()[:2])
dist.destroy_process_group()
with open(os.path.join(sys.argv[1], "w%s.json" % os.environ["RANK"]), "w") as f:
    json.dump({"first": first[0], "cpu": first[1], "up": up, "cpu_up": cpu_up, "end": time.monotonic()}, f)
"""
#: The harness's launch of it, twice in one interpreter with one tree on PYTHONPATH: the
#: first run starts what the harness keeps warm (the agent server), the second finds it started.
HARNESS = """
import json, sys, time
from pathlib import Path
from ckpt_harness.launch.elastic import ScriptSpec, run_elastic
times = []
for out in sys.argv[2:]:
    start = time.monotonic()
    outcome = run_elastic(ScriptSpec(command=(sys.argv[1], out), run_dir=out, deadline=300, nproc_per_node=2))
    times.append({"start": start, "returned": time.monotonic(), "ok": outcome.ok})
print(json.dumps(times))
"""


def script(repeat: int, trees: dict[str, Path], scratch: Path) -> None:
    print(f"== script: torchrun --nproc-per-node 2, minimal gloo script; medians of {repeat}; {load()}")
    path = scratch / "minimal.py"
    path.write_text(SCRIPT)
    rows: dict[str, list[dict[str, float]]] = {}
    for i in range(repeat):
        for tree in ("bare torchrun", *trees):
            sides = [tree] if tree == "bare torchrun" else [f"{tree} first", f"{tree} next"]
            outs = [scratch / f"script-{i}-{side.replace(' ', '-')}" for side in sides]
            for out in outs:
                out.mkdir()
            if tree == "bare torchrun":
                port = _free_port()
                start = time.monotonic()
                subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                                str(path), str(outs[0])], cwd=scratch, check=True, capture_output=True)
                runs = [{"start": start, "returned": time.monotonic()}]
            else:
                runs = _harness(trees[tree], outs, path)
            for side, out, times in zip(sides, outs, runs):
                workers = [json.loads((out / f"w{r}.json").read_text()) for r in range(2)]
                row = {
                    "script starts": max(w["first"] for w in workers) - times["start"],
                    "worker CPU before the script": max(w["cpu"] for w in workers),
                    "group up": max(w["up"] for w in workers) - times["start"],
                    "worker CPU until its group is up": max(w["cpu_up"] for w in workers),
                    "scripts ended": max(w["end"] for w in workers) - times["start"],
                    "returned": times["returned"] - times["start"],
                }
                rows.setdefault(side, []).append(row)
                print(f"  {side}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()) + f"; {load()}", flush=True)
    sides = list(rows)
    for key in rows[sides[0]][0]:
        values = {s: med([r[key] for r in rows[s]]) for s in sides}
        print(f"{key:30s} " + "  ".join(f"{s} {v:5.2f}" for s, v in values.items())
              + "  (" + ", ".join(f"{s}/bare {values[s] / values[sides[0]]:.2f}" for s in sides[1:]) + ")")
    print(f"  ({load()})")


def _harness(tree: Path, outs: list[Path], path: Path) -> list[dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-c", HARNESS, str(path), *map(str, outs)], cwd=outs[0].parent,
                          env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"harness launch failed:\n{proc.stderr}")
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(t["ok"] for t in runs), runs
    return runs


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sections", nargs="*", metavar="SECTION", help=f"any of {', '.join(SECTIONS)}")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", default=None, help="the tree to compare with (default: where HEAD left main)")
    args = parser.parse_args()
    if args.sections == ["_runs"]:  # a measuring interpreter of `runs`: its tree is on PYTHONPATH
        return run_pairs()
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        parser.error(f"no section {', '.join(sorted(unknown))}: pick from {', '.join(SECTIONS)}")
    if Path.cwd().resolve() == ROOT or (Path.cwd() / "ckpt_harness").is_dir():
        sys.exit("run from outside a checkout's root: its ckpt_harness would shadow the trees measured")
    sys.path.insert(0, str(ROOT))
    before = args.before or base_rev()
    with tempfile.TemporaryDirectory(prefix="bench-async-process-") as d:
        scratch = Path(d)
        trees = {f"before ({before[:7]})": export(before, scratch / "before"), "after": ROOT}
        sections: dict[str, Callable[[], None]] = {
            "child": lambda: child(args.repeat, {**trees, "after, bytecode compiled": compiled(
                ROOT, scratch / "compiled")}, scratch),
            "runs": lambda: runs(args.repeat, trees, scratch),
            "warm": lambda: warm(args.repeat, scratch),
            "script": lambda: script(args.repeat, trees, scratch),
        }
        for name in args.sections or SECTIONS:
            sections[name]()


if __name__ == "__main__":
    main()
