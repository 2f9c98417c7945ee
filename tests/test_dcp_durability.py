"""torch 2.13's DCP fsyncs `.metadata` before its pickle leaves the file's
buffer (`_FileSystemWriter.finish`), so a power loss right after `dcp.save`
returned can leave it empty. The harness must show that on a job that trusts
DCP, and the built-in `dcp` job must be durable despite it."""

import os

import pytest

from ckpt_harness.pipeline.explore import explore
from ckpt_harness.verdict import Verdict

#: The narrowest exploration that judges durable: no faults inside the save,
#: only the power loss right after it returned.
POWER_LOSS_AFTER = dict(faults=(), corruptions=(), after=True, cases=["power-loss-after"])


def durable(job, tmp_path):
    report = explore(job, world_size=2, workdir=tmp_path, **POWER_LOSS_AFTER)
    (result,) = [r for r in report.results if r.check == "durable"]
    return result


def test_a_job_trusting_dcp_alone_loses_the_metadata_at_power_loss(tmp_path):
    result = durable("tests.planted.dcp_jobs:SmallDcpAlone", tmp_path)
    assert result.verdict is Verdict.FAIL, result.details
    assert "EOFError: Ran out of input" in result.summary, result.summary
    assert "step_000004/.metadata: written after its last fsync" in result.details, result.details
    # The premise: the pickle fits in the buffer, so DCP's fsync ran before its write(2).
    metadata = tmp_path / "golden" / "ckpt" / "step_000004" / ".metadata"
    assert metadata.stat().st_size < os.stat(metadata).st_blksize


@pytest.mark.parametrize("job", ["tests.planted.dcp_jobs:SmallDcp", "dcp"])
def test_the_dcp_jobs_commit_fsyncs_what_dcp_did_not(tmp_path, job):
    result = durable(job, tmp_path)
    assert result.verdict is Verdict.PASS, result.details
