"""The fault-kind table: every row complete, and every view derived from it
equal to the table that module kept by hand before (`OLD_*`, copied
literally from the code as it was), so the move to one row per kind changed
nothing a run, a report or `ckpt-harness list` shows."""

from __future__ import annotations

import dataclasses
import errno
import os
import signal

import pytest

from ckpt_harness import config
from ckpt_harness.errors import ModelError
from ckpt_harness.inject import durability, faults
from ckpt_harness.inject.corrupt import CORRUPTIONS, UNSAFE_PICKLE
from ckpt_harness.inject.faults import BY_NAME, FAULT_KINDS, Fault, FaultKind, Family, InjectedError, Injector
from ckpt_harness.oracle import PROPERTIES, properties
from ckpt_harness.pipeline import cases

# -- the tables as they were ---------------------------------------------------------------------
OLD_FILE_OPS = ("open", "buffered-write", "write", "fsync", "rename", "unlink", "mkdir", "rmdir", "rmtree")
OLD_OPS = ("collective", *OLD_FILE_OPS)
OLD_KINDS = {
    "crash": (OLD_OPS, "SIGKILL the rank just before the operation"),
    "crash-after": (OLD_OPS, "SIGKILL the rank right after the operation"),
    "crash-mid": (("write",), "SIGKILL the rank halfway through a kernel write: a prefix stays on disk"),
    "error": (OLD_FILE_OPS, "raise an exception from the file operation"),
    "eio": (("open", "write", "fsync", "rename"), "fail the operation with OSError(EIO)"),
    "enospc": (("open", "write", "mkdir"), "fail the operation with OSError(ENOSPC)"),
    "torn": (("write",), "only a prefix of the write lands, the call reports success"),
    "hang": (OLD_OPS, "block forever before the operation"),
    "sigstop": (OLD_OPS, "stop the rank with SIGSTOP before the operation: neither dead nor raising, its sockets "
                         "open, none of its threads running"),
    "gil": (OLD_OPS, "hold the GIL in a C loop before the operation: no Python code of the rank runs again, "
                     "its signal handlers and helper threads included"),
    "delay": (OLD_OPS, "sleep before the operation (rank skew), then go on"),
    "power-loss": (OLD_OPS, "the machine loses power before the operation: every rank stops and the "
                            "checkpoint directory keeps only what was durable"),
}
OLD_BLOCKING = {
    "hang": "blocked by the injected hang",
    "sigstop": "stopped by the injected SIGSTOP",
    "gil": "holding the GIL in a C loop (injected gil fault)",
}
OLD_FAULTS_PERFORMED = ("delay", "crash-after", "crash-mid", "torn")
OLD_FAULTS_NOT_PERFORMED = ("crash", "power-loss", "error", "eio", "enospc", "hang", "sigstop", "gil")
OLD_CRASHES = ("crash", "crash-after", "crash-mid", "hang", "sigstop", "gil", "power-loss")
OLD_ERRORS = ("error", "eio", "enospc")
OLD_SEVERITY = ("power-loss", "crash", "crash-mid", "crash-after", "hang", "sigstop", "gil", "error", "eio", "enospc",
                "torn", "delay")
OLD_DERIVED_WHY = {
    "power-loss": "every rank stops at once",
    "power-loss-after": "every rank stops at once",
    "crash": "no peer waits on the crashed rank, so each ends its save as in the golden run",
    "crash-after": "no peer waits on the crashed rank, so each ends its save as in the golden run",
}
OLD_DEFAULT_FAULTS = ("crash", "crash-mid", "torn", "error", "eio", "enospc", "power-loss")


def old_property_for(kind: str) -> str:
    if kind in OLD_CRASHES:
        return "atomic"
    if kind in OLD_ERRORS:
        return "preserving"
    if kind == "delay":
        return "skew-safe"
    if kind == "power-loss-after":
        return "durable"
    if kind == UNSAFE_PICKLE:
        return "safe-loading"
    return "detecting"  # torn writes and corruption


# -- the derived views -----------------------------------------------------------------------------
#: What changed on purpose since: the looks at the directory became points, for a delay only; the
#: preemption notice came (a crash-like kind, before a delay in severity, not among the defaults).
LOOKS = ("stat", "list")
#: Requests to a bucket (issue 46): points of every kind armed at every act, and of `error`.
OBJECT_OPS = ("put", "upload", "part", "complete", "copy", "delete")
ACTS = (*OLD_OPS, *OBJECT_OPS)
PREEMPT = (ACTS, "a preemption notice before the operation, as a scheduler gives one: SIGTERM to every rank, "
                 "SIGKILL to what is left after --grace seconds")
NEW_KINDS = {**{k: ((ACTS if ops == OLD_OPS else ops), help) for k, (ops, help) in OLD_KINDS.items()
                if k != "power-loss"},
             "error": ((*OLD_FILE_OPS, *OBJECT_OPS), "raise an exception from the file operation or object request"),
             "delay": ((*ACTS, *LOOKS), OLD_KINDS["delay"][1]), "preempt": PREEMPT,
             "power-loss": (ACTS, OLD_KINDS["power-loss"][1])}
NEW_CRASHES = (*OLD_CRASHES[:-1], "preempt", "power-loss")
NEW_SEVERITY = (*OLD_SEVERITY[:-1], "preempt", "delay")


def test_ordered_views_are_the_old_tables():
    assert (faults.FILE_OPS, faults.ACTS, faults.OPS) == (OLD_FILE_OPS, ACTS, (*ACTS, *LOOKS))
    assert list(faults.KINDS.items()) == list(NEW_KINDS.items())  # the order is `list`'s and `--help`'s
    assert list(faults.BLOCKING.items()) == list(OLD_BLOCKING.items())
    assert properties.CRASHES == NEW_CRASHES
    assert properties.ERRORS == OLD_ERRORS
    assert cases.SEVERITY == NEW_SEVERITY
    assert config.DEFAULT_FAULTS == OLD_DEFAULT_FAULTS  # its order is the order of a point's cases


