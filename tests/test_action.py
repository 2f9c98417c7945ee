"""The GitHub Action (action.yml) run as GitHub runs it (issue 65, item 1).

Before, the step pasted `${{ inputs.command }}` into its bash script: a
double-quoted command broke the script, nothing ran, no code was written
and the last step's empty `exit` went green; a crafted input ran any shell
code. Here each `run:` block of action.yml is run as the runner runs a
composite action's step: its `${{ }}` expressions replaced by plain text
(`inputs.X`, `github.action_path`, `steps.ID.outputs.X`; any other
expression fails the test, so a new one cannot slip in untested), written
to a file and run with `bash --noprofile --norc -eo pipefail FILE`, with
the step's `env:`, `GITHUB_OUTPUT` (a fresh file per step, read back as
the step's outputs), `GITHUB_STEP_SUMMARY`, `GITHUB_WORKSPACE` and
`GITHUB_ACTIONS=true`; a step after a failed one runs only under
`if: always()`. The `uses:` step (upload-artifact) is GitHub's and is
skipped. The install step runs for real once, pip installing a copy of
the repository without dependencies into a throwaway target (no network);
the runs of the command skip it and use this venv's editable install.

Both ways: a single-quoted and a double-quoted `--script` run the harness
and the step exits with its code (0 for a pass, 1 for a planted FAIL,
whose annotation lands at the script's line); hostile inputs (`;`, `$()`,
backticks, an unbalanced quote, an empty command, `--help`) run nothing of
theirs (no `pwned` file anywhere) and fail the step with a line saying
what to fix.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Optional

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
SCRIPTS = ROOT / "tests" / "scripts"
_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


@dataclasses.dataclass
class Ran:
    """What the job's page would show of the Action: each step's exit status
    (None: skipped), the step outputs, the log, the step summary."""

    steps: list[tuple[str, Optional[int]]]
    outputs: dict[str, dict[str, str]]
    log: str
    summary: str

    @property
    def failed(self) -> bool:
        return any(rc not in (None, 0) for _, rc in self.steps)

    def rc(self, name: str) -> Optional[int]:
        return dict(self.steps)[name]


def substitute(text: str, inputs: Mapping[str, str], outputs: Mapping[str, Mapping[str, str]],
               action_path: Path = ROOT) -> str:
    """`text` with its `${{ }}` expressions replaced as the runner replaces
    them: by their values as plain text, before any shell sees the script."""

    def value(match: re.Match) -> str:
        expr = match.group(1)
        if expr.startswith("inputs."):
            return inputs[expr.split(".", 1)[1]]
        if expr == "github.action_path":
            return str(action_path)
        if m := re.fullmatch(r"steps\.(\w+)\.outputs\.(\w+)", expr):
            return outputs.get(m.group(1), {}).get(m.group(2), "")
        raise AssertionError(f"action.yml uses an expression this test does not evaluate: {expr}")

    return _EXPRESSION.sub(value, text)


def run_action(command: str, workspace: Path, *, extras: str = "", install: bool = False,
               env_extra: Optional[Mapping[str, str]] = None, stop_after: Optional[str] = None,
               action_path: Path = ROOT) -> Ran:
    """The Action's steps in order, as the runner runs them, in `workspace`
    (`install`: the install step too; else this venv's install is used)."""
    inputs = {name: str(spec.get("default", "")) for name, spec in ACTION["inputs"].items()}
    inputs.update(command=command, extras=extras)
    summary = workspace.parent / "step_summary.md"
    summary.write_text("")
    base = {**os.environ, "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(workspace),
            "GITHUB_STEP_SUMMARY": str(summary), "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
            f"{os.environ['PATH']}", **(env_extra or {})}
    steps: list[tuple[str, Optional[int]]] = []
    outputs: dict[str, dict[str, str]] = {}
    log = []
    for i, step in enumerate(ACTION["runs"]["steps"]):
        name = step.get("name", f"step {i}")
        failed = any(rc not in (None, 0) for _, rc in steps)
        condition = substitute(step.get("if", "success()"), inputs, outputs, action_path)
        assert condition in ("success()", "always()"), condition
        if (failed and condition != "always()") or "uses" in step or (not install and "pip install" in step["run"]):
            steps.append((name, None))
            continue
        assert step["shell"] == "bash", step
        script = workspace.parent / f"step{i}.sh"
        script.write_text(substitute(step["run"], inputs, outputs, action_path))
        output = workspace.parent / f"output{i}"
        output.write_text("")
        env = {**base, "GITHUB_OUTPUT": str(output),
               **{k: substitute(str(v), inputs, outputs, action_path) for k, v in (step.get("env") or {}).items()}}
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=workspace,
                              env=env, capture_output=True, text=True, timeout=300)
        log.append(f"## {name}: exit {done.returncode}\n{done.stdout}{done.stderr}")
        steps.append((name, done.returncode))
        if "id" in step:
            outputs[step["id"]] = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
        if name == stop_after:
            break
    return Ran(steps, outputs, "\n".join(log), summary.read_text())


