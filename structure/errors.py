"""Exceptions of the `structure` package."""

from __future__ import annotations

__all__ = [
    "KnowledgeError",
    "StructureError",
    "StructureFormatError",
    "StructureLearningError",
]


class StructureError(ValueError):
    """Base class: a structure, its inputs or its use break a documented rule."""


class KnowledgeError(StructureError):
    """Expert knowledge (required/forbidden edges, formulas) contradicts the tiers or itself."""


class StructureFormatError(StructureError):
    """A stored structure cannot be loaded (unknown or newer `format_version`, missing keys)."""


class StructureLearningError(StructureError):
    """Structure learning cannot run on the given table (too few rows, no columns)."""
