"""The package's architecture as tests: no import cycles, no upward imports, a rank side that knows no controller,
Job-vs-script decided in one place, and a small top level.

Why these rules: the harness is layered (foundations, launch, inject, rank side, config/targets, oracle,
pipelines, catalogue, surfaces; the architecture review of 2026-11, section 1), but only by habit. Before
this test nothing stopped a deferred import from closing an 11-module cycle, the mechanism layer
(`launch/worker.py`) from importing the recording policy, or one more `isinstance(config, ScriptConfig)`
from adding a place that decides Job vs script. Each of those now fails CI instead of waiting for a review.

1. Cycles: a module in a cycle cannot be read, tested or moved alone, and which module of the cycle is
   imported first decides whether a name exists yet.
2. Layers: a module may import its own layer and the ones below, never above. That keeps the layers of
   LAYERS real, and it is what keeps rule 1 true.
3. Rank side: rankside/ runs inside ranks and torchrun workers. Like pytest-xdist's remote.py, it imports
   nothing from the controller, so a rank does not load (or depend on) pipelines, checks or surfaces.
4. Job vs script: the thing under test is a Target, picked once in `targets/__init__.py` (as
   torch.distributed.elastic's start_processes picks a function or a binary). Every other module asks the
   target (its capabilities, its save steps, its repro arguments) instead of branching on its kind.
5. Top level: modules go into the folder of their layer, so the tree shows the layers.

How: `ast` only. No module of the package is imported (so no torch, and the test takes well under a
second): it reads every `ckpt_harness/**/*.py` and builds the import graph. Each edge src -> dst is labelled

* top:    an import at module level (class bodies and module-level `try` blocks included);
* func:   an import inside a function (deferred: it runs when the function is called);
* typing: an import under `if TYPE_CHECKING:` (it never runs);
* string: a string constant that is exactly a module of the package, optionally with ":attr"
          ("ckpt_harness.catalogue.checks.resume:CHECK", "ckpt_harness.rankside.job:run_rank",
          "ckpt_harness.launch.zygote" for `python -m`): the registries and entry strings, loaded with
          importlib or in a new interpreter. The bare package name and entry-point group names that are
          not modules ("ckpt_harness.checks", "ckpt_harness.jobs") are no edges; neither is prose that
          mentions a module.

An import names the module it imports from (`from ckpt_harness.rankside import script` -> rankside.script,
`from ckpt_harness.oracle import judge_live` -> oracle); the parent packages Python runs on the way are
not edges.

Cycles count top and func edges only: those are the imports that run. Typing and string edges run no
import when their module is imported, but they still mean "this module knows that one", so they count for
the layer rule (no upward edge) and the rank-side rule.

The allow-lists hold exactly the state of the code when this test was written. Each has a "stale entry"
test: when the code behind an entry is fixed, the test fails until the entry is removed, so the lists only
shrink. Do not add to them to make a change pass; move the code instead (review, section 5).
"""

from __future__ import annotations

import ast
import bisect
import fnmatch
import functools
import re
from pathlib import Path
from typing import Optional

import pytest

PKG = "ckpt_harness"
PKG_DIR = Path(__file__).resolve().parents[2] / PKG

# ---------------------------------------------------------------------------------------------------------------
# The rules' data. Shrink the allow-lists; never grow them.
# ---------------------------------------------------------------------------------------------------------------

#: Strongly connected components (over top+func edges) that exist today. A cycle that shrinks must be
#: replaced here by its smaller self; one that disappears must be removed.
ALLOWED_CYCLES: frozenset[frozenset[str]] = frozenset()

