"""Choose a node's parents by how well a GP on them predicts the node.

PC's Fisher-z tests (`structure.learn`) see monotone dependence only, yet the objective of a
function network is often a non-monotone function of a few metrics (Dropwave:
``o = h(||z||)`` with an oscillating ``h``; Alpine2: ``y_k = g(x_k) * y_(k-1)`` with sign
changes). A node's GP reads its parents, so the parent set that matters is the one under which a
GP predicts the node best. `select_parents` finds it by a forward-backward search scored by the
GP's exact leave-one-out log predictive density (Rasmussen & Williams 2006, sec. 5.4.2), with
hyper-parameters fitted by maximum a posteriori for each candidate set:

1. start from the ``base`` set (all parameters: the flat GP's inputs) plus the ``required``;
2. forward: rank the other candidates by distance correlation (Szekely et al. 2007; sees
   non-monotone dependence) with the current leave-one-out residuals, fit a GP with each of the
   ``beam`` best (and the ``prefer``-red ones) added, keep the best if it gains at least
   ``min_gain`` nats plus the log of the number of candidates (the best of many gains by
   chance); stop after ``max_parents`` additions or when nothing gains;
3. backward: drop inputs, least relevant lengthscale first, whose removal costs less than a nat
   (an added metric that interacts with a parameter, as in Alpine2's ``y_k = g(x_k) y_(k-1)``,
   is only found while the parameters are still in the set); with ``keep_base`` the base
   inputs stay;
4. keep the result only if it beats the base set by ``min_gain`` nats; otherwise the base set.

The score is in standardized units of the node, so all sets compete on the same footing, less
``complexity`` nats per input column: the hyper-parameters are fitted on the points that are
then left out one at a time, which flatters larger sets. Small sets are flattered too: on a
pure-noise target a GP on one random column often beats the constant by ``min_gain`` plus the
log of the number of candidates (a MAP lengthscale of a small share of the range fits
coincident pairs; the rate: docs/structure.md, "Structured surrogate"). Starting from the base set, and checking that a chosen metric is itself
predictable (`Selection.predictable`), guard against that. The score carries no lengthscale
prior term, objectives start from all their parameters (no second search from the empty set),
and each backward drop is judged against the last fit; the alternatives and their figures are in
benchmarks/README.md, "bench_structure: design decisions".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from structure.errors import StructureLearningError
from structure.gp import loo_log_density

__all__ = [
    "SelectConfig",
    "Selection",
    "distance_correlation",
    "select_parents",
]


@dataclass(frozen=True)
class SelectConfig:
    """Options of `select_parents`.

    Attributes:
        max_parents: Most inputs (parameters or metrics, each one input) in a forward set.
        beam: Candidates fitted per forward step (the best by distance correlation).
        min_gain: Nats of leave-one-out log density an added input (plus the log of the number
            of candidates), and the forward set over the base set, must gain.
        fit_maxiter: Iteration cap of each GP hyper-parameter fit.
        complexity: Nats charged per input column: leave-one-out scores with
            hyper-parameters fitted on the same points are optimistic by about one nat per
            fitted lengthscale (as AIC charges in-sample fits), which otherwise lets pure-noise
            inputs in.
        recurse: Also select the parents of every metric selected as a parent (down the
            chain); otherwise those metrics keep all parameters as parents.
        max_depth: Deepest metric (counted from the objectives) whose parents are selected.
        sparse_metrics: Select a metric's parameter parents sparsely (`select_parents` with
            ``sparse=True``: the parameters that do not help are dropped, and per-rule
            counters start from their own rule's weight), instead of all of them unless a
            metric parent is found.
        keep_base: Never drop a base input (all parameters, for an objective) in the backward
            step of a dense selection: metric parents are added to the parameters, so an
            effect that the chosen metrics do not carry (a noisy metric, a summary of many
            parameters such as a usefulness score over rule priors) is not lost, at the price
            of a node GP as wide as the flat GP. Off by default: it helped on the noisy
            search-shaped benchmark and hurt on a noiseless function network (figures:
            benchmarks/README.md, "bench_structure: design decisions").
    """

    max_parents: int = 4
    beam: int = 4
    min_gain: float = 2.0
    fit_maxiter: int = 100
    complexity: float = 1.0
    recurse: bool = True
    max_depth: int = 4
    sparse_metrics: bool = True
    keep_base: bool = False

    def __post_init__(self) -> None:
        if self.max_parents < 1 or self.beam < 1 or self.fit_maxiter < 1 or self.min_gain < 0:
            raise StructureLearningError(
                "`max_parents >= 1`, `beam >= 1`, `fit_maxiter >= 1` and `min_gain >= 0` must "
                f"hold, got {self.max_parents=}, {self.beam=}, {self.fit_maxiter=}, "
                f"{self.min_gain=}."
            )


@dataclass(frozen=True)
class Selection:
    """The result of `select_parents`.

    Attributes:
        parents: The chosen inputs (the base set when the forward set does not beat it).
        used_base: Whether the base set was chosen.
        score: Leave-one-out log density of the chosen set (nats, standardized units).
        base_score: That of the base set (None without a base set).
        gains: Per input of a forward set, the nats it gained when added (a base input: what
            removing it costs); ``{}`` for the base set.
        constant_score: That of a constant-mean Gaussian (no inputs).
        predictable: Whether the chosen set beats the constant by ``min_gain`` nats plus the
            log of one more than the number of candidates.
    """

    parents: tuple[str, ...]
    used_base: bool
    score: float
    base_score: float | None
    gains: Mapping[str, float]
    constant_score: float
    predictable: bool

    def strength(self, parent: str) -> float:
        """The parent's share of the summed `gains`, in ``[0, 1]``."""
        total = sum(max(g, 0.0) for g in self.gains.values())
        return 0.0 if total <= 0 else round(max(self.gains.get(parent, 0.0), 0.0) / total, 4)


