"""Reading trace files back: what each rank did, and where it stopped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional


def read_events(path: Path) -> list[dict]:
    """Every complete event of a rank's trace (a torn last line is dropped)."""
    events = []
    try:
        text = Path(path).read_text()
    except OSError:
        return events
    for line in text.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            break
    return events


def last_phase(events: list[dict]) -> Optional[str]:
    return events[-1]["phase"] if events else None


def pending_collective(events: list[dict]) -> Optional[dict]:
    """The collective this rank entered and never left, if any."""
    open_calls: dict[int, dict] = {}
    for event in events:
        if event["kind"] != "collective":
            continue
        if event["at"] == "enter":
            open_calls[event["n"]] = event
        else:
            open_calls.pop(event["n"], None)
    return max(open_calls.values(), key=lambda e: e["n"]) if open_calls else None


def where(events: list[dict]) -> str:
    """One line: where a rank was when it stopped, for hang and crash reports."""
    hang = next((e for e in events if e["kind"] == "fault" and e.get("fault") == "hang"), None)
    if hang is not None:  # an injected hang never returns
        return f"blocked by the injected hang before operation #{hang['index']} of {hang['phase']}"
    pending = pending_collective(events)
    if pending is not None:
        return (
            f"waiting in {pending['op']} #{pending['n']} called from {pending['caller']}"
            f" during {pending['phase']}"
        )
    phase = last_phase(events)
    return f"in {phase}, not in a collective" if phase else "before the job started"
