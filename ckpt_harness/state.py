"""Canonical records of a rank's state, and the diff between two of them.

`capture` runs in the rank and turns whatever `Job.state` returned into a flat
``{key: leaf}`` mapping whose leaves are plain Python values: the harness
process reads records without importing torch. Tensors are compared by dtype,
shape and a digest of their bytes, never with `allclose`: NaN, -0.0 and a
silent dtype change all count. Values of small tensors ride along so a diff
can name the first differing index and the largest difference.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any, Iterator, Mapping, Optional

#: Tensors up to this many bytes keep their values for diffs.
KEEP_BYTES = 4 << 20

Record = dict[str, "Leaf"]


@dataclasses.dataclass(frozen=True)
class TensorLeaf:
    dtype: str
    shape: tuple[int, ...]
    digest: str
    data: Optional[bytes] = dataclasses.field(default=None, compare=False, repr=False)

    def describe(self) -> str:
        return f"tensor {self.dtype}{list(self.shape)} sha256:{self.digest[:12]}"


@dataclasses.dataclass(frozen=True)
class ValueLeaf:
    """An exact non-tensor value; floats are held by bit pattern."""

    type: str
    value: Any

    def describe(self) -> str:
        if self.type == "float":
            return repr(float.fromhex(self.value))
        return repr(self.value)


Leaf = TensorLeaf | ValueLeaf


class StateError(TypeError):
    """`Job.state` returned something the harness cannot compare."""


def capture(state: Mapping[str, Any]) -> Record:
    """Flatten `state` into ``{"model.fc.weight": leaf, ...}``."""
    if not isinstance(state, Mapping):
        raise StateError(
            f"Job.state() must return a mapping of names to values, got {type(state).__name__}"
        )
    return dict(_flatten("", state))


def _flatten(key: str, value: Any) -> Iterator[tuple[str, Leaf]]:
    import numpy as np
    import torch

    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _flatten(f"{key}.{k}" if key else str(k), v)
    elif isinstance(value, torch.Tensor):
        yield key, _tensor_leaf(value)
    elif isinstance(value, np.ndarray):
        yield key, _bytes_leaf(f"numpy.{value.dtype}", value.shape, np.ascontiguousarray(value).tobytes())
    elif isinstance(value, np.generic):
        yield from _flatten(key, value.item())
    elif isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        yield key, ValueLeaf(type(value).__name__, value)
    elif isinstance(value, float):
        yield key, ValueLeaf("float", value.hex())
    elif isinstance(value, bytes):
        yield key, _bytes_leaf("bytes", (len(value),), value)
    elif isinstance(value, (list, tuple)):
        if len(value) > 16 and all(type(v) is int for v in value):
            # e.g. the 625 words of python's Mersenne Twister: one leaf, not 625
            packed = b"".join(v.to_bytes(16, "little", signed=True) for v in value)
            yield key, _bytes_leaf("int-sequence", (len(value),), packed)
        else:
            for i, v in enumerate(value):
                yield from _flatten(f"{key}.{i}", v)
    else:
        raise StateError(
            f"state key {key!r} holds a {type(value).__module__}.{type(value).__qualname__}; "
            "return tensors, numpy arrays, numbers, strings, or dicts/lists of them "
            "(e.g. call .state_dict() on modules, optimizers and schedulers)"
        )


def _tensor_leaf(tensor: Any) -> TensorLeaf:
    import torch

    if hasattr(tensor, "to_local"):  # DTensor: this rank's shard is what it owns
        tensor = tensor.to_local()
    tensor = tensor.detach().cpu().contiguous()
    raw = tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
    return _bytes_leaf(str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), raw)


def _bytes_leaf(dtype: str, shape: tuple, raw: bytes) -> TensorLeaf:
    digest = hashlib.sha256(raw).hexdigest()
    return TensorLeaf(dtype, tuple(shape), digest, raw if len(raw) <= KEEP_BYTES else None)


@dataclasses.dataclass(frozen=True)
class Difference:
    key: str
    detail: str
    #: What differs, for folding many keys into one line: "missing",
    #: "unexpected", "dtype", "shape" or "values".
    kind: str = "values"
    #: For numeric values: the largest absolute difference (NaN if not a number).
    max_abs: Optional[float] = None
    #: For floating-point values: `max_abs` relative to the largest expected
    #: magnitude; tells last-bit noise (~1e-7 for float32) from a real change.
    max_rel: Optional[float] = None
    #: For tensors whose values differ: the index of the first differing element.
    first: Optional[tuple[int, ...]] = None

    def __str__(self) -> str:
        return f"{self.key}: {self.detail}"


def diff(expected: Record, actual: Record) -> list[Difference]:
    """Every key whose leaf differs, in key order; empty when bitwise equal."""
    out = []
    for key in sorted(expected.keys() | actual.keys()):
        if key not in actual:
            out.append(Difference(key, f"missing (expected {expected[key].describe()})", "missing"))
        elif key not in expected:
            out.append(Difference(key, f"unexpected key ({actual[key].describe()})", "unexpected"))
        elif expected[key] != actual[key]:
            out.append(_explain(key, expected[key], actual[key]))
    return out


def _explain(key: str, expected: Leaf, actual: Leaf) -> Difference:
    if isinstance(expected, TensorLeaf) and isinstance(actual, TensorLeaf):
        if expected.dtype != actual.dtype:
            return Difference(key, f"dtype {actual.dtype}, expected {expected.dtype}", "dtype")
        if expected.shape != actual.shape:
            return Difference(key, f"shape {list(actual.shape)}, expected {list(expected.shape)}", "shape")
        return _tensor_values_differ(key, expected, actual)
    worst = rel = None
    if isinstance(expected, ValueLeaf) and isinstance(actual, ValueLeaf) \
            and {expected.type, actual.type} <= {"int", "float"}:
        number = lambda leaf: float.fromhex(leaf.value) if leaf.type == "float" else float(leaf.value)  # noqa: E731
        worst = abs(number(actual) - number(expected))
        if "float" in (expected.type, actual.type):
            rel = _relative(worst, abs(number(expected)))
    return Difference(key, f"{actual.describe()}, expected {expected.describe()}", "values", worst, rel)


def _relative(worst: float, scale: float) -> float:
    return worst / scale if scale > 0 else (0.0 if worst == 0 else math.inf)


def _tensor_values_differ(key: str, expected: TensorLeaf, actual: TensorLeaf) -> Difference:
    import numpy as np

    a, b = _as_numbers(expected), _as_numbers(actual)
    if a is None or b is None:
        if expected.data is None or actual.data is None:
            return Difference(key, "bytes differ (too large to keep values for a diff)")
        first = next(i for i, (x, y) in enumerate(zip(expected.data, actual.data)) if x != y)
        return Difference(key, f"bytes differ, first at byte {first}")
    width = a.dtype.itemsize
    unequal = np.flatnonzero(
        np.any(
            np.frombuffer(a.tobytes(), np.uint8).reshape(-1, width)
            != np.frombuffer(b.tobytes(), np.uint8).reshape(-1, width),
            axis=1,
        )
    )
    first = int(unequal[0])
    index = [int(i) for i in np.unravel_index(first, expected.shape)] if expected.shape else []
    with np.errstate(invalid="ignore", over="ignore"):
        delta = np.abs(a.astype(np.float64) - b.astype(np.float64))
    worst = float(np.nanmax(delta)) if not np.all(np.isnan(delta)) else math.nan
    rel = None
    if a.dtype.kind == "f" and not math.isnan(worst):
        with np.errstate(invalid="ignore"):
            rel = _relative(worst, float(np.nanmax(np.abs(a.astype(np.float64)), initial=0.0)))
    return Difference(key, (
        f"{unequal.size} of {a.size} elements differ; first at index {index}: "
        f"{b[first].item()!r}, expected {a[first].item()!r}; max abs diff {worst:.6g}"
    ), "values", worst, rel, tuple(index))


#: torch dtype name -> numpy dtype for diffs; others are compared as bytes.
_NUMPY_DTYPES = {
    "float64": "<f8", "float32": "<f4", "float16": "<f2", "int64": "<i8", "int32": "<i4",
    "int16": "<i2", "int8": "i1", "uint8": "u1", "bool": "?",
}


def _as_numbers(leaf: TensorLeaf) -> Any:
    """The leaf's values as a flat numpy array, or None if only bytes make sense."""
    import numpy as np

    if leaf.data is None:
        return None
    if leaf.dtype == "bfloat16":
        return (np.frombuffer(leaf.data, "<u2").astype(np.uint32) << 16).view(np.float32)
    if leaf.dtype.startswith("numpy."):
        return np.frombuffer(leaf.data, np.dtype(leaf.dtype.removeprefix("numpy.")))
    code = _NUMPY_DTYPES.get(leaf.dtype)
    return None if code is None else np.frombuffer(leaf.data, np.dtype(code))
