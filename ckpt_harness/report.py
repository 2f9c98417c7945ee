"""Verdicts and the table a person reads when a case fails."""

from __future__ import annotations

import dataclasses
import enum
from typing import Iterable, Optional


class Verdict(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    #: The harness could not decide (e.g. the job is not deterministic).
    UNKNOWN = "unknown"


@dataclasses.dataclass(frozen=True)
class CaseResult:
    case: str
    check: str
    verdict: Verdict
    #: One line for the table.
    summary: str = ""
    #: Everything needed to understand a failure: diffs, stacks, log tails.
    details: str = ""
    repro: Optional[str] = None


@dataclasses.dataclass
class Report:
    job: str
    world_size: int
    results: list[CaseResult]
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return all(r.verdict is Verdict.PASS for r in self.results)

    def failures(self) -> list[CaseResult]:
        return [r for r in self.results if r.verdict is not Verdict.PASS]

    def table(self) -> str:
        header = ("case", "check", "verdict", "detail")
        rows = [(r.case, r.check, r.verdict.value.upper(), r.summary) for r in self.results]
        title = f"ckpt_harness: job {self.job}, world size {self.world_size}, {self.elapsed:.1f}s"
        return title + "\n" + _format_table(header, rows)

    def explain(self) -> str:
        """The table, then every non-passing case in full with its repro line."""
        parts = [self.table()]
        for r in self.failures():
            block = [f"--- {r.case} / {r.check}: {r.verdict.value.upper()} — {r.summary}"]
            if r.details:
                block.append(r.details.rstrip())
            if r.repro:
                block.append(f"repro: {r.repro}")
            parts.append("\n".join(block))
        return "\n\n".join(parts)

    def assert_ok(self) -> None:
        """Fail the calling test with the verdict table if any case did not pass."""
        if not self.ok:
            raise AssertionError(self.explain())

    def __str__(self) -> str:
        return self.table()


def _format_table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> str:
    rows = [tuple(_one_line(c) for c in row) for row in rows]
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]
    widths[-1] = len(header[-1])  # the last column runs free
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(tuple("-" * w for w in widths)), *(line(r) for r in rows)])


def _one_line(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
