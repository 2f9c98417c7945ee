"""What a built-in job trains with, beyond its model: the axes a checkpoint's state varies along.

Every built-in job trains fp32 with AdamW on a synthetic stream, and saves to
a local directory, by default.
The bugs users report live on the other values: a loss scaler whose scale is
state (fp16), an optimizer that creates its state eagerly (Adagrad) or lazily
and only with momentum (SGD), a data loader whose workers and sampler carry
the position (torchdata's `StatefulDataLoader`, a shuffled `RandomSampler`
resumed mid-epoch), a compiled model whose state-dict keys change, and a bucket where a
rename is a copy and nothing is fsynced.

Each axis is a setting (`config.SETTINGS`: `--precision bf16`,
`@pytest.mark.ckpt(precision="bf16")`, `precision = "bf16"` in TOML, repro
lines), handed to every rank as one `Axes` value (`RankContext.axes`). A
matrix row names its values after the job: ``dcp[bf16]``,
``torch_save[fp16,adagrad]`` (`split_row`). A job lists the values it can
train with (`Job.axes`); any other is refused before a group starts.

Stdlib only: the CLI and the plugin validate a row without importing torch.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from ckpt_harness.errors import ConfigError, did_you_mean

#: The values of each axis, the default first.
PRECISIONS = ("fp32", "bf16", "fp16")
OPTIMIZERS = ("adamw", "sgd", "adagrad")
DATA = ("stream", "workers", "shuffled")
COMPILE = (False, True)
#: Where the checkpoints go (`ckpt_harness.storage`): a local directory, or a
#: bucket of a real S3-compatible server the harness starts on loopback.
STORAGES = ("local", "s3")

#: Axis name -> its values, the default first: what `Job.axes` draws from.
VALUES: Mapping[str, tuple[Any, ...]] = {
    "precision": PRECISIONS, "optimizer": OPTIMIZERS, "data": DATA, "compile": COMPILE, "storage": STORAGES,
}
NAMES = tuple(VALUES)
#: The axes of the training itself, which a script is told of through its own
#: arguments (`--script-args`); `storage` is where the checkpoints go instead.
TRAINING = ("precision", "optimizer", "data", "compile")

HELP = {
    "precision": "what the job computes in: fp32; bf16 (autocast; DeepSpeed's own bf16 mode); fp16 (autocast "
                 "and a loss scaler, whose scale and growth count are state to resume)",
    "optimizer": "the job's optimizer: adamw; sgd (with momentum: its buffers appear at the first step); "
                 "adagrad (creates its state when built, before any step)",
    "data": "where the job's batches come from: stream (the job's own: a synthetic shard whose only state is a "
            "position; the HF Trainer's shuffled sampler); "
            "workers (torchdata's StatefulDataLoader with 2 persistent worker processes, its state_dict resumed "
            "mid-epoch); shuffled (a DataLoader over a RandomSampler with its own generator, resumed mid-epoch by "
            "its epoch's generator state and the batches consumed)",
    "compile": "train a torch.compile'd model (backend aot_eager: Dynamo and AOTAutograd as inductor runs "
               "them, without inductor's C++ build, which takes a minute a process on 2 cores)",
    "storage": "where the checkpoints go: local (a directory); s3 (a bucket of a real S3-compatible server, "
               "SeaweedFS, started by the harness on loopback: the job writes through fsspec and s3fs, DCP through "
               "its fsspec writer, and every run finds what the previous one left in the bucket)",
}


@dataclasses.dataclass(frozen=True)
class Axes:
    """The axes one run trains along, as every rank receives them (`RankContext.axes`)."""

    precision: str = PRECISIONS[0]
    optimizer: str = OPTIMIZERS[0]
    data: str = DATA[0]
    compile: bool = COMPILE[0]
    storage: str = STORAGES[0]

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> "Axes":
        """The axes among a run's settings (the others are ignored)."""
        return cls(**{name: values[name] for name in NAMES if name in values})

    def varied(self) -> dict[str, Any]:
        """The axes that are not at their default, by name."""
        return {name: getattr(self, name) for name in NAMES if getattr(self, name) != VALUES[name][0]}

    def training_varied(self) -> dict[str, Any]:
        """The axes of the training itself (`TRAINING`) that are not at their default."""
        return {name: value for name, value in self.varied().items() if name in TRAINING}

    @property
    def label(self) -> str:
        """How a matrix row shows them: ``bf16,adagrad`` (`compile` for compile=True); empty at the defaults."""
        return ",".join("compile" if v is True else str(v) for v in self.varied().values())


