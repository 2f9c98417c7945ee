"""Warm starts against cold ones: the same matrix rows, verdicts compared case by case.

    python ci/bench_warm.py [--job NAME ... | --all] [--script 'CMD' [--script-args LIST] ...]
                            [--nproc-per-node N] [--scenarios PATTERNS] [--repeat N] [--warm-only]

A Job's rank serves the process DCP spawns for its checkpoints from a
template of itself (`launch.warm`), and a script's torchrun workers are
forked from a template of their agent (`launch.warm_workers`), unless
`--cold-start` is given. For each job (default: `dcp_async_process`, the
row that spawns, and `dcp_async`, the same job with a thread, as the
yardstick; none once scripts are given), and for each script given (a
matrix of it alone, at two workers or `--nproc-per-node`), this runs
`ckpt-harness matrix` warm and cold, interleaved, each in a fresh process
with its own servers, and prints:

- the wall time of each and the ratio cold / warm (and, with two jobs, the
  PROCESS row's warm time next to the THREAD row's);
- every cell and every case whose verdict differs between the two (none is
  the claim), and how many cases each side confirmed cold;
- the CPU seconds the box was busy during each, as a share of its cores
  over the wall time: what is left idle, which another scenario at once
  could fill;
- each row's seconds within the matrix (its scenarios' wall times summed:
  rows run side by side, so these share the machine), and the PROCESS row's
  over the THREAD row's where both are in one matrix;
- first, the box's yardstick: the CPU seconds a fresh `import torch` takes
  (the best of three). The same tree's matrix took 1.41x as long on one day
  as the day before, with `import torch` 1.8-2.2 CPU s against 1.4-1.7: times
  from different days compare only next to it.

`--all` runs the whole built-in matrix (every registered job, one
`ckpt-harness matrix` each side); `--warm-only` the warm side alone (times,
no comparison); `--keep DIR` keeps each side's matrix.json, and `--compare
WARM COLD` compares two kept ones again.

Run it from outside the checkout's root; its output is what
`docs/speed.md` quotes. No assertion here: a timed test would fail on a
loaded machine; the verdict comparison is printed for a person to read.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load() -> str:
    return "load {:.1f}".format(os.getloadavg()[0])


def yardstick() -> float:
    """The CPU seconds (user + system) a fresh interpreter takes to import torch, the best of three."""
    best = float("inf")
    for _ in range(3):
        before = os.times()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        after = os.times()
        best = min(best, after.children_user - before.children_user + after.children_system - before.children_system)
    return best


def busy_seconds() -> float:
    """CPU seconds the whole box has been busy since it started (`/proc/stat`: every state but idle
    and iowait, summed over the cores). Not this process's children's rusage: the fork server's
    ranks are not its waited-for descendants, and that count missed two thirds of a matrix."""
    with open("/proc/stat") as stat:
        ticks = [int(x) for x in stat.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def matrix(rows: list[str], scenarios: str, out: Path, cold: bool) -> tuple[float, dict]:
    """`rows`: ["--job", NAME] or ["--script", CMD, ...] and what else the matrix takes."""
    cli = "import sys; from ckpt_harness.cli import main; sys.exit(main())"
    args = [sys.executable, "-c", cli, "matrix", *rows, "--out", str(out), "--quiet"]
    args += ["--scenarios", scenarios] if scenarios else []
    args += ["--cold-start"] if cold else []
    started, before = time.monotonic(), busy_seconds()
    done = subprocess.run(args, capture_output=True, text=True, cwd=out.parent,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.monotonic() - started
    used = busy_seconds() - before
    print(f"  the box busy {used:.0f} CPU s: {used / (wall * os.cpu_count()):.0%} of its {os.cpu_count()} cores "
          "over the wall time (run it on a box otherwise idle)", flush=True)
    if not (out / "matrix.json").exists():
        sys.exit(f"matrix {'cold' if cold else 'warm'} of {rows} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, json.loads((out / "matrix.json").read_text())


def verdicts(result: dict) -> tuple[dict, dict, int]:
    """(cell -> verdict, (row, scenario, case, check) -> verdict, cases confirmed cold)."""
    cells = {(c["job"], c["property"]): c["verdict"] for c in result["cells"]}
    cases, confirmed = {}, 0
    for s in result["scenarios"]:
        for r in s.get("results", ()):
            for j in (r, *r.get("also", ())):
                cases[(s["job"], s["scenario"], j["case"], j["check"])] = j["verdict"]
            confirmed += bool(r.get("confirmed_cold"))
    return cells, cases, confirmed


def compare(warm: dict, cold: dict) -> None:
    """Print every cell and every judgment whose verdict differs between two matrices."""
    (wcells, wcases, _), (ccells, ccases, _) = verdicts(warm), verdicts(cold)
    differ = sorted(k for k in wcells.keys() | ccells.keys() if wcells.get(k) != ccells.get(k))
    for k in differ:
        print(f"  cell {k}: warm {wcells.get(k)}, cold {ccells.get(k)}")
    cases = sorted(k for k in wcases.keys() | ccases.keys() if wcases.get(k) != ccases.get(k))
    for k in cases:
        print(f"  case {k}: warm {wcases.get(k)}, cold {ccases.get(k)}")
    print(f"  {len(differ)} of {len(wcells.keys() | ccells.keys())} cells and {len(cases)} of "
          f"{len(wcases.keys() | ccases.keys())} judgments differ")


def row_seconds(result: dict) -> dict[str, float]:
    """Each row's scenarios' wall times, summed."""
    rows: dict[str, float] = {}
    for s in result["scenarios"]:
        rows[s["job"]] = rows.get(s["job"], 0.0) + s.get("elapsed", 0.0)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", action="append", help="a matrix row (repeatable)")
    parser.add_argument("--script", action="append", default=[],
                        help="a script, as `matrix --script` takes it: a matrix of it alone (repeatable)")
    parser.add_argument("--script-args", action="append", default=[],
                        help="`matrix --script-args` of the script given in the same place (repeatable)")
    parser.add_argument("--nproc-per-node", type=int, default=2, help="the scripts' workers per node (default 2)")
    parser.add_argument("--scenarios", default="", help="scenario patterns, as `matrix --scenarios` takes them")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--all", action="store_true", help="the whole built-in matrix, one matrix each side")
    parser.add_argument("--warm-only", action="store_true", help="the warm side alone: times, no comparison")
    parser.add_argument("--keep", type=Path, help="copy each side's matrix.json into this directory")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("WARM", "COLD"),
                        help="compare two kept matrix.json files, and run nothing")
    args = parser.parse_args()
    if args.compare:
        warm, cold = (json.loads(path.read_text()) for path in args.compare)
        compare(warm, cold)
        return
    print(f"the box: a fresh `import torch` takes {yardstick():.2f} CPU s (best of three), {load()}", flush=True)
    jobs = args.job or ([] if args.script or args.all else ["dcp_async_process", "dcp_async"])
    units = {job: ["--job", job] for job in jobs}
    if args.all:
        units["built-in matrix"] = []
    for i, script in enumerate(args.script):
        told = args.script_args[i] if i < len(args.script_args) else ""
        units[script.split()[0].rsplit("/", 1)[-1]] = ["--script", script, "--nproc-per-node", str(args.nproc_per_node),
                                                        *(["--script-args", told] if told else [])]
    warm_walls: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-warm-") as tmp:
        for job, rows in units.items():
            for i in range(args.repeat):
                sides = {}
                order = (False,) if args.warm_only else (False, True) if i % 2 == 0 else (True, False)
                for cold in order:
                    out = Path(tmp, f"{job.replace(':', '_').replace(' ', '_')}-{i}-{'cold' if cold else 'warm'}")
                    out.mkdir()
                    at = load()
                    wall, result = matrix(rows, args.scenarios, out, cold)
                    sides[cold] = (wall, result, *verdicts(result))
                    if args.keep:
                        args.keep.mkdir(parents=True, exist_ok=True)
                        (args.keep / f"{out.name}.json").write_text((out / "matrix.json").read_text())
                    print(f"{job} {'cold' if cold else 'warm'}: {wall:.1f} s ({at}), "
                          f"{len(sides[cold][3])} judgments, {sides[cold][4]} confirmed cold", flush=True)
                    seconds = row_seconds(result)
                    if len(seconds) > 1:
                        print("  rows (scenario seconds summed): " + ", ".join(
                            f"{row} {s:.0f}" for row, s in sorted(seconds.items(), key=lambda kv: -kv[1])))
                    if {"dcp_async_process", "dcp_async"} <= seconds.keys():
                        print(f"  dcp_async_process / dcp_async in this matrix = "
                              f"{seconds['dcp_async_process'] / seconds['dcp_async']:.2f}x")
                if args.warm_only:
                    warm_walls.setdefault(job, []).append(sides[False][0])
                    continue
                (warm, warm_result, *_), (cold_wall, cold_result, *_) = sides[False], sides[True]
                warm_walls.setdefault(job, []).append(warm)
                print(f"{job}: cold / warm = {cold_wall / warm:.2f}x")
                compare(warm_result, cold_result)
    if "dcp_async_process" in warm_walls and "dcp_async" in warm_walls:
        process, thread = min(warm_walls["dcp_async_process"]), min(warm_walls["dcp_async"])
        print(f"warm dcp_async_process / dcp_async = {process / thread:.2f}x ({process:.1f} s / {thread:.1f} s)")


if __name__ == "__main__":
    main()
