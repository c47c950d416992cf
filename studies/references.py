"""Evaluate references: where `tuner resume` finds a study's evaluate function again.

`evaluate_reference` writes them (stored in ``studies.evaluate_ref``); `studies.loader`
resolves them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["STUDY_FILE_PREFIX", "evaluate_reference"]

#: Module-name prefix of study files imported by `tuner run` (`studies.loader.load_study_file`).
STUDY_FILE_PREFIX = "__tuner_study__"


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
