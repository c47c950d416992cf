"""Exception and warning classes of the `rewrite` package.

Every error message states the rule that was broken, the offending values and a fix.
"""

from __future__ import annotations

__all__ = [
    "CostModelError",
    "EvaluationError",
    "GraphError",
    "OpaqueOpWarning",
    "RewriteError",
    "SerializationError",
    "ShapeError",
    "TorchImportError",
    "UnknownOpError",
]


class RewriteError(Exception):
    """Base class of every error raised by `rewrite`."""


class ShapeError(RewriteError, ValueError):
    """Shape or dtype inference rejected an op's inputs or attributes."""


class UnknownOpError(RewriteError, KeyError):
    """An op name is not in the registry (`rewrite.ops.op_names()` lists the known ones)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class GraphError(RewriteError, ValueError):
    """A graph is malformed: dangling reference, cycle, type mismatch in a replacement."""


class SerializationError(RewriteError, ValueError):
    """A serialized graph or device profile is corrupt or from a newer format version."""


class TorchImportError(RewriteError, RuntimeError):
    """`torch.export` could not capture a module."""


class EvaluationError(RewriteError, RuntimeError):
    """A graph cannot be evaluated by the numpy reference (opaque op, missing input)."""


class CostModelError(RewriteError, ValueError):
    """A device profile is invalid or unknown."""


class OpaqueOpWarning(UserWarning):
    """An imported graph contains ops the registry does not know (kept as opaque nodes)."""
