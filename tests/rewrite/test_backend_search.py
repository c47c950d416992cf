"""A whole search verified on each array backend gives numpy's verdicts.

The search runs on a 2-device mesh (so the sharding rules join it) with the configuration that
crashed the cupy verifier in issue 20 (the second Sobol point of the rewrite study), final
whole-graph checks on. Every check it makes is recorded and re-decided by a fresh numpy verifier
with no cache and no memo: each verdict must match, and none may raise.
"""

from __future__ import annotations

from typing import Any

import pytest

import rewrite
from rewrite import zoo
from rewrite.rules import catalogue
from rewrite.verify import Verifier
from tests.rewrite.rule_fixtures import BACKENDS

#: Issue 20's failing configuration (population 20, tau 1.74, m 4, verify_rate 0.35,
#: max_fusion_size 21, window 565) on two devices, capped in steps for the test's time.
CONFIG = {
    "population": 20,
    "tau": 1.74,
    "m": 4,
    "verify_rate": 0.35,
    "max_fusion_size": 21,
    "window": 565,
    "devices": 2,
    "max_steps": 120,
    "final_check": True,
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model", ["gpt2", "t5"])
def test_search_verdicts_match_numpy(
    backend: str, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REWRITE_BACKEND", backend)
    checks: list[tuple[Any, Any, bool, bool, int, int, Any]] = []
    check = Verifier.check

    def recording(self: Verifier, a: Any, b: Any, **kw: Any) -> Any:
        res = check(self, a, b, **kw)
        if res.shapes != "none":
            checks.append(
                (a, b, bool(kw.get("reduce")), res.ok, self.tests, self.seed, kw.get("mode"))
            )
        return res

    monkeypatch.setattr(Verifier, "check", recording)
    g = zoo.build(model)
    res = rewrite.search(g, {**CONFIG, "seed": 0}, device="h100", verify_cache=None)
    metrics = res.metrics()
    assert metrics["final_check.failed"] == 0
    assert metrics["final_check.reduced"] + metrics["final_check.real"] >= 1
    sharding = {r.name for r in catalogue() if r.family == "sharding"}
    sharded = [r for r in sharding if metrics.get(f"rule.{r}.fired", 0) > 0]
    assert sharded, "no sharding rule fired on the 2-device mesh"
    assert len(checks) >= 10
    monkeypatch.setattr(Verifier, "check", check)
    disagree = []
    for a, b, reduce, ok, tests, seed, mode in checks:  # mode: float for inexact rules
        fresh = Verifier(tests=tests, seed=seed, backend="numpy", cache=None, memo_bytes=0)
        again = fresh.check(a, b, reduce=reduce, mode=mode)
        if again.ok != ok:
            disagree.append((a.name, b.hash, reduce, ok, again.detail))
    assert not disagree, (
        f"{len(disagree)} of {len(checks)} verdicts differ from numpy's: {disagree[:3]}"
    )
