"""What a Job rank and a script worker do alike, written once so that their
traces and ERROR records cannot drift apart: the oracle reads both the same.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import Any

from ckpt_harness.inject import probes
from ckpt_harness.launch.layout import PathLike, data_path, trace_path
from ckpt_harness.records import Kind, Recorder


def install_probes(run_dir: PathLike, rank: int, plan: Any, **options: Any) -> None:
    """Probe this process as `plan` (a `RunPlan` or a `ScriptPlan`) asks.

    File operations are probed only when someone reads them or a fault is
    armed at one: probing them costs a fault-free run its speed. Work the
    code under test hands to another thread is followed into a phase of its
    own (an async save's writer: `bg_save k`), for a Job's rank and a
    script's worker alike. `options` go to `probes.install` as they are.
    """
    probes.install(
        str(trace_path(run_dir, rank)), rank,
        ckpt_dir=plan.ckpt_dir if plan.trace_files or plan.faults else None, faults=plan.faults,
        data_log=str(data_path(run_dir, rank)) if plan.log_data else None, thread_phases=True,
        ckpt_url=plan.ckpt_url, **options,
    )


def write_error(recorder: Recorder, exc: BaseException) -> None:
    """The ERROR record of the exception that ended the rank's job, with the
    phase it was raised in: where the oracle says the job broke."""
    recorder.write(
        Kind.ERROR, phase=probes.current_phase(), type=f"{type(exc).__module__}.{type(exc).__qualname__}",
        message=str(exc), traceback="".join(traceback.format_exception(exc)),
    )


def entries(root: Path, url: str = "") -> list[str]:
    """Every file and directory under `root`, relative, as the trace names them;
    under `url` instead when it is one (a bucket: its objects and their prefixes)."""
    if "://" in url:
        import fsspec

        fs, top = fsspec.url_to_fs(url, use_listings_cache=False)
        found = fs.find(top, withdirs=True)
        return sorted(f[len(top) + 1:] for f in found if f.startswith(top + "/"))
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        out += [(rel / name).as_posix() for name in dirnames + filenames]
    return sorted(out)
