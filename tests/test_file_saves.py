"""Saves written the ordinary way, through no entry point the harness wraps, are seen and judged (issue 64).

tests/scripts/file_saves.py writes each save through another API (a file
object, a buffer and ``os.write``, ``pickle``, ``numpy``, a copy from a
staging directory, ``tarfile``, ``json``, raw bytes) and points
``latest.json`` at it: one verification judges a resume from each. The
script knows nothing of the harness; what each save was handed (or, for
raw bytes, the file it left) is its recorded state, so a resume that skips
the optimizer FAILs, and a save written in place FAILs `atomic` under
`explore` at the line that writes it while its atomic twin passes.
"""

import re
from pathlib import Path

import pytest

from ckpt_harness.inject.trace import EventKind, read_events
from ckpt_harness.pipeline.explore import explore_script
from ckpt_harness.pipeline.verify import verify_script
from ckpt_harness.records import Kind, read_records
from ckpt_harness.verdict import Verdict
from tests.clirun import cli

SCRIPT = Path(__file__).resolve().parent / "scripts" / "file_saves.py"
#: What each API's save records, by the name it was handed under: step -> a key prefix of its state.
HANDED = {2: "step_2.pt.tmp.model.", 4: "BytesIO.model.", 6: "step_6.pkl.tmp.optimizer.", 8: "step_8.npz.tmp.model.",
          10: "state.pt.model.", 12: "BytesIO.optimizer.", 14: "step_14.json.tmp.tensors.", 16: "step_16.raw"}


def command(*flags: str) -> str:
    return " ".join([str(SCRIPT), "{ckpt_dir}", *flags])


@pytest.fixture(scope="module")
def every_api(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("every-api")
    return verify_script(command("--steps", "16", "--save-every", "2"), workdir=workdir, nproc_per_node=2), workdir


def test_a_save_through_any_api_is_seen_and_resumes_bitwise(every_api):
    report, workdir = every_api
    assert report.verdict is Verdict.PASS, report.explain()
    judged = {r.case for r in report.results if r.check == "saves after resume" and r.verdict is Verdict.PASS}
    # and one stop between saves, by default: where step 4's optimizer step starts, resumed from save 2
    assert judged == {f"resume@{k}" for k in range(2, 16, 2)} | {"between@3"}, report.explain()
    assert any(r.case == "between@3" and "resumed from save 2: 1 step lost" in r.summary for r in report.results)
    saved = {r["step"]: r for r in read_records(workdir / "golden" / "run", 0) if r["event"] == Kind.SAVED}
    assert sorted(saved) == sorted(HANDED)
    for step, prefix in HANDED.items():
        state = saved[step]["state"]
        assert saved[step]["source"] == "path" and any(k.startswith(prefix) for k in state), (step, sorted(state))
        assert state["latest.json.tmp.step"].value == step, sorted(state)  # the pointer, json.dump'd after it
    # raw bytes: nothing was handed, so the file it left is the state, by its digest
    assert re.fullmatch(r"sha256:[0-9a-f]{64} \(\d+ bytes\)", saved[16]["state"]["step_16.raw"].value)
    # The rank that writes nothing has no save; rank 0's writes, fsyncs and renames are points of its save.
    assert not [r for r in read_records(workdir / "golden" / "run", 1) if r["event"] == Kind.SAVED]
    ops = [e for e in read_events(workdir / "golden" / "run" / "rank0.trace")
           if e.kind in (EventKind.OPEN, EventKind.FSYNC, EventKind.RENAME)]
    assert ops and all(e.phase.startswith("save ") for e in ops), [(e.kind, e.phase) for e in ops]


def test_a_resume_that_skips_the_optimizer_of_a_file_object_save_fails(tmp_path):
    done = cli("run", "--script", command("--apis", "file", "--bug", "forget-momentum"), "--nproc-per-node", "1",
               "--case", "resume@2", "--cold-start", "--keep", "none", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"resume@2 +saves after resume +FAIL", done.stdout), done.stdout
    assert "step_4.pt.tmp.optimizer.state.0.momentum_buffer" in done.stdout, done.stdout


#: A crash at each kernel write of save 4, the checkpoint file and `latest.json`. One worker: rank 0 alone
#: writes (the module fixture shows the other writes nothing), so a second adds a fresh interpreter, no case.
TARGETED = dict(nproc_per_node=1, faults=("crash",), ops=("write",), corruptions=(), after=False)


def test_a_file_object_save_written_in_place_fails_atomic_at_the_line_that_writes_it(tmp_path):
    report = explore_script(command("--steps", "6", "--apis", "file", "--in-place"), workdir=tmp_path,
                            cold_start=True, **TARGETED)
    failed = [r for r in report.results if r.verdict is Verdict.FAIL]
    assert [r.check for r in failed] == ["atomic"], report.explain()
    assert "write step_4.pt from file_saves.py" in failed[0].summary and "in write_file()" in failed[0].summary, \
        failed[0].summary


def test_its_atomic_twin_passes(tmp_path):
    report = explore_script(command("--steps", "6", "--apis", "file"), workdir=tmp_path, **TARGETED)
    cases = [r for r in report.results if r.case != "golden"]
    assert cases and report.verdict is Verdict.PASS, report.explain()
    assert any("step_4.pt.tmp" in r.summary for r in cases), [r.summary for r in cases]


@pytest.mark.slow
def test_through_the_plugin_a_file_object_save_is_judged_both_ways(pytester):
    """The pytest face: the fixture verifies the correct script and flags the
    twin that forgets its momentum, naming it (one resume case each: the
    `--ckpt-script` item's whole default verify is test_plugin's)."""
    pytester.makepyfile(test_user=f"""
        import pytest

        @pytest.mark.ckpt(script="{SCRIPT} {{ckpt_dir}} --apis file", nproc_per_node=2)
        def test_my_script(ckpt):
            ckpt.verify_script(cases=["resume@2"]).assert_ok()

        @pytest.mark.ckpt(script="{SCRIPT} {{ckpt_dir}} --apis file --bug forget-momentum", nproc_per_node=2)
        def test_my_buggy_script(ckpt):
            ckpt.verify_script(cases=["resume@2"]).assert_ok()
        """)
    result = pytester.runpytest_inprocess("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_my_script*PASSED*", "*test_my_buggy_script*FAILED*",
                                 "*saves after resume*FAIL*", "*step_4.pt.tmp.optimizer.state.0.momentum_buffer*"])
