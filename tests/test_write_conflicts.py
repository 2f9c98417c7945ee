"""single-writer (issue 45, item 4): an oracle on every uninterrupted run's
trace, through the CLI. A planted save in which both ranks write the model
file (equal replicas: on a local disk it comes out whole and every resume
passes) is flagged by `run`, naming the path, the ranks and their lines,
while every other check passes; the built-in `torch_save`, whose rank 0
alone writes it, is clean, and the `write-conflicts` scenario gives both
their cell."""

import json
import re

from tests.clirun import cli

PLANTED = "tests.planted.jobs:EveryRankWritesTheModel"


def test_both_ranks_writing_the_model_file_is_flagged_while_every_other_check_passes(tmp_path):
    # absolute: the in-process fork server keeps the first call's directory
    out = cli("run", "--job", PLANTED, "--workdir", str(tmp_path / "work"), "--json", str(tmp_path / "report.json"),
              cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    cases = json.loads((tmp_path / "report.json").read_text())["cases"]
    failed = [(c["case"], c["check"]) for c in cases if c["verdict"] != "pass"]
    assert failed == [("golden", "single-writer")], failed
    assert len(cases) > 10  # the resumes ran, and passed
    assert re.search(r"single-writer: FAIL — save 2: step_000002/model\.pt by ranks 0, 1 \(rank 0 writes it at "
                     r"_common\.py:\d+ in torch_save_durable\(\); rank 1 writes it at _common\.py:\d+ in "
                     r"torch_save_durable\(\)\) \(and 3 more path\(s\)\)", out.stdout), out.stdout


def test_the_write_conflicts_scenario_passes_rank_0_alone_and_fails_both_ranks(tmp_path):
    def scenario(job: str):
        return cli("scenario", "write-conflicts", "--job", job, "--workdir", str(tmp_path / job.replace(":", "-")),
                   cwd=tmp_path)

    clean = scenario("torch_save")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "write-conflicts [torch_save] single-writer: PASS — golden: every path of its 4 save(s) was written, " \
           "renamed or deleted by one rank at most" in clean.stdout, clean.stdout
    shared = scenario(PLANTED)
    assert shared.returncode == 1 and "--- golden / single-writer: FAIL — save 2: step_000002/model.pt by ranks " \
        "0, 1" in shared.stdout, shared.stdout + shared.stderr
