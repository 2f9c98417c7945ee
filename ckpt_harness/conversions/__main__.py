"""The process one conversion runs in (`conversions.run.run_conversion` starts it):
convert, read back, and write what was found to the result file."""

from __future__ import annotations

import pickle
import sys
import traceback
from pathlib import Path

from ckpt_harness.conversions.run import HARNESS_EXIT, Converted


def main(argv: list[str]) -> int:
    import faulthandler

    from ckpt_harness import conversions, state

    name, source, out, result, deadline = argv
    faulthandler.dump_traceback_later(max(1.0, float(deadline) - 1.0), exit=False)
    conversion = conversions.get(name)
    try:
        conversion.convert(Path(source), Path(out))
    except ImportError as exc:  # not a refusal: the conversion never ran
        found = Converted(error=f"{type(exc).__name__}: {exc}", details=traceback.format_exc())
    except Exception as exc:  # a refusal, in its words
        found = Converted(refused=f"{type(exc).__name__}: {exc}", details=traceback.format_exc())
    else:
        try:
            found = Converted(state=state.capture(conversion.read(Path(out))))
        except conversions.NoReader as exc:
            found = Converted(no_reader=str(exc))
        except Exception as exc:
            found = Converted(unreadable=f"{type(exc).__name__}: {exc}", details=traceback.format_exc())
    faulthandler.cancel_dump_traceback_later()
    partial = Path(result + ".partial")
    with open(partial, "wb") as f:
        pickle.dump(found, f)
    partial.rename(result)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception:  # outside the conversion's convert() and read(): ours
        traceback.print_exc()
        sys.exit(HARNESS_EXIT)
