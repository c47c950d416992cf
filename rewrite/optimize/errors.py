"""Exception classes of `rewrite.optimize` (the search behind `rewrite.search`).

They subclass `rewrite.errors.RewriteError`, so ``except RewriteError`` catches them too.
"""

from __future__ import annotations

from rewrite.errors import RewriteError

__all__ = ["PriorsError", "SearchConfigError", "SearchError"]


class SearchError(RewriteError, RuntimeError):
    """The search could not run (no rules, a worker failed, an unusable input graph)."""


class SearchConfigError(RewriteError, ValueError):
    """A `SearchConfig` knob is out of its valid range or of the wrong type."""


class PriorsError(RewriteError, ValueError):
    """Rule priors are invalid: unknown rule, negative or non-finite weight, bad file."""
