"""Surrogate options kept for experiments, outside the library.

The benchmarks that measured these options against the library's defaults import this module to
reproduce their figures; the library keeps only what its defaults and documented options need.

- `VariantSurrogate`: `structure.StructuredSurrogate` with two options the benchmarks compare:

  - ``rows="trials"``: structure learning reads one row per trial (its aggregated metrics) even
    where the trials report per-run metrics (the library reads the runs there; ``"runs"``, the
    default here too, keeps its behaviour). Measured in docs/structure.md ("Per-run rows").
  - ``flat_proposes``: where the network is used, the flat GP's acquisition is optimized and the
    network's ranks the points it finds (`tuner.Fitted.proposer`). Measured in
    docs/structure.md; off in the library.

  `VARIANT_OPTIONS` names them, so a benchmark can tell them from `StructuredConfig` fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from structure import GPNetwork, StructuredConfig, StructuredSurrogate
from structure.errors import StructureError
from structure.runs import RunRows
from structure.trials import without_metrics
from tuner.surrogate import Fitted, TrainingData

__all__ = ["ROWS", "VARIANT_OPTIONS", "VariantSurrogate", "split_variant_options"]

ROWS = ("trials", "runs")
"""The values of `VariantSurrogate`'s ``rows``."""

VARIANT_OPTIONS = ("rows", "flat_proposes")
"""`VariantSurrogate`'s own options (the others are `StructuredConfig` fields)."""


class VariantSurrogate(StructuredSurrogate):
    """`StructuredSurrogate` with the experiment-only options (module docstring).

    Args:
        *args: `StructuredSurrogate`'s.
        rows: ``"runs"`` (the library's behaviour) or ``"trials"``.
        flat_proposes: Let the flat GP's acquisition find the candidates where the network is
            used.
        **kwargs: `StructuredSurrogate`'s.

    Raises:
        StructureError: For an unknown ``rows``.
    """

    def __init__(
        self, *args: Any, rows: str = "runs", flat_proposes: bool = False, **kwargs: Any
    ) -> None:
        if rows not in ROWS:
            raise StructureError(f"rows must be one of {ROWS}, got {rows!r}.")
        super().__init__(*args, **kwargs)
        self.rows = rows
        self.flat_proposes = bool(flat_proposes)

    def _run_rows(self, data: TrainingData) -> RunRows | str | None:
        return super()._run_rows(data) if self.rows == "runs" else None

    def fit(self, data: TrainingData) -> Fitted:
        """`StructuredSurrogate.fit`, with the flat GP as the proposer where the network is used
        and ``flat_proposes`` is set (the veto's flat GP where there is one: the same fit)."""
        fitted = super().fit(data)
        if not self.flat_proposes or not isinstance(fitted.model, GPNetwork):
            return fitted
        if fitted.veto is not None:
            flat = fitted.veto[0]
        else:
            flat = self.flat.fit(without_metrics(data, self.config.ignore_metrics)).model
        description = {**fitted.description, "proposer": "flat"}
        return dataclasses.replace(fitted, proposer=flat, description=description)


def split_variant_options(
    overrides: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``overrides`` split into `StructuredConfig` fields and `VARIANT_OPTIONS`."""
    config = {k: v for k, v in overrides.items() if k not in VARIANT_OPTIONS}
    variant = {k: v for k, v in overrides.items() if k in VARIANT_OPTIONS}
    StructuredConfig(**config)  # its own checks
    return config, variant