#: Layers, bottom (0) to top. A key "a.b" covers exactly the module a.b; a key "a.b.*" covers the package
#: a.b and everything below it. The most specific key wins (an exact key beats any ".*"; a longer ".*"
#: beats a shorter). Modules that are planned but not written yet (targets/, launch/layout.py,
#: inject/tracer.py, rankside/common.py, pipeline/workdir.py, oracle/start.py) are covered already.
LAYERS: dict[str, int] = {
    # 0 foundations: no harness machinery, importable anywhere (a rank, a worker, the harness)
    "ckpt_harness.errors": 0,
    "ckpt_harness.phase": 0,
    "ckpt_harness.state": 0,
    "ckpt_harness.verdict": 0,
    "ckpt_harness.extensions": 0,
    "ckpt_harness.jit": 0,
    "ckpt_harness.job.*": 0,  # the contract every job receives, and its axes
    "ckpt_harness.jobref": 0,
    "ckpt_harness.jobs.*": 0,
    "ckpt_harness.launch._proc": 0,
    "ckpt_harness.launch._wire": 0,
    "ckpt_harness.launch.layout": 0,
    "ckpt_harness.launch.preimport": 0,  # warm-ups that step aside: a job module's warm-up goes through it
    "ckpt_harness.timeline": 0,
    # 1 the process mechanism: fork server, groups, torchrun agents, worker bootstrap
    "ckpt_harness.launch.*": 1,
    # conversions of a saved checkpoint: framework adapters, each run in a process of its own
    "ckpt_harness.conversions.*": 1,
    # where a run's checkpoints live (a directory, a bucket of the server launch/ starts), as the harness holds them
    "ckpt_harness.storage.*": 1,
    # 2 probes, faults and the models of what they record
    "ckpt_harness.inject.*": 2,
    # 3 code that runs in ranks/workers, and the rank<->harness records contract
    "ckpt_harness.rankside.*": 3,
    "ckpt_harness.records.*": 3,
    "ckpt_harness.records.timeline": 3,
    # 4 what is under test and how it is started (run.py becomes targets/)
    "ckpt_harness.config": 4,
    "ckpt_harness.targets.*": 4,
    # 5 judging and reporting
    "ckpt_harness.oracle.*": 5,
    "ckpt_harness.report": 5,
    "ckpt_harness.progress": 5,
    # 6 pipelines: a target and a plan become judged cases
    "ckpt_harness.pipeline.*": 6,
    "ckpt_harness.strategies": 6,
    # 7 scenarios, checks, benches, the matrix and its expectations
    "ckpt_harness.catalogue.*": 7,
    # 8 surfaces
    "ckpt_harness.cli": 8,
    "ckpt_harness.plugin.*": 8,  # the hooks pytest registers (__init__), over their modules
    "ckpt_harness.present.*": 8,  # one layer: what a person looks at is built from what the layers below give
    "ckpt_harness": 8,
}

#: Edges (src, dst) from a lower layer to a higher one that exist today.
ALLOWED_UPWARD: frozenset[tuple[str, str]] = frozenset()

#: What code that runs in ranks/workers (rankside.*) must not import, by any kind of edge: the controller.
#: As pytest-xdist's remote.py, the rank side knows records, inject, launch, job and the foundations only.
RANKSIDE = "ckpt_harness.rankside.*"
RANKSIDE_FORBIDDEN = (
    "ckpt_harness.pipeline.*", "ckpt_harness.catalogue.*", "ckpt_harness.targets.*", "ckpt_harness.oracle.*",
    "ckpt_harness.cli", "ckpt_harness.plugin.*", "ckpt_harness.config", "ckpt_harness",
)

#: Job vs script is decided in one place, the target chooser. Elsewhere code asks the target.
KIND_CHOOSER = "ckpt_harness.targets"
KIND_CLASSES = frozenset({"ScriptConfig", "RunConfig", "ExploreConfig", "ScriptExploreConfig", "JobTarget",
                          "ScriptTarget"})
#: Where a kind's classes may be named: its own module (targets/), the settings they are made of (config),
#: and the public API's table (the package's __init__). Elsewhere a kind is met through `targets`.
KIND_CLASS_HOMES = ("ckpt_harness.targets", "ckpt_harness.targets.*", "ckpt_harness.config", "ckpt_harness")
#: `x.job is None`, `bench.job_class is not None`, `self.script is None`: the mode asked by a missing field.
KIND_ATTRS = frozenset({"job", "job_class", "script"})
#: `hasattr(args, "world_size")`: the mode asked by an option only one kind takes (the review's blind spot).
KIND_ONLY_OPTIONS = frozenset({"world_size", "launcher", "max_restarts", "nproc_per_node", "nnodes", "script_args"})
#: `if scripts:`, `matrix.scripts`: rows kept apart by kind instead of as targets.
KIND_ROWS = frozenset({"scripts", "jobs_or_scripts", "script_rows", "job_rows"})
#: (module, stripped source line) of today's mode branches outside the chooser. One entry covers every
#: branch on an identical line of that module.
ALLOWED_KIND_BRANCHES: frozenset[tuple[str, str]] = frozenset()

