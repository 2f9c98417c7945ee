"""Conversions: what a checkpoint becomes after it was saved, as a table.

A checkpoint rarely stays in the format it was written in: ZeRO shards are
consolidated to fp32 weights, DCP directories become one `torch.save` file,
a trainer's checkpoint is exported with `save_pretrained`. Each is a place
where a tensor, a dtype, a tied weight, an optimizer moment or the step
silently goes missing. The `convert` check runs every conversion that reads
a target's checkpoint layout on its committed save k and compares what the
converted checkpoint holds, read the way its consumers load it, with the
state the job had when save k returned (`Job.full_state`), key by key.

A conversion is a function from directory to directory plus the reader of
what it wrote (`Conversion`). It names the layout it reads (a job names
its own: `Job.checkpoint_layout`; a script is given one: `--checkpoint-layout`) and
what it is documented to leave out (`drops`: a weights-only export drops
the optimizer), so that a documented loss is not a failure and an
undocumented one is. A target that exposes no full state (a script) holds
a conversion to its source instead: the save, read by its own layout's
loader under the keys the conversion's reader gives (`read_source`).

Save k is the directory under the checkpoint directory named by its step
(its first number: ``step_000004``, ``checkpoint-4``, ``global_step4``), as
the harness matches a script's saves by their paths (`save_dir`).

Other packages add conversions under the entry-point group
`ckpt_harness.conversions`:

    [project.entry-points."ckpt_harness.conversions"]
    my-export = "my_package.export:CONVERSION"    # an object satisfying `Conversion`

Importing this module is cheap: a conversion's framework is imported by its
own module, which is imported in the process that runs it (`run`), never in
the harness.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol, runtime_checkable

from ckpt_harness.errors import ScenarioError
from ckpt_harness.extensions import registered, with_entry_points

__all__ = ["BUILTIN_CONVERSIONS", "Conversion", "NoReader", "for_layout", "get", "layouts", "registry", "save_dir"]

ENTRY_POINT_GROUP = "ckpt_harness.conversions"

BUILTIN_CONVERSIONS = {
    "dcp-to-torch-save": "ckpt_harness.conversions.dcp:TO_TORCH_SAVE",
    "dcp-round-trip": "ckpt_harness.conversions.dcp:ROUND_TRIP",
    "torch-save-to-safetensors": "ckpt_harness.conversions.torch_save:TO_SAFETENSORS",
    "torch-save-to-dcp": "ckpt_harness.conversions.torch_save:TO_DCP",
    "zero-to-fp32": "ckpt_harness.conversions.deepspeed:ZERO_TO_FP32",
    "zero-to-universal": "ckpt_harness.conversions.deepspeed:ZERO_TO_UNIVERSAL",
    "save-pretrained": "ckpt_harness.conversions.hf:SAVE_PRETRAINED",
    "shard-trainer-weights": "ckpt_harness.conversions.hf:SHARDED_WEIGHTS",
}


class NoReader(Exception):
    """Raised by `Conversion.read` for output it has no reader for (a variant
    of the layout not covered yet), or by `Conversion.read_source` for a
    save only the conversion itself can read: the case is n/a, saying so,
    not a finding about the conversion."""


@runtime_checkable
class Conversion(Protocol):
    #: The checkpoint layout it reads (`Job.checkpoint_layout`: "torch_save", "dcp", ...).
    reads: str
    #: The layout of what it writes: `reads` again for a round trip, which
    #: the job's own loader must then resume from; another one, complete
    #: (nothing dropped), is what `format-confusion` hands that loader.
    gives: str
    #: What it writes, in a reader's words ("one torch.save file").
    writes: str
    #: Keys of the full state it is documented to leave out (`fnmatch`
    #: patterns, "optim/*"), and why, in a user's words; a key it keeps
    #: anyway is compared like any other.
    drops: tuple[str, ...]
    why_dropped: str
    #: Modules it cannot run without, each with what installs it.
    requires: Mapping[str, str]

    def applies(self, source: Path) -> Optional[str]:
        """Why it does not apply to this save (a tool its framework does not
        ship for this kind of checkpoint), or None. Cheap: run in the
        harness process, with no framework imported."""

    def convert(self, source: Path, out: Path) -> None:
        """Convert the save in `source` into the directory `out` (created,
        empty), laid out as a save of layout `gives` is in its directory.
        Raising is a refusal: the conversion said it cannot, which is
        allowed; writing something wrong is not."""

    def read(self, out: Path) -> Mapping[str, Any]:
        """What `out` holds, loaded the way its consumers load it: for a save
        laid out as a built-in job lays it out, under the keys of that job's
        `full_state` ("model/<name>", "optim/<name>/<key>", "scheduler/<key>",
        "step"), else key for key as saved (`_layouts.plain`)."""

    def read_source(self, source: Path) -> Mapping[str, Any]:
        """The save in `source`, loaded by its own layout's loader, under the
        keys `read` gives: what `read(out)` must equal when the target
        exposes no full state to hold it to (a script). Raise `NoReader`
        when only the conversion itself reads the save (ZeRO partitions)."""


@functools.lru_cache(maxsize=None)
def registry() -> dict[str, str]:
    """Every conversion by name -> "module:attribute": built-in, then installed packages'."""
    return with_entry_points(ENTRY_POINT_GROUP, BUILTIN_CONVERSIONS)


@functools.lru_cache(maxsize=None)
def get(name: str) -> Conversion:
    """The conversion `name` (a registered name, or "module:attribute" as a
    job is given), imported."""
    target = registry().get(name) or (name if ":" in name else None)
    if target is None:
        raise ScenarioError(f"unknown conversion {name!r}; choose from {', '.join(registry())}, or give "
                            "module:attribute")
    return registered("conversion", name, target, Conversion, ScenarioError,
                      "lacks reads, gives, writes, drops, why_dropped, requires, applies(), convert(), read() or "
                      "read_source(): see ckpt_harness.conversions.Conversion")


def layouts() -> list[str]:
    """Every layout a registered conversion reads: what a script's `--checkpoint-layout` may name."""
    return sorted({get(name).reads for name in registry()})


def save_dir(ckpt_dir: Path, step: int) -> Path:
    """The directory of save `step` directly under `ckpt_dir`: the one whose
    name's first number is `step`. Raises LookupError saying what it found."""
    found = [p for p in sorted(Path(ckpt_dir).iterdir()) if p.is_dir() and _first_number(p.name) == step]
    if len(found) == 1:
        return found[0]
    entries = ", ".join(sorted(p.name for p in Path(ckpt_dir).iterdir())) or "nothing"
    which = "no directory" if not found else f"{len(found)} directories ({', '.join(p.name for p in found)})"
    raise LookupError(f"{which} directly under the checkpoint directory is named by step {step} (it holds "
                      f"{entries}): a conversion reads a save kept in a directory of its own, named by its step")


def _first_number(name: str) -> Optional[int]:
    found = re.search(r"\d+", name)
    return int(found.group()) if found else None


def for_layout(layout: str) -> list[str]:
    """The names of the conversions that read `layout`, in registry order.
    Importing a conversion's module imports no framework (they are imported
    inside `convert`/`read`), so this is cheap in the harness process."""
    return [name for name in registry() if get(name).reads == layout]
