"""Code that runs inside ranks and torchrun workers, never in the harness.

It imports nothing from the controller (pipelines, catalogue, surfaces), as
pytest-xdist's `remote.py` imports nothing from its controller: only
`records`, `inject`, `launch`, `job` and the foundations below them; and
what those import at module level, transitively, holds no run reader
(`records.runs`), no case clock and nothing of `present/`
(tests/unit/test_layers.py follows the imports).
"""
