"""The import rules of docs/architecture.md, read from the source with ``ast``: the store draws nothing,
no two modules import each other round a circle, and a function-level import is rare and says why.

Read, not run: an import the rules forbid fails here by its file and line, before it slows a page or
leaves a module half-initialised on the one import order nobody tried.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import store
from ema_core.studies import STUDIES

ROOT = Path(__file__).resolve().parent.parent
# The packages whose modules import one another (bench/ and app.py sit on top: nothing imports them).
PACKAGES = ("ema_core", "store", "jobs", "pages")
# Where a function-level import is counted: every folder of the project's code, and the app.
COUNTED = (*PACKAGES, "bench")
MAX_FUNCTION_IMPORTS = 25  # fewer than this


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources(folders) -> dict[str, Path]:
    return {_module_name(p): p for folder in folders for p in sorted((ROOT / folder).rglob("*.py"))}


def _imports(name: str, path: Path) -> list[tuple[str, list[str], ast.stmt]]:
    """Every import statement of ``path`` (the module ``name``), anywhere in it: (the module it names,
    made absolute where relative; the names taken from it, for ``from m import x, y``; the statement)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                module = ".".join(package[:len(package) - (node.level - 1)] + ([module] if module else []))
            out.append((module, [a.name for a in node.names], node))
    return out


def _is_chart(module: str) -> bool:
    parts = module.split(".")
    return parts[:2] == ["ema_core", "figures"] or (parts[:2] == ["ema_core", "studies"] and parts[-1] == "figures")


# -- the store draws nothing ------------------------------------------------------------------------

def test_the_store_imports_no_drawing_code():
    """``import store`` (every page, the CLI's store commands) stays free of altair: an exported table's
    figures are its study's (``Study.export_figures``), looked up by the Export page."""
    found = [f"{path.relative_to(ROOT)}:{node.lineno} imports {module}"
             for name, path in _sources(["store"]).items()
             for module, names, node in _imports(name, path)
             if _is_chart(module) or any(_is_chart(f"{module}.{x}") for x in names)]
    assert not found, found


def test_every_export_figure_names_an_exported_table_and_a_drawing_of_its_study():
    from pages._state import export_figures

    declared = [(study, table, function) for study in STUDIES.values()
                for table, function in study.export_figures.items()]
    assert {table for _, table, _ in declared} >= {"dilution_accuracy", "boundary_accuracy", "depth_results"}
    tables = [table for _, table, _ in declared]
    assert len(tables) == len(set(tables)), "a table's figures are drawn by one study"
    for study, table, function in declared:
        assert table in store.EXPORT_TABLES, f"{study.name}: {table!r} is not an exported table"
        draw = getattr(importlib.import_module(f"{study.module}.figures"), function, None)
        assert callable(draw), f"{study.name}: its figures.py has no function {function!r} (for {table})"
        assert export_figures(table) is draw  # what the Export page draws
    assert export_figures("runs") is None


# -- no circles -----------------------------------------------------------------------------------

def _import_graph() -> dict[str, set[str]]:
    """Module → the project modules it imports, at module level or inside a function (both run, and
    both can meet a module half-initialised).  ``from pkg import x`` imports ``pkg.x`` where that is a
    module, else ``pkg``."""
    sources = _sources(PACKAGES)
    graph = {}
    for name, path in sources.items():
        targets = set()
        for module, names, _ in _imports(name, path):
            targets.update([f"{module}.{x}" if f"{module}.{x}" in sources else module for x in names] or [module])
        graph[name] = {m for m in targets if m in sources and m != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_modules_import_each_other_in_a_circle():
    """An arrow points one way (docs/architecture.md): a circle, even through a function-level import,
    works only in the order someone happened to import things.  What ``importlib`` imports by a name
    built at run time (the registries' study modules) is not read here."""
    graph = _import_graph()
    assert {"jobs.worker", "jobs.ray_backend", "store.export", "pages._state"} <= set(graph)
    assert "jobs.worker" in graph["jobs.ray_backend"]  # the graph holds the arrows it should
    circles = _circles(graph)
    assert not circles, [{m: sorted(graph[m] & set(c)) for m in c} for c in circles]


# -- function-level imports -------------------------------------------------------------------------

def _function_imports() -> list[tuple[Path, ast.stmt]]:
    found = {}
    for path in [*_sources(COUNTED).values(), ROOT / "app.py"]:
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):  # a nested function's imports are met twice: kept once
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        found[(path, node.lineno)] = (path, node)
    return list(found.values())


def test_function_level_imports_are_few_and_each_says_why():
    """A function-level import is kept only where it saves a measured start-up cost (torch, DuckDB and
    pandas, sklearn, ``datasets``, numba, altair) or where a package may be missing, and says so on its
    line; the rest are at the top, where a reader looks for them."""
    found = _function_imports()
    listing = [f"{path.relative_to(ROOT)}:{node.lineno}" for path, node in found]
    assert len(found) < MAX_FUNCTION_IMPORTS, listing
    silent = []
    for path, node in found:
        lines = path.read_text(encoding="utf-8").splitlines()[node.lineno - 1:node.end_lineno]
        if not any("#" in line for line in lines):  # an import holds no string: a "#" starts a comment
            silent.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not silent, f"a function-level import says why, on its line: {silent}"


def test_no_two_classes_share_a_name():
    """A class is named once in the project's code: a reader (or a traceback) that names one never has to
    ask which (the model's config and the experiment's were both once ``DepthConfig``)."""
    where: dict[str, list[str]] = {}
    for folder in ("ema_core", "store", "jobs", "pages"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    where.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert len(where) > 50
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}
