"""The `ckpt-harness` command.

Exit codes (`exit_code`): 0 every case passed (or did not apply); 1 the
checkpointing under test broke a property; 2 the command line, the job, a
setting or the machine was wrong (the message says what to change); 3 the
harness could not run or judge some case, or the job cannot run at all
(ERROR); 4 some case could not be decided (UNKNOWN, e.g. a job that is not
deterministic). A run with several takes the first of fail, error, unknown.
`matrix` counts only the cells whose verdicts `--fail-on` names. With
`--baseline` (`matrix`, `scenario`) only what the baseline does not expect
counts (`ckpt_harness.catalogue.expectations`). SIGINT and SIGTERM stop any
command as Ctrl-C does, exiting 128 + the signal (130, 143); `matrix` then
writes the scenarios that finished, for `--resume`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Iterator, NoReturn, Optional, Sequence

from ckpt_harness.job import axes
from ckpt_harness.errors import HarnessError, Interrupted, UsageError, did_you_mean, signal_of
from ckpt_harness.jobs import describe, registry
from ckpt_harness.launch.group import LaunchError
from ckpt_harness.launch.envs import EnvError
from ckpt_harness.pipeline.workdir import check_writable
from ckpt_harness.oracle.causes import Severity
from ckpt_harness.verdict import Verdict

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_ERROR, EXIT_UNDECIDED = 0, 1, 2, 3, 4
#: As a shell reports a command stopped by SIGINT (SIGTERM: 143, 128 + the signal).
EXIT_INTERRUPTED = 130
#: Errors that mean "the command could not do what was asked" (exit 2): releases that do not install too.
_USER_ERRORS = (UsageError, LaunchError, EnvError)


def exit_code(verdict: Verdict) -> int:
    """The exit code of a run whose results fold to `verdict`."""
    return {Verdict.FAIL: EXIT_FINDINGS, Verdict.ERROR: EXIT_ERROR, Verdict.UNKNOWN: EXIT_UNDECIDED}.get(
        verdict, EXIT_OK)


def main(argv: Optional[Sequence[str]] = None) -> int:
    _import_from_cwd()
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return EXIT_USAGE
    with _stop_on_signals(), _heartbeat_restored():
        try:
            code = args.command(args)
        except _USER_ERRORS as exc:  # the command's own check, or one deep in a run: the same answer
            print(f"ckpt-harness: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except HarnessError as exc:  # e.g. a framework's JIT op that would not build: nothing could be judged
            print(f"ckpt-harness: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        except KeyboardInterrupt as exc:
            kept = getattr(args, "workdir", None)
            print(f"\nckpt-harness: interrupted{f'; the runs so far are in {kept}' if kept else ''}", file=sys.stderr)
            code = interrupted_exit(exc)
    if code > 128 and argv is None:  # stopped by a signal, on the command line rather than from a caller's Python
        _exit_now(code)
    return code


@contextlib.contextmanager
def _heartbeat_restored() -> Iterator[None]:
    """A command sends its runs' heartbeat lines through its progress printer
    (`_progress`) while it runs, and to where they went before once it is
    done: a caller's own Python goes on with its stderr, not a spent printer."""
    try:
        yield
    finally:
        if "ckpt_harness.launch.heartbeat" in sys.modules:
            from ckpt_harness.launch import heartbeat

            heartbeat.report_to(heartbeat.default)


@contextlib.contextmanager
def _workdir(args: argparse.Namespace) -> Iterator[Path]:
    """The command's work directory (--workdir, or a fresh temporary one),
    removed if the command ends in an error or Ctrl-C and was not given:
    `main` says what went wrong, and nothing of a failed start is left."""
    from ckpt_harness.pipeline.workdir import prepare_workdir

    workdir = prepare_workdir(args.workdir)
    try:
        yield workdir
    except BaseException:
        _discard(args, workdir)
        raise


def interrupted_exit(exc: KeyboardInterrupt) -> int:
    """128 + the signal that stopped the command, as a shell reports it (130 for Ctrl-C)."""
    return 128 + signal_of(exc)


def _exit_now(code: int) -> None:
    """Exit without finalizing the interpreter: with torch loaded that takes
    a second or more of CPU (more under load), which a stopped command
    should not make its user, or a CI runner's kill timeout, wait for. What
    needs cleaning up already is: the work directory is gone, the fork
    servers are shut down here (their ranks with them), and the scenarios a
    stopped matrix abandoned are threads, which end with the process."""
    from ckpt_harness.launch.group import shutdown

    shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGTERM (what a CI runner, Slurm or kill sends) stops the command as
    Ctrl-C does, cleaning up on the way, instead of ending it on the spot
    with its work directory left behind. The first SIGINT or SIGTERM raises
    `Interrupted` in the main thread; later ones are ignored, so that the
    cleanup it starts (seconds at most for `matrix`) runs to its end."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    received: list[int] = []

    def stop(signum: int, frame: object) -> None:
        if not received:
            received.append(signum)
            raise Interrupted(signum)

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _import_from_cwd() -> None:
    """`--job mymod:MyJob` finds mymod.py in the current directory, as pytest
    finds it in its rootdir: a console script, unlike `python -m`, does not
    put the directory it was started from on sys.path. The absolute path, so
    that the ranks (which get this process's sys.path) find it too."""
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", cwd)]
    sys.path.insert(0, cwd)


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose error is the first line a user reads, with a
    pointer to --help instead of the whole usage before it."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}{self._suggest(message)}\n(see `{self.prog} --help`)\n")

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def, override]
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def _suggest(self, message: str) -> str:
        """Did-you-mean for the first unrecognized option, among the options
        of this parser and of the command given (`run`, `explore`...)."""
        if not message.startswith("unrecognized arguments: "):
            return ""
        given = next((w.partition("=")[0] for w in message.split()[2:] if w.startswith("--")), "")
        parsers: list[argparse.ArgumentParser] = [self]
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers += [p for name, p in action.choices.items() if name in getattr(self, "_given", ())[:1]]
        return did_you_mean(given, [o for p in parsers for a in p._actions for o in a.option_strings]) if given else ""


