"""`ckpt-harness matrix`: the catalogue against jobs, as a compatibility matrix.

Rows are jobs, columns are properties; a cell folds the verdicts of every
scenario that judges that property for that job. Findings against real
frameworks are results: the matrix is complete when every cell is judged
(pass, fail or n/a), whatever the verdicts.

The unit of work is one scenario against one row (a `Task`); the matrix's
`plan` lists them all. A matrix may hold only some of them: a shard's
(`--shard K/N`, `shards.assign`), or those that finished before SIGINT or
SIGTERM stopped the run (`MatrixInterrupted`). Its matrix.json keeps what it
takes to finish it (the rows, the catalogue, the settings), so `--resume`
runs the missing ones and `--merge` puts shards together (`files.from_json`,
`merge`); a cell whose scenarios did not all run is not judged ("not run").

A module per concern, each importing the model and none importing back:
model.py (`Matrix`, its cells), markdown.py (matrix.md and the terminal's
summary), files.py (matrix.json and the other files of a matrix's --out),
merging.py (shards put together) and run.py (running it, resuming it).
"""

from ckpt_harness.catalogue.matrix.model import NOT_RUN, Cell, Matrix, cell
from ckpt_harness.catalogue.matrix.files import TIMELINES, load, read_costs, read_json
from ckpt_harness.catalogue.matrix.merging import merge
from ckpt_harness.catalogue.matrix.run import (ABANDON_WAIT, SCENARIOS_AT_ONCE, MatrixInterrupted, matrix_rows,
                                               resume, run_matrix)

__all__ = [
    "ABANDON_WAIT", "NOT_RUN", "SCENARIOS_AT_ONCE", "TIMELINES", "Cell", "Matrix", "MatrixInterrupted", "cell", "load",
    "matrix_rows", "merge", "read_costs", "read_json", "resume", "run_matrix",
]
