"""The `imaging` package's import graph, read from the source (every import statement, those inside
functions too, which importing the modules would not reach): no cycle anywhere, and configuration as
leaves (imaging/config_model.py and imaging/config_files.py import nothing from `imaging` but the model
leaf; no module the executors run loads a platform file). Pure: no import of the package under test."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "imaging"
# The executors are handed domain objects, never files: these stay on the driver (resources/spark.py).
DRIVER_ONLY = ("imaging.driver", "imaging.governance")


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module of `imaging` that importing `name` (a module, or a name inside one) reads."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """Every module of `imaging` that `module` imports, at its top level or inside a function. `import a.b`
    counts as importing `a.b` (not its parent package, whose __init__ Python runs first but which a
    package's own modules always import mid-way through it); `from a import b` counts `a` too, since the
    name is looked up in it (a package whose __init__ re-exports its modules is then in a cycle with each
    module that takes a sibling from it: they import siblings by name, `from .b import f`)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(filter(None, (_resolve(alias.name) for alias in node.names)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            # `from pkg import module` reads `pkg` (its __init__, for the name) and the module; else a name of `base`.
            found.update(filter(None, [_resolve(base)]))
            found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES)
    found.discard(module)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a path back to its start) per strongly connected group of modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_path_within(graph, group) for group in groups]


def _path_within(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A cycle through the group's first module, by breadth-first search inside the group."""
    start = min(group)
    paths = {target: [start, target] for target in graph[start] & group}
    queue = list(paths)
    while queue:
        node = queue.pop(0)
        if start in graph[node]:
            return paths[node] + [start]
        for target in sorted(graph[node] & group):
            if target not in paths:
                paths[target] = paths[node] + [target]
                queue.append(target)
    return sorted(group)


def test_the_analysis_sees_imports_inside_functions_and_relative_ones():
    """The two kinds of import a cycle used to hide behind."""
    assert "imaging.deid.engine" in GRAPH["imaging.deid"]  # `from .engine import deidentify`
    assert "imaging.fs" in GRAPH["imaging.steps.clinical"]  # `from imaging import fs` inside read_extract
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_import_cycle_in_imaging():
    assert cycles(GRAPH) == [], "import cycles (each module imports the next):\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles(GRAPH))


def test_configuration_reading_is_a_leaf():
    """The models' base knows no domain, the reader knows no file's meaning: which model reads which file
    is the driver's (imaging/driver/platform_files.py)."""
    assert GRAPH["imaging.config_model"] == set()
    assert GRAPH["imaging.config_files"] == {"imaging.config_model"}


def test_no_module_the_executors_run_reads_a_platform_file():
    """Domain modules own their files' models and build their objects `from_model`; their callers load."""
    readers = sorted(module for module, targets in GRAPH.items() if "imaging.config_files" in targets
                     and not module.startswith(DRIVER_ONLY))
    assert readers == []
