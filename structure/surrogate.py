"""`StructuredSurrogate`: a GP network over a structure learned from the tracking metrics, used
only while it predicts better than the flat GP kept alongside.

Checkpoints. Structure and model choice are decided at checkpoints: every trial from
``min_trials`` to ``dense_until``, then every ``relearn_every`` trials
(`StructuredConfig.checkpoint`), each from the first ``n_j`` trials only, so the decision is a
pure function of the trials (the tuner's exact rebuild relies on it; checkpoints are cached, a
fresh instance recomputes the latest one). At a checkpoint the surrogate

1. featurizes the tracking metrics (`structure.features`), learns the tiered DAG
   (`structure.learn`) and fits both the flat GP and the GP network on the ``n_j`` trials;
2. scores both by predictive log-likelihood of the observed outcomes (all outputs, raw units,
   observation noise included; the network's predictive is moment-matched from the Gaussian
   mixture of `GPNetwork.predictive_mixture`: exact GP marginals given sampled parent values,
   so an output the network models from the parameters alone is scored exactly, with no
   sample-path noise. Moment matching is deliberately forgiving of the mixture's light tails
   where a node's GP extrapolates in a metric (a density that is near zero beyond the observed
   range of the metric would veto any structure on one outlying held-out point):
   *held-out*: ``cv_folds``-fold cross-validation; *prequential*: each of the last ``window``
   trials scored by the models conditioned on the trials before it. Both use the hyper-parameters
   fitted on the ``n_j`` trials (only conditioning is redone, `GPNetwork.conditioned`), which
   keeps scoring cheap and treats both models alike;
3. uses the network unless it predicts clearly worse: its advantage, held-out plus prequential
   (each summed over the scored points), divided by the number of scored points, must be above
   ``-tolerance`` nats; otherwise the flat GP. The network is preferred on a tie because a
   structure's benefit to the optimizer shows before its predictions win: on the function
   networks the network on the true DAG loses both scores slightly at 10-20 trials yet reaches
   the flat GP's final hypervolume sooner, while where it predicted far worse (tens of nats per
   point) it also optimized worse (figures: benchmarks/README.md, "bench_structure: design
   decisions"). Selection in
   `structure.learn` has already kept every metric that does not improve a GP's leave-one-out
   density out of the structure, so on problems without structure the network rarely exists.

Between checkpoints every `fit` conditions the chosen model on all trials: the network keeps the
checkpoint's structure and its GPs' hyper-parameters (refitted at the next checkpoint: a
network's fit costs a few seconds, conditioning a few milliseconds), the flat GP is refitted.
The surrogate falls back to the flat GP with a recorded reason when there
are fewer than ``min_trials`` trials, no informative tracking metric, no metric on a path to an
objective, when structure learning or the network fit fails, or when the network loses the scores.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botorch.models.model import Model
from torch import Tensor

from structure.config import FIT_OPTIONS, StructuredConfig
from structure.dag import Edge, Knowledge, Structure
from structure.errors import KnowledgeError, StructureError
from structure.features import FeatureMap, fit_features, outcome_transforms
from structure.learn import check_knowledge, learn_structure
from structure.network import GPNetwork, NetworkConfig, fit_gp_network
from structure.params import expand_knowledge, name_hints, node_columns, param_nodes
from structure.runs import RunRows, run_rows, run_table
from structure.scoring import by_rank, compare, worse_objectives
from structure.trials import (
    data_key,
    first_trials,
    node_values,
    outcome_values,
    raw_metrics,
    without_metrics,
)
from tuner.kinds import SurrogateRequest, register_surrogate
from tuner.surrogate import Fitted, FlatSurrogate, Surrogate, TrainingData

if TYPE_CHECKING:
    from spaces import Space

__all__ = ["StructuredConfig", "StructuredSurrogate"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Checkpoint:
    key: str
    n: int
    choice: str  # "network" | "flat"
    reason: str
    structure: Structure | None = None
    feature_map: FeatureMap | None = None
    scores: Mapping[str, Any] = field(default_factory=dict)
    models: Mapping[str, Model] = field(default_factory=dict)  # fitted on the n_j trials
    rows: Mapping[str, Any] = field(default_factory=dict)  # what structure learning read


class StructuredSurrogate(Surrogate):
    """GP network over a learned structure with a flat-GP fallback (see module docstring).

    Args:
        knowledge: Expert knowledge for structure learning.
        config: Options; defaults when None.
        flat: The flat surrogate kept alongside; when None, `tuner.FlatSurrogate` under the
            tuner's default fit cap (`TunerOptions.fit_maxiter`).
        structure: A fixed structure to use instead of learning one (e.g. a known DAG): a
            `Structure`, or its edges as ``(source, target)`` name pairs, made into one against
            the space and outcomes at the first fit (names of the space's parameters or columns
            are parameter nodes, the objectives objective nodes, every other name a metric
            node). Its metric nodes must be featurized metric names or constraint outcomes.
    """

    def __init__(
        self,
        knowledge: Knowledge | None = None,
        config: StructuredConfig | None = None,
        flat: Surrogate | None = None,
        structure: Structure | Sequence[tuple[str, str]] | None = None,
    ) -> None:
        self.knowledge = knowledge or Knowledge()
        self.config = config or StructuredConfig()
        self.flat = flat or FlatSurrogate(FIT_OPTIONS)
        self._edges = None if structure is None else _edge_pairs(structure)
        self.fixed_structure = structure if isinstance(structure, Structure) else None
        self._checkpoint: _Checkpoint | None = None  # the latest, cached by its data's key

    def fit(self, data: TrainingData) -> Fitted:
        """Fit the chosen model on `data` (see `tuner.Surrogate.fit`): the network or the flat
        GP, and, where the network is used and `StructuredConfig.veto` is set, the flat GP
        with that margin as the veto. The description is `_describe`'s.

        Raises:
            KnowledgeError: The knowledge does not fit the space, the outcomes or the reported
                metrics (an unknown name, an edge against the tiers, a cycle), or a fixed
                structure names a metric that is not reported.
            StructureError: A fixed structure does not fit the space or the outcomes.
        """
        self.check(data.space, data.outcome_names, data.n_objectives)
        cfg = self.config
        data = without_metrics(data, cfg.ignore_metrics)
        if data.n < cfg.min_trials:
            ck = _Checkpoint("", 0, "flat", f"{data.n} trials < min_trials={cfg.min_trials}")
        else:
            ck = self._checkpoint_for(data)
        model, reason = self._model(data, ck)
        if not isinstance(model, GPNetwork) or cfg.veto is None:
            return Fitted(model, description=self._describe(data, ck, model, reason, None))
        veto = (self.flat.fit(data).model, cfg.veto)
        return Fitted(model, veto=veto, description=self._describe(data, ck, model, reason, veto))

    def _model(self, data: TrainingData, ck: _Checkpoint) -> tuple[Model, str]:
        """The model `ck` chose, on all of `data` (the checkpoint's own where `data` is its
        data; else the network conditioned with its hyper-parameters, or the flat GP refitted),
        and the reason."""
        reason = ck.reason
        model: Model | None = ck.models.get(ck.choice) if data.n == ck.n else None
        network_ok = ck.structure is not None and ck.feature_map is not None
        if model is None and ck.choice == "network" and network_ok:
            fitted = ck.models.get("network")
            hypers = fitted.hyperparameters() if isinstance(fitted, GPNetwork) else None
            try:
                assert ck.structure is not None and ck.feature_map is not None
                model = _fit_network(
                    data, ck.structure, ck.feature_map, self.config.network, data.seed, hypers
                )
                _calibrated(model, ck.scores, self.config)  # as the checkpoint's was scored
            except (StructureError, RuntimeError, ValueError) as err:
                reason = f"network fit failed on {data.n} trials ({err}); using the flat GP"
                _log.warning(reason)
        if model is None:
            model = self.flat.fit(data).model
        return model, reason

    def check(self, space: Space, outcome_names: Sequence[str], n_objectives: int) -> None:
        """Refuse knowledge or a fixed structure that cannot fit the space and outcomes (the
        flat GP would otherwise stand in for the network for the whole run; see
        `tuner.Surrogate.check`). Metrics are not known before trials report them: a name that
        is neither a parameter nor an outcome counts as a metric here and is checked against
        the reported ones at each checkpoint.

        Raises:
            KnowledgeError: The knowledge breaks the tiers (an edge into a parameter or out of
                an objective, a formula reading a parameter).
            StructureError: The fixed structure names other parameters or lacks an outcome.
        """
        tier = dict.fromkeys(param_nodes(space), "param")
        tier.update(dict.fromkeys(outcome_names[n_objectives:], "metric"))
        tier.update(dict.fromkeys(outcome_names[:n_objectives], "objective"))
        check_knowledge(expand_knowledge(self.knowledge, space), tier, unknown_tier="metric")
        if self._edges is not None:
            self.fixed_structure = _structure_from_edges(
                self._edges, space, outcome_names, n_objectives
            )
        fixed = self.fixed_structure
        if fixed is None:
            return
        known = {*space.names, *space.columns}
        params = [p for p in fixed.params if p not in known]
        outcomes = [o for o in outcome_names if o not in fixed.nodes]
        if params or outcomes:
            raise StructureError(
                f"The fixed structure does not fit the study: parameters {params} are neither "
                f"parameters ({space.names}) nor columns ({space.columns}) of the space, and "
                f"outcomes {outcomes} "
                f"are not its nodes ({fixed.nodes}). Rename its nodes to match, or let the "
                "surrogate learn the structure (structure=None)."
            )

    def _describe(
        self,
        data: TrainingData,
        ck: _Checkpoint,
        model: Model,
        reason: str,
        veto: tuple[Model, float] | None,
    ) -> dict[str, Any]:
        """JSON-able record of a fit: ``model`` (``"network"``/``"flat"``), ``reason``,
        ``n_train``, ``checkpoint``, ``scores`` (held-out and prequential log-likelihoods of both
        models), ``edges`` (``[source, target, strength, origin]``), ``structure`` (its dict),
        ``features``, ``rows`` (what structure learning read), ``proposer``, ``veto`` (the
        margin, or None), ``criterion``, ``layout`` (``"given"``, ``"dense"`` or
        ``"learned"``: where the structure came from) and ``relevance`` (objective -> input ->
        share of its GP's ARD relevance, `GPNetwork.relevance`, in the network in use or else
        the checkpoint's; empty without one)."""
        s = ck.structure
        used = "network" if isinstance(model, GPNetwork) else "flat"
        net = model if isinstance(model, GPNetwork) else ck.models.get("network")
        relevance = (
            {
                node: {name: round(share, 3) for name, share in shares.items()}
                for node, shares in net.relevance(s.objectives).items()
            }
            if isinstance(net, GPNetwork) and s is not None
            else {}
        )
        return {
            "surrogate": "StructuredSurrogate",
            "model": used,
            "reason": reason,
            "n_train": data.n,
            "checkpoint": ck.n,
            "scores": dict(ck.scores),
            "tolerance": self.config.tolerance,
            "edges": []
            if s is None
            else [[e.source, e.target, e.strength, e.origin] for e in s.edges],
            "structure": None if s is None else s.to_dict(),
            "features": None if ck.feature_map is None else ck.feature_map.to_dict(),
            "rows": dict(ck.rows),
            "proposer": used,
            "veto": None if veto is None else veto[1],
            "criterion": self.config.criterion,
            "layout": "given"
            if self.fixed_structure is not None
            else ("dense" if self.config.learn.dense else "learned"),
            "relevance": relevance,
        }

    def _checkpoint_for(self, data: TrainingData) -> _Checkpoint:
        prefix = first_trials(data, self.config.checkpoint(data.n))
        key = data_key(prefix)
        if self._checkpoint is None or self._checkpoint.key != key:
            # Seeded from the prefix itself: a rebuild at any n >= n_j decides identically.
            prefix = dataclasses.replace(prefix, seed=int(key[:8], 16))
            self._checkpoint = self._compute_checkpoint(prefix, key)
        return self._checkpoint

    def _compute_checkpoint(self, data: TrainingData, key: str) -> _Checkpoint:
        try:
            fmap, structure, rows = self._learn(data, data.seed)
        except KnowledgeError:
            raise  # the user's input, not the data: falling back would hide it
        except StructureError as err:
            return _Checkpoint(key, data.n, "flat", f"structure learning failed: {err}")
        return dataclasses.replace(self._choose(data, key, fmap, structure), rows=rows)

    def _choose(
        self, data: TrainingData, key: str, fmap: FeatureMap, structure: Structure
    ) -> _Checkpoint:
        """The checkpoint's model: the network on `structure`, or the flat GP and why."""
        seed = data.seed
        used = {e.source for e in structure.edges} | {e.target for e in structure.edges}
        if not used & set(structure.metrics) - set(data.outcome_names):
            reason = "no tracking metric lies on a path to an objective; using the flat GP"
            return _Checkpoint(key, data.n, "flat", reason, structure, fmap)
        if not self.config.selection:
            try:
                net = _fit_network(data, structure, fmap, self.config.network, seed)
            except (StructureError, RuntimeError, ValueError) as err:
                reason = f"fitting the network failed ({err}); using the flat GP"
                return _Checkpoint(key, data.n, "flat", reason, structure, fmap)
            reason = "model selection is off; using the network"
            return _Checkpoint(
                key, data.n, "network", reason, structure, fmap, models={"network": net}
            )
        try:
            scores, models = _score(data, structure, fmap, self.flat, self.config, seed)
        except (StructureError, RuntimeError, ValueError) as err:
            reason = f"scoring the network failed ({err}); using the flat GP"
            return _Checkpoint(key, data.n, "flat", reason, structure, fmap)
        held, preq = scores["heldout"]["advantage"], scores["prequential"]["advantage"]
        points = scores["heldout"]["n_points"] + scores["prequential"]["n_points"]
        per_point = round((held + preq) / points, 4)
        scores["advantage"] = round(held + preq, 4)
        scores["advantage_per_point"] = per_point
        tol = self.config.tolerance
        worse = worse_objectives(scores, data, points, self.config.objective_tolerance)
        if worse:
            reason = (
                f"the network predicts {worse} worse than the flat GP by more than "
                f"{self.config.objective_tolerance} nats per scored point (objective_tolerance; "
                f"over all outcomes {per_point:+.2f}); using the flat GP"
            )
            return _Checkpoint(key, data.n, "flat", reason, structure, fmap, scores, models)
        if self.config.criterion == "rank":
            choice, reason = by_rank(scores, data, self.config.rank_tolerance, per_point)
        elif per_point > -tol:
            choice = "network"
            reason = (
                f"the network's advantage is {per_point:+.2f} nats per scored point (held-out "
                f"{held:+.1f}, prequential {preq:+.1f} nats), above -{tol} (tolerance)"
            )
        else:
            choice = "flat"
            reason = (
                f"the network predicts worse by {-per_point:.2f} nats per scored point (held-out "
                f"{held:+.1f}, prequential {preq:+.1f} nats), more than the tolerance {tol}; "
                "using the flat GP"
            )
        return _Checkpoint(key, data.n, choice, reason, structure, fmap, scores, models)

    def _learn(self, data: TrainingData, seed: int) -> tuple[FeatureMap, Structure, dict[str, Any]]:
        """Featurize the metrics and learn (or take) the structure on `data`; also says which
        rows structure learning read (``kind``, ``n``, and ``reason`` where per-run rows were
        asked for and the trials' were read)."""
        know = self.knowledge
        keep = {n for f in know.formulas for n in (f.node, *f.inputs)}
        keep |= {n for pair in (*know.required, *know.forbidden) for n in pair}
        if self.fixed_structure is not None:
            keep |= set(self.fixed_structure.metrics)
        raw = raw_metrics(data)
        objectives = data.Y[:, : data.n_objectives].numpy()
        ungrouped = {n for pair in know.candidates for n in pair} & set(raw)
        fmap = fit_features(
            raw, objectives, self.config.features, keep=keep & set(raw), ungrouped=ungrouped
        )
        outcome = outcome_transforms(data.outcome_names, data.Y.numpy())
        if not self.config.log_objectives:
            objective_names = set(data.outcome_names[: data.n_objectives])
            outcome = {k: v for k, v in outcome.items() if k not in objective_names}
        if self.fixed_structure is not None:
            fixed = self.fixed_structure
            names = {f.name for f in fmap.features} | set(data.outcome_names)
            missing = [m for m in fixed.metrics if m not in names]
            if missing:  # the user's input: a fallback to the flat GP would hide it
                raise KnowledgeError(
                    f"The fixed structure's metric nodes {missing} are not reported metrics "
                    f"(reported and modelled: {sorted(names)}); a name that is not a parameter "
                    f"of the space ({data.space.names}) is taken for a metric. Check its spelling."
                )
            outcome = {k: v for k, v in outcome.items() if k in fixed.nodes}
            structure = dataclasses.replace(fixed, transforms={**outcome, **fixed.transforms})
            return fmap, structure, {"kind": "fixed"}
        space = data.space
        constraints = data.outcome_names[data.n_objectives :]
        transforms = {**{f.name: f.transform for f in fmap.features}, **outcome}
        feats = fmap.transform(raw, data.n)
        params = {name: data.X[:, cols].numpy() for name, cols in param_nodes(space).items()}
        metrics = {f.name: feats[:, j] for j, f in enumerate(fmap.features)}
        Y = outcome_values(data, outcome).numpy()  # model units
        metrics.update({c: Y[:, data.n_objectives + i] for i, c in enumerate(constraints)})
        objs = {o: Y[:, i] for i, o in enumerate(data.outcome_names[: data.n_objectives])}
        runs = self._run_rows(data)
        table = None
        if isinstance(runs, RunRows):
            table = run_table(data, runs, fmap, outcome)
            metrics = {m: metrics[m] for m in table.metrics}  # what the runs report
            rows: dict[str, Any] = {"kind": "runs", "n": runs.n, "trials": runs.n_trials}
        else:
            rows = {"kind": "trials", "n": data.n, **({"reason": runs} if runs else {})}
        knowledge = expand_knowledge(self.knowledge, space)
        structure = learn_structure(
            params, metrics, objs, knowledge, self.config.learn, seed, transforms, constraints,
            hints=name_hints(space, metrics), runs=table,
        )  # fmt: skip
        return fmap, structure, rows

    def _run_rows(self, data: TrainingData) -> RunRows | str | None:
        """What structure learning reads besides the trials' rows: the trials' runs
        (`structure.runs.run_rows`: the reason as a string where they report none)."""
        return run_rows(data)


def _edge_pairs(
    structure: Structure | Sequence[tuple[str, str]],
) -> tuple[tuple[str, str], ...] | None:
    """The edges of `StructuredSurrogate`'s ``structure`` argument as name pairs, None for a
    `Structure` (used as it is)."""
    if isinstance(structure, Structure):
        return None
    pairs = [] if isinstance(structure, str | bytes | Mapping) else list(structure)
    if not pairs or not all(
        isinstance(p, Sequence) and not isinstance(p, str) and len(p) == 2
        and all(isinstance(n, str) for n in p)
        for p in pairs
    ):  # fmt: skip
        raise StructureError(
            "A fixed structure must be a structure.Structure or a non-empty list of "
            f"(source, target) name pairs, e.g. [('temperature', 'acceptance_rate'), "
            f"('acceptance_rate', 'gain')]; got {structure!r}."
        )
    return tuple((str(a), str(b)) for a, b in pairs)


def _structure_from_edges(
    edges: Sequence[tuple[str, str]], space: Space, outcome_names: Sequence[str], n_objectives: int
) -> Structure:
    """The `Structure` that `edges` describe over `space` and the outcomes (see
    `StructuredSurrogate`'s ``structure``)."""
    known = {*space.names, *space.columns}
    objectives = tuple(outcome_names[:n_objectives])
    names = list(dict.fromkeys(n for pair in edges for n in pair))
    orphans = [o for o in objectives if all(t != o for _, t in edges)]
    if orphans:
        raise StructureError(
            f"The fixed structure's edges give the objectives {orphans} no parents; add edges "
            "into each objective from the metrics (or parameters) it reads."
        )
    return Structure(
        params=tuple(n for n in names if n in known),
        metrics=tuple(n for n in names if n not in known and n not in objectives),
        objectives=objectives,
        edges=tuple(Edge(a, b, 1.0, "required") for a, b in dict.fromkeys(edges)),
    )


def _fit_network(
    data: TrainingData,
    structure: Structure,
    fmap: FeatureMap,
    config: NetworkConfig,
    seed: int,
    hyperparameters: Mapping[str, Mapping[str, Tensor]] | None = None,
    values: Mapping[str, Tensor] | None = None,
) -> GPNetwork:
    """Fit the network on `data` (only condition it, given `hyperparameters`); `values` are
    its nodes' values (`node_values`) when the caller has them."""
    values = node_values(data, fmap, structure) if values is None else values
    columns = {name: node_columns(data.space, name) for name in structure.params}
    return fit_gp_network(
        structure, data.X, values, columns, data.outcome_names, config, seed, hyperparameters
    )


def _score(
    data: TrainingData,
    structure: Structure,
    fmap: FeatureMap,
    flat: Surrogate,
    config: StructuredConfig,
    seed: int,
) -> tuple[dict[str, Any], dict[str, Model]]:
    """Held-out and prequential log-likelihoods of the flat GP and the network on `data`
    (`structure.scoring.compare`), and both models fitted on all of `data` (keys ``"flat"``,
    ``"network"``)."""
    flat_model = flat.fit(data).model
    values = node_values(data, fmap, structure)
    net = _fit_network(data, structure, fmap, config.network, seed, values=values)
    scores = compare(
        data, flat_model, net, values, config.cv_folds, config.window, config.score_samples,
        config.calibrate,
    )  # fmt: skip
    return scores, {"flat": flat_model, "network": _calibrated(net, scores, config)}


def _calibrated(net: GPNetwork, scores: Mapping[str, Any], config: StructuredConfig) -> GPNetwork:
    """``net`` widened by the variance factors its checkpoint was scored with
    (`StructuredConfig.calibrate`; unchanged without it)."""
    if not config.calibrate:
        return net
    return net.calibrated(scores["heldout"]["variance_scale"])


def _structured(request: SurrogateRequest) -> StructuredSurrogate:
    """The ``"structured"`` kind (`tuner.kinds`): reads the request's ``knowledge`` (a
    `Knowledge` dict), ``structure`` (fixed ``[source, target]`` edges) and
    ``ignore_metrics`` options; its GPs keep the tuner's default fit cap."""
    options = request.options
    knowledge = Knowledge.from_dict(options["knowledge"]) if options.get("knowledge") else None
    config = StructuredConfig(ignore_metrics=tuple(options.get("ignore_metrics", ())))
    fixed = options.get("structure")
    edges = [(a, b) for a, b in fixed] if fixed else None
    return StructuredSurrogate(knowledge, config=config, structure=edges)


register_surrogate(
    "structured",
    _structured,
    summary="a GP network over a learned structure, with a flat-GP fallback "
    "(`structure.StructuredSurrogate`)",
)