def _parser() -> argparse.ArgumentParser:
    from ckpt_harness import targets
    from ckpt_harness.config import SETTINGS, ExplorePlan, VerifyPlan, add_arguments, option_type, settings_of

    parser = _Parser(
        prog="ckpt-harness",
        description="Prove that distributed training checkpoints survive the real world.",
    )
    sub = parser.add_subparsers(metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser("run", help="verify that a job (or, with --script, a script under torchrun) resumes "
                                     "bitwise from every save")
    _target_options(run, "run")
    add_arguments(run, VerifyPlan)  # how its cases run
    run.add_argument("--case", action="append",
                     help="only this case (golden, resume@K; restart@K with --max-restarts; a script's between@K, "
                          "stopped after K optimizer steps between saves); repeatable")
    run.add_argument("--workdir", type=Path, help="keep every run's checkpoints and logs here")
    _keep_option(run)
    run.add_argument("--quiet", action="store_true", help="no progress lines")
    _json_option(run)
    _baseline_options(run, write=True, cases=True)
    run.set_defaults(command=_run)

    bisect = sub.add_parser("bisect", help="find the first release of a package whose verdict on a script changed, "
                                           "by cause: each probe a run under that release (--pins)")
    _target_options(bisect, "run")
    bisect.add_argument("--package", required=True, help="the package whose releases are bisected, e.g. lightning")
    bisect.add_argument("--good", required=True, metavar="VERSION", help="a release whose verdict is the reference")
    bisect.add_argument("--bad", required=True, metavar="VERSION",
                        help="a later release whose verdict changed (it is run first, to see that it did)")
    bisect.add_argument("--releases", type=_split, metavar="V,V,...",
                        help="the releases in order, from --good to --bad (default: those pip finds, oldest first)")
    bisect.add_argument("--case", action="append", help="only this case in each probe (e.g. resume@2, upgrade@2 "
                                                        "with --upgrade-from); repeatable")
    bisect.add_argument("--workdir", type=Path, help="keep every probe's runs here, a directory per release")
    _keep_option(bisect)
    bisect.add_argument("--quiet", action="store_true", help="no progress lines")
    bisect.set_defaults(command=_bisect)

    explore = sub.add_parser("explore", help="break one save at every point with every fault kind; judge each resume "
                                             "(of a job, or with --script of a script under torchrun)")
    _target_options(explore, "explore")
    explore.add_argument("--case", action="append", help="only this case (as named in repro lines); repeatable")
    explore.add_argument("--workdir", type=Path, help="keep every run's checkpoints, traces and logs here")
    _keep_option(explore)
    explore.add_argument("--quiet", action="store_true", help="no progress lines")
    _json_option(explore)
    _baseline_options(explore, write=True, cases=True)
    explore.add_argument("--all-failures", action="store_true",
                         help="print every failing case in full (default: each cause once, with its count, one "
                              "example, its repro line and the usual fix)")
    explore.set_defaults(command=_explore)

    trace = sub.add_parser("trace", help="record a clean run and print the operations of one save per rank")
    _target_options(trace, "explore", only=TRACE_SETTINGS)
    trace.add_argument("--workdir", type=Path, help="keep the run's checkpoints, traces and logs here")
    trace.add_argument("--timeline", type=Path, metavar="PATH",
                       help="also write the run as a Chrome trace file here (every rank's phases, collectives and "
                            "file operations), for ui.perfetto.dev")
    trace.set_defaults(command=_trace)

    script = targets.named("script").configs["run"]
    script_timeout = settings_of(script)["timeout"].default
    matrix = sub.add_parser("matrix", help="run the scenario catalogue against jobs; write the compatibility "
                                           "matrix as Markdown and JSON")
    matrix.add_argument("--job", action="append",
                        help="a job to run (module:Class or registered name), with the axes it trains along in "
                             "brackets: 'dcp[s3]', 'dcp[bf16,adagrad]' (docs/matrix-axes.md); repeatable, a row "
                             "each (default: every registered job); an axis is a row's, never the matrix's: "
                             "--storage and the other axis options are refused with the rows to give")
    matrix.add_argument("--script", action="append", dest="script",
                        help=SETTINGS["script"].help + "; repeatable, a row each, all at one --nproc-per-node and "
                             f"--nnodes (instead of --job; --timeout is then {script_timeout:g} s unless given)")
    add_arguments(matrix, script, only=(*MATRIX_SCRIPT_SETTINGS, "max_restarts"))  # the last one refused
    matrix.add_argument(SETTINGS["pins"].option, dest="pins", action="append", type=option_type(SETTINGS["pins"]),
                        default=argparse.SUPPRESS, metavar="PINS",
                        help=SETTINGS["pins"].help + "; repeatable: a row per script and set of releases, named by "
                                                     "both (releases as an axis)")
    _axis_options_refused(matrix)
    _other_kinds_rows(matrix)
    _scenario_options(matrix)
    matrix.add_argument("--scenarios", default="", help="comma-separated scenario names or patterns (default: all)")
    matrix.add_argument("--out", type=Path,
                        help="directory for matrix.md and matrix.json (default: ./ckpt-matrix; with --resume, "
                             "the resumed matrix's)")
    matrix.add_argument("--workdir", type=Path, help="keep every run's checkpoints and logs here")
    matrix.add_argument("--shard", metavar="K/N",
                        help="run only shard K (from 1) of N: the (job, scenario) runs split N ways, the same way on "
                             "every machine; --merge puts the shards' matrix.json files together (docs/ci-recipes.md)")
    matrix.add_argument("--costs", type=Path, metavar="MATRIX_JSON",
                        help="with --shard: balance the shards by the time each (job, scenario) took in this "
                             "earlier matrix.json (default: every run costs the same)")
    matrix.add_argument("--merge", nargs="+", type=Path, metavar="MATRIX_JSON",
                        help="write the whole matrix of every shard's matrix.json (or its directory) into --out, "
                             "as one run of it would; refuses shards of different settings, versions or catalogues, "
                             "and overlapping or missing shards")
    matrix.add_argument("--resume", type=Path, metavar="DIR",
                        help="finish a matrix that SIGINT or SIGTERM stopped: run only the (job, scenario) runs "
                             "missing from DIR/matrix.json (or that file), with its jobs, scenarios and settings, and "
                             "write the whole matrix (into DIR unless --out is given)")
    matrix.add_argument("--quiet", action="store_true", help="no progress lines")
    matrix.add_argument("--fail-on", type=_fail_on, default=DEFAULT_FAIL_ON, metavar="VERDICT[,VERDICT...]",
                        help="exit non-zero if a cell has one of these verdicts: fail, unknown, error (1, 4, 3) "
                             f"(default: {DEFAULT_FAIL_ON}: failing cells of a framework are findings to document; "
                             "give fail,unknown,error to gate a build on them); in place of fail, the least "
                             "severity of a failing state comparison that counts: "
                             f"{', '.join(s.option for s in Severity)} (a failure that is not a state "
                             "comparison's always counts)")
    matrix.add_argument("--html", type=Path, metavar="PATH",
                        help="also write the matrix as one self-contained HTML page here: the grid, each cell's "
                             "scenarios, each scenario's cases, each failing case's timeline (whose trace files go "
                             "into timelines/ of --out)")
    _baseline_options(matrix, write=True)
    matrix.set_defaults(command=_matrix)

    scenario = sub.add_parser("scenario", help="run one catalogue scenario against a job or a script (what matrix "
                                               "repro lines call)")
    scenario.add_argument("name", help="scenario name (see `ckpt-harness list`)")
    _target_options(scenario, "run", only=BENCH_TARGET_SETTINGS)
    scenario.add_argument("--file", action="append", type=Path,
                          help="scenario file or directory to use instead of the built-in catalogue; repeatable")
    add_arguments(scenario, ExplorePlan, only=("parallel", "max_cases", "timelines"))
    scenario.add_argument("--case", action="append", help="only this case (as named in repro lines); repeatable")
    scenario.add_argument("--shard", metavar="K/N",
                          help="run only part K (from 1) of N of the scenario's cases (a faults scenario's), the "
                               "same split on every machine; write each part's --json and put them together with "
                               "--merge (docs/ci-recipes.md)")
    scenario.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                          help="the JSON reports of shards 1..N of this scenario (--shard K/N --json FILE) as the "
                               "one report an unsharded run gives; refuses shards of other settings or case lists, "
                               "and shards twice or missing")
    scenario.add_argument("--workdir", type=Path, help="keep every run's checkpoints and logs here")
    _keep_option(scenario)
    scenario.add_argument("--quiet", action="store_true", help="no progress lines")
    _json_option(scenario)
    _baseline_options(scenario)
    scenario.set_defaults(command=_scenario)

    listing = sub.add_parser("list", help="list the registered jobs, checks, fault kinds, properties and scenarios")
    listing.set_defaults(command=_list)

    ci = sub.add_parser("summary", help="what CI shows of a run's JSON (a matrix.json, or a report's --json): a "
                                        "Markdown step summary, annotations, a repro and an issue draft per finding")
    ci.add_argument("json", type=Path, metavar="JSON", help="matrix.json, or the --json of run, explore or scenario")
    ci.add_argument("--annotations", action="store_true",
                    help="print a GitHub annotation per finding, at the file and line of the workspace it names: "
                         "::error for what fails the command, ::notice for what a baseline expects or is fixed, "
                         "::warning for a matrix cell --fail-on does not count")
    ci.add_argument("--fail-on", type=_fail_on, default=DEFAULT_FAIL_ON, metavar="VERDICT[,VERDICT...]",
                    help=f"a matrix.json without a baseline: the --fail-on the matrix ran with, which decides "
                         f"which cells' annotations are errors (default: {DEFAULT_FAIL_ON})")
    ci.add_argument("--repro-dir", type=Path, metavar="DIR",
                    help="write per finding DIR/NN-name/repro.sh (runs from anywhere) and ISSUE.md")
    ci.add_argument("--root", type=Path, default=Path("."), metavar="DIR",
                    help="the repository root: repro lines run from it, paths under it are written relative "
                         "(default: the current directory)")
    ci.set_defaults(command=_summary)
    return parser


