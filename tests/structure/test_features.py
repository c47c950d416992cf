from __future__ import annotations

import numpy as np

from structure import FeatureConfig, fit_features


def _table(n: int = 40, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.random(n)
    metrics = {
        "rule.fuse.applied": rng.poisson(5 + 20 * x).astype(float),
        "rule.merge.applied": rng.poisson(3 + 10 * x).astype(float),
        "rule.fuse.tried": rng.poisson(50, n).astype(float),
        "search_seconds": np.exp(3 * x + 0.1 * rng.standard_normal(n)),
        "flat": np.full(n, 7.0),
        "almost_flat": np.r_[np.zeros(n - 1), 1.0],
        "signed": rng.standard_normal(n) - 5 * x,
        "mostly_missing": np.r_[np.full(n - 3, np.nan), 1.0, 2.0, 3.0],
    }
    return metrics, np.stack([x + 0.05 * rng.standard_normal(n)], axis=1)


def test_groups_rule_counters_and_logs_counts() -> None:
    metrics, obj = _table()
    fmap = fit_features(metrics, obj)
    by_name = {f.name: f for f in fmap.features}
    assert set(by_name["rule.*.applied"].sources) == {"rule.fuse.applied", "rule.merge.applied"}
    assert by_name["rule.*.applied"].transform == "log1p"
    assert by_name["search_seconds"].transform == "log1p"
    assert by_name["signed"].transform == "identity"
    assert {"flat", "almost_flat", "mostly_missing"} <= set(fmap.dropped)
    assert not any(n.startswith("rule.fuse") for n in by_name)
    values = fmap.transform(metrics, len(obj))
    assert values.shape == (len(obj), len(fmap.features)) and np.isfinite(values).all()
    total = metrics["rule.fuse.applied"] + metrics["rule.merge.applied"]
    np.testing.assert_allclose(values[:, fmap.names.index("rule.*.applied")], np.log1p(total))


def test_cap_keeps_the_most_relevant_columns_and_keep_is_honored() -> None:
    metrics, obj = _table()
    rng = np.random.default_rng(1)
    metrics.update({f"junk{i}": rng.standard_normal(len(obj)) for i in range(40)})
    fmap = fit_features(metrics, obj, FeatureConfig(max_columns=3), keep={"flat"})
    assert len(fmap.features) == 4  # 3 ranked columns + the kept one
    assert "flat" in fmap.names
    assert "search_seconds" in fmap.names and "rule.*.applied" in fmap.names


def test_duplicates_are_dropped_and_missing_values_filled() -> None:
    metrics, obj = _table()
    metrics["copy"] = 2.0 * metrics["signed"] + 1.0
    metrics["search_seconds"][3] = np.nan
    fmap = fit_features(metrics, obj)
    assert "search_seconds" in fmap.names
    assert ("copy" in fmap.dropped) != ("signed" in fmap.dropped)
    assert np.isfinite(fmap.transform(metrics, len(obj))).all()


def test_ungrouped_counters_stay_columns_of_their_own_but_are_still_filtered() -> None:
    metrics, obj = _table()
    metrics["rule.cse.applied"] = np.full(len(obj), 2.0)  # constant: no information
    ungrouped = {"rule.fuse.applied", "rule.cse.applied"}
    fmap = fit_features(metrics, obj, ungrouped=ungrouped)
    by_name = {f.name: f for f in fmap.features}
    assert by_name["rule.fuse.applied"].sources == ("rule.fuse.applied",)
    assert by_name["rule.*.applied"].sources == ("rule.merge.applied",)  # the rest, summed
    assert fmap.dropped["rule.cse.applied"] == "near-constant"  # unlike a `keep` name
