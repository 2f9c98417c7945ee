"""The pytest plugin as users meet it: loaded by its entry point, in a fresh pytest run.

The first test runs pytest as a subprocess, as a user's CI does. The others
run it in this process (`pytest.main`, the plugin still loaded by its entry
point): each subprocess would cost an interpreter, a torch import and a warm
fork server of its own, seconds of CPU that tell nothing more. The modules
an inner run imports are kept afterwards (`tests/conftest.py`): torch does
not survive being imported twice.
"""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def importable(monkeypatch):
    """The test jobs of this repo, importable from the pytester directory."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def test_plugin_is_loaded_through_its_entry_point(pytester, importable):
    pytester.makepyfile(
        """
        def test_loaded(request):
            plugin = request.config.pluginmanager.get_plugin("ckpt_harness")
            assert plugin is not None and plugin.__name__ == "ckpt_harness.plugin"
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    help_text = pytester.runpytest_subprocess("--help").stdout.str()
    for option in ("--ckpt-timeout", "--ckpt-world-sizes", "--ckpt-job", "--ckpt-scenarios"):
        assert option in help_text


def test_fixture_and_marker_verify_a_user_job(pytester, importable):
    pytester.makepyfile(
        test_user="""
        import pytest
        from ckpt_harness.jobs.torch_save import TorchSaveJob

        class MyJob(TorchSaveJob):
            '''A user's own job, defined in their test module.'''

        @pytest.mark.ckpt(world_size=[1, 2], steps=4)
        def test_my_job_resumes(ckpt):
            assert ckpt.world_size in (1, 2)
            ckpt.verify(MyJob).assert_ok()
        """
    )
    result = pytester.runpytest_inprocess("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_my_job_resumes?ws1? PASSED*", "*test_my_job_resumes?ws2? PASSED*"])