def test_membership_views_are_the_old_tables():
    """Only ever asked `kind in ...`: their order was never part of the behaviour."""
    assert set(durability.FAULTS_PERFORMED) == {*OLD_FAULTS_PERFORMED, "preempt"}
    assert set(durability.FAULTS_NOT_PERFORMED) == set(OLD_FAULTS_NOT_PERFORMED)
    assert cases._DERIVED_WHY == OLD_DERIVED_WHY


@pytest.mark.parametrize("kind", [*OLD_KINDS, "power-loss-after", *CORRUPTIONS])
def test_property_for_is_the_old_one(kind):
    assert properties.property_for(kind) == old_property_for(kind)


def test_property_for_refuses_a_kind_no_table_has():
    with pytest.raises(ModelError, match="'shredded'.*FAULT_KINDS"):
        properties.property_for("shredded")


def test_dominant_follows_the_old_severity():
    for a in OLD_SEVERITY:
        for b in OLD_SEVERITY:
            plan = (Fault(a, 0, "save 4", 0), Fault(b, 1, "save 4", 0))
            assert cases.dominant(plan) == min(a, b, key=OLD_SEVERITY.index)


# -- each row complete -----------------------------------------------------------------------------
#: The kinds that act on the operation itself, which the probes carry out (inject.probes, inject.files).
PROBE_KINDS = {"crash-after", "crash-mid", "torn"}


@pytest.mark.parametrize("row", FAULT_KINDS, ids=lambda row: row.name)
def test_every_row_is_complete(row: FaultKind):
    assert BY_NAME[row.name] is row
    assert row.help and row.ops and set(row.ops) <= set(faults.OPS)
    assert isinstance(row.family, Family) and properties.property_for(row.name) in PROPERTIES
    assert (row.before is None) == (row.name in PROBE_KINDS)
    assert row.name in durability.FAULTS_PERFORMED + durability.FAULTS_NOT_PERFORMED
    assert not (row.blocks and row.performed)  # a rank blocked for good never gets to the operation
    assert row.name in cases.SEVERITY


def test_every_family_judges_a_property():
    assert set(properties.FAMILY_PROPERTY) == set(Family)
    assert set(properties.FAMILY_PROPERTY.values()) <= set(PROPERTIES)


@pytest.mark.parametrize("change, words", [
    (dict(severity=1), "severities"),  # the same as crash
    (dict(default=0), "defaults"),  # the same as crash
    (dict(name="crash"), "twice"),
    (dict(ops=("teleport",)), "not among OPS"),
    (dict(blocks="stuck", performed=True), "blocks"),
])
def test_a_broken_table_is_refused_at_import(change, words):
    rows = (*FAULT_KINDS[:-1], dataclasses.replace(FAULT_KINDS[-1], **change))
    with pytest.raises(AssertionError, match=words):
        faults._check(rows)


# -- what each kind does before its operation, as the old branches of Injector.before did -----------------
class Blocked(Exception):
    """Stands in for the block that never returns."""


@pytest.fixture
def calls(monkeypatch):
    calls: list = []
    monkeypatch.setattr(faults, "die", lambda: calls.append("die"))
    monkeypatch.setattr(faults, "hold_gil", lambda: calls.append("hold_gil"))
    monkeypatch.setattr(faults.os, "kill", lambda pid, sig: calls.append(("kill", pid, sig)))
    monkeypatch.setattr(faults.time, "sleep", lambda s: calls.append(("sleep", s)))

    def block():
        calls.append("block")
        raise Blocked

    monkeypatch.setattr(faults, "block", block)
    return calls


def _before(kind: str, calls: list):
    injector = Injector(0, (), emit=lambda *a, **k: None, on_block=lambda: calls.append("on_block"))
    try:
        injector.before(Fault(kind, 0, "save 4", 3, seconds=0.25), "write", "/ckpt/model.pt")
    except Blocked:
        pass
    return calls


@pytest.mark.parametrize("kind, expected", [
    ("crash", ["die"]),
    ("power-loss", ["die"]),
    ("hang", ["on_block", "block"]),
    ("sigstop", ["on_block", ("kill", os.getpid(), signal.SIGSTOP), "block"]),
    ("gil", ["on_block", "hold_gil", "block"]),
    ("delay", [("sleep", 0.25)]),
    ("crash-after", []),
    ("crash-mid", []),
    ("torn", []),
])
def test_before_acts_as_the_old_branches(kind, expected, calls):
    assert _before(kind, calls) == expected


@pytest.mark.parametrize("kind, exc_type, code, message", [
    ("error", InjectedError, None, "ckpt_harness injected an error into write /ckpt/model.pt"),
    ("eio", OSError, errno.EIO, f"[Errno {errno.EIO}] ckpt_harness injected EIO into write: '/ckpt/model.pt'"),
    ("enospc", OSError, errno.ENOSPC,
     f"[Errno {errno.ENOSPC}] ckpt_harness injected ENOSPC into write: '/ckpt/model.pt'"),
])
def test_before_raises_as_the_old_branches(kind, exc_type, code, message, calls):
    with pytest.raises(exc_type) as info:
        _before(kind, calls)
    assert type(info.value) is exc_type and str(info.value) == message
    assert getattr(info.value, "errno", None) == code and calls == []


def test_an_unknown_kind_is_refused_as_before():
    with pytest.raises(ValueError, match="unknown fault kind 'shredded': choose from crash, crash-after, "):
        Fault("shredded", 0, "save 4", 0)
