from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from structure import (
    Edge,
    Formula,
    Knowledge,
    KnowledgeError,
    LearnConfig,
    NetworkConfig,
    Structure,
    StructuredConfig,
    StructuredSurrogate,
    explain,
)
from structure.errors import StructureError
from structure.network import GPNetwork
from tests.structure.synthetic import sum_sine_data, sum_sine_structure
from tuner import FlatSurrogate

FAST = StructuredConfig(
    min_trials=10,
    relearn_every=5,
    dense_until=0,
    cv_folds=3,
    window=4,
    learn=LearnConfig(bootstrap=3),
    network=NetworkConfig(32, 128, {"maxiter": 30}),
    score_samples=32,
)


def _surrogate(structure: Structure | None = None) -> StructuredSurrogate:
    return StructuredSurrogate(
        config=FAST, flat=FlatSurrogate({"maxiter": 30}), structure=structure
    )


def test_picks_the_network_on_strongly_structured_data() -> None:
    s = _surrogate(sum_sine_structure())
    fitted = s.fit(sum_sine_data(20, seed=0))
    model, info = fitted.model, fitted.description
    assert isinstance(model, GPNetwork) and info["model"] == "network"
    assert info["scores"]["heldout"]["advantage"] > 0
    assert info["scores"]["prequential"]["advantage"] > 0
    assert info["scores"]["advantage_per_point"] > -FAST.tolerance
    assert ["m", "o", 1.0, "learned"] in info["edges"]
    json.dumps(info)
    text = explain(info)
    assert "GP network" in text and "heldout" in text
    assert "within 3 nats of its best (the veto)" in text  # the default veto


def test_a_fixed_structure_given_as_edges_is_that_structure() -> None:
    data = sum_sine_data(20, seed=0)
    structure = sum_sine_structure()
    by_edges = _surrogate([(e.source, e.target) for e in structure.edges])
    assert by_edges.fixed_structure is None  # made against the space at the first fit
    fitted, reference = by_edges.fit(data), _surrogate(structure).fit(data).model
    model = fitted.model
    assert by_edges.fixed_structure is not None
    assert by_edges.fixed_structure.nodes == structure.nodes
    assert isinstance(model, GPNetwork) and fitted.description["model"] == "network"
    X = torch.rand(
        7, data.X.shape[1], dtype=data.X.dtype, generator=torch.Generator().manual_seed(0)
    )
    assert torch.equal(model.posterior(X).mean, reference.posterior(X).mean)
    # A name that is not a parameter is a metric: misspelled, it is reported, not hidden by a
    # fallback to the flat GP.
    typo = _surrogate([("x0", "m"), ("x9", "m"), ("m", "o")])
    with pytest.raises(KnowledgeError, match=r"metric nodes \['x9'\] are not reported"):
        typo.fit(data)
    with pytest.raises(StructureError, match=r"objectives \['o'\] no parents"):
        _surrogate([("x0", "m")]).fit(data)
    with pytest.raises(StructureError, match="non-empty list of \\(source, target\\) name pairs"):
        _surrogate("x0 -> m")  # type: ignore[arg-type]


def test_falls_back_to_flat_when_the_structure_predicts_worse() -> None:
    wrong = Structure(
        tuple(f"x{i}" for i in range(6)), ("m",), ("o",),
        tuple(Edge(f"x{i}", "m") for i in range(6)) + (Edge("m", "o"),),
    )  # fmt: skip
    s = _surrogate(wrong)
    fitted = s.fit(sum_sine_data(20, seed=1, structured=False))
    model, info = fitted.model, fitted.description
    assert info["model"] == "flat" and not isinstance(model, GPNetwork)
    assert info["scores"]["advantage_per_point"] <= -FAST.tolerance
    assert "flat GP" in explain(info)


def test_learned_structure_without_informative_metrics_is_flat() -> None:
    s = _surrogate()
    info = s.fit(sum_sine_data(12, seed=2, structured=False)).description
    assert info["model"] == "flat"
    assert "no tracking metric" in info["reason"]
    assert info["structure"] is not None


