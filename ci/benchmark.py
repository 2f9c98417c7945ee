"""How fast the harness is, against the naive way, measured in the same run.

    python ci/benchmark.py            # everything (~8 min on 2 cores)
    python ci/benchmark.py --quick    # skip the full exploration
    python ci/benchmark.py probes [--before REV] [--after REV]   # section 2 alone (1-2 min on 2 idle cores)
    python ci/benchmark.py sharing   # section 6 alone (~6 min on 2 idle cores)
    python ci/benchmark.py reduction # section 7 alone (~6 min on 2 idle cores)
    python ci/benchmark.py at-once   # section 8 alone
    python ci/benchmark.py early-end [--explore-only]   # section 9 alone (~15 min on 2 idle cores; ~6 explore only)
    python ci/benchmark.py breakdown [--jobs torch_save,dcp] [--scenarios 'crash-*,final-*'] [--no-early-end]
                                     # section 10 alone: the matrix's work one case at a time (docs/speed.md)
    python ci/benchmark.py servers   # section 11 alone (~1 min)

1. Launching a process group: forked from the warm server vs. a fresh
   interpreter per rank (what torch's MultiProcessTestCase and torchrun do).
2. Probe overhead: saves with no probes, with the probes of a golden run and
   with those of a faulted run (every byte logged), in a past tree (`--before`)
   and the working tree, interleaved in one run (`bench_probes.py`).
3. `verify` of the built-in jobs at world size 2 and 4.
4. Exploring every single fault of one save of `dcp` at world size 2: with
   the warmed per-rank templates and two cases at once, vs. one case at a
   time with cold ranks, on the same sample of cases (and the full run).
5. Catalogue scenarios of one job: on one bench, sharing the golden and
   committed runs of equal settings, vs. a fresh bench per scenario.
6. Exploring `torch_save` and `dcp` (default fault kinds and corruptions):
   one resume per distinct post-fault directory (`share_resumes`) vs. a
   resume per case, with the verdicts of both compared case by case.
7. The whole catalogue of `torch_save` and `dcp`: with the reduction (states
   cut from the golden trace, shared resumes) vs. every case run in full,
   seconds per case and the cases whose verdict or cells differ.
8. The whole catalogue of `torch_save` and `dcp` (reduction on): one
   scenario at a time vs. the matrix's scenarios at once.
9. Exploring, then the whole catalogue of, `torch_save` and `dcp`: runs cut
   as soon as no rank can progress (`launch.beacon`) vs. at their grace or
   deadline, with the verdicts and cells of both compared case by case.
10. Where a case's seconds go (`verdict.Breakdown`), per scenario of the
   catalogue and per job, at world size 2, one case at a time: the mean per
   case of each part (launch, the ranks' start, set-up, train, saves, the
   faulted save, waits, teardown, the harness's own work, judging), as
   Markdown tables. Not run by "everything": it is the matrix again.
11. N warm fork servers ready (what a harness process running N groups at
   once needs: a matrix's scenarios and cases at once): a fresh
   interpreter per server, each importing torch (before), vs. one that
   imports it and N forks of it (`launch.group._Pool`); wall time and the
   whole machine's CPU time (/proc/stat: run it on an otherwise idle box).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench_probes  # noqa: E402
from ckpt_harness import targets  # noqa: E402
from ckpt_harness.jobs import BUILTIN_JOBS  # noqa: E402
from ckpt_harness.launch import GroupSpec, prestart, run_group  # noqa: E402

PROBES_TITLE = "2. probe overhead, before and after: no probes / golden run (trace) / faulted run (exact)"


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def fmt(samples: list[float]) -> str:
    return f"median {statistics.median(samples) * 1000:.0f} ms (n={len(samples)})"


# -- 1. launch ------------------------------------------------------------------------
NAIVE_RANK = textwrap.dedent(
    """
    import sys, datetime
    import torch, torch.distributed as dist
    rank, ws, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", store=dist.FileStore(store, ws), rank=rank, world_size=ws,
                            timeout=datetime.timedelta(seconds=60))
    t = torch.ones(1); dist.all_reduce(t); assert t.item() == ws
    dist.barrier(); dist.destroy_process_group()
    """
)


def naive_group(ws: int, tmp: Path) -> None:
    store = tmp / f"store-{time.monotonic_ns()}"
    procs = [subprocess.Popen([sys.executable, "-c", NAIVE_RANK, str(r), str(ws), str(store)]) for r in range(ws)]
    codes = [p.wait() for p in procs]
    assert codes == [0] * ws, codes


def warm_group(ws: int, tmp: Path) -> None:
    outcome = run_group(GroupSpec(world_size=ws, entry="benchmark:all_reduce", payload=None,
                                  run_dir=tmp / f"run-{time.monotonic_ns()}", deadline=60))
    assert outcome.ok


def all_reduce(info, payload):
    import torch
    import torch.distributed as dist

    t = torch.ones(1)
    dist.all_reduce(t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("only", nargs="?",
                        choices=["probes", "sharing", "reduction", "at-once", "early-end", "breakdown", "servers"],
                        help="run this section alone")
    parser.add_argument("--quick", action="store_true", help="skip the full exploration")
    parser.add_argument("--before", default=bench_probes.DEFAULT_BEFORE,
                        help=f"tree the probe overhead is compared with (default {bench_probes.DEFAULT_BEFORE})")
    parser.add_argument("--after", help="revision whose probe overhead is measured (default: the working tree)")
    parser.add_argument("--jobs", default=",".join(BUILTIN_JOBS),
                        help="breakdown: comma-separated jobs (default: every built-in one)")
    parser.add_argument("--scenarios", default="",
                        help="breakdown: comma-separated scenario names or patterns (default: the whole catalogue)")
    parser.add_argument("--parallel", type=int, default=1,
                        help="breakdown: cases at once (default 1: each case's seconds are its own)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="breakdown: also write every case's timings here")
    parser.add_argument("--explore-only", action="store_true",
                        help="early-end: the explorations alone (the catalogue half is the matrix's rows again)")
    parser.add_argument("--no-early-end", action="store_true",
                        help="breakdown: cut stuck runs at their grace or deadline, not once no rank can progress")
    args = parser.parse_args()
    if args.only == "probes":
        print(PROBES_TITLE)
        bench_probes.compare(args.before, after=args.after)
        return
    if args.only == "servers":
        servers()
        return
    prestart(2)
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-harness-bench-"))
    if args.only == "sharing":
        shared_resumes(tmp)
        return
    if args.only == "reduction":
        reduced_catalogue(tmp)
        return
    if args.only == "at-once":
        scenarios_at_once(tmp)
        return
    if args.only == "early-end":
        early_end(tmp, catalogue=not args.explore_only)
        return
    if args.only == "breakdown":
        from ckpt_harness.launch import group

        group.EARLY_END = not args.no_early_end
        breakdown(tmp, [j for j in args.jobs.split(",") if j], [p for p in args.scenarios.split(",") if p],
                  args.parallel, args.json)
        return
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}")

    print("\n1. launch a group and run one all_reduce")
    for ws in (2, 4):
        warm_group(ws, tmp)  # the server is up and warm
        warm = timed(lambda: warm_group(ws, tmp), 10)
        naive = timed(lambda: naive_group(ws, tmp), 3)
        print(f"   ws={ws}: warm fork {fmt(warm)}; fresh interpreter per rank {fmt(naive)}; "
              f"ratio {statistics.median(naive) / statistics.median(warm):.0f}x")

    print("\n" + PROBES_TITLE)
    bench_probes.compare(args.before, after=args.after)

    from ckpt_harness.pipeline.cases import plan_cases, run_cases
    from ckpt_harness.pipeline.explore import baseline, explore
    from ckpt_harness.pipeline.verify import verify

    print("\n3. verify (8 steps, save every 2: golden + 4 stop/resume pairs = 9 group runs)")
    for job in ("torch_save", "dcp"):
        for ws in (2, 4):
            start = time.perf_counter()
            report = verify(job, world_size=ws, workdir=tmp / f"verify-{job}-{ws}")
            print(f"   {job} ws={ws}: {time.perf_counter() - start:.1f} s, {'pass' if report.ok else 'FAIL'}")

    print("\n4. explore dcp ws=2, every single fault of save 4 (default kinds and corruptions)")
    sample = 24
    timings = {}
    for label, parallel, warm in (("harness: 2 at once, warmed templates", 2, True),
                                  ("naive: 1 at a time, cold ranks", 1, False)):
        from ckpt_harness.jobs.dcp import DcpJob

        DcpJob.warm_start = warm
        base = baseline("dcp", world_size=2, workdir=tmp / f"explore-{parallel}", parallel=parallel)
        cases = plan_cases(base)[:sample]
        start = time.perf_counter()
        results = run_cases(base, cases)
        timings[label] = (time.perf_counter() - start) / len(results)
        print(f"   {label}: {timings[label]:.2f} s per case (first {len(results)} cases)")
    DcpJob.warm_start = True
    first, second = timings.values()
    print(f"   ratio {second / first:.1f}x")
    if not args.quick:
        start = time.perf_counter()
        report = explore("dcp", world_size=2, workdir=tmp / "explore-full")
        counts = {v.value: sum(r.verdict is v for r in report.results) for v in type(report.results[0].verdict)}
        print(f"   full exploration: {len(report.results)} cases in {time.perf_counter() - start:.0f} s "
              f"(including the golden and committed runs): {counts}")

    print("\n5. catalogue scenarios on dcp ws=2: one shared bench vs. a bench per scenario")
    from ckpt_harness.catalogue.bench import Bench
    from ckpt_harness.catalogue.scenario import select
    from ckpt_harness.catalogue.scenario_files import builtin_catalogue

    chosen = select(builtin_catalogue(), ["missing-shard", "corrupt-shard", "torn-write", "power-loss-*"])
    timings = {}
    for label, shared in (("shared bench", True), ("bench per scenario", False)):
        start = time.perf_counter()
        bench = None
        for i, scenario in enumerate(chosen):
            if bench is None or not shared:
                bench = Bench(targets.job("dcp", world_size=2), tmp / f"bench-{label}-{i}")
            bench.run(scenario)
        timings[label] = time.perf_counter() - start
        print(f"   {label}: {timings[label]:.1f} s for {len(chosen)} scenarios")
    first, second = timings.values()
    print(f"   ratio {second / first:.1f}x")
    shared_resumes(tmp)
    reduced_catalogue(tmp)
    scenarios_at_once(tmp)
    early_end(tmp)
    servers()


def _machine_cpu() -> float:
    """CPU seconds the whole machine spent (user, nice, system) since boot."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:4]
    return sum(map(int, fields)) / os.sysconf("SC_CLK_TCK")


