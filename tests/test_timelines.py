"""A case's timeline, read back by a real trace-event parser.

The parser is the trace engine of Chrome DevTools' Performance panel (the
viewer that replaced chrome://tracing in Chrome; npm @paulirish/trace_engine,
published from the Chromium DevTools repository), installed by `make test`
(ci/install_browser.sh) into tests/js. It reads the file as Chrome would;
what it makes of each rank is compared with the harness's own records of
the runs, read from the run directories, not with the timeline the file came
from.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ckpt_harness.inject.trace import EventKind
from ckpt_harness.pipeline.explore import explore, explore_script
from ckpt_harness.timeline import Timeline
from ckpt_harness.records import read_events
from ckpt_harness.verdict import Verdict

ROOT = Path(__file__).resolve().parent.parent
READER = ROOT / "tests" / "js" / "read_trace.mjs"
RESUMABLE = ROOT / "tests" / "scripts" / "resumable.py"


def devtools(path: Path) -> dict:
    """What Chrome DevTools' trace engine reads in the trace file `path`: per process label and thread, its slices."""
    node = shutil.which("node")
    if node is None or not (ROOT / "tests" / "js" / "node_modules" / "@paulirish" / "trace_engine").is_dir():
        pytest.skip("no node, or no trace engine in tests/js/node_modules: `make test` installs them "
                    "(ci/install_browser.sh); with npm, `cd tests/js && npm ci`")
    done = subprocess.run([node, str(READER), str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["processes"]


def recorded_slices(run_dir: Path, rank: int) -> int:
    """The slices the rank's main thread must have, from the rank's own trace
    file: one per phase it entered, one per collective it entered."""
    events = [e for e in read_events(run_dir, rank) if not e.fields.get("process") and not e.fields.get("thread")]
    return sum(e.kind is EventKind.PHASE or e.entering for e in events)


def check_against_records(timeline_file: Path, runs: dict[str, Path], world_size: int) -> dict:
    parsed = devtools(timeline_file)
    for run, run_dir in runs.items():
        for rank in range(world_size):
            label = f"{run} · rank {rank}"
            assert label in parsed, sorted(parsed)
            assert len(parsed[label]["main"]) == recorded_slices(run_dir, rank), (label, parsed[label]["main"])
    return parsed


def test_a_hang_case_of_a_built_in_job_is_read_by_chrome_devtools(tmp_path):
    case = "hang@r0:save4/fsync(.)"  # rank 0 blocked before its fsync of the checkpoint directory's parent
    report = explore("torch_save", steps=4, faults=("hang",), corruptions=(), cases=[case], timelines="all",
                     workdir=tmp_path / "work")
    hang = next(r for r in report.results if r.case == case)
    # rank 1 waits for good for the blocked rank 0: a live failure, its atomic judgment (S_prev) riding along
    assert [(j.check, j.verdict) for j in hang.judgments()] == [("live", Verdict.FAIL), ("atomic", Verdict.PASS)], \
        report.explain()
    assert hang.timeline is not None, report.explain()
    path = hang.timeline.write(tmp_path / "hang.json")

    case_dir = next((tmp_path / "work" / "cases").glob("hang_r0_save4_fsync_._-*"))
    parsed = check_against_records(path, {"golden": tmp_path / "work" / "golden" / "run",
                                          "faulted run": case_dir / "fault", "resumed run": case_dir / "resume"}, 2)
    # the hang: rank 1 waits in a collective that never returns, to the cut
    waiting = [s for s in parsed["faulted run · rank 1"]["main"] if s["name"].startswith("barrier")]
    assert waiting, parsed["faulted run · rank 1"]

    events = json.loads(path.read_text())["traceEvents"]
    pids = {e["args"]["name"]: e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    marks = [(e["pid"], e["cat"], e["name"]) for e in events if e["ph"] == "i" and e["cat"] != "file"]
    assert (pids["faulted run · rank 0"], "fault", "fault: hang") in marks, marks
    assert any(pid == pids["faulted run · rank 1"] and cat == "cut" for pid, cat, _ in marks), marks
    assert any(pid == pids["faulted run · rank 1"] and cat == "blocked" for pid, cat, _ in marks), marks
    # the file is the same timeline when read back (what the HTML report of a merged matrix draws)
    again = Timeline.read(path)
    assert again.runs == hang.timeline.runs
    assert [t.label for t in again.tracks] == [t.label for t in hang.timeline.tracks]
    assert again.marks("fault") and len(again.marks("file")) == len(hang.timeline.marks("file"))


def test_a_power_loss_case_of_a_script_is_read_by_chrome_devtools(tmp_path):
    script = f"{RESUMABLE} {{ckpt_dir}} --steps 6 --save-every 2"
    report = explore_script(script, workdir=tmp_path / "work", nproc_per_node=2, faults=("power-loss",),
                            ops=("write",), corruptions=(), after=False)
    lost = [r for r in report.results if r.case.startswith("power-loss@") and r.timeline is not None]
    assert lost and all(r.verdict is Verdict.FAIL for r in lost), report.explain()  # written in place: not atomic
    first = lost[0]
    path = first.timeline.write(tmp_path / "power-loss.json")
    # derived from the golden run's trace (no faulted run): the golden run and the resume, the cut marked
    runs = [r.name for r in first.timeline.runs]
    assert runs == ["golden", "resumed run"], runs
    resumes = [d for d in (tmp_path / "work" / "cases").glob("*/resume") if (d / "rank0.records").exists()]
    check_against_records(path, {"golden": tmp_path / "work" / "golden" / "run"}, 2)
    assert resumes  # a resume ran (the one this case shares, at least)
    faults = first.timeline.marks("fault")
    assert faults and faults[0][0].run == "golden" and "power-loss" in faults[0][1].name, faults
    # what the power loss dropped, at the same moment, as the text report says it
    dropped = first.timeline.marks("power-loss")
    assert dropped and dropped[0][1].at == faults[0][1].at and dropped[0][1].args["lost"], dropped
    assert all(loss in first.details for loss in dropped[0][1].args["lost"])


def test_run_and_scenario_keep_every_case_s_timeline_when_asked(tmp_path):
    """`--timelines all`: every case's timeline, passing ones too; by default those that did not pass only."""
    from tests.clirun import cli

    done = cli("run", "--job", "torch_save", "--steps", "4", "--timelines", "all", "--timeline-dir", "every",
               "--json", "run.json", "--keep", "none", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    cases = json.loads((tmp_path / "run.json").read_text())["cases"]
    assert {Path(c["timeline"]).name for c in cases} == {"golden.json", "resume@2.json", "resume@4.json"}, cases
    assert all((tmp_path / c["timeline"]).is_file() for c in cases)
    done = cli("run", "--job", "torch_save", "--steps", "4", "--timeline-dir", "failed", "--keep", "none",
               "--quiet", cwd=tmp_path)
    assert done.returncode == 0 and not (tmp_path / "failed").exists(), done.stdout  # nothing failed

    done = cli("scenario", "resume-every-save", "--job", "torch_save", "--timelines", "all", "--timeline-dir",
               "scenario", "--keep", "none", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    files = sorted(p.name for p in (tmp_path / "scenario").iterdir())
    assert "golden.json" in files and any(f.startswith("resume@") for f in files), files
