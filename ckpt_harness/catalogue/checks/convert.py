"""Conversions of a committed save (`ckpt_harness.conversions`): what they
keep (`convert`), and what the job's own loader makes of a save in another
layout (`confuse`).

`convert`: the run saves and stops after its last save k, recording the
job's `full_state` as save k returned: the truth a conversion is held to,
the one a world-size change is held to too (`reshard`). A target whose
full state is not keyed as its checkpoints are (capability
"full_state_keys": a script's, declared by a function of its own, given
its `--checkpoint-layout`) is held to its save instead: the committed
save k, read by its own layout's loader. Each conversion that reads the
target's layout runs on the committed directory in a process of its own
(`conversions.run`); what it wrote, read back as its consumers load it,
must be that state key for key, bitwise, but for what the conversion
documents it drops; or the conversion refuses. A conversion that gives
the layout it read (a round trip) must also resume: put where save k was,
the job's own loader must load the full state of save k bitwise and train
on (a target with a full state only).

`confuse`: a complete conversion (it drops nothing) to another layout is
the same save laid out as the job does not write it: sharded where it
writes one file, one file where it writes shards. Put where save k was, it
is handed to the job's own resume, which must refuse it on every rank,
naming what it found, or load save k correctly: never load it partially or
silently (judged as a damaged checkpoint is, property "detecting").
"""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from ckpt_harness import conversions, oracle
from ckpt_harness.catalogue.checks import NotApplicable, run_settings
from ckpt_harness.config import Setting, ends_group
from ckpt_harness.conversions.run import Converted, run_conversion
from ckpt_harness.pipeline.baseline import Baseline
from ckpt_harness.records.runs import Run
from ckpt_harness.pipeline.clock import CaseClock
from ckpt_harness.state import Record
from ckpt_harness.targets import PROPAGATION, RunRequest
from ckpt_harness.verdict import CaseResult

#: Seconds one conversion may take: a fresh interpreter importing its
#: framework (DeepSpeed, transformers: up to ~15 s on a busy 2-core box),
#: then tiny tensors. Only a wedged conversion reaches it.
DEADLINE = 180.0
#: The name of a `convert` case that resumes from a round trip: "<conversion> resumed".
RESUMED = "resumed"


def _known(names: Any) -> Optional[str]:
    if not isinstance(names, tuple):
        return "must be a list"
    unknown = [n for n in names if n not in conversions.registry() and ":" not in str(n)]
    return (f"has unknown {', '.join(map(str, unknown))}: choose from {', '.join(conversions.registry())}, or give "
            "module:attribute") if unknown else None


CONVERSIONS = Setting("conversions", tuple, (), "the conversions to run, by registered name or module:attribute "
                      "(none given: every registered one that reads the target's checkpoint layout)", rule=_known)


def _chosen(scenario, layout: Optional[str], fits: Callable[[conversions.Conversion], bool],
            only: Optional[Sequence[str]], what: str) -> list[str]:
    """The conversions the scenario names (or all registered) that read
    `layout` and `fit`; NotApplicable, saying why, when there is none."""
    asked = scenario.params["conversions"]
    names = [n for n in (asked or conversions.registry())
             if conversions.get(n).reads == layout and fits(conversions.get(n))]
    if not names:
        among = f" among {', '.join(asked)}" if asked else ""
        raise NotApplicable(f"no conversion{among} reads the {layout} layout{what}")
    return [n for n in names if not only or any(case in (n, f"{n} {RESUMED}") for case in only)]


def _missing(conversion: conversions.Conversion) -> str:
    """What the conversion needs that is not installed, with what installs it ("" if nothing)."""
    return ", ".join(f"{module} ({hint})" for module, hint in conversion.requires.items()
                     if importlib.util.find_spec(module) is None)


def _skipped(conversion: conversions.Conversion, source: Path) -> Optional[str]:
    """Why this conversion is not run on this save (n/a), or None."""
    missing = _missing(conversion)
    return f"needs {missing}" if missing else conversion.applies(source)


def _put(out: Path, source: Path) -> None:
    """The converted checkpoint in `out` takes the place of the save in `source`."""
    for entry in list(source.iterdir()):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for entry in list(out.iterdir()):
        shutil.move(str(entry), source / entry.name)


