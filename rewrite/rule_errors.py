"""Exception classes of the rewrite rules, the z3 prover and the random-testing verifier.

Kept apart from `rewrite.errors` (owned by the IR); every class derives from
`rewrite.errors.RewriteError`, so ``except RewriteError`` still catches them.
"""

from __future__ import annotations

from rewrite.errors import RewriteError

__all__ = [
    "BackendError",
    "MatchError",
    "RuleError",
    "RuleRejectedError",
    "VerificationError",
]


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


class BackendError(RewriteError, RuntimeError):
    """The requested array backend is unusable (cupy missing, no CUDA device)."""
