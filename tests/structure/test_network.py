from __future__ import annotations

import math

import pytest
import torch
from botorch.acquisition.multi_objective.logei import qLogNoisyExpectedHypervolumeImprovement
from botorch.acquisition.multi_objective.objective import IdentityMCMultiOutputObjective
from botorch.models import SingleTaskGP
from botorch.optim import optimize_acqf
from botorch.posteriors.ensemble import EnsemblePosterior
from botorch.sampling.index_sampler import IndexSampler
from botorch.sampling.normal import SobolQMCNormalSampler

from structure import Edge, Formula, NetworkConfig, Structure, StructureError, fit_gp_network
from tuner.acquisition import no_fused_kernel

FAST = NetworkConfig(num_paths=32, num_features=128, fit_options={"maxiter": 25})


def _ackley_like(n: int = 16, seed: int = 0):
    """d=3; metrics f1 = mean z^2, f2 = mean cos(2 pi z) (z = 4x - 2); objectives: an Ackley-style
    function of (f1, f2) and -mean (z - 1)^2 read from the parameters."""
    gen = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 3, generator=gen, dtype=torch.float64)
    Z = 4 * X - 2
    f1, f2 = (Z**2).mean(-1), torch.cos(2 * math.pi * Z).mean(-1)
    o1 = 20 * torch.exp(-0.2 * f1.sqrt()) + torch.exp(f2) - 20 - math.e
    o2 = -((Z - 1) ** 2).mean(-1)
    params = ("x0", "x1", "x2")
    edges = [Edge(p, m) for p in params for m in ("f1", "f2")]
    edges += [Edge("f1", "o1"), Edge("f2", "o1")] + [Edge(p, "o2") for p in params]
    s = Structure(params, ("f1", "f2"), ("o1", "o2"), tuple(edges))
    values = {"f1": f1, "f2": f2, "o1": o1, "o2": o2}
    return s, X, values, {p: [i] for i, p in enumerate(params)}


@pytest.fixture(scope="module")
def network():
    s, X, values, cols = _ackley_like()
    return fit_gp_network(s, X, values, cols, ["o1", "o2", "f1"], FAST, seed=0), X


def test_posterior_shapes_and_sampling(network) -> None:
    net, X = network
    for shape in [(5, 3), (4, 2, 3), (2, 4, 2, 3)]:
        post = net.posterior(torch.rand(*shape, dtype=torch.float64))
        assert isinstance(post, EnsemblePosterior)
        assert post.values.shape == (*shape[:-2], 32, shape[-2], 3)
        assert post.mean.shape == (*shape[:-1], 3)
        samples = IndexSampler(torch.Size([7]), seed=0)(post)
        assert samples.shape == (7, *shape[:-1], 3)
        normal = SobolQMCNormalSampler(torch.Size([8]), seed=0)(post)
        assert normal.shape == (8, *shape[:-1], 3)
        flat = post.values.movedim(-3, 0).reshape(32, -1)  # every sample is one whole path
        assert all((flat == row).all(-1).any() for row in normal.movedim(-3, -3).reshape(8, -1))
        assert post.rsample(torch.Size([2])).shape == (2, *shape[:-1], 3)


def test_shared_rows_shortcut_equals_plain_evaluation(network) -> None:
    net, X = network
    base = torch.rand(6, 3, dtype=torch.float64)
    cand = torch.rand(5, 1, 3, dtype=torch.float64)
    full = torch.cat([base.expand(5, 6, 3), cand], dim=-2)
    fast = net(full)
    slow = torch.stack([net._evaluate(full[b]) for b in range(5)])
    torch.testing.assert_close(fast, slow)
    # The shared rows are cached across calls (an acquisition's baseline); candidates keep
    # their gradient, the same as without the shortcut.
    cand.requires_grad_(True)
    again = net(torch.cat([base.expand(5, 6, 3), cand], dim=-2))
    assert net._shared_cache is not None and torch.equal(net._shared_cache[0], base)
    torch.testing.assert_close(again.detach(), slow)
    (grad,) = torch.autograd.grad(again[..., -1, :].sum(), cand)
    plain = cand.detach().clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(net._evaluate(plain).sum(), plain)
    torch.testing.assert_close(grad, expected)
    other = torch.rand(6, 3, dtype=torch.float64)
    moved = net(torch.cat([other.expand(5, 6, 3), cand.detach()], dim=-2))
    torch.testing.assert_close(moved[..., :6, :], net._evaluate(other).expand(5, -1, -1, -1))


