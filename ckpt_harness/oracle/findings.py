"""Findings: a run's failing cases grouped by the mistake they share, as a person fixes them.

An exploration fails dozens of cases for one mistake. A job that renames
`latest` onto a step directory before its shards are written fails a crash
at every point in between, on every rank, and so does every other fault that
stops the save there (an error, a full disk, a torn write), each under its
own property. Grouped by what each case reports, that is a dozen groups; it
is one dependency: the shards must be written before the rename. ALICE
reports crash-consistency bugs this way, as the order or atomicity two
operations must have; so does this module, from the cases' fault points:

* **A window.** On one rank and in one phase, the consecutive points where a
  fault that stops the save before its operation (`crash`, `error`, `eio`,
  `enospc`) fails the case (FAIL: an UNKNOWN or a harness ERROR says
  nothing of the job's order and is grouped with those alike). The operation just before the window *opened*
  it: once it is done, a stop breaks the job (a publication, a deletion, an
  overwrite). The window's last operation *closed* it: once that is done,
  a stop is safe again. The job relies on the closing operation happening
  before the opening one. One phase's windows on every rank are one finding
  (the n-th window of each rank), with the faults that act inside an
  operation (`crash-mid`, `torn`, `crash-after`) at its points; findings of
  the same two operations in other phases are one.
* **What a power loss loses.** Cases that failed because the durability
  model dropped what no fsync had made durable, by the missing fsync most
  of them lost something to ("`step_N` was never fsynced"), whatever the
  point the power went.
* **Damaged files**: corruptions of committed files and torn writes outside
  a window that the load took for good, whatever it made of each ("partial"
  after a bit flip, a refusal on one rank after a zero page): one mistake,
  a load that does not check what it reads.
* **Everything else** by what each case reports: the same property and
  verdict, outcome, fault and operation, and the same reason once the
  numbers are taken out (a corruption, a delay, a plan of several faults, a
  verification's case).

Each failing judgment is in exactly one finding. A finding leads with the
property of the fault that opens its window, carries the other properties'
failures and the judgments riding along (`CaseResult.also`) under it, and is
reproduced by its first case.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Any, Iterable, Optional, Sequence

from ckpt_harness.inject.faults import BY_NAME, Family
from ckpt_harness.oracle.causes import severity_of
from ckpt_harness.verdict import CaseResult, Site, Verdict


#: Kinds that stop a save before their operation: their points draw a window's edges.
EDGES = tuple(k.name for k in BY_NAME.values()
              if not k.performed and k.blocks is None and k.family in (Family.CRASH, Family.ERROR))
#: Kinds that act inside their operation (or right after it): they join a window, never draw one.
INSIDE = tuple(k.name for k in BY_NAME.values()
               if k.performed and k.blocks is None and k.family in (Family.CRASH, Family.DAMAGE)
               and k.lasts is None)
#: The operation column of a corruption case (`pipeline.cases.Case.row`).
CORRUPT = "corrupt"
#: How a case's summary says the power loss, not the stop, broke it, and how its details
#: list each loss and why (`pipeline.cases._explain_power_loss` writes both).
LOST = "; power loss lost "
LOSSES = "did not keep, and why:\n"
_NUMBERS = re.compile(r"\d+")


def _shape(site: Site) -> tuple[str, str, str]:
    """An operation whatever the rank and step: `write step_N/rankN.pt` from one line."""
    return (site.op, _NUMBERS.sub("N", site.target), site.caller)


def _collective(site: Optional[Site]) -> bool:
    return site is not None and site.op == "collective"


def describe_ops(ops: Sequence[Site]) -> str:
    """The operations at `ops` by shape, each with its ranks and line:
    "`write step_N/rankN.pt` (ranks 0, 1 · checkpointers.py:139 in _write_files())"."""
    by_shape: dict[tuple[str, str, str], list[Site]] = {}
    for o in ops:
        by_shape.setdefault(_shape(o), []).append(o)
    parts = []
    for (op, target, caller), same in by_shape.items():
        ranks = sorted({o.rank for o in same})
        text = same[0].target if len(same) == 1 else target
        what = f"{target}" if op == "collective" else f"{op} {text}"
        where = [f"rank{'s' * (len(ranks) > 1)} {', '.join(map(str, ranks))}"]
        if len(same) == 1:
            where[0] += f" #{same[0].index}"
        parts.append(f"`{what}` ({' · '.join([*where, *([caller] if caller else [])])})")
    return " and ".join(parts)


@dataclasses.dataclass(frozen=True)
class Finding:
    """Failing judgments that share one mistake, and the mistake in one line."""

    #: Which dependency grouped them: "window", "power loss", "damaged" or "alike".
    kind: str
    #: What a person reads first: the dependency, with the user's lines.
    headline: str
    #: The failing judgments, the lead property's first.
    cases: tuple[CaseResult, ...]
    #: A window's opening operation on each rank that has one (the one named first leads),
    #: as the case whose fault struck there saw it.
    opened_by: tuple[Site, ...] = ()
    #: A window's closing operation on each rank.
    closed_by: tuple[Site, ...] = ()

    @property
    def check(self) -> str:
        return self.cases[0].check

    @property
    def verdict(self) -> Verdict:
        return self.cases[0].verdict

    @property
    def severity(self) -> str:
        """What differs in its lead property's state comparisons ("" when none compared states)."""
        worst = severity_of(c for c in self.cases if c.check == self.check)
        return worst.label if worst is not None else ""

    @property
    def repro(self) -> Optional[str]:
        return next((c.repro for c in self.cases if c.repro), None)

    def secondary(self) -> list[tuple[str, str, int]]:
        """(check, verdict, how many) of the failures under the lead: the
        other properties its cases broke, then those riding along (`also`)."""
        lead = (self.check, self.verdict.value)
        counts = Counter((c.check, c.verdict.value) for c in self.cases)
        counts.update((a.check, a.verdict.value) for c in self.cases for a in c.also if not a.verdict.ok)
        return [(check, verdict, n) for (check, verdict), n in counts.items() if (check, verdict) != lead]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "check": self.check, "verdict": self.verdict.value, "severity": self.severity,
                "headline": self.headline,
                "cases": [c.case for c in self.cases], "repro": self.repro,
                "opened_by": [o.to_json() for o in self.opened_by],
                "closed_by": [o.to_json() for o in self.closed_by],
                "also": [{"check": c, "verdict": v, "count": n} for c, v, n in self.secondary()]}


