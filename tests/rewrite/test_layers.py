"""The layers inside ``rewrite``, and no package binding a name that hides one of its submodules.

``rewrite`` is layered like the packages above it (`tests.test_architecture`), one level finer:
each top-level module or subpackage of ``rewrite`` sits in one layer of `REWRITE_LAYERS`, and a
module imports only modules of its own layer or of the layers below (inside a layer the modules
are peers; the no-cycle test of `tests.test_architecture` keeps them acyclic). The import graph
is `tests.test_architecture.import_graph`'s: imports inside functions count, annotation-only
imports do not.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence, Set
from pathlib import Path

from tests.test_architecture import ROOT, _plant, find_modules, import_graph

REWRITE_LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("foundation", frozenset({"errors", "tensor", "ir", "stats", "devices", "_tensat_models"})),
    ("ops", frozenset({"ops", "epilogue"})),
    ("graphs", frozenset({"builder", "serialize", "reference", "torch_converters"})),
    ("analysis", frozenset({"costmodel", "mesh_cost", "verify", "prove"})),
    ("rules and lowering", frozenset({"rules", "lowering"})),
    ("import", frozenset({"torch_import", "zoo", "zoo_tensat"})),
    ("measurement", frozenset({"measurement"})),
    ("search", frozenset({"optimize", "plans"})),
    ("products", frozenset({"pytorch", "arrays"})),
)
"""Bottom-up: (layer, the top-level modules and subpackages of ``rewrite`` in it). The package's
own ``__init__`` (the public names) sits above them all.

- foundation: errors, the IR and its tensors, device profiles, statistics helpers;
- ops: the op registry and its semantics hooks;
- graphs: building, serializing and evaluating graphs (numpy reference), torch op converters;
- analysis: the cost model (one device and a mesh), region and whole-graph verification, proofs;
- rules and lowering: the rewrite rules; IR graphs as PyTorch programs and modules;
- import: graphs from PyTorch modules, the model zoos;
- measurement: timing graphs in PyTorch, calibrating profiles;
- search: the rewrite search (and its strategies), the parallel planner;
- products: optimizing a PyTorch module or an array program, the ``torch.compile`` backend.
"""


def layer_of(module: str, package: str, layers: Sequence[tuple[str, Set[str]]]) -> int | None:
    """Index in ``layers`` of ``module`` (a module of ``package``); ``len(layers)`` for the
    package's own ``__init__``; None when its top-level unit is in no layer."""
    if module == package:
        return len(layers)
    unit = module.split(".")[1]
    return next((i for i, (_, units) in enumerate(layers) if unit in units), None)


def sublayer_violations(
    root: Path, package: str, layers: Sequence[tuple[str, Set[str]]]
) -> list[str]:
    """``"path:line imports module"`` for every import of a module of ``package`` from a lower
    layer to a higher one, and ``"path: in no layer"`` for a module whose unit is unlisted."""
    modules, graph = import_graph(root, {package})
    out = []
    for m, deps in sorted(graph.items()):
        here = layer_of(m, package, layers)
        if here is None:
            out.append(f"{modules[m].relative_to(root)}: in no layer")
            continue
        for t, line in sorted(deps.items()):
            there = layer_of(t, package, layers)
            if there is not None and there > here:
                out.append(f"{modules[m].relative_to(root)}:{line} imports {t}")
    return out


def _lazy_names(tree: ast.Module) -> list[str]:
    """The names a module exports through `lazyimport.lazy_exports` (the keys of the dict it
    passes, written inline or assigned to a name at module level)."""
    dicts = {
        t.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "lazy_exports"
            and len(node.args) >= 2
        ):
            arg = node.args[1]
            found = dicts.get(arg.id) if isinstance(arg, ast.Name) else arg
            if isinstance(found, ast.Dict):
                out += [k.value for k in found.keys if isinstance(k, ast.Constant)]
    return out


def shadowed_submodules(root: Path, packages: Set[str]) -> list[str]:
    """``"package.name"`` for every name a package ``__init__`` binds (by an import, a def, a
    class, an assignment or a lazy export) to something other than its own submodule of that
    name: which of the two ``package.name`` is would depend on the order of imports."""
    modules = find_modules(root, packages)
    out = []
    for pkg, path in sorted(modules.items()):
        if path.name != "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        bound: list[tuple[str, str | None]] = [(n, None) for n in _lazy_names(tree)]
        for node in tree.body:  # (name, the module it is, if one)
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                bound += [(a.asname or a.name, f"{node.module}.{a.name}") for a in node.names]
            elif isinstance(node, ast.FunctionDef | ast.ClassDef):
                bound.append((node.name, None))
            elif isinstance(node, ast.Assign):
                bound += [(t.id, None) for t in node.targets if isinstance(t, ast.Name)]
        out += sorted(
            {f"{pkg}.{n}" for n, what in bound if f"{pkg}.{n}" in modules and what != f"{pkg}.{n}"}
        )
    return out


def test_rewrite_imports_only_its_own_layer_and_those_below() -> None:
    wrong = sublayer_violations(ROOT, "rewrite", REWRITE_LAYERS)
    assert not wrong, "imports against rewrite's layers:\n" + "\n".join(wrong)


def test_no_package_binds_a_name_that_hides_its_submodule() -> None:
    packages = {"rewrite", "spaces", "tuner", "structure", "studies", "rewrite_tuner", "lazyimport"}
    assert shadowed_submodules(ROOT, packages) == []


# ------------------------------------------------------------------ the checkers' own tests
_LAYERS: Mapping[str, Set[str]] = {"low": {"a"}, "high": {"b"}}


def test_an_upward_import_and_an_unlisted_module_are_reported(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.b import g\n",
            "pkg/a.py": "def f():\n    from pkg.b import g\n\n    return g()\n",
            "pkg/b.py": "from pkg.a import f\n\ndef g():\n    return 1\n",
            "pkg/c.py": "from pkg.a import f\n",
        },
    )
    layers = list(_LAYERS.items())
    assert sublayer_violations(root, "pkg", layers) == [
        "pkg/a.py:2 imports pkg.b",
        "pkg/c.py: in no layer",
    ]


def test_a_function_hiding_its_submodule_is_reported(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "pkg/__init__.py": (
                "from pkg import sub\n"  # the submodule itself: fine
                "from pkg.cost import cost\n"  # a function named like its module: hidden
                "from pkg.other import helper as sub2\n"
                "__getattr__, __dir__ = lazy_exports(__name__, {'sub3': 'pkg.other'})\n"
            ),
            "pkg/sub.py": "",
            "pkg/cost.py": "def cost():\n    return 1\n",
            "pkg/other.py": "def helper():\n    return 2\n",
            "pkg/sub2.py": "",
            "pkg/sub3.py": "",
        },
    )
    assert shadowed_submodules(root, {"pkg"}) == ["pkg.cost", "pkg.sub2", "pkg.sub3"]