def _summary(args: argparse.Namespace) -> int:
    """`summary`: to $GITHUB_STEP_SUMMARY when set (appended, as GitHub
    expects), else to stdout; annotations to stdout."""
    from ckpt_harness.present import ci

    try:
        data = json.loads(args.json.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {args.json}: {getattr(exc, 'strerror', None) or exc}; give a matrix.json "
                         "or the --json of run, explore or scenario") from None
    if not isinstance(data, dict) or "kind" not in data:
        raise UsageError(f"{args.json}: not a matrix.json or a report's --json")
    root = args.root.resolve()
    counts = _cell_rule(args.fail_on)
    text = ci.summary(data, root=root, cell_counts=counts)
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as f:
            f.write(text)
        print(f"step summary: {len(text.encode()) / 1024:.0f} KiB appended to {target}")
    else:
        print(text)
    found = ci.findings(data, counts)
    if args.annotations:
        for line in ci.annotations(found, root, data):
            print(line)
    if args.repro_dir is not None:
        written = ci.write_repros(found, args.repro_dir, root, data.get("versions", {}))
        print(f"wrote {len(written)} repro{'s' * (len(written) != 1)} and issue drafts under {args.repro_dir}")
    return EXIT_OK


def _cell_rule(fail_on: "FailOn"):
    """`--fail-on` as `present.ci` asks it of a matrix.json's cell (a dict):
    does this cell fail the command, as `_matrix_exit` decides."""

    @dataclasses.dataclass(frozen=True)
    class _Cell:
        verdict: Verdict
        severity: str

    return lambda cell: fail_on.hits(_Cell(Verdict(cell["verdict"]), cell.get("severity") or ""))


def _target_options(p: argparse.ArgumentParser, command: str, only: Optional[Sequence[str]] = None) -> None:
    """The options of every kind of target for `command`: the one that picks
    each kind (--job, --script, ...) and the settings of its config (with
    `only`, those of them), each once."""
    from ckpt_harness import targets
    from ckpt_harness.config import add_arguments, settings_of

    kinds = targets.kinds()
    added: set[str] = set()
    for kind in kinds:
        cls = kind.configs[command]
        takes = settings_of(cls)
        if kind.option not in takes:
            p.add_argument(kind.flag, dest=kind.option, help=f"{kind.help}; or give "
                           + " or ".join(other.flag for other in kinds if other is not kind))
        add_arguments(p, cls, only=[name for name in takes
                                    if (only is None or name in only or name == kind.option) and name not in added])
        added |= set(takes) | {kind.option}
    # A setting two kinds share with different defaults (script mode's longer timeout) says both.
    first = settings_of(kinds[0].configs[command])
    for kind in kinds[1:]:
        for name, setting in settings_of(kind.configs[command]).items():
            if name in first and setting.default != first[name].default:
                action = next((a for a in p._actions if a.dest == name), None)
                if action is not None and action.help:
                    action.help = action.help.rstrip(")") + f"; with {kind.flag}: {setting.default})"