def servers(counts: tuple[int, ...] = (2, 4), repeat: int = 3) -> None:
    from ckpt_harness.launch.group import _ZygoteClient

    def fresh(n: int) -> list:
        return [_ZygoteClient.start() for _ in range(n)]

    def forked(n: int) -> list:
        mother = _ZygoteClient.start()
        return [*(mother.fork() for _ in range(n)), mother]

    print("\n11. N warm fork servers ready to fork ranks: a fresh interpreter each vs. forks of one")
    for n in counts:
        found = {}
        for label, make in (("fresh interpreter per server", fresh), ("one import, N forks", forked)):
            walls, cpus = [], []
            for _ in range(repeat):
                cpu, start = _machine_cpu(), time.perf_counter()
                clients = make(n)
                for client in clients:
                    client._await_ready()
                walls.append(time.perf_counter() - start)
                cpus.append(_machine_cpu() - cpu)
                for client in clients:
                    client.close()
            found[label] = (statistics.median(walls), statistics.median(cpus))
            print(f"   N={n}, {label}: {found[label][0]:.2f} s, CPU {found[label][1]:.1f} s (median of {repeat})")
        (wall0, cpu0), (wall1, cpu1) = found.values()
        print(f"   N={n}: ratio {wall0 / wall1:.1f}x wall, {cpu0 / cpu1:.1f}x CPU")