@dataclasses.dataclass(frozen=True)
class _Save:
    """Save k to convert, and the truth its conversions are held to."""

    #: The checkpoint directory holding save k, as it was when save k returned.
    ckpt: Path
    k: int
    #: The run that made it: each case's context.
    run: Run
    #: The target's full state when save k returned (`Job.full_state`);
    #: None: the save as its own layout's loader reads it (`Conversion.read_source`).
    full_state: Optional[Record]


class Convert:
    params = (CONVERSIONS, *run_settings("save_every", steps=4, save="last"))
    #: A layout a conversion reads.
    requires = ("conversions",)

    def validate(self, params: Mapping[str, Any]) -> Optional[str]:
        return None

    def run(self, bench, scenario, only: Optional[Sequence[str]] = None) -> Sequence[CaseResult]:
        target = bench.target_for(scenario.params)
        names = _chosen(scenario, target.caps.layout, lambda c: True, only, "")
        root = bench.root / scenario.name
        clock = CaseClock()
        held_to_full_state = target.caps.has("full_state") and target.caps.has("full_state_keys")
        made = (self._with_full_state(bench, scenario, target, names, root, clock)
                if held_to_full_state else self._committed(bench, scenario, target))
        if isinstance(made, CaseResult):
            return [clock.stamp(made, every=bench.timelines == "all")]
        try:
            source = conversions.save_dir(made.ckpt, made.k)
        except LookupError as exc:
            return [clock.stamp(oracle.not_applicable(name, scenario.property, str(exc))) for name in names]
        results = []
        for name in names:
            # Each case's clock holds the shared saving run; a conversion's own
            # seconds are outside any run: the harness's part.
            case = clock if not results else CaseClock(context=[made.run])
            conversion = conversions.get(name)
            skipped = _skipped(conversion, source)
            if skipped is not None:
                results.append(case.stamp(oracle.not_applicable(name, scenario.property, skipped)))
                continue
            converted = run_conversion(name, source, root / name, DEADLINE, read_source=made.full_state is None)
            case.judging()
            if not only or name in only:
                results.append(case.stamp(oracle.judge_conversion(
                    name, scenario.property, made.k,
                    made.full_state if made.full_state is not None else converted.source, converted,
                    writes=conversion.writes, drops=conversion.drops, why_dropped=conversion.why_dropped,
                    repro=bench.repro(scenario, name)), every=bench.timelines == "all"))
            if conversion.gives == conversion.reads and not conversion.drops and converted.state is not None \
                    and made.full_state is not None and (not only or f"{name} {RESUMED}" in only):
                results.append(self._resumed(bench, scenario, target, made, name, root))
        return results

    def _with_full_state(self, bench, scenario, target, names, root, clock) -> Union[_Save, CaseResult]:
        """A saving run of its own that records the full state as save k returned."""
        steps = target.save_steps() or []
        k = steps[-1] if steps else scenario.params["save_every"]
        saved = clock.run(lambda: target.run(RunRequest("saving run", stop_after_save=k, trace_files=False,
                                                        full_state=True), root / "ckpt", root / "save"), broken=k)
        failed = oracle.judge_reshard_save("saving run", scenario.property, saved, k, target.world_size,
                                           bench.repro(scenario, names[0]) if names else None)
        return failed or _Save(root / "ckpt", k, saved, oracle.saved_full(saved, k)["state"])

    def _committed(self, bench, scenario, target) -> Union[_Save, CaseResult]:
        """The committed save k of the bench's shared baseline (a script's)."""
        base = _committed_baseline(bench, scenario, target)
        return base if isinstance(base, CaseResult) else _Save(base.committed, base.k, base.golden, None)

    def _resumed(self, bench, scenario, target, made: _Save, name: str, root: Path) -> CaseResult:
        """A round trip put where save k was: the job's own loader resumes it."""
        case = f"{name} {RESUMED}"
        clock = CaseClock(context=[made.run])
        ckpt = root / name / "ckpt"
        shutil.copytree(made.ckpt, ckpt, symlinks=True)
        _put(root / name / "out", conversions.save_dir(ckpt, made.k))
        resumed = clock.run(lambda: target.run(RunRequest("resumed run", trace_files=False, full_state=True,
                                                          failure_grace=PROPAGATION), ckpt, root / name / "resume"),
                            resume=True)
        clock.judging()
        assert made.full_state is not None
        return clock.stamp(oracle.judge_converted_resume(case, scenario.property, made.k, made.full_state, resumed,
                                                         noun=target.noun, repro=bench.repro(scenario, case)),
                           every=bench.timelines == "all")