def group(results: Sequence[CaseResult], noun: str = "job") -> list[Finding]:
    """The findings of `results` (every judged case, passing ones included:
    they draw a window's edges, by where each case's fault struck, `site`)."""
    taken: set[int] = set()
    found = _windows(results, taken, noun)
    failing = [r for r in results if not r.verdict.ok and id(r) not in taken]
    lost = _power_losses([r for r in failing if LOST in r.summary], noun)
    damaged = [_damaged(cases, noun) for cases in _by([r for r in failing if _damages(r)],
                                                      lambda r: r.verdict).values()]
    rest = [r for r in failing if LOST not in r.summary and not _damages(r)]
    alike = [_alike(cases) for cases in _by(rest, alike_key).values()]
    by_size = lambda fs: sorted(fs, key=lambda f: -len(f.cases))  # noqa: E731 - stable: first seen first
    return by_size(found) + by_size([*lost, *damaged, *alike])


# -- windows -----------------------------------------------------------------------------------
@dataclasses.dataclass
class _Window:
    """Consecutive failing points of one rank in one phase."""

    rank: int
    phase: str
    #: The operations at its points, in order.
    ops: list[Site]
    #: The operation right before it (None: it starts with the phase).
    before: Optional[Site]

    @property
    def opened(self) -> Optional[Site]:
        """What opened it: the operation before it, or where that is a
        collective (its peer did something after it that this rank depends on),
        the window's first operation that is not one."""
        if not _collective(self.before):
            return self.before
        return next((o for o in self.ops if not _collective(o)), self.before)

    @property
    def closed(self) -> Site:
        return self.ops[-1]

    def leads(self) -> tuple:
        """Which window names its finding's opening operation: one opened by
        the operation right before it, not by a collective, then the lowest rank."""
        return (self.opened is None or _collective(self.opened), self.opened is not self.before, self.rank,
                self.phase)