def reduced_catalogue(tmp: Path) -> None:
    from ckpt_harness.catalogue.matrix import run_matrix
    from ckpt_harness.catalogue.scenario_files import builtin_catalogue

    print("\n7. the whole catalogue at ws=2: with the reduction vs. every case run in full")
    for job in ("torch_save", "dcp"):
        matrices = {}
        for reduce in (False, True):
            matrices[reduce] = run_matrix(_rows(job), builtin_catalogue(), reduce=reduce,
                                          workdir=tmp / f"reduce-{job}-{reduce}")
        cells = {reduce: {(s.scenario, r.case): (r.check, r.verdict, r.cells) for s in m.results for r in s.results}
                 for reduce, m in matrices.items()}
        reduced = [r for s in matrices[True].results for r in s.results]
        derived = sum("derived from the golden" in r.details for r in reduced)
        shared = sum(r.shares is not None for r in reduced)
        differ = sum(cells[True].get(case) != value for case, value in cells[False].items())
        off, on = matrices[False].elapsed, matrices[True].elapsed
        print(f"   {job}: {len(reduced)} cases ({derived} states derived, {shared} resumes shared); "
              f"{off:.0f} s -> {on:.0f} s ({off / len(reduced):.2f} -> {on / len(reduced):.2f} s per case, "
              f"ratio {off / on:.2f}x); cases that differ: {differ}")


