"""The report of a verification or exploration: the table a person reads when a case fails."""

from __future__ import annotations

import dataclasses
import platform
import re
from pathlib import Path
from typing import Any, Iterable, Optional

from ckpt_harness import phase
from ckpt_harness.inject.faults import BLOCKING, OBJECT_OPS
from ckpt_harness.oracle import findings as _findings
from ckpt_harness.oracle.findings import Finding
from ckpt_harness.verdict import EXPLORE_COLUMNS, CaseResult, Verdict, fold


#: Distributions whose versions a matrix is only valid for.
VERSIONED = ("torch", "deepspeed", "transformers", "accelerate", "safetensors", "torchdata", "numpy")


@dataclasses.dataclass
class Report:
    job: str
    world_size: int
    results: list[CaseResult]
    elapsed: float = 0.0
    #: The command that made it ("verify", "explore"): the title, and which table.
    kind: str = "verify"
    note: str = ""
    #: Every setting of the run's config, defaults included: what the JSON report records.
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: What the reader must know beyond the verdicts (e.g. writes the probes could not see).
    warnings: tuple[str, ...] = ()
    #: What `job` is: "job", "script" (`Target.noun`).
    noun: str = "job"
    #: A scenario run as one shard of its cases: which, every case it planned,
    #: and its result as matrix.json keeps one (what `scenario --merge` reads).
    shard: Optional[dict[str, Any]] = None

    @property
    def ok(self) -> bool:
        return all(r.verdict.ok for r in self.results)

    @property
    def verdict(self) -> Verdict:
        return fold(r.verdict for r in self.results)

    def failures(self) -> list[CaseResult]:
        """Every result that is not a pass (or n/a)."""
        return [r for r in self.results if not r.verdict.ok]

    def findings(self) -> list[Finding]:
        """The failures grouped by the mistake they share (`oracle.findings`)."""
        return _findings.group(self.results, self.noun)

    def table(self) -> str:
        storage = self.settings.get("storage", "local")  # where the checkpoints went, when not a directory
        title = (f"ckpt_harness {self.kind}: {self.noun} {self.job}, world size {self.world_size}"
                 f"{'' if storage == 'local' else f', storage {storage}'}, {self.elapsed:.1f}s")
        if self.note:
            title += f" ({self.note})"
        if self.kind == "explore" and all(r.cells for r in self.results):
            header = (*EXPLORE_COLUMNS, "property", "verdict")
            rows = [(*r.cells, r.check, r.verdict.value.upper()) for r in self.results]
            counts = {v: sum(r.verdict is v for r in self.results) for v in Verdict}
            tally = ", ".join(f"{n} {v.value}" for v, n in counts.items() if n)
            return (f"{title}\n{_format_table(header, rows, free_last=False)}\n"
                    f"{len(rows)} cases: {tally}{self._warned()}")
        header = ("case", "check", "verdict", "detail")
        rows = [(r.case, r.check, r.verdict.value.upper(), r.summary) for r in self.results]
        return title + "\n" + _format_table(header, rows) + self._warned()

    def _warned(self) -> str:
        return "".join(f"\nwarning: {w}" for w in self.warnings)

    def explain(self, every: bool = False) -> str:
        """The table, then the non-passing cases with their repro lines: an
        exploration's (or a scenario's of fault cases) as findings
        (`findings`), each once with its dependency, its cases counted, one
        example in full and the usual fix; with `every`, or for a
        verification, every one in full."""
        parts = [self.table()]
        if (self.kind == "explore" or any(r.site is not None for r in self.results)) and not every:
            found = self.findings()
            hinted: set[str] = set()
            for i, finding in enumerate(found, 1):
                parts.append(explain_finding(finding, f"finding {i} of {len(found)}", hint=finding.check not in hinted))
                hinted.add(finding.check)
            return "\n\n".join(parts)
        first_with: dict[str, CaseResult] = {}  # details -> the failure that showed them first
        for r in self.failures():
            seen = first_with.setdefault(r.details, r) if r.details else r
            if seen is not r:
                r = dataclasses.replace(r, details=f"(the same differences as {seen.case} / {seen.check} above)")
            parts.append(r.explain())
        return "\n\n".join(parts)


    def with_timelines(self, directory: Path) -> "Report":
        """This report, its cases' timelines written into `directory` (`records.timeline.write_all`)."""
        from ckpt_harness.records.timeline import write_all

        return dataclasses.replace(self, results=write_all(self.results, directory))

    def assert_ok(self) -> None:
        """Fail the calling test with the verdict table if any case did not pass."""
        if not self.ok:
            raise AssertionError(self.explain())

    def __str__(self) -> str:
        return self.table()

    def to_json(self) -> dict[str, Any]:
        """The report for machines (`--json PATH`; schema in docs/ci.md, "Output for CI").

        The envelope (kind, verdict, world_size, settings, elapsed_seconds,
        versions) is the one `matrix.json` has too, so one reader takes both.
        """
        return {
            "kind": self.kind,
            "verdict": self.verdict.value,
            "job": self.job,
            "world_size": self.world_size,
            "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in self.settings.items()},
            "elapsed_seconds": round(self.elapsed, 1),
            "versions": versions(),
            "note": self.note,
            "warnings": list(self.warnings),
            "cases": [
                {"case": r.case, "check": r.check, "verdict": r.verdict.value, "summary": r.summary,
                 "details": r.details, "repro": r.repro, "shares_resume_with": r.shares,
                 "timings": r.timings.to_json() if r.timings is not None else None,
                 "timeline": r.timeline_file, "differences": [d.to_json() for d in r.differences],
                 "outcome": r.outcome,
                 "also": [{"check": a.check, "verdict": a.verdict.value, "summary": a.summary} for a in r.also],
                 **({"row": dict(zip(EXPLORE_COLUMNS, r.cells))} if r.cells else {}),
                 **({"note": r.note} if r.note else {})}
                for r in self.results
            ],
            "findings": [f.to_json() for f in self.findings()],
            **({"shard": self.shard} if self.shard is not None else {}),
        }


