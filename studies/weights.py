"""`WeightsOf`: how the plots, the dashboard and the report read a trial's weights (a Simplex
parameter's, by default) and what they call them, so an application can give them its own words.

Light to import (no numpy): an application's command line builds its `WeightsOf` at import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from studies.records import TrialRecord

__all__ = ["SIMPLEX", "ReadWeights", "WeightsOf", "read_simplex"]

ReadWeights = Callable[[Any, "TrialRecord", "str | None"], "tuple[str, dict[str, float]] | None"]
"""``(space, trial, simplex) -> (title, weights)`` of the weights to draw (part name -> weight), or
None when the space holds none; raises `ExportError` for a ``simplex`` it cannot read."""


def read_simplex(
    space: Any, trial: TrialRecord, simplex: str | None = None
) -> tuple[str, dict[str, float]] | None:
    """The default `ReadWeights`: the weights of the space's Simplex parameter ``simplex`` (or its
    only one), titled by its name; None for a space without a Simplex parameter."""
    from studies.simplex import simplex_names, simplex_weights

    if not simplex_names(space):
        return None
    return simplex_weights(space, trial, simplex)


@dataclass(frozen=True)
class WeightsOf:
    """How `plot_study`, ``tuner dashboard`` and ``tuner report`` read a trial's weights and what
    they call them. The default reads a Simplex parameter in generic words; an application whose
    weights mean something (or are derived otherwise) passes its own reader and words.

    Attributes:
        read: The trial's ``(title, weights)``, or None (`ReadWeights`).
        part: What one weight belongs to, for the bar of the rest (``"N other parts (sum)"``).
        quantity: What a weight is: the axis label.
        file_suffix: The PNG `plot_study` writes is ``NAME-<file_suffix>.png``.
        heading: The dashboard panel's title.
        about: The dashboard panel's explanation of its bars.
        missing: The dashboard's note for a space that holds no such weights.
    """

    read: ReadWeights = read_simplex
    part: str = "part"
    quantity: str = "weight"
    file_suffix: str = "weights"
    heading: str = "Simplex weights"
    about: str = (
        "Weights of the Simplex parameter's parts, largest first, the rest summed; the dashed "
        "line is the uniform weight. Click any trial number for that trial's weights."
    )
    missing: str = "This study's space holds no Simplex parameter."


SIMPLEX = WeightsOf()
"""The default: a Simplex parameter's weights, in generic words (``NAME-weights.png``)."""