def test_a_failing_job_fails_the_test_with_the_verdict_table(pytester, importable):
    pytester.makepyfile(
        """
        def test_forgets_rng(ckpt):
            ckpt.verify("tests.planted.jobs:NoRngState", steps=2).assert_ok()
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*case*check*verdict*detail*", "*resume@2*state after load*FAIL*rng/*", "*repro: PYTHONPATH=*--case resume@2*",
         "*timeline: */ckpt-timelines/*resume@2.json (open in ui.perfetto.dev)*"]
    )


def test_world_sizes_option_parametrizes_tests_without_a_marker(pytester, importable):
    pytester.makepyfile(
        """
        def test_sizes(ckpt):
            assert ckpt.world_size in (1, 3)
        """
    )
    result = pytester.runpytest_inprocess("--ckpt-world-sizes=1,3", "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_sizes?ws1?*", "*test_sizes?ws3?*"])


def test_timeout_option_reaches_the_fixture(pytester, importable, pace):
    timeout = pace(2.0)  # long enough to reach the final save
    pytester.makepyfile(
        f"""
        def test_hang(ckpt):
            report = ckpt.verify("tests.planted.jobs:Rank0BarrierInFinalSave", steps=2)
            assert "hang" in report.results[0].summary
            assert "--timeout {timeout!r}" in report.results[0].repro  # a job's default of 60 s did not apply
        """
    )
    pytester.runpytest_inprocess(f"--ckpt-timeout={timeout!r}", "-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_ckpt_job_runs_the_builtin_catalogue_against_a_users_job(pytester, importable):
    """The failing and the n/a side; the passing one (torch_save) is the node-id test's."""
    pytester.makepyfile("def test_nothing(): pass")
    bad = pytester.runpytest_inprocess("--ckpt-job=tests.planted.jobs:NoOptimizerState",
                                        "--ckpt-scenarios=resume-every-save", "-p", "no:cacheprovider")
    bad.assert_outcomes(passed=1, failed=1)
    bad.stdout.fnmatch_lines(["*resume-every-save [[]tests.planted.jobs:NoOptimizerState[]] faithful: FAIL*",
                              "*state after load*FAIL*optim/*",
                              "*repro: *ckpt-harness run --job tests.planted.jobs:NoOptimizerState*"])

    na = pytester.runpytest_inprocess("--ckpt-job=tests.planted.checkpointers:ReferenceCheckpointer", "-rs",
                                       "--ckpt-scenarios=world-size-grow", "-p", "no:cacheprovider")
    na.assert_outcomes(passed=1, skipped=1)
    na.stdout.fnmatch_lines(["*n/a: the job defines no full_state(ctx)*"])


# make test keeps it both ways: test_explore.py::test_an_error_on_one_rank_is_a_hang_only_where_nothing_ends_the_group
@pytest.mark.slow
def test_ckpt_launcher_judges_the_catalogue_as_production_launches_the_job(pytester, importable):
    """torch_save's rank that raises in its save leaves its peer in a barrier:
    no hang under torchrun's agent (the default), a live failure under a plain
    launcher, which nothing ends."""
    pytester.makepyfile("def test_nothing(): pass")
    args = ("--ckpt-job=torch_save", "--ckpt-scenarios=error-every-phase", "-p", "no:cacheprovider")
    pytester.runpytest_inprocess(*args).assert_outcomes(passed=2)
    plain = pytester.runpytest_inprocess(*args, "--ckpt-launcher=plain")
    plain.assert_outcomes(passed=1, failed=1)
    plain.stdout.fnmatch_lines(["*error-every-phase [[]torch_save[]] preserving: FAIL*(live)*",
                                "*the error did not reach every rank*launcher = plain*"])


def test_scenario_files_of_a_users_repo_are_collected_per_scenario(pytester, importable):
    scenarios = pytester.mkdir("scenarios")
    (scenarios / "mine.toml").write_text(
        '[crash-at-commit]\nproperty = "atomic"\ncheck = "faults"\ndescription = "crash at each rename"\n'
        'faults = ["crash"]\nops = ["rename"]\n\n'
        '[bigger-world-left-behind]\nproperty = "overwrite-safe"\ncheck = "overwrite"\n'
        'description = "a larger run left the step dir"\nstate = "larger-world"\noverwrite = [true]\n'
    )
    good = pytester.runpytest_inprocess("scenarios", "--ckpt-job=torch_save", "-v", "-p", "no:cacheprovider")
    good.assert_outcomes(passed=2)
    good.stdout.fnmatch_lines(["*scenarios/mine.toml::crash-at-commit?torch_save-ws2? PASSED*"])

    bad = pytester.runpytest_inprocess("scenarios", "--ckpt-job=tests.planted.scenario_jobs:MergesIntoExisting",
                                        "-p", "no:cacheprovider")
    bad.assert_outcomes(passed=1, failed=1)
    bad.stdout.fnmatch_lines(["*bigger-world-left-behind*overwrite-safe: FAIL*stale files*rng_rank2.pt*"])

    (scenarios / "typo.toml").write_text('[x]\nproperty = "atomic"\ncheck = "faults"\ndescription = "d"\nfalts = []\n')
    broken = pytester.runpytest_inprocess("scenarios/typo.toml", "--ckpt-job=torch_save", "-p", "no:cacheprovider")
    assert broken.ret == pytest.ExitCode.INTERRUPTED
    broken.stdout.fnmatch_lines(["*typo.toml: [[]x[]]: check 'faults' has no parameter 'falts'*"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ckpt-world-sizes=0,2"], "*--ckpt-world-sizes='0,2': give comma-separated integers between 1 and 8*"),
        (["--ckpt-world-sizes=two"], "*--ckpt-world-sizes='two'*"),
        (["--ckpt-job=tests.planted.jobs:NotAJob"],
         "*--ckpt-job tests.planted.jobs:NotAJob: *is not a subclass of ckpt_harness.Job*"),
        (["--ckpt-job=nope"], "*unknown job 'nope'*"),
        (["--ckpt-job=dcp", "--ckpt-scenarios=nope"], "*--ckpt-scenarios: no scenario named nope; choose from*"),
        (["--ckpt-keeps-best=maybe"], "*--ckpt-keeps-best: expected true or false, got 'maybe'*"),  # bool('maybe')
    ],
)
def test_bad_options_are_usage_errors(pytester, importable, args, message):
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest_inprocess(*args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


# make test keeps it: test_explore.py::test_planted_bugs_are_flagged_under_their_property[DeletesPreviousFirst-...]
@pytest.mark.slow
def test_fixture_explores_a_job_and_fails_with_the_table(pytester, importable):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.ckpt(world_size=2, steps=4)
        def test_deletes_previous(ckpt):
            report = ckpt.explore("tests.planted.checkpointers:DeletesPreviousFirst", faults=("eio",), corruptions=())
            report.assert_ok()
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ckpt_harness explore*", "*eio*fresh start*preserving*FAIL*",
                                 "*repro: PYTHONPATH=*ckpt-harness explore*--case*"])


