"""The process one conversion runs in (`conversions.run.run_conversion` starts it):
read the source if asked, convert, read back, and write what was found to
the result file."""

from __future__ import annotations

import pickle
import sys
import traceback
from pathlib import Path
from typing import Optional

from ckpt_harness.conversions.run import HARNESS_EXIT, Converted


def main(argv: list[str]) -> int:
    import faulthandler

    from ckpt_harness import conversions

    name, source, out, result, deadline, truth = argv
    faulthandler.dump_traceback_later(max(1.0, float(deadline) - 1.0), exit=False)
    conversion = conversions.get(name)
    found = _converted(conversion, Path(source), Path(out), truth == "source")
    faulthandler.cancel_dump_traceback_later()
    partial = Path(result + ".partial")
    with open(partial, "wb") as f:
        pickle.dump(found, f)
    partial.rename(result)
    return 0


def _converted(conversion, source: Path, out: Path, truth: bool) -> Converted:
    from ckpt_harness import conversions, state

    read: Optional[state.Record] = None
    if truth:
        try:
            read = state.capture(conversion.read_source(source))
        except conversions.NoReader as exc:
            return Converted(no_reader=str(exc))
        except Exception as exc:  # the save itself: not the conversion's doing
            return Converted(error=f"save {source.name} does not load as a {conversion.reads} checkpoint (is that "
                                   f"the script's --checkpoint-layout?): {type(exc).__name__}: {exc}",
                             details=traceback.format_exc())
    try:
        conversion.convert(source, out)
    except ImportError as exc:  # not a refusal: the conversion never ran
        return Converted(error=f"{type(exc).__name__}: {exc}", details=traceback.format_exc(), source=read)
    except Exception as exc:  # a refusal, in its words
        return Converted(refused=f"{type(exc).__name__}: {exc}", details=traceback.format_exc(), source=read)
    try:
        return Converted(state=state.capture(conversion.read(out)), source=read)
    except conversions.NoReader as exc:
        return Converted(no_reader=str(exc), source=read)
    except Exception as exc:
        return Converted(unreadable=f"{type(exc).__name__}: {exc}", details=traceback.format_exc(), source=read)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception:  # outside the conversion's convert() and read(): ours
        traceback.print_exc()
        sys.exit(HARNESS_EXIT)