class Confuse:
    params = (CONVERSIONS, *run_settings("save", "save_every", steps=6))
    #: A layout a conversion reads.
    requires = ("conversions",)

    def validate(self, params: Mapping[str, Any]) -> Optional[str]:
        return None

    def run(self, bench, scenario, only: Optional[Sequence[str]] = None) -> Sequence[CaseResult]:
        target = bench.target_for(scenario.params)
        layout = target.caps.layout
        names = _chosen(scenario, layout, lambda c: c.gives != c.reads and not c.drops, only,
                        " and writes a complete save in another layout")
        base = _committed_baseline(bench, scenario, target)
        if isinstance(base, CaseResult):
            return [base]
        return [self._case(bench, scenario, target, base, name) for name in names]

    def _case(self, bench, scenario, target, base, name: str) -> CaseResult:
        conversion = conversions.get(name)
        clock = CaseClock(context=[base.golden])
        root = bench.root / scenario.name / name
        try:
            source = conversions.save_dir(base.committed, base.k)
        except LookupError as exc:
            return clock.stamp(oracle.not_applicable(name, scenario.property, str(exc)))
        skipped = _skipped(conversion, source)
        if skipped is not None:
            return clock.stamp(oracle.not_applicable(name, scenario.property, skipped))
        converted = run_conversion(name, source, root, DEADLINE)
        unmade = _unmade(converted, name, scenario.property, base.k)
        if unmade is not None:
            return clock.stamp(unmade)
        ckpt = root / "ckpt"
        shutil.copytree(base.committed, ckpt, symlinks=True)
        placed = conversions.save_dir(ckpt, base.k)
        _put(root / "out", placed)
        resumed = clock.run(lambda: target.run(RunRequest("resumed run", trace_files=False,
                                                          failure_grace=PROPAGATION), ckpt, root / "resume"),
                            resume=True)
        clock.judging()
        where = str(placed.relative_to(ckpt))
        result = oracle.judge_fault(
            name, oracle.OTHER_LAYOUT, base.reference, None, resumed, save_returned=True,
            detail=f"save {base.k} handed to the resume as {conversion.writes}, in {where}/",
            repro=bench.repro(scenario, name), ends_group=ends_group(target.values),
            row=lambda outcome: ("*", "", "convert", where, "", oracle.OTHER_LAYOUT, outcome.kind.value))
        return clock.stamp(result, every=bench.timelines == "all")


def _committed_baseline(bench, scenario, target) -> Union[Baseline, CaseResult]:
    """The bench's shared baseline with its run stopped after save k (a
    `Baseline`), or why there is no committed save to convert (a result)."""
    base = bench.baseline(target, bench.plan(scenario.params), committed=True)
    if base.committed is None:
        return oracle.cannot_judge("committed run", scenario.property, f"the run stopped after save {base.k} "
                                   f"failed, leaving nothing to convert: {base.committed_problem}")
    return base


def _unmade(converted: Converted, name: str, check: str, k: int) -> Optional[CaseResult]:
    """The case cannot be made when the conversion wrote nothing usable: not the loader's doing."""
    if converted.refused is not None:
        return oracle.not_applicable(name, check, f"the conversion refused save {k}, so there is no save in "
                                                   f"another layout to hand the resume: {converted.refused}")
    problem = converted.error or converted.broken  # what its reader makes of it is the convert check's
    if problem is not None:
        return oracle.cannot_judge(name, check, f"the conversion that makes this case failed: {problem}",
                                   converted.details)
    return None


CHECK = Convert()
CONFUSE = Confuse()
