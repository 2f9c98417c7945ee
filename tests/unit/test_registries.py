"""Every registry (checks, conversions, kinds of target) loads an entry the one way
(`extensions.registered`): a broken entry point is refused naming it, where it points and what it lacks,
and a good one is loaded."""

from __future__ import annotations

import pytest

from ckpt_harness import targets
from ckpt_harness.catalogue import checks
from ckpt_harness.errors import ScenarioError, UsageError
from ckpt_harness.extensions import registered


def test_an_entry_that_does_not_import_is_refused_naming_it_and_why():
    with pytest.raises(ScenarioError, match=r"check 'gone' \(no_such_module_xyz:run\) cannot be loaded: "
                                            r"No module named 'no_such_module_xyz'"):
        registered("check", "gone", "no_such_module_xyz:run", checks.Check, ScenarioError, "is not a check")


def test_an_entry_that_is_not_of_its_protocol_is_refused_saying_what_it_lacks():
    with pytest.raises(ScenarioError, match=r"check 'dumps' \(json:dumps\) is not a check"):
        registered("check", "dumps", "json:dumps", checks.Check, ScenarioError, "is not a check")


def test_a_built_in_entry_is_loaded():
    where = checks.registry()["resume"]
    assert isinstance(registered("check", "resume", where, checks.Check, ScenarioError, "-"), checks.Check)


@pytest.fixture
def fresh():
    """The registries' caches emptied before and after: what the test plants is gone for the next."""
    for cached in (checks.registry, checks.get, targets.kinds):
        cached.cache_clear()
    yield
    for cached in (checks.registry, checks.get, targets.kinds):
        cached.cache_clear()


def test_each_registry_refuses_a_broken_entry_through_the_one_way(fresh, monkeypatch):
    from ckpt_harness import conversions

    monkeypatch.setattr(checks, "BUILTIN_CHECKS", {**checks.BUILTIN_CHECKS, "planted": "json:dumps"})
    with pytest.raises(ScenarioError, match=r"check 'planted' \(json:dumps\) has no params, validate\(\) and run"):
        checks.get("planted")
    with pytest.raises(ScenarioError, match=r"conversion 'json:loads' \(json:loads\) lacks reads, gives"):
        conversions.get("json:loads")  # "module:attribute" is taken as a conversion directly
    monkeypatch.setattr(targets, "BUILTIN_KINDS", {**targets.BUILTIN_KINDS, "planted": "json:dumps"})
    with pytest.raises(UsageError, match=r"target kind 'planted' \(json:dumps\) is not a "
                                         r"ckpt_harness.targets.TargetKind"):
        targets.kinds()