def scenarios_at_once(tmp: Path) -> None:
    from ckpt_harness.catalogue.matrix import SCENARIOS_AT_ONCE, run_matrix
    from ckpt_harness.catalogue.scenario_files import builtin_catalogue

    print(f"\n8. the whole catalogue at ws=2, parallel 2: one scenario at a time vs. {SCENARIOS_AT_ONCE} at once")
    for job in ("torch_save", "dcp"):
        matrices = {at_once: run_matrix(_rows(job), builtin_catalogue(), scenarios_at_once=at_once,
                                        workdir=tmp / f"at-once-{job}-{at_once}")
                    for at_once in (1, SCENARIOS_AT_ONCE)}
        verdicts = {n: [(r.scenario, r.verdict) for r in m.results] for n, m in matrices.items()}
        one, many = matrices[1].elapsed, matrices[SCENARIOS_AT_ONCE].elapsed
        cases = sum(r.cases for r in matrices[1].results)
        print(f"   {job}: {cases} cases, {one:.0f} s -> {many:.0f} s ({one / cases:.2f} -> {many / cases:.2f} s per "
              f"case, ratio {one / many:.2f}x); scenario verdicts alike: {verdicts[1] == verdicts[SCENARIOS_AT_ONCE]}")


def shared_resumes(tmp: Path) -> None:
    from ckpt_harness.pipeline.explore import explore

    print("\n6. explore ws=2, every single fault of save 4: a resume per distinct directory vs. per case")
    for job in ("torch_save", "dcp"):
        reports, seconds = {}, {}
        for share in (False, True):
            start = time.perf_counter()
            reports[share] = explore(job, world_size=2, share_resumes=share, workdir=tmp / f"share-{job}-{share}")
            seconds[share] = time.perf_counter() - start
        alone, shared = reports[False].results, reports[True].results
        differ = sum((a.case, a.verdict) != (b.case, b.verdict) for a, b in zip(alone, shared))
        print(f"   {job}: {len(shared)} cases, {sum(r.shares is not None for r in shared)} judged on a shared "
              f"resume; {seconds[False]:.0f} s -> {seconds[True]:.0f} s "
              f"({seconds[False] / len(alone):.2f} -> {seconds[True] / len(shared):.2f} s per case, "
              f"ratio {seconds[False] / seconds[True]:.2f}x); verdicts that differ: {differ}")


