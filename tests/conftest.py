"""Fixtures shared by the real-process tests."""

import pytest

from tests.pace import Pace, measure


@pytest.fixture
def pace(tmp_path_factory) -> Pace:
    """This machine's slowdown right now, measured just before the test times anything."""
    return measure(tmp_path_factory.mktemp("pace"))