def _chosen(args: argparse.Namespace, command: str, config: str):
    """The kind of target the options pick, and the config they make of it for
    `config` ("run", "explore"); UsageError naming the options to give."""
    from ckpt_harness import targets
    from ckpt_harness.config import values_from

    kind = targets.chosen(vars(args), command)
    return kind, lambda: targets.config_of(kind, config, {**values_from(args, kind.configs[config]),
                                                     kind.option: getattr(args, kind.option)})


#: The settings `trace` takes: what shapes a run (of any kind of target) and picks the save.
TRACE_SETTINGS = ("world_size", "steps", "save_every", "keep_last", "overwrite", "seed", "timeout", "nodes", "save",
                  "nproc_per_node", "nnodes", *axes.NAMES)
#: The settings of a bench's target (a job at a world size, a script at a layout) that `scenario` takes.
BENCH_TARGET_SETTINGS = ("world_size", "timeout", "launcher", "cold_start", "script_args", "nproc_per_node", "nnodes",
                         "checkpoint_layout", "keeps_best", "resume_args", *axes.NAMES)
#: The settings of a bench (a job at a world size) that `matrix` takes.
BENCH_SETTINGS = ("world_size", "timeout", "launcher", "cold_start", "parallel")
#: Those of them that make a --job row (the rest, `parallel`, is how the matrix runs).
JOB_ROW_SETTINGS = ("world_size", "timeout", "launcher", "cold_start")
#: The script-mode settings `matrix --script` takes besides --script: one
#: layout for every row (--max-restarts is refused: a matrix row, like
#: `explore --script`, runs each resume itself).
MATRIX_SCRIPT_SETTINGS = ("script_args", "nproc_per_node", "nnodes", "checkpoint_layout", "keeps_best",
                          "resume_args", "upgrade_from", "find_links", "envs_dir")
#: The kinds of target whose matrix rows have options of their own above (--job, --script); another
#: installed kind's rows come by its option, with the settings given that its config takes.
BUILT_IN_ROWS = ("job", "script")
#: Cell verdicts `matrix --fail-on` may name.
GATED = (Verdict.FAIL, Verdict.UNKNOWN, Verdict.ERROR)
#: An incomplete matrix is the command's own failure; a framework's failing
#: cells are what it documents (every built-in framework has some).
DEFAULT_FAIL_ON = "unknown,error"


@dataclasses.dataclass(frozen=True)
class FailOn:
    """`matrix --fail-on`: the cell verdicts that fail the command, and for a
    failing cell whose failure is a state comparison's, the least severity
    that does (`causes.Severity`: `--fail-on values` lets a resume that lost
    only RNG state or a data position through, and fails on everything else
    a FAIL is: diverged weights, missing keys, a hang, a torn file)."""

    verdicts: tuple[Verdict, ...]
    at_least: Optional["Severity"] = None

    def hits(self, cell) -> bool:
        if cell.verdict not in self.verdicts:
            return False
        if cell.verdict is not Verdict.FAIL or self.at_least is None or not cell.severity:
            return True
        return Severity[cell.severity.upper()] >= self.at_least

    def __str__(self) -> str:
        names = [v.value for v in self.verdicts if v is not Verdict.FAIL or self.at_least is None]
        return ",".join([*([self.at_least.option] if self.at_least is not None else []), *names])


def _fail_on(text: str) -> FailOn:
    names = _split(text)
    severities = {s.option: s for s in Severity}
    wrong = [n for n in names if n not in [v.value for v in GATED] and n not in severities]
    if wrong or not names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give comma-separated verdicts from fail, unknown, error, or in place of fail the least "
            f"severity of a failing state comparison that counts, from {', '.join(severities)}")
    least = [severities[n] for n in names if n in severities]
    verdicts = {Verdict(n) for n in names if n not in severities} | ({Verdict.FAIL} if least else set())
    return FailOn(tuple(v for v in GATED if v in verdicts), min(least) if least else None)


def _json_option(p: argparse.ArgumentParser) -> None:
    """The report's outputs besides the text: JSON for machines, HTML and timelines for people."""
    p.add_argument("--json", type=Path, metavar="PATH",
                   help="also write the report as JSON here (schema: docs/ci.md, \"Output for CI\")")
    p.add_argument("--html", type=Path, metavar="PATH",
                   help="also write the report as one self-contained HTML page here: every case, its fault plan, "
                        "repro line, state differences, stacks and timeline")
    p.add_argument("--timeline-dir", type=Path, metavar="DIR",
                   help="write the timeline of each case that did not pass (every case with --timelines all) here, "
                        "one Chrome trace file each, for ui.perfetto.dev (default: timelines/ in the kept work "
                        "directory)")


def _scenario_options(p: argparse.ArgumentParser) -> None:
    from ckpt_harness import targets
    from ckpt_harness.config import ExplorePlan, add_arguments

    p.add_argument("--file", action="append", type=Path,
                   help="scenario file or directory to use instead of the built-in catalogue; repeatable")
    add_arguments(p, targets.named("job").configs["run"], only=JOB_ROW_SETTINGS)
    add_arguments(p, ExplorePlan, only=("parallel",))


def _parallel(args: argparse.Namespace) -> int:
    from ckpt_harness.config import SETTINGS

    return getattr(args, "parallel", SETTINGS["parallel"].default)


def _catalogue(args: argparse.Namespace):
    from ckpt_harness.catalogue.scenario_files import catalogue

    return catalogue(args.file)


