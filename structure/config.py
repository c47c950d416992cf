"""`StructuredConfig`: the options of `structure.StructuredSurrogate` (when structure is learned,
how the network is scored against the flat GP and chosen, how it proposes)."""

from __future__ import annotations

from dataclasses import dataclass, field

from structure.errors import StructureError
from structure.features import FeatureConfig
from structure.learn import LearnConfig
from structure.network import NetworkConfig
from tuner.errors import InvalidArgumentError
from tuner.options import TunerOptions
from tuner.trial import metric_patterns

__all__ = ["FIT_OPTIONS", "StructuredConfig"]

# Every GP here is fitted under the tuner's default iteration cap, as its flat GP is.
FIT_OPTIONS = {"maxiter": TunerOptions().fit_maxiter}


@dataclass(frozen=True)
class StructuredConfig:
    """Options of `StructuredSurrogate`.

    Attributes:
        min_trials: Fewest completed trials before structure is learned (flat GP before).
        relearn_every: Trials between checkpoints (structure re-learned, scores recomputed).
        dense_until: Checkpoint at every trial up to this many trials, then every
            ``relearn_every``: a structure is adopted (or a fallback left) as soon as the data
            shows it, while checkpoints are cheap (figures: benchmarks/README.md,
            "bench_structure: design decisions"). 0: no dense phase.
        cv_folds: Folds of the held-out score.
        window: Trials scored prequentially at each checkpoint.
        tolerance: Nats per scored point by which the network may predict worse than the flat
            GP (held-out and prequential together) and still be used.
        features: Featurization options.
        learn: Structure-learning options. The default is `LearnConfig`'s ``dense`` layout
            with the objectives' extra parameters selected (``direct_edges=False``): every
            metric reads every parameter, every objective every metric; PC and GP parent
            selection (``LearnConfig()``) found too few of the metrics an objective reads from
            20-40 trials to pay on the generated search-shaped problems of the design split
            (docs/families.md, "The dense layout").
        network: GP-network options used for proposals.
        score_samples: Mixture components of the network's predictive when scoring
            (`GPNetwork.predict`).
        selection: Score and choose between the models; False uses the network whenever a
            structure with a metric on a path to an objective exists (benchmarks of a known DAG).
        ignore_metrics: `fnmatch` patterns of tracking metrics the surrogate never reads, such
            as wall-clock times (`rewrite.optimize.MACHINE_METRICS`): a metric that changes from
            run to run of one configuration would carry the machine's state into the model and
            make seeded runs differ. They are still stored and plotted. A per-run metric
            (``<metric>@<run>``) is ignored when its ``<metric>`` matches.
        veto: Where the network is used, a margin in nats: the flat GP's acquisition is
            optimized as well as the network's, and the network proposes the best point, by its
            own acquisition, among those the flat GP's log-acquisition rates within the margin
            of its best (`tuner.Fitted.veto`); None: no veto. A network whose sparse nodes read
            a few of a wide space's columns proposes where the others take values no trial had,
            and predicts there with confidence; the flat GP, reading every column, rates such
            points tens of nats below its best. The default margin is measured in
            docs/structure.md ("Wide spaces: the flat GP's veto").
        objective_tolerance: Nats per scored point by which the network may predict any one
            objective worse than the flat GP (held-out and prequential together) and still be
            used; None: only the sum over all outcomes is tested (``tolerance``). A network that
            models one objective far better (a cost read off the knobs through its metrics)
            wins the sum while it predicts another worse, and then steers the proposals along
            the objective it models well (docs/families.md).
        log_objectives: Model time-like and count-like objectives in log space
            (`structure.features.outcome_transforms`), as constraints always are. The default,
            False, keeps objectives in their units, as the flat GP does: on the generated
            search-shaped problems of the design split, the network with its search time in
            logs fell behind the flat GP on 10 of 16 runs, and with it in seconds it was level
            (docs/families.md, "Objectives in their units").
        criterion: What chooses between the models: ``"rank"`` (the default: the mean over
            the objectives of the Spearman correlation of each model's held-out predictions
            with the observed values; the network where it orders the trials at least as well,
            within ``rank_tolerance``), which is blind to how confident the models are, or
            ``"likelihood"`` (the held-out and prequential log-likelihood, ``tolerance``), which
            refuses a dense network that orders the trials well but is overconfident on one
            objective (docs/families.md).
        rank_tolerance: How much lower the network's mean rank correlation may be than the
            flat GP's (``criterion="rank"``).
        calibrate: Widen the network's predictive, per outcome, by its held-out mean squared
            standardized error where that is above 1, both where it is scored against the flat
            GP and where it proposes (`structure.scoring.compare`, `GPNetwork.calibrated`):
            node GPs calibrated one by one compose into an overconfident network (on the true
            DAG of the generated search-shaped problems, docs/families.md).

    Structure learning reads one row per run of a trial, with the trial's parameters repeated,
    where the trials report per-run metrics (``<metric>@<run>``, `structure.runs`), and the
    trials' rows otherwise (the fit's description says why, under ``rows``). Either way the
    network is fitted on, and scored against the flat GP on, the trials.
    """

    min_trials: int = 8
    relearn_every: int = 3
    dense_until: int = 20
    cv_folds: int = 5
    window: int = 10
    tolerance: float = 0.5
    features: FeatureConfig = field(default_factory=FeatureConfig)
    learn: LearnConfig = field(default_factory=lambda: LearnConfig(dense=True, direct_edges=False))
    network: NetworkConfig = field(
        default_factory=lambda: NetworkConfig(64, 256, fit_options=FIT_OPTIONS)
    )
    score_samples: int = 256
    selection: bool = True
    ignore_metrics: tuple[str, ...] = ()
    veto: float | None = 3.0
    objective_tolerance: float | None = None
    log_objectives: bool = False
    criterion: str = "rank"
    rank_tolerance: float = 0.0
    calibrate: bool = False

    def __post_init__(self) -> None:
        try:
            patterns = metric_patterns(self.ignore_metrics, "StructuredConfig.ignore_metrics")
        except InvalidArgumentError as err:
            raise StructureError(str(err)) from None
        object.__setattr__(self, "ignore_metrics", patterns)
        if (
            self.min_trials < 4
            or self.relearn_every < 1
            or self.dense_until < 0
            or self.cv_folds < 2
            or self.window < 1
            or self.tolerance < 0
            or (self.veto is not None and not self.veto >= 0)
            or (self.objective_tolerance is not None and not self.objective_tolerance >= 0)
        ):
            raise StructureError(
                "`min_trials >= 4`, `relearn_every >= 1`, `dense_until >= 0`, `cv_folds >= 2`, "
                "`window >= 1`, `tolerance >= 0`, `veto` None or >= 0 and `objective_tolerance` "
                f"None or >= 0 must hold, got {self.min_trials=}, {self.relearn_every=}, "
                f"{self.dense_until=}, {self.cv_folds=}, {self.window=}, {self.tolerance=}, "
                f"{self.veto=}, {self.objective_tolerance=}."
            )
        if self.criterion not in ("likelihood", "rank") or not self.rank_tolerance >= 0:
            raise StructureError(
                "StructuredConfig.criterion must be 'likelihood' or 'rank' and rank_tolerance "
                f">= 0, got {self.criterion=}, {self.rank_tolerance=}."
            )

    def checkpoint(self, n: int) -> int:
        """The latest checkpoint at or before ``n >= min_trials`` completed trials."""
        if n <= self.dense_until:
            return n
        start = max(self.min_trials, self.dense_until)
        return start + self.relearn_every * ((n - start) // self.relearn_every)