#: Files directly in ckpt_harness/ (__init__.py included): at most 16 (review section 5.2).
MAX_TOP_LEVEL = 16


# ---------------------------------------------------------------------------------------------------------------
# Reading the package
# ---------------------------------------------------------------------------------------------------------------

EDGE_KINDS = ("top", "func", "typing", "string")
RUNS = frozenset({"top", "func"})  # the edge kinds that import at run time: the ones cycles count

#: "ckpt_harness.x.y" or "ckpt_harness.x.y:attr", the whole string.
_MODULE_STRING = re.compile(rf"({PKG}(?:\.[A-Za-z_]\w*)+)(?::[A-Za-z_][\w.]*)?")


@functools.lru_cache(maxsize=None)
def modules() -> dict[str, Path]:
    """Every module of the package, dotted name -> file; a package is named by its __init__.py."""
    found = {}
    for path in PKG_DIR.rglob("*.py"):
        parts = path.relative_to(PKG_DIR.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def relpath(module: str) -> str:
    return modules()[module].relative_to(PKG_DIR.parent).as_posix()


@functools.lru_cache(maxsize=None)
def source(module: str) -> str:
    return modules()[module].read_text()


@functools.lru_cache(maxsize=None)
def tree(module: str) -> ast.Module:
    return ast.parse(source(module), filename=str(modules()[module]))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _from_base(module: str, node: ast.ImportFrom) -> str:
    """The absolute module a `from X import ...` reads from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if modules()[module].name == "__init__.py" else module.split(".")[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The package's modules an import statement names, each once."""
    known = modules()
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in known]
    base = _from_base(module, node)
    found = {}
    for alias in node.names:
        if f"{base}.{alias.name}" in known:  # a submodule: `from pkg import mod`
            found[f"{base}.{alias.name}"] = None
        elif base in known:  # a name defined in base
            found[base] = None
    return list(found)


#: Source lines an expression must touch to hold a module string or a mode branch. Only the expressions on
#: such lines are walked: statements are all walked, expressions are most of a tree and rarely matter.
_WORTH_WALKING = re.compile(rf"{PKG}\.|isinstance|\bis\b")


def _scan(module: str) -> tuple[list[tuple[str, str, int]], list[int]]:
    """One pass over a module: (dst, kind, line) for each import or module-naming string, and the lines of its
    Job-vs-script branches (`_kind_branch`)."""
    known = modules()
    marked = [n for n, text in enumerate(source(module).splitlines(), 1) if _WORTH_WALKING.search(text)]
    edges: list[tuple[str, str, int]] = []
    branches: list[int] = []
    todo: list[tuple[ast.AST, str]] = [(node, "top") for node in reversed(tree(module).body)]
    while todo:
        node, kind = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            edges += [(dst, kind, node.lineno) for dst in _imported(module, node)]
            continue
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                match = _MODULE_STRING.fullmatch(node.value.strip())
                if match and match.group(1) in known:
                    edges.append((match.group(1), "string", node.lineno))
            continue
        if isinstance(node, (ast.Call, ast.Compare, ast.Name, ast.Attribute)) and _kind_branch(node):
            branches.append(node.lineno)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo += [(stmt, kind) for stmt in reversed(node.orelse)]
            todo += [(stmt, "typing") for stmt in reversed(node.body)]
            continue
        if kind == "top" and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            kind = "func"
        todo += [(child, kind) for child in ast.iter_child_nodes(node)
                 if not isinstance(child, ast.expr) or _touches(marked, child)]
    return edges, branches


def _touches(lines: list[int], node: ast.expr) -> bool:
    """Whether the node's source spans one of the sorted `lines`."""
    at = bisect.bisect_left(lines, node.lineno)
    return at < len(lines) and lines[at] <= (node.end_lineno or node.lineno)