def test_single_node_network_matches_its_gp() -> None:
    gen = torch.Generator().manual_seed(3)
    X = torch.rand(12, 2, generator=gen, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0]) + X[:, 1]
    s = Structure(("a", "b"), (), ("y",), (Edge("a", "y"), Edge("b", "y")))
    cfg = NetworkConfig(num_paths=512, num_features=1024, fit_options={"maxiter": 25})
    net = fit_gp_network(s, X, {"y": y}, {"a": [0], "b": [1]}, ["y"], cfg, seed=1)
    gp = net.gps["y"]
    Xt = torch.rand(20, 2, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        exact = gp.posterior(Xt)
        samples = net(Xt)  # num_paths x 20 x 1: the random-feature sample paths
    mean, var = samples.mean(0), samples.var(0)
    sd = exact.variance.sqrt().squeeze(-1)
    assert (
        (mean.squeeze(-1) - exact.mean.squeeze(-1)).abs() <= 4 * sd / math.sqrt(512) + 1e-3
    ).all()
    ratio = var.squeeze(-1) / exact.variance.squeeze(-1)
    assert 0.6 < float(ratio.median()) < 1.4
    # Pointwise predictions need no paths: they are the node GP's exact predictive.
    mean, var = net.predict(Xt)
    torch.testing.assert_close(mean, exact.mean)
    torch.testing.assert_close(var, exact.variance + net.noise_variance("y"))
    assert isinstance(gp, SingleTaskGP)


def test_formula_nodes_are_exact_and_read_raw_values() -> None:
    gen = torch.Generator().manual_seed(0)
    X = torch.rand(14, 2, generator=gen, dtype=torch.float64)
    t1, t2 = torch.exp(2 * X[:, 0]), 1 + X[:, 1] ** 2
    edges = (Edge("a", "t1"), Edge("b", "t2"), Edge("t1", "total"), Edge("t2", "total"))
    s = Structure(
        ("a", "b"), ("t1", "t2"), ("total",), edges, (Formula("total", ("t1", "t2"), scale=-1.0),),
        transforms={"t1": "log1p"},
    )  # fmt: skip
    values = {"t1": torch.log1p(t1), "t2": t2, "total": -(t1 + t2)}
    net = fit_gp_network(s, X, values, {"a": [0], "b": [1]}, ["t1", "t2", "total"], FAST)
    out = net(torch.rand(4, 2, dtype=torch.float64))
    torch.testing.assert_close(out[..., 2], -(out[..., 0] + out[..., 1]))
    assert "total" not in net.gps


@no_fused_kernel()  # as the tuner's proposals run qLogNEHVI: nothing compiled
def test_qlognehvi_with_an_intermediate_constraint_runs_on_the_network(network) -> None:
    net, X = network
    acq = qLogNoisyExpectedHypervolumeImprovement(
        net, ref_point=[-7.0, -10.0], X_baseline=X, prune_baseline=True, cache_root=False,
        objective=IdentityMCMultiOutputObjective(outcomes=[0, 1]), constraints=[lambda Z: Z[..., 2] - 2.0],
        sampler=SobolQMCNormalSampler(torch.Size([32]), seed=0),  # what the tuner passes
    )  # fmt: skip
    Xq = torch.rand(3, 1, 3, dtype=torch.float64, requires_grad=True)
    acq(Xq).sum().backward()
    assert torch.isfinite(Xq.grad).all() and Xq.grad.abs().sum() > 0
    bounds = torch.stack([torch.zeros(3), torch.ones(3)]).double()
    cand, value = optimize_acqf(
        acq, bounds, q=2, num_restarts=2, raw_samples=16, options={"maxiter": 5}, sequential=True
    )  # fmt: skip
    assert cand.shape == (2, 3) and ((cand >= 0) & (cand <= 1)).all()
    assert torch.isfinite(value).all()


def test_missing_values_or_outputs_are_clear_errors() -> None:
    s, X, values, cols = _ackley_like()
    with pytest.raises(StructureError, match="not nodes"):
        fit_gp_network(s, X, values, cols, ["nope"], FAST)
    del values["f2"]
    with pytest.raises(StructureError, match="observed values"):
        fit_gp_network(s, X, values, cols, ["o1"], FAST)


def test_an_intermediate_nodes_noise_reaches_its_children() -> None:
    gen = torch.Generator().manual_seed(5)
    X = torch.rand(30, 1, generator=gen, dtype=torch.float64)
    m = torch.sin(3 * X[:, 0]) + 0.5 * torch.randn(30, generator=gen, dtype=torch.float64)
    s = Structure(("a",), ("m",), ("o",), (Edge("a", "m"), Edge("m", "o")))
    values = {"m": m, "o": 2.0 * m}
    Xt = torch.rand(10, 1, generator=gen, dtype=torch.float64)
    var = {}
    for propagate in (True, False):
        cfg = NetworkConfig(128, 128, {"maxiter": 50}, propagate_noise=propagate)
        net = fit_gp_network(s, X, values, {"a": [0]}, ["o"], cfg, seed=0)
        var[propagate] = net.predict(Xt)[1].squeeze(-1)
    spread = 4.0 * net.noise_variance("m")  # o = 2 m: m's noise, seen through o
    assert spread > 0.5
    assert float((var[True] - var[False]).median()) > 0.5 * spread


def test_pointwise_predictive_agrees_with_the_composed_sample_paths() -> None:
    # A chain x -> m -> o: `predict` samples m from its exact marginal at each point; the
    # proposals' sample paths compose random-feature paths. Both describe one posterior.
    gen = torch.Generator().manual_seed(7)
    X = torch.rand(20, 1, generator=gen, dtype=torch.float64)
    m = torch.sin(4 * X[:, 0])
    s = Structure(("a",), ("m",), ("o",), (Edge("a", "m"), Edge("m", "o")))
    cfg = NetworkConfig(1024, 1024, {"maxiter": 50})
    net = fit_gp_network(s, X, {"m": m, "o": m**2 + m}, {"a": [0]}, ["o"], cfg, seed=0)
    Xt = torch.linspace(0.05, 0.95, 9, dtype=torch.float64).unsqueeze(-1)
    mean, var = net.predict(Xt, num_samples=2048)
    with torch.no_grad():
        paths = net(Xt)  # 1024 x 9 x 1
    sd = var.sqrt()
    assert ((mean - paths.mean(0)).abs() <= 0.1 * sd + 0.02).all()
    path_var = paths.var(0) + net.noise_variance("o")
    assert 0.5 < float((path_var / var).median()) < 2.0
    # Seeded: the same call gives the same mixture.
    torch.testing.assert_close(net.predict(Xt, num_samples=2048)[0], mean)


@pytest.mark.parametrize("linear", [False, True])
def test_conditioned_network_predicts_as_the_network_refitted_with_its_hypers(linear) -> None:
    # Scoring conditions the fitted network on each fold: `conditioned` must predict what
    # `fit_gp_network(..., hyperparameters=...)` on those rows predicts, without its models.
    s, X, values, cols = _ackley_like(n=18, seed=2)
    s = Structure(
        s.params, s.metrics, (*s.objectives, "total"), (*s.edges, Edge("f1", "total")),
        (Formula("total", ("f1",), scale=2.0, residual=True),),
    )  # fmt: skip
    values = {**values, "total": 2.0 * values["f1"] + 0.1 * X[:, 0]}
    cfg = NetworkConfig(32, 128, {"maxiter": 25}, linear_mean=linear)
    outputs = ["o1", "o2", "f1", "total"]
    net = fit_gp_network(s, X, values, cols, outputs, cfg, seed=0)
    rows = torch.arange(18)[torch.arange(18) % 3 != 0]
    sub_values = {k: v[rows] for k, v in values.items()}
    refit = fit_gp_network(
        s, X[rows], sub_values, cols, outputs, cfg, seed=0, hyperparameters=net.hyperparameters()
    )
    fast = net.conditioned(X[rows], sub_values)
    Xt = torch.rand(7, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for want, got in zip(refit.predict(Xt, 64), fast.predict(Xt, 64)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-8)
    assert fast.noise_variance("f1") == pytest.approx(refit.noise_variance("f1"))


def test_node_gps_get_botorchs_map_fit() -> None:
    # Node GPs are fitted by `structure.gp.map_hyperparameters` on the model's own transforms:
    # the same optimum `fit_gpytorch_mll` finds for the same `SingleTaskGP`.
    from botorch.fit import fit_gpytorch_mll
    from botorch.models.transforms.input import Normalize
    from botorch.models.transforms.outcome import Standardize
    from gpytorch.mlls import ExactMarginalLogLikelihood

    from structure.network import _bounds, _fit_gp

    gen = torch.Generator().manual_seed(4)
    X = torch.rand(25, 3, generator=gen, dtype=torch.float64)
    y = 3.0 + torch.sin(5 * X[:, 0]) * X[:, 1] + 0.05 * torch.randn(25, generator=gen).double()
    bounds = _bounds(X, 2)  # two parameter columns, one node value
    ours = _fit_gp(X, y, bounds, None)
    theirs = SingleTaskGP(
        X, y.unsqueeze(-1), input_transform=Normalize(3, bounds=bounds), outcome_transform=Standardize(1)
    )  # fmt: skip
    fit_gpytorch_mll(ExactMarginalLogLikelihood(theirs.likelihood, theirs))

    def mll(gp: SingleTaskGP) -> float:
        gp.train()
        with torch.no_grad():
            return float(
                ExactMarginalLogLikelihood(gp.likelihood, gp)(
                    gp(*gp.train_inputs), gp.train_targets
                )
            )

    assert mll(ours) == pytest.approx(mll(theirs), abs=1e-3)
    torch.testing.assert_close(
        ours.covar_module.lengthscale, theirs.covar_module.lengthscale, rtol=0.02, atol=0.0
    )


def test_calibrated_widens_each_named_outputs_spread_about_its_mean() -> None:
    # `StructuredConfig.calibrate` hands the held-out variance factor to the proposing network:
    # each point's spread over the paths grows by its square root, its mean stays.
    s, X, values, cols = _ackley_like()
    net = fit_gp_network(s, X, values, cols, ["o1", "o2"], FAST, seed=0)
    Xt = torch.rand(6, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    with torch.no_grad():
        before = net(Xt)  # S x 6 x 2
    mean, var = net.predict(Xt, 64)
    assert net.calibrated({"o1": 4.0, "f1": 9.0}) is net
    assert net.output_scale == {"o1": 4.0}  # not an output: left out
    with torch.no_grad():
        after = net(Xt)
    torch.testing.assert_close(after.mean(0), before.mean(0))
    torch.testing.assert_close(after.var(0)[:, 0], 4.0 * before.var(0)[:, 0])
    torch.testing.assert_close(after[..., 1], before[..., 1])
    wide_mean, wide_var = net.predict(Xt, 64)  # the pointwise predictive alike
    torch.testing.assert_close(wide_mean, mean)
    torch.testing.assert_close(wide_var, var * torch.tensor([4.0, 1.0], dtype=var.dtype))


def test_relevance_shares_each_nodes_inputs_by_name_largest_first() -> None:
    """`GPNetwork.relevance`: 1/lengthscale as shares, a parameter's columns summed, parents by
    name; the input a node reads outweighs the one it does not."""
    gen = torch.Generator().manual_seed(0)
    X = torch.rand(30, 3, generator=gen, dtype=torch.float64)
    m = torch.sin(6 * X[:, 0])
    edges = (Edge("a", "m"), Edge("c", "m"), Edge("c", "y"), Edge("m", "y"))
    s = Structure(("a", "c"), ("m",), ("y",), edges)
    values = {"m": m, "y": 2 * m}  # y reads m, not c; m reads a, not c (two columns)
    net = fit_gp_network(s, X, values, {"a": [0], "c": [1, 2]}, ["y"], FAST, seed=0)
    rel = net.relevance()
    assert set(rel) == {"m", "y"} and set(rel["m"]) == {"a", "c"}
    assert list(rel["y"]) == ["m", "c"]  # largest first
    for shares in rel.values():
        assert sum(shares.values()) == pytest.approx(1.0)
    assert rel["m"]["a"] > 0.7 and rel["y"]["m"] > 0.7
    assert set(net.relevance(["y"])) == {"y"}
