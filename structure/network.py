"""A GP network over a learned `Structure`, as a BoTorch `Model`.

Each non-parameter node with parents gets one `SingleTaskGP` on its parameter parents' columns
and its parent nodes' values (float64, learned noise, `Normalize` with fixed bounds: the unit cube
for parameter columns, the observed range plus a 10% margin for node values, `Standardize` on the
output; hyper-parameters by MAP under BoTorch's default priors, solved in numpy by
`structure.gp.map_hyperparameters`, or by `fit_gpytorch_mll` for a linear mean). Formula nodes
are deterministic (`structure.Formula`), optionally plus a GP on the
residual. The joint posterior is represented by ``num_paths`` posterior sample paths per node
(Matheron's rule with random Fourier features, `botorch.sampling.pathwise`), composed through the
DAG in topological order: sample ``s`` of a child reads sample ``s`` of its parents, so the
network's samples are exact draws of the composed (non-Gaussian) posterior up to the feature
approximation. An intermediate node's fitted observation noise is part of what its children
read (`NetworkConfig.propagate_noise`): one draw per path and node. The model is an
`EnsembleModel`; its `EnsemblePosterior` supports `rsample` and
`rsample_from_base_samples` (with BoTorch's `IndexSampler`), so
`qLogNoisyExpectedHypervolumeImprovement` and `optimize_acqf` run on it unchanged. Every node,
intermediate metrics included, can be an output, so intermediate nodes serve as outcome
constraints.

Sample paths are deterministic functions, so a point's output does not depend on the other
points of a batch. `forward` uses that: rows shared by every batch element (the baseline that
qLogNEHVI concatenates to each candidate) are evaluated once.

Node GPs learn their noise (BOFN fixes it near zero): a stochastic search's metrics are noisy,
and fixed noise gave no clear gain on the function networks (figures: benchmarks/README.md,
"bench_structure: design decisions").

This module composes the nodes; each node's own GP (what it reads and is trained on, its fit, and
its conditioning on other trials) is in `structure.node_gp`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from botorch.acquisition.objective import PosteriorTransform
from botorch.models import SingleTaskGP
from botorch.models.ensemble import EnsembleModel
from botorch.posteriors.ensemble import EnsemblePosterior
from botorch.sampling.pathwise import draw_kernel_feature_paths, draw_matheron_paths
from torch import Tensor
from torch.nn import ModuleDict

from structure.dag import Structure, raw_moments, to_model, to_raw
from structure.node_gp import (
    _bounds,
    _ExactGP,
    _fit_gp,
    _node_inputs,
    _node_specs,
    _NodeSpec,
    _target,
    relevance_shares,
)
from structure.paths import FastPaths, fast_paths

__all__ = ["ConditionedNetwork", "GPNetwork", "NetworkConfig", "PathPosterior", "fit_gp_network"]

_CHECK_POINTS = 4  # inputs on which `fast_paths` is checked against BoTorch's paths


@dataclass(frozen=True)
class NetworkConfig:
    """Options of the GP network.

    Attributes:
        num_paths: Joint posterior samples (sample paths per node); the ensemble size.
        num_features: Random Fourier features per prior sample path.
        fit_options: Options of the L-BFGS-B hyper-parameter fit (e.g. ``{"maxiter": 50}``).
        propagate_noise: Add each intermediate node's fitted observation noise to the values
            its children read (one draw per path); off treats intermediate nodes as noiseless
            (BOFN's assumption), which makes the network overconfident where a metric is only
            partly explained by its parents.
        linear_mean: Node GPs have a linear mean function of their (normalized) inputs, as
            BoGraph's do, instead of a constant: where the acquisition extrapolates beyond the
            observed inputs (a corner of a prior simplex, a longer search), a node then
            follows its trend instead of reverting to its average.
    """

    num_paths: int = 128
    num_features: int = 512
    fit_options: Mapping[str, Any] | None = None
    propagate_noise: bool = True
    linear_mean: bool = False


class PathPosterior(EnsemblePosterior):
    """The network's posterior: an ensemble of ``S`` composed sample paths.

    Works with BoTorch's `IndexSampler` (base samples are path indices, as for any
    `EnsemblePosterior`) and with the Gaussian MC samplers (`SobolQMCNormalSampler`,
    `IIDNormalSampler`) that acquisition functions build by default: a standard-normal base
    sample ``z`` picks path ``floor(Phi(z) * S)``, one path per MC sample for all ``q`` points
    and outputs jointly. Sobol base samples thus stratify the choice of paths.

    Args:
        values: A ``batch x S x q x m``-dim Tensor of path values.
    """

    @property
    def base_sample_shape(self) -> torch.Size:
        """``batch x 1 x 1``: one base sample per MC sample (and batch)."""
        return self.batch_shape + torch.Size([1, 1])

    @property
    def batch_range(self) -> tuple[int, int]:
        """The t-batch dimensions of `base_sample_shape` (collapsed by the samplers)."""
        return (0, -2)

    def rsample_from_base_samples(self, sample_shape: torch.Size, base_samples: Tensor) -> Tensor:
        """Samples for index base samples (``sample_shape x batch``) or normal base samples
        (``sample_shape x batch x 1 x 1``).

        Returns:
            A ``sample_shape x batch x q x m``-dim Tensor.
        """
        if base_samples.is_floating_point():
            uniform = torch.special.ndtr(base_samples[..., 0, 0])
            index = (uniform * self.ensemble_size).long().clamp(0, self.ensemble_size - 1)
            base_samples = index.expand(sample_shape + self.batch_shape)
        return super().rsample_from_base_samples(sample_shape, base_samples)


class _Pointwise:
    """Pointwise predictions of a GP network (`predictive_mixture`, `predict`), shared by
    `GPNetwork` and the lighter `ConditionedNetwork`. Needs ``structure``, ``specs``,
    ``outputs``, ``config``, ``seed``, ``output_scale`` (`GPNetwork.calibrated`),
    `noise_variance` and `_gp_moments`."""

    structure: Structure
    specs: list[_NodeSpec]
    outputs: list[str]
    config: NetworkConfig
    seed: int
    output_scale: dict[str, float]

    def noise_variance(self, node: str) -> float:
        raise NotImplementedError

    def _gp_moments(self, node: str, inputs: Tensor) -> tuple[Tensor, Tensor] | None:
        """The node GP's predictive mean and variance (observation noise included) at
        ``... x c`` inputs, ``...`` each; None for a node without a GP."""
        raise NotImplementedError

    def _node_moments(
        self, spec: _NodeSpec, Xe: Tensor, values: Mapping[str, Tensor]
    ) -> tuple[Tensor, Tensor]:
        """Model-space mean and variance (observation noise included) of one node at each
        point given its parents' sampled values: ``S x n`` each."""
        shape = Xe.shape[:-1]
        if self._reads_parameters_only(spec):  # the same for every sample: computed once
            moments = self._gp_moments(spec.name, Xe[0, :, spec.columns])
            moments = (
                None if moments is None else (moments[0].expand(shape), moments[1].expand(shape))
            )
        else:
            moments = self._gp_moments(spec.name, self._gp_inputs(spec, Xe, values))
        if moments is None:
            zero = torch.zeros(shape, dtype=Xe.dtype)
            moments = (zero, zero)
        return self._with_formula(spec, moments[0], values), moments[1]

    def _propagated_sd(self, node: str) -> float:
        """Standard deviation of the observation noise that `node`'s children read."""
        if node in self.outputs or not self.config.propagate_noise:
            return 0.0
        return math.sqrt(self.noise_variance(node))

    def _gp_inputs(self, spec: _NodeSpec, Xe: Tensor, values: Mapping[str, Tensor]) -> Tensor:
        """What the node's GP reads (`_node_inputs`)."""
        return _node_inputs(self.structure, spec, Xe, values)

    def predictive_mixture(self, X: Tensor, num_samples: int = 256) -> tuple[Tensor, Tensor]:
        """Each output's predictive at each point of `X` as a Gaussian mixture, observation
        noise included.

        Pointwise predictions need no joint sample paths: per point, the nodes are sampled in
        topological order from their GPs' exact posterior marginals given sampled parent values
        (with the observation noise children read, as in `forward`), and each output keeps its
        exact Gaussian given its sampled parents. An output whose GP reads only parameters gets
        its exact predictive (all components equal); no random-feature approximation enters.

        Args:
            X: An ``n x d``-dim Tensor.
            num_samples: Mixture components (samples of the parent values).

        Returns:
            ``(means, variances)``, each ``num_samples x n x m`` (raw units).
        """
        gen = torch.Generator().manual_seed(self.seed)
        Xe = X.unsqueeze(0).expand(num_samples, *X.shape)
        values: dict[str, Tensor] = {}  # node -> S x n sampled values (model units)
        moments: dict[str, tuple[Tensor, Tensor]] = {}
        with torch.no_grad():
            for spec in self.specs:
                mean, var = self._node_moments(spec, Xe, values)
                moments[spec.name] = (mean, var)
                sd = (var.clamp_min(0.0) + self._propagated_sd(spec.name) ** 2).sqrt()
                eps = torch.randn(mean.shape, generator=gen, dtype=mean.dtype)
                values[spec.name] = mean + sd * eps
        raw = [raw_moments(self.structure.transforms.get(o), *moments[o]) for o in self.outputs]
        means = torch.stack([m for m, _ in raw], dim=-1)
        variances = torch.stack([v for _, v in raw], dim=-1)
        if self.output_scale:
            c = torch.tensor([self.output_scale.get(o, 1.0) for o in self.outputs]).to(means)
            means, variances = _widened(means, c, dim=0), variances * c
        return means, variances

    def predict(self, X: Tensor, num_samples: int = 256) -> tuple[Tensor, Tensor]:
        """Moment-matched predictive distribution of the outputs, observation noise included
        (from `predictive_mixture`).

        Args:
            X: An ``n x d``-dim Tensor.
            num_samples: Mixture components.

        Returns:
            ``(mean, variance)``, each ``n x m``.
        """
        means, variances = self.predictive_mixture(X, num_samples)
        return means.mean(0), variances.mean(0) + means.var(0, unbiased=False)

    def _reads_parameters_only(self, spec: _NodeSpec) -> bool:
        """Whether the node's GP reads parameter columns alone (the same input on every path)."""
        return not spec.parents or self.structure.formula_for(spec.name) is not None

    def _with_formula(
        self, spec: _NodeSpec, gp_term: Tensor | float, values: Mapping[str, Tensor]
    ) -> Tensor:
        """A node's model-space value from its GP term: the term itself, or (a formula node)
        the formula of its raw inputs plus the term (a residual GP's, else 0)."""
        formula = self.structure.formula_for(spec.name)
        if formula is None:
            assert isinstance(gp_term, Tensor), f"node {spec.name!r} has neither GP nor formula"
            return gp_term
        raw = formula.evaluate([self._to_raw(p, values[p]) for p in formula.inputs])
        return self._to_model(spec.name, raw + gp_term)

    def _to_raw(self, node: str, value: Tensor) -> Tensor:
        return to_raw(self.structure.transforms.get(node), value)

    def _to_model(self, node: str, raw: Tensor) -> Tensor:
        return to_model(self.structure.transforms.get(node), raw)