def test_flat_before_min_trials_with_reason() -> None:
    s = _surrogate()
    info = s.fit(sum_sine_data(6, seed=0)).description
    assert info["model"] == "flat"
    assert "min_trials" in info["reason"]


def test_checkpoints_are_dense_until_then_every_relearn_every() -> None:
    default = StructuredConfig()
    assert [default.checkpoint(n) for n in range(8, 27)] == [*range(8, 21), 20, 20, 23, 23, 23, 26]
    sparse = StructuredConfig(min_trials=8, relearn_every=3, dense_until=0)
    assert [sparse.checkpoint(n) for n in range(8, 16)] == [8, 8, 8, 11, 11, 11, 14, 14]
    dense = dataclasses.replace(sparse, dense_until=12)
    assert [dense.checkpoint(n) for n in range(8, 20)] == [
        8, 9, 10, 11, 12, 12, 12, 15, 15, 15, 18, 18,
    ]  # fmt: skip
    s = StructuredSurrogate(
        config=dataclasses.replace(FAST, dense_until=12), flat=FlatSurrogate({"maxiter": 30})
    )
    info = s.fit(sum_sine_data(11, seed=2, structured=False)).description
    assert info["checkpoint"] == 11  # FAST alone would still be at 10
    with pytest.raises(StructureError, match="dense_until"):
        StructuredConfig(dense_until=-1)


