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
    run.add_argument("--case", action="append", help="only this case (golden, resume@K); repeatable")
    run.add_argument("--workdir", type=Path, help="keep every run's checkpoints and logs here")
    run.set_defaults(command=_run)

    listing = sub.add_parser("list", help="list the built-in jobs")
    listing.set_defaults(command=_list)
    return parser


def _run(args: argparse.Namespace) -> int:
    from ckpt_harness.launch import LaunchError, prestart

    prestart()
    from ckpt_harness.jobref import JobError
    from ckpt_harness.verify import BackendUnavailable, verify

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="ckpt-harness-"))
    try:
        report = verify(
            args.job, world_size=args.world_size, total_steps=args.steps, save_every=args.save_every,
            keep_last=args.keep_last, overwrite=args.overwrite, seed=args.seed, timeout=args.timeout,
            backend=args.backend, workdir=workdir, cases=args.case,
        )
    except (JobError, ValueError, BackendUnavailable, LaunchError) as exc:
        print(f"ckpt-harness: error: {exc}", file=sys.stderr)
        _discard(args, workdir)
        return EXIT_USAGE
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
    width = max(map(len, BUILTIN_JOBS))
    for name in sorted(BUILTIN_JOBS):
        print(f"{name.ljust(width)}  {DESCRIPTIONS.get(name, '')}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