def _matrix(args: argparse.Namespace) -> int:
    from ckpt_harness.catalogue.shards import Shard

    # options that cannot go together, before anything heavy is imported
    shard = Shard.parse(args.shard) if args.shard is not None else None
    _matrix_mode(args)
    from ckpt_harness.catalogue.matrix import MatrixInterrupted, markdown
    from ckpt_harness.catalogue.request import MatrixRequest, finish

    request = MatrixRequest(
        rows=[] if args.merge or args.resume else _matrix_rows(args),
        job_settings=_job_settings(args),
        scenarios=_split(args.scenarios), files=args.file or (), parallel=_parallel(args), shard=shard,
        costs=args.costs, resume=args.resume, merge=args.merge or (), workdir=args.workdir, out=args.out,
        baseline=args.baseline, writes=[path for path in (args.html, args.write_baseline) if path is not None])
    baseline = request.check()
    out = request.destination
    progress = _progress(args)
    try:
        matrix, catalogue = request.make(progress)
    except MatrixInterrupted as stop:
        progress.close()
        return _matrix_stopped(stop, out)
    finally:
        progress.close()
    matrix, md, js = finish(matrix, out, baseline, catalogue)
    print(markdown.summary(matrix))
    print(f"wrote {md} and {js}")
    if args.html is not None:
        from ckpt_harness.present import html

        started = time.monotonic()
        html.write(html.matrix_page(matrix, out), args.html)
        print(f"HTML report: {args.html} ({args.html.stat().st_size / 2**20:.1f} MB in "
              f"{time.monotonic() - started:.1f} s)")
    _write_matrix_baseline(args, matrix, baseline)
    if matrix.gating is None:
        return _matrix_exit(matrix, args.fail_on)
    print(matrix.gating.explain())
    return exit_code(matrix.gating.verdict)


def _matrix_stopped(stop, out: Path) -> int:
    """SIGINT or SIGTERM stopped the matrix: write what finished, say how to finish it."""
    from ckpt_harness.catalogue.request import finish

    try:
        matrix, md, js = finish(stop.matrix, out)
    except UsageError as exc:
        print(f"\nckpt-harness: interrupted; {exc}", file=sys.stderr)
        return interrupted_exit(stop)
    ran = len(matrix.tasks) - len(matrix.missing)
    print(f"\nckpt-harness: interrupted by {matrix.stopped_by}: wrote the {ran} of {len(matrix.tasks)} (job, scenario) "
          f"runs that finished to {md} and {js} (marked incomplete); `ckpt-harness matrix --resume {out}` runs the "
          f"other {len(matrix.missing)}", file=sys.stderr)
    return interrupted_exit(stop)


def _axis_options_refused(p: argparse.ArgumentParser) -> None:
    """The axis options (--storage, --precision...) on `matrix`, unlisted,
    only to be refused with the rows that say them (`_axes_in_rows`): an axis
    is a row's (``dcp[s3]``, one job at one value), and one value for every
    row would refuse the rows that do not train with it, every registered
    job included. Unknown to argparse, they were refused as unrecognized,
    which told nothing of the row form."""
    from ckpt_harness import targets
    from ckpt_harness.config import add_arguments

    add_arguments(p, targets.named("job").configs["run"], only=axes.NAMES)
    for action in p._actions:
        if action.dest in axes.NAMES:
            action.help = argparse.SUPPRESS


def _axes_in_rows(args: argparse.Namespace) -> Optional[str]:
    """What to give instead of matrix's axis options (`_axis_options_refused`):
    the --job rows with those axes in their brackets; None when none was given."""
    from ckpt_harness.config import SETTINGS

    given = {name: getattr(args, name) for name in axes.NAMES if hasattr(args, name)}
    if not given:
        return None
    options = " ".join(SETTINGS[name].option if value is True else f"--no-{SETTINGS[name].option[2:]}"
                       if value is False else f"{SETTINGS[name].option} {value}" for name, value in given.items())
    doc = "docs/matrix-storage.md" if "storage" in given else "docs/matrix-axes.md"
    if args.script:
        why = ("matrix --script runs on local storage. A script on a bucket: `ckpt-harness run --script "
               "'train.py --out {ckpt_url}' --storage s3` (explore and scenario take it too)" if "storage" in given
               else "a script trains as its own arguments say")
        return f"matrix {options}: an axis is a job row's ({_rows(['dcp'], given)}); a --script row takes none: {why}"
    return (f"matrix {options}: an axis is a row's, one job at one value: give {_rows(args.job or ['dcp'], given)}"
            f"{'' if args.job else ' (a row per job)'}, beside the rows at the default to compare them ({doc})")


def _rows(jobs: Sequence[str], given: dict) -> str:
    """The --job options of `jobs` with the `given` axis values."""
    return " ".join(f"--job '{row}'" if "[" in row else f"--job {row}" for row in (_with_axes(j, given) for j in jobs))


def _with_axes(row: str, given: dict) -> str:
    """`row` (``dcp``, ``dcp[bf16]``) with the `given` axis values in its brackets."""
    from ckpt_harness.errors import ConfigError

    try:
        job, values = axes.split_row(row)
    except ConfigError:
        return row
    return axes.row_name(job, axes.Axes.of({**values, **given}))


def _matrix_mode(args: argparse.Namespace) -> None:
    """Refuse options that do not go together: --merge only reads matrix.json
    files, --resume takes its jobs, scenarios and settings from the matrix it
    finishes, --costs balances shards; an axis option (--storage s3) is a
    row's (`_axes_in_rows`)."""
    from ckpt_harness import targets
    from ckpt_harness.config import SETTINGS

    instead = _axes_in_rows(args)
    if instead:
        raise UsageError(instead)

    run = {**{kind.flag: getattr(args, kind.option, None) for kind in targets.kinds()},
           "--scenarios": args.scenarios, "--file": args.file,
           "--shard": args.shard, "--costs": args.costs,
           **{SETTINGS[name].option: True for name in (*BENCH_SETTINGS, *MATRIX_SCRIPT_SETTINGS, "max_restarts", "pins")
              if hasattr(args, name)}}
    given = [option for option, value in run.items() if value]
    if args.merge:
        extra = given + (["--resume"] if args.resume else []) + (["--workdir"] if args.workdir else [])
        if extra:
            raise UsageError(f"--merge only puts the shards' matrix.json files together: leave out {', '.join(extra)}")
    elif args.resume:
        if given:
            raise UsageError(f"--resume runs the rest of a matrix with its own jobs, scenarios and settings (and "
                             f"shard): leave out {', '.join(given)}")
    elif args.costs and not args.shard:
        raise UsageError("--costs balances the shards of --shard K/N: give --shard too, or leave out --costs")


