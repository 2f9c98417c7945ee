"""How a name given in a file or on the command line picks rows and scenarios.

A name is matched as itself first, then as an fnmatch pattern (`dcp*`,
`deepspeed_zero?`). A row on an axis is spelled with brackets
(`dcp[bf16]`, `dcp_s3connector[s3]`), and so may a script row's command be;
read as a pattern only, brackets are a set of characters, and such a name
would never match the row it names.
"""

from __future__ import annotations

import fnmatch


def named(name: str, pattern: str) -> bool:
    """`name` is `pattern` itself, or matches it as an fnmatch pattern."""
    return name == pattern or fnmatch.fnmatchcase(name, pattern)
