"""Warnings of numerical libraries become log lines instead of console noise.

A model fit raises GPyTorch's ``NumericalWarning`` (jitter added to a Cholesky factor), torch's
``UserWarning`` / ``FutureWarning`` and similar: notes on the numerics of one fit that a person
running a study cannot act on. `numerical_warnings_to_log` turns those into DEBUG lines of the
``studies.warnings`` logger (the CLI shows them with ``-v``) and lets every other warning through.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["is_numerical", "numerical_warnings_to_log"]

logger = logging.getLogger("studies.warnings")

#: Packages whose warnings concern the numerics of a fit.
NUMERICAL = ("torch", "gpytorch", "botorch", "linear_operator", "pyro", "scipy", "sklearn")


def is_numerical(category: type[Warning], filename: str) -> bool:
    """Whether a warning of ``category`` raised at ``filename`` comes from a numerical library."""
    where = filename.replace("\\", "/")
    origin = category.__module__.split(".")[0]
    return origin in NUMERICAL or any(f"/{p}/" in where for p in NUMERICAL)


@contextmanager
def numerical_warnings_to_log() -> Iterator[None]:
    """Within the block, numerical libraries' warnings are logged at DEBUG (once per message
    and place); other warnings are re-issued unchanged when the block ends. Not thread-safe
    (`warnings.catch_warnings`): use it from the thread that drives the study."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        yield
    seen: set[tuple[str, str, int]] = set()
    for w in caught:
        if not is_numerical(w.category, w.filename):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            continue
        key = (str(w.message), w.filename, w.lineno)
        if key not in seen:
            seen.add(key)
            logger.debug("%s: %s (%s:%d)", w.category.__name__, w.message, w.filename, w.lineno)