def test_fixture_passes_every_setting_to_explore(pytester, importable):
    """keep_last and overwrite (from marker and call) reach the ranks of an
    exploration; a setting explore does not take is refused, not dropped."""
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.ckpt(steps=4, keep_last=1)
        def test_settings_reach_the_job(ckpt):
            report = ckpt.explore("tests.planted.jobs:ExpectsRotationAndOverwrite", overwrite=True,
                                  faults=("crash",), ops=("rmtree",), corruptions=())
            report.assert_ok()
            assert report.results and {r.cells[2] for r in report.results} == {"rmtree"}

        def test_unknown_setting_is_refused(ckpt):
            with pytest.raises(ValueError, match="unknown setting kinds: ExploreConfig takes world_size"):
                ckpt.explore("torch_save", kinds=("crash",))
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_catalogue_items_rerun_by_node_id_with_sane_junit_names(pytester, importable):
    import xml.etree.ElementTree as ET

    pytester.makepyfile("def test_nothing(): pass")
    listed = pytester.runpytest_inprocess("--ckpt-job=torch_save", "--collect-only", "-q", "-p", "no:cacheprovider")
    ids = [line for line in listed.stdout.lines if line.startswith("ckpt-job::")]
    assert "ckpt-job::crash-every-phase[torch_save-ws2]" in ids and len(ids) > 10
    (nodeid,) = [i for i in ids if i.startswith("ckpt-job::resume-every-save[")]

    # The id as -v prints it, given back: exactly that item runs, the run's own tests not collected.
    again = pytester.runpytest_inprocess(nodeid, "--ckpt-job=torch_save", "-v", "--junitxml=out.xml",
                                          "-p", "no:cacheprovider")
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines([f"{nodeid.replace('[', '?').replace(']', '?')} PASSED*"])
    (case,) = ET.parse(pytester.path / "out.xml").iter("testcase")
    assert (case.get("classname"), case.get("name")) == ("ckpt-job", "resume-every-save[torch_save-ws2]")

    wrong = pytester.runpytest_inprocess("ckpt-job::resume-every-sav", "--ckpt-job=torch_save",
                                          "-p", "no:cacheprovider")
    assert wrong.ret == pytest.ExitCode.USAGE_ERROR
    wrong.stderr.fnmatch_lines(["*ckpt-job::resume-every-sav: no such item of the catalogue against torch_save*"])


def test_baseline_makes_known_failures_xfail_and_reports_fixed_and_new_ones(pytester, importable):
    pytester.makepyfile("def test_nothing(): pass")
    forgets = "tests.planted.jobs:NoOptimizerState"
    pytester.makefile(".toml", expect=f"""
        [[expect]]
        job = "{forgets}"
        scenario = "resume-every-save"
        verdict = "fail"
        reason = "forgets the optimizer, issue #3"

        [[expect]]
        job = "torch_save"
        scenario = "resume-*"
        verdict = "fail"
        reason = "issue #4"

        [[expect]]
        job = "{forgets}"
        scenario = "resume-every-save-renamed"
        verdict = "fail"
        reason = "issue #5"
        """)
    pytester.makeini("[pytest]\nckpt_baseline = expect.toml\n")
    scenario = ("--ckpt-scenarios=resume-every-save", "-p", "no:cacheprovider", "-rxX")

    known = pytester.runpytest_inprocess(f"--ckpt-job={forgets}", *scenario)  # the baseline from the ini file
    known.assert_outcomes(passed=1, xfailed=1)
    assert known.ret == pytest.ExitCode.OK
    known.stdout.fnmatch_lines([
        "*- ckpt baseline -*",
        f"  expected {forgets} · resume-every-save: fail, expected: forgets the optimizer, issue #3 (*expect.toml:1)",
        f'  stale    *expect.toml:13 job="{forgets}" scenario="resume-every-save-renamed" verdict="fail": '
        "matches nothing this run covered; remove it",
        "no new failure, 1 expected, 0 fixed, 1 stale",
        "update the baseline *expect.toml: drop its fixed and stale entries",
        f"XFAIL *resume-every-save?{forgets}-ws2? - expected fail: forgets the optimizer, issue #3 (*expect.toml:1)",
    ])

    fixed = pytester.runpytest_inprocess("--ckpt-job=torch_save", "--ckpt-baseline=expect.toml", *scenario)
    fixed.assert_outcomes(passed=1, xpassed=1)
    assert fixed.ret == pytest.ExitCode.OK
    fixed.stdout.fnmatch_lines([
        "  fixed    torch_save · resume-every-save: pass, the baseline expects fail (expect.toml:7): "
        "fixed, update the baseline",
        "XPASS *resume-every-save?torch_save-ws2? - expected fail: issue #4 (expect.toml:7)",
    ])

    # The baseline expects another verdict than the one given: not the known state, so it fails.
    pytester.makefile(".toml", other=f'[[expect]]\njob = "{forgets}"\nscenario = "resume-every-save"\n'
                                     'verdict = "error"\nreason = "golden run crashed"\n')
    worse = pytester.runpytest_inprocess(f"--ckpt-job={forgets}", "--ckpt-baseline=other.toml", *scenario)
    worse.assert_outcomes(passed=1, failed=1)
    worse.stdout.fnmatch_lines([
        "*faithful: FAIL*",
        f"{forgets} · resume-every-save: fail, the baseline expects error (other.toml:1): *",
        f"  WORSE    {forgets} · resume-every-save: fail, the baseline expects error (other.toml:1): *",
        "1 new failure, 0 expected, 0 fixed, 0 stale",
    ])


