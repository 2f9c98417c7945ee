"""Checkpoints in a bucket (issue 46, item 2): `storage = "s3"`, an axis of the
built-in `torch_save` and `dcp` jobs (`dcp[s3]`), against a real SeaweedFS on
loopback that the harness starts at the first run on it and stops at exit.

The pipelines keep holding checkpoints as local directories; a run on a
bucket mounts its directory there and brings the bucket's objects back when
its group ended (`ckpt_harness.storage`). Checked both ways: a writer that
puts its `latest` object before the objects it names is flagged atomic on the
bucket and the built-in job, which puts it last, passes, and so do a plain
script's (`{ckpt_url}`, item 2); a power loss, which
a bucket does not feel, is n/a with the reason, not a verdict.
"""

import subprocess
from pathlib import Path

import pytest

from ckpt_harness import targets
from ckpt_harness.errors import ConfigError, FrameworkMissing, JobError
from ckpt_harness.launch import s3server
from tests.clirun import cli

pytest.importorskip("s3fs", reason="the s3 extra: pip install 'ckpt-harness[s3]'")
try:
    s3server.binary()
except FrameworkMissing as exc:
    pytest.skip(str(exc), allow_module_level=True)

from ckpt_harness.storage import bucket  # noqa: E402  (botocore: the s3 extra)

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "scripts"


@pytest.fixture(scope="module", autouse=True)
def one_server_then_none():
    """The in-process runs share this process's server; none is left once the module is done."""
    yield
    bucket.shutdown()
    assert not _our_servers(), "a weed server of this test process outlived bucket.shutdown()"


def _our_servers() -> list[str]:
    import os

    found = subprocess.run(["pgrep", "-f", "-a", "weed mini"], capture_output=True, text=True).stdout.splitlines()
    mine = []
    for line in found:
        pid = int(line.split()[0])
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if parent == os.getpid():
            mine.append(line)
    return mine


