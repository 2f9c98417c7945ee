"""A file opened through an `opener` is the file the opener opened.

`tempfile.NamedTemporaryFile(dir=d)` (OLMo-core saves through it) calls
`open(d, mode, opener=...)`: the path `open` is handed is the directory, and
the opener makes the file with `mkstemp`. The probes once recorded the
writes as writes to the directory (a false single-writer FAIL, an UNKNOWN
power loss); they name the file the opener returned, whose open is the
opener's own `os.open`. Run in a fresh interpreter: the probes patch
`open` and `os` for good.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from ckpt_harness.inject.trace import EventKind, read_events

WRITES = textwrap.dedent("""
    import os, sys, tempfile
    from ckpt_harness.inject import files
    from ckpt_harness.inject.tracer import Tracer

    ckpt, trace, how = sys.argv[1:]
    tracer = Tracer(trace, 0)
    files.install(tracer, ckpt, None)
    tracer.set_phase("save 2")
    if how == "tempfile":
        with tempfile.NamedTemporaryFile("wb", dir=ckpt, delete=False) as f:
            f.write(b"x" * 100)
            f.flush()
            os.fsync(f.fileno())
        name = f.name
    else:
        name = os.path.join(ckpt, "tmpplain")
        with open(name, "wb", opener=lambda path, flags: os.open(path, flags, 0o600)) as f:
            f.write(b"x" * 100)
            f.flush()
            os.fsync(f.fileno())
    os.replace(name, os.path.join(ckpt, "model.pt"))
    print(os.path.basename(name))
""")


def traced(tmp_path, how: str):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    done = subprocess.run([sys.executable, "-c", WRITES, str(ckpt), str(tmp_path / "rank0.trace"), how],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    events = [e for e in read_events(tmp_path / "rank0.trace") if e.kind is not EventKind.PHASE]
    return done.stdout.strip(), events, (ckpt / "model.pt").read_bytes()


def test_a_named_temporary_file_in_the_checkpoint_is_the_file_mkstemp_made(tmp_path):
    name, events, data = traced(tmp_path, "tempfile")
    assert data == b"x" * 100  # the probes changed nothing of what lands
    files = {(e.kind, e.fields.get("path")) for e in events if e.kind is not EventKind.RENAME}
    assert files == {(EventKind.OPEN, name), (EventKind.WRITE, name), (EventKind.FSYNC, name),
                     (EventKind.CLOSE, name)}, files  # never the directory ".": one open, of the file
    assert [e.kind for e in events].count(EventKind.OPEN) == 1
    assert sum(e.fields["n"] for e in events if e.kind is EventKind.WRITE) == 100
    assert any(e.kind is EventKind.RENAME and e.fields.get("src") == name for e in events), events


def test_an_opener_of_the_path_it_is_handed_records_that_path_once(tmp_path):
    name, events, data = traced(tmp_path, "opener")
    assert data == b"x" * 100
    opens = [e.fields["path"] for e in events if e.kind is EventKind.OPEN]
    assert opens == [name], opens
    assert {e.fields["path"] for e in events if e.kind is EventKind.WRITE} == {name}


def test_a_fault_at_a_temporary_files_rename_fires_in_a_run_whose_file_has_other_random_letters():
    """OLMo-core renames `step2/tmpXXXXXXXX` to `.metadata.json`: a case made from
    the golden run's name would wait for letters the fault run never draws."""
    from ckpt_harness.inject.faults import Fault, Injector, address

    golden = address("rename", "step2/tmpq8_x0z1k -> step2/.metadata.json")
    assert golden == "rename(step2/tmp*->step2/.metadata.json)"
    fault = Fault.parse(Fault("crash", 0, "save 2", 3, at=golden).label)
    fired = []
    injector = Injector(0, (fault,), lambda *a, **k: fired.append(k))
    for target in ("step2/tmpa1b2c3d4.distcp -> step2/__0_0.distcp", "step2/tmp00000000 -> step2/.metadata.json"):
        index = injector.point("save 2")
        armed = injector.armed("save 2", index, "rename", target)
        assert (armed is fault) == target.endswith(".metadata.json"), target
    assert len(fired) == 1
    # only a name tempfile made is starred: a step, a pointer, a longer or shorter name stay themselves
    for name in ("step_00000008/model.pt", "latest.tmp -> latest", "tmpdirectory/x", "tmp1234567/x", "step0-tmp"):
        assert "*" not in address("rename", name), name