class GPNetwork(_Pointwise, EnsembleModel):
    """A GP network: composed posterior sample paths through a DAG (see module docstring).

    Build it with `fit_gp_network`. ``posterior(X)`` for a ``batch x q x d`` input returns an
    `EnsemblePosterior` with values ``batch x num_paths x q x m`` (raw units, ``m`` outputs).

    Args:
        structure: The DAG.
        specs: Per non-parameter node, in topological order: its columns and parents.
        gps: Node name -> fitted GP (nodes defined by a formula without residual have none).
        outputs: Output node names, in output order.
        config: Network options.
        seed: Seed of the sample paths.
    """

    def __init__(
        self,
        structure: Structure,
        specs: Sequence[_NodeSpec],
        gps: Mapping[str, SingleTaskGP],
        outputs: Sequence[str],
        config: NetworkConfig,
        seed: int,
    ) -> None:
        super().__init__()
        self.structure = structure
        self.specs = list(specs)
        self.outputs = list(outputs)
        self.config = config
        self.gps = ModuleDict({_mkey(k): gp for k, gp in gps.items()})
        self._num_outputs = len(self.outputs)
        self.seed = seed
        self._shared_cache: tuple[Tensor, Tensor] | None = None
        self.output_scale: dict[str, float] = {}  # output -> variance factor (`calibrated`)
        self._paths: ModuleDict | None = None  # drawn on first use (scoring never needs them)
        self._noise_offsets: Tensor | None = None
        for p in self.parameters():
            p.requires_grad_(False)

    @property
    def paths(self) -> ModuleDict:
        """Node -> its ``num_paths`` posterior sample paths (drawn, seeded, on first use)."""
        return self._drawn()[0]

    def _drawn(self) -> tuple[ModuleDict, Tensor]:
        """The sample paths and the per-path noise offsets, drawn on first use."""
        if self._paths is None or self._noise_offsets is None:
            self._paths, self._noise_offsets = self._draw_paths()
        return self._paths, self._noise_offsets

    def _draw_paths(self) -> tuple[ModuleDict, Tensor]:
        config = self.config
        prior = functools.partial(draw_kernel_feature_paths, num_features=config.num_features)
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            paths = ModuleDict(
                {
                    key: draw_matheron_paths(
                        gp, sample_shape=torch.Size([config.num_paths]), prior_sampler=prior
                    )
                    for key, gp in self.gps.items()
                }
            )
            # Observation noise of intermediate nodes is part of what their children read: one
            # standard-normal draw per path and node, scaled by the node's fitted noise, so a
            # metric the parameters explain only partly passes its spread on (and a path stays
            # a smooth function of the inputs). Outputs, and nodes without propagation, add 0.
            draws = torch.randn(config.num_paths, max(len(self.specs), 1), dtype=torch.float64)
        scale = torch.tensor([self._propagated_sd(spec.name) for spec in self.specs])
        for p in paths.parameters():
            p.requires_grad_(False)
        for key, path in list(paths.items()):
            gp: Any = self.gps[key]
            # Checked on a few training inputs: evaluating BoTorch's tree costs more than
            # drawing it, and a wrong read of its tensors shows on any point.
            fast = fast_paths(gp, path, gp.train_inputs[0][:_CHECK_POINTS])
            if fast is not None:  # the same paths in a few tensor operations
                paths[key] = fast
        return paths, draws[:, : len(self.specs)] * scale.to(draws)

    def posterior(  # type: ignore[override]
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        posterior_transform: PosteriorTransform | None = None,
        **kwargs: Any,
    ) -> PathPosterior:
        """Joint posterior at ``X`` (``batch x q x d``) over the outputs (all, or `output_indices`).

        Returns:
            A `PathPosterior` with values ``batch x num_paths x q x m``.
        """
        if self.training:  # `eval()` walks every submodule: only when needed
            self.eval()
        values = self.forward(X)
        if output_indices is not None:
            values = values[..., output_indices]
        posterior = PathPosterior(values)
        if posterior_transform is not None:
            return posterior_transform(posterior=posterior, X=X)  # type: ignore[return-value]
        return posterior

    def forward(self, X: Tensor) -> Tensor:
        """Network outputs at ``X``.

        Args:
            X: A ``batch x q x d``-dim Tensor of unit-cube inputs.

        Returns:
            A ``batch x num_paths x q x m``-dim Tensor of joint samples (raw units).
        """
        if X.dim() >= 3 and X.shape[-2] > 1:
            flat = X.reshape(-1, *X.shape[-2:])
            same = (flat == flat[:1]).all(dim=-1).all(dim=0)
            k = int(torch.cumprod(same.int(), 0).sum())
            if 0 < k < X.shape[-2]:
                shared = self._shared_values(flat[0, :k])  # S x k x m
                rest = self._evaluate(X[..., k:, :])  # batch x S x (q-k) x m
                shared = shared.expand(*rest.shape[:-2], k, rest.shape[-1])
                return torch.cat([shared, rest], dim=-2)
        return self._evaluate(X)

    def _shared_values(self, X: Tensor) -> Tensor:
        """`_evaluate` of the leading points shared across the batch, as constants (no gradient
        flows back to them): they are an acquisition's baseline, the same over its whole
        optimization, so they are cached (evaluating them on every call cost more than the
        candidates)."""
        X = X.detach()
        cached = self._shared_cache
        if cached is not None and cached[0].shape == X.shape and torch.equal(cached[0], X):
            return cached[1]
        values = self._evaluate(X)
        self._shared_cache = (X.clone(), values.detach())
        return values

    def _evaluate(self, X: Tensor) -> Tensor:
        """Compose the paths: ``... x q x d`` -> ``... x S x q x m``."""
        S = self.config.num_paths
        Xe = X.unsqueeze(-3).expand(*X.shape[:-2], S, *X.shape[-2:])
        paths, offsets = self._drawn()
        values: dict[str, Tensor] = {}
        for i, spec in enumerate(self.specs):
            offset = offsets[:, i].to(Xe).unsqueeze(-1)  # S x 1
            values[spec.name] = self._node_value(spec, X, Xe, values, paths) + offset
        outs = [self._to_raw(name, values[name]) for name in self.outputs]
        for j, name in enumerate(self.outputs):
            if self.output_scale.get(name, 1.0) != 1.0:  # `calibrated`
                outs[j] = _widened(outs[j], self.output_scale[name], dim=-2)
        return torch.stack(outs, dim=-1)

    def calibrated(self, scale: Mapping[str, float]) -> GPNetwork:
        """This network with each output's predictive variance times ``scale[output]`` (1 for
        outputs not named): the paths' spread about their mean at each point is widened by its
        square root (`structure.scoring.calibration_scale`, `StructuredConfig.calibrate`).
        Returns ``self``."""
        self.output_scale = {k: float(v) for k, v in scale.items() if k in self.outputs}
        self._shared_cache = None
        return self

    def _node_value(
        self,
        spec: _NodeSpec,
        X: Tensor,
        Xe: Tensor,
        values: Mapping[str, Tensor],
        paths: ModuleDict,
    ) -> Tensor:
        """Model-space value of one node on its sample paths: ``... x S x q`` (`X` is
        ``... x q x d``, `Xe` the same repeated for each of the ``S`` paths)."""
        key = _mkey(spec.name)
        path = paths[key] if key in paths else None  # noqa: SIM401 (ModuleDict has no get)
        if path is None:
            gp_value: Tensor | float = 0.0
        elif isinstance(path, FastPaths) and self._reads_parameters_only(spec):
            gp_value = path.shared(X[..., spec.columns])
        else:
            gp_value = path(self._gp_inputs(spec, Xe, values))
        return self._with_formula(spec, gp_value, values)

    def noise_variance(self, node: str) -> float:
        """Fitted observation-noise variance of `node` in its model units (0 without a GP)."""
        if _mkey(node) not in self.gps:
            return 0.0
        gp: Any = self.gps[_mkey(node)]
        noise = float(gp.likelihood.noise.detach().reshape(-1)[0])
        return noise * float(gp.outcome_transform.stdvs.detach().reshape(-1)[0]) ** 2

    def _gp_moments(self, node: str, inputs: Tensor) -> tuple[Tensor, Tensor] | None:
        key = _mkey(node)
        if key not in self.gps:
            return None
        gp: Any = self.gps[key]
        post = gp.posterior(inputs.unsqueeze(-2), observation_noise=True)
        return post.mean[..., 0, 0], post.variance[..., 0, 0]

    def conditioned(self, X: Tensor, values: Mapping[str, Tensor]) -> ConditionedNetwork:
        """This network's node GPs, hyper-parameters kept, conditioned on other trials, for
        pointwise prediction: what `fit_gp_network` with `hyperparameters` on those trials
        would predict (`predict`, `predictive_mixture`), without building its models (see
        `ConditionedNetwork`).

        Args:
            X: ``n x d``-dim unit-cube inputs.
            values: Node name -> ``n``-dim observed values in model units (as for
                `fit_gp_network`).
        """
        nodes = {}
        for spec in self.specs:
            key = _mkey(spec.name)
            if key not in self.gps:
                continue
            target = _target(self.structure, spec, values)
            assert target is not None  # a node with a GP has a target
            train_X = _node_inputs(self.structure, spec, X, values)
            nodes[spec.name] = _ExactGP(self.gps[key], train_X, target)
        return ConditionedNetwork(self, nodes)

    def relevance(self, nodes: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
        """How much each node's GP leans on each of its inputs: the ARD relevance
        (1/lengthscale on the normalized input, summed over a parameter's columns) as shares of
        the node's total, largest first.

        A rough gauge, not an effect size: an input the GP found flat has a long lengthscale
        and a small share, but two inputs that carry the same signal split it.

        Args:
            nodes: The nodes to report (default: every node with a GP); nodes without a GP
                (exact formulas) are skipped.

        Returns:
            Node -> input name (parameter or parent node) -> share (the shares sum to 1).
        """
        return {
            spec.name: relevance_shares(self.structure, spec, self.gps[_mkey(spec.name)])
            for spec in self.specs
            if _mkey(spec.name) in self.gps and (nodes is None or spec.name in nodes)
        }

    def hyperparameters(self) -> dict[str, dict[str, Tensor]]:
        """Node -> GP state dict without the outcome transform (to refit with fixed hypers)."""
        return {
            _unkey(key): {k: v for k, v in gp.state_dict().items() if not k.startswith("outcome_")}
            for key, gp in self.gps.items()
        }


def _widened(values: Tensor, factor: Tensor | float, dim: int) -> Tensor:
    """``values`` (samples along ``dim``) spread about their mean along ``dim`` by the square
    root of ``factor``: their variance times ``factor``, their mean kept."""
    centre = values.mean(dim=dim, keepdim=True)
    root = factor.sqrt() if isinstance(factor, Tensor) else math.sqrt(factor)
    return centre + root * (values - centre)


def _mkey(node: str) -> str:
    """A torch module name for a node name (module names cannot contain dots)."""
    return node.replace("%", "%25").replace(".", "%2E")


def _unkey(key: str) -> str:
    return key.replace("%2E", ".").replace("%25", "%")


def fit_gp_network(
    structure: Structure,
    X: Tensor,
    values: Mapping[str, Tensor],
    param_columns: Mapping[str, Sequence[int]],
    outputs: Sequence[str],
    config: NetworkConfig | None = None,
    seed: int = 0,
    hyperparameters: Mapping[str, Mapping[str, Tensor]] | None = None,
) -> GPNetwork:
    """Fit one GP per node of `structure` and compose them into a `GPNetwork`.

    Args:
        structure: The DAG; its parameter nodes must be keys of `param_columns`.
        X: ``n x d``-dim float64 Tensor of unit-cube inputs.
        values: Node name -> ``n``-dim Tensor of observed values in model units (after the
            node's transform) for every non-parameter node with parents.
        param_columns: Parameter node -> its columns of `X`.
        outputs: Output node names (the objectives and constraint metrics, in order).
        config: Network options; defaults when None.
        seed: Seed of the hyper-parameter fits and the sample paths.
        hyperparameters: When given (from `GPNetwork.hyperparameters`), load them instead of
            fitting: the GPs are only conditioned on `X` (used for cross-validation).

    Returns:
        The fitted `GPNetwork` in eval mode.

    Raises:
        StructureError: An output or a parent node has no values, or an output has no model.
    """
    config = config or NetworkConfig()
    specs = _node_specs(structure, param_columns, outputs)
    gps: dict[str, SingleTaskGP] = {}
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        for spec in specs:
            target = _target(structure, spec, values)
            if target is None:
                continue
            train_X = _node_inputs(structure, spec, X, values)
            bounds = _bounds(train_X, len(spec.columns))
            state = None if hyperparameters is None else hyperparameters.get(spec.name)
            gps[spec.name] = _fit_gp(
                train_X,
                target,
                bounds,
                state,
                fit_options=config.fit_options,
                linear_mean=config.linear_mean,
            )
    model = GPNetwork(structure, specs, gps, outputs, config, seed)
    model.eval()
    return model


class ConditionedNetwork(_Pointwise):
    """A fitted `GPNetwork`'s node GPs conditioned on other trials under the same
    hyper-parameters, for pointwise prediction only (`predict`, `predictive_mixture`; no
    sample paths, not a BoTorch model). Model selection scores the network on each
    cross-validation fold and prequential step (`structure.surrogate`); each node here is a
    Cholesky factor and a few tensor products (`_ExactGP`) where a `SingleTaskGP` would cost
    milliseconds of construction and posterior bookkeeping per node and step. Build it with
    `GPNetwork.conditioned`."""

    def __init__(self, network: GPNetwork, nodes: Mapping[str, _ExactGP]) -> None:
        self.structure = network.structure
        self.specs = network.specs
        self.outputs = network.outputs
        self.config = network.config
        self.seed = network.seed
        self.output_scale = {}  # scoring widens its predictions itself (`scoring.compare`)
        self._nodes = dict(nodes)

    def noise_variance(self, node: str) -> float:
        """Observation-noise variance of `node` in its model units (0 without a GP)."""
        gp = self._nodes.get(node)
        return 0.0 if gp is None else gp.noise_variance

    def _gp_moments(self, node: str, inputs: Tensor) -> tuple[Tensor, Tensor] | None:
        gp = self._nodes.get(node)
        return None if gp is None else gp.moments(inputs)