def pwned(*places: Path) -> list[Path]:
    """Every file named pwned* under `places` and in the repository's top
    directory (what a command run by a shell would have made, wherever it ran)."""
    return [*(p for place in places for p in place.rglob("pwned*")), *ROOT.glob("pwned*"), *Path.cwd().glob("pwned*")]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A user's repository: a training script of their own (tests/scripts/resumable.py, inline_save.py)."""
    ws = tmp_path / "repo"
    ws.mkdir()
    shutil.copy(SCRIPTS / "resumable.py", ws / "train.py")
    shutil.copy(SCRIPTS / "inline_save.py", ws / "inline.py")
    return ws


RUN_STEP = "Run ckpt-harness"


def test_the_action_expands_no_input_in_a_script():
    """Every `${{ inputs.X }}` reaches a step through `env:` only (GitHub's
    hardening guide): none is inside a `run:` block, where it would be code."""
    for step in ACTION["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), step["run"]
        assert "inputs." not in step.get("name", ""), step  # a step name is shown, not run; kept plain anyway


def test_a_single_quoted_script_runs_the_harness_and_the_step_exits_with_its_code(workspace):
    ran = run_action("run --script 'train.py {ckpt_dir} --steps 4' --nproc-per-node 1 --case golden", workspace)
    assert ran.rc(RUN_STEP) == 0 and not ran.failed, ran.log
    assert ran.outputs["run"] == {"code": "0"}, ran.log
    report = json.loads((workspace / "ckpt-harness-out" / "report.json").read_text())
    assert report["verdict"] == "pass" and {c["case"] for c in report["cases"]} == {"golden"}, report
    assert "## ckpt-harness verify: PASS" in ran.summary, ran.summary
    assert (workspace / "ckpt-harness-out" / "report.html").is_file()


def test_a_double_quoted_script_that_fails_runs_and_exits_1_with_an_annotation_at_its_line(workspace):
    raising = next(n for n, line in enumerate((workspace / "inline.py").read_text().splitlines(), 1)
                   if "os.replace(written" in line)
    ran = run_action('run --script "inline.py {ckpt_dir} --bug rank0-rename-raises" --nproc-per-node 1 '
                     "--cold-start --case golden", workspace)
    assert ran.rc(RUN_STEP) == 1 and ran.failed, ran.log
    assert ran.outputs["run"] == {"code": "1"}, ran.log
    assert f"::error file=inline.py,line={raising}," in ran.log, ran.log
    assert "FileNotFoundError" in ran.summary and f"`inline.py:{raising}`" in ran.summary, ran.summary
    issue = next((workspace / "ckpt-harness-out" / "repros").glob("*/ISSUE.md")).read_text()
    assert f"Call site: `inline.py:{raising}`" in issue and "FileNotFoundError" in issue, issue


HOSTILE = {
    "a command after ;": "; touch pwned",
    "command substitution": "$(touch pwned)",
    "backticks": "`touch pwned`",
    "; after a real command": "run --job torch_save; touch pwned",
    "$() inside an argument": 'run --job "torch_save $(touch pwned2)"',
    "backticks inside quotes": "run --job 'torch_save `touch pwned3`' --case golden",
    "an unbalanced quote": "run --script 'train.py {ckpt_dir} --nproc-per-node 1",
    "an empty command": "   ",
    "ckpt-harness itself": "ckpt-harness run --job torch_save",
    "an option the Action sets": "run --job torch_save --json mine.json",
    "a command that judges nothing": "run --help",
}


@pytest.mark.parametrize("command", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_or_broken_command_runs_nothing_of_its_own_and_fails_the_step(workspace, tmp_path, command):
    ran = run_action(command, workspace)
    assert ran.failed and ran.rc(RUN_STEP) == 2, ran.log
    assert ran.outputs["run"] == {"code": "2"}, ran.log
    assert not pwned(tmp_path), ran.log
    assert re.search(r"::error title=ckpt-harness Action::|ckpt-harness: error: ", ran.log), ran.log


def test_the_install_step_installs_with_valid_extras_and_refuses_extras_that_are_not_names(tmp_path, workspace):
    """The real install step: pip installs a copy of the repository (a build
    writes into the source tree) without dependencies into a throwaway
    target; extras that are not comma-separated names are refused before
    pip, and nothing of theirs runs."""
    copy = tmp_path / "action"
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for name in listed:
        source, target = ROOT / name, copy / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)
    target = tmp_path / "site"
    pip = {"PIP_NO_DEPS": "1", "PIP_TARGET": str(target), "PIP_NO_BUILD_ISOLATION": "0", "PIP_NO_INDEX": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    ran = run_action("run --help", workspace, extras="hf", install=True, env_extra=pip,
                     stop_after="Install ckpt-harness", action_path=copy)
    assert ran.rc("Install ckpt-harness") == 0, ran.log
    assert (target / "ckpt_harness" / "present" / "action.py").is_file(), ran.log
    for extras in ("hf; touch pwned", "$(touch pwned)", "hf,`touch pwned`", "hf deepspeed", "hf]"):
        ran = run_action("run --help", workspace, extras=extras, install=True, env_extra=pip, action_path=copy)
        assert ran.rc("Install ckpt-harness") == 2 and ran.rc(RUN_STEP) is None, ran.log
        assert "the extras input must be comma-separated names" in ran.log, ran.log
        assert not pwned(tmp_path), ran.log
