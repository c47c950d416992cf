"""Rule priors informed by search logs: offline benchmarking of rules, and the prior family the
tuner explores instead of one free weight per rule.

Offline benchmarking (`benchmark_rules`) runs the search on a training suite and counts, per
rule, how often it fired and how often it appears on the rewrite path of a final Pareto graph
(so enabling rewrites count, not only the last one) into a `RuleEvidence`.

`PriorFamily` turns that evidence into priors with three kinds of numbers a tuner can learn in a
few dozen trials:

* each rule's *usefulness rate*, ``used / fired`` shrunk towards its family's rate (and the
  family's towards the global rate) with ``shrinkage`` pseudo-firings, so a rule the training
  suite never fired gets its family's rate rather than zero, and one that fired often and never
  helped gets close to zero;
* ``specificity`` ``s``: weights are multiplied by ``pattern_size ** s``, where the pattern size
  is the number of ops the rule matches. Generic rules (one-op patterns such as
  ``fuse_elementwise``) can destroy the larger patterns specific rules need (``fuse_rms_norm``
  matches six ops); a positive ``s`` tries the specific rules first. It is a property of rules,
  not of workloads, so it transfers to models whose patterns the training suite lacks;
* ``family_weights``: a multiplier per rule family (normalized to mean 1 over the families; equal
  weights leave the rates unchanged).

Then ``prior = (1 - weight) * uniform + weight * informed``: ``weight = 0`` is the search's
uniform default. The search draws a rule among those with a site with probability proportional
to ``prior ** beta * credit ** (1 - beta)`` (`SearchConfig.beta`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rewrite.errors import PriorsError

if TYPE_CHECKING:
    from rewrite.ir import Graph
    from rewrite.optimize.config import SearchConfig
    from rewrite.optimize.result import SearchResult
    from rewrite.rules.base import Rule

__all__ = ["PriorFamily", "RuleEvidence", "benchmark_rules", "pattern_size"]

#: Pseudo-firings of the family rate (and of the global rate for a family) in a rule's rate.
DEFAULT_SHRINKAGE = 20.0


@dataclass(frozen=True)
class RuleEvidence:
    """Per-rule counts over the searches of an offline benchmark.

    Attributes:
        fired: Rule name -> rewrites of that rule applied.
        used: Rule name -> occurrences on the rewrite paths of final Pareto graphs.
        runs: Number of searches counted.
    """

    fired: dict[str, float] = field(default_factory=dict)
    used: dict[str, float] = field(default_factory=dict)
    runs: int = 0

    @classmethod
    def from_results(cls, results: Iterable[SearchResult]) -> RuleEvidence:
        """Count firings and Pareto-path occurrences over ``results``."""
        fired: dict[str, float] = {}
        used: dict[str, float] = {}
        runs = 0
        for r in results:
            runs += 1
            for name in r.rule_names:
                fired[name] = fired.get(name, 0.0) + r.stats.rules.get(name, {}).get("fired", 0)
                used.setdefault(name, 0.0)
            for sol in r.pareto:
                for rule in sol.rules:
                    used[rule] = used.get(rule, 0.0) + 1.0
        return cls(fired, used, runs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (round-trips through `from_dict`)."""
        return {"fired": dict(self.fired), "used": dict(self.used), "runs": self.runs}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RuleEvidence:
        """Read `to_dict`'s form.

        Raises:
            PriorsError: On a malformed document.
        """
        try:
            fired = {str(k): float(v) for k, v in d["fired"].items()}
            used = {str(k): float(v) for k, v in d["used"].items()}
            runs = int(d["runs"])
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise PriorsError(
                f"Rule evidence must be {{'fired': {{rule: n}}, 'used': {{rule: n}}, 'runs': n}}, "
                f"but got {d!r} ({err})."
            ) from None
        bad = {k: v for k, v in {**fired, **used}.items() if not (math.isfinite(v) and v >= 0)}
        if bad or runs < 0:
            raise PriorsError(
                f"Rule evidence counts must be finite and >= 0, but got {bad or runs}."
            )
        return cls(fired, used, runs)


