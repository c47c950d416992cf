"""causal-learn's PC as the reference `structure._pc_fast.pc_graph` must match (causal-learn is a
test dependency only: the `dev` extra)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from structure._pc_fast import fisher_z_p

_FISHER_Z = "rewrite_tuner_fisherz"  # our registration of `_FisherZ` with causal-learn


def fisher_z_test() -> str:
    """Register `_FisherZ` with causal-learn (once) and return its name, to pass to its ``pc``."""
    from causallearn.utils import cit

    if _FISHER_Z not in getattr(cit, "_custom_ci_tests", {}):

        class _FisherZ(cit.CIT_Base):
            """causal-learn's Fisher-z test with its p-value as ``erfc(|z| / sqrt 2)``
            (`fisher_z_p`) instead of ``2 (1 - scipy.stats.norm.cdf(|z|))``: the same number,
            more accurate in the far tail, and the same formula as `pc_graph`'s."""

            def __init__(self, data: np.ndarray, **kwargs: Any) -> None:
                # Not `CIT_Base.__init__`: it hashes the text of the data for an on-disk
                # cache that is never used here.
                self.data, self.method = data, _FISHER_Z
                self.sample_size, self.num_features = data.shape
                self.correlation_matrix = np.corrcoef(data.T)
                self._cache: dict[tuple[int, int, tuple[int, ...]], float] = {}

            def __deepcopy__(self, memo: dict[int, Any]) -> Any:
                # causal-learn deep-copies its graph, this test included, at every
                # orientation step; the test is a pure function of the data: share it.
                return self

            def __call__(self, X: int, Y: int, condition_set: Iterable[int] | None = None) -> float:
                x, y = (int(X), int(Y)) if X < Y else (int(Y), int(X))
                cond = tuple(sorted({int(c) for c in condition_set or ()}))
                key = (x, y, cond)
                p = self._cache.get(key)
                if p is None:
                    p = fisher_z_p(self.correlation_matrix, self.sample_size, x, y, cond)
                    self._cache[key] = p
                return p

        cit.register_ci_test(_FISHER_Z, _FisherZ)
    return _FISHER_Z
