"""Fault-free verification: does every save resume bitwise?

A golden run records the state after every save and at the end. Then, for
each save step k, one run stops right after save k returned on every rank
(the group is torn down, as a preemption would) and a fresh group resumes
from the same directory through the job's own `load`. The oracle judges the
step `load` reports, the state right after it, and the final state.
"""

from __future__ import annotations

import dataclasses
import shlex
import shutil
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence, Union

from ckpt_harness import oracle
from ckpt_harness.jobref import JobRef, load, resolve
from ckpt_harness.launch import GroupSpec, check_layout, run_group
from ckpt_harness.records import Run
from ckpt_harness.report import CaseResult, Report, Verdict
from ckpt_harness.runner import RunPlan

#: Seconds one group run may take before it is declared hung.
DEFAULT_TIMEOUT = 60.0


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything that defines a verification, so a repro line can replay it."""

    job: JobRef
    world_size: int = 2
    total_steps: int = 8
    save_every: int = 2
    keep_last: Optional[int] = None
    overwrite: bool = False
    seed: int = 0
    timeout: float = DEFAULT_TIMEOUT
    backend: str = "gloo"
    nodes: int = 1

    def __post_init__(self) -> None:
        check_layout(self.world_size, self.nodes)
        if self.total_steps < 1:
            raise ValueError(f"steps must be at least 1, got {self.total_steps}")
        if not 1 <= self.save_every <= self.total_steps:
            raise ValueError(
                f"save_every must be between 1 and steps ({self.total_steps}), got {self.save_every}"
            )
        if self.keep_last is not None and self.keep_last < 1:
            raise ValueError(f"keep_last must be at least 1 or None, got {self.keep_last}")
        if self.timeout <= 0:
            raise ValueError(f"timeout must be positive, got {self.timeout}")
        if self.backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be 'gloo' or 'nccl', got {self.backend!r}")

    @property
    def save_steps(self) -> list[int]:
        return list(range(self.save_every, self.total_steps + 1, self.save_every))

    def plan(self, ckpt_dir: Path, stop_after_save: Optional[int] = None, **extra: object) -> RunPlan:
        return RunPlan(
            job=self.job, ckpt_dir=str(ckpt_dir), seed=self.seed, total_steps=self.total_steps,
            save_every=self.save_every, keep_last=self.keep_last, overwrite=self.overwrite,
            stop_after_save=stop_after_save, **extra,  # type: ignore[arg-type]
        )

    def launch(self, name: str, plan: RunPlan, run_dir: Path, *, deadline: Optional[float] = None,
               failure_grace: float = 5.0) -> Run:
        """One group run of this job; its records, trace and outcome."""
        cls = load(self.job)
        spec = GroupSpec(
            world_size=self.world_size,
            entry="ckpt_harness.runner:run_rank",
            payload=plan,
            run_dir=run_dir,
            deadline=deadline or self.timeout,
            backend=self.backend,
            nodes=self.nodes,
            preload=tuple(cls.preload),
            env=dict(cls.env),
            failure_grace=failure_grace,
            warmup=("ckpt_harness.runner:warm_up", (self.job, self.world_size, self.seed))
            if cls.warm_start and self.backend == "gloo" else None,
        )
        return Run.collect(name, run_dir, run_group(spec))

    def repro(self, case: str, command: str = "run", extra: Sequence[str] = ()) -> str:
        args = [
            "ckpt-harness", command, "--job", self.job.display, "--world-size", str(self.world_size),
            "--steps", str(self.total_steps), "--save-every", str(self.save_every),
            "--seed", str(self.seed), "--timeout", f"{self.timeout:g}", "--case", case,
        ]
        if self.keep_last is not None:
            args += ["--keep-last", str(self.keep_last)]
        if self.overwrite:
            args.append("--overwrite")
        if self.nodes != 1:
            args += ["--nodes", str(self.nodes)]
        args += extra
        prefix = f"PYTHONPATH={shlex.quote(self.job.root)} " if self.job.root else ""
        return prefix + shlex.join(args)


def verify(
    job: Union[str, type],
    *,
    world_size: int = 2,
    total_steps: int = 8,
    save_every: int = 2,
    keep_last: Optional[int] = None,
    overwrite: bool = False,
    seed: int = 0,
    timeout: float = DEFAULT_TIMEOUT,
    backend: str = "gloo",
    nodes: int = 1,
    workdir: Optional[Union[str, Path]] = None,
    cases: Optional[Sequence[str]] = None,
) -> Report:
    """Verify that `job` resumes bitwise from every save; return the report.

    `nodes` > 1 simulates that many nodes on this machine: ranks are grouped
    into nodes with their own LOCAL_RANK and GROUP_RANK, on one shared file
    system, where node-local-rank-0 logic races as on a real cluster.

    `job` is a Job subclass, a built-in name or "module:Class". Runs go
    under `workdir` (a fresh temporary directory if None). `cases` limits the
    resume cases to names like "resume@4"; the golden run always runs.
    """
    ref, _ = resolve(job)
    settings = Settings(
        ref, world_size=world_size, total_steps=total_steps, save_every=save_every,
        keep_last=keep_last, overwrite=overwrite, seed=seed, timeout=timeout, backend=backend, nodes=nodes,
    )
    return Verification(settings, prepare_workdir(workdir)).run(cases)


MARKER = ".ckpt-harness-workdir"


def prepare_workdir(workdir: Optional[Union[str, Path]]) -> Path:
    """An empty directory for runs: a new temporary one, or `workdir`.

    A workdir left by an earlier run of the harness (it holds our marker) is
    emptied, since stale traces or checkpoints would be read as this run's;
    any other non-empty directory is refused rather than touched.
    """
    if workdir is None:
        root = Path(tempfile.mkdtemp(prefix="ckpt-harness-"))
    else:
        root = Path(workdir)
        root.mkdir(parents=True, exist_ok=True)
        entries = list(root.iterdir())
        if entries and not (root / MARKER).exists():
            raise ValueError(f"workdir {root} is not empty and was not made by ckpt-harness; give a new or empty directory")
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    (root / MARKER).write_text("made by ckpt-harness; its contents are replaced on the next run\n")
    return root


class Verification:
    def __init__(self, settings: Settings, root: Path):
        self.settings = settings
        self.root = root
        if settings.backend == "nccl":
            _require_gpus(settings.world_size)

    def run(self, cases: Optional[Sequence[str]] = None) -> Report:
        started = time.monotonic()
        s = self.settings
        known = [f"resume@{k}" for k in s.save_steps]
        unknown = [c for c in cases or () if c not in known and c != "golden"]
        if unknown:
            raise ValueError(
                f"unknown case {', '.join(unknown)}: choose from golden, {', '.join(known)}"
            )
        results = self._golden_and_resumes([c for c in known if not cases or c in cases])
        return Report(s.job.display, s.world_size, results, time.monotonic() - started)

    def _golden_and_resumes(self, cases: list[str]) -> list[CaseResult]:
        s = self.settings
        golden = self._launch("golden", self.root / "golden" / "ckpt", self.root / "golden" / "run")
        results = [
            oracle.judge_live("golden", golden, s.repro("golden")),
        ]
        if results[0].verdict is not Verdict.PASS:
            return results  # nothing to compare against
        results.append(oracle.judge_fresh_start("golden", golden, s.repro("golden")))
        for case in cases:
            results += self._resume_case(case, golden)
        return results

    def _resume_case(self, case: str, golden: Run) -> list[CaseResult]:
        s = self.settings
        step = int(case.partition("@")[2])
        repro = s.repro(case)
        ckpt = self.root / case / "ckpt"
        stopped = self._launch("stopped run", ckpt, self.root / case / "stop", stop_after_save=step)
        live = oracle.judge_live(case, stopped, repro)
        if live.verdict is not Verdict.PASS:
            return [live]
        unknown = oracle.judge_deterministic(case, golden, stopped, step)
        results = [unknown] if unknown else []
        resumed = self._launch("resumed run", ckpt, self.root / case / "resume")
        live = oracle.judge_live(case, resumed, repro)
        results.append(live)
        # A resume that loaded and then failed still tells what it loaded.
        if resumed.states("loaded") is not None:
            results += [
                oracle.judge_load_step(case, resumed, step, repro),
                oracle.judge_same_state(
                    case, "state after load", stopped.states("saved", step), resumed.states("loaded"),
                    f"state after load vs. state saved at step {step}", repro,
                ),
            ]
        if live.verdict is Verdict.PASS:
            final = oracle.judge_same_state(
                case, "final state", golden.states("final"), resumed.states("final"),
                "final state vs. uninterrupted run", repro,
            )
            results.append(oracle.undecided_if(unknown, final))
        return results

    def _launch(self, name: str, ckpt: Path, run_dir: Path, stop_after_save: Optional[int] = None) -> Run:
        plan = self.settings.plan(ckpt, stop_after_save, trace_files=False)
        return self.settings.launch(name, plan, run_dir)


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run on this machine (the plugin skips)."""


def _require_gpus(world_size: int) -> None:
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < world_size:
        raise BackendUnavailable(
            f"backend nccl needs {world_size} CUDA devices, found "
            f"{torch.cuda.device_count() if torch.cuda.is_available() else 0}; use backend='gloo'"
        )
