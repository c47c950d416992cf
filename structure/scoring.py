"""Which surrogate predicts better: the flat GP or the GP network, scored on the trials they were
fitted to by held-out and prequential log-likelihood (`compare`), each model re-conditioned with
its fitted hyper-parameters and the noise it was fitted with, and how well each orders the
held-out trials. `structure.surrogate` adopts the network when it wins, by the rules here that
read the scores (`worse_objectives`, `by_rank`) and its tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from botorch.models import SingleTaskGP
from botorch.models.model import Model
from botorch.models.transforms.outcome import Standardize
from torch import Tensor

from structure.network import GPNetwork
from tuner.surrogate import TrainingData

__all__ = [
    "by_rank",
    "calibration_scale",
    "compare",
    "excess_noise",
    "flat_predict",
    "gauss_ll",
    "worse_objectives",
]


def compare(
    data: TrainingData,
    flat_model: Model,
    net: GPNetwork,
    values: Mapping[str, Tensor],
    cv_folds: int,
    window: int,
    samples: int,
    calibrate: bool = False,
) -> dict[str, Any]:
    """Held-out (``cv_folds`` folds) and prequential (the last ``window`` trials, each predicted
    from those before it) log-likelihoods of the flat GP ``flat_model`` and the network ``net``
    on ``data``, both re-conditioned on each training part with their fitted hyper-parameters;
    ``values`` are the network's node values. Per kind: both sums, the points scored and the
    network's advantage.

    The held-out pass also records, per outcome, the mean squared standardized error of the
    network's predictions (``calibration``: about 1 for a calibrated predictive, above 1 for an
    overconfident one). With ``calibrate``, the network is scored, held-out and prequential,
    with its variances times that factor where it is above 1 (`calibration_scale`; recorded as
    ``variance_scale``, all 1 without it): what `GPNetwork.calibrated` then gives its
    proposals."""
    flat_state = {
        k: v for k, v in flat_model.state_dict().items() if not k.startswith("outcome_transform")
    }
    noise = data.noise()  # the fixed noise the flat GP was fitted with (None: inferred)
    n = data.n
    folds = [torch.arange(n)[torch.arange(n) % cv_folds == f] for f in range(cv_folds)]
    start = max(n - window, 4)
    steps = [torch.tensor([i]) for i in range(start, n)]
    out: dict[str, Any] = {}
    names = list(data.outcome_names)
    scale = torch.ones(len(names), dtype=torch.float64)  # the network's variance factor
    for kind, tests in (("heldout", folds), ("prequential", steps)):
        ll_flat = 0.0
        flat_cols = torch.zeros(len(names), dtype=torch.float64)
        means = {
            "flat": torch.zeros_like(data.Y),
            "network": torch.zeros_like(data.Y),
        }  # ranked after the held-out pass
        net_var = torch.ones_like(data.Y)
        for test in tests:
            if kind == "heldout":
                train = torch.tensor([i for i in range(n) if i not in set(test.tolist())])
            else:
                train = torch.arange(int(test[0]))
            y = data.Y[test]
            pair = None if noise is None else (noise[train], noise[test])
            m, v = flat_predict(data.X[train], data.Y[train], flat_state, data.X[test], pair)
            means["flat"][test] = m
            flat_cols += gauss_ll_columns(y, m, v)
            ll_flat += gauss_ll(y, m, v)
            sub = net.conditioned(data.X[train], {k: v[train] for k, v in values.items()})
            m, v = sub.predict(data.X[test], samples)
            means["network"][test] = m
            if pair is not None:  # see `excess_noise`
                v = v + excess_noise(*pair)
            net_var[test] = v
        rows = torch.cat(list(tests))
        y, m, v = data.Y[rows], means["network"][rows], net_var[rows]
        if kind == "heldout":
            z2 = ((y - m) ** 2 / v.clamp_min(1e-12)).mean(dim=0)
            if calibrate:
                scale = calibration_scale(z2)
        ll_net = gauss_ll(y, m, v * scale)
        per_output = gauss_ll_columns(y, m, v * scale) - flat_cols
        out[kind] = {
            "flat": round(ll_flat, 4),
            "network": round(ll_net, 4),
            "n_points": int(sum(len(t) for t in tests)),
            "advantage": round(ll_net - ll_flat, 4),
            "advantage_by_outcome": {
                name: round(float(a), 4) for name, a in zip(names, per_output.tolist())
            },
        }
        if kind == "heldout":  # every trial predicted once: how well each model orders them
            out[kind]["rank_by_outcome"] = {
                model: {name: _spearman(m[:, j], data.Y[:, j]) for j, name in enumerate(names)}
                for model, m in means.items()
            }
            out[kind]["calibration"] = {
                name: round(float(c), 4) for name, c in zip(names, z2.tolist(), strict=True)
            }
            out[kind]["variance_scale"] = {
                name: float(c) for name, c in zip(names, scale.tolist(), strict=True)
            }
    return out


def calibration_scale(z2: Tensor) -> Tensor:
    """The factor on the network's predictive variances that held-out mean squared
    standardized errors ``z2`` call for: ``z2`` where above 1, else 1 (an underconfident
    predictive is left as it is)."""
    return z2.clamp_min(1.0)


def worse_objectives(
    scores: Mapping[str, Any], data: TrainingData, points: int, tolerance: float | None
) -> dict[str, float]:
    """The objectives the network predicts worse than the flat GP by more than ``tolerance``
    nats per scored point (held-out and prequential together), each with its advantage per
    point; empty where ``tolerance`` is None."""
    if tolerance is None:
        return {}
    worse = {}
    for name in data.outcome_names[: data.n_objectives]:
        total = sum(scores[k]["advantage_by_outcome"][name] for k in ("heldout", "prequential"))
        if total / points < -tolerance:
            worse[name] = round(total / points, 4)
    return worse


def by_rank(
    scores: Mapping[str, Any], data: TrainingData, tolerance: float, per_point: float
) -> tuple[str, str]:
    """The model that orders the held-out trials' objectives better (`structure.StructuredConfig.
    criterion` ``"rank"``), and why."""
    ranks = scores["heldout"]["rank_by_outcome"]
    objectives = data.outcome_names[: data.n_objectives]
    mean = {m: sum(ranks[m][o] for o in objectives) / len(objectives) for m in ("flat", "network")}
    says = (
        f"mean held-out rank correlation over the objectives: network {mean['network']:.3f}, "
        f"flat GP {mean['flat']:.3f} (likelihood: {per_point:+.2f} nats per scored point)"
    )
    if mean["network"] >= mean["flat"] - tolerance:
        return (
            "network",
            f"{says}; the network orders the trials at least as well (criterion 'rank')",
        )
    return "flat", f"{says}; the flat GP orders them better (criterion 'rank')"


def _spearman(a: Tensor, b: Tensor) -> float:
    """Spearman's rank correlation of two columns (0 where either is constant)."""
    from scipy.stats import rankdata

    ra, rb = rankdata(a.numpy()), rankdata(b.numpy())
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return round(float(np.corrcoef(ra, rb)[0, 1]), 4)


def excess_noise(train: Tensor, test: Tensor) -> Tensor:
    """What the network's predictive lacks at test trials noisier than its training trials.

    The network's node GPs infer one noise level per node from the training trials, while the
    flat GP is scored with each test trial's reported variance (`flat_predict`). A trial
    measured on fewer seeds (a raced one: one seed instead of three) reports a larger variance;
    scored with the training trials' level, the network was charged for that trial's noise as
    if it were its own error (on the main job one such trial cost it 986 nats, more than it
    gained on all others). Each test trial gets its reported variance above the training
    trials' median added, per outcome (zero for a trial as noisy as the typical one)."""
    return (test - train.median(dim=0).values).clamp_min(0.0)


def flat_predict(
    X: Tensor,
    Y: Tensor,
    state: Mapping[str, Tensor],
    X_test: Tensor,
    noise: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """Predictive mean and variance, observation noise included, of the flat GP with its fitted
    hyper-parameters (``state``) conditioned on ``X``, ``Y``.

    ``noise``: the observed noise variances ``(train, test)`` when the trials report standard
    errors. The flat GP was then fitted with them as fixed noise (`TrainingData.noise`), so the
    scoring model is built the same way: the fitted state holds no inferred noise to load, and
    a model built without them would score with an untrained noise level (the default one,
    orders of magnitude above the reported errors).
    """
    if noise is None:
        gp = SingleTaskGP(X, Y, outcome_transform=Standardize(m=Y.shape[-1]))
        gp.load_state_dict(dict(state), strict=False)
        observation: bool | Tensor = True
    else:
        standardize = Standardize(m=Y.shape[-1])
        gp = SingleTaskGP(X, Y, train_Yvar=noise[0], outcome_transform=standardize)
        gp.load_state_dict(
            {k: v for k, v in state.items() if not k.startswith("likelihood")}, strict=False
        )
        observation = noise[1] / standardize.stdvs**2  # in the model's (standardized) units
    gp.eval()
    with torch.no_grad():
        post = gp.posterior(X_test, observation_noise=observation)
    return post.mean, post.variance


def _log_densities(y: Tensor, mean: Tensor, var: Tensor) -> Tensor:
    """Elementwise Gaussian log densities; the variance is floored at 1e-9 * (1 + y^2)."""
    var = var.clamp_min(1e-9 * (1.0 + y**2))
    return -0.5 * (torch.log(2 * math.pi * var) + (y - mean) ** 2 / var)


def gauss_ll_columns(y: Tensor, mean: Tensor, var: Tensor) -> Tensor:
    """`gauss_ll` per column of ``y`` (``n x m``): an ``m``-dim Tensor of sums over the rows
    (a non-finite sum counts as -1e9, as in `gauss_ll`)."""
    ll = _log_densities(y, mean, var).detach().sum(dim=0)
    return torch.nan_to_num(ll, nan=-1e9, neginf=-1e9)


def gauss_ll(y: Tensor, mean: Tensor, var: Tensor) -> float:
    """Sum of Gaussian log densities; the variance is floored at 1e-9 * (1 + y^2)."""
    ll = _log_densities(y, mean, var)
    return float(np.nan_to_num(float(ll.sum().detach()), nan=-1e9, neginf=-1e9))
