"""A case confirmed cold runs on a golden run made cold (`Baseline.cold`):
`cases.placed_on` puts its faults at that run's operations, by address."""

from types import SimpleNamespace

from ckpt_harness.inject.faults import Fault
from ckpt_harness.pipeline.baseline import Point
from ckpt_harness.pipeline.cases import Case, placed_on

WARM = Point(0, "save 4", 6, "write", "step_4/a.pt", "save()", "write(step_4/a.pt)", 1)
#: The same operation in the cold run, after one more before it (an import that opened a file, say).
COLD = Point(0, "save 4", 7, "write", "step_4/a.pt", "save()", "write(step_4/a.pt)", 1)
OTHER = Point(1, "save 4", 3, "barrier", "barrier", "save()", "barrier", 1)


def test_a_fault_named_by_address_is_placed_at_the_cold_runs_operation_of_that_address():
    case = Case.of((WARM.fault("crash"),), [WARM])
    placed = placed_on(case, SimpleNamespace(points=(OTHER, COLD)))
    assert placed.name == case.name and placed.kind == case.kind
    assert placed.points == (COLD,) and placed.faults[0].index == 7, placed
    assert placed_on(case, SimpleNamespace(points=(WARM,))) == case  # the same run: the same case


def test_what_has_no_address_there_is_left_as_it_is():
    by_index = Case.of((Fault("crash", 0, "save 4", 6),), [WARM])
    assert placed_on(by_index, SimpleNamespace(points=(COLD,))).faults == by_index.faults
    unreached = Case.of((WARM.fault("crash"),), [WARM])
    again = placed_on(unreached, SimpleNamespace(points=(OTHER,)))
    assert again.faults == unreached.faults and again.points == ()  # armed by address all the same
    corruption = Case("truncate:step_4/a.pt", "truncate", path="step_4/a.pt")
    assert placed_on(corruption, SimpleNamespace(points=(COLD,))) is corruption
