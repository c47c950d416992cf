"""Exceptions raised by `spaces`."""

from __future__ import annotations

__all__ = ["SpaceError"]


class SpaceError(ValueError):
    """A search space, parameter or configuration breaks a rule.

    The message names the rule, the offending value and how to fix it.
    """