def _windows(results: Sequence[CaseResult], taken: set[int], noun: str) -> list[Finding]:
    at: dict[tuple[int, str, int], list[tuple[str, CaseResult]]] = {}
    ops: dict[tuple[int, str, int], Site] = {}
    for r in results:
        if r.site is not None:
            where = (r.site.rank, r.site.phase, r.site.index)
            at.setdefault(where, []).append((r.site.fault, r))
            ops.setdefault(where, r.site)
    edges: dict[tuple[int, str], list[tuple[Site, bool]]] = {}  # (rank, phase) -> [(op, fails)]
    for where, judged in sorted(at.items()):
        stops = [r for kind, r in judged if kind in EDGES and LOST not in r.summary]
        if stops:
            edges.setdefault(where[:2], []).append((ops[where], any(r.verdict is Verdict.FAIL for r in stops)))
    by_nth: dict[tuple[str, int], list[_Window]] = {}
    for (rank, ph), line in edges.items():
        n = 0
        for i, (_, fails) in enumerate(line):
            if not fails or (i and line[i - 1][1]):
                continue
            end = i
            while end + 1 < len(line) and line[end + 1][1]:
                end += 1
            by_nth.setdefault((ph, n), []).append(
                _Window(rank, ph, [o for o, _ in line[i:end + 1]], line[i - 1][0] if i else None))
            n += 1
    merged: dict[tuple, list[_Window]] = {}
    for windows in by_nth.values():
        opener = min(windows, key=_Window.leads).opened
        key = (_shape(opener) if opener else None, tuple(sorted({_shape(o) for o in _closers(windows)})))
        merged.setdefault(key, []).extend(windows)
    found = []
    for windows in merged.values():
        cases: list[tuple[tuple, str, CaseResult]] = []
        for w in windows:
            inside = {o.index for o in w.ops}
            for index in sorted({*inside, *([w.before.index] if w.before is not None else [])}):
                for kind, r in at.get((w.rank, w.phase, index), ()):
                    joins = kind in INSIDE or (index in inside and kind in EDGES)
                    if joins and r.verdict is Verdict.FAIL and LOST not in r.summary and id(r) not in taken:
                        cases.append(((BY_NAME[kind].severity, len(cases)), kind, r))
                        taken.add(id(r))
        cases.sort(key=lambda c: c[0])
        lead = cases[0][2].check
        cases.sort(key=lambda c: c[2].check != lead)  # stable: the lead property's first, else as they were
        opened = tuple(w.opened for w in sorted(windows, key=_Window.leads) if w.opened is not None)
        closed = _closers(windows)
        ranks = sorted({w.rank for w in windows})
        line = _window_line(opened, closed, ranks, [k for _, k, _ in cases], [r for *_, r in cases], noun)
        found.append(Finding("window", line, tuple(r for *_, r in cases), opened, closed))
    return found


def _closers(windows: Sequence[_Window]) -> tuple[Site, ...]:
    """What closed the windows: each rank's last operation in its window,
    but a collective where another rank's is not one (that rank waited there
    for its peer's operation, which is what closed it)."""
    closed = [w.closed for w in sorted(windows, key=lambda w: (w.rank, w.phase))]
    return tuple(o for o in closed if not _collective(o)) or tuple(closed)


def _window_line(opened: Sequence[Site], closed: Sequence[Site], ranks: Sequence[int], kinds: Sequence[str],
                 cases: Sequence[CaseResult], noun: str) -> str:
    """The dependency, the opening operation first (where a fix goes: it
    moves after the closing one): "`rename latest.tmp -> latest` (...) comes
    before `write step_N/rankN.pt` (...) is done, and the job relies on the
    reverse: between them, crash, error ... break atomic"."""
    faults = ", ".join(dict.fromkeys(kinds))
    outcomes = ", ".join(dict.fromkeys(c.outcome for c in cases if c.outcome))
    between = (f"{faults} on rank{'s' * (len(ranks) > 1)} {', '.join(map(str, ranks))} "
               f"break{'s' * (len(cases) == 1)} {cases[0].check}" + (f" (the resume: {outcomes})" if outcomes else ""))
    done = describe_ops(closed)
    if not opened:
        return f"the {noun}'s save cannot stop anywhere before {done} is done: from its start, {between}"
    return (f"{describe_ops(opened[:1])} comes before {done} is done, and the {noun} relies on the reverse: "
            f"between them, {between}")


# -- power losses ------------------------------------------------------------------------------
def _power_losses(failing: Sequence[CaseResult], noun: str) -> list[Finding]:
    """By the missing fsync most of them lost something to, then the next
    among those left (a case lists every loss: `step_N` never fsynced, and
    also `latest.tmp` whose directory was not fsynced after it; the first
    is what every case shares)."""
    lost = {id(r): _losses(r) for r in failing}
    left, found = list(failing), []
    while left:
        counts = Counter(why for r in left for why in dict.fromkeys(why for _, why in lost[id(r)]))
        if not counts:
            found.append(_alike(left))
            break
        why = counts.most_common(1)[0][0]
        cases = [r for r in left if any(w == why for _, w in lost[id(r)])]
        left = [r for r in left if all(w != why for _, w in lost[id(r)])]
        shown = _some([path for r in cases for path, w in lost[id(r)] if w == why])
        lead = Counter(c.check for c in cases).most_common(1)[0][0]
        ordered = tuple(sorted(cases, key=lambda r: r.check != lead))
        found.append(Finding("power loss", f"a power loss drops what the {noun} never made durable: {why} "
                                           f"(lost: {shown}); {len(cases)} case{'s' * (len(cases) > 1)} break {lead}",
                             ordered))
    return found


