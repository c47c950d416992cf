"""Read-only views of a study's trials: budget counts and the `Study.to_dataframe` table."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from studies.pareto import feasible

if TYPE_CHECKING:
    import pandas as pd

    from studies.records import TrialRecord

__all__ = ["best_values", "design_offset", "progress_counts", "trials_dataframe", "used"]


def used(trials: Sequence[TrialRecord]) -> int:
    """Trials counted against the budget: a re-queued copy replaces its stale original."""
    return len(trials) - sum(t.retry_of is not None for t in trials)


def design_offset(trials: Sequence[TrialRecord], default: Mapping[str, Any] | None) -> int:
    """Initial-design points that the study's leading queued trials stood in for (the tuner's
    ``design_offset``, `tuner.engine.design_index`): its trials before the first one the tuner
    proposed (all of them before any proposal) that it did not propose, less the space's
    ``default`` configuration among them (None: the design does not start with it), which is
    the design's own first point. A warm-started study queues the default and the related
    studies' best (`studies.warmstart.queue_related`); counted here, they take the design's
    first positions without using up its Sobol points. (A cold study's queued configurations
    do use them up, as when its seeded runs were measured: the main job queues its lead
    configurations into its design by intent, `rewrite_tuner.study`.) A function of the stored
    trials alone, so every process driving the study maps positions to design points alike."""
    lead = []
    for t in trials:  # number order
        if t.proposed_at is not None or t.retry_of is not None:
            break
        lead.append(t)
    has_default = default is not None and any(t.config == default for t in lead)
    return len(lead) - int(has_default)


def best_values(
    trials: Sequence[TrialRecord], objectives: Mapping[str, str], constraints: Sequence[str]
) -> str:
    """``"best f1=0.12 f2=3.4"``: each objective's best value over feasible trials."""
    ok = feasible(list(trials), constraints)
    if not ok:
        return "no feasible trial yet"
    parts = []
    for k, d in objectives.items():
        vals = [t.values[k] for t in ok if t.values]
        best = max(vals) if d == "maximize" else min(vals)
        parts.append(f"{k}={best:.4g}")
    return "best " + " ".join(parts)


def progress_counts(trials: Sequence[TrialRecord]) -> dict[str, int]:
    """``finished``, ``used``, ``waiting`` and ``running`` counts of ``trials`` (see
    `Study.progress`)."""
    retries = sum(t.retry_of is not None for t in trials)
    return {
        "finished": sum(t.state.is_finished for t in trials) - retries,
        "used": len(trials) - retries,
        "waiting": sum(t.state == "WAITING" for t in trials),
        "running": sum(t.state == "RUNNING" for t in trials),
    }


def trials_dataframe(trials: Sequence[TrialRecord], objectives: Collection[str]) -> pd.DataFrame:
    """One row per trial (the columns `Study.to_dataframe` documents)."""
    import pandas as pd

    rows = []
    for t in trials:
        row: dict[str, Any] = {"number": t.number, "state": str(t.state)}
        row.update({f"values.{k}": (t.values or {}).get(k) for k in objectives})
        row.update({f"metrics.{k}": v for k, v in sorted(t.metrics.items())})
        row.update(flatten(t.config, "config"))
        row.update(
            error=t.error,
            created=t.created,
            started=t.started,
            finished=t.finished,
            duration=t.duration,
            worker=t.worker,
            retry_of=t.retry_of,
        )
        rows.append(row)
    return pd.DataFrame(rows)


def flatten(obj: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Nested mappings as one level of ``prefix.key.subkey`` keys."""
    out: dict[str, Any] = {}
    for k, v in obj.items():
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{prefix}.{k}"))
        else:
            out[f"{prefix}.{k}"] = v
    return out
