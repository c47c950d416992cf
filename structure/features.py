"""Featurization of tracking metrics before structure learning.

Raw search logs report many numbers per trial (one counter per rewrite rule, phase times,
sizes). Structure learning and the GP network need a few informative, roughly Gaussian columns,
so `fit_features` (fitted on the trials table) produces a `FeatureMap` that

1. drops metrics missing in more than ``max_missing`` of the trials,
2. groups per-rule counters named ``rule.<name>.<counter>`` into one family column
   ``rule.*.<counter>`` (their sum over rules),
3. log-transforms (``log1p``) non-negative counts, times and skewed columns,
4. drops near-constant columns and near-duplicates of a kept column,
5. keeps at most ``max_columns`` (plus the ``keep`` names), ranked by their largest absolute Spearman correlation with an
   objective (as BoGraph ranks by ``f_regression``).

Names listed in ``keep`` (formula inputs, required-edge endpoints) skip grouping, ranking and the
constant filter. Names listed in ``ungrouped`` (the metrics of candidate edges, e.g. a rule's own
counters) skip only the grouping: they compete for the columns like any other metric.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import rankdata

from structure.errors import StructureFormatError

__all__ = ["Feature", "FeatureConfig", "FeatureMap", "fit_features", "outcome_transforms"]

_TIME_OR_COUNT = re.compile(r"(time|seconds|secs|_s$|_ms$|count|^n_|num_|size|nodes)", re.I)


@dataclass(frozen=True)
class FeatureConfig:
    """Options of `fit_features`.

    Attributes:
        max_columns: Most metric columns kept.
        max_missing: Largest share of trials a metric may be missing (NaN) in.
        min_relative_std: Columns whose std is below this times ``1 + |mean|`` are constant.
        max_mode_share: Columns where one value covers more than this share are constant.
        max_abs_corr: A column correlated above this with a kept one is a duplicate.
        group_pattern: Regex with groups (rule, counter) for per-rule counters.
    """

    max_columns: int = 30
    max_missing: float = 0.2
    min_relative_std: float = 1e-6
    max_mode_share: float = 0.95
    max_abs_corr: float = 0.995
    group_pattern: str = r"^rule\.([^.]+)\.(.+)$"


@dataclass(frozen=True)
class Feature:
    """One metric column after featurization.

    Attributes:
        name: Column name (a raw metric name, or ``rule.*.<counter>`` for a family).
        sources: Raw metric names summed into the column.
        transform: ``"identity"`` or ``"log1p"``.
        fill: Value (after the transform) used where a trial did not report the metric.
    """

    name: str
    sources: tuple[str, ...]
    transform: str = "identity"
    fill: float = 0.0


@dataclass(frozen=True)
class FeatureMap:
    """A fitted featurization: apply it with `transform`, inspect `dropped`.

    Attributes:
        features: Kept columns, in output order.
        dropped: Raw or family name -> why it was dropped.
    """

    features: tuple[Feature, ...]
    dropped: Mapping[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """Output column names."""
        return [f.name for f in self.features]

    def transform(self, metrics: Mapping[str, Any], n: int) -> np.ndarray:
        """Apply the featurization.

        Args:
            metrics: Raw metric name -> ``n``-dim array (NaN where not reported); absent
                metrics count as not reported.
            n: Number of trials.

        Returns:
            An ``n x p``-dim float64 array, ``p = len(features)``, without NaN.
        """
        out = np.empty((n, len(self.features)))
        for j, feat in enumerate(self.features):
            cols = [_as_array(metrics[s], n) for s in feat.sources if s in metrics]
            if not cols:
                out[:, j] = feat.fill
                continue
            stacked = np.stack(cols, axis=1)
            raw = np.where(np.isnan(stacked).all(1), np.nan, np.nansum(stacked, axis=1))
            values = _apply(feat.transform, raw)
            out[:, j] = np.where(np.isfinite(values), values, feat.fill)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "features": [
                {
                    "name": f.name,
                    "sources": list(f.sources),
                    "transform": f.transform,
                    "fill": f.fill,
                }
                for f in self.features
            ],
            "dropped": dict(self.dropped),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FeatureMap:
        """Inverse of `to_dict`.

        Raises:
            StructureFormatError: `d` is not what `to_dict` writes.
        """
        try:
            feats = tuple(
                Feature(f["name"], tuple(f["sources"]), f["transform"], float(f["fill"]))
                for f in d["features"]
            )
            return cls(feats, dict(d.get("dropped", {})))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise StructureFormatError(
                f"A stored feature map is malformed ({type(err).__name__}: {err}); expected the "
                "form FeatureMap.to_dict writes, a dict with a 'features' list."
            ) from err


def fit_features(
    metrics: Mapping[str, Any],
    objectives: np.ndarray,
    config: FeatureConfig | None = None,
    keep: Collection[str] = (),
    ungrouped: Collection[str] = (),
) -> FeatureMap:
    """Fit the featurization on a trials table.

    Args:
        metrics: Raw metric name -> ``n``-dim array (NaN where not reported).
        objectives: ``n x k``-dim array of objective values (used to rank columns).
        config: Options; defaults when None.
        keep: Raw names that must stay individual columns.
        ungrouped: Raw names that stay individual columns when they are kept (not summed into a
            family), but are filtered and ranked as the others are.

    Returns:
        The fitted `FeatureMap`.
    """
    config = config or FeatureConfig()
    n = int(objectives.shape[0])
    dropped: dict[str, str] = {}
    candidates: list[tuple[Feature, np.ndarray]] = []
    individual = {*keep, *ungrouped}
    for name, sources in _groups(metrics, config.group_pattern, individual).items():
        cols = np.stack([_as_array(metrics[s], n) for s in sources], axis=1)
        missing = np.isnan(cols).all(1)
        if missing.mean() > config.max_missing and name not in keep:
            dropped[name] = f"missing in {missing.mean():.0%} of trials"
            continue
        raw = np.where(missing, np.nan, np.nansum(cols, axis=1))
        transform = _choose_transform(name, raw[~missing])
        values = _apply(transform, raw)
        fill = float(np.nanmedian(values)) if (~missing).any() else 0.0
        values = np.where(np.isfinite(values), values, fill)
        if name not in keep and _is_constant(values, config):
            dropped[name] = "near-constant"
            continue
        candidates.append((Feature(name, tuple(sources), transform, fill), values))
    candidates.sort(key=lambda c: (c[0].name not in keep, -_relevance(c[1], objectives)))
    kept: list[tuple[Feature, np.ndarray]] = []
    ranked = 0  # kept columns that count against the cap (not in `keep`)
    for feat, values in candidates:
        if feat.name not in keep and ranked >= config.max_columns:
            dropped[feat.name] = f"over the cap of {config.max_columns} columns"
            continue
        dup = next((k for k, v in kept if _abs_corr(values, v) > config.max_abs_corr), None)
        if dup is not None and feat.name not in keep:
            dropped[feat.name] = f"duplicate of {dup.name!r}"
            continue
        kept.append((feat, values))
        ranked += feat.name not in keep
    return FeatureMap(tuple(f for f, _ in kept), dropped)


def _groups(
    metrics: Mapping[str, Any], pattern: str, individual: Collection[str]
) -> dict[str, list[str]]:
    """Column name -> raw sources: per-rule counters grouped by counter, others (and the
    `individual` names) alone."""
    regex = re.compile(pattern)
    groups: dict[str, list[str]] = {}
    for name in sorted(metrics):
        match = regex.match(name)
        key = name if (match is None or name in individual) else f"rule.*.{match.group(2)}"
        groups.setdefault(key, []).append(name)
    return groups


def outcome_transforms(names: Collection[str], Y: np.ndarray) -> dict[str, str]:
    """Outcome name -> ``"log1p"`` or ``"neglog1p"`` (`structure.dag.to_model`) for the
    time-like and count-like outcomes (by name, as for metrics) whose values all have one sign;
    the structured surrogate models them in log space (objectives only where
    `StructuredConfig.log_objectives` asks). A search time is a sum and product of
    its causes (steps, costs per step), closer to additive in logs, and a node GP on raw
    seconds reverts to its mean where the acquisition extrapolates to longer searches, so the
    network proposes long searches it predicts short. Other outcomes keep their units.

    Args:
        names: The ``m`` outcome names.
        Y: ``n x m``-dim array of their values (minimized objectives negated).
    """
    out: dict[str, str] = {}
    for name, column in zip(names, np.asarray(Y, dtype=np.float64).T):
        if not _TIME_OR_COUNT.search(name) or column.size == 0:
            continue
        if column.min() >= 0:
            out[name] = "log1p"
        elif column.max() <= 0:
            out[name] = "neglog1p"
    return out


def _as_array(values: Any, n: int) -> np.ndarray:
    arr = values.detach().cpu().numpy() if hasattr(values, "detach") else np.asarray(values)
    return np.asarray(arr, dtype=np.float64).reshape(n)


def _choose_transform(name: str, observed: np.ndarray) -> str:
    """``log1p`` for non-negative counts, times and right-skewed columns; else identity."""
    if observed.size == 0 or observed.min() < 0 or observed.max() <= 0:
        return "identity"
    integer = bool(np.all(observed == np.round(observed)))
    std = observed.std()
    skew = float(((observed - observed.mean()) ** 3).mean() / std**3) if std > 0 else 0.0
    return "log1p" if integer or _TIME_OR_COUNT.search(name) or skew > 1.0 else "identity"


def _apply(transform: str, raw: np.ndarray) -> np.ndarray:
    if transform == "log1p":
        with np.errstate(invalid="ignore"):
            return np.log1p(np.clip(raw, 0.0, None))
    return raw


def _is_constant(values: np.ndarray, config: FeatureConfig) -> bool:
    if values.std() <= config.min_relative_std * (1.0 + abs(values.mean())):
        return True
    _, counts = np.unique(values, return_counts=True)
    return bool(counts.max() > config.max_mode_share * values.size)


def _relevance(values: np.ndarray, objectives: np.ndarray) -> float:
    """Largest absolute Spearman correlation of a column with any objective."""
    if objectives.size == 0:
        return 0.0
    return max(_abs_corr(rankdata(values), rankdata(col)) for col in objectives.T)


def _abs_corr(a: np.ndarray, b: np.ndarray) -> float:
    if a.std() == 0 or b.std() == 0:
        return 0.0
    return float(abs(np.corrcoef(a, b)[0, 1]))