def early_end(tmp: Path, catalogue: bool = True) -> None:
    from ckpt_harness.catalogue.matrix import run_matrix
    from ckpt_harness.catalogue.scenario_files import builtin_catalogue
    from ckpt_harness.launch import group
    from ckpt_harness.pipeline.explore import explore

    print("\n9. ws=2, runs cut at their grace or deadline vs. as soon as no rank can progress")
    print(f"   machine: {os.cpu_count()} cores, python {sys.version.split()[0]}; load average at the start {_load()}")
    for job in ("torch_save", "dcp"):
        reports, seconds = {}, {}
        for on in (False, True):
            group.EARLY_END = on
            start = time.perf_counter()
            reports[on] = explore(job, world_size=2, workdir=tmp / f"early-{job}-{on}")
            seconds[on] = time.perf_counter() - start
        off_cases, on_cases = reports[False].results, reports[True].results
        differ = sum((a.case, a.verdict, a.cells) != (b.case, b.verdict, b.cells) for a, b in zip(off_cases, on_cases))
        print(f"   explore {job}: {len(on_cases)} cases; {seconds[False]:.0f} s -> {seconds[True]:.0f} s "
              f"({seconds[False] / len(off_cases):.2f} -> {seconds[True] / len(on_cases):.2f} s per case, "
              f"ratio {seconds[False] / seconds[True]:.2f}x); cases that differ: {differ}; load average {_load()}")
        if not catalogue:
            continue
        matrices = {}
        for on in (False, True):
            group.EARLY_END = on
            matrices[on] = run_matrix(_rows(job), builtin_catalogue(), workdir=tmp / f"early-m-{job}-{on}")
        cells = {on: {(s.scenario, r.case): (r.check, r.verdict, r.cells) for s in m.results for r in s.results}
                 for on, m in matrices.items()}
        cases = len(cells[True])
        differ = sorted(case for case, value in cells[False].items() if cells[True].get(case) != value)
        off, on = matrices[False].elapsed, matrices[True].elapsed
        print(f"   catalogue {job}: {cases} cases; {off:.0f} s -> {on:.0f} s ({off / cases:.2f} -> {on / cases:.2f} s "
              f"per case, ratio {off / on:.2f}x); cases that differ: {len(differ)} {differ[:5]}")
    if catalogue:
        _early_end_scripts(tmp)
    group.EARLY_END = True


def _early_end_scripts(tmp: Path) -> None:
    """The stall scenarios (a rank blocked, frozen or late at the final save)
    against tests/scripts/resumable.py under torchrun: with a collective
    timeout of its own (its peers raise; 4 s, past final-save-late's 2 s
    delay and within the scenarios' 5 s grace: 2 s made that case a race of
    the two, whatever the launcher did) and without one (its peers wait)."""
    from ckpt_harness.catalogue.matrix import run_matrix
    from ckpt_harness.catalogue.scenario_files import builtin_catalogue
    from ckpt_harness.launch import group

    resumable = Path(__file__).resolve().parent.parent / "tests" / "scripts" / "resumable.py"
    told = ("steps=--steps {}", "save_every=--save-every {}")
    scripts = _rows(*({"script": f"{resumable} {{ckpt_dir}} --staging{extra}", "script_args": told,
                       "nproc_per_node": 2, "timeout": 120.0} for extra in (" --pg-timeout 4", "")))
    stalls = [s for s in builtin_catalogue() if s.check == "stall"]
    matrices = {}
    for on in (False, True):
        group.EARLY_END = on
        matrices[on] = run_matrix(scripts, stalls, workdir=tmp / f"early-script-{on}")
    cells = {on: {(s.job, s.scenario, r.case): (r.check, r.verdict, r.cells) for s in m.results for r in s.results}
             for on, m in matrices.items()}
    cases = len(cells[True])
    differ = sorted(case for case, value in cells[False].items() if cells[True].get(case) != value)
    off, on = matrices[False].elapsed, matrices[True].elapsed
    print(f"   stall scenarios, resumable.py with and without --pg-timeout 4: {cases} cases; {off:.0f} s -> {on:.0f} s "
          f"({off / cases:.2f} -> {on / cases:.2f} s per case, ratio {off / on:.2f}x); cases that differ: "
          f"{len(differ)} {differ[:5]}")


#: The parts of `verdict.Breakdown` as the tables head them.
PART_HEADS = {"launch": "launch", "start": "start", "setup": "set-up", "train": "train", "saves": "saves",
              "faulted_save": "faulted save", "waits": "waits", "teardown": "teardown", "harness": "harness",
              "judging": "judging"}