def select_parents(
    target: np.ndarray,
    candidates: Mapping[str, np.ndarray],
    base: Sequence[str] = (),
    required: Sequence[str] = (),
    prefer: Sequence[str] = (),
    config: SelectConfig | None = None,
    hints: Sequence[str] = (),
    sparse: bool = False,
) -> Selection:
    """Choose the inputs under which a GP predicts `target` best (see the module docstring).

    Args:
        target: ``n``-dim array of the node's values (model units).
        candidates: Input name -> ``n`` or ``n x k`` array (a multi-column parameter is one
            input); scaled to the unit cube here by the observed range.
        base: The set the forward set must beat (e.g. all parameters); empty for none.
        required: Inputs every set contains.
        prefer: Inputs tried at every forward step besides the ``beam`` best ranked (e.g. the
            node's neighbours found by PC).
        config: Options; defaults when None.
        hints: Inputs known to be likely parents (soft knowledge, e.g. a per-rule counter's
            own rule weight): with `sparse`, a second search starts from them, and the backward
            step drops one only when that does not lower the score.
        sparse: Also drop the base inputs that do not help (backward elimination over the
            whole set, even when nothing was added), so a node driven by a few of many
            parameters reads those few; the result replaces the base set when it scores at
            least as well (plus ``min_gain`` if it added inputs).

    Returns:
        The `Selection` (deterministic: the fits start from the prior modes).
    """
    config = config or SelectConfig()
    y = np.asarray(target, dtype=np.float64).reshape(-1)
    scale = y.std(ddof=1) if len(y) > 1 else 0.0
    y = (y - y.mean()) / (scale if scale > 1e-12 else 1.0)
    blocks = {name: _unit(np.asarray(v, dtype=np.float64)) for name, v in candidates.items()}
    missing = [n for n in (*base, *required, *hints) if n not in blocks]
    if missing:
        raise StructureLearningError(f"Inputs {missing} are not among the candidates.")
    kept = [*required, *(base if config.keep_base and not sparse else ())]
    search = _Search(y, blocks, config, kept, prefer, hints)
    # 1. Start from the base set (what the flat GP reads) plus the required inputs.
    base_set = list(dict.fromkeys([*required, *base]))
    base_fit = search.score(base_set)
    chosen, fit, gains = search.run(base_set, prune=sparse)
    if sparse and hints:  # the soft knowledge's own start
        start = list(dict.fromkeys([*required, *hints]))
        other = search.run(start, prune=True)
        if other[1].score > fit.score:
            chosen, fit, gains = other
    constant = search.score([]).score
    # Beating a constant needs the same allowance for chance as adding an input.
    bar = constant + config.min_gain + math.log(1 + len(blocks))
    base_score = base_fit.score if base else None
    added = [n for n in chosen if n not in base_set]
    margin = config.min_gain if added or not sparse else 0.0
    unchanged = set(chosen) == set(base_set) if sparse else not gains
    if base and (unchanged or fit.score < base_fit.score + margin):
        good = base_fit.score >= bar
        return Selection(tuple(base_set), True, base_fit.score, base_score, {}, constant, good)
    good = fit.score >= bar
    return Selection(tuple(chosen), False, fit.score, base_score, gains, constant, good)