def test_a_known_failure_for_another_cause_fails_the_item(pytester, importable):
    """Baselines by cause (issue 44): the entry expects the scenario's failure for the causes it records;
    a resume that loses the optimizer where the baseline knows one that loses the RNG state fails, an
    entry recording what it observes is xfail."""
    pytester.makepyfile("def test_nothing(): pass")
    forgets = "tests.planted.jobs:NoOptimizerState"
    entry = f'[[expect]]\njob = "{forgets}"\nscenario = "resume-every-save"\nverdict = "fail"\nreason = "r"\n'
    pytester.makefile(".toml", rng=entry + 'cause = ["state after load · rng values"]\n',
                      optimizer=entry + 'cause = ["final state · model values, optimizer values", "final state · '
                                        'optimizer missing, optimizer values", "state after load · optimizer '
                                        'missing, optimizer values"]\n')
    scenario = (f"--ckpt-job={forgets}", "--ckpt-scenarios=resume-every-save", "-p", "no:cacheprovider", "-rxX")
    other = pytester.runpytest_inprocess("--ckpt-baseline=rng.toml", *scenario)
    other.assert_outcomes(passed=1, failed=1)
    other.stdout.fnmatch_lines([
        f"  NEW      {forgets} · resume-every-save: fail, for another cause: observed *optimizer missing*; the "
        "baseline expects it for state after load · rng values (rng.toml:1): *",
        "1 new failure, 0 expected, 0 fixed, 0 stale",
    ])
    same = pytester.runpytest_inprocess("--ckpt-baseline=optimizer.toml", *scenario)
    same.assert_outcomes(passed=1, xfailed=1)
    same.stdout.fnmatch_lines(["no new failure, 1 expected, 0 fixed, 0 stale"])


@pytest.mark.slow
def test_the_baseline_summary_is_made_of_every_xdist_workers_results(pytester, importable):
    """Under pytest-xdist the items run in workers and the summary is the
    controller's: the workers hand it what they judged, so the baseline's
    lines (NEW for another cause, expected for the one it records) are
    printed as they are without xdist. A real subprocess: xdist starts its
    workers as processes."""
    pytester.makepyfile("def test_nothing(): pass")
    forgets = "tests.planted.jobs:NoOptimizerState"
    entry = f'[[expect]]\njob = "{forgets}"\nscenario = "%s"\nverdict = "fail"\nreason = "r"\n'
    pytester.makefile(".toml", rng=entry % "resume-every-save" + 'cause = ["state after load · rng values"]\n\n'
                      + entry % "missing-shard")
    result = pytester.runpytest_subprocess(
        "-n", "2", "-p", "no:cacheprovider", f"--ckpt-job={forgets}", "--ckpt-baseline=rng.toml",
        "--ckpt-scenarios=resume-every-save,missing-shard", f"--basetemp={pytester.path / 'base'}")
    result.assert_outcomes(passed=1, failed=1, xfailed=1)
    result.stdout.fnmatch_lines([
        "*- ckpt baseline -*",
        "against the baseline rng.toml:",
        f"  NEW      {forgets} · resume-every-save: fail, for another cause: observed *optimizer missing*",
        f"  expected {forgets} · missing-shard: fail, expected: r (rng.toml:8)",
        "1 new failure, 1 expected, 0 fixed, 0 stale",
    ])


