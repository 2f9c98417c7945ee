"""What makes two checkpoint directories resume alike (`resumes.DirState`)."""

from __future__ import annotations

import os
import threading

import pytest

from ckpt_harness.pipeline.memo import Memo
from ckpt_harness.pipeline.resumes import DirState


def tree(root, files, mtimes=None):
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for i, rel in enumerate(mtimes or ()):
        os.utime(root / rel, ns=(10**18 + i, 10**18 + i))
    return root


def test_equal_trees_have_equal_states_and_any_byte_tells_them_apart(tmp_path):
    files = {"step_2/model.pt": b"abc", "latest": b"step_2"}
    a, b = tree(tmp_path / "a", files, ["step_2/model.pt", "step_2", "latest"]), tree(
        tmp_path / "b", files, ["step_2/model.pt", "step_2", "latest"])
    assert DirState.of(a) == DirState.of(b) and DirState.of(a).entries == 3
    os.utime(b / "latest", ns=(0, 0))  # timestamps are not part of the state
    assert DirState.of(a) == DirState.of(b)
    (b / "step_2" / "model.pt").write_bytes(b"abd")
    os.utime(b / "step_2" / "model.pt", ns=(10**18, 10**18))
    assert DirState.of(a) != DirState.of(b)


@pytest.mark.parametrize("change", ["empty dir", "renamed", "moved"])
def test_names_and_empty_directories_count(tmp_path, change):
    files = {"step_2/model.pt": b"abc", "latest": b"step_2"}
    order = ["step_2/model.pt", "step_2", "latest"]
    a = tree(tmp_path / "a", files, order)
    if change == "empty dir":
        b = tree(tmp_path / "b", files, order)
        (b / "tmp.step_4").mkdir()
    elif change == "renamed":
        b = tree(tmp_path / "b", {"step_2/model.pt": b"abc", "latest.tmp": b"step_2"},
                 ["step_2/model.pt", "step_2", "latest.tmp"])
    else:
        b = tree(tmp_path / "b", {"step_4/model.pt": b"abc", "latest": b"step_2"})
    assert DirState.of(a) != DirState.of(b)


def test_a_state_is_resumed_once_and_the_others_name_who_ran_it():
    resumes, ran, gate = Memo(), [], threading.Event()
    state = DirState("d" * 40, 3)

    def run(name):
        def resume():
            ran.append(name)
            gate.wait(5)
            return f"resume by {name}"
        return resume

    results = {}
    threads = [threading.Thread(target=lambda n=n: results.__setitem__(n, resumes.once(state, run(n), n)))
               for n in ("crash@r0:save4#3", "crash-after@r0:save4#2")]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(5)
    assert len(ran) == 1 and len(resumes) == 1
    first = ran[0]
    assert {r for r, _ in results.values()} == {f"resume by {first}"}
    assert sorted((shared for _, shared in results.values()), key=str) == sorted([None, first], key=str)
    other = resumes.once(DirState("e" * 40, 1), run("x"), "x")
    assert other == ("resume by x", None) and len(resumes) == 2