def _matrix_rows(args: argparse.Namespace) -> list[dict]:
    """The settings of each row, by name (`catalogue.matrix.run.matrix_rows`
    makes them targets): each value of the one kind's option (--job,
    --script, ...: repeatable, a row each) with the settings given that its
    config takes. None given: the jobs the catalogue applies to, with the
    settings given (`MatrixRequest.job_settings`). Another kind's options are
    refused (`targets.chosen`) before anything heavy is imported; a row's own
    settings are checked as it is made (`catalogue.matrix.run.matrix_rows`)."""
    from ckpt_harness import targets
    from ckpt_harness.config import settings_of

    given = {name: value for name, value in vars(args).items() if value is not None}
    if not any(given.get(kind.option) for kind in targets.kinds()):
        targets.chosen({**given, "job": "(every job the scenarios apply to)"}, "run")  # what a job row refuses
        return []
    kind = targets.chosen(given, "run")
    takes = [name for name in settings_of(kind.configs["run"]) if name in given and name not in (kind.option, "pins")]
    releases = given.get("pins") or [None]  # repeatable: releases as an axis, a row each
    return [{kind.option: value, **{name: given[name] for name in takes}, **({"pins": pins} if pins else {})}
            for value in given[kind.option] for pins in releases]


def _other_kinds_rows(p: argparse.ArgumentParser) -> None:
    """A repeatable option per installed kind of target beyond jobs and scripts (``--callable``): a row each."""
    from ckpt_harness import targets

    for kind in targets.kinds():
        if kind.name not in BUILT_IN_ROWS:
            p.add_argument(kind.flag, dest=kind.option, action="append", help=f"{kind.help}; repeatable, a row each")


def _job_settings(args: argparse.Namespace) -> dict:
    return {name: getattr(args, name) for name in JOB_ROW_SETTINGS if hasattr(args, name)}


def _matrix_exit(matrix, fail_on: FailOn) -> int:
    """The exit code of the cells `--fail-on` counts (saying which); 0 if none."""
    from ckpt_harness.verdict import fold

    hit = [c for c in matrix.cells() if fail_on.hits(c)]
    if not hit:
        return EXIT_OK
    shown = ", ".join(f"{c.job} · {c.property}: {c.verdict.value}{f' ({c.severity})' if c.severity else ''}"
                      for c in hit[:5])
    more = f" and {len(hit) - 5} more" if len(hit) > 5 else ""
    print(f"--fail-on {fail_on}: {len(hit)} cell{'s' * (len(hit) > 1)} "
          f"({shown}{more}); see their reasons above", file=sys.stderr)
    return exit_code(fold(c.verdict for c in hit))


def _scenario(args: argparse.Namespace) -> int:
    from ckpt_harness import targets
    from ckpt_harness.catalogue.bench import Bench, refuse_budget_and_shard, refuse_split
    from ckpt_harness.catalogue.scenario import select
    from ckpt_harness.catalogue.shards import Shard
    from ckpt_harness.config import SETTINGS

    if args.merge:
        return _scenario_merge(args)
    shard = Shard.parse(args.shard) if args.shard is not None else None
    max_cases = getattr(args, "max_cases", SETTINGS["max_cases"].default)
    refuse_budget_and_shard(max_cases, shard)
    _, config = _chosen(args, "run", "run")
    parallel = _parallel(args)
    progress = _progress(args)
    made: list = []

    def produce(workdir: Path):
        baseline = _load_baseline(args)
        catalogue = _catalogue(args)
        (scenario,) = select(catalogue, [args.name])
        if shard is not None:
            refuse_split(scenario)
        target = targets.of(config())
        made.append(target)
        target.warm(parallel)
        bench = Bench(target, workdir, parallel=parallel, progress=progress,
                      timelines=getattr(args, "timelines", SETTINGS["timelines"].default), shard=shard,
                      max_cases=max_cases)
        result = bench.run(scenario, args.case)
        if baseline is None:
            return result
        from ckpt_harness.catalogue.expectations import Checked

        return Checked(result, baseline.gate([result], scenarios=[scenario.name],
                                             catalogue=[s.name for s in catalogue]))

    def as_report(out):
        target = made[0]
        settings = {"world_size": target.world_size, "timeout": target.timeout, "parallel": parallel,
                    **{k: v for k, v in target.values.items() if k == "launcher"}}
        return getattr(out, "result", out).report(target.world_size, settings)

    return _report(args, produce, progress, as_report)


def _scenario_merge(args: argparse.Namespace) -> int:
    """`scenario NAME --merge JSON...`: the shards' reports as one."""
    from ckpt_harness.catalogue.scenario import load_part, merge_parts, select

    if args.shard is not None:
        raise UsageError("--merge puts finished shards together: leave out --shard")
    for path in (args.json, args.html):
        if path is not None:
            check_writable(path)
    loaded = [(str(path), *load_part(path)) for path in args.merge]
    first_source, _, run = loaded[0]
    for source, _, other in loaded[1:]:
        if _but_parallel(other) != _but_parallel(run):
            raise UsageError(f"{source} ran with other settings than {first_source} ({other} and {run}): "
                             f"the shards of one run share them")
    (scenario,) = select(_catalogue(args), [args.name])
    merged = merge_parts(scenario, [(source, result) for source, result, _ in loaded])
    report = merged.report(run["world_size"], run["settings"])
    print(report.explain())
    if args.json is not None:
        _write_json(args.json, report.to_json())
    if args.html is not None:
        _write_html(args.html, report)
    return exit_code(report.verdict)


def _but_parallel(run: dict) -> dict:
    """A shard's run settings but `parallel`, each machine's own."""
    return {**run, "settings": {k: v for k, v in run["settings"].items() if k != "parallel"}}


# -- regression gating (ckpt_harness.catalogue.expectations) ----------------------------------------
def _baseline_options(p: argparse.ArgumentParser, write: bool = False, cases: bool = False) -> None:
    """`cases`: the command's baseline names cases (run, explore), not scenarios."""
    if cases:
        p.add_argument("--baseline", type=Path, metavar="FILE",
                       help="an expectations .toml whose entries name cases (case = \"delay@r0:after_save6#*\", "
                            "patterns allowed): the failures it expects are shown as expected and do not fail the "
                            "command; a new or worse one does (exit 1, 3 or 4 as its verdict)")
    else:
        p.add_argument("--baseline", type=Path, metavar="FILE",
                       help="a previous matrix.json or an expectations .toml: the failures it expects are shown as "
                            "expected and do not fail the command; a new or worse one does (exit 1, 3 or 4 as its "
                            "verdict)" + (", whatever --fail-on says" if write else ""))
    if write:
        p.add_argument("--write-baseline", type=Path, metavar="FILE",
                       help="write an expectations .toml expecting every failure of this run (to start a baseline)")


