"""The GitHub Action's step (action.yml): run the `command` input as
ckpt-harness arguments, show the verdict, exit with the harness's code.

Why this is Python and not the step's bash: a workflow's `${{ inputs.X }}`
is pasted into a `run:` block as text before bash reads it, so a command
with double quotes (`run --script "train.py {ckpt_dir}"`) broke the script
(nothing ran, no code was written, and the last step's empty `exit` went
green), and a crafted input ran any shell code. GitHub's hardening guide:
inputs reach a step only through `env:`. Here the command comes from an
environment variable, is split into arguments as a shell would split them
(`shlex.split`, quotes honoured) but never evaluated (no `$(...)`, no
backticks, no `;`), and the harness runs from an argument list.

Anything that keeps the harness from running (the command cannot be split,
is empty, names no command the Action runs, sets an option the Action
sets) fails the step with exit 2 and a `::error` that says what to fix.
Otherwise the step's exit is the harness's own (docs/getting-started.md,
"Verdicts and exit codes"; a run that exits 0 having written no report, e.g. `run --help`,
judged nothing and exits 2), after the summary: the step summary, the annotations, a repro and
an issue draft per finding (`ckpt-harness summary`).

Environment: CKPT_COMMAND (the `command` input), CKPT_OUT (where the
reports go), GITHUB_WORKSPACE (the repository root, for the annotations'
paths), GITHUB_OUTPUT (`code=N` is appended), GITHUB_STEP_SUMMARY.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Optional, Sequence

#: The commands the Action runs: those that judge something and write a report.
COMMANDS = ("run", "explore", "scenario", "matrix")
#: The options the Action gives each command itself (where its reports go).
OWN_OPTIONS = {"matrix": ("--out", "--html")}
REPORT_OPTIONS = ("--json", "--html", "--timeline-dir")
#: Exit code when the harness could not be started: bad input, as the harness's own (README, "Exit codes").
EXIT_USAGE = 2
EXAMPLE = "matrix --job mypkg.jobs:MyJob, or run --script 'train.py --ckpt-dir {ckpt_dir}' --nproc-per-node 2"


class ActionError(Exception):
    """The Action's input keeps the harness from running; the message says what to change."""


def parse(command: str) -> list[str]:
    """The `command` input as arguments, split as a POSIX shell splits words
    (quotes and backslashes honoured) and nothing else: no expansion, no
    command substitution, no operators."""
    try:
        words = shlex.split(command)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise ActionError(f"the command input cannot be split into arguments ({exc}): close every quote, "
                          f"e.g. --script 'train.py {{ckpt_dir}}'; it was: {command}") from None
    if not words:
        raise ActionError(f"the command input is empty: give ckpt-harness arguments, e.g. {EXAMPLE}")
    if words[0] not in COMMANDS:
        raise ActionError(f"the command input starts with {words[0]!r}, which is not a command the Action runs: "
                          f"start it with one of {', '.join(COMMANDS)} (no `ckpt-harness`, no shell), "
                          f"e.g. {EXAMPLE}")
    return words


def harness_args(words: Sequence[str], out: Path) -> tuple[list[str], Path]:
    """The harness's arguments with the Action's outputs under `out`, and the
    JSON report they write (what `summary` reads)."""
    own = OWN_OPTIONS.get(words[0], REPORT_OPTIONS)
    given = [w for w in words[1:] if w.split("=", 1)[0] in own]
    if given:
        raise ActionError(f"leave {', '.join(given)} out of the command input: the Action writes the reports into "
                          f"the `output` input's directory ({out}) and uploads them")
    if words[0] == "matrix":
        return [*words, "--out", str(out), "--html", str(out / "report.html")], out / "matrix.json"
    json_path = out / "report.json"
    return ([*words, "--json", str(json_path), "--html", str(out / "report.html"),
             "--timeline-dir", str(out / "timelines")], json_path)


def fail_on(words: Sequence[str]) -> Optional[str]:
    """The `--fail-on` a matrix command gives (`--fail-on X` or `--fail-on=X`), which its annotations follow."""
    for i, word in enumerate(words):
        if word == "--fail-on" and i + 1 < len(words):
            return words[i + 1]
        if word.startswith("--fail-on="):
            return word.split("=", 1)[1]
    return None


def run_harness(args: Sequence[str], env: Mapping[str, str]) -> int:
    """`python -m ckpt_harness.cli ARGS` from an argument list (no shell), its
    output the step's; SIGINT and SIGTERM (a cancelled job) passed on to it,
    so that it stops as it does on a terminal, writing what finished."""
    child = subprocess.Popen([sys.executable, "-m", "ckpt_harness.cli", *args], env=dict(env))

    def forward(signum: int, frame: object) -> None:
        child.send_signal(signum)

    before = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return child.wait()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def summarize(json_path: Path, out: Path, root: Path, matrix_fail_on: Optional[str]) -> int:
    """`ckpt-harness summary` of the report: the step summary, annotations,
    repros and issue drafts (in this process: it reads JSON only)."""
    from ckpt_harness import cli

    extra = ["--fail-on", matrix_fail_on] if matrix_fail_on else []
    return cli.main(["summary", str(json_path), "--annotations", "--repro-dir", str(out / "repros"),
                     "--root", str(root), *extra])


def write_output(code: int, environ: Mapping[str, str]) -> None:
    """`code=N` for the workflow (`steps.<id>.outputs.code`), when GitHub gave an output file."""
    target = environ.get("GITHUB_OUTPUT")
    if target:
        with open(target, "a", encoding="utf-8") as f:
            f.write(f"code={code}\n")


def fail(message: str) -> None:
    """The step's error, as an annotation GitHub shows on the run's page and a line in its log."""
    print(f"::error title=ckpt-harness Action::{message.replace('%', '%25').replace(chr(10), '%0A')}")
    print(f"ckpt-harness Action: error: {message}", file=sys.stderr)


def main(environ: Optional[Mapping[str, str]] = None) -> int:
    """The step: parse, run, summarize, and return the harness's code (2 when it could not start)."""
    environ = dict(os.environ if environ is None else environ)
    out = Path(environ.get("CKPT_OUT") or "ckpt-harness-out")
    root = Path(environ.get("GITHUB_WORKSPACE") or ".")
    try:
        words = parse(environ.get("CKPT_COMMAND", ""))
        args, json_path = harness_args(words, out)
        out.mkdir(parents=True, exist_ok=True)
    except (ActionError, OSError) as exc:
        fail(str(exc))
        write_output(EXIT_USAGE, environ)
        return EXIT_USAGE
    print(f"ckpt-harness {shlex.join(args)}", flush=True)
    code = run_harness(args, environ)
    if json_path.is_file():
        if summarize(json_path, out, root, fail_on(words) if words[0] == "matrix" else None) != 0:
            print(f"::warning title=ckpt-harness Action::no step summary: `ckpt-harness summary {json_path}` "
                  "failed (its message is above); the verdict and exit code stand")
    elif code == 0:  # e.g. `run --help`: a green step must mean something was judged
        fail(f"ckpt-harness judged nothing (it exited 0 and wrote no report, {json_path}): give the command a job "
             f"or script to check, e.g. {EXAMPLE}")
        code = EXIT_USAGE
    else:
        fail(f"ckpt-harness exited {code} and wrote no report ({json_path}): its message above says what to "
             "change")
    write_output(code, environ)
    return code


if __name__ == "__main__":
    sys.exit(main())
