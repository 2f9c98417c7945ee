"""The `ckpt-harness` command.

Exit codes: 0 every case passed, 1 a case failed or was undecided,
2 the command line, the job or a setting was wrong (the message says how).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from ckpt_harness.jobs import BUILTIN_JOBS, DESCRIPTIONS

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return EXIT_USAGE
    return args.command(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ckpt-harness",
        description="Prove that distributed training checkpoints survive the real world.",
    )
    sub = parser.add_subparsers(metavar="COMMAND")

    run = sub.add_parser("run", help="verify that a job resumes bitwise from every save")
    run.add_argument("--job", required=True, help=f"built-in ({', '.join(sorted(BUILTIN_JOBS))}) or module:Class")
    run.add_argument("--world-size", type=int, default=2, help="ranks in the group, 1..8 (default 2)")
    run.add_argument("--steps", type=int, default=8, help="optimizer steps (default 8)")
    run.add_argument("--save-every", type=int, default=2, help="save every K steps (default 2)")
    run.add_argument("--keep-last", type=int, default=None, help="ask the job to keep only the last N checkpoints")
    run.add_argument("--overwrite", action="store_true", help="set ctx.overwrite for the job")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--timeout", type=float, default=60.0, help="seconds per group run before it counts as hung")
    run.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    run.add_argument("--nodes", type=int, default=1, help="simulated nodes sharing the ranks and one file system")
    run.add_argument("--case", action="append", help="only this case (golden, resume@K); repeatable")
    run.add_argument("--workdir", type=Path, help="keep every run's checkpoints and logs here")
    run.set_defaults(command=_run)

    explore = sub.add_parser("explore", help="break one save at every point with every fault kind; judge each resume")
    _common_job_options(explore, steps=4)
    explore.add_argument("--save-step", type=int, default=None, help="the save to break (default: the second)")
    explore.add_argument("--keep-last", type=int, default=None, help="ask the job to keep only the last N checkpoints")
    explore.add_argument("--overwrite", action="store_true", help="set ctx.overwrite for the job")
    explore.add_argument("--nodes", type=int, default=1, help="simulated nodes sharing the ranks and one file system")
    from ckpt_harness.explore import CORRUPTIONS, DEFAULT_KINDS
    from ckpt_harness.inject.faults import KINDS

    explore.add_argument("--faults", default=",".join(DEFAULT_KINDS),
                         help=f"comma-separated fault kinds (default: %(default)s; all: {','.join(KINDS)})")
    explore.add_argument("--corruptions", default=",".join(CORRUPTIONS),
                         help="corruptions applied to each file of the committed save ('' for none)")
    explore.add_argument("--durability", choices=("strict", "ordered"), default="strict",
                         help="power-loss model for directory entries (default strict)")
    explore.add_argument("--hang-timeout", type=float, default=3.0, help="deadline of a run with a hang fault")
    explore.add_argument("--parallel", type=int, default=2, help="cases run at once (default 2)")
    explore.add_argument("--case", action="append", help="only this case (as named in repro lines); repeatable")
    explore.add_argument("--quiet", action="store_true", help="no progress line")
    explore.set_defaults(command=_explore)

    trace = sub.add_parser("trace", help="record a clean run and print the operations of one save per rank")
    _common_job_options(trace, steps=4)
    trace.add_argument("--save-step", type=int, default=None, help="the save to show (default: the second)")
    trace.set_defaults(command=_trace)

    matrix = sub.add_parser("matrix", help="run the scenario catalogue against jobs; write the compatibility "
                                           "matrix as Markdown and JSON")
    matrix.add_argument("--job", action="append",
                        help="a job to run (module:Class or built-in name); repeatable (default: the built-in jobs)")
    _scenario_options(matrix)
    matrix.add_argument("--scenarios", default="", help="comma-separated scenario names or patterns (default: all)")
    matrix.add_argument("--out", type=Path, default=Path("ckpt-matrix"),
                        help="directory for matrix.md and matrix.json (default: ./ckpt-matrix)")
    matrix.add_argument("--workdir", type=Path, help="keep every run's checkpoints and logs here")
    matrix.add_argument("--quiet", action="store_true", help="no progress lines")
    matrix.set_defaults(command=_matrix)

    scenario = sub.add_parser("scenario", help="run one catalogue scenario against a job (what matrix repro lines call)")
    scenario.add_argument("name", help="scenario name (see `ckpt-harness list`)")
    scenario.add_argument("--job", required=True, help=f"built-in ({', '.join(sorted(BUILTIN_JOBS))}) or module:Class")
    _scenario_options(scenario)
    scenario.add_argument("--case", action="append", help="only this case (as named in repro lines); repeatable")
    scenario.add_argument("--workdir", type=Path, help="keep every run's checkpoints and logs here")
    scenario.set_defaults(command=_scenario)

    listing = sub.add_parser("list", help="list the built-in jobs, fault kinds, properties and scenarios")
    listing.set_defaults(command=_list)
    return parser


def _common_job_options(p: argparse.ArgumentParser, steps: int) -> None:
    p.add_argument("--job", required=True, help=f"built-in ({', '.join(sorted(BUILTIN_JOBS))}) or module:Class")
    p.add_argument("--world-size", type=int, default=2, help="ranks in the group, 1..8 (default 2)")
    p.add_argument("--steps", type=int, default=steps, help=f"optimizer steps (default {steps})")
    p.add_argument("--save-every", type=int, default=2, help="save every K steps (default 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per group run before it counts as hung")
    p.add_argument("--workdir", type=Path, help="keep every run's checkpoints, traces and logs here")


def _scenario_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--file", action="append", type=Path,
                   help="scenario file or directory to use instead of the built-in catalogue; repeatable")
    p.add_argument("--world-size", type=int, default=2, help="ranks in the group, 1..8 (default 2)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per group run before it counts as hung")
    p.add_argument("--parallel", type=int, default=2, help="cases run at once (default 2)")


def _catalogue(args: argparse.Namespace):
    from ckpt_harness.scenario import builtin_catalogue, load_paths

    return load_paths(args.file) if args.file else builtin_catalogue()


def _matrix(args: argparse.Namespace) -> int:
    from ckpt_harness.jobref import JobError
    from ckpt_harness.launch import LaunchError, prestart
    from ckpt_harness.matrix import DEFAULT_JOBS, run_matrix
    from ckpt_harness.scenario import ScenarioError, select

    def progress(line: str) -> None:
        if args.quiet:
            return
        if line.startswith("\r"):
            if sys.stderr.isatty():
                print(f"{line[:100]:100}", end="", file=sys.stderr, flush=True)
        else:
            print(f"\r{line}" if sys.stderr.isatty() else line, file=sys.stderr, flush=True)

    try:
        scenarios = select(_catalogue(args), _split(args.scenarios))
        prestart(max(1, args.parallel))
        matrix = run_matrix(args.job or DEFAULT_JOBS, scenarios, world_size=args.world_size, timeout=args.timeout,
                            parallel=args.parallel, workdir=args.workdir, keep=args.workdir is not None,
                            progress=progress)
    except (JobError, ScenarioError, ValueError, LaunchError) as exc:
        print(f"ckpt-harness: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    md, js = matrix.write(args.out)
    print(matrix.markdown())
    print(f"wrote {md} and {js}")
    if not matrix.complete:
        print("some cells could not be judged (unknown): see their reasons above", file=sys.stderr)
        return EXIT_FINDINGS
    return EXIT_OK


def _scenario(args: argparse.Namespace) -> int:
    from ckpt_harness.launch import prestart
    from ckpt_harness.scenario import Bench, select

    def produce(workdir: Path):
        (scenario,) = select(_catalogue(args), [args.name])
        prestart(max(1, args.parallel))
        bench = Bench(args.job, args.world_size, workdir, timeout=args.timeout, parallel=args.parallel)
        return bench.run(scenario, args.case)

    return _report_or_error(args, produce)


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _explore(args: argparse.Namespace) -> int:
    from ckpt_harness.launch import prestart

    prestart(max(1, args.parallel))
    from ckpt_harness.explore import explore

    def progress(done: int, total: int, result) -> None:
        if not args.quiet and sys.stderr.isatty():
            print(f"\r[{done:>4}/{total}] {result.verdict.value.upper():7} {result.case[:60]:60}", end="",
                  file=sys.stderr, flush=True)

    return _report_or_error(args, lambda workdir: explore(
        args.job, world_size=args.world_size, total_steps=args.steps, save_every=args.save_every,
        save_step=args.save_step, keep_last=args.keep_last, overwrite=args.overwrite, nodes=args.nodes,
        kinds=_split(args.faults), corruptions=_split(args.corruptions),
        durability_mode=args.durability, seed=args.seed, timeout=args.timeout, hang_timeout=args.hang_timeout,
        workdir=workdir, cases=args.case, parallel=args.parallel, progress=progress,
    ), newline_first=not args.quiet and sys.stderr.isatty())


def _trace(args: argparse.Namespace) -> int:
    from ckpt_harness.jobref import JobError
    from ckpt_harness.launch import LaunchError, prestart

    prestart()
    from ckpt_harness import oracle
    from ckpt_harness.explore import trace, trace_phases

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="ckpt-harness-"))
    try:
        run, phase = trace(args.job, world_size=args.world_size, total_steps=args.steps,
                           save_every=args.save_every, save_step=args.save_step, seed=args.seed,
                           timeout=args.timeout, workdir=workdir)
    except (JobError, ValueError, LaunchError) as exc:
        print(f"ckpt-harness: error: {exc}", file=sys.stderr)
        _discard(args, workdir)
        return EXIT_USAGE
    problem = oracle.health(run)
    print(f"{phase} of job {args.job} at world size {args.world_size}:")
    print(trace_phases(run, phase))
    if problem is not None:
        print(f"\nthe run did not finish: {problem[0]}\n{problem[1]}")
        print(f"\ntraces and rank logs kept in {workdir}")
        return EXIT_FINDINGS
    _discard(args, workdir)
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from ckpt_harness.launch import prestart

    prestart()
    from ckpt_harness.verify import verify

    return _report_or_error(args, lambda workdir: verify(
        args.job, world_size=args.world_size, total_steps=args.steps, save_every=args.save_every,
        keep_last=args.keep_last, overwrite=args.overwrite, seed=args.seed, timeout=args.timeout,
        backend=args.backend, nodes=args.nodes, workdir=workdir, cases=args.case,
    ))


def _report_or_error(args: argparse.Namespace, produce, newline_first: bool = False) -> int:
    """Run `produce(workdir)` and print its report (or scenario result); bad
    input (a ValueError, which ScenarioError is) exits 2, findings 1."""
    from ckpt_harness.jobref import JobError
    from ckpt_harness.launch import LaunchError
    from ckpt_harness.verify import BackendUnavailable

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="ckpt-harness-"))
    try:
        report = produce(workdir)
    except (JobError, ValueError, BackendUnavailable, LaunchError) as exc:
        print(f"ckpt-harness: error: {exc}", file=sys.stderr)
        _discard(args, workdir)
        return EXIT_USAGE
    finally:
        if newline_first:
            print(file=sys.stderr)
    print(report.explain())
    if report.ok:
        _discard(args, workdir)
        return EXIT_OK
    print(f"\nruns, checkpoints and rank logs kept in {workdir}")
    return EXIT_FINDINGS


def _discard(args: argparse.Namespace, workdir: Path) -> None:
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)


def _list(args: argparse.Namespace) -> int:
    from ckpt_harness.inject.faults import KINDS
    from ckpt_harness.oracle import PROPERTIES

    width = max(map(len, [*BUILTIN_JOBS, *KINDS]))
    print("jobs:")
    for name in sorted(BUILTIN_JOBS):
        print(f"  {name.ljust(width)}  {DESCRIPTIONS.get(name, '')}")
    print("fault kinds:")
    for name, (_, what) in KINDS.items():
        print(f"  {name.ljust(width)}  {what}")
    print("properties:")
    for name, what in PROPERTIES.items():
        print(f"  {name.ljust(width)}  {what}")
    from ckpt_harness.scenario import builtin_catalogue

    scenarios = builtin_catalogue()
    width = max(len(s.name) for s in scenarios)
    print("scenarios (ckpt-harness scenario NAME, ckpt-harness matrix):")
    for s in scenarios:
        print(f"  {s.name.ljust(width)}  [{s.property}] {s.description}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
