"""Code that runs inside ranks and torchrun workers, never in the harness.

It imports nothing from the controller (pipelines, catalogue, surfaces), as
pytest-xdist's `remote.py` imports nothing from its controller: only
`records`, `inject`, `launch`, `job` and the foundations below them.
"""
