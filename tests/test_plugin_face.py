"""The plugin's face as a user reads it (issue 65, item 6): the count pytest
prints, a misspelt marker keyword, script mode's timeout, and `matrix`'s
axis options.

Every pytest run here is a real one of pytester, the plugin loaded by its
entry point (tests/test_plugin.py's first test proves it is); they only
collect, or run tests that start nothing, so the file costs seconds. The
modules an in-process run imports are kept (tests/conftest.py).
"""

import os
import re
from pathlib import Path

import pytest

from ckpt_harness.config import SETTINGS, ScriptConfig, settings_of
from tests.clirun import cli

ROOT = Path(__file__).resolve().parent.parent
RESUMABLE = ROOT / "tests" / "scripts" / "resumable.py"
#: Script mode's timeout, from its one declaration; a job's is SETTINGS["timeout"].
SCRIPT_TIMEOUT = settings_of(ScriptConfig)["timeout"].default
JOB_TIMEOUT = SETTINGS["timeout"].default


@pytest.fixture
def importable(monkeypatch):
    """The test jobs of this repo, importable from the pytester directory."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def _listed(result) -> list[str]:
    """The node ids `--collect-only -q` lists."""
    return [line for line in result.stdout.lines if "::" in line and " " not in line]


def test_collected_counts_the_catalogue_and_script_items_it_lists(pytester, importable):
    """The catalogue's items (--ckpt-job) and the script's (--ckpt-script)
    are made after pytest's collection: the count pytest prints is still
    every item it lists, -k's deselections taken from it. Without the
    options, only the user's test is counted (nothing is added twice)."""
    pytester.makepyfile(test_nothing="def test_nothing(): pass")
    base = ("--collect-only", "-p", "no:cacheprovider")

    plain = pytester.runpytest_inprocess(*base, "-q")
    assert _listed(plain) == ["test_nothing.py::test_nothing"]
    plain.stdout.fnmatch_lines(["1 test collected*"])

    job = ("--ckpt-job=torch_save", "--ckpt-scenarios=resume-every-save,crash-every-phase")
    quiet = pytester.runpytest_inprocess(*base, "-q", *job)
    assert _listed(quiet) == ["test_nothing.py::test_nothing", "ckpt-job::crash-every-phase[torch_save-ws2]",
                              "ckpt-job::resume-every-save[torch_save-ws2]"], quiet.stdout.str()
    quiet.stdout.fnmatch_lines(["3 tests collected*"])
    pytester.runpytest_inprocess(*base, *job).stdout.fnmatch_lines(["collected 3 items", "*3 tests collected*"])

    # a catalogue node id given back: that item alone, counted alone
    one = pytester.runpytest_inprocess(*base, "-q", "ckpt-job::resume-every-save[torch_save-ws2]", *job)
    assert _listed(one) == ["ckpt-job::resume-every-save[torch_save-ws2]"], one.stdout.str()
    one.stdout.fnmatch_lines(["1 test collected*"])

    script = ("--ckpt-script", f"{RESUMABLE} {{ckpt_dir}}", "--ckpt-scenarios=resume-every-save,overwrite-complete")
    listed = pytester.runpytest_inprocess(*base, "-q", *script)
    assert sorted(_listed(listed)) == ["ckpt-script::overwrite-complete", "ckpt-script::resume-every-save",
                                       "ckpt-script::verify", "test_nothing.py::test_nothing"], listed.stdout.str()
    listed.stdout.fnmatch_lines(["4 tests collected*"])
    narrowed = pytester.runpytest_inprocess(*base, *script, "-k", "not overwrite")
    narrowed.stdout.fnmatch_lines(["collected 4 items / 1 deselected / 3 selected", "*3/4 tests collected*"])


def test_a_misspelt_marker_keyword_errors_its_test_with_the_keyword_to_write(pytester, importable):
    """Each misspelt keyword is named with the closest one (as the CLI's
    did-you-mean for options) and every keyword the marker takes; only the
    tests carrying it error, the module's others run, a correct keyword
    reaching the fixture."""
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.ckpt(nproc_per_nod=2)
        def test_nproc_typo(ckpt):
            pass

        @pytest.mark.ckpt(world_sise=[1, 2])
        def test_world_size_typo(ckpt):
            pass

        @pytest.mark.ckpt(colour="red")
        def test_far_from_any(ckpt):
            pass

        @pytest.mark.ckpt(world_size=[1, 2], nproc_per_node=2, steps=4)
        def test_correct(ckpt):
            assert ckpt.world_size in (1, 2)
            assert (ckpt.defaults["nproc_per_node"], ckpt.defaults["steps"]) == (2, 4)
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=2, errors=3)
    result.stdout.fnmatch_lines(["*test_correct?ws1? PASSED*", "*test_correct?ws2? PASSED*"])
    out = result.stdout.str()
    takes = "it takes world_size, steps, save_every, "
    assert ("@pytest.mark.ckpt has no keyword 'nproc_per_nod' (did you mean 'nproc_per_node'?): " + takes) in out, out
    assert "@pytest.mark.ckpt has no keyword 'world_sise' (did you mean 'world_size'?): " in out, out
    assert "@pytest.mark.ckpt has no keyword 'colour': " + takes in out, out  # nothing close: no guess
    assert "ERROR at setup of test_world_size_typo[ws2]" in out  # parametrized as without the marker
    assert "Traceback" not in out and "INTERNALERROR" not in out


