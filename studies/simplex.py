"""The weights a trial holds in a `spaces.Simplex` parameter of its space (such as rule priors),
read by `studies.plots` and by applications that export them."""

from __future__ import annotations

from typing import Any

from studies.errors import ExportError
from studies.records import TrialRecord

__all__ = ["simplex_names", "simplex_weights"]


def simplex_names(space: Any) -> list[str]:
    """Names of a `spaces.Space`'s Simplex parameters, in order."""
    return list(space.simplex_dims)


def simplex_weights(
    space: Any, trial: TrialRecord, simplex: str | None = None
) -> tuple[str, dict[str, float]]:
    """The name of the Simplex parameter ``simplex`` (or the space's only one) and the weights
    ``trial`` gives its parts.

    Raises:
        ExportError: If the space has no Simplex parameter, or several and ``simplex`` does not
            name one of them.
    """
    names = simplex_names(space)
    if simplex is None:
        if not names:
            raise ExportError(
                "Rule priors come from the space's Simplex parameter, but this space has no "
                f"Simplex parameter (it has {sorted(space.params)}), so there are no rule priors "
                "to export. Add a Simplex of rule names to the space to tune priors."
            )
        if len(names) != 1:
            raise ExportError(
                f"Rule priors come from the space's Simplex parameter, but it has {len(names)} "
                f"({names}); pass simplex=<one of them>."
            )
        simplex = names[0]
    elif simplex not in names:
        raise ExportError(f"simplex={simplex!r} is not a Simplex parameter; the space has {names}.")
    return simplex, {str(k): float(v) for k, v in trial.config[simplex].items()}