def _load_baseline(args: argparse.Namespace):
    from ckpt_harness.catalogue.expectations import load

    return load(args.baseline) if args.baseline else None


def _write_matrix_baseline(args: argparse.Namespace, matrix, baseline) -> None:
    """Write the expectations file `--write-baseline` asks for (the reasons of
    `baseline`'s entries kept)."""
    from ckpt_harness.catalogue.expectations import expectations_toml

    if args.write_baseline:
        note = (f"from `ckpt-harness matrix` at world size {matrix.world_size} on {matrix.date}: "
                + ", ".join(f"{k} {v}" for k, v in matrix.versions.items()))
        args.write_baseline.parent.mkdir(parents=True, exist_ok=True)
        args.write_baseline.write_text(expectations_toml(matrix.results, note, keep=baseline))
        failures = sum(not r.verdict.ok for r in matrix.results)
        print(f"wrote {args.write_baseline}: {failures} expected failure{'s' * (failures != 1)}; "
              "replace each reason with why it is known")


def _gate_cases(args: argparse.Namespace, report, baseline):
    """`_gate_matrix` for the cases of a run or explore report: the `Gating`
    (printed), or None without a baseline."""
    from ckpt_harness.catalogue.expectations import CASE, case_verdicts, expectations_toml

    cases = case_verdicts(report.job, report.results)
    if args.write_baseline:
        command = "run" if report.kind == "verify" else report.kind
        note = f"from `ckpt-harness {command}` at world size {report.world_size}"
        args.write_baseline.parent.mkdir(parents=True, exist_ok=True)
        args.write_baseline.write_text(expectations_toml(cases, note, keep=baseline, key=CASE))
        failures = sum(not c.verdict.ok for c in cases)
        print(f"wrote {args.write_baseline}: {failures} expected failure{'s' * (failures != 1)}; "
              "replace each reason with why it is known")
    if baseline is None:
        return None
    # a run narrowed by --case says nothing of the entries about other cases
    narrowed = [e.scenario for e in baseline.expectations] if args.case else ()
    gating = baseline.gate(cases, jobs=[report.job], scenarios=[c.scenario for c in cases], catalogue=narrowed)
    print(gating.explain())
    return gating


def _progress(args: argparse.Namespace):
    """The command's progress printer, which also prints the heartbeat lines
    of runs that wait on their deadline (`launch.heartbeat`); `--quiet` neither."""
    from ckpt_harness.launch import heartbeat
    from ckpt_harness.progress import Progress

    progress = Progress(quiet=args.quiet)
    heartbeat.report_to(progress.line)
    return progress


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _explore(args: argparse.Namespace) -> int:
    from ckpt_harness import targets
    from ckpt_harness.pipeline.explore import run_exploration

    # --faults alone means those faults only, and --corruptions alone those corruptions only
    if hasattr(args, "faults") != hasattr(args, "corruptions"):
        args.corruptions = getattr(args, "corruptions", ())
        args.faults = getattr(args, "faults", ())
    _, config = _chosen(args, "explore", "explore")
    progress = _progress(args)

    def produce(workdir: Path):
        target, plan = targets.split(config())  # bad settings fail before the fork server starts
        target.warm(plan.parallel)
        return run_exploration(target, plan, workdir, args.case, progress)

    return _report(args, produce, progress, gate_cases=True)


def _trace(args: argparse.Namespace) -> int:
    from ckpt_harness import targets
    from ckpt_harness.inject.trace import describe_phase
    if args.timeline is not None:
        check_writable(args.timeline)
    with _workdir(args) as workdir:
        from ckpt_harness import oracle
        from ckpt_harness.pipeline.explore import trace

        _, config = _chosen(args, "explore", "explore")
        target, plan = targets.split(config())
        target.warm(1)
        run, phase = trace(target, plan, workdir)
    if args.timeline is not None:
        from ckpt_harness.records.timeline import of_runs

        of_runs("trace", [run]).write(args.timeline)
        print(f"timeline of the run: {args.timeline} (open in ui.perfetto.dev)")
    problem = oracle.health(run)
    if phase is None:
        print(f"the {target.noun} {target.name} made no save whose step the harness could tell")
    else:
        print(f"{phase} of {target.noun} {target.name} at world size {len(run.ranks)}:")
        for r in run.ranks:
            print(f"rank {r.rank}: {describe_phase(r.events, phase)}")
        from ckpt_harness.phase import after_save, background

        step = phase.rpartition(" ")[2]
        behind = background(phase)  # what the save handed to another thread (an async save's writer)
        if any(e.phase == behind for e in run.events()):
            print(f"{behind}, the work save {step} handed to a background thread or process:")
            for r in run.ranks:
                print(f"rank {r.rank}: {describe_phase(r.events, behind)}")
        after = after_save(int(step))  # after the last save: the end of training's work on checkpoints
        if any(e.phase == after and e.point is not None for e in run.events()):
            print(f"{after}, the work after the last save (explore breaks and delays it too):")
            for r in run.ranks:
                print(f"rank {r.rank}: {describe_phase(r.events, after) or '(nothing)'}")
    if problem is not None:
        print(f"\nthe run did not finish: {problem.summary}\n{problem.details}")
        print(f"\ntraces and rank logs kept in {workdir}")
        return EXIT_FINDINGS
    _discard(args, workdir)
    return EXIT_OK if phase is not None else EXIT_UNDECIDED


def _run(args: argparse.Namespace) -> int:
    from ckpt_harness import targets
    from ckpt_harness.config import VerifyPlan, settings_of
    from ckpt_harness.pipeline.verify import run_verification

    _, config = _chosen(args, "run", "run")
    progress = _progress(args)

    plan = VerifyPlan(**{name: getattr(args, name) for name in settings_of(VerifyPlan) if hasattr(args, name)})

    def produce(workdir: Path):
        target = targets.of(config())
        target.warm(1)
        return run_verification(target, workdir, args.case, progress=progress, timelines=plan.timelines,
                                flake=plan.flake)

    return _report(args, produce, progress, gate_cases=True)


