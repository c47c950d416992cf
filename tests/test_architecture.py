"""The package layering and the absence of import cycles, read from the source (no imports run).

Layers, bottom up: the engine ``rewrite`` stands alone; ``spaces`` <- ``tuner`` <- ``structure``
<- ``studies``, and ``studies`` (which still holds the rewrite study) imports ``rewrite``; a
package imports only those below it. Between modules there is no import cycle, counting imports
inside functions. A name imported from a package's ``__init__`` counts as an import of the module
that defines it (``from rewrite.ops import get_op`` is an import of ``rewrite.ops.base``); a plain
``import rewrite`` (the public API, imported lazily by design) counts as none. Imports under
``if TYPE_CHECKING:`` are annotations only and do not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BELOW = {
    "spaces": set(),
    "rewrite": set(),
    "tuner": {"spaces"},
    "structure": {"spaces", "tuner"},
    "studies": {"spaces", "rewrite", "tuner", "structure"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in BELOW:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _reexports(modules: dict[str, Path]) -> dict[str, dict[str, str]]:
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


def _resolve(target: str, name: str | None, modules: dict[str, Path], reexports: dict) -> str:
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


def _imports(name: str, path: Path, modules: dict[str, Path], reexports: dict) -> dict[str, int]:
    """Modules of ours that ``name`` imports, with a line number."""
    tree = ast.parse(path.read_text())
    annotations_only = {
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for sub in ast.walk(node)
    }
    is_pkg = path.name == "__init__.py"
    out: dict[str, int] = {}
    for node in ast.walk(tree):
        if id(node) in annotations_only:
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


MODULES = _modules()
REEXPORTS = _reexports(MODULES)
GRAPH = {m: _imports(m, p, MODULES, REEXPORTS) for m, p in MODULES.items()}


def test_packages_import_only_the_layers_below() -> None:
    wrong = [
        f"{MODULES[m].relative_to(ROOT)}:{line} imports {t}"
        for m, deps in GRAPH.items()
        for t, line in deps.items()
        if (top := t.split(".")[0]) != m.split(".")[0] and top not in BELOW[m.split(".")[0]]
    ]
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
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


def test_no_import_cycle_between_modules() -> None:
    inits = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    graph = {m: set(deps) - inits for m, deps in GRAPH.items() if m not in inits}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
