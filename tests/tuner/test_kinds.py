"""Tests for the surrogate-kind registry (`tuner.kinds`)."""

from __future__ import annotations

import pytest

from tuner import FlatSurrogate, InvalidArgumentError
from tuner.kinds import (
    SurrogateRequest,
    register_surrogate,
    surrogate_kind,
    surrogate_kinds,
)


def test_the_tuners_kinds_are_registered_and_build_their_surrogates() -> None:
    from tuner.groups import GroupedSurrogate
    from tuner.rgpe import RGPESurrogate
    from tuner.surrogate import SaasSurrogate
    from tuner.warmstart import WarmStartSurrogate

    assert {"flat", "saas", "grouped"} <= set(surrogate_kinds())
    assert set(surrogate_kinds(warm_start=True)) >= {"mtgp", "rgpe"}
    request = SurrogateRequest(fit_maxiter=20, options={"gate": 0.5})
    flat = surrogate_kind("flat").factory(request)
    assert isinstance(flat, FlatSurrogate) and flat.fit_options == {"maxiter": 20}
    assert isinstance(surrogate_kind("saas").factory(request), SaasSurrogate)
    assert isinstance(surrogate_kind("grouped").factory(request), GroupedSurrogate)
    mtgp = surrogate_kind("mtgp", warm_start=True).factory(request)
    assert isinstance(mtgp, WarmStartSurrogate) and mtgp.gate == 0.5
    rgpe = surrogate_kind("rgpe", warm_start=True).factory(request)
    assert isinstance(rgpe, RGPESurrogate)
    assert SurrogateRequest().fit_options() is None  # no cap: BoTorch's default, as the tuner's


def test_unknown_names_and_taken_names_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"Unknown surrogate kind 'nope'.*'flat'"):
        surrogate_kind("nope")
    with pytest.raises(InvalidArgumentError, match="Unknown warm-start surrogate kind 'flat'"):
        surrogate_kind("flat", warm_start=True)  # a role of its own
    with pytest.raises(InvalidArgumentError, match="registered already"):
        register_surrogate("flat", lambda request: FlatSurrogate())
    with pytest.raises(InvalidArgumentError, match="non-empty name"):
        register_surrogate("", lambda request: FlatSurrogate())
    factory = surrogate_kind("flat").factory
    register_surrogate("flat", factory)  # the same factory again: harmless (a re-import)
