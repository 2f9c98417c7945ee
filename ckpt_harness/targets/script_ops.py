"""What a script's frameworks build on first use, built before its first deadline.

A Job names the ops its framework compiles on first use (`Job.jit_ops`), and
the harness builds them before its first run (`ckpt_harness.jit`). A script
names nothing, so the file torchrun runs (or the module of ``-m``) is read
for what it imports: for each framework there that builds an op in its
workers, the op is built the same way, in a process of its own with a
progress line, where those workers will look for it. Built inside the golden
run instead, DeepSpeed's CPU comm op took that run from 18 s to 127 s on the
2-core machine (issue 23), and a build cut by a deadline leaves a lock that
every later run waits on.

Only what the script imports itself is seen: a framework it reaches through
another module (a Trainer handed a DeepSpeed config imports DeepSpeed
lazily) builds in the golden run as before, and the first run's deadline
must leave room for it.

Torch-free: it runs in the harness before each run of a script, as a Job's
`jit_ops` do (reading one file; `jit.ensure_built` checks each op once per
process, and torch is asked where it builds once).
"""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path
from typing import Callable, Mapping, Optional

from ckpt_harness import jit
from ckpt_harness.jit import JitOp

#: A script that puts DeepSpeed on its CPU accelerator itself (``os.environ.setdefault("DS_ACCELERATOR",
#: "cpu")`` or ``os.environ["DS_ACCELERATOR"] = "cpu"``).
_DS_CPU = re.compile(r"""DS_ACCELERATOR['"]\s*(?:,|\]\s*=)\s*['"]cpu['"]""")


#: Held while parsing: CPython 3.11 keeps the AST constructor's recursion
#: depth per interpreter, not per thread, so two threads parsing at once (a
#: matrix's scenarios and an exploration's cases run side by side, each
#: reading its script before a run) can fail with "SystemError: AST
#: constructor recursion depth mismatch" (python/cpython#106905; seen once
#: in `ci/under_load.py`, a scenario ending in ERROR).
_PARSING = threading.Lock()


@functools.lru_cache(maxsize=32)
def imported(source: str) -> frozenset[str]:
    """The top-level packages `source` imports (absolute imports, anywhere in
    it); read once per source, though it is asked before every run."""
    try:
        with _PARSING:
            tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return frozenset(found)


def jit_ops(path: Optional[Path], env: Mapping[str, str]) -> tuple[JitOp, ...]:
    """The ops the frameworks the file at `path` imports build in workers
    given `env` (none when there is no file to read: a binary, a module not found)."""
    try:
        source = path.read_text() if path is not None else None
    except (OSError, UnicodeDecodeError):
        source = None
    if source is None:
        return ()
    return tuple(op for name in sorted(imported(source) & FRAMEWORKS.keys()) for op in FRAMEWORKS[name](source, env))


def build_dir(op: str, env: Mapping[str, str]) -> Path:
    """Where torch's cpp_extension builds the op named `op` (and looks for
    it) in a process given `env`: under TORCH_EXTENSIONS_DIR, or under a
    cache directory with a folder per Python and torch build, asked of torch
    in a process of its own (the layout changes between versions; the
    harness does not import torch)."""
    if env.get("TORCH_EXTENSIONS_DIR"):
        return Path(env["TORCH_EXTENSIONS_DIR"]) / op
    return _default_build_dir(op, env.get("XDG_CACHE_HOME", ""), env.get("HOME", ""))


@functools.lru_cache(maxsize=None)
def _default_build_dir(op: str, cache_home: str, home: str) -> Path:
    # torch makes the directory it names: the op's own, which its build makes anyway
    code = f"from torch.utils.cpp_extension import _get_build_directory as d; print(d({op!r}, False))"
    env = {k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"}
    env.update({"XDG_CACHE_HOME": cache_home} if cache_home else {}, HOME=home or env.get("HOME", ""))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    if out.returncode != 0 or not out.stdout.strip():
        raise OSError(f"torch could not say where it builds its extensions:\n{out.stderr[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def _deepspeed(source: str, env: Mapping[str, str]) -> tuple[JitOp, ...]:
    """DeepSpeed's CPU comm op: built with gcc at `init_distributed` by a
    process on DeepSpeed's CPU accelerator (DS_ACCELERATOR=cpu, in the
    environment or set by the script itself; elsewhere its own detection
    decides, and a GPU's NCCL needs no op: then the builder builds nothing)."""
    accelerator = env.get("DS_ACCELERATOR") or ("cpu" if _DS_CPU.search(source) else "")
    try:
        where = build_dir("deepspeed_shm_comm", env)
    except (OSError, subprocess.SubprocessError) as exc:  # set-up, not the script: it builds in its run, as before
        jit.say(f"not building DeepSpeed's CPU comm op before the first run ({exc}): the script's first run "
                "builds it, inside its deadline")
        return ()
    key = f"deepspeed {metadata.version('deepspeed')}, torch {metadata.version('torch')}, {sys.executable}"
    builder_env = {"TORCH_EXTENSIONS_DIR": str(where.parent)}
    if accelerator:
        builder_env["DS_ACCELERATOR"] = accelerator
    return (JitOp("DeepSpeed's CPU comm op", where,
                  "ckpt_harness.jobs.deepspeed_job:build_comm_op", key, env=builder_env),)


#: Top-level package a script imports -> the ops it builds in the script's
#: workers (given the script's source and the workers' environment).
FRAMEWORKS: Mapping[str, Callable[[str, Mapping[str, str]], tuple[JitOp, ...]]] = {"deepspeed": _deepspeed}