class _Search:
    """Forward-backward search over input sets, with cached leave-one-out fits."""

    def __init__(
        self,
        y: np.ndarray,
        blocks: Mapping[str, np.ndarray],
        config: SelectConfig,
        kept: Sequence[str],
        prefer: Sequence[str],
        hints: Sequence[str],
    ) -> None:
        self.y, self.blocks, self.config = y, blocks, config
        # Inputs the backward step never drops: the required ones (and, with
        # `SelectConfig.keep_base`, the base set).
        self.kept, self.prefer, self.hints = set(kept), list(prefer), set(hints)
        self._cache: dict[tuple[str, ...], _Fit] = {}

    def score(self, names: Sequence[str]) -> _Fit:
        """The penalized leave-one-out fit of a GP on `names` (a constant for none)."""
        key = tuple(names)
        if key not in self._cache:
            if not names:
                self._cache[key] = _Fit(*_constant_loo(self.y), np.zeros(0))
            else:
                X = np.concatenate([self.blocks[n] for n in names], axis=1)
                total, means, lengthscales = loo_log_density(X, self.y, self.config.fit_maxiter)
                penalty = self.config.complexity * X.shape[1]
                self._cache[key] = _Fit(total - penalty, means, lengthscales)
        return self._cache[key]

    def run(self, start: list[str], prune: bool) -> tuple[list[str], _Fit, dict[str, float]]:
        """Forward from `start`, then backward (always with `prune`, else only after an
        addition); returns the set, its fit and the per-input gains."""
        config = self.config
        chosen, fit = list(start), self.score(start)
        gains: dict[str, float] = {}
        # 2. Forward: add the inputs that gain the most, tried in order of distance correlation
        # with the current leave-one-out residuals (plus the preferred ones).
        added = 0
        while added < config.max_parents:
            rest = [n for n in self.blocks if n not in chosen]
            if not rest:
                break
            resid = self.y - fit.loo_mean
            ranked = sorted(rest, key=lambda n: (-distance_correlation(self.blocks[n], resid), n))
            tried = [*ranked[: config.beam], *(n for n in self.prefer if n in rest)]
            tried = list(dict.fromkeys(tried))
            new, name = max(((self.score([*chosen, n]), n) for n in tried), key=_by_score)
            # The best of many candidates gains by chance too (about the log of their number
            # for likelihood ratios): an input must beat that as well.
            if new.score - fit.score < config.min_gain + math.log(len(rest)):
                break
            gains[name] = new.score - fit.score
            chosen.append(name)
            fit = new
            added += 1
        if added or prune:
            chosen, fit = self._backward(chosen, fit, gains)
        return chosen, fit, gains

    def _backward(
        self, chosen: list[str], fit: _Fit, gains: dict[str, float]
    ) -> tuple[list[str], _Fit]:
        """3. Backward: drop the inputs (least relevant first, by fitted lengthscale) whose
        removal costs less than a nat (a hinted one: nothing); an added input that interacts
        with a parameter (Alpine2's ``y_k = g(x_k) y_(k-1)``) is only found with the
        parameters still in the set. Records what removing a kept input would cost."""
        order = np.argsort(-_input_relevance(fit, [self.blocks[n].shape[1] for n in chosen]))
        for name in [chosen[i] for i in order[::-1]]:
            if name in self.kept or len(chosen) == 1:
                continue
            smaller = [n for n in chosen if n != name]
            new = self.score(smaller)
            if new.score >= fit.score - (0.0 if name in self.hints else 1.0):
                gains.pop(name, None)
                chosen, fit = smaller, new
            elif name not in gains:  # a base input kept: what removing it would cost
                gains[name] = fit.score - new.score
        return chosen, fit


def _by_score(item: tuple[_Fit, str]) -> tuple[float, str]:
    return item[0].score, item[1]


@dataclass(frozen=True)
class _Fit:
    score: float
    loo_mean: np.ndarray
    lengthscales: np.ndarray  # per input column


def _input_relevance(fit: _Fit, widths: Sequence[int]) -> np.ndarray:
    """Per input (block of columns): the largest inverse lengthscale of its columns."""
    inv = 1.0 / np.maximum(fit.lengthscales, 1e-12)
    edges = np.cumsum([0, *widths])
    return np.array([inv[a:b].max() if b > a else 0.0 for a, b in zip(edges[:-1], edges[1:])])


def _constant_loo(y: np.ndarray) -> tuple[float, np.ndarray]:
    """Leave-one-out log density of a Gaussian with the other points' mean and variance."""
    n = len(y)
    total = y.sum()
    means = (total - y) / (n - 1)
    sq = (y**2).sum()
    var = np.maximum(((sq - y**2) - (n - 1) * means**2) / max(n - 2, 1), 1e-6)
    ll = -0.5 * (np.log(2 * math.pi * var) + (y - means) ** 2 / var)
    return float(ll.sum()), means


def distance_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Sample distance correlation of two samples (rows are observations), in ``[0, 1]``; zero
    only under independence in the population (Szekely, Rizzo & Bakirov 2007)."""

    def centered(v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, dtype=np.float64).reshape(len(v), -1)
        d = np.sqrt(((v[:, None, :] - v[None, :, :]) ** 2).sum(-1))
        return d - d.mean(0) - d.mean(1)[:, None] + d.mean()

    A, B = centered(a), centered(b)
    dcov = (A * B).mean()
    denom = math.sqrt((A * A).mean() * (B * B).mean())
    return 0.0 if denom <= 1e-300 else math.sqrt(max(dcov, 0.0) / denom)


def _unit(v: np.ndarray) -> np.ndarray:
    """Columns scaled to ``[0, 1]`` by their observed range (constant columns become 0.5)."""
    v = v.reshape(v.shape[0], -1)
    lo, hi = v.min(0), v.max(0)
    span = hi - lo
    return np.where(span > 1e-12, (v - lo) / np.where(span > 1e-12, span, 1.0), 0.5)
