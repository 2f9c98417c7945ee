"""Tiny packages with several releases, as wheels written by hand: the releases a "releases as an axis" test
installs offline (``--find-links DIR --no-index``).

Why by hand: a wheel is a zip of the package's files and a ``.dist-info`` (METADATA, WHEEL, RECORD with each
file's sha256), so writing one takes milliseconds, needs neither setuptools nor a build backend nor a network,
and is byte-identical on every run (fixed zip timestamps), so pip's view of it never depends on the day.

`tinyckpt` keeps one API across its releases, as a real checkpoint library does:
``save(path, state: dict) -> None``, ``load(path) -> dict`` and ``latest(ckpt_dir) -> Optional[str]`` (the
newest ``step_<N>.pt`` in a directory). The releases:

* 1.0.0, 1.1.0, 1.2.0: good. Format 1, written atomically (a temporary file, fsync, ``os.replace``).
* 2.0.0: a new format and only half a loader for the old one, a partial load without an error (see `_V2`).
* 2.1.0: back to format 1, and `latest` picks the wrong step past step 9 (see `_V21`).
* 3.0.0: format 3, and a checkpoint of any other format refused, naming it (see `_V3`).

Every release declares ``Requires-Dist: torch``: with ``--no-index`` pip can satisfy that only from the torch
it sees through the layered environment's base, so an install that succeeds shows the layering works.
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from pathlib import Path
from typing import Iterable, Mapping, Optional

NAME = "tinyckpt"

# Each release's tinyckpt/__init__.py is put together from the parts below (plain text, never formatted, so
# its braces stay as they are); "@VERSION@" becomes the release's version. torch is imported where a save or a
# load needs it, so that asking a release its version costs no torch import.

_IMPORTS = '''
__version__ = "@VERSION@"

import os
import re
from typing import Optional


def _fsync(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _steps(ckpt_dir) -> dict:
    """Step -> file name of every step_<N>.pt in `ckpt_dir` (a save's temporary file does not match)."""
    found = {}
    for name in os.listdir(ckpt_dir) if os.path.isdir(ckpt_dir) else ():
        match = re.fullmatch(r"step_(\\d+)\\.pt", name)
        if match:
            found[int(match.group(1))] = name
    return found
'''

#: Format 1: the whole state under "state", written atomically (a temporary file, fsync, os.replace, fsync of
#: the directory).
_FORMAT_1 = '''

def save(path, state: dict) -> None:
    """Write `state` to `path` atomically."""
    import torch

    path = os.fspath(path)
    tmp = f"{path}.tmp"
    torch.save({"format": 1, "state": state}, tmp)
    _fsync(tmp)
    os.replace(tmp, path)
    _fsync(os.path.dirname(os.path.abspath(path)))


def load(path) -> dict:
    import torch

    return torch.load(path, weights_only=False)["state"]
'''

#: Format 2: the model apart from the rest. The loader reads format 2 only and never looks at "format".
_FORMAT_2 = '''

def save(path, state: dict) -> None:
    """Write `state` to `path` atomically, the model apart from the rest."""
    import torch

    path = os.fspath(path)
    tmp = f"{path}.tmp"
    torch.save({"format": 2, "model": state["model"], "extra": {k: v for k, v in state.items() if k != "model"}},
               tmp)
    _fsync(tmp)
    os.replace(tmp, path)
    _fsync(os.path.dirname(os.path.abspath(path)))


def load(path) -> dict:
    import torch

    ckpt = torch.load(path, weights_only=False)
    old = ckpt.get("state", {})  # 1.x kept everything here: its model and step are carried over, nothing else
    state = dict(ckpt.get("extra", {"step": old["step"]} if "step" in old else {}))
    model = ckpt.get("model", old.get("model"))
    if model is not None:
        state["model"] = model
    return state
'''

_LATEST_BY_STEP = '''

def latest(ckpt_dir) -> Optional[str]:
    """The checkpoint of the highest step in `ckpt_dir`, None if there is none."""
    found = _steps(ckpt_dir)
    return os.path.join(ckpt_dir, found[max(found)]) if found else None
'''

_LATEST_BY_NAME = '''

def latest(ckpt_dir) -> Optional[str]:
    """The checkpoint whose file name sorts last in `ckpt_dir`, None if there is none."""
    names = sorted(_steps(ckpt_dir).values())
    return os.path.join(ckpt_dir, names[-1]) if names else None
'''

_V1 = '"""tinyckpt @VERSION@: checkpoints in format 1, resumed from the highest step (a good release)."""\n' \
    + _IMPORTS + _FORMAT_1 + _LATEST_BY_STEP

#: 2.0.0 changed the format and half-migrated the old one: on a format-1 file (``{"format": 1, "state": ...}``)
#: `load` carries over the model and the step, which its migration covered, and nothing else: the optimizer
#: is dropped without a word, a partial load. A script that restores the optimizer only if one was saved (as
#: tiny_upgrade.py does, as scripts that load weights-only checkpoints too do) trains on with a fresh one.
_V2 = '''"""tinyckpt @VERSION@: checkpoints in format 2, the model apart from the rest.

The loader reads format 2, and of a format-1 file (1.x's) only the model and the step: the rest of it (the
optimizer) is left out without an error, a partial load.
"""
''' + _IMPORTS + _FORMAT_2 + _LATEST_BY_STEP

#: 2.1.0 went back to format 1 and rewrote `latest` to sort the file names as strings, the mistake accelerate
#: 0.16 made with its checkpoint_<N> folders: "step_8.pt" sorts after "step_10.pt", so once a run has saved
#: past step 9 a resume takes an older save and replays steps it already did. Right while steps stay below 10.
_V21 = '''"""tinyckpt @VERSION@: format 1 again; `latest` sorts the file names as strings.

With step_8.pt and step_10.pt present, `latest` returns step_8.pt ("step_8.pt" > "step_10.pt"): a resume
from an older save, which replays steps already done. Invisible until a run has saved past step 9.
"""
''' + _IMPORTS + _FORMAT_1 + _LATEST_BY_NAME

#: 3.0.0 is the right way to break a format: format 3 is format 1 with a check, and the loader refuses any
#: other format, naming it, on every rank that loads.
_V3 = '''"""tinyckpt @VERSION@: format 3; a checkpoint of another format is refused, naming it."""
''' + _IMPORTS + _FORMAT_1.replace('{"format": 1, "state": state}', '{"format": 3, "state": state}').replace(
    '    return torch.load(path, weights_only=False)["state"]',
    '    ckpt = torch.load(path, weights_only=False)\n'
    '    if ckpt.get("format") != 3:\n'
    '        raise ValueError(f"{path}: tinyckpt format {ckpt.get(\'format\')} is not supported by tinyckpt "\n'
    '                         f"{__version__} (format 3): load it with tinyckpt<3 and save it again")\n'
    '    return ckpt["state"]') + _LATEST_BY_STEP

#: Version -> the source of tinyckpt/__init__.py in that release.
RELEASES: dict[str, str] = {
    "1.0.0": _V1, "1.1.0": _V1, "1.2.0": _V1, "2.0.0": _V2, "2.1.0": _V21, "3.0.0": _V3,
}

#: Good releases: a checkpoint one writes, another resumes bitwise.
GOOD = ("1.0.0", "1.1.0", "1.2.0")

_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can hold: the same bytes on every run


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_wheel(dest: Path, name: str, version: str, files: Mapping[str, str],
                requires: Iterable[str] = (), summary: str = "a tiny test package") -> Path:
    """A pure-Python wheel of `name` `version` holding `files` (path in the wheel -> text) in `dest`.

    `requires` become Requires-Dist lines. The wheel is what pip checks: METADATA, WHEEL (purelib, py3-none-any)
    and a RECORD that lists every file with its sha256 and size.
    """
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {summary}\n",
                        "Requires-Python: >=3.8\n", *(f"Requires-Dist: {r}\n" for r in requires)])
    wheel = "Wheel-Version: 1.0\nGenerator: tests.tinypkgs\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    contents = {**{path: text.encode() for path, text in files.items()},
                f"{info}/METADATA": metadata.encode(), f"{info}/WHEEL": wheel.encode()}
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in contents.items())
    contents[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{dist}-{version}-py3-none-any.whl"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in contents.items():
            entry = zipfile.ZipInfo(member, date_time=_DATE)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, data)
    path.write_bytes(buffer.getvalue())
    return path


def tinyckpt_wheel(dest: Path, version: str) -> Path:
    """The wheel of one tinyckpt release in `dest`."""
    if version not in RELEASES:
        raise ValueError(f"tinyckpt has no release {version!r}; it has {', '.join(RELEASES)}")
    source = RELEASES[version].replace("@VERSION@", version)
    return write_wheel(dest, NAME, version, {f"{NAME}/__init__.py": source}, requires=["torch"],
                       summary=f"tinyckpt {version}: checkpoints for tests of releases")


def build(dest: Path, versions: Optional[Iterable[str]] = None) -> Path:
    """Wheels of the tinyckpt `versions` (all releases by default) in `dest`, for ``--find-links dest
    --no-index``; returns `dest`."""
    for version in RELEASES if versions is None else versions:
        tinyckpt_wheel(dest, version)
    return dest
