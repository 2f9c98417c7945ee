"""Upgrade-safe (issue 67): a checkpoint written under one release of a package, resumed under the next.

The releases are tinyckpt's (tests/tinypkgs.py), wheels written by hand and installed offline
(``--find-links DIR`` with ``PIP_NO_INDEX=1``) into environments the harness makes and caches
(`launch.envs`); the script, tests/scripts/tiny_upgrade.py, is plain DDP saving through tinyckpt. Case
upgrade@2 stops after save 2 under ``--upgrade-from`` and resumes under ``--pins``: a good release after
a good one passes (through the plugin's marker and fixture); 2.0.0, which loads a 1.x checkpoint without
its optimizer and says nothing, fails, naming the optimizer's keys (through the plugin, and in a matrix
whose rows are the releases); 3.0.0,
which refuses a 1.x checkpoint on every rank, naming its format, passes (through the CLI). `bisect` finds
2.1.0, whose `latest` sorts step_8.pt after step_10.pt, among five releases in two probes between the ends,
and says when a range holds no change.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests import tinypkgs
from tests.clirun import cli

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "scripts" / "tiny_upgrade.py"


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """The wheels, a cache of environments, and pip kept off the index and inside the test's directories."""
    wheels = tinypkgs.build(tmp_path_factory.mktemp("wheels"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PIP_NO_INDEX", "1")
        mp.setenv("PIP_CACHE_DIR", str(tmp_path_factory.mktemp("pip-cache")))
        mp.setenv("PIP_CONFIG_FILE", os.devnull)
        for name in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
            mp.delenv(name, raising=False)
        yield ["--find-links", str(wheels), "--envs-dir", str(tmp_path_factory.mktemp("envs"))]


def upgrade(offline, cwd: Path, old: str, new: str):
    return cli("run", "--script", f"{SCRIPT} {{ckpt_dir}} --steps 4 --save-every 2", "--nproc-per-node", "2",
               "--upgrade-from", f"tinyckpt=={old}", "--pins", f"tinyckpt=={new}", *offline, "--case", "upgrade@2",
               cwd=cwd)


def test_releases_are_rows_of_one_matrix_and_the_format_break_fails_naming_what_it_dropped(offline, tmp_path):
    """`matrix --pins` given twice: a row per set of releases, named by them, under scenario upgrade-safe
    (upgrade@2, upgrade@4 from 1.0.0); 1.1.0 passes, 2.0.0's cell fails naming the optimizer's keys."""
    done = cli("matrix", "--script", f"{SCRIPT} {{ckpt_dir}} --steps 4 --save-every 2", "--upgrade-from",
               "tinyckpt==1.0.0", "--pins", "tinyckpt==1.1.0", "--pins", "tinyckpt==2.0.0", *offline,
               "--scenarios", "upgrade-safe", "--out", str(tmp_path / "m"), "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr  # findings are results: every cell judged
    good, bad = (f"tiny_upgrade.py --steps 4 --save-every 2 (tinyckpt=={v})" for v in ("1.1.0", "2.0.0"))
    assert f"| {good} | ✅ pass |" in done.stdout and f"| {bad} | ❌ fail |" in done.stdout, done.stdout
    matrix = json.loads((tmp_path / "m" / "matrix.json").read_text())
    assert sorted(matrix["rows"]) == [good, bad], matrix["rows"]
    assert "extra.optimizer.state.0.exp_avg" in (tmp_path / "m" / "matrix.md").read_text()


def test_a_release_that_refuses_the_old_format_on_every_rank_passes_saying_so(offline, tmp_path):
    done = upgrade(offline, tmp_path, "1.0.0", "3.0.0")
    assert done.returncode == 0, done.stdout + done.stderr
    refused = [line for line in done.stdout.splitlines() if "upgrade@2" in line and "refused" in line]
    assert refused and "PASS" in refused[0], done.stdout
    assert "rank 0, 1: ValueError" in refused[0], refused[0]


@pytest.mark.slow
def test_through_the_plugin_the_marker_names_the_releases_and_the_fixture_judges_both_ways(offline, pytester):
    """The pytest face: the releases are marker keys, as every setting is; the fixture's upgrade@2 passes
    1.0.0 -> 1.1.0 and fails 1.0.0 -> 2.0.0 naming the optimizer's keys."""
    links, envs = offline[1], offline[3]
    common = (f'script="{SCRIPT} {{ckpt_dir}} --steps 4 --save-every 2", nproc_per_node=1, '
              f'upgrade_from="tinyckpt==1.0.0", find_links="{links}", envs_dir="{envs}"')
    pytester.makepyfile(test_user=f"""
        import pytest

        @pytest.mark.ckpt({common}, pins="tinyckpt==1.1.0")
        def test_the_next_good_release(ckpt):
            ckpt.verify_script(cases=["upgrade@2"]).assert_ok()

        @pytest.mark.ckpt({common}, pins="tinyckpt==2.0.0")
        def test_the_format_break(ckpt):
            ckpt.verify_script(cases=["upgrade@2"]).assert_ok()
        """)
    result = pytester.runpytest_inprocess("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_the_next_good_release*PASSED*", "*test_the_format_break*FAILED*",
                                 "*upgrade@2*saves after resume*FAIL*", "*extra.optimizer.state.0.exp_avg*"])


def test_a_release_that_does_not_exist_is_bad_input_with_pips_own_words(offline, tmp_path):
    done = cli("run", "--script", f"{SCRIPT} {{ckpt_dir}}", "--pins", "tinyckpt==9.9", *offline, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "No matching distribution found for tinyckpt==9.9" in done.stderr, done.stderr
    assert not done.stdout.strip() or "verify" not in done.stdout, done.stdout  # nothing ran


def bisect(offline, cwd: Path, good: str, bad: str):
    return cli("bisect", "--script", f"{SCRIPT} {{ckpt_dir}} --steps 12 --save-every 2", "--package", "tinyckpt",
               "--good", good, "--bad", bad, *offline, "--case", "resume@10", cwd=cwd)


@pytest.mark.slow
def test_bisect_finds_the_release_that_resumes_the_wrong_step_in_two_probes(offline, tmp_path):
    """Five releases from pip's own listing (``pip index versions`` over the wheel directory), 2.1.0 the
    first to resume step 8 where step 10 was saved: the ends are run, then 1.2.0 and 2.0.0."""
    done = bisect(offline, tmp_path, "1.0.0", "2.1.0")
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "5 releases from 1.0.0 (good) to 2.1.0 (bad)" in out, out
    assert "first changed release: tinyckpt 2.1.0 (2 probes between the ends, 4 releases run" in out, out
    probed = [line.split()[0] for line in out.splitlines() if line.startswith("  ") and line.split()[0][:1].isdigit()]
    assert probed == ["1.0.0", "2.1.0", "1.2.0", "2.0.0"], out
    assert "new: resume@10:" in out and "repro: " in out and "--pins tinyckpt==2.1.0" in out, out


def test_bisect_over_a_range_with_no_change_says_so(offline, tmp_path):
    done = bisect(offline, tmp_path, "1.0.0", "2.0.0")  # 2.0.0 reads its own format: every resume holds
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no change: 2.0.0 passes, as it does at 1.0.0; the releases between were not run" in done.stdout, \
        done.stdout
    assert "0 probes between the ends, 2 releases run" in done.stdout, done.stdout


@pytest.mark.slow
def test_through_the_plugin_bisect_blames_the_release_whose_resume_changed(offline, pytester):
    """The fixture's bisect over two releases given in order (no index read): 2.1.0 changed against 1.2.0,
    and 1.2.0 did not against 1.0.0."""
    links, envs = offline[1], offline[3]
    pytester.makepyfile(test_user=f"""
        import pytest

        @pytest.mark.ckpt(script="{SCRIPT} {{ckpt_dir}} --steps 12 --save-every 2", find_links="{links}",
                          envs_dir="{envs}")
        def test_which_release_broke_the_resume(ckpt):
            found = ckpt.bisect_script("tinyckpt", "1.2.0", "2.1.0", releases=["1.2.0", "2.1.0"],
                                       cases=["resume@10"])
            assert found.culprit == "2.1.0", found.explain()
            assert [case for case, _ in found.new(found.probes[-1])] == ["resume@10"], found.explain()
            same = ckpt.bisect_script("tinyckpt", "1.0.0", "1.2.0", releases=["1.0.0", "1.2.0"],
                                      cases=["resume@10"])
            assert same.culprit is None and same.stopped is None and "no change" in same.explain(), same.explain()
        """)
    result = pytester.runpytest_inprocess("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


@pytest.mark.slow
def test_a_downgrade_is_judged_alike_and_reported_as_information(offline, tmp_path):
    """downgrade@2: stopped under --pins (2.0.0, format 2), resumed under --upgrade-from (1.0.0, which reads
    format 1 only): its KeyError on every rank is a refusal; nothing of it fails the run."""
    done = cli("run", "--script", f"{SCRIPT} {{ckpt_dir}} --steps 4 --save-every 2",
               "--upgrade-from", "tinyckpt==1.0.0", "--pins", "tinyckpt==2.0.0", *offline, "--case", "downgrade@2",
               cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    refused = [line for line in done.stdout.splitlines() if "downgrade@2" in line and "refused" in line]
    assert refused and "PASS" in refused[0] and "KeyError" in refused[0], done.stdout