def test_a_bad_baseline_is_a_usage_error(pytester, importable):
    pytester.makepyfile("def test_nothing(): pass")
    pytester.makefile(".toml", expect='[[expect]]\njob = "dcp"\nscenario = "x"\nverdict = "fail"\n')
    result = pytester.runpytest_inprocess("--ckpt-baseline=expect.toml", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(['*--ckpt-baseline: expect.toml:1: set reason = "..." (why the verdict is known*'])


# make test keeps it: test_script_mode.py::test_staging_renamed_on_every_node_fails_across_nodes_through_the_cli
@pytest.mark.slow
def test_ckpt_script_verifies_an_unmodified_script_under_torchrun(pytester, importable):
    """Script mode through the plugin, in one pytest run of two torchrun runs:
    --ckpt-script adds the item ckpt-script::verify (here a script whose every
    node renames the staging directory, failing at 2 nodes with the verdict
    table), and the fixture's `verify_script` takes the marker's script
    settings (golden only, to keep it to one run)."""
    resumable = ROOT / "tests" / "scripts" / "resumable.py"
    pytester.makepyfile(
        test_user=f"""
        import pytest
        from ckpt_harness.config import ScriptConfig, settings_of

        @pytest.mark.ckpt(script="{resumable} {{ckpt_dir}} --steps 2", nproc_per_node=2, nnodes=1)
        def test_my_script(ckpt):
            report = ckpt.verify_script(cases=["golden"])
            report.assert_ok()
            assert report.settings["nproc_per_node"] == 2 and report.settings["nnodes"] == 1
            assert report.settings["timeout"] == settings_of(ScriptConfig)["timeout"].default  # a script's, not a job's
        """
    )
    result = pytester.runpytest_inprocess(
        "-v", "-p", "no:cacheprovider", "--ckpt-script", f"{resumable} {{ckpt_dir}} --steps 2 --staging --bug "
        "rename-per-node", "--ckpt-nnodes", "2")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_my_script*PASSED*", "*ckpt-script::verify FAILED*",
                                 "*FileNotFoundError in save 2*"])
    assert "--ckpt-nproc-per-node" in pytester.runpytest_inprocess("--help").stdout.str()


def test_ckpt_script_with_ckpt_scenarios_runs_the_catalogue_against_the_script(pytester, importable):
    """--ckpt-scenarios with --ckpt-script: an item per scenario against the
    script (`matrix --script`'s row). Only scenarios that set what the script
    was not told how to take are run here (they are n/a, saying what to give,
    and start nothing): the verdicts of the ones that run are
    tests/test_script_matrix.py's and tests/test_script_settings.py's."""
    resumable = ROOT / "tests" / "scripts" / "resumable.py"
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest_inprocess(
        "-v", "-rs", "-p", "no:cacheprovider", "-k", "not verify and not nothing", "--ckpt-script",
        f"{resumable} {{ckpt_dir}}", "--ckpt-scenarios", "overwrite-complete,rotation-crash")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*ckpt-script::overwrite-complete SKIPPED*", "*ckpt-script::rotation-crash SKIPPED*",
                                 "*n/a: the script takes overwrite by its own arguments, and --script-args does not*",
                                 "*n/a: it sets keep_last = 1: the script takes keep_last by its own arguments*"])
    restarts = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--ckpt-script", f"{resumable} {{ckpt_dir}}",
                                             "--ckpt-scenarios", "resume-every-save", "--ckpt-max-restarts", "1")
    assert restarts.ret == pytest.ExitCode.USAGE_ERROR
    restarts.stderr.fnmatch_lines(["*torchrun restarting a faulted group would run its fault again: leave out "
                                   "--max-restarts (--ckpt-max-restarts under pytest)*"])


def test_catalogue_shards_split_the_items_keeping_each_target_whole(pytester, importable):
    """--ckpt-shard K/N: every item of the catalogue in exactly one shard, the
    items of one target (here torch_save at world sizes 1 and 2, equal costs)
    in one, as `matrix --shard` splits rows; a bad shard is a usage error."""
    pytester.makepyfile("def test_nothing(): pass")
    base = ("--ckpt-job=torch_save", "--ckpt-world-sizes=1,2", "--ckpt-scenarios=resume-*,overwrite-complete",
            "--collect-only", "-q", "-p", "no:cacheprovider")

    def listed(*args: str) -> list[str]:
        result = pytester.runpytest_inprocess(*base, *args)
        assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
        return [line for line in result.stdout.lines if line.startswith("ckpt-job::")]

    whole = listed()
    shards = [listed("--ckpt-shard", f"{k}/2") for k in (1, 2)]
    assert len(whole) >= 4 and sorted(shards[0] + shards[1]) == sorted(whole)
    assert {len({item.rpartition("-")[2] for item in shard}) for shard in shards} == {1}  # one world size each
    assert shards[0] != shards[1]

    bad = pytester.runpytest_inprocess(*base, "--ckpt-shard", "3/2")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--ckpt-shard 3/2: K must be 1..N (1..2)*"])
    alone = pytester.runpytest_inprocess(*base, "--ckpt-costs", "matrix.json")
    assert alone.ret == pytest.ExitCode.USAGE_ERROR
    alone.stderr.fnmatch_lines(["*--ckpt-costs balances the parts of --ckpt-shard K/N*"])


