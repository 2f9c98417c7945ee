"""JIT-built framework ops: built once, outside every deadline; a stale lock is cleared.

Builders are real processes (tests/planted/jit.py); the job runs in a real group.
"""

import os
import time

import pytest

from ckpt_harness import Verdict
from ckpt_harness.jit import BuildFailed, JitOp, build, ensure_built


def _op(tmp_path, builder, key="k", **env):
    return JitOp("the planted op", tmp_path / "ext" / "op", f"tests.planted.jit:{builder}", key, env=env)


def test_a_build_longer_than_the_deadline_happens_before_it(ckpt, tmp_path, monkeypatch, pace):
    """The run's deadline is shorter than the build: built inside the run, it would be cut. The deadline
    leaves the run (about a second on a quiet box) five times that here and now, and never more than the
    15 s it was fixed at; the build takes 5 s longer than the deadline."""
    timeout = min(15.0, round(pace(5.0), 1))
    build = int(timeout) + 5
    monkeypatch.setenv("CKPT_TEST_JIT_DIR", str(tmp_path / "ext"))
    monkeypatch.setenv("CKPT_TEST_BUILD_SECONDS", str(build))
    started = time.monotonic()
    report = ckpt.verify("tests.planted.jobs:SlowJitOp", steps=2, timeout=timeout, cases=["golden"])
    assert time.monotonic() - started >= build
    assert [(r.check, r.verdict) for r in report.results] == [("live", Verdict.PASS), ("fresh start", Verdict.PASS)]
    assert (tmp_path / "ext" / ".ckpt-harness-slow_op.built").read_text().startswith(f"slow {build}")


def test_built_once_then_a_stamp_check(tmp_path, capsys):
    op = _op(tmp_path, "build", CKPT_TEST_BUILD_SECONDS="0")
    ensure_built([op])
    assert "built the planted op" in capsys.readouterr().err
    assert op.built()
    ensure_built([_op(tmp_path, "fail")])  # same op and key: not run again
    assert capsys.readouterr().err == ""
    with pytest.raises(BuildFailed, match="gcc: fatal error"):
        build(_op(tmp_path, "fail", key="new versions"))  # a new key rebuilds
    # a build that fails steps aside: said, not stamped, not tried again by this process (issue 64)
    failing = _op(tmp_path, "fail", key="newer versions")
    ensure_built([failing])
    err = capsys.readouterr().err
    assert "warm-up skipped: the planted op was not built before the run" in err and "gcc: fatal error" in err
    assert not failing.built()
    ensure_built([failing])
    assert "building" not in capsys.readouterr().err


def test_a_stamp_whose_build_was_deleted_is_no_build(tmp_path):
    """A JIT op's build directory removed by hand (or a cache cleaner) is rebuilt
    before the deadline, not inside it."""
    import shutil

    op = _op(tmp_path, "build", CKPT_TEST_BUILD_SECONDS="0")
    op.build_dir.mkdir(parents=True)  # as torch's builder leaves it
    ensure_built([op])
    assert op.built()
    shutil.rmtree(op.build_dir)
    assert not op.built()
    prebuilt = _op(tmp_path, "build", key="shipped", CKPT_TEST_BUILD_SECONDS="0")
    prebuilt = JitOp(prebuilt.what, tmp_path / "ext" / "shipped_op", prebuilt.builder, prebuilt.key, prebuilt.env)
    ensure_built([prebuilt])  # the framework had it prebuilt: no build directory ever
    assert prebuilt.built()


def test_a_stale_torch_lock_is_removed_and_said(tmp_path, capsys):
    """A build that was killed leaves torch's `lock`; waiting on it would hang every run."""
    op = _op(tmp_path, "build", CKPT_TEST_BUILD_SECONDS="0")
    op.build_dir.mkdir(parents=True)
    op.torch_lock.touch()
    old = time.time() - 120
    os.utime(op.torch_lock, (old, old))
    ensure_built([op])
    err = capsys.readouterr().err
    assert f"removed {op.torch_lock}: a stale build lock" in err
    assert op.built() and not op.torch_lock.exists()


def test_a_lock_someone_is_building_under_is_waited_for(tmp_path):
    """A live process working in the build directory owns the lock: it is not stolen."""
    import subprocess

    op = _op(tmp_path, "build", CKPT_TEST_BUILD_SECONDS="0")
    op.build_dir.mkdir(parents=True)
    op.torch_lock.touch()
    old = time.time() - 120
    os.utime(op.torch_lock, (old, old))
    # a "compiler" in the build dir that finishes and releases the lock after 3 s
    builder = subprocess.Popen(["sh", "-c", "sleep 3; rm lock"], cwd=op.build_dir)
    try:
        started = time.monotonic()
        ensure_built([op])
        assert time.monotonic() - started >= 2.5
        assert builder.wait(timeout=30) == 0  # it removed its own lock: we did not
    finally:
        builder.kill()


def test_a_wedged_build_is_killed_with_its_children_at_its_timeout(tmp_path):
    pid_file = tmp_path / "child.pid"
    op = _op(tmp_path, "hang_with_child", CKPT_TEST_CHILD_PID=str(pid_file))
    with pytest.raises(BuildFailed, match="took longer than 5s"):
        build(op, timeout=5)
    child = int(pid_file.read_text())
    for _ in range(50):
        if not os.path.exists(f"/proc/{child}") or " Z " in open(f"/proc/{child}/stat").read():
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the builder's child {child} outlived the build's timeout")
    assert not op.built()