def _losses(r: CaseResult) -> list[tuple[str, str]]:
    """(path, why with its numbers out) of each loss a case's details list
    (`pipeline.cases._explain_power_loss`: "  step_000002/model.pt: created,
    but `step_000002` was never fsynced"); the why is what was not fsynced."""
    _, _, listing = r.details.partition(LOSSES)
    out = []
    for line in listing.split("\n"):
        if not line.startswith("  "):
            break
        path, _, why = line.strip().partition(": ")
        why = why.partition(", but ")[2] or "data " + re.sub(r" \(.*\)$", "", why)  # "written after its last fsync"
        out.append((_NUMBERS.sub("N", path), _NUMBERS.sub("N", why.partition("; ")[0].partition(": ")[0])))
    return out


# -- damaged files -----------------------------------------------------------------------------
def _damages(r: CaseResult) -> bool:
    """A case that hands the load damaged bytes: a corruption of a committed
    file, or a write that lands torn (outside a window: inside one, the
    window is the cause)."""
    return r.cell("op") == CORRUPT or (r.site is not None and BY_NAME[r.site.fault].family is Family.DAMAGE)


def _damaged(cases: Sequence[CaseResult], noun: str) -> Finding:
    """Damaged files the load took for good, whatever it made of each: one
    mistake, a load that does not check what it reads. Its own property's
    judgments lead (`detecting`), those a hang or a refusal on one rank
    made worse under it."""
    made: dict[str, dict[str, list[str]]] = {}  # outcome -> damage -> files
    for c in cases:
        damage = c.site.fault if c.site is not None else c.cell("fault")
        target = c.site.target if c.site is not None else c.cell("target")
        made.setdefault(c.cell("outcome") or "?", {}).setdefault(damage, []).append(_NUMBERS.sub("N", target))
    parts = []
    for outcome, damages in made.items():
        what = "; ".join(f"{damage} of {_some(files)}" for damage, files in damages.items())
        parts.append(f"{what} → {outcome}")
    ordered = tuple(sorted(cases, key=lambda c: c.check != "detecting"))
    return Finding("damaged", f"the {noun}'s load takes a checkpoint damaged on disk for good: {' · '.join(parts)}",
                   ordered)


def _some(names: Sequence[str], limit: int = 4) -> str:
    names = list(dict.fromkeys(names))
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


# -- alike -------------------------------------------------------------------------------------
def alike_key(r: CaseResult) -> tuple[str, ...]:
    """What a case reports: property and verdict, outcome, fault and
    operation, the reason with its numbers out, the severity of what differs."""
    _, _, after = r.summary.partition(" → ")
    why = after.partition("; ")[2].partition(": ")[0] if "; " in after else ""
    worst = severity_of([r])
    return (r.check, r.verdict.value, r.cell("outcome"), r.cell("fault"), r.cell("op"),
            _NUMBERS.sub("N", why), worst.label if worst is not None else "")


def _alike(cases: Sequence[CaseResult]) -> Finding:
    """Cases alike: the outcome after the fault and operation, and why; a
    case with no table row (a verification's) by its own summary."""
    _, _, outcome, fault, op, why, _ = alike_key(cases[0])
    if not cases[0].cells:
        return Finding("alike", cases[0].summary, tuple(cases))
    if len(cases) == 1:  # its own numbers, not a group's ("rank 1 finished", not "rank N")
        _, _, after = cases[0].summary.partition(" → ")
        why = after.partition("; ")[2].partition(": ")[0] if "; " in after else ""
    return Finding("alike", f"{outcome} after {fault} at {op}" + (f": {why}" if why else ""), tuple(cases))


def _by(results: Iterable[CaseResult], key: Any) -> dict[Any, list[CaseResult]]:
    groups: dict[Any, list[CaseResult]] = {}
    for r in results:
        groups.setdefault(key(r), []).append(r)
    return groups
