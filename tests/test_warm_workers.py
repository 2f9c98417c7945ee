"""Warm script workers, confirmed cold (issue 48, item 1): torchrun's workers
forked from a template of their agent (`launch.warm_workers`) are the
process a fresh interpreter would be, and a case that does not pass warm is
judged by a cold run of it.

- A probe script run warm and cold under real torchrun writes down its
  process: `sys.argv`, `sys.orig_argv`, `sys.path`, `__main__`, environment
  (also as ``/proc`` shows it: the run's tag, by which the teardown finds
  processes), flags, torch's thread counts, signal dispositions and mask,
  descriptors, session, parent (the agent), and leaves an unclosed file, a
  sleeping non-daemon thread and an atexit hook to the interpreter's exit.
  Everything is the same but what names the run; only warm leaves the
  marker a run reads (`Run.warm_started`).
- A worker whose environment differs where an import read it (MKL_NUM_THREADS)
  starts cold, and the agent's log says why; a single worker per node, whose
  OMP_NUM_THREADS torchrun leaves as given, starts warm with a fresh one's
  thread count.
- A script that forgets its optimizer state only when started warm is
  flagged warm, run again cold, and passes there: its verdict is the cold
  run's and says so; its twin that always forgets fails warm and cold.
- A catalogue scenario runs again cold only its cases that did not pass
  warm, on a cold golden run of its own; the others keep their warm results.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_harness.launch.elastic import ScriptSpec, run_elastic
from ckpt_harness.launch.outcome import RankStatus
from ckpt_harness.launch.warm_workers import record_reads
from ckpt_harness.pipeline.explore import explore_script
from ckpt_harness.pipeline.verify import verify_script
from ckpt_harness.verdict import Verdict
from tests.clirun import cli
from tests.test_script_matrix import RESUMABLE
from tests.test_script_mode import script

FACTS = Path(__file__).resolve().parent / "scripts" / "process_facts.py"


def run_facts(run_dir: Path, warm: bool, nproc_per_node: int = 2, **env: str):
    run_dir.mkdir(parents=True)
    outcome = run_elastic(ScriptSpec(command=[str(FACTS), str(run_dir / "facts")], run_dir=run_dir, deadline=120,
                                     nproc_per_node=nproc_per_node, nnodes=1, warm_workers=warm, env=env))
    assert [r.status for r in outcome.ranks] == [RankStatus.OK] * nproc_per_node, outcome
    return outcome


def facts(run_dir: Path, rank: int) -> dict:
    """The probe's facts with what names the run (its directory, tag, port) put in words; of the
    environment ``/proc`` shows, the run's tag (the rest is the agent server's, warm)."""
    text = (run_dir / f"facts.{rank}.json").read_text().replace(str(run_dir), "<run>")
    found = json.loads(text)
    names = {found["env"]["CKPT_HARNESS_ELASTIC_RUN"]: "<tag>", found["env"]["MASTER_PORT"]: "<port>"}
    text = re.sub("|".join(map(re.escape, names)), lambda m: names[m.group(0)], text)
    found = json.loads(re.sub(r"<tag>_[a-z0-9_]+", "<tag>_<dir>", text))
    found["proc_environ"] = [e for e in found["proc_environ"] if e.startswith("CKPT_HARNESS_ELASTIC_RUN=")]
    return found


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict[bool, Path]:
    """A warm run and a cold one, from one agent server (their workers' parent command names it). Warm first:
    a cold run takes any running server of the interpreter (`agent._Holder.get`, not exact), which, where an
    earlier test on this worker left one of another thread count, is not the one a warm run starts."""
    root = tmp_path_factory.mktemp("facts")
    for warm in (True, False):
        run_facts(root / str(warm), warm)
    return {warm: root / str(warm) for warm in (False, True)}


@pytest.mark.parametrize("rank", [0, 1])
def test_a_warm_worker_is_the_process_a_fresh_interpreter_would_be(both, rank):
    cold, warm = facts(both[False], rank), facts(both[True], rank)
    differ = {key: (cold[key], warm.get(key)) for key in cold if cold[key] != warm.get(key)}
    assert not differ, differ
    assert "ckpt_harness.launch.agent" in warm["parent"]  # torchrun's agent waits for it, as for a Popen'd one
    assert "CKPT_HARNESS_ELASTIC_RUN=<tag>" in warm["proc_environ"]  # what the teardown finds it by
    assert warm["leads_session"]  # and no descriptor but those a fresh worker has (the comparison above)
    assert warm["threads"] == 1  # OMP_NUM_THREADS=1, as torchrun sets it for two workers per node


def test_a_warm_worker_ends_as_python_ends_a_program(both):
    """Its atexit hooks run and its non-daemon threads are joined; a file it
    never closed ends as a fresh interpreter leaves it (CPython 3.11 leaves
    this one, still reachable from the script's globals, unflushed)."""
    for rank in (0, 1):
        left = {warm: {end: (run_dir / f"facts.{rank}.{end}").read_text() for end in ("atexit", "thread", "unclosed")}
                for warm, run_dir in both.items()}
        assert left[True] == left[False], left
        assert (left[True]["atexit"], left[True]["thread"]) == ("ran\n", "joined\n"), left


def test_only_a_warm_start_leaves_the_marker_a_run_reads(both):
    assert sorted(p.name for p in both[True].glob("*.warm-started")) == ["rank0.warm-started", "rank1.warm-started"]
    assert not list(both[False].glob("*.warm-started"))


def test_what_an_import_read_of_the_environment_decides_a_warm_start(monkeypatch):
    """A name read (also one looked for and absent), a prefix native code
    reads, and the names a known walk keeps must be as at import; any other
    may differ. A walk of unknown purpose makes every difference count."""
    monkeypatch.setenv("CKPT_TEST_READ", "a")
    monkeypatch.setenv("CKPT_TEST_COPIED", "c")
    monkeypatch.delenv("CKPT_TEST_ABSENT", raising=False)

    def imports() -> None:
        os.environ.get("CKPT_TEST_READ")
        assert "CKPT_TEST_ABSENT" not in os.environ
        exec("dict(os.environ.items())", {"__name__": "tqdm.utils", "os": os})  # tqdm's envwrap, by its module
        exec("dict(os.environ)", {"__name__": "fsspec.config", "os": os})  # fsspec's copy: its reads come from C

    seen, now = record_reads(imports), dict(os.environ)
    assert seen.differs({**now, "RANK": "0", "MASTER_PORT": "1234"}) == []
    assert seen.differs({**now, "CKPT_TEST_READ": "b"}) == ["CKPT_TEST_READ"]
    assert seen.differs({**now, "CKPT_TEST_ABSENT": "1"}) == ["CKPT_TEST_ABSENT"]
    assert seen.differs({**now, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "7"}) == ["OMP_NUM_THREADS", "TQDM_DISABLE"]
    assert seen.differs({**now, "FSSPEC_S3": "{}"}) == ["FSSPEC_S3"]
    assert seen.differs({k: v for k, v in now.items() if k != "CKPT_TEST_COPIED"}) == []  # copied, not read by name

    unknown = record_reads(lambda: exec("dict(os.environ.items())", {"__name__": "somelib", "os": os}))
    assert unknown.walked_by == {"somelib"} and unknown.differs({**now, "RANK": "0"}) == ["RANK"]


def test_fsspecs_walk_of_the_environment_as_a_buckets_preload_imports_it_keeps_only_its_own_names():
    """A bucket's runs preload `s3fs` into the agent server; fsspec walks the whole environment at import
    for its ``FSSPEC_*`` configuration. Taken for a walk of unknown purpose, it made every worker the
    server started afterwards (a local run's too) start cold; and its copy (`dict(os.environ)`, whose reads
    come from C) read every name, so that one the worker lacks (`TORCHINDUCTOR_CACHE_DIR`, set by the
    server's `torch._dynamo`) did too."""
    pytest.importorskip("s3fs")
    code = ("import os; os.environ['CKPT_TEST_GONE'] = '1'; from ckpt_harness.launch.warm_workers import record_reads; "
            "seen = record_reads(lambda: __import__('s3fs')); now = dict(os.environ); now.pop('CKPT_TEST_GONE'); "
            "print(sorted(seen.walked_by), seen.differs({**now, 'RANK': '1', 'AWS_ENDPOINT_URL': 'http://x'}), "
            "seen.differs({**now, 'FSSPEC_S3': '{}'}))")
    # a process that has not imported s3fs yet
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] [] ['FSSPEC_S3']", out


def test_a_variable_an_import_sets_itself_may_come_back_with_the_value_it_set(monkeypatch):
    """`torch._dynamo` sets TORCHINDUCTOR_CACHE_DIR to its default when unset; a
    harness that imported it hands that value on, which a cold worker's
    import reads back: the same. Another value is not."""
    monkeypatch.delenv("CKPT_TEST_MADE", raising=False)

    def imports() -> None:
        os.environ["CKPT_TEST_MADE"] = os.environ.get("CKPT_TEST_MADE") or "/tmp/default"

    seen = record_reads(imports)
    before = {k: v for k, v in os.environ.items() if k != "CKPT_TEST_MADE"}
    assert seen.differs(before) == [] and seen.differs({**before, "CKPT_TEST_MADE": "/tmp/default"}) == []
    assert seen.differs({**before, "CKPT_TEST_MADE": "/elsewhere"}) == ["CKPT_TEST_MADE"]


def test_a_worker_whose_environment_an_import_read_differently_starts_cold(tmp_path):
    """MKL_NUM_THREADS, read by torch's native start-up (which takes it over torchrun's OMP_NUM_THREADS=1)
    and not by the server's import: its workers start cold, and their torch runs two threads."""
    outcome = run_facts(tmp_path / "run", True, MKL_NUM_THREADS="2")
    assert not list((tmp_path / "run").glob("*.warm-started"))
    log = "".join(Path(p).read_text() for p in outcome.agent_logs)
    said = [line for line in log.splitlines() if line.startswith("[ckpt_harness] worker started cold: ")]
    assert len(said) == 2 and all("MKL_NUM_THREADS" in line for line in said), log
    assert facts(tmp_path / "run", 0)["threads"] == 2


@pytest.mark.parametrize("threads", [None, "2"])
def test_a_single_worker_per_node_starts_warm_with_the_threads_a_fresh_one_has(tmp_path, threads):
    """torchrun leaves OMP_NUM_THREADS unset for one worker per node (and as given for any number): its
    torch runs as many threads as a fresh interpreter's. Its agent comes from a server that imported torch
    under the same value (`warm_workers.worker_threads`), so it starts warm all the same."""
    env = {} if threads is None else {"OMP_NUM_THREADS": threads}
    for warm in (False, True):
        run_facts(tmp_path / str(warm), warm, nproc_per_node=1, **env)
    cold, warm = facts(tmp_path / "False", 0), facts(tmp_path / "True", 0)
    assert [p.name for p in (tmp_path / "True").glob("*.warm-started")] == ["rank0.warm-started"]
    assert (warm["threads"], warm["interop_threads"]) == (cold["threads"], cold["interop_threads"])
    if threads is not None:
        assert warm["threads"] == 2, warm["threads"]
    assert "OMP_NUM_THREADS" not in warm["env"] if threads is None else warm["env"]["OMP_NUM_THREADS"] == threads


@pytest.mark.parametrize("bug, after_cold", [
    ("forget-optimizer-when-warm", Verdict.PASS),
    # make test keeps it: test_warm_starts.py::test_a_case_that_fails_warm_is_confirmed_cold_and_one_that_passes_...
    pytest.param("forget-optimizer", Verdict.FAIL, marks=pytest.mark.slow),
])
def test_a_script_case_that_fails_warm_is_judged_by_its_cold_run(tmp_path, bug, after_cold):
    report = verify_script(script("--bug", bug), workdir=tmp_path, cases=["resume@2"], nproc_per_node=1)
    judged = next(r for r in report.results if r.check == "saves after resume")
    assert judged.verdict is after_cold and judged.confirmed_cold and not judged.warm, report.explain()
    said = "the warm run said the same" if after_cold is Verdict.FAIL else "the warm run said FAIL"
    assert "confirmed with cold starts" in judged.details and said in judged.details, judged.details
    if after_cold is Verdict.FAIL:  # the script that forgets its optimizer state is flagged (the same
        # verification tests/test_script_mode.py made of it again: its checks are here)
        assert {(r.case, r.check): r.verdict for r in report.results}[("resume@2", "load step")] is Verdict.PASS
        assert "save 4 differs" in judged.summary and "model" in judged.summary, judged.summary  # resumed, not all


def test_cold_start_reaches_a_scripts_workers_through_the_cli(tmp_path):
    out = cli("run", "--script", script(), "--nproc-per-node", "1", "--case", "resume@2", "--cold-start",
              "--workdir", str(tmp_path / "work"), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert list((tmp_path / "work").glob("**/rank0.log")), "no worker ran"
    assert not list((tmp_path / "work").glob("**/*.warm-started")), "a cold start left a warm marker"


@pytest.mark.slow
def test_a_scenario_runs_again_cold_only_its_cases_that_did_not_pass_warm(tmp_path):
    """overwrite-larger-world on a script that moves its files into the directory it overwrites: with the
    flag off it refuses the earlier run's checkpoint (a pass), with it on it leaves that run's files in
    place (a failure). Only the failure is run again cold."""
    from ckpt_harness import targets
    from ckpt_harness.catalogue.bench import Bench
    from ckpt_harness.catalogue.scenario import select
    from ckpt_harness.catalogue.scenario_files import builtin_catalogue
    from ckpt_harness.config import ScriptConfig

    (scenario,) = select(builtin_catalogue(), ["overwrite-larger-world"])
    target = targets.of(ScriptConfig(script=f"{RESUMABLE} {{ckpt_dir}} --staging --rng-files --bug overwrite-in-place",
                                     script_args=("overwrite=--overwrite", "seed=--seed {}", "steps=--steps {}",
                                                  "save_every=--save-every {}"), nproc_per_node=1))
    bench = Bench(target, tmp_path)
    result = bench.run(scenario)
    judged = {r.case: r for r in result.results}
    assert set(judged) == {"overwrite=off", "overwrite=on"}, result.explain()
    off, on = judged["overwrite=off"], judged["overwrite=on"]
    assert off.verdict is Verdict.PASS and off.warm and not off.confirmed_cold, result.explain()
    assert on.verdict is Verdict.FAIL and on.confirmed_cold and "the warm run said the same" in on.details, \
        result.explain()
    again = {p.name for p in (tmp_path / "cold" / scenario.name).iterdir()}
    assert again == {"overwrite=on", "template"}, again  # the passing case was not run again
    # against a cold golden run: a warm one's states could be a warm start's
    assert list((tmp_path / "cold").glob("**/golden/run")), "the cold case stood on a warm golden run"
    # A case of the faults check is confirmed as it runs (`cases.run_case`), on the same cold golden run.
    (lost,) = select(builtin_catalogue(), ["power-loss-after-save"])
    (case,) = bench.run(lost).results  # staged and renamed, never fsynced: lost
    assert case.verdict is Verdict.FAIL and case.confirmed_cold and "the warm run said the same" in case.details, \
        case.explain()
    goldens = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("**/golden/run"))
    assert len(goldens) == 2, goldens  # one warm, one cold, for both checks


#: One case per exploration: a crash before rank 0 renames save 4's staging directory into place.
BEFORE_RENAME = dict(nproc_per_node=1, faults=("crash",), ops=("rename",), corruptions=(), after=False)


def test_an_exploration_confirms_a_case_cold_on_a_golden_run_made_cold(tmp_path):
    """A script that, started warm, forgets its optimizer state and seeds its model otherwise: the crash
    before save 4's rename fails warm (the resume from save 2 has no momentum). Run again cold it passes,
    against a golden run made cold; against the warm golden run every state would differ (the seed), a
    failure no cold run makes."""
    report = explore_script(script("--staging", "--bug", "forget-optimizer-when-warm", "--bug", "seed-when-warm"),
                            workdir=tmp_path, **BEFORE_RENAME)
    (case,) = [r for r in report.results if r.case != "golden"]
    assert case.verdict is Verdict.PASS and case.confirmed_cold, report.explain()
    assert "the warm run said FAIL" in case.details and "S_prev (step 2)" in case.summary, case.details
    assert (tmp_path / "cold" / "golden" / "run").is_dir() and (tmp_path / "cold" / "cases").is_dir()
    assert not report.warnings, report.warnings


def test_a_golden_run_that_fails_only_warm_is_made_again_cold_and_every_case_stands_on_it(tmp_path):
    report = explore_script(script("--staging", "--bug", "fail-when-warm"), workdir=tmp_path, **BEFORE_RENAME)
    (case,) = [r for r in report.results if r.case != "golden"]
    assert case.verdict is Verdict.PASS and not case.warm and not case.confirmed_cold, report.explain()
    (said,) = report.warnings
    assert said.startswith("the golden run failed with warm starts and passed with cold ones, so every case ran "
                           "cold") and "fail-when-warm" in said, said
    assert list((tmp_path / "cold" / "cases").iterdir()) and not (tmp_path / "cases").exists()


def test_a_golden_run_that_fails_cold_too_is_the_exploration_s_failure_confirmed(tmp_path):
    report = explore_script(script("--staging", "--bug", "skip-final-barrier"), workdir=tmp_path,
                            **{**BEFORE_RENAME, "nproc_per_node": 2})  # a peer to wait at the barrier rank 0 skips
    (golden,) = report.results
    assert golden.verdict is Verdict.FAIL and golden.confirmed_cold, report.explain()
    assert golden.summary.startswith("golden: hang:") and "the warm run said the same" in golden.details, \
        golden.details
    assert not list((tmp_path / "cold" / "golden" / "run").glob("*.warm-started"))
