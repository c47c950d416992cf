"""Evaluate references: where `tuner resume` finds a study's evaluate function again.

`evaluate_reference` writes them (stored in ``studies.evaluate_ref``); `studies.loader`
resolves them, reading an old module path through `MOVED_MODULES` first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

__all__ = [
    "MOVED_MODULES",
    "STUDY_FILE_PREFIX",
    "current_module",
    "evaluate_reference",
    "importing_for_evaluate",
    "only_evaluate",
]

#: Module-name prefix of study files imported by `tuner run` (`studies.loader.load_study_file`).
STUDY_FILE_PREFIX = "__tuner_study__"

MOVED_MODULES: dict[str, str] = {
    # the built-in rewrite study left the generic framework for the application (issue 35)
    "studies.rewrite_study": "rewrite_tuner.study",
}
"""Old module path -> where it lives now, for every module whose functions a stored study may
name. A stored reference is never rewritten: ``studies.rewrite_study:evaluate_rewrite`` in a
database written before the move still resolves (to ``rewrite_tuner.study``). Moving
such a module adds a row here; a row is never removed."""


_ONLY_EVALUATE: ContextVar[bool] = ContextVar("only_evaluate", default=False)


@contextlib.contextmanager
def only_evaluate() -> Iterator[None]:
    """While a study file is imported for its evaluate function alone (`tuner resume`): a
    `studies.Study` the file creates at module level then opens an in-memory database instead
    of its storage, so importing it from another folder leaves no empty ``study.db`` there."""
    token = _ONLY_EVALUATE.set(True)
    try:
        yield
    finally:
        _ONLY_EVALUATE.reset(token)


def importing_for_evaluate() -> bool:
    """Whether a study file is being imported for its evaluate function alone."""
    return _ONLY_EVALUATE.get()


def current_module(module: str) -> str:
    """Where the module a stored evaluate reference names lives now (`MOVED_MODULES`)."""
    return MOVED_MODULES.get(module, module)


def evaluate_reference(evaluate: Callable[..., Any]) -> str | None:
    """``module:qualname`` (or ``file:PATH:qualname`` for a study file run by `tuner run`) of a
    function `tuner resume` can import again, or ``None`` for lambdas, closures and
    ``__main__`` functions."""
    module = getattr(evaluate, "__module__", None)
    qualname = getattr(evaluate, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        return None
    if module.startswith(STUDY_FILE_PREFIX):
        path = getattr(evaluate, "__globals__", {}).get("__file__")
        return f"file:{path}:{qualname}" if path else None
    if module == "__main__":
        return None
    return f"{module}:{qualname}"
