"""Sparse parameter -> metric edges: simplex parts as nodes, name hints, log outcomes, fast paths."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from botorch.models import SingleTaskGP
from botorch.models.transforms.input import Normalize
from botorch.models.transforms.outcome import Standardize
from botorch.sampling.pathwise import draw_kernel_feature_paths, draw_matheron_paths
from gpytorch.kernels import RBFKernel
from gpytorch.means import LinearMean

from spaces import Float, Simplex, Space
from structure.dag import Knowledge, raw_moments, to_model, to_raw
from structure.errors import StructureError
from structure.features import outcome_transforms
from structure.params import expand_knowledge, name_hints, node_columns, param_nodes
from structure.paths import fast_paths
from structure.select import SelectConfig, select_parents

FAST = SelectConfig(fit_maxiter=60)


def _space() -> Space:
    return Space({"t": Float(0.0, 1.0), "priors": Simplex(["fuse", "fold", "cse"])})


def test_simplex_parts_are_nodes_and_counters_point_to_their_rule() -> None:
    space = _space()
    nodes = param_nodes(space)
    assert list(nodes) == ["t", "priors.fuse", "priors.fold", "priors.cse"]
    assert node_columns(space, "priors") == space.columns_of("priors")
    assert node_columns(space, "priors.fold") == [space.columns.index("priors.fold")]
    with pytest.raises(StructureError, match="neither a parameter nor a column"):
        node_columns(space, "priors.nope")
    metrics = ["rule.fold.applied", "rule.other.applied", "accept_rate", "op.cse.calls", "cse.x"]
    hints = name_hints(space, metrics)  # any <prefix>.<part>.<counter>, whatever the prefix
    assert hints == {"rule.fold.applied": ["priors.fold"], "op.cse.calls": ["priors.cse"]}
    expanded = expand_knowledge(Knowledge(required=[("priors", "m")]), space)
    assert set(expanded.required) == {
        ("priors.fuse", "m"),
        ("priors.fold", "m"),
        ("priors.cse", "m"),
    }


def test_sparse_selection_keeps_the_few_parameters_that_drive_a_metric() -> None:
    rng = np.random.default_rng(0)
    X = rng.random((30, 8))
    y = np.sin(3 * X[:, 2]) + 0.05 * rng.standard_normal(30)
    candidates = {f"x{i}": X[:, i] for i in range(8)}
    dense = select_parents(y, candidates, base=list(candidates), config=FAST)
    sparse = select_parents(y, candidates, base=list(candidates), config=FAST, sparse=True)
    assert len(dense.parents) == 8
    assert "x2" in sparse.parents and len(sparse.parents) <= 3


def test_a_wrong_name_hint_is_overturned_by_the_data() -> None:
    rng = np.random.default_rng(1)
    X = rng.random((30, 6))
    y = np.exp(X[:, 4]) + 0.02 * rng.standard_normal(30)
    candidates = {f"x{i}": X[:, i] for i in range(6)}
    sel = select_parents(
        y, candidates, base=list(candidates), config=FAST, hints=["x0"], sparse=True
    )
    assert "x4" in sel.parents and "x0" not in sel.parents


def test_time_like_outcomes_are_modelled_in_log_space() -> None:
    Y = np.array([[1.0, -2.0, 3.0], [2.0, -0.5, -1.0]])
    assert outcome_transforms(["gain", "search_seconds", "n_nodes"], Y) == {
        "search_seconds": "neglog1p"
    }
    raw = torch.tensor([-0.5, -2.0, -7.0], dtype=torch.float64)
    torch.testing.assert_close(to_raw("neglog1p", to_model("neglog1p", raw)), raw)
    # Log-normal moments: E[exp(Z)] - 1 for Z ~ N(m, v), negated for neglog1p.
    mean, var = raw_moments(
        "neglog1p", torch.tensor([0.7], dtype=torch.float64), torch.tensor([0.3]).double()
    )
    z = 0.7 + 0.3**0.5 * torch.randn(400_000, generator=torch.Generator().manual_seed(0))
    assert float(mean) == pytest.approx(-float(torch.expm1(z.double()).mean()), rel=0.01)
    assert float(var) == pytest.approx(float(torch.expm1(z.double()).var()), rel=0.03)


@pytest.mark.parametrize("linear", [False, True])
def test_fast_paths_equal_botorchs_matheron_paths(linear: bool) -> None:
    torch.manual_seed(0)
    X = torch.rand(15, 3, dtype=torch.float64)
    y = (X.sin().sum(-1, keepdim=True) + 0.01 * torch.randn(15, 1)).double()
    gp = SingleTaskGP(
        X,
        y,
        covar_module=RBFKernel(ard_num_dims=3),
        input_transform=Normalize(3),
        outcome_transform=Standardize(1),
        mean_module=LinearMean(3) if linear else None,
    ).eval()
    prior = functools.partial(draw_kernel_feature_paths, num_features=64)
    path = draw_matheron_paths(gp, sample_shape=torch.Size([4]), prior_sampler=prior)
    fast = fast_paths(gp, path, gp.train_inputs[0])
    assert fast is not None
    Z = torch.rand(4, 7, 3, dtype=torch.float64)
    torch.testing.assert_close(fast(Z), path(Z), rtol=1e-6, atol=1e-8)
    # Inputs shared by the 4 paths (a node reading parameters only), with a batch dimension.
    shared = torch.rand(5, 7, 3, dtype=torch.float64)
    repeated = shared.unsqueeze(-3).expand(5, 4, 7, 3)
    torch.testing.assert_close(fast.shared(shared), path(repeated), rtol=1e-6, atol=1e-8)
    # The hand-written gradient of the per-path evaluation is the function's.
    Zg = torch.rand(2, 4, 3, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fast, (Zg,))