def _bisect(args: argparse.Namespace) -> int:
    from ckpt_harness import targets
    from ckpt_harness.config import settings_of
    from ckpt_harness.pipeline import bisect
    from ckpt_harness.pipeline.verify import run_verification

    kind, config = _chosen(args, "run", "run")
    if "pins" not in settings_of(kind.configs["run"]):
        raise UsageError(f"bisect runs the target under each release (--pins), and {kind.flag} runs with the "
                         "harness's own releases: give the training as a script (--script)")
    target = targets.of(config())
    releases = bisect.in_range(args.package, args.good, args.bad, args.releases, target.values.get("find_links", ""))

    def verify(probed, root: Path):
        probed.warm(1)
        progress = _progress(args)  # each probe's own count of its cases
        try:
            return run_verification(probed, root, args.case, progress=progress)
        finally:
            progress.close()

    with _workdir(args) as workdir:
        found = bisect.bisect(target, args.package, releases, workdir, verify,
                              say=lambda line: None if args.quiet else print(line, file=sys.stderr, flush=True))
    print(found.explain())
    code = EXIT_ERROR if found.stopped else EXIT_FINDINGS if found.culprit else EXIT_OK
    return _kept(args, workdir, code)


def _report(args: argparse.Namespace, produce, progress=None, as_report=lambda report: report,
            gate_cases: bool = False) -> int:
    """Run `produce(workdir)`, print its report (or scenario result) and write
    it as JSON if asked (`as_report` makes a `Report` of it); findings exit 1
    (bad input raises, for `main` to answer). `gate_cases`: judge the report's cases against --baseline
    and write --write-baseline (run, explore)."""
    # a workdir, output path or baseline that cannot be used is refused before anything starts
    for path in (args.json, args.html):
        if path is not None:
            check_writable(path)
    if args.timeline_dir is not None:
        check_writable(args.timeline_dir, directory=True)
    baseline = _load_baseline(args) if gate_cases else None
    if gate_cases and args.write_baseline:
        check_writable(args.write_baseline)
    try:
        with _workdir(args) as workdir:
            report = produce(workdir)
    finally:
        if progress is not None:
            progress.close()
    report, wrote = _timelines(args, report, workdir)
    print(report.explain(every=True) if getattr(args, "all_failures", False) else report.explain())
    code = exit_code(report.verdict)
    gating = getattr(report, "gating", None)  # a scenario's, judged against --baseline in `produce`
    if gate_cases:
        gating = _gate_cases(args, report, baseline)
        code = code if gating is None else exit_code(gating.verdict)
    if args.json is not None:
        # the baseline's word goes with the report, as in matrix.json: what `summary` makes a notice or an error
        _write_json(args.json, {**as_report(report).to_json(),
                                **({"baseline": gating.to_json()} if gating is not None else {})})
    if args.html is not None:
        _write_html(args.html, as_report(report))
    return _kept(args, workdir, code, keep_anyway=wrote)


def _timelines(args: argparse.Namespace, report, workdir: Path):
    """The report with its cases' timelines written (--timeline-dir, or the
    work directory's timelines/ unless --keep none removes it), and whether
    any went into the work directory (which is then kept)."""
    directory = args.timeline_dir
    if directory is None:
        if args.workdir is None and getattr(args, "keep", "failed") == "none":
            return report, False
        directory = workdir / "timelines"
    written = report.with_timelines(directory)
    return written, args.timeline_dir is None and directory.is_dir()


def _write_html(path: Path, report) -> None:
    from ckpt_harness.present import html

    try:
        html.write(html.report_page(report), path)
    except OSError as exc:  # checked before the runs; the report above stands
        print(f"ckpt-harness: error: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return
    print(f"HTML report: {path}")


def _write_json(path: Path, data: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1) + "\n")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def _discard(args: argparse.Namespace, workdir: Path) -> None:
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)


#: --keep: which runs' temporary directory a command leaves behind.
KEEP = ("failed", "all", "none")


def _keep_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--keep", choices=KEEP, default="failed",
                   help="what to leave in the temporary directory when it ends: its runs if anything failed "
                        "(failed, the default), always (all) or never (none); --workdir keeps everything")


def _kept(args: argparse.Namespace, workdir: Path, code: int, keep_anyway: bool = False) -> int:
    """Remove the temporary directory or say where it is and what it holds
    (`keep_anyway`: the report named files in it)."""
    keep = getattr(args, "keep", "failed")
    if args.workdir is None and not keep_anyway and (keep == "none" or (keep == "failed" and code == EXIT_OK)):
        _discard(args, workdir)
        return code
    size = sum(p.stat().st_size for p in workdir.rglob("*") if p.is_file() and not p.is_symlink())
    why = "" if args.workdir is not None or keep == "all" else " (--keep none removes them)"
    shown = f"{size / 2**20:.0f} MB" if size >= 2**20 else f"{size / 2**10:.0f} KB"
    print(f"\nruns, checkpoints and rank logs kept in {workdir}: {shown}{why}")
    return code


def _list(args: argparse.Namespace) -> int:
    from ckpt_harness import conversions
    from ckpt_harness.catalogue.checks import registry as checks
    from ckpt_harness.inject.faults import KINDS
    from ckpt_harness.oracle import PROPERTIES
    from ckpt_harness.catalogue.scenario_files import builtin_catalogue

    jobs = registry()
    width = max(map(len, [*jobs, *KINDS]))
    print("jobs:")
    for name in jobs:
        print(f"  {name.ljust(width)}  {describe(name)}")
    print("checks:")
    for name, target in checks().items():
        print(f"  {name.ljust(width)}  {target}")
    print("conversions (the convert check; layout: what they read):")
    for name in conversions.registry():
        conversion = conversions.get(name)
        print(f"  {name.ljust(width)}  {conversion.reads}: {conversion.writes}"
              + (f"; drops {', '.join(conversion.drops)}" if conversion.drops else ""))
    print("fault kinds:")
    for name, (_, what) in KINDS.items():
        print(f"  {name.ljust(width)}  {what}")
    print("properties:")
    for name, what in PROPERTIES.items():
        print(f"  {name.ljust(width)}  {what}")
    scenarios = builtin_catalogue()
    width = max(len(s.name) for s in scenarios)
    print("scenarios (ckpt-harness scenario NAME, ckpt-harness matrix):")
    for s in scenarios:
        print(f"  {s.name.ljust(width)}  [{s.property}] {s.description}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
