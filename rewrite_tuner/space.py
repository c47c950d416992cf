"""`search_space`: the tuner's space over the rewrite search's knobs and its rule priors.

It sits above the engine (`rewrite` knows nothing of `spaces`): the knobs' valid ranges come from
`rewrite.optimize.config.KNOBS`, their tuning ranges from `rewrite_tuner.knobs.TUNE_RANGES`, and a
configuration of the space maps back onto a `SearchConfig` and the rule priors through
`rewrite_tuner.knobs.config_from_params`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rewrite.errors import SearchConfigError
from rewrite.optimize.config import INT_KNOBS, KNOBS, SearchConfig
from rewrite_tuner.knobs import (
    DEFAULT_TUNED,
    FAMILY_PREFIX,
    PRIOR_MODEL,
    PRIOR_SPECIFICITY,
    PRIOR_WEIGHT,
    TUNE_RANGES,
)
from rewrite_tuner.prior_family import PriorFamily
from spaces import Fixed, Float, Int, Simplex, Space

__all__ = ["search_space"]


def search_space(
    rule_names: Sequence[str],
    tune: Sequence[str] = DEFAULT_TUNED,
    base: SearchConfig | None = None,
    ranges: Mapping[str, tuple[float, float]] | None = None,
    family: PriorFamily | None = None,
) -> Space:
    """The tuner's space: the tunable knobs plus the rule priors.

    The priors are either one free weight per rule (a ``"priors"`` simplex over ``rule_names``)
    or, given an informed `PriorFamily`, the parameters of that family: ``"prior_weight"``
    (0 = uniform, 1 = informed), ``"prior_specificity"`` (exponent of the rules' pattern size)
    and one multiplier ``"family_<name>"`` per rule family (log scale in [1/8, 8]; independent
    numbers rather than a simplex, so the acquisition optimizer needs no equality constraint),
    with the family itself carried in a `Fixed` ``"prior_model"``: 7-8 numbers instead of one
    per rule. Knob parameter names are the `SearchConfig` field names, so a configuration of this
    space maps straight back through `config_from_params`.

    Args:
        rule_names: The rules whose firing priors are tuned (at least 2, distinct), e.g.
            ``[r.name for r in rewrite.rules.catalogue()]``; with ``family``, its rules.
        tune: Knobs to expose, each a key of `TUNE_RANGES`.
        base: Config whose values become the parameters' defaults (clipped into range).
        ranges: Optional ``{knob: (low, high)}`` overriding `TUNE_RANGES` (inside `KNOBS`'
            valid ranges).
        family: An informed prior family (see `rewrite_tuner.prior_family`); None tunes one
            weight per rule.

    Returns:
        A `spaces.Space` with one `Float`/`Int` per knob and the prior parameters; its default
        configuration is the search's default (uniform priors).

    Raises:
        SearchConfigError: On an unknown or non-numeric knob, a range outside the valid one, or
            ``rule_names`` that are not ``family``'s rules.
    """
    base = base or SearchConfig()
    params: dict[str, Any] = {}
    for name in tune:
        if name not in TUNE_RANGES:
            raise SearchConfigError(f"Cannot tune {name!r}; tunable knobs are {list(TUNE_RANGES)}.")
        knob, tuned = KNOBS[name], TUNE_RANGES[name]
        lo, hi = (ranges or {}).get(name, (tuned.low, tuned.high))
        if not knob.low <= lo < hi <= knob.high:
            raise SearchConfigError(
                f"Range of {name!r} must satisfy {knob.low} <= low < high <= {knob.high}, "
                f"but got ({lo}, {hi})."
            )
        default = min(max(getattr(base, name), lo), hi)
        if name in INT_KNOBS:
            params[name] = Int(int(lo), int(hi), log=tuned.log, default=int(round(default)))
        else:
            params[name] = Float(float(lo), float(hi), log=tuned.log, default=float(default))
    if family is None:
        params["priors"] = Simplex(tuple(rule_names))
        return Space(params)
    if list(rule_names) != list(family.rules):
        raise SearchConfigError(
            f"rule_names must be the prior family's rules {list(family.rules)}, but got "
            f"{list(rule_names)}."
        )
    params[PRIOR_WEIGHT] = Float(0.0, 1.0, default=0.0)
    params[PRIOR_SPECIFICITY] = Float(0.0, 3.0, default=0.0)
    if len(family.family_names) > 1:  # one family has nothing to weigh
        for name in family.family_names:  # independent multipliers: no equality constraint
            params[f"{FAMILY_PREFIX}{name}"] = Float(1 / 8, 8.0, log=True, default=1.0)
    params[PRIOR_MODEL] = Fixed(family.to_dict())
    return Space(params)