@pytest.mark.slow
def test_loadgroup_keeps_a_targets_items_on_one_worker_and_its_golden_run_made_once(pytester, importable):
    """Under pytest-xdist, `--dist loadgroup`: the three items of torch_save
    at ws2 run on one worker, and its bench (its golden runs) is made once in
    the whole session. Scheduled one by one, as xdist does when the group does
    not reach its scheduler (pytest-xdist#1386, pytest 9.2), the items would
    alternate between the two workers and each would make the golden runs. A
    real subprocess: xdist starts its workers as processes."""
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest_subprocess(
        "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider", "--ckpt-job=torch_save",
        "--ckpt-world-sizes=2", "--ckpt-scenarios=resume-every-save,overwrite-complete,overwrite-partial",
        f"--basetemp={pytester.path / 'base'}")
    result.assert_outcomes(passed=4)
    workers = {found[1] for line in result.stdout.lines
               if (found := re.match(r"\[(gw\d)\] .*PASSED ckpt-job::\S+\[torch_save-ws2\]", line))}
    assert len(workers) == 1, result.stdout.str()
    benches = sorted(p.name for p in (pytester.path / "base").glob("popen-gw*/ckpt-ws*") if not p.is_symlink())
    assert benches == ["ckpt-ws20"], benches  # one bench: the golden runs made once


def test_a_failing_item_carries_its_repro_and_timelines_to_junit_pytest_html_and_a_page(pytester, importable):
    """What CI keeps of a failing catalogue item: JUnit XML names its repro
    line and its timelines' files, pytest-html shows both as extras, and
    --ckpt-html writes the page of every item (a grid as `matrix --html`)."""
    import json
    import xml.etree.ElementTree as ET

    pytest.importorskip("pytest_html", reason="pytest-html is not installed (pip install '.[dev]')")
    pytester.makepyfile("def test_nothing(): pass")
    bad = pytester.runpytest_inprocess("--ckpt-job=tests.planted.jobs:NoOptimizerState",
                                        "--ckpt-scenarios=resume-every-save", "-p", "no:cacheprovider",
                                        "--junitxml=junit.xml", "--html=pytest.html", "--self-contained-html",
                                        "--ckpt-html=ckpt.html", "--ckpt-timeline-dir=timelines")
    bad.assert_outcomes(passed=1, failed=1)
    case = next(c for c in ET.parse(pytester.path / "junit.xml").iter("testcase") if c.find("failure") is not None)
    properties = [(p.get("name"), p.get("value")) for p in case.iter("property")]
    repro = [v for n, v in properties if n == "ckpt_repro"]
    timelines = [v for n, v in properties if n == "ckpt_timeline"]
    assert repro and "ckpt-harness run --job tests.planted.jobs:NoOptimizerState" in repro[0], properties
    assert timelines and all(Path(t).is_file() and Path(t).is_relative_to(pytester.path / "timelines")
                             for t in timelines), timelines
    trace = json.loads(Path(timelines[0]).read_text())
    runs = [r["name"] for r in trace["otherData"]["runs"]]
    assert runs == ["golden", "stopped run", "resumed run"], runs
    stopped = {e["pid"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"
               and e["args"]["name"].startswith("stopped run")}
    stops = [e for e in trace["traceEvents"] if e["ph"] == "i" and e["cat"] == "stop"]
    assert {e["pid"] for e in stops} == stopped and "stopped after save" in stops[0]["name"], stops

    page = (pytester.path / "pytest.html").read_text()
    assert "repro" in page and "timeline of resume@" in page, "no extras in pytest-html's report"
    ours = (pytester.path / "ckpt.html").read_text()
    assert 'class="cell v-fail"' in ours and "resume-every-save" in ours and "timeline-data" in ours
    bad.stdout.fnmatch_lines(["*ckpt_harness HTML report: ckpt.html*"])