def test_a_mount_puts_the_directory_in_the_bucket_and_brings_back_what_the_run_left(tmp_path):
    ckpt = tmp_path / "ckpt"
    (ckpt / "step_000002").mkdir(parents=True)
    (ckpt / "step_000002" / "model.pt").write_bytes(b"saved at 2")
    (ckpt / "latest").write_text("step_000002\n")
    storage = bucket.BucketStorage()
    with storage.mount(ckpt) as mount:
        assert mount.url == f"s3://{bucket.BUCKET}/{ckpt.resolve().as_posix().strip('/')}"
        endpoint = s3server.S3Endpoint(mount.env["AWS_ENDPOINT_URL"], mount.env["AWS_ACCESS_KEY_ID"],
                                       mount.env["AWS_SECRET_ACCESS_KEY"])
        s3 = s3server.client(endpoint)
        prefix = mount.url.split("/", 3)[3] + "/"
        listed = s3.list_objects_v2(Bucket=bucket.BUCKET, Prefix=prefix)["Contents"]
        assert sorted(o["Key"][len(prefix):] for o in listed) == ["latest", "step_000002/model.pt"]
        # what a run does there: a new save, the old one deleted, the pointer moved
        s3.put_object(Bucket=bucket.BUCKET, Key=prefix + "step_000004/model.pt", Body=b"saved at 4")
        s3.delete_object(Bucket=bucket.BUCKET, Key=prefix + "step_000002/model.pt")
        s3.put_object(Bucket=bucket.BUCKET, Key=prefix + "latest", Body=b"step_000004\n")
    kept = sorted(p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*"))
    assert kept == ["latest", "step_000004", "step_000004/model.pt"], kept  # no empty step_000002: no directories
    assert (ckpt / "step_000004" / "model.pt").read_bytes() == b"saved at 4"
    assert (ckpt / "latest").read_text() == "step_000004\n"


def test_a_server_that_dies_under_a_run_is_the_harnesss_failure_and_the_next_run_gets_a_new_one(tmp_path):
    """Its requests failed because the store was gone, not because of the code under test: a harness
    error (an ERROR verdict), never a FAIL."""
    import os
    import signal

    storage = bucket.BucketStorage()
    with pytest.raises(s3server.ServerFailed, match="exited with -9 during a run"):
        with storage.mount(tmp_path / "ckpt"):
            process = bucket._server()._server.process
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    bucket.shutdown()
    with storage.mount(tmp_path / "again") as mount:  # the next mount starts a server of its own
        assert mount.url.endswith("/again")


def test_a_run_that_writes_into_the_mounted_directory_instead_of_the_bucket_is_refused_naming_its_files(tmp_path):
    """A job or script that ignores the URL it is given would lose its files when the directory is made the
    bucket's again, and look like a checkpointing that saved nothing: a set-up error that says what to fix."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "given.pt").write_bytes(b"put in the bucket at the mount")
    with pytest.raises(JobError, match=r"the run wrote step_2/state.pt into its local checkpoint directory .* "
                                       r"write the checkpoints there .*\{ckpt_url\}"):
        with bucket.BucketStorage().mount(ckpt):
            (ckpt / "step_2").mkdir()
            (ckpt / "step_2" / "state.pt").write_bytes(b"written locally")
    assert sorted(p.name for p in ckpt.iterdir()) == ["given.pt"]  # the bucket's objects, as after any run


def _script_explore(tmp_path, bug: str, name: str):
    script = f"{SCRIPTS / 'bucket_train.py'} {{ckpt_url}}" + (f" --bug {bug}" if bug else "")
    cold = ("--cold-start",) if bug else ()  # it fails: cold at once, not warm and then again cold to confirm
    return cli("explore", "--script", script, "--storage", "s3", "--faults", "crash", "--ops", "put",
               "--corruptions", "", "--no-after", *cold, "--workdir", str(tmp_path / name), cwd=tmp_path)


def test_a_script_given_the_buckets_url_puts_its_pointer_last_and_passes_and_its_pointer_first_twin_is_flagged(
        tmp_path):
    """A plain script saving through fsspec to `{ckpt_url}`: its saves are seen by the file object it hands
    `torch.save`, each object put is a fault point at the script's line, and the resume reads the bucket."""
    correct = _script_explore(tmp_path, "", "correct")
    assert correct.returncode == 0, correct.stdout + correct.stderr
    assert "the script saved at steps 2, 4, 6" in correct.stdout, correct.stdout
    assert "put  step_4/state.pt  bucket_train.py:" in correct.stdout and "put  latest " in correct.stdout
    assert "2 cases: 2 pass" in correct.stdout, correct.stdout
    broken = _script_explore(tmp_path, "latest-first", "broken")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "--- crash@r0:save4/put(step_4/state.pt) / atomic: FAIL" in broken.stdout, broken.stdout
    assert "→ refused: FileNotFoundError" in broken.stdout  # `latest` named a state the crash kept out


@pytest.mark.trainers
def test_lightnings_checkpoint_to_the_buckets_url_is_one_object_put_whole(tmp_path):
    """Lightning writes a `ModelCheckpoint` under an URL through fsspec: on a bucket each save is one object,
    uploaded whole as its stream closes, so no crash can leave half of it (its local `_atomic_save` is a
    temporary file renamed into place); the save is seen by the Trainer's own `save_checkpoint`."""
    pytest.importorskip("pytorch_lightning")
    done = cli("trace", "--script", f"{SCRIPTS / 'lightning_train.py'} {{ckpt_url}}", "--storage", "s3",
               "--workdir", str(tmp_path / "w"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    rank0 = next(line for line in done.stdout.splitlines() if line.startswith("rank 0:"))
    assert rank0.startswith("rank 0: put step_4.ckpt (") and rank0.count("put ") == 1, done.stdout
    assert sorted(p.name for p in (tmp_path / "w" / "ckpt").iterdir()) == ["step_2.ckpt", "step_4.ckpt"]


@pytest.mark.parametrize("job", ["dcp"])  # torch_save's resumes from the bucket: the explorations below
def test_a_job_saving_to_the_bucket_resumes_bitwise_from_it(tmp_path, job):
    done = cli("run", "--job", job, "--storage", "s3", "--steps", "4", "--workdir", str(tmp_path / "work"),
               cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAIL" not in done.stdout and "resume@2  final state       PASS     bitwise equal" in done.stdout
    golden = tmp_path / "work" / "golden" / "ckpt"  # the bucket's objects, brought back into the directory
    assert (golden / "latest").read_text() == "step_000004\n"
    assert sorted(p.name for p in golden.iterdir()) == ["latest", "step_000002", "step_000004"]
    files = {p.name for p in (golden / "step_000004").iterdir()}
    assert files == ({".metadata", "__0_0.distcp", "__1_0.distcp"} if job == "dcp" else
                     {"model.pt", "optimizer.pt", "scheduler.pt", "rng_rank0.pt", "rng_rank1.pt"}), files


def _crashes_at(tmp_path, job: str, ops: str, name: str):
    """`explore` crashing a rank before each of the save's requests of `ops`: crash-every-phase on a bucket,
    narrowed to the requests that decide these cases."""
    return cli("explore", "--job", job, "--storage", "s3", "--steps", "6", "--faults", "crash", "--ops", ops,
               "--corruptions", "", "--no-after", "--workdir", str(tmp_path / name), cwd=ROOT)


def test_a_latest_object_put_before_the_save_it_names_is_flagged_atomic_and_the_built_in_passes(tmp_path):
    broken = _crashes_at(tmp_path, "tests.planted.buckets:PublishesBeforeItsFiles", "put", "broken")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    # rank 0 killed before its first file's upload, once `latest` was in the bucket: a pointer to nothing
    assert "--- crash@r0:save4/put(step_000004/model.pt) / atomic: FAIL" in broken.stdout, broken.stdout
    assert "crash at rank 0 #8 put step_000004/model.pt from _common.py:" in broken.stdout  # the job code that put it
    assert "→ refused: FileNotFoundError" in broken.stdout  # the resume follows the pointer to a missing object
    assert "one object put last (a pointer, a marker)" in broken.stdout  # the bucket's fix, not a rename
    twin = _crashes_at(tmp_path, "torch_save", "put", "twin")
    assert twin.returncode == 0, twin.stdout + twin.stderr
    assert "6 cases: 6 pass" in twin.stdout, twin.stdout


def test_a_power_loss_on_a_bucket_is_not_applicable_and_says_why(tmp_path):
    done = cli("scenario", "power-loss-after-save", "--job", "dcp", "--storage", "s3", "--workdir", str(tmp_path / "w"),
               cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "durable: N/A — no power loss can be modelled for job dcp[s3]" in done.stdout, done.stdout
    assert "a power loss there is a crash of the writers" in done.stdout and "0 KB" in done.stdout  # before any run


def test_a_job_that_writes_only_to_a_directory_is_refused_on_a_bucket_before_any_run():
    target = targets.job("tests.planted.jobs:OwnLoop", storage="s3")
    with pytest.raises(ConfigError, match=r"does not train with storage=s3: it takes local \(Job.axes\)"):
        target.preflight()
    assert targets.job("torch_save[s3]").row == "torch_save[s3]"


def test_a_rename_by_copy_cut_in_the_middle_is_flagged_atomic_and_its_sealed_twin_passes(tmp_path):
    """The POSIX way to publish a directory (write it under a temporary name, rename it into place) is, on a
    bucket, a copy of each object and a delete of each: a crash between two copies leaves a `step_N/` with
    some objects, which a loader that trusts the name takes for a checkpoint."""
    broken = _crashes_at(tmp_path, "tests.planted.buckets:RenamesByCopy", "copy", "broken")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "5 cases: 1 pass, 4 fail" in broken.stdout, broken.stdout  # before the first copy: the previous save
    cut = ("--- crash@r0:save4/copy(step_000004.tmp/optimizer.pt->step_000004/optimizer.pt) / atomic: FAIL — crash "
           "at rank 0 #18 copy step_000004.tmp/optimizer.pt -> step_000004/optimizer.pt from buckets.py:")
    assert cut in broken.stdout, broken.stdout
    assert "exploration did not see writes" not in broken.stdout  # an object's bytes travel in its request
    assert "every case against the object store's server" in broken.stdout  # no model to derive a case from
    assert "no case state was derived" not in broken.stdout
    sealed = _crashes_at(tmp_path, "tests.planted.buckets:RenamesByCopyThenSeals", "copy,put", "sealed")
    assert sealed.returncode == 0, sealed.stdout + sealed.stderr
    assert "11 cases: 11 pass" in sealed.stdout, sealed.stdout  # every copy, every put (the seal's too)


def test_s3torchconnectors_uploads_are_fault_points_a_pointer_put_first_is_flagged_and_the_job_passes(tmp_path):
    """AWS's DCP writer sends its requests through a native client botocore never sees; its Python client is
    probed instead: each shard's upload, its completion (the object is visible), the `.metadata` copy. A
    crash before any of them keeps the previous save for `dcp_s3connector`, which puts `latest` last, and
    leaves a pointer to a save without its shard for its twin, which puts it first."""
    pytest.importorskip("s3torchconnector")
    done = cli("explore", "--job", "dcp_s3connector", "--steps", "6", "--faults", "crash", "--ops", "complete,copy",
               "--corruptions", "", "--no-after", "--workdir", str(tmp_path / "job"), cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 cases: 4 pass" in done.stdout, done.stdout  # a shard's completion per rank, .metadata.tmp's, its copy
    assert "copy      step_000004/.metadata.tmp -> step_000004/.metad" in done.stdout, done.stdout
    twin = cli("explore", "--job", "tests.planted.crt:PublishesBeforeItsShards", "--steps", "6", "--faults", "crash",
               "--ops", "complete", "--corruptions", "", "--no-after", "--workdir", str(tmp_path / "twin"), cwd=ROOT)
    assert twin.returncode == 1, twin.stdout + twin.stderr
    assert "--- crash@r0:save4/complete(step_000004/__0_0.distcp) / atomic: FAIL" in twin.stdout, twin.stdout
    assert "complete step_000004/__0_0.distcp from crt.py:" in twin.stdout  # at the job's line, not the client's


def test_dcps_fsspec_writer_commits_its_metadata_by_a_copy_and_a_delete_on_a_bucket(tmp_path):
    """What DCP's fsspec writer does on a bucket, as the object probes see it (torch 2.13): every rank puts
    its shard whole; the coordinator puts `.metadata.tmp`, then "renames" it by a copy and a delete. Its
    sync step (`os.fsync(stream.fileno())`, no flush before it) meets an s3fs file without a descriptor and
    falls back to `os.sync()`, which syncs this machine's disks: nothing of the object, which is uploaded
    whole when the stream closes, before the save returns. So on a bucket the missing flush loses nothing
    (docs/storage.md); a power loss is n/a there (above)."""
    done = cli("trace", "--job", "dcp", "--storage", "s3", "--steps", "4", "--save", "4",
               "--workdir", str(tmp_path / "w"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    rank0 = next(line for line in done.stdout.splitlines() if line.startswith("rank 0:"))
    order = ["put step_000004/__0_0.distcp (", "put step_000004/.metadata.tmp (",
             "copy step_000004/.metadata.tmp to step_000004/.metadata", "delete step_000004/.metadata.tmp",
             "put latest ("]
    at = [rank0.index(op) for op in order]
    assert at == sorted(at), rank0
    assert "fsync" not in done.stdout and "rename" not in done.stdout
