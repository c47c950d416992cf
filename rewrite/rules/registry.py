"""The rule catalogue and the registry with its verification gate.

`catalogue()` builds the built-in rules (unverified objects); `RuleRegistry.register` admits a
rule only through the gate: a z3 proof on its proof instance (`rewrite.prove.prove_rule`,
time-boxed, ``unknown`` rejects) and random testing on ``samples`` random sample graphs
(`rewrite.verify.Verifier.check_rule`). A rejected rule raises `RuleRejectedError` naming the
layer and z3's counterexample or the first mismatch. Users add their own rules the same way.

`default_registry()` is the verified built-in catalogue (verdicts cached on disk, so after the
first run the gate costs only the random tests).

Thread-safety: registering is not thread-safe; reading a registry is.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from rewrite.errors import RuleError, RuleRejectedError
from rewrite.ir import Graph
from rewrite.prove import ProofResult, prove_rule
from rewrite.rules.algebra import algebra_rules
from rewrite.rules.arith import arith_rules
from rewrite.rules.base import FAMILIES, Rule, Site
from rewrite.rules.contraction import contraction_rules
from rewrite.rules.domain import domain_rules
from rewrite.rules.folding import folding_rules
from rewrite.rules.fusion import MAX_FUSE, fusion_rules
from rewrite.rules.fusion_ops import fusion_op_rules
from rewrite.rules.memory import memory_rules
from rewrite.rules.merging import merging_rules
from rewrite.rules.sharding import sharding_rules
from rewrite.rules.vectorize import vectorize_rules
from rewrite.verify.cache import VerdictCache, default_cache
from rewrite.verify.checker import CheckResult, Verifier

__all__ = ["GateReport", "RuleRegistry", "catalogue", "default_registry", "verify_rule"]


def catalogue(n_shards: int = 2, max_fuse: int = MAX_FUSE) -> list[Rule]:
    """The built-in rules (not yet verified; register them to verify).

    Args:
        n_shards: Device count of the sharding rules.
        max_fuse: Largest fused body of the fusion rules.
    """
    return [
        *algebra_rules(),
        *contraction_rules(),
        *arith_rules(),
        *domain_rules(),
        *vectorize_rules(),
        *merging_rules(),
        *fusion_rules(max_fuse),
        *fusion_op_rules(max_fuse),
        *memory_rules(),
        *folding_rules(),
        *sharding_rules(n_shards),
    ]


@dataclass(frozen=True)
class GateReport:
    """Both verification verdicts of one rule.

    Attributes:
        proof: The z3 verdict.
        random: The random-testing verdict.
    """

    proof: ProofResult
    random: CheckResult

    @property
    def ok(self) -> bool:
        """Whether the rule passes the gate."""
        return self.proof.ok and self.random.ok


def verify_rule(
    rule: Rule,
    *,
    samples: int = 3,
    timeout_ms: int = 2000,
    cache: VerdictCache | None = None,
    verifier: Verifier | None = None,
) -> GateReport:
    """Run both verification layers on ``rule`` (no exception on rejection).

    Args:
        rule: The rule.
        samples: Number of random sample graphs (different random sizes) to test on.
        timeout_ms: z3 time limit.
        cache: Verdict cache for proofs and checks.
        verifier: Random-testing verifier (default: auto mode, 2 tests, numpy or cupy).
    """
    proof = prove_rule(rule, timeout_ms=timeout_ms, cache=cache)
    v = verifier or Verifier(mode="auto", tests=2, cache=cache)
    try:
        graphs = [rule.sample_graph(100 + i, lo=2, hi=6) for i in range(samples)]
        random = v.check_rule(rule, graphs)
    except Exception as exc:  # a builder/sample failure is a rejection, reported as such
        random = CheckResult(False, v.mode, 0, float("nan"), f"random testing failed: {exc!r}")
    return GateReport(proof, random)


class RuleRegistry:
    """Named, verified rules.

    Args:
        rules: Rules to register right away (through the gate unless ``verify`` is False).
        verify: Run the gate on registration (turning it off is for trusted, already verified
            rule sets only).
        samples: Random sample graphs per rule in the gate.
        timeout_ms: z3 time limit per proof.
        cache: Verdict cache (default: the per-machine SQLite cache).
    """

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        *,
        verify: bool = True,
        samples: int = 3,
        timeout_ms: int = 2000,
        cache: VerdictCache | None = None,
    ) -> None:
        self._rules: dict[str, Rule] = {}
        self.reports: dict[str, GateReport] = {}
        self.verify, self.samples, self.timeout_ms = verify, samples, timeout_ms
        self.cache = cache if cache is not None else (default_cache() if verify else None)
        self._verifier = Verifier(mode="auto", tests=2, cache=self.cache)
        for r in rules:
            self.register(r)

    def register(self, rule: Rule) -> Rule:
        """Add ``rule`` after it passes the gate.

        Raises:
            RuleError: If a rule of that name is registered.
            RuleRejectedError: If z3 or random testing rejects the rule.
        """
        if rule.name in self._rules:
            raise RuleError(
                f"rule names must be unique, but {rule.name!r} is already registered; rename it."
            )
        if self.verify:
            rep = verify_rule(
                rule,
                samples=self.samples,
                timeout_ms=self.timeout_ms,
                cache=self.cache,
                verifier=self._verifier,
            )
            self.reports[rule.name] = rep
            if not rep.proof.ok:
                raise RuleRejectedError(rule.name, "z3", f"{rep.proof.verdict}: {rep.proof.detail}")
            if not rep.random.ok:
                raise RuleRejectedError(rule.name, "random", rep.random.detail)
        self._rules[rule.name] = rule
        return rule

    # ------------------------------------------------------------------ access
    def __getitem__(self, name: str) -> Rule:
        try:
            return self._rules[name]
        except KeyError:
            raise RuleError(
                f"no rule named {name!r}; registered: {', '.join(self._rules)}."
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._rules

    def __iter__(self) -> Iterator[Rule]:
        return iter(self._rules.values())

    def __len__(self) -> int:
        return len(self._rules)

    def names(self) -> list[str]:
        """Rule names in registration order."""
        return list(self._rules)

    def family(self, family: str) -> list[Rule]:
        """The rules of ``family``.

        Raises:
            RuleError: For an unknown family.
        """
        if family not in FAMILIES:
            raise RuleError(f"family must be one of {FAMILIES}, but got {family!r}.")
        return [r for r in self._rules.values() if r.family == family]

    def matches(self, graph: Graph, names: Iterable[str] | None = None) -> dict[str, list[Site]]:
        """Every site of every rule (or of ``names``) in ``graph``: rule name -> sites."""
        rules = self._rules.values() if names is None else [self[n] for n in names]
        return {r.name: r.matches(graph) for r in rules}

    def apply(self, graph: Graph, site: Site) -> Graph:
        """Apply ``site`` (its rule is looked up by name)."""
        return self[site.rule].apply(graph, site)


@functools.cache
def default_registry(n_shards: int = 2, max_fuse: int = MAX_FUSE) -> RuleRegistry:
    """The verified built-in catalogue (cached per process; proofs cached per machine)."""
    return RuleRegistry(catalogue(n_shards, max_fuse))
