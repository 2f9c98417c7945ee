"""State capture and diff: bytes, not allclose."""

import math
import random

import numpy as np
import pytest
import torch

from ckpt_harness.state import StateError, TensorLeaf, capture, diff


def test_equal_states_have_no_differences():
    state = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "step": 3, "lr": 0.1,
             "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}}
    assert diff(capture(state), capture(state)) == []


def test_tensor_difference_names_key_index_and_max_abs_diff():
    a = torch.zeros(2, 3)
    b = a.clone()
    b[1, 2] = 0.5
    (d,) = diff(capture({"m": {"w": a}}), capture({"m": {"w": b}}))
    assert d.key == "m.w"
    assert "first at index [1, 2]" in d.detail and "max abs diff 0.5" in d.detail


@pytest.mark.parametrize(
    "expected, actual, words",
    [
        (torch.tensor([0.0]), torch.tensor([-0.0]), "-0.0"),
        (torch.tensor([math.nan]), torch.tensor([0.0]), "differ"),
        (torch.zeros(3), torch.zeros(3, dtype=torch.float64), "dtype float64, expected float32"),
        (torch.zeros(3), torch.zeros(4), "shape [4], expected [3]"),
        (torch.zeros(2, dtype=torch.bfloat16), torch.tensor([0.0, 1.0], dtype=torch.bfloat16), "index [1]"),
    ],
)
def test_bitwise_not_allclose(expected, actual, words):
    (d,) = diff(capture({"t": expected}), capture({"t": actual}))
    assert words in d.detail


def test_nan_equals_itself_bitwise():
    assert diff(capture({"t": torch.tensor([math.nan])}), capture({"t": torch.tensor([math.nan])})) == []


def test_missing_and_unexpected_keys():
    out = diff(capture({"a": 1, "b": 2}), capture({"b": 2, "c": 3}))
    assert [(d.key, d.detail.split()[0]) for d in out] == [("a", "missing"), ("c", "unexpected")]


def test_floats_and_ints_are_exact():
    assert diff(capture({"x": 0.1}), capture({"x": float("0.1")})) == []
    (d,) = diff(capture({"x": 0.1}), capture({"x": 0.1000000001}))
    assert d.key == "x"
    (d,) = diff(capture({"x": 0.0}), capture({"x": -0.0}))
    assert "-0.0" in d.detail
    (d,) = diff(capture({"n": 1}), capture({"n": True}))
    assert "True" in d.detail


def test_python_rng_state_is_one_leaf_and_one_draw_changes_it():
    random.seed(0)
    before = capture({"rng": random.getstate()})
    random.random()
    after = capture({"rng": random.getstate()})
    assert len(before) == 3  # version, 625 words as one leaf, gauss_next
    assert [d.key for d in diff(before, after)] == ["rng.1"]


def test_dtensor_like_objects_contribute_their_local_shard():
    class Sharded:
        def to_local(self):
            return torch.ones(2)

    leaf = capture({"p": torch.ones(2)})["p"]
    assert isinstance(leaf, TensorLeaf)
    from ckpt_harness.state import _tensor_leaf

    assert _tensor_leaf(Sharded()) == leaf


def test_records_hold_no_torch_objects():
    import pickle

    record = capture({"t": torch.ones(3), "n": np.int64(4), "a": np.ones(2)})
    assert b"torch" not in pickle.dumps(record)


def test_unsupported_values_get_an_actionable_error():
    with pytest.raises(StateError, match=r"'opt'.*state_dict\(\)"):
        capture({"opt": torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)})
    with pytest.raises(StateError, match="mapping"):
        capture([1, 2])
