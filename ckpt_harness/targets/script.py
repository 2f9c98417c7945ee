"""An unmodified training script under torchrun: the target the harness only watches.

The script is run by torch's elastic agents (`launch.elastic`), with
``{ckpt_dir}`` in its command replaced by the run's checkpoint directory
(also in the environment, `CKPT_DIR_ENV`) and ``{ckpt_url}`` by where its
storage puts that directory (`ckpt_harness.storage`: the directory itself,
or a bucket's prefix; also `CKPT_URL_ENV`), and recorded by the worker
bootstrap (`rankside.script`): its saves are found at the entry points it
calls, with what it handed them. So what a Job declares, a script's golden
run tells (`knowing`): which steps it saves, on which ranks, whether a save
lands in the background. What the harness cannot set for a script (its
rotation, its overwrite flag, its backend...) are capabilities it lacks,
each with the reason an n/a cell gives.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Mapping, Optional

from ckpt_harness import storage
from ckpt_harness.config import ScriptConfig, ScriptExploreConfig, script_args, settings_of
from ckpt_harness.errors import FrameworkMissing, UsageError
from ckpt_harness.job.axes import Axes, missing
from ckpt_harness.records import Kind
from ckpt_harness.launch import RankStatus
from ckpt_harness.records.runs import Run, save_steps, savers
from ckpt_harness.targets.base import BaseTarget, Capabilities, NotApplicable, RunRequest, Stop, TargetKind

if TYPE_CHECKING:
    from ckpt_harness.launch import envs

PLACEHOLDER = "{ckpt_dir}"
#: Where the run's checkpoints go as its storage mounts the directory: a URL on a bucket.
URL_PLACEHOLDER = "{ckpt_url}"
#: How a command names a module to run, as after ``python``.
MODULE = "-m"
#: The largest file an argument may name for ``{ckpt_dir}`` to be put in place inside it.
CONFIG_SIZE = 1 << 20
#: A Job run's shape, which a script's own arguments set: ignored unless `script_args` says how to pass it.
SHAPE = ("steps", "save_every", "seed")
#: An example of `script_args` for each setting, for the reasons that ask for one.
TELL = {"keep_last": "'keep_last=--save_total_limit {}'", "overwrite": "overwrite=--overwrite_output_dir",
        "seed": "'seed=--seed {}'", "steps": "'steps=--max_steps {}'", "save_every": "'save_every=--save_steps {}'",
        "precision": "'precision=--mixed_precision {}'", "optimizer": "'optimizer=--optim {}'",
        "data": "'data=--data {}'", "compile": "compile=--torch_compile"}
#: Why a Job setting a scenario sets makes it n/a for a script (others: generic).
JOB_ONLY = {
    "backend": "a script picks its own backend in init_process_group",
    "launcher": "a script runs under torchrun, whose agent ends the group when a worker exits with an error "
                "(launcher = elastic)",
    "save_spacing": "a script saves on its own clock: the harness waits after a Job's saves only (space a "
                    "script's saves through its own arguments)",
}


def untold(name: str) -> str:
    """Why a setting a script was not told how to take makes a scenario n/a: what to give."""
    return (f"the script takes {name} by its own arguments, and --script-args does not say how: give e.g. "
            f"--script-args {TELL[name]}")


#: What a script cannot do, and why (`Capabilities.lacks`).
LACKS = {
    "backend": JOB_ONLY["backend"],
    "full_state_keys": "a script's full state (ckpt_harness.full_state) is keyed by its own function, not as its "
                       "checkpoints are: a conversion is held to the committed save, read by its layout's loader",
}
#: Why a script whose golden run registered no full state lacks "full_state" (until then it may have it).
NO_FULL_STATE = ("the script declares no state that is the same at every world size, so a resume at another "
                 "--nproc-per-node has nothing to be compared with: decorate a function returning its unsharded "
                 "model and optimizer with @ckpt_harness.full_state (docs/scripts.md, \"World-size change\")")
#: Why a script whose golden run saved nothing in the background lacks "background_saves" (until then it may have it).
SYNCHRONOUS = ("the script's saves returned once written (none left a writer at work: a future, as dcp.async_save "
               "returns, a pool task or a thread it handed the write to): a save has landed when it returns, so no "
               "writer of it is in flight for a stop not to wait for (its hard stop is the graceful one, which "
               "resume-every-save judges), for training to overlap, or to freeze")
#: Why a script given no `--upgrade-from` lacks "upgrade".
NO_UPGRADE = ("no releases to upgrade from: give --upgrade-from with the releases a checkpoint is written under "
              "(e.g. 'lightning==2.4.0') and --pins with those that resume it (e.g. 'lightning==2.5.2')")
#: Why a script given no `--checkpoint-layout` lacks "conversions".
NO_LAYOUT = ("the script was given no checkpoint layout for a conversion to read: give --checkpoint-layout "
             "(torch_save, dcp, deepspeed, hf_trainer; `ckpt-harness list` shows the conversions)")
#: How a script's saves are seen (`Capabilities.marks_saves`).
MARKS_SAVES = ("a script's save is what it writes under the directory its command gets for {ckpt_dir} (or "
               "{ckpt_url}), through any API, between two training steps")
#: The longest row name before it is cut.
NAME_LENGTH = 80


def command(script: str, ckpt_dir: Path, told: Mapping[str, str] = {},
            given: Mapping[str, Any] = {}, configs: Optional[Path] = None,
            url: Optional[str] = None) -> tuple[str, ...]:
    """The script's path (or ``-m MODULE``) and arguments with the checkpoint
    directory in place (and its `url`, the directory's path unless given), then the arguments that tell it the settings
    `given`, as `told` (`config.script_args`) spells them: last, so they win
    over the script's own. With `configs`, an argument naming a file that
    holds ``{ckpt_dir}`` (a YAML config, ``--config=train.yaml`` too) names
    a copy written there with the directory in place; never the script
    itself, nor another Python file (whose ``{ckpt_dir}`` is code)."""
    words = _words(script)
    first = 2 if words[:1] == [MODULE] else 1  # the script itself (or -m MODULE) is never a config
    places = {PLACEHOLDER: str(ckpt_dir), URL_PLACEHOLDER: str(ckpt_dir) if url is None else url}
    if configs is not None:
        words = words[:first] + [_config_copy(w, places, configs) for w in words[first:]]
    words = [_in_place(w, places) for w in words]
    for name, value in given.items():
        words += told_args(told[name], value)
    return tuple(words)


def _in_place(text: str, places: Mapping[str, str]) -> str:
    for placeholder, value in places.items():
        text = text.replace(placeholder, value)
    return text


def _config_copy(word: str, places: Mapping[str, str], configs: Path) -> str:
    """`word`, naming instead a copy of the config file it names with the
    checkpoint directory in place, if that file holds ``{ckpt_dir}`` (or ``{ckpt_url}``)."""
    found = _config(word, places)
    if found is None:
        return word
    option, path, text = found
    configs.mkdir(parents=True, exist_ok=True)
    copy = configs / path.name
    copy.write_text(_in_place(text, places))
    return f"{option}{copy}"


def _config(word: str, places: Iterable[str]) -> Optional[tuple[str, Path, str]]:
    """The option before the file (``--config=``, or ""), the file and its
    text, if `word` names a config file that holds one of `places` (never a
    Python file, whose placeholder is code)."""
    option, eq, value = word.rpartition("=") if word.startswith("-") else ("", "", word)
    path = Path(value)
    try:
        if (any(p in value for p in places) or path.suffix == ".py" or not path.is_file()
                or path.stat().st_size > CONFIG_SIZE):
            return None
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    return (f"{option}{eq}", path, text) if any(p in text for p in places) else None


def tells_ckpt_dir(script: str) -> bool:
    """Does the command tell the script where its checkpoints go: ``{ckpt_dir}``
    or ``{ckpt_url}`` in an argument, or in a config file an argument names?
    A script may also read it from the environment (`CKPT_DIR_ENV`), which
    no command shows."""
    words = _words(script)
    first = 2 if words[:1] == [MODULE] else 1
    places = (PLACEHOLDER, URL_PLACEHOLDER)
    return (any(p in word for word in words for p in places)
            or any(_config(word, places) is not None for word in words[first:]))


#: How many of the last lines of a script's output a refusal quotes.
QUOTED_LINES = 3
#: Lines the harness's worker bootstrap adds to a rank's log: its header, runpy's warning about its module.
_BOOTSTRAP_NOISE = ("[ckpt_harness]", "'ckpt_harness.launch.")


def last_words(log: str) -> list[str]:
    """What a script said last on its output (a rank's log, from the header
    of its last attempt on, without the bootstrap's own lines): its last
    `QUOTED_LINES` lines, or from the last of them that says "error" on
    (argparse's usage then ``error: the following arguments are required``)."""
    lines = log.splitlines()
    header = max((i for i, line in enumerate(lines) if line.startswith("[ckpt_harness] rank ")), default=-1)
    said = [line.rstrip() for line in lines[header + 1:]
            if line.strip() and not any(noise in line for noise in _BOOTSTRAP_NOISE)][-QUOTED_LINES:]
    errors = [i for i, line in enumerate(said) if "error" in line.lower()]
    return said[errors[-1]:] if errors else said


def told_args(template: str, value: Any) -> list[str]:
    """The arguments `template` makes of `value`: none for unset, {} filled
    in, a flag without {} given when true only."""
    if value is None:
        return []
    if "{}" not in template:
        return shlex.split(template) if value else []
    shown = str(value).lower() if isinstance(value, bool) else str(value)
    return [word.replace("{}", shown) for word in shlex.split(template)]


def _words(script: str) -> list[str]:
    """The command as a worker runs it: a script's path, or ``-m MODULE``,
    then its arguments. 'python train.py' means train.py, and a console
    script (``llamafactory-cli train x.yaml``: a command on PATH whose first
    line runs Python) is the file the shell would run."""
    words = shlex.split(script)
    if words and Path(words[0]).name.startswith("python") and len(words) > 1:
        words = words[1:]
    if words and words[0] != MODULE and not Path(words[0]).is_file():
        found = shutil.which(words[0])
        if found is not None and _runs_python(Path(found)):
            words[0] = found
    return words


def script_file(script: str) -> Optional[Path]:
    """The file of Python the command runs: its script, or its ``-m``
    module's file (None for a module not found here)."""
    words = _words(script)
    if words[:1] != [MODULE]:
        return Path(words[0]) if words else None
    spec = importlib.util.find_spec(words[1]) if len(words) > 1 else None
    return Path(spec.origin) if spec is not None and spec.has_location and spec.origin else None


def _runs_python(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def row_name(script: str, limit: int = NAME_LENGTH) -> str:
    """The script's command as a row of the matrix: its file's name, then its
    arguments, cut to `limit`. Left out: its directories, a leading
    ``python``, and the checkpoint directory (with the option naming it),
    which every row has and which tells rows nothing apart."""
    words = _words(script)
    if words:
        words[0] = Path(words[0]).name
    kept: list[str] = []
    for word in words:
        if PLACEHOLDER in word or URL_PLACEHOLDER in word:
            if kept and kept[-1].startswith("-") and "=" not in kept[-1] and len(kept) > 1:
                kept.pop()  # --output_dir {ckpt_dir}
            continue
        kept.append(word)
    name = " ".join(kept)
    return name if len(name) <= limit else name[: limit - 1] + "…"


@dataclasses.dataclass(frozen=True)
class ScriptTarget(BaseTarget):
    config: ScriptConfig
    #: step -> the ranks that made that save in the golden run (`knowing`).
    saved_by: tuple[tuple[int, frozenset[int]], ...] = ()
    #: Whether a save of the golden run went on writing after it returned.
    background: bool = False
    #: Whether the golden run's saves found a `ckpt_harness.full_state` registered.
    full: bool = False
    #: The golden run told the above.
    known: bool = False
    #: The settings a scenario set that the script is told by `config.script_args`, by name.
    given: tuple[tuple[str, Any], ...] = ()
    COMMANDS: ClassVar[Mapping[str, type]] = {"run": ScriptConfig, "explore": ScriptExploreConfig}
    noun: ClassVar[str] = "script"

    @property
    def name(self) -> str:
        return self.config.script

    @property
    def row(self) -> str:
        """Its matrix row: the command, and the releases it runs under where it names some (a row per
        set of releases: `matrix --pins` given more than once)."""
        pins = " ".join(self.config.pins.split())
        return row_name(self.config.script) + (f" ({pins})" if pins else "")

    @property
    def world_size(self) -> int:
        return self.config.world_size

    @property
    def timeout(self) -> float:
        return self.config.timeout

    @property
    def caps(self) -> Capabilities:
        lacks = dict(LACKS)
        for capability, name in (("overwrite_flag", "overwrite"), ("keep_last", "keep_last")):
            if name not in self.told:
                lacks[capability] = untold(name)
        if not self.config.max_restarts:
            lacks["launcher_restart"] = "torchrun restarts the group only with --max-restarts 1 or more"
        if self.config.checkpoint_layout is None:
            lacks["conversions"] = NO_LAYOUT
        if not self.config.upgrade_from.strip():
            lacks["upgrade"] = NO_UPGRADE
        if self.known and not self.background:
            lacks["background_saves"] = SYNCHRONOUS
        if self.known and not self.full:
            lacks["full_state"] = NO_FULL_STATE
        lacks.update(self.storage.lacks)
        return Capabilities(reports=False, steps_known=False, live_state=False, parks=False, lacks=lacks,
                            layout=self.config.checkpoint_layout, keeps_best=self.config.keeps_best,
                            marks_saves=MARKS_SAVES)

    @property
    def values(self) -> dict[str, Any]:
        return {**self.config.values, **dict(self.given)}

    @property
    def told(self) -> dict[str, str]:
        return script_args(self.config.script_args)

    def argv(self, ckpt_dir: Path, run_dir: Optional[Path] = None, url: Optional[str] = None) -> tuple[str, ...]:
        """Its command for a run on `ckpt_dir` (mounted at `url`); a run that
        starts on a checkpoint directory holding anything (a resume) gets
        `resume_args` last, so they win over the command's own."""
        words = command(self.config.script, ckpt_dir, self.told, dict(self.given),
                        configs=run_dir / "configs" if run_dir is not None else None, url=url)
        return words + (tuple(shlex.split(self.config.resume_args)) if _resumes(ckpt_dir) else ())

    def preflight(self) -> None:
        """Refuse a script that is not there, or storage the harness cannot
        mount here, before any run: else every case (every scenario of a
        matrix row) would say so, for bad input."""
        absent = missing(Axes(storage=self.config.storage))
        if absent:
            hints = " ".join(repr(h) for h in sorted(set(absent.values())))
            raise FrameworkMissing(f"storage {self.config.storage} needs {', '.join(sorted(absent))}, which is not "
                                   f"installed here: pip install {hints}")
        words = command(self.config.script, Path("ckpt"))
        if words[0] == MODULE:
            top = words[1].split(".")[0] if len(words) > 1 else ""
            if not top or importlib.util.find_spec(top) is None:
                raise UsageError(f"no module {words[1] if len(words) > 1 else ''!r} to run (--script "
                                 f"{self.config.script!r}): give -m and a module importable from here "
                                 "(the current directory or PYTHONPATH), then its arguments")
        elif not Path(words[0]).is_file():
            raise UsageError(f"no script at {words[0]!r} (--script {self.config.script!r}): give the path of a "
                             "Python file, -m MODULE, or a console script on PATH, then its arguments")
        for before in (True, False):  # made now, before any deadline: a release that does not install is said first
            self.python(before)

    def breakable(self) -> "ScriptTarget":
        """Not with torchrun restarting a failed group: the restarted group would run a case's fault again, and
        the pipelines that break a save run each resume themselves."""
        if self.config.max_restarts:
            raise UsageError("--max-restarts: explore, a matrix row and a catalogue item run each resume "
                             "themselves, and torchrun restarting a faulted group would run its fault again: leave "
                             "out --max-restarts (--ckpt-max-restarts under pytest); torchrun's restart path is "
                             "`run --script --max-restarts`'s (the ckpt-script::verify item's)")
        return self

    def python(self, before_upgrade: bool = False) -> str:
        """The interpreter torchrun and its workers run: this one, or that of
        an environment holding the releases of `pins` (`upgrade_from` for a
        run `before_upgrade`) over this one's packages (`launch.envs`)."""
        text = self.config.upgrade_from if before_upgrade else self.config.pins
        if not text.strip():
            return sys.executable
        return str(environment(text, self.config.find_links, self.config.envs_dir).python)

    def warm(self, parallel: int) -> None:
        from ckpt_harness.launch.agent import prestart

        # the agents' torch, imported once while the harness starts up (and forked into workers)
        prestart(self.config.nproc_per_node, self.python())

    def run(self, request: RunRequest, ckpt_dir: Path, run_dir: Path) -> Run:
        """One torchrun run on `ckpt_dir`. A run stopped after save k stops the
        ranks that made it in the golden run; with `Stop.CRASH` the first rank
        there dies instead and the run goes on under torchrun's restarts (the
        records are the last attempt's). A worker an injected fault blocks
        says when in its record, and its peers' grace counts from then."""
        from ckpt_harness import jit
        from ckpt_harness.targets import script_ops

        # before the deadline starts: what the script's frameworks build on first use is not the script's time
        jit.ensure_built(script_ops.jit_ops(script_file(self.config.script), os.environ))
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        ckpt = ckpt_dir.resolve()
        with self.storage.mount(ckpt) as mount:
            return self._run(request, ckpt, run_dir, mount)

    def _run(self, request: RunRequest, ckpt: Path, run_dir: Path, mount: storage.Mount) -> Run:
        from ckpt_harness.launch.elastic import ScriptSpec, run_elastic
        from ckpt_harness.rankside.script import CKPT_DIR_ENV, CKPT_URL_ENV, PLAN_ENV, ScriptPlan

        crash = request.stop is Stop.CRASH
        plan = ScriptPlan(ckpt_dir=str(ckpt), ckpt_url=mount.url, stop_after_save=request.stop_after_save,
                          crash=crash, hard_stop=request.stop is Stop.HARD,
                          slow_writer=request.stop is Stop.SLOW_WRITER,
                          faults=request.faults, log_data=request.log_data, trace_files=request.trace_files,
                          list_entries=self.values.get("keep_last") is not None,
                          full_state=request.full_state, resumes=_resumes(ckpt), stop_between=request.stop_between)
        stop_ranks = self.savers(request.stop_after_save) if request.stop_after_save is not None else None
        if request.stop_between is not None:  # every rank trains: each stops at its own step K+1
            stop_ranks = frozenset(range(self.config.world_size))
        spec = ScriptSpec(
            command=self.argv(ckpt, run_dir, mount.url), run_dir=run_dir,
            deadline=request.deadline or self.config.timeout, blocked_grace=request.blocked_grace,
            nproc_per_node=self.config.nproc_per_node, nnodes=self.config.nnodes,
            max_restarts=self.config.max_restarts,
            env={**mount.env, PLAN_ENV: plan.to_env(), CKPT_DIR_ENV: str(ckpt), CKPT_URL_ENV: mount.url},
            failure_grace=request.failure_grace, stop_ranks=None if crash else stop_ranks,
            entry="ckpt_harness.rankside.script:arm", warm_workers=not self.config.cold_start,
            preload=mount.preload, python=self.python(request.before_upgrade),
        )
        run = Run.collect(request.name, run_dir, run_elastic(spec))
        if not (request.faults or request.stop_after_save is not None or request.stop_between is not None
                or plan.resumes):
            self._refuse_untold(run)
        return run

    def _refuse_untold(self, run: Run) -> None:
        """UsageError if `run` (a fresh one, nothing armed) shows a script never
        told where its checkpoints go: its command has no ``{ckpt_dir}`` (nor
        ``{ckpt_url}``, nor a config file holding one), and it refused to run,
        on every rank that ended by itself, with `sys.exit` (argparse's
        required argument, a ``sys.exit("give --out")``) before any save.
        A script that takes its directory from the environment instead has
        no placeholder and runs: only its refusal, which no fault can have
        made, says the command is wrong, and its own words say how.
        Anything else that fails there (an exception, a signal) is the
        script's failure, judged as before (`oracle.judge_golden`: ERROR)."""
        from ckpt_harness.rankside.script import CKPT_DIR_ENV

        if self.given or tells_ckpt_dir(self.config.script) or any(rec["event"] == Kind.SAVED for r in run.ranks
                                                                   for rec in r.records):
            return  # told settings: the arguments the harness added may be what it refused
        own = [r for r in run.ranks if r.status.ended_badly and not r.outcome.ended_by_launcher]
        if not own or any(r.status is RankStatus.OK for r in run.ranks) or not all(
                r.error is not None and r.error.name == "SystemExit" and r.outcome.exit_code for r in own):
            return
        codes = sorted({r.outcome.exit_code for r in own})
        said = last_words(own[0].outcome.log_text())
        quoted = "".join(f"\n    {line}" for line in said) if said else " (nothing)"
        where = "every rank" if len(own) == len(run.ranks) else "rank " + ", ".join(str(r.rank) for r in own)
        raise UsageError(
            f"the script exited with status {', '.join(map(str, codes))} on {where} before its first save, and "
            f"its command has no {PLACEHOLDER}: it was never told where its checkpoints go (--script "
            f"{self.config.script!r}). Put {PLACEHOLDER} where it takes its checkpoint directory (e.g. "
            f"'train.py --output_dir {PLACEHOLDER}', or in a config file the command names), or have it read "
            f"${CKPT_DIR_ENV}. Rank {own[0].rank}'s output ended:{quoted}")

    def knowing(self, golden: Run) -> "ScriptTarget":
        saved_by = tuple((step, savers(golden, step)) for step in save_steps(golden))
        saved = [rec for r in golden.ranks for rec in r.records if rec["event"] == Kind.SAVED]
        return dataclasses.replace(self, saved_by=saved_by, background=any(rec.get("background") for rec in saved),
                                   full=any(rec.get("full_state") for rec in saved), known=True)

    def save_steps(self) -> Optional[list[int]]:
        return [step for step, _ in self.saved_by] if self.known else None

    def savers(self, step: Optional[int]) -> Optional[frozenset[int]]:
        return dict(self.saved_by).get(step) if step is not None else None

    def saves_in_background(self) -> bool:
        return self.background

    def with_settings(self, params: Mapping[str, Any]) -> "ScriptTarget":
        """A scenario's settings, as the script takes them: those `script_args`
        tells it, through its arguments; simulated nodes as torchrun's real
        ones; its shape, untold, is its own (ignored). Any other setting
        given other than its default is n/a, saying what to give."""
        from ckpt_harness.config import SETTINGS

        told = self.told
        changes = {name: value for name, value in params.items() if name in told or name == "nodes"}
        if params.get("rotates") and "keep_last" not in told:
            raise NotApplicable(f"it needs a save that rotates out the previous one: {untold('keep_last')}")
        for name, value in params.items():
            if name in changes or name in SHAPE or name not in SETTINGS or value == SETTINGS[name].default:
                continue
            if name in JOB_ONLY:
                raise NotApplicable(f"it sets {name} = {_toml(value)}: {JOB_ONLY[name]}")
            if name in TELL:
                raise NotApplicable(f"it sets {name} = {_toml(value)}: {untold(name)}")
        return self.replace(**changes)

    def replace(self, **changes: Any) -> "ScriptTarget":
        """The same script with settings changed: those it is told through
        `script_args`, its world size and nodes through torchrun's layout,
        its own (`ScriptConfig`: timeout...) as they are."""
        told, config = self.told, self.config
        given = dict(self.given)
        for name, value in changes.items():
            if name in told:
                given[name] = value
            elif name == "world_size" and value != config.world_size:
                config = dataclasses.replace(config, nproc_per_node=_share(value, config.nnodes, "world size"))
            elif name == "nodes" and value not in (1, config.nnodes):
                config = dataclasses.replace(config, nnodes=value,
                                             nproc_per_node=_share(config.world_size, value, "world size"))
            elif name in settings_of(ScriptConfig):
                config = dataclasses.replace(config, **{name: value})
            elif name in TELL:
                raise NotApplicable(untold(name))
            elif name not in ("world_size", "nodes"):
                raise NotApplicable(f"a script's {name} is its own argument, which the harness cannot set")
        given_now = tuple(sorted(given.items()))
        if (config, given_now) == (self.config, self.given):
            return self
        return dataclasses.replace(self, config=config, given=given_now)



@functools.lru_cache(maxsize=None)
def environment(pins: str, find_links: str, envs_dir: str) -> "envs.Env":
    """The environment of the releases `pins` names (`launch.envs.made`),
    once per process: each run asks, and a made one is only looked up."""
    from ckpt_harness import jit
    from ckpt_harness.config import pins as requirements
    from ckpt_harness.launch import envs

    root = Path(envs_dir or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                         "ckpt-harness", "envs"))
    return envs.made(envs.Pins(tuple(requirements(pins)), find_links=tuple(requirements(find_links))), root,
                     say=jit.say)


def _resumes(ckpt_dir: Path) -> bool:
    """Does a run on `ckpt_dir` start on a checkpoint (it holds anything)?"""
    return ckpt_dir.is_dir() and any(ckpt_dir.iterdir())


def _share(world: int, nodes: int, what: str) -> int:
    """Workers per node for `world` ranks over `nodes` torchrun agents."""
    if world % nodes:
        raise NotApplicable(f"a {what} of {world} cannot be spread evenly over {nodes} torchrun nodes")
    return world // nodes


def _toml(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else repr(value)


KIND = TargetKind("script", "script", "a training script and its arguments, run under torchrun",
                  {"run": ScriptConfig, "explore": ScriptExploreConfig},
                  lambda value, cls, settings: cls(**{**settings, "script": value}),
                  lambda config: ScriptTarget(ScriptConfig(**{name: getattr(config, name)
                                                               for name in settings_of(ScriptConfig)})))
