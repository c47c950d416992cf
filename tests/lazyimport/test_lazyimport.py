"""`lazyimport.lazy_exports`: names load on first access, once; and it is the only module-level
``__getattr__`` of the project's packages."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

from tests.test_architecture import LAYERS, ROOT, _plant, find_modules


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _plant(
        tmp_path,
        {
            "lazypkg/__init__.py": (
                "from lazyimport import lazy_exports\n"
                "_EXPORTS = {'heavy': 'lazypkg.slow'}\n"
                "__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, submodules=['sub'])\n"
            ),
            "lazypkg/slow.py": "def heavy():\n    return 'heavy'\n",
            "lazypkg/sub.py": "VALUE = 3\n",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("lazypkg")
    for name in [m for m in sys.modules if m.split(".")[0] == "lazypkg"]:
        del sys.modules[name]


def test_a_name_loads_its_module_on_first_access_only(planted) -> None:
    assert "lazypkg.slow" not in sys.modules
    assert planted.heavy() == "heavy"
    assert "lazypkg.slow" in sys.modules and "heavy" in vars(planted)  # stored: loaded once
    assert planted.sub.VALUE == 3  # a lazy submodule
    assert {"heavy", "sub"} <= set(dir(planted))


def test_an_unknown_name_is_an_attribute_error(planted) -> None:
    with pytest.raises(AttributeError, match="module 'lazypkg' has no attribute 'light'"):
        _ = planted.light
    with pytest.raises(ImportError):
        exec("from lazypkg import light", {})


def test_no_package_writes_its_own_module_getattr() -> None:
    own = []
    for name, path in find_modules(ROOT, set(LAYERS) - {"lazyimport"}).items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                own.append(name)
    assert own == ["rewrite.lowering.source"]  # builds a class on first use, imports nothing