def breakdown(tmp: Path, jobs: list[str], patterns: list[str], parallel: int, out: Path | None) -> None:
    """Section 10: each job's catalogue (or `patterns` of it) as the matrix runs it, one scenario at a time,
    then per scenario the mean per case of each part of `verdict.Breakdown`, and per job."""
    from ckpt_harness.catalogue.matrix import run_matrix
    from ckpt_harness.catalogue.scenario import select
    from ckpt_harness.catalogue.scenario_files import builtin_catalogue
    from ckpt_harness.progress import Progress
    from ckpt_harness.verdict import Breakdown

    scenarios = select(builtin_catalogue(), patterns)
    from ckpt_harness.launch import group

    print(f"10. where a case's seconds go: world size 2, {parallel} case(s) at once, one scenario at a time, "
          f"runs ended early {'on' if group.EARLY_END else 'off'}; mean seconds per case")
    print(f"   machine: {os.cpu_count()} cores, python {sys.version.split()[0]}; load average at the start "
          f"{_load()}")
    heads = " | ".join(PART_HEADS.values())
    summary, dump = [], {}
    for job in jobs:
        load_before = _load()
        matrix = run_matrix(_rows(job), scenarios, parallel=parallel, workdir=tmp / f"breakdown-{job}",
                            progress=Progress())
        if matrix.skipped:
            print(f"\n   {job}: not run ({matrix.skipped[job]})")
            continue
        print(f"\n#### {job} (load average {load_before} before, {_load()} after, {matrix.elapsed:.0f} s)\n")
        print(f"| scenario | cases | {heads} | per case | scenario s |")
        print("|---" * (len(PART_HEADS) + 4) + "|")
        every: list[Breakdown] = []
        in_cases = 0.0
        for result in matrix.results:
            timed = {r.case: r.timings for r in result.results if r.timings is not None}  # one per case
            dump.setdefault(job, {})[result.scenario] = {
                "verdict": result.verdict.value, "elapsed": round(result.elapsed, 3),
                "cases": {case: t.to_json() for case, t in timed.items()}}
            every += timed.values()
            in_cases += sum(t.wall for t in timed.values())
            if not timed:
                print(f"| {result.scenario} | {result.verdict.value} | " + " | ".join("" for _ in PART_HEADS) +
                      f" | | {result.elapsed:.1f} |")
                continue
            print(_row(result.scenario, len(timed), Breakdown.mean(timed.values()), result.elapsed))
        mean = Breakdown.mean(every)
        print(_row(f"**{job}**", len(every), mean, matrix.elapsed))
        if mean.wall:
            shares = " | ".join(f"{getattr(mean, part) / mean.wall:.0%}" for part in PART_HEADS)
            print(f"| share of a case | | {shares} | 100% | |")
        print(f"\n{in_cases:.0f} s in cases of {matrix.elapsed:.0f} s; the rest: golden, committed and earlier "
              "runs the scenarios share, and the n/a ones")
        summary.append((job, len(every), mean, matrix.elapsed, load_before))
    if len(summary) > 1:
        print(f"\n#### every job\n\n| job | cases | {heads} | per case | job s | load before |")
        print("|---" * (len(PART_HEADS) + 5) + "|")
        for job, n, mean, elapsed, load in summary:
            print(_row(job, n, mean, elapsed) + f" {load} |")
    if out is not None:
        out.write_text(json.dumps(dump, indent=1) + "\n")
        print(f"\nevery case's timings: {out}")


def _row(name: str, cases: int, mean, elapsed: float) -> str:
    parts = " | ".join(f"{getattr(mean, part):.2f}" for part in PART_HEADS)
    return f"| {name} | {cases} | {parts} | {mean.wall:.2f} | {elapsed:.1f} |"


def _rows(*given):
    """Matrix rows: a built-in job's name (at world size 2, as the matrix runs it) or a row's settings."""
    from ckpt_harness.catalogue.matrix import matrix_rows

    rows, skipped = matrix_rows([{"job": g, "world_size": 2} if isinstance(g, str) else g for g in given])
    if skipped:
        sys.exit(f"cannot run {skipped}")
    return rows


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