@functools.lru_cache(maxsize=None)
def scans() -> dict[str, tuple[list[tuple[str, str, int]], list[int]]]:
    return {module: _scan(module) for module in sorted(modules())}


@functools.lru_cache(maxsize=None)
def graph() -> dict[tuple[str, str], dict[str, list[int]]]:
    """(src, dst) -> {kind: [lines]}: every edge between two different modules of the package."""
    edges: dict[tuple[str, str], dict[str, list[int]]] = {}
    for src, (found, _) in scans().items():
        for dst, kind, line in found:
            if dst != src:
                edges.setdefault((src, dst), {}).setdefault(kind, []).append(line)
    return edges


def where(edge: tuple[str, str], kinds=EDGE_KINDS) -> str:
    """'src -> dst (func at ckpt_harness/x.py:12, ...)' for a failure message."""
    src, dst = edge
    sites = [f"{kind} at {relpath(src)}:{line}" for kind in kinds for line in graph()[edge].get(kind, [])]
    return f"{src} -> {dst} ({', '.join(sites)})"


def strongly_connected(edges: set[tuple[str, str]]) -> list[frozenset[str]]:
    """Tarjan's strongly connected components of more than one module."""
    succ: dict[str, list[str]] = {}
    for src, dst in sorted(edges):
        succ.setdefault(src, []).append(dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in succ.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(succ):
        if node not in index:
            visit(node)
    return found


def cycles() -> list[frozenset[str]]:
    return strongly_connected({edge for edge, kinds in graph().items() if RUNS & kinds.keys()})


def _covering_key(module: str, keys) -> Optional[str]:
    """The most specific key of `keys` ("a.b" exact, "a.b.*" the package and below) covering `module`."""
    if module in keys:
        return module
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n]) + ".*"
        if key in keys:
            return key
    return None


def layer(module: str) -> Optional[int]:
    key = _covering_key(module, LAYERS)
    return None if key is None else LAYERS[key]


def upward_edges() -> list[tuple[str, str]]:
    return sorted((src, dst) for src, dst in graph() if layer(src) is not None and layer(dst) is not None
                  and layer(dst) > layer(src))