def pattern_size(rule: Rule) -> int:
    """Number of ops a rule's pattern matches (its specificity), at least 1."""
    from rewrite.rules.pattern import P

    def size(p: Any) -> int:
        return 1 + sum(size(a) for a in p.args) if isinstance(p, P) else 0

    return max(1, sum(size(p) for p in rule.pattern))


@dataclass(frozen=True)
class PriorFamily:
    """The informed prior family over a fixed rule list (see the module docstring).

    Attributes:
        rules: Rule names, in search order.
        families: Rule name -> family name.
        sizes: Rule name -> pattern size (`pattern_size`).
        evidence: Counts from an offline benchmark.
        shrinkage: Pseudo-firings of the family (and global) rate.
    """

    rules: tuple[str, ...]
    families: dict[str, str]
    sizes: dict[str, int]
    evidence: RuleEvidence
    shrinkage: float = DEFAULT_SHRINKAGE

    @classmethod
    def from_rules(
        cls, rules: Sequence[Rule], evidence: RuleEvidence, shrinkage: float = DEFAULT_SHRINKAGE
    ) -> PriorFamily:
        """The family over ``rules`` (e.g. `rewrite.optimize.default_rules()`)."""
        return cls(
            tuple(r.name for r in rules),
            {r.name: r.family for r in rules},
            {r.name: pattern_size(r) for r in rules},
            evidence,
            float(shrinkage),
        )

    @classmethod
    def centred_on(cls, rules: Sequence[Rule], priors: Mapping[str, float]) -> PriorFamily:
        """The family over ``rules`` whose informed member (``weight`` 1, ``specificity`` 0,
        equal family weights) is ``priors`` renormalized over ``rules`` (a rule ``priors`` does
        not name gets 0): its members explore around given priors, e.g. a tuned priors file
        applied to a new model. Evidence of one firing per rule, used as often as its prior,
        without shrinkage, so each rule's rate is its prior. Empty ``priors`` mean uniform (as
        an empty `RulePriors` does).

        Raises:
            PriorsError: If ``priors`` holds a negative or non-finite value, or gives every rule
                of ``rules`` 0.
        """
        names = [r.name for r in rules]
        priors = priors or dict.fromkeys(names, 1.0)
        bad = {k: v for k, v in priors.items() if not (math.isfinite(v) and v >= 0)}
        if bad:
            raise PriorsError(f"Priors must be finite and >= 0, but got {bad}.")
        if not any(priors.get(n, 0.0) > 0 for n in names):
            raise PriorsError(
                f"The priors give every rule of the catalogue 0 (they name {sorted(priors)[:5]}"
                f"...); a family cannot be centred on them."
            )
        evidence = RuleEvidence(dict.fromkeys(names, 1.0), {n: priors.get(n, 0.0) for n in names})
        return cls(
            tuple(names),
            {r.name: r.family for r in rules},
            {r.name: pattern_size(r) for r in rules},
            evidence,
            0.0,
        )

    @property
    def family_names(self) -> list[str]:
        """Families of the rules, in first-appearance order."""
        return list(dict.fromkeys(self.families[r] for r in self.rules))

    def rates(self) -> dict[str, float]:
        """Each rule's usefulness rate, shrunk towards its family's and the global rate."""
        fired, used, a = self.evidence.fired, self.evidence.used, self.shrinkage
        f_tot = sum(fired.get(r, 0.0) for r in self.rules)
        u_tot = sum(used.get(r, 0.0) for r in self.rules)
        glob = (u_tot + 1.0) / (f_tot + 1.0 + len(self.rules))  # never 0: a weak floor
        fam_rate: dict[str, float] = {}
        for fam in self.family_names:
            members = [r for r in self.rules if self.families[r] == fam]
            uf = sum(used.get(r, 0.0) for r in members)
            ff = sum(fired.get(r, 0.0) for r in members)
            fam_rate[fam] = (uf + a * glob) / (ff + a)
        return {
            r: (used.get(r, 0.0) + a * fam_rate[self.families[r]]) / (fired.get(r, 0.0) + a)
            for r in self.rules
        }

    def priors(
        self,
        weight: float,
        specificity: float = 0.0,
        family_weights: Mapping[str, float] | None = None,
    ) -> dict[str, float]:
        """Rule priors of one member of the family.

        Args:
            weight: Mix between uniform (0) and the informed prior (1), in [0, 1].
            specificity: Exponent of the pattern size, >= 0.
            family_weights: Family -> non-negative multiplier (normalized over the families;
                missing families get the mean); None is uniform.

        Returns:
            Rule name -> prior, summing to 1.

        Raises:
            PriorsError: On a weight outside [0, 1], a negative specificity or family weight, or
                an unknown family.
        """
        if not (0.0 <= weight <= 1.0):
            raise PriorsError(f"`weight` must lie in [0, 1], but got {weight!r}.")
        if not (specificity >= 0.0 and math.isfinite(specificity)):
            raise PriorsError(f"`specificity` must be a finite number >= 0, got {specificity!r}.")
        fams = self.family_names
        fw = dict(family_weights or {})
        unknown = sorted(set(fw) - set(fams))
        if unknown:
            raise PriorsError(f"Unknown rule families {unknown}; the families are {fams}.")
        if any(not (v >= 0.0 and math.isfinite(v)) for v in fw.values()):
            raise PriorsError(f"Family weights must be finite and >= 0, but got {fw}.")
        mean = sum(fw.values()) / len(fw) if fw else 1.0
        mult = {f: fw.get(f, mean) for f in fams}
        total = sum(mult.values())
        mult = {f: (v / total * len(fams) if total > 0 else 1.0) for f, v in mult.items()}
        rates = self.rates()
        q = np.array(
            [
                mult[self.families[r]] * rates[r] * float(self.sizes[r]) ** specificity
                for r in self.rules
            ]
        )
        n = len(self.rules)
        q = q / q.sum() if q.sum() > 0 else np.full(n, 1.0 / n)
        p = (1.0 - weight) / n + weight * q
        return dict(zip(self.rules, (float(x) for x in p / p.sum())))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (round-trips through `from_dict`)."""
        return {
            "rules": list(self.rules),
            "families": dict(self.families),
            "sizes": dict(self.sizes),
            "evidence": self.evidence.to_dict(),
            "shrinkage": self.shrinkage,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PriorFamily:
        """Read `to_dict`'s form.

        Raises:
            PriorsError: On a malformed document.
        """
        try:
            rules = tuple(str(r) for r in d["rules"])
            families = {str(k): str(v) for k, v in d["families"].items()}
            sizes = {str(k): int(v) for k, v in d["sizes"].items()}
            evidence = RuleEvidence.from_dict(d["evidence"])
            shrinkage = float(d.get("shrinkage", DEFAULT_SHRINKAGE))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise PriorsError(f"A prior family document is malformed: {err!r}.") from None
        missing = [r for r in rules if r not in families or r not in sizes]
        if missing or not rules:
            raise PriorsError(
                f"A prior family needs a family and a size for every rule: {missing}."
            )
        return cls(rules, families, sizes, evidence, shrinkage)


def benchmark_rules(
    workloads: Mapping[str, Graph],
    config: SearchConfig,
    seeds: Sequence[int],
    device: Any = "h100",
    rules: Sequence[Rule] | None = None,
    measure: bool | str = False,
    workers: int = 1,
) -> tuple[RuleEvidence, dict[str, list[SearchResult]]]:
    """Offline benchmarking of rules: search every workload with every seed, count the evidence.

    Args:
        workloads: Name -> graph of the training suite.
        config: The search config (its ``seed`` is replaced by each of ``seeds``); uniform priors.
        seeds: Search seeds.
        device: Cost-model device.
        rules: The rules (default: the verified catalogue).
        measure: Re-time every result's Pareto graphs (`rewrite.search`'s ``measure``).
        workers: Searches run at once (`rewrite.optimize.suite.run_searches`).

    Returns:
        The evidence, and the results by workload (one per seed, in ``seeds`` order).
    """
    from rewrite.optimize.suite import run_searches

    kwargs: dict[str, Any] = {"measure": measure, **({"rules": rules} if rules is not None else {})}
    jobs = [
        (g, config.replace(seed=int(s)), None, device, kwargs)
        for g in workloads.values()
        for s in seeds
    ]
    done = iter(run_searches(jobs, 1 if measure else workers))  # timings want the CPU alone
    results = {w: [next(done) for _ in seeds] for w in workloads}
    return RuleEvidence.from_results(r for rs in results.values() for r in rs), results