#: What usually fixes a failure of each property: the hint under a group of failing cases.
USUAL_FIX = {
    "atomic": "write the save into a staging directory and publish it with one rename once every rank's files are "
              "in it (or a pointer written last), and resume only from what was published",
    "durable": "fsync every file, then the directory that holds it (and the renamed one's parent), before the save "
               "returns",
    "preserving": "never delete or overwrite the previous checkpoint before the new one is published",
    "live": "hand a rank's error to every rank before the next collective (all-gather each rank's outcome), or "
            "launch under torchrun, whose agent ends the group when a worker exits (--launcher elastic); a rank "
            "must not catch its error and go on while its peers wait",
    "detecting": "check each file against what the save recorded (sizes, checksums) before loading it, and refuse "
                 "on every rank, naming the file",
    "faithful": "save and restore all of the state: optimizer, scheduler, per-rank RNG, data position and step",
    "skew-safe": "order what ranks do to shared files with a collective (rank 0 deletes, then a barrier), never "
                 "by timing",
    "safe-loading": "load with torch.load(weights_only=True) or safetensors",
    "upgrade-safe": "keep a loader for every format a released version wrote (a format version in the checkpoint, "
                    "read first), and refuse on every rank, naming it, a format it cannot read; never fill in "
                    "what it did not find",
    "snapshot-consistent": "copy the state before the save returns and hand the writer the copy, never the live "
                           "tensors (DCP's default stager, Lightning's clone of every tensor), or wait for the "
                           "writer before training changes them",
}
#: The usual fix when the fault hit a save's background writer (its phase `bg_save k`): there the
#: race is between the writer and the main thread, which a collective between ranks does not order.
WRITER_FIX = {
    "atomic": "publish a background save (its rename into place, the pointer, the rotation) from its writer once "
              "its last file landed, or on the main thread only after waiting for the writer; never as the save "
              "hands the write over",
    "skew-safe": "make nothing a resume reads depend on when the writer runs: publish from the writer once it "
                 "landed, or after waiting for it, and have a stop wait for it",
    "preserving": "keep the writer's outcome (its future, or its exception as Lightning's AsyncCheckpointIO does), "
                  "raise it on the main thread, and never publish a save whose writer failed",
    "live": "wait for a writer through what it ends either way (its future, a thread's join, an event set in a "
            "finally), with a timeout, and raise on the main thread what it raised",
}


#: The usual fix when the fault blocked a rank for good (`faults.BLOCKING`: hang, sigstop, gil): no error
#: reaches anyone and no worker exits, so only a timeout on what its peers wait in ends them.
BLOCKED_FIX = {
    "live": "give the waits of a save a timeout the job can afford (init_process_group(timeout=...) for its "
            "collectives, a store wait with a timeout), so that the peers of a rank that hangs raise and the launcher "
            "ends the group; monitored_barrier is not enough, as it times out on rank 0 only",
}


