"""Conversions of a committed save: every conversion that reads the target's
checkpoint layout (`ckpt_harness.conversions`), one case each.

The run saves and stops after its last save k, recording the job's
`full_state` as save k returned: the truth a conversion is held to, the
same one a world-size change is (`reshard`). Each conversion then runs on
the committed directory in a process of its own (`conversions.run`), and
what it wrote, read back as its consumers load it, must be that state key
for key, bitwise, except what the conversion documents it drops; or the
conversion refuses. The saving run is shared by the cases; each conversion
writes into a directory of its own and reads the checkpoint only.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Mapping, Optional, Sequence

from ckpt_harness import conversions, oracle
from ckpt_harness.catalogue.checks import NotApplicable, run_settings
from ckpt_harness.config import Setting
from ckpt_harness.conversions.run import run_conversion
from ckpt_harness.records import CaseClock, Kind
from ckpt_harness.targets import RunRequest
from ckpt_harness.verdict import CaseResult, Verdict

#: Seconds one conversion may take: a fresh interpreter importing its
#: framework (DeepSpeed, transformers: up to ~15 s on a busy 2-core box),
#: then tiny tensors. Only a wedged conversion reaches it.
DEADLINE = 180.0


def _known(names: Any) -> Optional[str]:
    if not isinstance(names, tuple):
        return "must be a list"
    unknown = [n for n in names if n not in conversions.registry() and ":" not in str(n)]
    return (f"has unknown {', '.join(map(str, unknown))}: choose from {', '.join(conversions.registry())}, or give "
            "module:attribute") if unknown else None


class Convert:
    params = (
        Setting("conversions", tuple, (), "the conversions to run, by registered name or module:attribute (none "
                "given: every registered one that reads the target's checkpoint layout)", rule=_known),
        *run_settings("save_every", steps=4),
    )
    #: The truth (`full_state` at save k) and a layout a conversion reads.
    requires = ("full_state", "conversions")

    def validate(self, params: Mapping[str, Any]) -> Optional[str]:
        return None

    def run(self, bench, scenario, only: Optional[Sequence[str]] = None) -> Sequence[CaseResult]:
        target = bench.target_for(scenario.params)
        layout = target.caps.layout
        names = [n for n in scenario.params["conversions"] if conversions.get(n).reads == layout] \
            if scenario.params["conversions"] else conversions.for_layout(layout)
        if not names:
            raise NotApplicable(f"no conversion reads the {layout} layout"
                                + (f" among {', '.join(scenario.params['conversions'])}"
                                   if scenario.params["conversions"] else ""))
        names = [n for n in names if not only or n in only]
        missing = {n: _missing(conversions.get(n)) for n in names}
        if names and all(missing.values()):
            raise NotApplicable("; ".join(f"{n} needs {m}" for n, m in missing.items()))
        if not names:
            return []
        steps = target.save_steps() or []
        k = steps[-1] if steps else scenario.params["save_every"]
        root = bench.root / scenario.name
        clock = CaseClock()
        saved = clock.run(lambda: target.run(RunRequest("saving run", stop_after_save=k, trace_files=False,
                                                        full_state=True), root / "ckpt", root / "save"), broken=k)
        failed = oracle.judge_reshard_save("saving run", scenario.property, saved, k, target.world_size,
                                           bench.repro(scenario, names[0]))
        if failed is not None:
            return [clock.stamp(failed, every=bench.timelines == "all")]
        expected = saved.states(Kind.SAVED_FULL, k)[0]
        results = []
        for name in names:
            # Each case's clock holds the shared saving run as its context; the
            # conversion's own seconds are outside any run: the harness's part.
            case_clock = clock if not results else CaseClock(context=[saved])
            conversion = conversions.get(name)
            reason = f"needs {missing[name]}" if missing[name] else conversion.applies(root / "ckpt", k)
            if reason is not None:
                results.append(case_clock.stamp(CaseResult(name, scenario.property, Verdict.NA, reason)))
                continue
            converted = run_conversion(name, root / "ckpt", k, root / name, DEADLINE)
            case_clock.judging()
            judged = oracle.judge_conversion(name, scenario.property, k, expected, converted,
                                             writes=conversion.writes, drops=conversion.drops,
                                             why_dropped=conversion.why_dropped, repro=bench.repro(scenario, name))
            results.append(case_clock.stamp(judged, every=bench.timelines == "all"))
        return results


def _missing(conversion: conversions.Conversion) -> str:
    """What the conversion needs that is not installed, with what installs it ("" if nothing)."""
    return ", ".join(f"{module} ({hint})" for module, hint in conversion.requires.items()
                     if importlib.util.find_spec(module) is None)


CHECK = Convert()