def test_script_timeout_is_script_modes_own_declaration_in_cli_fixture_and_catalogue(pytester, importable):
    """A script's timeout, unset, is ScriptConfig's declaration in the CLI's
    `run --script`, the fixture's `verify_script` and the --ckpt-script
    catalogue items (made beside a --ckpt-job catalogue, which they once
    hid); a job's stays SETTINGS["timeout"]'s. --ckpt-timeout
    given wins everywhere, even at the value of a job's default (which an
    option with a default of its own could not tell from unset)."""
    from ckpt_harness.cli import _chosen, _parser

    assert SCRIPT_TIMEOUT != JOB_TIMEOUT  # else nothing below could tell them apart
    args = _parser().parse_args(["run", "--script", f"{RESUMABLE} {{ckpt_dir}}"])
    assert _chosen(args, "run", "run")[1]().timeout == SCRIPT_TIMEOUT

    pytester.makepyfile(
        test_timeouts=f"""
        import pytest

        def test_fixture(ckpt, request):
            given = request.config.getoption("--ckpt-timeout")
            assert ckpt.script_config("{RESUMABLE} {{ckpt_dir}}").timeout == (given or {SCRIPT_TIMEOUT!r})

        @pytest.mark.ckpt(timeout=7.5)
        def test_marker_wins(ckpt):
            assert ckpt.script_config("{RESUMABLE} {{ckpt_dir}}").timeout == 7.5
            assert ckpt.script_config("{RESUMABLE} {{ckpt_dir}}", timeout=9.0).timeout == 9.0  # the call's, over it
        """
    )
    for given, script, job in ((None, SCRIPT_TIMEOUT, JOB_TIMEOUT), (JOB_TIMEOUT, JOB_TIMEOUT, JOB_TIMEOUT),
                               (42.0, 42.0, 42.0)):
        option = () if given is None else (f"--ckpt-timeout={given!r}",)
        pytester.runpytest_inprocess("-p", "no:cacheprovider", *option).assert_outcomes(passed=2)
        items, _ = pytester.inline_genitems("-p", "no:cacheprovider", *option, "--ckpt-script",
                                            f"{RESUMABLE} {{ckpt_dir}}", "--ckpt-scenarios=resume-every-save",
                                            "--ckpt-job=torch_save")
        targets = {item.nodeid: item.row.make() for item in items if hasattr(item, "row")}
        assert {nodeid: t.timeout for nodeid, t in targets.items()} == {
            "ckpt-script::verify": script, "ckpt-script::resume-every-save": script,
            "ckpt-job::resume-every-save[torch_save-ws2]": job}, given


@pytest.mark.parametrize("args, rows", [
    (("--storage", "s3"), "give --job 'dcp[s3]' (a row per job)"),
    (("--job", "torch_save", "--job", "dcp[bf16]", "--storage", "s3"),
     "give --job 'torch_save[s3]' --job 'dcp[bf16,s3]',"),
])
def test_matrix_refuses_storage_with_the_rows_that_say_it(tmp_path, args, rows):
    """`matrix --storage s3` is refused before anything runs, with the rows to
    give instead (the user's own --job rows with s3 in their brackets)."""
    refused = cli("matrix", *args, "--scenarios", "resume-every-save", cwd=tmp_path)
    assert refused.returncode == 2, refused
    assert refused.stderr.startswith(f"ckpt-harness: error: matrix --storage s3: an axis is a row's, one job at "
                                     f"one value: {rows}"), refused.stderr
    assert "docs/matrix-storage.md" in refused.stderr
    assert not (tmp_path / "ckpt-matrix").exists()


def test_matrix_takes_the_row_its_refusal_gives(tmp_path):
    """The other way: the row the refusal names passes the same gate and is
    made a matrix row on s3 by the CLI's own row maker, checked as `matrix`
    checks its rows before running any (a row of it run against a scenario
    costs 50-90 s of SeaweedFS and torchrun on the 2-core machine: its
    verdicts are docs/matrix-storage.md's). Without the s3 extra the row is
    one this machine cannot run, saying what to install."""
    from ckpt_harness.catalogue.matrix import matrix_rows
    from ckpt_harness.cli import _axes_in_rows, _matrix_rows, _parser

    refused = cli("matrix", "--job", "torch_save", "--storage", "s3", cwd=tmp_path)
    given = re.search(r"give --job '([^']+)'", refused.stderr)
    assert given and given[1] == "torch_save[s3]", refused.stderr
    args = _parser().parse_args(["matrix", "--job", given[1], "--scenarios", "resume-every-save"])
    assert _axes_in_rows(args) is None
    rows, skipped = matrix_rows(_matrix_rows(args))
    if skipped:
        assert "pip install 'ckpt-harness[s3]'" in skipped[given[1]], skipped
    else:
        (row,) = rows
        assert (row.row, row.values["storage"]) == ("torch_save[s3]", "s3")


def test_matrix_refuses_storage_for_scripts_naming_the_command_that_takes_it(tmp_path):
    refused = cli("matrix", "--script", f"{RESUMABLE} {{ckpt_dir}}", "--storage", "s3", cwd=tmp_path)
    assert refused.returncode == 2
    assert "a --script row takes none: matrix --script runs on local storage" in refused.stderr, refused.stderr
    assert "`ckpt-harness run --script 'train.py --out {ckpt_url}' --storage s3`" in refused.stderr
