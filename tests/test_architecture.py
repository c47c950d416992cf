"""The package layering and the absence of import cycles, read from the source (no imports run).

Layers, bottom up: the engine ``rewrite`` stands alone; the generic framework is ``spaces`` <-
``tuner`` <- ``structure`` <- ``studies`` and knows nothing of the engine; the application
``rewrite_tuner`` joins them on top. A package imports only those below it (`LAYERS`).
Between modules there is no import cycle, counting imports inside functions and package
``__init__`` modules (a module that imports its package's ``__init__`` while that ``__init__``
imports it is a cycle). A name imported from a package's ``__init__`` counts as an import of the
module that defines it (``from rewrite.ops import get_op`` is an import of ``rewrite.ops.base``).
Only the body of an ``if TYPE_CHECKING:`` (and the ``else`` of an ``if not TYPE_CHECKING:``) is
annotations only and does not count.

The checker is a set of functions over a source root and a layer table, so the tests at the end
run it on small planted packages to show that it reports each kind of violation.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Mapping, Set
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS: dict[str, set[str]] = {
    "lazyimport": set(),
    "spaces": {"lazyimport"},
    "rewrite": {"lazyimport"},
    "tuner": {"lazyimport", "spaces"},
    "structure": {"lazyimport", "spaces", "tuner"},
    "studies": {"lazyimport", "spaces", "tuner", "structure"},
    "rewrite_tuner": {"lazyimport", "rewrite", "spaces", "tuner", "structure", "studies"},
}
"""Package -> the packages it may import (``lazyimport``, the lazy-export helper every package
uses, imports nothing)."""

Graph = dict[str, dict[str, int]]


def find_modules(root: Path, packages: Set[str]) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of ``packages`` under ``root`` (a
    package's ``__init__.py`` is named by the package)."""
    out = {}
    for pkg in sorted(packages):
        for f in sorted((root / pkg).rglob("*.py")):
            parts = list(f.relative_to(root).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _reexports(modules: Mapping[str, Path]) -> dict[str, dict[str, str]]:
    """Package -> {name it re-exports: the module it imports that name from}."""
    out: dict[str, dict[str, str]] = {}
    for pkg, path in modules.items():
        if path.name != "__init__.py":
            continue
        names = out[pkg] = {}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    names[a.asname or a.name] = node.module
    return out


def _resolve(target: str, name: str | None, modules: Mapping[str, Path], reexports: dict) -> str:
    """The module that defines ``target.name`` (``name`` None: the module ``target``)."""
    for _ in range(10):  # follow re-exports through nested packages
        if name is not None and f"{target}.{name}" in modules:
            return f"{target}.{name}"
        if name is None or target not in reexports or name not in reexports[target]:
            break
        target = reexports[target][name]
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target


def _is_type_checking(test: ast.expr) -> bool:
    """Whether ``test`` is ``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _annotation_only(tree: ast.AST) -> set[int]:
    """Ids of the nodes that run only under a type checker: the body of ``if TYPE_CHECKING:``
    and the ``else`` of ``if not TYPE_CHECKING:`` (never the other branch)."""
    skipped: list[ast.stmt] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        if _is_type_checking(node.test):
            skipped += node.body
        elif (
            isinstance(node.test, ast.UnaryOp)
            and isinstance(node.test.op, ast.Not)
            and _is_type_checking(node.test.operand)
        ):
            skipped += node.orelse
    return {id(sub) for stmt in skipped for sub in ast.walk(stmt)}


def _imports(name: str, path: Path, modules: Mapping[str, Path], reexports: dict) -> dict[str, int]:
    """Modules of ours that ``name`` imports, with a line number."""
    tree = ast.parse(path.read_text())
    skipped = _annotation_only(tree)
    is_pkg = path.name == "__init__.py"
    out: dict[str, int] = {}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [_resolve(a.name, None, modules, reexports) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_pkg else name.split(".")[:-1]
                here = here[: len(here) - node.level + 1]
                base = ".".join([*here, *([node.module] if node.module else [])])
            targets = [_resolve(base, a.name, modules, reexports) for a in node.names]
        else:
            continue
        for t in targets:
            if t and t != name:
                out.setdefault(t, node.lineno)
    return out


def import_graph(root: Path, packages: Set[str]) -> tuple[dict[str, Path], Graph]:
    """The modules of ``packages`` under ``root`` and, for each, the modules of ours it imports
    (with a line number); package ``__init__`` modules are nodes like any other."""
    modules = find_modules(root, packages)
    reexports = _reexports(modules)
    return modules, {m: _imports(m, p, modules, reexports) for m, p in modules.items()}


def layering_violations(root: Path, layers: Mapping[str, Set[str]]) -> list[str]:
    """``"path:line imports module"`` for every import against ``layers`` (package -> the
    packages it may import)."""
    modules, graph = import_graph(root, set(layers))
    return [
        f"{modules[m].relative_to(root)}:{line} imports {t}"
        for m, deps in graph.items()
        for t, line in deps.items()
        if (top := t.split(".")[0]) != m.split(".")[0] and top not in layers[m.split(".")[0]]
    ]


def find_cycles(graph: Mapping[str, Set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def import_cycles(root: Path, packages: Set[str]) -> list[list[str]]:
    """The import cycles between the modules of ``packages`` under ``root``."""
    _, graph = import_graph(root, packages)
    return find_cycles({m: set(deps) for m, deps in graph.items()})


def test_packages_import_only_the_layers_below() -> None:
    wrong = layering_violations(ROOT, LAYERS)
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_the_driver_knows_a_trial_source_not_the_study() -> None:
    # the optimize loop talks to `studies.source.TrialSource` only: no import of `studies.study`
    # or of the package that re-exports `Study`, not even for annotations
    tree = ast.parse((ROOT / "studies" / "driver.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not imported & {"studies", "studies.study"}, sorted(imported)


def test_no_import_cycle_between_modules() -> None:
    assert import_cycles(ROOT, set(LAYERS)) == []


def test_importing_the_engine_imports_nothing_of_the_framework() -> None:
    code = (
        "import sys, rewrite; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'spaces', 'tuner', 'structure', "
        "'studies', 'rewrite_tuner'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


# ------------------------------------------------------------------ the checker's own tests
def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c"]]


def _plant(root: Path, files: Mapping[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_cycle_through_a_package_init_is_reported(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "low/__init__.py": "from low.a import f\n",
            "low/a.py": "from low.b import g\n\ndef f():\n    return g()\n",
            "low/b.py": "import low\n\ndef g():\n    return low\n",
        },
    )
    assert import_cycles(root, {"low"}) == [["low", "low.a", "low.b"]]


def test_an_upward_import_is_reported(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/a.py": "def f():\n    from high.b import g\n\n    return g()\n",
            "high/__init__.py": "",
            "high/b.py": "from low.a import f\n\ndef g():\n    return 1\n",
        },
    )
    assert layering_violations(root, {"low": set(), "high": {"low"}}) == [
        "low/a.py:2 imports high.b"
    ]


def test_imports_outside_if_type_checking_count(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/a.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from high.b import B\n"  # annotations only: allowed
                "if not TYPE_CHECKING:\n"
                "    from high.b import C\n"  # runs: an upward import
                "else:\n"
                "    from high.c import D\n"  # annotations only: allowed
                "if TYPE_CHECKING:\n"
                "    pass\n"
                "else:\n"
                "    from high.c import E\n"  # runs: an upward import
            ),
            "high/__init__.py": "",
            "high/b.py": "B = C = 1\n",
            "high/c.py": "D = E = 1\n",
        },
    )
    assert sorted(layering_violations(root, {"low": set(), "high": {"low"}})) == [
        "low/a.py:11 imports high.c",
        "low/a.py:5 imports high.b",
    ]


# ------------------------------------------------------------------ ideas, not only imports
VOCABULARY: dict[str, re.Pattern[str]] = {
    # the engine searches; tuning its settings is the application's business
    "rewrite": re.compile(r"tun(ed|ing|er)|stud(y|ies)|trials?\b|surrogate|acquisition", re.I),
    # the framework tunes any space; rewriting (rules, their priors, the zoo) is the application's
    "studies": re.compile(r"rewrite|(^|_)priors?(_|$)|PriorsOf|zoo", re.I),
}
"""Package -> identifiers it must not hold (names defined, imported, read or passed by keyword;
docstrings and comments are free to explain)."""

MOVED_TO_THE_APPLICATION = ("DEFAULT_TUNED", "FAMILY_TUNED", "config_from_params", "PRIOR_WEIGHT")
"""Tuning names that once lived in the engine and now live in ``rewrite_tuner``."""


def identifiers(path: Path) -> dict[str, int]:
    """Every identifier of a module (a name, attribute, definition, argument, import alias or
    keyword) -> the first line it is on."""
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.alias):
            names = [node.asname or node.name.rpartition(".")[2]]
        elif isinstance(node, ast.keyword) and node.arg:
            names = [node.arg]
        else:
            continue
        for name in names:
            out.setdefault(name, node.lineno)
    return out


def vocabulary_leaks(root: Path, vocabulary: Mapping[str, re.Pattern[str]]) -> list[str]:
    """``file:line name`` for every identifier of a package that its vocabulary rule forbids."""
    leaks = []
    for name, path in find_modules(root, set(vocabulary)).items():
        pattern = vocabulary[name.split(".")[0]]
        for ident, line in sorted(identifiers(path).items(), key=lambda kv: kv[1]):
            if pattern.search(ident):
                leaks.append(f"{path.relative_to(root)}:{line} {ident}")
    return leaks


def test_the_engine_holds_no_tuning_name_and_the_framework_no_rewriting_name() -> None:
    leaks = vocabulary_leaks(ROOT, VOCABULARY)
    assert not leaks, "names of another layer's ideas:\n" + "\n".join(leaks)
    engine = {i for p in find_modules(ROOT, {"rewrite"}).values() for i in identifiers(p)}
    assert not engine & set(MOVED_TO_THE_APPLICATION)


def test_a_planted_leak_is_reported(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "engine/__init__.py": "",
            "engine/search.py": (
                '"""The trials of a study are explained here, which is free."""\n'
                "def run(graph):\n"
                "    tuned = graph\n"  # a tuning name in the engine
                "    return tuned\n"
            ),
            "framework/__init__.py": "from framework.plot import draw\n",
            "framework/plot.py": "def draw(rule_priors=None):\n    return rule_priors\n",
        },
    )
    vocabulary = {"engine": VOCABULARY["rewrite"], "framework": VOCABULARY["studies"]}
    assert sorted(vocabulary_leaks(root, vocabulary)) == [
        "engine/search.py:3 tuned",
        "framework/plot.py:1 rule_priors",
    ]


# ------------------------------------------------------------------ readable functions
def long_functions(paths: list[Path], root: Path, most: int = 100) -> list[str]:
    """``file:line name (lines)`` for every function of ``paths`` longer than ``most`` lines
    (its decorators, signature, docstring and body)."""
    out = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - first + 1
                if lines > most:
                    out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines})")
    return out


def test_no_function_is_over_100_lines() -> None:
    paths = [*find_modules(ROOT, set(LAYERS)).values(), *sorted(ROOT.glob("benchmarks/*.py"))]
    long = long_functions(paths, ROOT)
    assert not long, "functions over 100 lines (split them into named steps):\n" + "\n".join(long)


def test_a_planted_long_function_is_reported(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(99))
    root = _plant(
        tmp_path, {"pkg/a.py": f"def short():\n{body}\n\ndef long():\n{body}    return 1\n"}
    )
    assert long_functions([root / "pkg" / "a.py"], root) == ["pkg/a.py:103 long (101)"]