#: What an axis value needs installed beyond the job's framework: module -> what installs it.
REQUIRES: Mapping[tuple[str, Any], Mapping[str, str]] = {
    ("data", "workers"): {"torchdata": "ckpt-harness[data]"},
    ("storage", "s3"): {"s3fs": "ckpt-harness[s3]"},
}


def missing(axes: Axes) -> dict[str, str]:
    """The modules `axes` needs that are not installed here, each with what installs it."""
    import importlib.util

    needed = {module: hint for (name, value), modules in REQUIRES.items() if getattr(axes, name) == value
              for module, hint in modules.items()}
    return {module: hint for module, hint in needed.items() if importlib.util.find_spec(module) is None}


def refused(job: str, supported: Mapping[str, tuple[Any, ...]], axes: Axes) -> list[str]:
    """What `axes` asks of a job that trains only with `supported` (`Job.axes`; an axis it does not
    list is at its default only), each as a sentence that says what to choose instead."""
    problems = []
    for name in NAMES:
        value = getattr(axes, name)
        mine = supported.get(name, VALUES[name][:1])
        if value not in mine:
            problems.append(f"job {job} does not train with {name}={_shown(value)}: it takes "
                            f"{', '.join(map(_shown, mine))} (Job.axes)")
    return problems


_ROW = re.compile(r"^(?P<job>[^\[\]]+)\[(?P<axes>[^\[\]]*)\]$")


def split_row(row: str) -> tuple[str, dict[str, Any]]:
    """``dcp[bf16,adagrad]`` -> ("dcp", {"precision": "bf16", "optimizer": "adagrad"}).

    A bracket holds axis values, each naming its axis (they are distinct
    across axes), or ``compile``; ``axis=value`` is taken too. A row without
    a bracket is the job at its defaults."""
    m = _ROW.match(row.strip())
    if m is None:
        if "[" in row or "]" in row:
            raise ConfigError(f"row {row!r}: write a job and its axes as JOB[VALUE,...], e.g. dcp[bf16,adagrad]")
        return row.strip(), {}
    values: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in m.group("axes").split(","))):
        name, value = _axis_of(row, item)
        if name in values:
            raise ConfigError(f"row {row!r} gives {name} twice ({_shown(values[name])}, {_shown(value)}): "
                              "a row trains with one value of each axis")
        values[name] = value
    return m.group("job").strip(), values


def _axis_of(row: str, item: str) -> tuple[str, Any]:
    if "=" in item:
        name, _, text = (s.strip() for s in item.partition("="))
        if name not in VALUES:
            raise ConfigError(f"row {row!r}: no axis {name!r}{did_you_mean(name, NAMES)}; the axes are "
                              f"{', '.join(NAMES)}")
        value: Any = {"true": True, "false": False}.get(text.lower(), text) if name == "compile" else text
        if value not in VALUES[name]:
            raise ConfigError(f"row {row!r}: {name} takes {', '.join(map(_shown, VALUES[name]))}, got {text!r}")
        return name, value
    if item == "compile":
        return "compile", True
    for name, values in VALUES.items():
        if item in values:
            return name, item
    known = [str(v) for name, vs in VALUES.items() if name != "compile" for v in vs] + ["compile"]
    raise ConfigError(f"row {row!r}: {item!r} is no axis value{did_you_mean(item, known)}; choose from "
                      f"{', '.join(known)}")


def row_name(job: str, axes: Axes) -> str:
    """The row a job at `axes` is shown as: ``dcp`` at the defaults, ``dcp[bf16]`` otherwise."""
    return f"{job}[{axes.label}]" if axes.label else job


def _shown(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


__all__ = ["Axes", "HELP", "NAMES", "REQUIRES", "STORAGES", "TRAINING", "VALUES", "missing", "refused", "row_name",
           "split_row"]
