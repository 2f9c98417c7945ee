"""A script's own writes into its checkpoint directory: saves made through no entry point the harness wraps.

Most scripts save the way their authors learned to, not through an entry
point: ``with open(tmp, "wb") as f: torch.save(state, f)`` then
``os.replace(tmp, final)``; a `BytesIO` whose bytes go out through
``os.write``; ``pickle.dump``, ``json.dump``, ``numpy.savez``, a
``tarfile``, a file staged elsewhere and ``shutil.copyfile``'d in. What
they all share is the effect: between two training steps, the script
writes files under its checkpoint directory. So that is what a save is
here (`saves.Saves.wrote`): the first write the script's own code makes
there (a file opened for writing, by ``open``/``io.open``/``os.open``, or
a file renamed to a name there), on the main thread, outside a save in
progress, begins one; it lasts as any save's routine does, until training
goes on.

"The script's own code" is the innermost frame that is neither the
standard library nor the harness: the script, or a package of the
user's that is not installed. A framework writing its logs under the
directory (Lightning's CSV and TensorBoard loggers, when the script roots
them there) is no save; its saves are seen at its entry points.

What such a save saved is what the script handed the serializers on the
way (`torch.save` into a file object or a buffer, ``pickle.dump``,
``json.dump``, ``numpy.save``/``savez``), since its last training step:
those called before the first byte reached the directory (the `BytesIO`
filled first, the file staged in a temporary directory first) are held
(`Saves.stage`) and join the save that begins. A save handed nothing (raw
bytes) is known by the content of the files it left (`saves.written_state`).

The script's own writes elsewhere are counted by directory (`Saves.elsewhere`):
a run that made no save is told where it wrote instead.

Observing changes nothing the script sees: every wrapper calls the
original with the same arguments and returns what it returned.
"""

from __future__ import annotations

import builtins
import functools
import io
import os
import sys
from typing import Any, Callable

from ckpt_harness.inject import imports

_WRITE_MODES = frozenset("wax+")


def install(saves: Any) -> None:
    """Watch the main thread's writes for `saves` (`saves.Saves`): ``open``
    (so ``Path.open``/``write_bytes``/``write_text``, ``numpy``, ``zipfile``,
    ``shutil.copyfile``), ``os.open``, ``os.rename``/``os.replace`` (so
    ``Path.rename``, ``shutil.move``), and ``tarfile``'s own binding of
    ``open``. Wraps what is there now: the file probes, if installed, sit
    inside, so a write that begins a save is traced in the save's phase."""
    original_open = io.open

    @functools.wraps(original_open)
    def watched_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if not _WRITE_MODES.isdisjoint(mode) and not isinstance(file, int):
            saves.wrote(file, None, sys._getframe(1))
        return original_open(file, mode, *args, **kwargs)

    builtins.open = io.open = watched_open
    imports.when_imported("tarfile", lambda tarfile: setattr(tarfile, "bltn_open", watched_open))

    original_os_open = os.open

    @functools.wraps(original_os_open)
    def watched_os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR) and kwargs.get("dir_fd") is None:
            saves.wrote(path, None, sys._getframe(1))
        return original_os_open(path, flags, *args, **kwargs)

    os.open = watched_os_open

    def renamer(original: Callable) -> Callable:
        @functools.wraps(original)
        def watched(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            if not kwargs:  # src_dir_fd/dst_dir_fd: relative to a descriptor, not a path here
                saves.wrote(dst, src, sys._getframe(1))
            return original(src, dst, *args, **kwargs)
        return watched

    os.rename, os.replace = renamer(os.rename), renamer(os.replace)
