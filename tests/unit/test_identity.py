"""A run's identity is told apart from its state (issue 64): what names the run is rewritten in the records a
rank writes, and said; what names its training is left as it is."""

import os
import socket
import time

import numpy as np

from ckpt_harness.rankside.identity import CKPT_DIR, HOST, PID, WALL_CLOCK, Identity
from ckpt_harness.state import ValueLeaf, capture


def recorded(ckpt: str, **state) -> tuple[dict, dict]:
    return Identity.of(ckpt).normalize(capture(state))


def test_two_runs_in_two_directories_record_the_same_paths(tmp_path):
    """Lightning's ModelCheckpoint state: its directory, its best path, and its best models keyed by path."""
    def lightning(ckpt):
        return {"dirpath": ckpt, "best_model_path": f"{ckpt}/step_4.ckpt",
                "best_k_models": {f"{ckpt}/step_4.ckpt": np.float32(0.5)}, "note": f"saved to file://{ckpt}/last"}
    a, why = recorded(str(tmp_path / "a"), callback=lightning(str(tmp_path / "a")))
    b, _ = recorded(str(tmp_path / "b"), callback=lightning(str(tmp_path / "b")))
    assert a == b
    assert a["callback.best_k_models.{ckpt_dir}/step_4.ckpt"] == ValueLeaf("float", float(np.float32(0.5)).hex())
    assert a["callback.note"].value == "saved to file://{ckpt_dir}/last"
    assert set(why) == set(a) and why["callback.dirpath"] == "the run's checkpoint directory"


def test_a_path_to_another_step_still_differs(tmp_path):
    a, _ = recorded(str(tmp_path / "a"), best=str(tmp_path / "a" / "step_4.ckpt"))
    b, _ = recorded(str(tmp_path / "b"), best=str(tmp_path / "b" / "step_8.ckpt"))
    assert a != b and a["best"].value == f"{CKPT_DIR}/step_4.ckpt"


def test_times_pids_and_the_host_are_placeholders_and_said(tmp_path):
    now = time.time()
    state, why = recorded(str(tmp_path), meta={
        "saved_at": now, "saved_ms": int(now * 1000), "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "pid": os.getpid(), "host": socket.gethostname(), "started0": f"{os.getpid()}\n"})
    assert {k: v.value for k, v in state.items()} == {
        "meta.saved_at": WALL_CLOCK, "meta.saved_ms": WALL_CLOCK, "meta.when": WALL_CLOCK, "meta.pid": PID,
        "meta.host": HOST, "meta.started0": PID}
    assert why == {"meta.saved_at": "a wall-clock time", "meta.saved_ms": "a wall-clock time",
                   "meta.when": "a wall-clock time", "meta.pid": "a process id", "meta.host": "the host's name",
                   "meta.started0": "a process id"}


def test_training_state_is_left_as_it_is(tmp_path):
    """Counters, rates, tokens seen, an old date, a pid-sized number not under a pid key, and tensors: state."""
    state = dict(step=4, lr=0.1, tokens=1_700_000_000, started="2020-01-01T00:00:00", workers=os.getpid(),
                 weight=np.ones(3, np.float32), flag=True)
    normalized, why = recorded(str(tmp_path), **state)
    assert normalized == capture(state) and why == {}
