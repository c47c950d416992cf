"""Exception and warning classes of the `rewrite` package.

Every error message states the rule that was broken, the offending values and a fix.
"""

from __future__ import annotations

__all__ = [
    "ArrayProgramError",
    "BackendError",
    "CostModelError",
    "EvaluationError",
    "GraphError",
    "MatchError",
    "MeasureError",
    "ModuleError",
    "ModuleMismatchError",
    "OpaqueOpWarning",
    "PlanError",
    "PriorsError",
    "RewriteError",
    "RuleError",
    "RuleRejectedError",
    "SearchConfigError",
    "SearchError",
    "SerializationError",
    "ShapeError",
    "ShapeReductionError",
    "TorchImportError",
    "UnknownOpError",
    "VerificationError",
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


class ArrayProgramError(RewriteError, ValueError):
    """An array program uses a construct the array front end cannot import (`rewrite.arrays`)."""


class EvaluationError(RewriteError, RuntimeError):
    """A graph cannot be evaluated by the numpy reference (opaque op, missing input)."""


class PlanError(RewriteError, ValueError):
    """A parallel plan is malformed, cannot be expressed by DTensor, or cannot be loaded."""


class CostModelError(RewriteError, ValueError):
    """A device profile is invalid or unknown."""


class RuleError(RewriteError, ValueError):
    """A rule is malformed (bad pattern, duplicate name, unknown family or objective tag)."""


class MatchError(RewriteError, ValueError):
    """A site does not match the rule it is applied with (stale site, wrong graph)."""


class RuleRejectedError(RuleError):
    """A rule failed the verification gate (z3 proof or random testing).

    Attributes:
        rule: The rejected rule's name.
        layer: ``"z3"`` or ``"random"``.
        detail: The verdict (counterexample, ``unknown`` reason, or mismatch summary).
    """

    def __init__(self, rule: str, layer: str, detail: str) -> None:
        super().__init__(f"rule {rule!r} was rejected by the {layer} check: {detail}")
        self.rule, self.layer, self.detail = rule, layer, detail


class VerificationError(RewriteError, RuntimeError):
    """A graph cannot be checked (unsupported op in the requested mode, mismatched signatures)."""


class ShapeReductionError(VerificationError):
    """Graphs have no shape-reduced instantiation (a size relation the reduction cannot keep)."""


class BackendError(RewriteError, RuntimeError):
    """The requested array backend is unusable (cupy missing, no CUDA device)."""


class MeasureError(RewriteError, RuntimeError):
    """A graph cannot be lowered to PyTorch or measured (opaque op, bad inputs, bad profile fit)."""


class ModuleError(RewriteError, RuntimeError):
    """A graph cannot become a PyTorch module (opaque op, missing or meta weights)."""


class ModuleMismatchError(ModuleError):
    """A rewritten module's outputs differ from the original module's beyond the tolerance.

    Attributes:
        max_abs: Largest absolute difference over the worst output.
        max_rel: Largest relative difference over the worst output.
        node: ``"%<id> (<op>)"`` of the first node whose PyTorch value differs from the graph's
            numpy reference, or None when every node agrees with it.
    """

    def __init__(self, message: str, max_abs: float, max_rel: float, node: str | None) -> None:
        super().__init__(message)
        self.max_abs, self.max_rel, self.node = max_abs, max_rel, node


class SearchError(RewriteError, RuntimeError):
    """The search could not run (no rules, a worker failed, an unusable input graph)."""


class SearchConfigError(RewriteError, ValueError):
    """A `SearchConfig` knob is out of its valid range or of the wrong type."""


class PriorsError(RewriteError, ValueError):
    """Rule priors are invalid: unknown rule, negative or non-finite weight, bad file."""


class OpaqueOpWarning(UserWarning):
    """An imported graph contains ops the registry does not know (kept as opaque nodes)."""