def test_a_fresh_instance_rebuilds_the_same_model() -> None:
    data = sum_sine_data(22, seed=3)  # checkpoint at 20, refit at 22
    first, second = _surrogate(sum_sine_structure()), _surrogate(sum_sine_structure())
    first.fit(sum_sine_data(20, seed=3))
    a = first.fit(data)
    b = second.fit(data)
    Xt = torch.rand(5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    assert a.description["model"] == b.description["model"]
    assert a.description["scores"] == b.description["scores"]
    with torch.no_grad():
        torch.testing.assert_close(a.model.posterior(Xt).mean, b.model.posterior(Xt).mean)


def test_between_checkpoints_the_network_keeps_the_checkpoint_hyperparameters() -> None:
    s = _surrogate(sum_sine_structure())
    at = s.fit(sum_sine_data(20, seed=0)).model  # a checkpoint: the network is fitted
    fitted = s.fit(sum_sine_data(22, seed=0))  # conditioned on 22 trials, not refitted
    later = fitted.model
    assert isinstance(at, GPNetwork) and isinstance(later, GPNetwork)
    assert fitted.description["checkpoint"] == 20 and fitted.description["n_train"] == 22
    assert at.hyperparameters().keys() == later.hyperparameters().keys()
    for node, state in at.hyperparameters().items():
        for key, value in state.items():
            torch.testing.assert_close(later.hyperparameters()[node][key], value)
    assert later.gps["o"].train_inputs[0].shape[0] == 22


@pytest.mark.slow
def test_tuner_runs_with_the_structured_surrogate() -> None:
    from tuner import Tuner

    data = sum_sine_data(1, seed=0)
    cfg = dataclasses.replace(FAST, selection=False)
    surrogate = StructuredSurrogate(config=cfg, structure=sum_sine_structure())
    tuner = Tuner(data.space, {"o": "maximize"}, seed=0, surrogate=surrogate, n_initial=10)
    for _ in range(13):
        (trial,) = tuner.ask(1)
        x = torch.tensor([list(trial.config.values())], dtype=torch.float64)
        m = float(x.mean())
        tuner.tell(trial.id, {"o": float(torch.sin(torch.tensor(12.0 * m)))}, metrics={"m": m})
    assert len(tuner.trials) == 13
    assert tuner.last_fit is not None and tuner.last_fit.description["model"] == "network"


def test_more_metric_columns_than_trials_still_learns() -> None:
    data = sum_sine_data(12, seed=4, structured=False)
    gen = torch.Generator().manual_seed(0)
    metrics = {f"n{i}": torch.randn(12, generator=gen, dtype=torch.float64) for i in range(30)}
    data = dataclasses.replace(data, metrics={**data.metrics, **metrics})
    info = _surrogate().fit(data).description
    assert "failed" not in info["reason"]
    # PC tests only the columns its Fisher-z tests allow; selection sees them all.
    assert len(info["features"]["features"]) > 12 - 6 - 1 - 3


@pytest.mark.parametrize(
    "knowledge",
    [
        Knowledge(required=(("m", "x0"),)),
        Knowledge(required=(("o", "m"),)),
        Knowledge(formulas=(Formula("m", ("x0", "x1")),)),
    ],
    ids=["into-param", "out-of-objective", "formula-reads-param"],
)
def test_knowledge_against_the_tiers_is_refused_when_the_tuner_is_built(
    knowledge: Knowledge,
) -> None:
    from tuner import Tuner

    space = sum_sine_data(1, seed=0).space
    surrogate = StructuredSurrogate(knowledge=knowledge, config=FAST)
    with pytest.raises(KnowledgeError):
        Tuner(space, {"o": "maximize"}, surrogate=surrogate)


def test_a_fixed_structure_for_another_problem_is_refused() -> None:
    from tuner import Tuner

    space = sum_sine_data(1, seed=0).space
    surrogate = _surrogate(sum_sine_structure())
    with pytest.raises(StructureError, match="outcomes \\['speed'\\]"):
        Tuner(space, {"speed": "maximize"}, surrogate=surrogate)


def test_knowledge_naming_an_unreported_metric_raises_instead_of_falling_back() -> None:
    data = sum_sine_data(12, seed=0)
    s = StructuredSurrogate(knowledge=Knowledge(required=(("mm", "o"),)), config=FAST)
    s.check(data.space, data.outcome_names, data.n_objectives)  # unknown names may be metrics
    with pytest.raises(KnowledgeError, match="'mm'"):
        s.fit(data)


def test_a_metric_named_like_a_parameter_is_left_out() -> None:
    data = sum_sine_data(14, seed=0)
    data = dataclasses.replace(data, metrics={**data.metrics, "x0": data.X[:, 0].clone()})
    info = _surrogate().fit(data).description
    assert "failed" not in info["reason"]
    assert "x0" not in [f["name"] for f in info["features"]["features"]]


def test_ignored_metrics_are_not_read_so_their_values_change_nothing() -> None:
    def with_clock(seed: int) -> object:
        data = sum_sine_data(14, seed=0)
        noise = torch.rand(
            data.n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)
        )
        return dataclasses.replace(data, metrics={**data.metrics, "time.total": noise})

    ignoring = dataclasses.replace(FAST, ignore_metrics=("time.*",))
    runs = []
    for seed in (1, 2):
        s = StructuredSurrogate(config=ignoring, flat=FlatSurrogate({"maxiter": 30}))
        runs.append(s.fit(with_clock(seed)).description)
    assert "time.total" not in [f["name"] for f in runs[0]["features"]["features"]]
    assert runs[0]["edges"] == runs[1]["edges"] and runs[0]["scores"] == runs[1]["scores"]
    reading = _surrogate().fit(with_clock(1)).description
    assert "time.total" in [f["name"] for f in reading["features"]["features"]]


def test_ignore_metrics_must_be_name_patterns() -> None:
    with pytest.raises(StructureError, match="ignore_metrics.*'time.\\*'"):
        StructuredConfig(ignore_metrics="time.*")  # type: ignore[arg-type]
    assert StructuredConfig(ignore_metrics=["time.*"]).ignore_metrics == ("time.*",)  # type: ignore[arg-type]


