"""Saves written in the background with nothing to wait on (issue 43, item 1).

`tests/scripts/pool_writer.py` saves as Lightning's `AsyncCheckpointIO`
does: a snapshot handed to a one-thread pool, no future kept. Its save
lands when the pool's task is done (`inject.writers`), so a run stopped
after save k lets that task finish first, and the operations of the task
are points of the save's background phase. Under real torchrun at 2 ranks:

- delays on every operation of the correct writer change nothing (before,
  the run stopped with the writer in flight and a delay made the resume
  take the save before: a false skew-safe FAIL), through the CLI;
- its twin that points `latest` from the main thread before the writer
  landed is flagged atomic at the writer's rename; the correct one is not;
- hard-preemption runs on it (before: n/a, "its saves returned once written").
"""

import json
from pathlib import Path

from ckpt_harness.pipeline.explore import explore_script
from ckpt_harness.records import Kind, read_records
from ckpt_harness.verdict import Verdict
from tests.clirun import cli

POOL_WRITER = Path(__file__).resolve().parent / "scripts" / "pool_writer.py"
BG = "bg_save4"


def script(*flags: str) -> str:
    return " ".join([str(POOL_WRITER), "{ckpt_dir}", "--steps", "6", *flags])


def test_delays_on_every_operation_of_a_pool_writer_without_a_future_change_nothing(tmp_path):
    out = cli("explore", "--script", script(), "--nproc-per-node", "2", "--save", "4", "--faults", "delay",
              "--corruptions", "", "--no-after", "--json", "report.json", "--workdir", "work", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    cases = [c for c in json.loads((tmp_path / "report.json").read_text())["cases"] if c["case"] != "golden"]
    writer = [c for c in cases if f":{BG}/" in c["case"]]
    # the writer's whole save: the rename of its file into place, the pointer written and renamed after it
    ops = {(c["row"]["op"], c["row"]["target"]) for c in writer}
    assert {("rename", "None -> step_4.pt"), ("write", "latest.tmp"), ("rename", "latest.tmp -> latest")} <= ops, ops
    assert all(c["verdict"] == "pass" and c["check"] == "skew-safe" and c["row"]["outcome"] == "S_k"
               for c in cases), json.dumps(cases, indent=1)
    for rank in range(2):  # the stop of every case waited for save 4 to land, and only then stopped
        stop = read_records(next((tmp_path / "work" / "cases").glob("*/fault")), rank)
        events = [(r["event"], r.get("step")) for r in stop]
        assert (Kind.SAVED, 4) in events and events[-1] == (Kind.STOPPED, 4), events
        assert ((Kind.LANDED, 4) in events) == (rank == 0), events  # rank 0 alone hands a write to its pool


def test_a_pointer_moved_before_the_pool_writer_landed_is_flagged_atomic(tmp_path):
    targeted = dict(nproc_per_node=2, save=4, faults=("crash",), ops=("rename",), corruptions=(), after=False)
    broken = explore_script(script("--bug", "latest-early"), workdir=tmp_path / "broken", **targeted)
    failed = [r for r in broken.results if r.verdict is Verdict.FAIL]
    assert [(r.check, r.case) for r in failed] == [("atomic", f"crash@r0:{BG}/rename(None->step_4.pt)")], \
        broken.explain()
    assert "refused: FileNotFoundError" in failed[0].summary and "step_4.pt" in failed[0].summary
    correct = explore_script(script(), workdir=tmp_path / "correct", **targeted)
    assert correct.verdict is Verdict.PASS, correct.explain()
    assert {r.case for r in correct.results} >= {f"crash@r0:{BG}/rename(None->step_4.pt)",
                                                 f"crash@r0:{BG}/rename(latest.tmp->latest)"}


def test_hard_preemption_runs_on_a_pool_writer(tmp_path):
    out = cli("scenario", "hard-preemption", "--script", script(), "--nproc-per-node", "2", "--workdir", "work",
              cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "hard-preemption [pool_writer.py --steps 6] atomic: PASS" in out.stdout, out.stdout
    stops = list((tmp_path / "work").rglob("stop"))
    assert stops, sorted(p.relative_to(tmp_path) for p in (tmp_path / "work").rglob("*"))
    for rank in range(2):  # a hard stop does not wait for the writer: the rank stops as the save returned
        events = [(r["event"], r.get("step")) for r in read_records(stops[0], rank)]
        stopped = events.index((Kind.STOPPED, 4))  # its writer may land while it waits to be torn down
        assert events[stopped - 1] == (Kind.SAVED, 4), events
