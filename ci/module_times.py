"""Seconds each test module took in all, from a `make test` run's JUnit XML: the `MEASURED` table of tests/conftest.py.

    make test PYTEST_ARGS=--junitxml=/tmp/junit.xml
    python ci/module_times.py /tmp/junit.xml

The suite hands modules out longest first; a module the table lacks goes
last, so a new module of long torchrun tests ends the run alone while the
other workers idle. Measure on the 2-core machine kind, the suite alone on
the box, and paste the printed table.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def module_times(path: str) -> dict[str, int]:
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        stem = next((part for part in module if part.startswith("test_")), None)
        if stem is not None:
            totals[stem] += float(case.get("time") or 0)
    return {stem: round(seconds) for stem, seconds in sorted(totals.items(), key=lambda kv: -kv[1])}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    times = module_times(argv[0])
    items = [f'"{stem}": {seconds}' for stem, seconds in times.items() if seconds >= 5]
    lines, line = [], "    "
    for item in items:
        if len(line) + len(item) + 2 > 116:
            lines.append(line.rstrip())
            line = "    "
        line += item + ", "
    lines.append(line.rstrip())
    print("MEASURED = {\n" + "\n".join(lines) + "\n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
