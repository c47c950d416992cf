"""The informed prior family: rates shrunk to the rule family's, specific rules first."""

from __future__ import annotations

import pytest

from rewrite.errors import PriorsError
from rewrite_tuner.prior_family import PriorFamily, RuleEvidence
from tests.rewrite.search_rules import TEST_RULES


def test_family_priors_shrink_unseen_rules_to_their_family_and_prefer_specific_ones() -> None:
    evidence = RuleEvidence(
        fired={"test_mm_assoc_left": 100.0, "test_mm_assoc_right": 0.0, "test_neg_neg": 100.0},
        used={"test_mm_assoc_left": 50.0, "test_mm_assoc_right": 0.0, "test_neg_neg": 0.0},
        runs=4,
    )
    family = PriorFamily.from_rules(TEST_RULES, evidence)
    rates = family.rates()
    # never fired: no evidence, so it gets the family's rate, not zero
    assert rates["test_neg_neg"] < rates["test_mm_assoc_right"] < rates["test_mm_assoc_left"]
    sizes = family.sizes
    assert sizes["test_neg_neg"] == 2 and sizes["test_mm_assoc_left"] == 2
    flat = family.priors(1.0, 0.0)
    assert family.priors(0.5, 0.0)["test_neg_neg"] == pytest.approx(
        0.5 / 3 + 0.5 * flat["test_neg_neg"]
    )
    with pytest.raises(PriorsError, match="weight"):
        family.priors(1.5)
    with pytest.raises(PriorsError, match="Unknown rule families"):
        family.priors(1.0, 0.0, {"fusion": 1.0})


def test_a_family_centred_on_empty_priors_is_centred_on_uniform() -> None:
    """An empty priors file means uniform (issue 52), also as the centre of a family."""
    empty = PriorFamily.centred_on(TEST_RULES, {}).priors(1.0, 0.0)
    uniform = PriorFamily.centred_on(TEST_RULES, dict.fromkeys(["test_neg_neg"], 1.0))
    assert empty == pytest.approx(dict.fromkeys(empty, 1 / 3))
    assert uniform.priors(1.0, 0.0) != empty