def test_the_flat_gp_is_scored_with_the_noise_it_was_fitted_with() -> None:
    """Trials that report ``.sem`` fit the flat GP with fixed noise; scoring it must use that
    noise (a model rebuilt without it scored with an untrained noise level, issue 39)."""
    from structure.scoring import flat_predict

    base = sum_sine_data(24, seed=3)
    data = dataclasses.replace(base, Yvar=torch.full_like(base.Y, 1e-4))
    flat = FlatSurrogate().fit(data).model
    state = {k: v for k, v in flat.state_dict().items() if not k.startswith("outcome_transform")}
    noise = data.noise()
    mean, var = flat_predict(data.X, data.Y, state, data.X[:5], (noise, noise[:5]))
    stdvs = flat.outcome_transform.stdvs
    post = flat.posterior(data.X[:5], observation_noise=noise[:5] / stdvs**2)
    torch.testing.assert_close(mean, post.mean)
    torch.testing.assert_close(var, post.variance)
    assert float(var.max()) < 10 * 1e-4  # the reported noise, not the default level
    _, unfitted = flat_predict(data.X, data.Y, state, data.X[:5])  # the old scoring
    assert float(unfitted.min()) > 10 * float(var.max())


def test_a_test_trial_noisier_than_the_training_ones_adds_its_excess_to_the_network(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The network infers one noise level per node; a test trial measured on fewer seeds
    reports more noise, which the flat GP is scored with: the network gets the excess over the
    training trials' typical noise, so that trial's noise is not charged as its error."""
    import structure.scoring as scoring

    train = torch.tensor([[1e-4, 4e-4], [1e-4, 4e-4], [2e-4, 5e-4]], dtype=torch.float64)
    test = torch.tensor([[9e-4, 4e-4], [0.5e-4, 1e-4]], dtype=torch.float64)
    torch.testing.assert_close(
        scoring.excess_noise(train, test),
        torch.tensor([[8e-4, 0.0], [0.0, 0.0]], dtype=torch.float64),
    )
    # one raced trial (reported variance 2500x the others') measured far off its mean
    base = sum_sine_data(24, seed=3)
    Yvar = torch.full_like(base.Y, 1e-4)
    Yvar[5] = 0.25
    Y = base.Y.clone()
    Y[5] = Y[5] + 1.0
    data = dataclasses.replace(base, Y=Y, Yvar=Yvar)
    scores = {}
    for name, excess in (("with", scoring.excess_noise), ("without", lambda a, b: 0.0)):
        monkeypatch.setattr(scoring, "excess_noise", excess)
        scores[name] = _surrogate().fit(data).description["scores"]
    assert scores["with"]["heldout"]["flat"] == scores["without"]["heldout"]["flat"]
    assert scores["with"]["heldout"]["network"] > scores["without"]["heldout"]["network"] + 1.0
    assert math.isfinite(scores["with"]["heldout"]["network"])


def test_the_flat_gp_vetoes_where_the_network_is_used_if_asked() -> None:
    s = StructuredSurrogate(
        config=dataclasses.replace(FAST, veto=10.0), flat=FlatSurrogate({"maxiter": 30})
    )
    fitted = s.fit(sum_sine_data(20, seed=0))
    assert isinstance(fitted.model, GPNetwork)
    veto = fitted.veto
    assert veto is not None and not isinstance(veto[0], GPNetwork) and veto[1] == 10.0
    assert fitted.proposer is None  # the network still proposes
    assert fitted.description["veto"] == 10.0 and fitted.description["proposer"] == "network"
    early = s.fit(sum_sine_data(5, seed=0))  # flat before min_trials: nothing to veto
    assert early.veto is None and early.description["veto"] is None
    assert s.fit(sum_sine_data(20, seed=0)).veto is not None  # the order of fits is moot
    with pytest.raises(StructureError, match="veto"):
        StructuredConfig(veto=-1.0)


@pytest.mark.parametrize(("objective_tolerance", "proposer"), [(None, "network"), (0.5, "network"),
                                                               (0.1, "flat")])  # fmt: skip
def test_objective_tolerance_refuses_a_network_that_predicts_one_objective_worse(
    monkeypatch: pytest.MonkeyPatch, objective_tolerance: float | None, proposer: str
) -> None:
    """On generated search-shaped problems the network won the summed score by predicting the
    search's seconds (+28 nats) while it predicted the gain worse (-3.5 nats), and its proposals
    went where the gain is zero."""
    import structure.surrogate as surrogate_module

    data = sum_sine_data(20, seed=0)
    fake = {  # 30 scored points: +0.5 nats a point overall, the objective -0.2 a point
        "heldout": {"flat": 0.0, "network": 15.0, "n_points": 20, "advantage": 15.0,
                    "advantage_by_outcome": {"o": -4.0}},
        "prequential": {"flat": 0.0, "network": 0.0, "n_points": 10, "advantage": 0.0,
                        "advantage_by_outcome": {"o": -2.0}},
    }  # fmt: skip
    monkeypatch.setattr(surrogate_module, "compare", lambda *a, **k: json.loads(json.dumps(fake)))
    cfg = dataclasses.replace(FAST, objective_tolerance=objective_tolerance, criterion="likelihood")
    s = StructuredSurrogate(config=cfg, flat=FlatSurrogate({"maxiter": 30}),
                            structure=sum_sine_structure())  # fmt: skip
    info = s.fit(data).description
    assert info["model"] == proposer
    if proposer == "flat":
        assert "predicts {'o': -0.2} worse than the flat GP" in info["reason"]
    with pytest.raises(StructureError, match="objective_tolerance"):
        StructuredConfig(objective_tolerance=-1.0)


@pytest.mark.parametrize(("rank_tolerance", "proposer"), [(0.0, "flat"), (0.2, "network")])
def test_the_rank_criterion_chooses_the_model_that_orders_the_trials_better(
    monkeypatch: pytest.MonkeyPatch, rank_tolerance: float, proposer: str
) -> None:
    """A network far ahead in likelihood (an overconfident flat GP) is refused by ``rank`` where
    it orders the held-out trials worse, unless within ``rank_tolerance``."""
    import structure.surrogate as surrogate_module

    fake = {
        "heldout": {"flat": 0.0, "network": 40.0, "n_points": 20, "advantage": 40.0,
                    "advantage_by_outcome": {"o": 40.0},
                    "rank_by_outcome": {"flat": {"o": 0.8}, "network": {"o": 0.7}}},
        "prequential": {"flat": 0.0, "network": 0.0, "n_points": 10, "advantage": 0.0,
                        "advantage_by_outcome": {"o": 0.0}},
    }  # fmt: skip
    monkeypatch.setattr(surrogate_module, "compare", lambda *a, **k: json.loads(json.dumps(fake)))
    cfg = dataclasses.replace(FAST, criterion="rank", rank_tolerance=rank_tolerance)
    s = StructuredSurrogate(config=cfg, flat=FlatSurrogate({"maxiter": 30}),
                            structure=sum_sine_structure())  # fmt: skip
    info = s.fit(sum_sine_data(20, seed=0)).description
    assert info["model"] == proposer
    assert (
        "network 0.700, flat GP 0.800 (likelihood: +1.33 nats per scored point)" in info["reason"]
    )
    with pytest.raises(StructureError, match="criterion must be 'likelihood' or 'rank'"):
        StructuredConfig(criterion="ranks")


def test_scores_are_broken_down_by_outcome() -> None:
    info = _surrogate(sum_sine_structure()).fit(sum_sine_data(20, seed=0)).description
    for kind in ("heldout", "prequential"):
        by = info["scores"][kind]["advantage_by_outcome"]
        assert set(by) == {"o"} and by["o"] == pytest.approx(info["scores"][kind]["advantage"])
    ranks = info["scores"]["heldout"]["rank_by_outcome"]  # every trial predicted once
    assert set(ranks) == {"flat", "network"} and all(-1 <= r["o"] <= 1 for r in ranks.values())
    assert ranks["network"]["o"] > 0.5  # the true structure orders the trials


@pytest.mark.parametrize("log_objectives", [True, False])
def test_log_objectives_decides_whether_a_time_like_objective_is_modelled_in_logs(
    log_objectives: bool,
) -> None:
    """On generated search-shaped problems the network with its objectives in log space fell
    behind the flat GP on most members, and in their units it did not (docs/families.md)."""
    data = sum_sine_data(20, seed=0)
    seconds = -torch.expm1(1.0 + data.Y)  # a search time, minimized: negated, all below 0
    data = dataclasses.replace(data, Y=seconds, outcome_names=["search_seconds"])
    edges = [(f"x{i}", "m") for i in range(6)] + [("m", "search_seconds")]
    cfg = dataclasses.replace(FAST, log_objectives=log_objectives)
    s = StructuredSurrogate(config=cfg, flat=FlatSurrogate({"maxiter": 30}), structure=edges)
    transforms = s.fit(data).description["structure"]["transforms"]
    assert transforms.get("search_seconds") == ("neglog1p" if log_objectives else None)


def test_calibrate_scores_and_proposes_with_the_held_out_variance_factor() -> None:
    """``calibrate``: the scores record each outcome's held-out mean squared standardized error
    (always) and the variance factor applied (``calibrate`` only: that error where above 1);
    the network is scored with it, and the network that proposes carries it."""
    from structure.scoring import calibration_scale

    torch.testing.assert_close(
        calibration_scale(torch.tensor([0.5, 1.0, 3.0])), torch.tensor([1.0, 1.0, 3.0])
    )
    data = sum_sine_data(20, seed=1)  # the network's held-out errors: 2.0 variances
    plain = StructuredSurrogate(config=FAST).fit(data).description["scores"]["heldout"]
    assert plain["calibration"]["o"] > 1.5 and plain["variance_scale"] == {"o": 1.0}
    fitted = StructuredSurrogate(config=dataclasses.replace(FAST, calibrate=True)).fit(data)
    held = fitted.description["scores"]["heldout"]
    assert held["calibration"] == plain["calibration"]  # measured before it is applied
    assert held["variance_scale"]["o"] == pytest.approx(plain["calibration"]["o"], rel=1e-3)
    assert held["flat"] == plain["flat"]
    assert held["network"] > plain["network"]  # overconfident: scored wider, scored higher
    assert isinstance(fitted.model, GPNetwork)
    assert fitted.model.output_scale == held["variance_scale"]
    surrogate = StructuredSurrogate(config=dataclasses.replace(FAST, calibrate=True))
    later = surrogate.fit(sum_sine_data(22, seed=1))  # refitted past its checkpoint (20)
    assert isinstance(later.model, GPNetwork) and later.description["scores"]
    assert later.model.output_scale == later.description["scores"]["heldout"]["variance_scale"]


def test_the_default_layout_is_dense_and_chosen_by_rank() -> None:
    """`auto`'s default (issue 53): every metric reads every parameter, the objective every
    metric; the description says so, and `explain` names it."""
    config = dataclasses.replace(
        StructuredConfig(), min_trials=10, dense_until=0, cv_folds=3, window=4, score_samples=32
    )
    s = StructuredSurrogate(config=config, flat=FlatSurrogate({"maxiter": 30}))
    info = s.fit(sum_sine_data(20, seed=0)).description
    assert info["layout"] == "dense" and info["criterion"] == "rank"
    edges = {(e[0], e[1]) for e in info["edges"]}
    assert {(f"x{i}", "m") for i in range(6)} | {("m", "o")} <= edges
    assert "criterion 'rank'" in info["reason"]
    shares = info["relevance"]["o"]  # what the objective's GP reads, from the network
    assert "m" in shares and sum(shares.values()) == pytest.approx(1.0, abs=0.01)
    assert set(info["relevance"]) == {"o"}
