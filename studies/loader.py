"""Loading user code for the CLI: study files (`tuner run`) and evaluate references (`resume`).

This executes the user's own Python files and modules, which the user names on the command line
or which they recorded when creating the study (an import path, never pickled code). Stored study
data and exported files are never executed.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from studies.errors import StudyFileError
from studies.references import STUDY_FILE_PREFIX as _PREFIX
from studies.references import current_module, only_evaluate

__all__ = ["import_file", "load_study_file", "resolve_evaluate"]


def import_file(path: Path, name: str, what: str = "file") -> ModuleType:
    """Import the ``.py`` file ``path`` as module ``name``, kept in `sys.modules` (worker
    processes unpickle the functions it defines), with its folder on `sys.path` while it runs
    (so it imports its neighbours); it runs again when imported again.

    Raises:
        StudyFileError: If it cannot be imported (the error and, for a syntax error, the line
            are named; ``what`` says what the file is).
    """
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise StudyFileError(f"Cannot import {str(path)!r} as a Python module.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))  # let the file import its neighbours
    try:
        spec.loader.exec_module(module)
    except SyntaxError as err:
        del sys.modules[name]
        raise StudyFileError(
            f"{path}:{err.lineno}: syntax error in the {what}: {err.msg}."
        ) from err
    except Exception as err:
        del sys.modules[name]
        raise StudyFileError(
            f"Importing {what} {str(path)!r} failed with {type(err).__name__}: {err}"
        ) from err
    finally:
        sys.path.remove(str(path.parent))
    return module


def load_study_file(path: str | os.PathLike[str]) -> ModuleType:
    """Import a study file as a module named ``__tuner_study__<stem>``.

    The module must define a callable ``main`` or a ``study`` (`studies.Study`). It stays in
    `sys.modules` so worker processes can unpickle functions defined in it.

    Raises:
        StudyFileError: If the file is missing, not ``.py``, fails to import (the error and line
            are named), or defines neither ``main()`` nor a ``study``.
    """
    from studies.study import Study

    path = Path(path).resolve()
    if not path.is_file() or path.suffix != ".py":
        raise StudyFileError(f"Study file {str(path)!r} must be an existing .py file.")
    name = _PREFIX + "".join(c if c.isalnum() else "_" for c in path.stem)
    module = import_file(path, name, "study file")
    if callable(getattr(module, "main", None)):
        return module
    study = getattr(module, "study", None)
    if not isinstance(study, Study):
        found = "nothing" if study is None else f"a {type(study).__name__}"
        raise StudyFileError(
            f"Study file {str(path)!r} must define `study = studies.Study(...)` or a function "
            f"`main()`; its `study` is {found}."
        )
    return module


def resolve_evaluate(ref: str) -> Any:
    """Import the evaluate function named by ``ref``.

    Args:
        ref: ``module:qualname``, ``file:PATH:qualname`` (as stored by `tuner run`) or
            ``PATH.py:qualname``; a module that has moved is found where it lives now
            (`studies.references.MOVED_MODULES`).

    Raises:
        StudyFileError: If the module or file cannot be imported or lacks the function.
    """
    if ref.startswith("file:"):
        ref = ref[len("file:") :]
    target, _, qualname = ref.rpartition(":")
    if not target or not qualname:
        raise StudyFileError(
            f"An evaluate reference reads 'module:function' or 'path/file.py:function', got {ref!r}."
        )
    if target.endswith(".py"):
        module = _load_plain_file(target)
    else:
        target = current_module(target)
        try:
            with only_evaluate():
                module = importlib.import_module(target)
        except ImportError as err:
            raise StudyFileError(f"Cannot import module {target!r} for evaluate: {err}") from err
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise StudyFileError(f"{target!r} has no {qualname!r} (evaluate reference {ref!r}).")
    if not callable(obj):
        raise StudyFileError(
            f"Evaluate reference {ref!r} names a {type(obj).__name__}, not a function."
        )
    return obj


def _load_plain_file(path: str) -> ModuleType:
    """Import a study file without requiring it to define `study` / `main`; a `Study` it
    creates at module level stays in memory (`studies.references.only_evaluate`)."""
    p = Path(path).resolve()
    name = _PREFIX + "".join(c if c.isalnum() else "_" for c in p.stem)
    if name in sys.modules:
        return sys.modules[name]
    if not p.is_file():
        raise StudyFileError(f"Evaluate file {str(p)!r} does not exist.")
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise StudyFileError(f"Cannot import {str(p)!r} as a Python module.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with only_evaluate():  # a module-level Study must not create a database here
            spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise StudyFileError(
            f"Importing {str(p)!r} failed with {type(err).__name__}: {err}"
        ) from err
    return module
