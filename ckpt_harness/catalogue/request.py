"""What `ckpt-harness matrix` is asked, carried out: a matrix run, resumed or
merged, gated by a baseline and written with its timelines.

The CLI parses its options into a `MatrixRequest` and prints what comes
back; which rows a matrix has when none is given, which catalogue a
baseline is read against, where a resumed or merged matrix's timelines go:
all of that is decided here, so that any surface that asks for a matrix
gets the same one.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from ckpt_harness.catalogue import matrix as matrices
from ckpt_harness.catalogue.matrix import files as matrix_files
from ckpt_harness.catalogue.expectations import Expectations, load as load_baseline
from ckpt_harness.catalogue.scenario import Scenario, default_jobs, select
from ckpt_harness.catalogue.scenario_files import builtin_catalogue, catalogue as catalogue_of
from ckpt_harness.catalogue.shards import Shard
from ckpt_harness.config import SETTINGS
from ckpt_harness.errors import UsageError
from ckpt_harness.pipeline.workdir import check_writable

#: Where a matrix goes when no --out is given (a resumed one: where it was).
DEFAULT_OUT = Path("ckpt-matrix")


@dataclasses.dataclass(frozen=True)
class MatrixRequest:
    """A matrix to make: new (`rows` x `scenarios`), the rest of a stopped
    one (`resume`), or shards put together (`merge`)."""

    #: Each row's settings (`matrix.matrix_rows` makes them targets); none:
    #: a job row, with `job_settings`, for each job the scenarios apply to.
    rows: Sequence[Mapping[str, Any]] = ()
    job_settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: Scenario names or patterns (none: all) of the built-in catalogue, or of `files`.
    scenarios: Sequence[str] = ()
    files: Sequence[Path] = ()
    parallel: int = dataclasses.field(default_factory=lambda: SETTINGS["parallel"].default)
    shard: Optional[Shard] = None
    costs: Optional[Path] = None
    resume: Optional[Path] = None
    merge: Sequence[Path] = ()
    workdir: Optional[Path] = None
    out: Optional[Path] = None
    baseline: Optional[Path] = None
    #: Paths written once the matrix is done, refused before it starts if they cannot be.
    writes: Sequence[Path] = ()

    @property
    def destination(self) -> Path:
        return self.out or (matrix_dir(self.resume) if self.resume else DEFAULT_OUT)

    def check(self) -> Optional[Expectations]:
        """The baseline, read; UsageError for an output that cannot be written
        (nothing is run or created before that)."""
        baseline = load_baseline(self.baseline) if self.baseline else None
        check_writable(self.destination, directory=True)
        for path in self.writes:
            check_writable(path)
        return baseline

    def make(self, progress: Optional[Callable] = None) -> tuple[matrices.Matrix, list[Scenario]]:
        """The matrix, and the catalogue a baseline's entries are looked up in
        (the one it ran from and the matrix's own scenarios). A stop by
        SIGINT or SIGTERM raises `matrix.MatrixInterrupted` with what finished."""
        out = self.destination
        if self.merge:
            matrix = matrices.merge([(str(path), matrices.load(path)) for path in self.merge])
            gather_timelines([matrix_dir(path) for path in self.merge], out)
            return matrix, [*builtin_catalogue(), *matrix.scenarios]
        keep = self.workdir is not None
        if self.resume:
            previous = matrices.load(self.resume)
            gather_timelines([matrix_dir(self.resume)], out)
            matrix = matrices.resume(previous, workdir=self.workdir, keep=keep, progress=progress,
                                     source=str(self.resume))
            return matrix, [*builtin_catalogue(), *previous.scenarios]
        costs = matrices.read_costs(self.costs) if self.costs else None
        catalogue = catalogue_of(self.files)
        scenarios = select(catalogue, list(self.scenarios))
        rows = self.rows or [{"job": job, **self.job_settings} for job in default_jobs(scenarios)]
        targets, skipped = matrices.matrix_rows(rows)
        matrix = matrices.run_matrix(targets, scenarios, parallel=self.parallel, workdir=self.workdir, keep=keep,
                                     progress=progress, skipped=skipped, shard=self.shard, costs=costs)
        return matrix, catalogue


def finish(matrix: matrices.Matrix, out: Path, baseline: Optional[Expectations] = None,
           catalogue: Sequence[Scenario] = ()) -> tuple[matrices.Matrix, Path, Path]:
    """`matrix` gated on `baseline` (its entries looked up in `catalogue`) and
    written to `out` with its timelines: the matrix as written, and its
    Markdown and JSON files."""
    if baseline is not None:
        matrix.gating = baseline.gate(matrix.results, jobs=matrix.names, scenarios=[s.name for s in matrix.scenarios],
                                      catalogue=[s.name for s in catalogue])
    try:
        matrix = matrix_files.with_timelines(matrix, out)
        md, js = matrix_files.write(matrix, out)
    except OSError as exc:
        raise UsageError(f"cannot write the matrix to {out}: {exc.strerror or exc}") from None
    return matrix, md, js


def gather_timelines(sources: Sequence[Path], out: Path) -> None:
    """The timeline files of matrices being merged or resumed, into `out`'s
    (each names its row and scenario: the shards' folders do not overlap)."""
    for source in sources:
        if (source / matrices.TIMELINES).is_dir() and source.resolve() != out.resolve():
            try:
                shutil.copytree(source / matrices.TIMELINES, out / matrices.TIMELINES, dirs_exist_ok=True)
            except OSError as exc:
                raise UsageError(f"cannot copy the timelines of {source} into {out}: {exc}") from None


def matrix_dir(path: Path) -> Path:
    """The directory of a matrix.json given as itself or its directory."""
    return path.parent if path.suffix == ".json" else path
