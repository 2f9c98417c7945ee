"""State differences folded for a person: one line per differing key or key
group, identical ranks once.

A forgotten optimizer differs in the same dozens of keys on every rank; listed
key by key and rank by rank that is hundreds of lines in which the one fact
("optim/* missing everywhere") is hard to find. Keys that differ the same way
under one top-level name fold into one line, and ranks whose folded lines are
identical share one block.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Mapping, Sequence

from ckpt_harness.oracle.severity import kind_of_key, severity
from ckpt_harness.state import Difference, Record, diff
from ckpt_harness.verdict import StateDiff

#: Keys of one group and kind listed one by one up to this many; more fold into one line.
FOLD_AT = 3
#: Lines listed per block of ranks before "... and N more".
MAX_LISTED = 12

#: What a folded line says for each kind of difference.
_KIND_WORDS = {"missing": "missing", "unexpected": "unexpected keys", "dtype": "dtype differs",
               "shape": "shape differs", "values": "values differ"}


@dataclasses.dataclass(frozen=True)
class Line:
    """One line of a folded diff and the keys it stands for."""

    text: str
    keys: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Block:
    """Ranks whose differences fold to the same lines."""

    ranks: tuple[int, ...]
    lines: tuple[Line, ...]

    @property
    def label(self) -> str:
        return ranks_label(self.ranks)


def fold(problems: Sequence[tuple[int, Sequence[Difference]]]) -> list[Block]:
    """Per-rank differences (rank order) as blocks of ranks with identical lines."""
    blocks: dict[tuple[Line, ...], list[int]] = {}
    for rank, differences in problems:
        blocks.setdefault(fold_keys(differences), []).append(rank)
    return [Block(tuple(ranks), lines) for lines, ranks in blocks.items()]


def fold_keys(differences: Sequence[Difference]) -> tuple[Line, ...]:
    """One line per key, or per group of more than FOLD_AT keys under one
    top-level name that differ the same way ("optim/* (18 keys): missing").
    Within a group, keys of one leaf name that differ identically keep their
    own line, so the fact is not averaged away ("optim/*/step (6 keys): 5.0,
    expected 4.0")."""
    # Under what every key shares (a script's keys start with the file they went to), the top names differ.
    shared = _shared_prefix([d.key for d in differences])
    groups: dict[tuple[str, str], list[Difference]] = {}
    for d in differences:
        groups.setdefault((shared + _top(d.key[len(shared):]), d.kind), []).append(d)
    lines: list[Line] = []
    for (top, kind), ds in groups.items():
        if len(ds) <= FOLD_AT:
            lines += [Line(str(d), (d.key,)) for d in ds]
            continue
        by_leaf: dict[str, list[Difference]] = {}
        for d in ds:
            by_leaf.setdefault(_leaf(d.key), []).append(d)
        alike = {leaf: group for leaf, group in by_leaf.items()
                 if kind not in ("missing", "unexpected")  # their lines say no more than the kind
                 and len(group) > 1 and len({d.detail for d in group}) == 1 and len(group) < len(ds)}
        for leaf, group in alike.items():
            lines.append(Line(f"{top}*{leaf} ({len(group)} keys): {group[0].detail}", tuple(d.key for d in group)))
        rest = [d for d in ds if _leaf(d.key) not in alike]
        if len(rest) <= FOLD_AT:
            lines += [Line(str(d), (d.key,)) for d in rest]
        else:
            leaves = {_leaf(d.key) for d in rest}  # one leaf name: say which ("optim/*/step", not "optim/*")
            name = f"{top}*{leaves.pop()}" if len(leaves) == 1 else f"{top}*"
            lines.append(Line(f"{name} ({len(rest)} keys): {_what(kind, rest)}", tuple(d.key for d in rest)))
    return tuple(lines)


def summary(problems: Sequence[tuple[int, Sequence[Difference]]]) -> str:
    """The lead line: the most telling differences, named. Keys rank by the
    severity baselines use (`severity.Severity`: a key missing or unexpected,
    then model or optimizer values, counters, data position, RNG); the
    worst kind leads, its first keys named (never a ``*``), on the ranks
    that share it, then how many more keys differ and of what kind."""
    def rank_of(d: Difference) -> tuple:
        return severity([d]), d.kind

    worst = max(rank_of(d) for _, ds in problems for d in ds)
    lead_rank, lead_ds = next((r, ds) for r, ds in problems if any(rank_of(d) == worst for d in ds))
    lead = [d for d in lead_ds if rank_of(d) == worst]
    # The ranks where the named keys differ so: one key quoted, by the same values; keys folded, by any.
    same = (lambda d: (d.key, d.detail)) if len(lead) == 1 else (lambda d: (d.key, d.kind))
    named = {same(d) for d in lead[:NAMED]}
    ranks = [r for r, ds in problems if named <= {same(d) for d in ds}]
    names = ", ".join(d.key for d in lead[:NAMED]) + (f" (+{len(lead) - NAMED} more)" if len(lead) > NAMED else "")
    what = lead[0].detail if len(lead) == 1 else _what(worst[1], lead)
    rest = {d.key: d for _, ds in problems for d in ds if d.key not in {x.key for x in lead}}
    kinds = sorted({kind_of_key(k) for k in rest})
    more = f" (and {len(rest)} more keys: {', '.join(kinds)})" if rest else ""
    return f"{ranks_label(ranks)} {names}: {what}{more}"


#: Keys a lead line names before "(+N more)".
NAMED = 2


def listing(problems: Sequence[tuple[int, Sequence[Difference]]]) -> str:
    """Every block: "ranks 0-3:" then its lines."""
    out = []
    for block in fold(problems):
        out.append(f"{block.label}:")
        out += [f"  {line.text}" for line in block.lines[:MAX_LISTED]]
        if len(block.lines) > MAX_LISTED:
            out.append(f"  ... and {len(block.lines) - MAX_LISTED} more")
    return "\n".join(out)


#: State differences a case keeps key by key (`rows`): enough for a table, bounded for a matrix.
MAX_ROWS = 200


def rows(problems: Sequence[tuple[int, Sequence[Difference]]]) -> tuple[StateDiff, ...]:
    """Every difference as a row of its own, rank by rank, up to MAX_ROWS."""
    out = [StateDiff(d.key, rank, d.detail, d.kind, d.first, d.max_abs) for rank, ds in problems for d in ds]
    return tuple(out[:MAX_ROWS])


def ranks_label(ranks: Sequence[int]) -> str:
    """"rank 2", "ranks 0-3", "ranks 0, 2, 5-7"."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    spans: list[list[int]] = []
    for r in sorted(ranks):
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return "ranks " + ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def _top(key: str) -> str:
    """The key's top-level name with its separator ("optim/", "model."), or the key."""
    cut = min((i for i in (key.find("/"), key.find(".")) if i > 0), default=-1)
    return key[: cut + 1] if cut > 0 else key


def _shared_prefix(keys: Sequence[str]) -> str:
    """The leading names every key of `keys` shares, up to a separator, when
    they name a file or a step ("step_4.pt.tmp.", "last save.checkpoint-4/"):
    folded by it, every key is one group that says nothing. A shared name
    that says what the state is ("optim/") stays the group's."""
    if len(keys) < 2:
        return ""
    common = os.path.commonprefix(list(keys))
    cut = max(common.rfind("."), common.rfind("/"))
    shared = common[:cut + 1] if cut > 0 else ""
    return shared if _FILE_OR_STEP.search(shared) else ""


_FILE_OR_STEP = re.compile(r"\d|\.(pt|pth|bin|ckpt|pkl|json|npz|safetensors|tmp)\b")


def _leaf(key: str) -> str:
    """The key's last name with its separator ("/step"), or "" if it has one part."""
    cut = max(key.rfind("/"), key.rfind("."))
    return key[cut:] if cut > 0 else ""


def _what(kind: str, ds: Sequence[Difference]) -> str:
    details = {d.detail for d in ds}
    if len(details) == 1:
        return ds[0].detail
    words = _KIND_WORDS.get(kind, kind)
    worst = [d.max_abs for d in ds if d.max_abs is not None and not math.isnan(d.max_abs)]
    if kind == "values" and worst:
        return f"{words}, max abs diff {max(worst):.6g}"
    if kind in ("missing", "unexpected"):
        return words
    return f"{words} (first: {ds[0]})"


def by_rank(expected_states: Mapping[int, Record], actual: Mapping[int, Record]) -> list[tuple[int, list[Difference]]]:
    """Each rank's differences from its expected state (ranks that differ only)."""
    out = []
    for rank in sorted(expected_states):
        differences = diff(expected_states[rank], actual.get(rank, {}))
        if differences:
            out.append((rank, differences))
    return out