def _kind_branch(node: ast.AST) -> bool:
    """isinstance(x, <a kind class>) or `<...>.job is [not] None` (also through getattr(x, "job", ...)),
    hasattr(x, <an option one kind takes>), or a name for rows of one kind (`scripts`)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr" \
            and len(node.args) == 2 and isinstance(node.args[1], ast.Constant) \
            and node.args[1].value in KIND_ONLY_OPTIONS:
        return True
    if (isinstance(node, ast.Name) and node.id in KIND_ROWS) or (isinstance(node, ast.Attribute)
                                                               and node.attr in KIND_ROWS):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
            and len(node.args) == 2:
        classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
        return any((isinstance(c, ast.Name) and c.id in KIND_CLASSES)
                   or (isinstance(c, ast.Attribute) and c.attr in KIND_CLASSES) for c in classes)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
        sides = (node.left, node.comparators[0])
        if not any(isinstance(s, ast.Constant) and s.value is None for s in sides):
            return False
        for side in sides:
            if isinstance(side, ast.Attribute) and side.attr in KIND_ATTRS:
                return True
            if isinstance(side, ast.Call) and isinstance(side.func, ast.Name) and side.func.id == "getattr" \
                    and len(side.args) >= 2 and isinstance(side.args[1], ast.Constant) \
                    and side.args[1].value in KIND_ATTRS:
                return True
    return False


@functools.lru_cache(maxsize=None)
def kind_branches() -> dict[tuple[str, str], list[int]]:
    """(module, stripped line) -> [line numbers] of every mode branch outside the target chooser."""
    found: dict[tuple[str, str], list[int]] = {}
    for module, (_, lines) in scans().items():
        if module == KIND_CHOOSER or not lines:
            continue
        text = source(module).splitlines()
        for line in sorted(set(lines)):
            found.setdefault((module, text[line - 1].strip()), []).append(line)
    return found


def top_level_files() -> list[str]:
    return sorted(p.name for p in PKG_DIR.glob("*.py"))


# ---------------------------------------------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------------------------------------------


def test_the_graph_is_read():
    """Guards the reader: a package without edges would pass every rule below."""
    assert len(modules()) > 50 and f"{PKG}.rankside.job" in modules()
    assert (f"{PKG}.cli", f"{PKG}.config") in graph()
    assert "string" in graph()[(f"{PKG}.catalogue.checks", f"{PKG}.catalogue.checks.resume")]


def test_no_new_import_cycle():
    new = [c for c in cycles() if not any(c <= allowed for allowed in ALLOWED_CYCLES)]
    lines = []
    for component in new:
        lines.append(f"  cycle of {len(component)} modules: {', '.join(sorted(component))}; its edges:")
        lines += [f"    {where(e, ('top', 'func'))}" for e in sorted(graph())
                  if e[0] in component and e[1] in component and RUNS & graph()[e].keys()]
    assert not new, ("import cycle(s) over top+func edges:\n" + "\n".join(lines) +
                     "\nBreak it: move the shared code down a layer, or pass the dependency in; "
                     "do not add it to ALLOWED_CYCLES.")


def test_no_circle_even_through_type_hints():
    """Not even a name in a type hint runs back: the checks know the bench by a protocol
    (`catalogue.checks.Bench`), and the scenario value's module reads no file, so the catalogue's
    bench, checks and scenarios form no circle (issue 68 found one over hints and function imports)."""
    found = strongly_connected({edge for edge, kinds in graph().items() if {"top", "func", "typing"} & kinds.keys()})
    assert not found, "circles over imports and type hints: " + "; ".join(", ".join(sorted(c)) for c in found)


def test_allowed_cycles_still_exist():
    now = set(cycles())
    stale = [allowed for allowed in ALLOWED_CYCLES if allowed not in now]
    lines = []
    for allowed in stale:
        left = [c for c in now if c <= allowed]
        lines.append(f"  {sorted(allowed)}\n    is now: {[sorted(c) for c in left] or 'no cycle'}")
    assert not stale, ("ALLOWED_CYCLES has entries that are no longer today's cycles (good news):\n" +
                       "\n".join(lines) + "\nReplace each with what it is now, or delete it.")


def test_every_module_has_a_layer():
    missing = sorted(m for m in modules() if layer(m) is None)
    assert not missing, (f"modules no LAYERS key covers: {', '.join(missing)}.\n"
                         "Add it to LAYERS (a module in a new folder: add a 'folder.*' key).")


def test_no_upward_import():
    new = [e for e in upward_edges() if e not in ALLOWED_UPWARD]
    lines = [f"  layer {layer(e[0])} -> {layer(e[1])}: {where(e)}" for e in new]
    assert not new, ("imports from a lower layer to a higher one:\n" + "\n".join(lines) +
                     "\nMove what the lower module needs down to its layer, or have a caller above pass it in "
                     "(as run.py hands launch the entry string of rankside.job in GroupSpec.entry). "
                     "Do not add to ALLOWED_UPWARD.")


def test_allowed_upward_edges_still_exist():
    now = set(upward_edges())
    stale = sorted(e for e in ALLOWED_UPWARD if e not in now)
    assert not stale, ("ALLOWED_UPWARD entries that are no longer upward edges (good news): "
                       + ", ".join(f"{s} -> {d}" for s, d in stale) + ". Delete them.")


def test_rank_side_imports_nothing_from_the_controller():
    bad = sorted(e for e in graph() if _covering_key(e[0], {RANKSIDE}) and _covering_key(e[1], RANKSIDE_FORBIDDEN))
    assert not bad, ("rank-side code imports the controller:\n" + "\n".join(f"  {where(e)}" for e in bad) +
                     "\nCode in rankside/ runs in ranks and workers: it may use records, inject, launch, job and "
                     "the foundations. Pass what it needs in the plan (env/RunPlan), or move the code down.")


def test_what_a_rank_loads_at_import_holds_no_report_and_no_run_reader():
    """Every module a rank-side module imports at module level, transitively (what a rank, a torchrun worker
    and DCP's checkpoint process load before any job code): the record format, never how the harness reads
    a run back (`records.runs`), times a case (`pipeline.clock`) or shows one (`present/`)."""
    top = {src: {dst for (s, dst), kinds in graph().items() if s == src and "top" in kinds} for src in modules()}
    loaded, todo = set(), [m for m in modules() if _covering_key(m, {RANKSIDE})]
    while todo:
        module = todo.pop()
        if module not in loaded:
            loaded.add(module)
            todo += top.get(module, ())
    heavy = sorted(m for m in loaded if _covering_key(m, {"ckpt_harness.present.*", "ckpt_harness.records.runs",
                                                          "ckpt_harness.records.timeline",
                                                          "ckpt_harness.pipeline.*"}))
    assert not heavy, f"a rank loads {', '.join(heavy)} at import: import it where it is used, or move it up"


def test_job_or_script_is_decided_only_by_the_target_chooser():
    now = kind_branches()
    new = sorted(site for site in now if site not in ALLOWED_KIND_BRANCHES)
    lines = [f"  {relpath(m)}:{','.join(map(str, now[(m, text)]))}: {text}" for m, text in new]
    assert not new, ("Job-vs-script branches outside ckpt_harness/targets/__init__.py:\n" + "\n".join(lines) +
                     "\nAsk the target instead (its caps, save_steps, cli_args ...); the one isinstance "
                     "belongs in targets.resolve. Do not add to ALLOWED_KIND_BRANCHES.")


def kind_class_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of each kind class `tree` names in code: imported, called, read (not in prose)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [(node.lineno, a.name) for a in node.names if a.name in KIND_CLASSES]
        elif isinstance(node, ast.Name) and node.id in KIND_CLASSES:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and node.attr in KIND_CLASSES:
            found.append((node.lineno, node.attr))
    return found


def test_a_kinds_classes_are_named_only_in_their_homes():
    """The pytest face, the CLI and the pipelines meet a kind through `targets` (its options, configs and
    targets: `targets.kinds`, `named`, `resolve`), so a kind installed by a package is met as the built-in
    ones are; naming `ScriptConfig` there is a door for one kind."""
    homes = [m for m in modules() if any(fnmatch.fnmatchcase(m, pattern) for pattern in KIND_CLASS_HOMES)]
    named = [f"  {relpath(m)}:{line}: {name}" for m in sorted(modules()) if m not in homes
             for line, name in kind_class_names(tree(m))]
    assert not named, "kind classes named outside targets/, config.py and the public API:\n" + "\n".join(named)


@pytest.mark.parametrize("code, named", [
    ("from ckpt_harness.config import ScriptConfig", True),
    ("targets.of(config.RunConfig(job))", True),
    ("x = JobTarget", True),
    ('"""the `ScriptConfig` that verify_script runs"""', False),
    ("targets.named('script').configs['run']", False),
])
def test_a_named_kind_class_is_seen_in_each_of_its_shapes(code, named):
    assert bool(kind_class_names(ast.parse(code))) is named


@pytest.mark.parametrize("code, branch", [
    ("if isinstance(config, ScriptConfig): pass", True),
    ("if target.job is None: pass", True),
    ("if hasattr(args, 'world_size'): pass", True),
    ("if scripts: pass", True),
    ("rows = matrix.scripts", True),
    ("if target.caps.has('power_loss'): pass", False),
    ("if hasattr(args, 'timeout'): pass", False),
    ("rows = matrix.rows", False),
])
def test_a_kind_branch_is_seen_in_each_of_its_shapes(code, branch):
    assert any(_kind_branch(node) for node in ast.walk(ast.parse(code))) is branch


def test_allowed_kind_branches_still_exist():
    now = kind_branches()
    stale = sorted(site for site in ALLOWED_KIND_BRANCHES if site not in now)
    assert not stale, ("ALLOWED_KIND_BRANCHES entries whose line is gone (good news, or the line changed): "
                       + "; ".join(f"{m}: {text}" for m, text in stale)
                       + ". Delete them (a branch that was only reworded: put in its new text).")


def test_top_level_stays_small():
    files = top_level_files()
    assert len(files) <= MAX_TOP_LEVEL, (
        f"{len(files)} modules directly in {PKG}/ (at most {MAX_TOP_LEVEL}): {', '.join(files)}.\n"
        "Put the new module in the folder of its layer (launch/, inject/, rankside/, targets/, oracle/, "
        "pipeline/, catalogue/).")


# ---------------------------------------------------------------------------------------------------------------
# Prose that names the code: a docstring or comment that names a module, a file or a name in a module that
# no longer exists sends its reader to the wrong place (the review found six). Only references a reader
# follows are checked: a backticked dotted name whose first part is a module or package of ckpt_harness
# (`records.runs.saving_after`, `ckpt_harness.pipeline.cases`), and a path of a module (`launch/worker.py`).
# ---------------------------------------------------------------------------------------------------------------

_DOTTED = re.compile(r"`((?:ckpt_harness\.)?[a-z_]+(?:\.[A-Za-z_]+)+)(?:\(\))?`")
_PATH = re.compile(r"\b((?:ckpt_harness/)?([a-z_]+)/[a-z_]+\.py)\b")


def _defined(module: str) -> set[str]:
    """Names a reader can find in `module`: its top-level definitions, imports and assignments, and
    `Class.member` for its classes' methods and fields."""
    found: set[str] = set()
    for node in tree(module).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
            for member in node.body if isinstance(node, ast.ClassDef) else ():
                targets = [member.target] if isinstance(member, ast.AnnAssign) else \
                    member.targets if isinstance(member, ast.Assign) else []
                found.update(f"{node.name}.{n}" for n in
                             [getattr(member, "name", None)] + [t.id for t in targets if isinstance(t, ast.Name)] if n)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            found.update(t.id for t in targets if isinstance(t, ast.Name))
    return found


def stale_references() -> list[str]:
    """'file:line: reference (why)' for each reference in the package's prose that leads nowhere."""
    firsts = {name.split(".")[1] for name in modules() if "." in name}
    stale = []
    for module, path in sorted(modules().items()):
        text = source(module)
        for match in _DOTTED.finditer(text):
            parts = match.group(1).removeprefix(f"{PKG}.").split(".")
            if parts[0] not in firsts:
                continue  # `torch.save`, `dist.barrier`: not ours
            n = next((n for n in range(len(parts), 0, -1) if ".".join([PKG, *parts[:n]]) in modules()), 0)
            rest = ".".join(parts[n:])
            if n == 0:
                why = "no such module"
            elif rest and rest not in _defined(".".join([PKG, *parts[:n]])) and \
                    rest.split(".")[0] not in _defined(".".join([PKG, *parts[:n]])):
                why = f"{'.'.join(parts[:n])} defines no {rest}"
            else:
                continue
            stale.append(f"{relpath(module)}:{text.count(chr(10), 0, match.start()) + 1}: `{match.group(1)}` ({why})")
        for match in _PATH.finditer(text):
            file = match.group(1) if match.group(1).startswith(f"{PKG}/") else f"{PKG}/{match.group(1)}"
            if (match.group(1).startswith(f"{PKG}/") or match.group(2) in firsts) and \
                    not (PKG_DIR.parent / file).exists():
                stale.append(f"{relpath(module)}:{text.count(chr(10), 0, match.start()) + 1}: "
                             f"{match.group(1)} (no such file)")
    return stale


def test_prose_names_only_code_that_exists():
    stale = stale_references()
    assert not stale, ("docstrings or comments that name what is not there:\n  " + "\n  ".join(stale) +
                       "\nName where the code is now, or say what it does instead.")


def test_a_stale_reference_is_seen(tmp_path, monkeypatch):
    """The check both ways: a docstring naming a moved module, a missing name and a missing file is flagged;
    the references of the package as it is are not (the test above)."""
    doc = tmp_path / "doc.py"
    doc.write_text('"""Built by `present.from_runs`, read by `records.runs.no_such_reader` and `records.runs.Run`,\n'
                   'as launch/no_such_file.py says; `torch.save` is not ours."""\n')
    fake = {**modules(), "ckpt_harness.doc": doc}
    monkeypatch.setattr(f"{__name__}.modules", lambda: fake)
    monkeypatch.setattr(f"{__name__}.relpath", lambda module: fake[module].name)
    stale = stale_references()
    assert [s.split(": ", 1)[1] for s in stale] == [
        "`present.from_runs` (present defines no from_runs)",
        "`records.runs.no_such_reader` (records.runs defines no no_such_reader)",
        "launch/no_such_file.py (no such file)",
    ]
