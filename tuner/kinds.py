"""The surrogate kinds, by name: one registry that a study's settings pick from.

A kind is a name and a factory that builds a `tuner.Surrogate` from a `SurrogateRequest`. The
tuner registers its own kinds (``"flat"``, ``"saas"``, ``"grouped"``; the warm-start kind
``"mtgp"``) here; a layer above registers its own when it is imported (`structure` registers
``"structured"``), and so may a script (the benchmarks' experiment-only variants). Registering
is the only change this module makes to process-wide state; lookups never build anything but
the surrogate asked for. Not thread-safe while registering: register at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.errors import InvalidArgumentError

if TYPE_CHECKING:
    from tuner.surrogate import Surrogate

__all__ = [
    "SurrogateKind",
    "SurrogateRequest",
    "register_surrogate",
    "surrogate_kind",
    "surrogate_kinds",
]


@dataclass(frozen=True)
class SurrogateRequest:
    """What a kind's factory builds its surrogate from.

    Attributes:
        fit_maxiter: Iteration cap of the GP hyper-parameter fits (`TunerOptions.fit_maxiter`;
            None: BoTorch's default).
        options: Settings of particular kinds, by name (e.g. the structured kind's
            ``knowledge``, ``structure`` and ``ignore_metrics``, a warm start's ``gate``); a
            factory reads those it knows and ignores the rest.
        related: Related tasks (`tuner.warmstart.RelatedTask`) for the warm-start kinds.
    """

    fit_maxiter: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    related: Sequence[Any] = ()

    def fit_options(self) -> dict[str, Any] | None:
        """``{"maxiter": fit_maxiter}``, or None without a cap (as `tuner.Tuner` fits its
        default flat GP)."""
        return {"maxiter": self.fit_maxiter} if self.fit_maxiter else None


@dataclass(frozen=True)
class SurrogateKind:
    """A registered kind.

    Attributes:
        name: Its name.
        factory: Builds the surrogate from a `SurrogateRequest`.
        warm_start: Whether it models related tasks (picked by a warm start rather than as the
            study's surrogate).
        summary: One line on what it models.
    """

    name: str
    factory: Callable[[SurrogateRequest], Surrogate]
    warm_start: bool = False
    summary: str = ""


_KINDS: dict[str, SurrogateKind] = {}


def register_surrogate(
    name: str,
    factory: Callable[[SurrogateRequest], Surrogate],
    *,
    warm_start: bool = False,
    summary: str = "",
) -> None:
    """Register a surrogate kind under ``name`` (registering one name again replaces it only
    with the same factory, so a module imported twice is harmless).

    Raises:
        InvalidArgumentError: ``name`` is not a non-empty string, or names another kind.
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"A surrogate kind needs a non-empty name, got {name!r}.")
    old = _KINDS.get(name)
    if old is not None and old.factory is not factory:
        raise InvalidArgumentError(
            f"The surrogate kind {name!r} is registered already (by {old.factory.__module__}); "
            "pick another name."
        )
    _KINDS[name] = SurrogateKind(name, factory, warm_start, summary)


def surrogate_kinds(warm_start: bool = False) -> tuple[str, ...]:
    """The registered kinds' names (the warm-start kinds' with ``warm_start``), sorted."""
    return tuple(sorted(n for n, k in _KINDS.items() if k.warm_start == warm_start))


def surrogate_kind(name: str, warm_start: bool = False) -> SurrogateKind:
    """The kind registered as ``name``.

    Raises:
        InvalidArgumentError: No such kind (of this role) is registered.
    """
    kind = _KINDS.get(name)
    if kind is None or kind.warm_start != warm_start:
        role = "warm-start surrogate kind" if warm_start else "surrogate kind"
        raise InvalidArgumentError(
            f"Unknown {role} {name!r}; registered: {list(surrogate_kinds(warm_start))}. A kind "
            "is registered by the module that defines it, when it is imported."
        )
    return kind


def _flat(request: SurrogateRequest) -> Surrogate:
    from tuner.surrogate import FlatSurrogate

    return FlatSurrogate(request.fit_options())


def _saas(request: SurrogateRequest) -> Surrogate:
    from tuner.surrogate import SaasSurrogate

    return SaasSurrogate({"maxiter": request.fit_maxiter or 150})


def _grouped(request: SurrogateRequest) -> Surrogate:
    from tuner.groups import GroupedSurrogate

    return GroupedSurrogate(fit_options={"maxiter": request.fit_maxiter or 150})


def _mtgp(request: SurrogateRequest) -> Surrogate:
    from tuner.warmstart import GATE, WarmStartSurrogate

    gate, rank = request.options.get("gate", GATE), request.options.get("rank", 0)
    return WarmStartSurrogate(
        request.related, fit_options=request.fit_options(), gate=gate, rank=rank
    )


def _rgpe(request: SurrogateRequest) -> Surrogate:
    from tuner.rgpe import RGPESurrogate

    rank = request.options.get("rank", 0)
    return RGPESurrogate(request.related, fit_options=request.fit_options(), rank=rank)


register_surrogate("flat", _flat, summary="one batched multi-output GP (`tuner.FlatSurrogate`)")
register_surrogate(
    "saas", _saas, summary="a sparse-lengthscale GP per outcome (`tuner.SaasSurrogate`)"
)
register_surrogate(
    "grouped",
    _grouped,
    summary="each objective per run group, averaged (`tuner.GroupedSurrogate`)",
)
register_surrogate(
    "mtgp",
    _mtgp,
    warm_start=True,
    summary="a multi-task GP over related studies (`tuner.warmstart.WarmStartSurrogate`)",
)
register_surrogate(
    "rgpe",
    _rgpe,
    warm_start=True,
    summary="a ranking-weighted ensemble of per-study GPs (`tuner.rgpe.RGPESurrogate`)",
)