#: The usual fix when a preemption notice (the preempt fault) broke the save: what then cut the
#: checkpoint is most often the job's own SIGTERM handler, writing until the grace ran out.
NOTICE_FIX = {
    "atomic": "write a SIGTERM handler's emergency checkpoint as any save: to a temporary name, fsynced, renamed "
              "into place once whole (never over the file of a complete save); keep it within the scheduler's "
              "grace, or save nothing and resume from the last complete checkpoint",
}


#: The usual fix when the fault hit a request to a bucket (`faults.OBJECT_OPS`): there a rename is no
#: publication, it is a copy and a delete of every object, and each can be cut between two.
BUCKET_FIX = {
    "atomic": "on a bucket nothing renames atomically (a move is a copy, then a delete, of every object): put the "
              "save's objects under their final names and publish it with one object put last (a pointer, a "
              "marker) once every rank's objects are in, and resume only from what that object names",
    "preserving": "never delete the previous checkpoint's objects before the new save's last object (its pointer) "
                  "is in the bucket",
}
_ON_A_BUCKET = re.compile(r"/(?:{})\(".format("|".join(OBJECT_OPS)))


def usual_fix(check: str, cases: Iterable[str]) -> Optional[str]:
    """The hint under a group of failing `cases` of `check`: the writer's when
    one of them broke a background writer (the group's cause is then the
    writer's race with the main thread, whichever case the group shows first),
    the notice's when a preemption notice broke it, the bucket's when a
    request to a bucket did ("crash@r0:save4/copy(...)"), the blocked one's
    when the fault blocked a rank for good ("hang@r0:save4/...")."""
    cases = list(cases)
    in_writer = any(f":{phase.BACKGROUND}" in case for case in cases)  # "crash@r0:bg_save4/rename(...)"
    noticed = any(case.startswith("preempt@") or "+preempt@" in case for case in cases)
    blocked = any(_BLOCKED.search(case) for case in cases)
    on_bucket = any(_ON_A_BUCKET.search(case) for case in cases)
    return ((NOTICE_FIX.get(check) if noticed else None) or (WRITER_FIX.get(check) if in_writer else None)
            or (BLOCKED_FIX.get(check) if blocked else None) or (BUCKET_FIX.get(check) if on_bucket else None)
            or USUAL_FIX.get(check))


#: A case whose plan blocks a rank for good ("hang@r0:save4/...", "crash@r1:...+sigstop@r0:...").
_BLOCKED = re.compile(r"(?:^|\+)(?:{})@".format("|".join(BLOCKING)))


def explain_finding(finding: Finding, title: str, hint: bool = True) -> str:
    """A finding as the terminal shows it: what it is and how many cases, its
    dependency, one case in full, the others by name, the usual fix (`hint`:
    once per property is enough)."""
    first, n = finding.cases[0], len(finding.cases)
    worst = f" ({finding.severity})" if finding.severity else ""
    also = "; ".join(f"{check} {verdict.upper()} ×{k}" for check, verdict, k in finding.secondary())
    lines = [f"=== {title}: {finding.check} {finding.verdict.value.upper()}{worst}, {n} case{'s' * (n > 1)}"
             + (f" (also {also})" if also else ""),
             finding.headline, first.explain()]
    if n > 1:
        others = [c.case for c in finding.cases[1:]]
        shown = ", ".join(others[:8]) + (f" and {len(others) - 8} more" if len(others) > 8 else "")
        lines.append(f"its other cases: {shown} (every one in full: --all-failures)")
    fix = usual_fix(finding.check, (c.case for c in finding.cases))
    if hint and fix and finding.verdict is Verdict.FAIL:
        lines.append(f"usual fix: {fix}")
    return "\n".join(lines)


def _format_table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]], free_last: bool = True) -> str:
    rows = [tuple(one_line(c, 160 if i == len(row) - 1 else 48) for i, c in enumerate(row)) for row in rows]
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]
    if free_last:
        widths[-1] = len(header[-1])  # the last column runs free
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(tuple("-" * w for w in widths)), *(line(r) for r in rows)])


def one_line(text: str, limit: int = 160) -> str:
    """`text` on one line, at most `limit` characters (the table's cells, a summary's reasons)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def versions() -> dict[str, str]:
    """The versions a report or a matrix is only valid for."""
    from importlib import metadata

    found = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found
