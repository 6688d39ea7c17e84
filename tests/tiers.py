"""Each test's tier, read from its code: what it starts and what it trains, never from a hand-kept list.

A test's *reach* is its own function, the fixtures it uses (and theirs), and every function of the
tests' own modules that these call by name, followed to the end.  Its tier is read from the names its
reach uses:

- ``browser``: it drives Chromium (the ``chromium_browser`` fixture), and so a Streamlit server too;
- ``subprocess``: it starts a process of its own, through any of ``SPAWNS`` (a separate interpreter,
  a server, the job runner's workers, a Ray cluster, a process pool);
- ``trains``: it trains a model of the project's, through any of ``TRAINS`` (an experiment's ``run``
  or a fixture that holds a real run);
- ``unit`` for the rest.

``browser`` and ``subprocess`` are what ``make test-fast`` leaves out.  The rule is checked while the
suite runs: a test of neither tier that starts a process fails and names the process (tests/conftest.py),
so a new way of starting one is added to ``SPAWNS`` the first time it is used, never missed.
"""
from __future__ import annotations

import ast
import functools
import inspect
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# Read from literals rather than names: the command line's `run` (and `jobs resume`), which hands the job
# to a worker process, and a config whose `workers` is above 1, whose cells run in a process pool.
RUN_COMMAND = "<emalab run>"
MANY_WORKERS = "<workers > 1>"
# Names (a module, a function, an attribute path) whose use starts a process.
SPAWNS = frozenset({
    # (subprocess.CompletedProcess only holds an answer: the in-process command line returns one)
    "subprocess.run", "subprocess.Popen", "subprocess.call", "subprocess.check_call", "subprocess.check_output",
    "sys.executable", "multiprocessing", "ProcessPoolExecutor", "os.fork",
    "ray", "serve", "serve_app",  # a Streamlit server (bench.browser.serve)
    "LocalRunner", "RayRunner", "submit", "resume",  # the job runner: one worker process a job
    "run_parallel",  # the cell pool of the grid studies: spawned processes
    "bench.boundary.main",  # times a slice of the map with one worker and with two
    RUN_COMMAND, MANY_WORKERS,
})
# Names whose use trains a model of the project's (the fixtures' real runs, an experiment's run).
TRAINS = frozenset({
    "get_experiment", "REGISTRY", "make_lm_runs", "make_boundary_runs", "make_depth_runs", "tiny_run",
    "_real_run", "real_run",
})
# The fixture that holds every test to its tier (tests/conftest.py) names the ways of starting a process
# to refuse them: it starts none.
GUARD = "_only_its_tier_starts_processes"


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class _Module:
    """One module of tests/: its functions by name, what each uses, and the tests' modules it imports from."""

    def __init__(self, path: Path):
        tree = ast.parse(path.read_text(), str(path))
        self.functions: dict[str, ast.AST] = {}
        self.imported: dict[str, tuple[str, str]] = {}  # local name -> (module of tests/, its name there)
        self.aliases: dict[str, str] = {}  # `import multiprocessing as mp`: mp -> multiprocessing
        for node in tree.body:
            if isinstance(node, ast.Import):
                self.aliases.update({alias.asname: alias.name for alias in node.names if alias.asname})
            elif isinstance(node, ast.ImportFrom) and node.module and not (TESTS / f"{node.module}.py").exists():
                # `from bench.boundary import main`: main -> bench.boundary.main
                self.aliases.update({alias.asname or alias.name: f"{node.module}.{alias.name}" for alias in node.names})
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):  # a class's methods, as Class.method and by bare name
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.functions.setdefault(item.name, item)
                self.functions[node.name] = node
            elif isinstance(node, ast.ImportFrom) and node.module and (TESTS / f"{node.module}.py").exists():
                for alias in node.names:
                    self.imported[alias.asname or alias.name] = (node.module, alias.name)


@functools.lru_cache(maxsize=None)
def _module(name: str) -> _Module | None:
    path = TESTS / f"{name}.py"
    return _Module(path) if path.exists() else None


def _above_one(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, str)) and str(node.value).isdigit() \
        and int(node.value) > 1


