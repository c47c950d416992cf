"""Import of real PyTorch models: every zoo model, numerics against torch, bad input.

Every zoo model imports with no opaque node at both sizes (the full sizes are `slow`).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from rewrite import OpaqueOpWarning, TorchImportError, evaluate, from_torch, zoo
from rewrite.errors import RewriteError


def _reference(zm: zoo.ZooModel) -> np.ndarray:
    with torch.no_grad():
        out = zm.module(*zm.args, **zm.kwargs)
    for attr in ("logits", "last_hidden_state"):
        if getattr(out, attr, None) is not None:
            return getattr(out, attr).numpy()
    return out[0].numpy()


@pytest.mark.parametrize("name", zoo.names())
def test_small_zoo_model_imports_whole_and_matches_torch(name: str) -> None:
    zm = zoo.model(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", OpaqueOpWarning)
        g = zm.to_graph()
    counts = g.op_counts()
    assert "opaque" not in counts
    assert len(g) > 20 and counts["param"] > 10
    state = {k: v.detach().numpy() for k, v in zm.module.state_dict().items()}
    (got, *_) = evaluate(g, [a.numpy() for a in zm.args], state)
    ref = _reference(zm)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_importer_keeps_linear_sdpa_and_layer_norm_whole(zoo_gpt2) -> None:
    counts = zoo.build("bert").op_counts()
    assert counts["linear"] > 0 and counts["sdpa"] == 2 and counts["layer_norm"] == 5
    assert "softmax" not in counts and "bmm" not in counts
    assert zoo_gpt2.op_counts()["sdpa"] == 2


def test_causal_mask_building_is_folded(zoo_gpt2) -> None:
    ops = set(zoo_gpt2.op_counts())
    assert not ops & {"opaque", "le", "logical_and", "eq", "cumsum"}
    llama = zoo.build("llama").op_counts()
    assert not set(llama) & {"opaque", "cos", "sin", "le", "logical_and"}


class _Odd(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(torch.relu(x), dim=1).flip(0) * 2


def test_unknown_ops_become_opaque_with_one_warning() -> None:
    with pytest.warns(
        OpaqueOpWarning, match=r"aten.cumsum.default x1, aten.flip.default x1"
    ) as rec:
        g = from_torch(_Odd(), (torch.randn(3, 4),))
    assert sum(issubclass(w.category, OpaqueOpWarning) for w in rec) == 1
    assert g.op_counts()["opaque"] == 2
    assert g.output_types[0].shape == (3, 4)


class _Branch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x


class _Mask(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x > 0]


class _NonZero(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x)


class _Item(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x.sum().item()


@pytest.mark.parametrize(
    ("module", "construct", "fix", "line"),
    [
        (_Branch(), "control flow on a tensor's value", "torch.where", "if x.sum() > 0"),
        (_Mask(), "shape depends on tensor values", "torch.where", "return x[x > 0]"),
        (_NonZero(), "shape depends on tensor values", "topk", "torch.nonzero(x)"),
        (_Item(), "tensor's value as a Python number", "keep it a tensor", "x.sum().item()"),
    ],
    ids=["branch", "mask", "nonzero", "item"],
)
def test_export_failures_name_the_construct_its_line_and_the_fix(
    module: torch.nn.Module, construct: str, fix: str, line: str, capfd: pytest.CaptureFixture
) -> None:
    with pytest.raises(TorchImportError) as err:
        from_torch(module, (torch.randn(3, 4),), name="dd")
    msg = str(err.value)
    assert "model 'dd'" in msg and construct in msg and fix in msg.split("Fix:")[1]
    assert "test_import.py" in msg and line in msg  # the user's own line
    assert "strict=False" not in msg  # already the default
    out, errs = capfd.readouterr()
    assert "def forward" not in out + errs  # torch's partial FX graph stays off the console
    assert "symbolic_shapes" not in errs


def test_a_plain_function_is_refused_with_the_wrapping_fix() -> None:
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    with pytest.raises(
        TorchImportError, match=r"needs a torch.nn.Module, but got function.*Fix: wrap"
    ):
        from_torch(double, (torch.randn(3),))


def test_other_export_failures_point_at_eager_mode_and_strict() -> None:
    bad = (torch.randn(3, 5),)  # Linear(4, 2) cannot read it
    for strict in (False, True):
        with pytest.raises(TorchImportError, match=r"could not capture model 'lin'") as err:
            from_torch(torch.nn.Linear(4, 2), bad, name="lin", strict=strict)
        fix = str(err.value).split("Fix:")[1]
        assert "runs eagerly" in fix and ("strict=False" in fix) == strict


def test_zoo_rejects_unknown_names_sizes_and_overrides() -> None:
    with pytest.raises(RewriteError, match=r"unknown zoo model 'gpt-2'.*did you mean 'gpt2'"):
        zoo.build("gpt-2")
    with pytest.raises(RewriteError, match=r"unknown zoo model 'gpt5'.*did you mean 'gpt2'"):
        zoo.build("gpt5")
    with pytest.raises(RewriteError, match=r"size must be one of .*size='huge'"):
        zoo.build("gpt2", size="huge")
    with pytest.raises(RewriteError, match=r"names size 'full' but size='small'"):
        zoo.build("gpt2-full", size="small")
    with pytest.raises(Exception, match="n_layerz"):
        zoo.build("gpt2", n_layerz=3)
    g = zoo.build("gpt2", n_layer=1, seq_len=8)
    assert g.op_counts()["sdpa"] == 1 and g.input_types[0].shape == (1, 8)


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.names())
def test_full_zoo_model_imports_whole(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", OpaqueOpWarning)
        g = zoo.build(name, size="full")
    assert "opaque" not in g.op_counts()
    assert len(g) > 400


@pytest.mark.parametrize("name", ["llama"])
def test_meta_device_build_gives_the_same_graph(name: str) -> None:
    # weights on meta, non-persistent buffers (rotary tables, position ids) captured on the CPU
    assert zoo.build(name, device="meta").hash == zoo.build(name).hash