@functools.lru_cache(maxsize=None)
def _uses(node: ast.AST) -> tuple[frozenset[str], frozenset[str]]:
    """(every name and dotted attribute path ``node`` uses, the bare names it calls or passes on)."""
    names, called = set(), set()
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Name, ast.Attribute)):
            dotted = _dotted(sub)
            if dotted:
                names.add(dotted)
            if isinstance(sub, ast.Name):
                called.add(sub.id)
        elif isinstance(sub, (ast.List, ast.Tuple, ast.Call)):
            first = (sub.args if isinstance(sub, ast.Call) else sub.elts)[:2]
            words = [w.value for w in first if isinstance(w, ast.Constant) and isinstance(w.value, str)]
            if words[:1] == ["run"] or words == ["jobs", "resume"]:
                names.add(RUN_COMMAND)
            if isinstance(sub, ast.Call) and any(k.arg == "workers" and _above_one(k.value) for k in sub.keywords):
                names.add(MANY_WORKERS)
        elif isinstance(sub, ast.Dict):
            if any(isinstance(k, ast.Constant) and k.value == "workers" and _above_one(v)
                   for k, v in zip(sub.keys, sub.values)):
                names.add(MANY_WORKERS)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            for alias in sub.names:
                names.add(alias.name if isinstance(sub, ast.Import) else f"{sub.module}.{alias.name}")
                called.add(alias.asname or alias.name)
    return frozenset(names), frozenset(called)


def _reach(module: str, function: str, seen: set[tuple[str, str]]) -> set[str]:
    """The names used by ``module.function`` and every tests' function it calls, transitively."""
    if (module, function) in seen:
        return set()
    seen.add((module, function))
    mod = _module(module)
    if mod is None:
        return set()
    if function not in mod.functions:
        if function in mod.imported:
            return _reach(*mod.imported[function], seen)
        return set()
    names, called = _uses(mod.functions[function])
    # `mp.Process` is multiprocessing.Process where the module imported multiprocessing as mp
    out = set(names) | {".".join([mod.aliases[n.split(".")[0]], *n.split(".")[1:]])
                        for n in names if n.split(".")[0] in mod.aliases}
    for name in called:
        if name in mod.functions or name in mod.imported:
            out |= _reach(module, name, seen)
        for imported in _inner_imports(mod.functions[function]):
            if name == imported[1]:
                out |= _reach(imported[0], imported[2], seen)
    return out


@functools.lru_cache(maxsize=None)
def _inner_imports(node: ast.AST) -> tuple[tuple[str, str, str], ...]:
    """(module of tests/, local name, name there) for each ``from <tests' module> import`` inside ``node``."""
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.ImportFrom) and sub.module and (TESTS / f"{sub.module}.py").exists():
            found += [(sub.module, alias.asname or alias.name, alias.name) for alias in sub.names]
    return tuple(found)


def _where(func) -> tuple[str, str] | None:
    """(module of tests/, function name) of a test or fixture function, or None if it lives elsewhere."""
    func = inspect.unwrap(func)
    try:
        path = Path(inspect.getsourcefile(func)).resolve()
    except (TypeError, OSError):
        return None
    if path.parent != TESTS:
        return None
    return path.stem, func.__name__


def tiers(item) -> set[str]:
    """The tiers of the collected test ``item`` (a pytest Function)."""
    seen: set[tuple[str, str]] = set()
    names: set[str] = set()
    fixtures = [d.func for name, defs in item._fixtureinfo.name2fixturedefs.items() if name != GUARD for d in defs]
    for func in [item.function, *fixtures]:
        where = _where(func)
        if where:
            names |= _reach(*where, seen)
    found = set()
    if "chromium_browser" in item.fixturenames:
        found.add("browser")
    if _any(names, SPAWNS):
        found.add("subprocess")
    if _any(names, TRAINS):
        found.add("trains")
    return found or {"unit"}


def _any(names: set[str], rule: frozenset[str]) -> bool:
    """Whether a used name is one of ``rule``'s, the attribute of one (``multiprocessing.Process`` is
    multiprocessing's), or a method by one of its names (``runner.submit``)."""
    return any(n in rule or any(n.startswith(r + ".") or n.endswith("." + r) for r in rule) for n in names)
