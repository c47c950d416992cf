"""rewrite.pytorch: graphs back as PyTorch modules, optimize_module and the torch.compile backend.

Small shapes on the CPU; Inductor only where the test is about it (it compiles C++)."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch

import rewrite
from rewrite import (
    GraphBuilder,
    ModuleError,
    ModuleMismatchError,
    from_torch,
    search,
    to_module,
    zoo,
)
from rewrite.lowering import kernels
from rewrite.pytorch import dynamo
from tests.rewrite.test_measure import ZOO, _one_op
from tests.rewrite.test_ops import CASES


class GeluMLP(torch.nn.Module):
    """A linear layer and GPT-2's tanh-approximated GELU written out (fuse_gelu_tanh applies)."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(d, 4 * d)
        self.proj = torch.nn.Linear(4 * d, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(self.norm(x))
        h = 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * torch.pow(h, 3.0))))
        return self.proj(h) + x


def _mlp() -> tuple[GeluMLP, torch.Tensor]:
    torch.manual_seed(0)
    return GeluMLP().eval(), torch.randn(2, 8, 16)


# ---------------------------------------------------------------- to_module
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_op_emits_a_module_matching_the_reference(case: tuple) -> None:
    g, arrays = _one_op(case)
    gm = to_module(g, {}, inputs=[torch.from_numpy(a) for a in arrays])
    outs = gm(*[torch.from_numpy(a) for a in arrays])
    ref = rewrite.evaluate(g, arrays)
    for o, r in zip(outs, ref):
        np.testing.assert_allclose(o.double().numpy(), r.astype(np.float64), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", ZOO)
def test_zoo_modules_share_weights_and_keep_the_output_structure(name: str) -> None:
    m = zoo.model(name)
    g = m.to_graph()
    gm = to_module(g)  # the module from_torch recorded; checked against it before returning
    out, ref = gm(*m.args), m.module(*m.args, **m.kwargs)
    assert type(out) is type(ref)
    original = dict(m.module.named_parameters(remove_duplicate=False))
    for key, p in gm.named_parameters():
        assert original[key] is p  # shared, not copied, under the state_dict name
    assert set(gm.state_dict()) <= set(m.module.state_dict())


def _hf(arch: str) -> tuple[torch.nn.Module, torch.Tensor]:
    import transformers

    small = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 1000,
    }
    config, model = {
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        "gpt_neox": (transformers.GPTNeoXConfig, transformers.GPTNeoXForCausalLM),
    }[arch]
    kv = {} if arch == "gpt_neox" else {"num_key_value_heads": 2}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        m = model(config(**small, **kv)).eval()
    return m, torch.randint(0, 1000, (1, 16), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("arch", ["qwen2", "mistral", "gpt_neox"])
def test_hugging_face_models_outside_the_zoo_come_back_as_modules(arch: str) -> None:
    model, ids = _hf(arch)
    g = from_torch(model, (ids,), {"use_cache": False})
    res = search(g, config={"max_steps": 120, "seed": 0}, device="cpu")
    assert res.pareto and all(n.op != "opaque" for n in g)
    for i in range(min(len(res.pareto), 3)):  # each checked against the model when built
        gm = res.module(i)
        torch.testing.assert_close(
            gm(ids).logits, model(ids, use_cache=False).logits, rtol=1e-4, atol=1e-4
        )


def test_search_result_module_folds_weight_only_subgraphs() -> None:
    class QKV(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.q(x)) + self.k(x)

    torch.manual_seed(0)
    model, x = QKV().eval(), torch.randn(4, 8)
    g = from_torch(model, (x,))
    rule = rewrite.default_registry()["merge_parallel_linear"]
    merged = rule.apply(g, rule.matches(g)[0])
    gm = to_module(merged, origin=g)
    folded = [n for n, _ in gm.named_buffers() if n.startswith("_folded")]
    assert folded and not any(n.startswith("_folded") for n in gm.state_dict())  # non-persistent
    assert "torch.cat" not in gm.code  # the weight concatenation ran once, at build time
    torch.testing.assert_close(gm(x), model(x))
    unfolded = to_module(merged, origin=g, fold=False)
    assert "torch.cat" in unfolded.code
    torch.testing.assert_close(unfolded(x), model(x))


def test_the_check_computes_float32_without_tf32_and_restores_the_flags() -> None:
    from rewrite.lowering.check import exact_float32

    flags = (torch.backends.cudnn, torch.backends.cuda.matmul)
    before = [f.allow_tf32 for f in flags]
    with pytest.raises(RuntimeError), exact_float32():
        assert [f.allow_tf32 for f in flags] == [False, False]
        raise RuntimeError("the flags come back on errors too")
    assert [f.allow_tf32 for f in flags] == before


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
def test_folded_batch_norms_pass_the_check_on_cuda() -> None:
    # cuDNN runs float32 convolutions in TF32 by default: a folded batch norm changed the rounding
    # by 1.3e-3 relative and the check refused ResNet-50's rewritten module on an H100
    class ConvBN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(64, 256, 3, padding=1, bias=False)
            self.bn = torch.nn.BatchNorm2d(256)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.bn(self.conv(x)))

    torch.manual_seed(0)
    model = ConvBN().eval().cuda()
    torch.nn.init.uniform_(model.bn.running_var, 0.5, 2.0)
    x = torch.randn(1, 64, 56, 56, device="cuda")
    g = from_torch(model, (x,))
    rule = rewrite.default_registry()["fold_conv_batch_norm"]
    folded = rule.apply(g, rule.matches(g)[0])
    gm = to_module(folded, origin=g)  # raises ModuleMismatchError when the check rounds in TF32
    assert gm(x).shape == model(x).shape


def test_a_wrong_kernel_is_named_in_the_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    model, x = _mlp()
    g = from_torch(model, (x,))
    table = kernels._table()
    monkeypatch.setitem(table, "tanh", lambda a, at, s: kernels.TorchCall(torch.sigmoid, tuple(a)))
    with pytest.raises(ModuleMismatchError) as e:
        to_module(g)
    assert e.value.node is not None and "(tanh)" in e.value.node
    assert "max abs difference" in str(e.value) and "rewrite.lowering.kernels" in str(e.value)


def test_a_graph_that_differs_from_the_module_is_refused() -> None:
    model, x = _mlp()
    g = from_torch(model, (x,))
    other, _ = _mlp()
    with torch.no_grad():
        other.proj.bias.add_(1.0)  # same names and shapes, different weights: outputs differ
    gm = to_module(g, dict(other.named_parameters()), check=False)
    with pytest.raises(ModuleMismatchError) as e:
        rewrite.pytorch.check_module(
            gm, g, rewrite.pytorch.TorchSource.of(model), dict(other.named_parameters())
        )
    assert e.value.node is None and "Every node agrees" in str(e.value)


def test_bad_weights_are_clear_errors() -> None:
    model, x = _mlp()
    g = from_torch(model, (x,))
    with pytest.raises(ModuleError, match=r"did you mean 'fc\.weigth'"):
        to_module(
            g, {k.replace("fc.weight", "fc.weigth"): v for k, v in model.state_dict().items()}
        )
    with pytest.raises(ModuleError, match="'meta' device"):
        to_module(g, {k: v.to("meta") for k, v in model.state_dict().items()})
    with pytest.raises(ModuleError, match="float32 tensor of shape"):
        to_module(g, {k: v.double() for k, v in model.state_dict().items()})
    with pytest.raises(ModuleError, match="not imported by rewrite.from_torch"):
        to_module(rewrite.from_json(rewrite.to_json(g)))


def test_opaque_nodes_cannot_become_modules() -> None:
    b = GraphBuilder("opaque")
    x = b.input("x", (4,))
    y = b.add_node("opaque", [x], target="aten.cumsum.default", out_types=(((4,), "float32"),))
    with pytest.raises(ModuleError, match="opaque op 'aten.cumsum.default'"):
        to_module(b.build([y.out(0)]), {})


def test_the_module_exports_and_loads_without_rewrite(tmp_path) -> None:  # noqa: ANN001
    model, x = _mlp()
    res = search(from_torch(model, (x,)), config={"max_steps": 60, "seed": 0}, device="cpu")
    gm = res.module(0)
    path = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(gm, (x,)), str(path))
    torch.save({"x": x, "y": model(x).detach()}, tmp_path / "io.pt")
    script = textwrap.dedent(
        f"""
        import sys, torch
        ep = torch.export.load({str(path)!r})
        io = torch.load({str(tmp_path / "io.pt")!r})
        torch.testing.assert_close(ep.module()(io["x"]), io["y"])
        assert not any(m == "rewrite" or m.startswith("rewrite.") for m in sys.modules)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=tmp_path)


# ---------------------------------------------------------------- optimize_module
def test_optimize_module_reports_and_chooses_by_prediction_without_measuring() -> None:
    model, x = _mlp()
    opt, report = rewrite.optimize_module(model, (x,), config={"max_steps": 80}, measure=False)
    assert report.chosen >= 0 and report.predicted_speedup > 1.0
    from rewrite.pytorch.optimize import default_profile

    # this machine's shipped measured profile where its CPU has one, else the datasheet's
    assert report.rules and report.profile == default_profile(torch.device("cpu")).name
    assert report.profile in ("cpu+eager", *(p.name for p in rewrite.devices.measured_profiles()))
    torch.testing.assert_close(opt(x), model(x))
    assert "not measured" in str(report)


def test_optimize_module_measures_and_keeps_the_original_when_not_faster() -> None:
    model, x = _mlp()
    opt, report = rewrite.optimize_module(model, (x,), config={"max_steps": 80}, repeats=5)
    assert [c.index for c in report.candidates][0] == -1
    assert all(c.speedup is not None for c in report.candidates[1:])
    if report.chosen < 0:
        assert opt.original is model and "Kept the original" in report.reason
        torch.testing.assert_close(opt(x), model(x))
    else:
        assert report.measured_speedup.low > 1.0
        torch.testing.assert_close(opt(x), model(x))
    assert report.to_dict()["device"] == "cpu"


def test_optimize_module_refuses_bad_input() -> None:
    with pytest.raises(ModuleError, match="needs a torch.nn.Module"):
        rewrite.optimize_module(lambda x: x, (torch.ones(1),))
    model, x = _mlp()
    with pytest.raises(ModuleError, match="candidates must be an int"):
        rewrite.optimize_module(model, (x,), candidates=0)


# ---------------------------------------------------------------- the torch.compile backend
@pytest.fixture
def cache_dir(tmp_path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN001, ANN201
    monkeypatch.setenv("REWRITE_CACHE_DIR", str(tmp_path))
    dynamo.history.clear()
    torch._dynamo.reset()
    yield tmp_path
    torch._dynamo.reset()


def _eager_backend() -> object:
    """The backend without Inductor (fast) and choosing by prediction (deterministic)."""
    return rewrite.backend(config={"max_steps": 80}, inductor=False, measure=False)


def test_backend_rewrites_and_caches_its_choice(cache_dir) -> None:  # noqa: ANN001
    model, x = _mlp()
    with torch.no_grad():
        out = torch.compile(model, backend=_eager_backend())(x)
        torch.testing.assert_close(out, model(x))
        torch._dynamo.reset()
        torch.compile(model, backend=_eager_backend())(x)
    first, second = dynamo.history
    assert first.rewritten and not first.cached and "fuse_gelu_tanh" in first.rules
    assert second.rewritten and second.cached and second.rules == first.rules
    assert list((cache_dir / "compile").glob("*.json"))


def test_backend_falls_back_with_a_reason(cache_dir, caplog: pytest.LogCaptureFixture) -> None:  # noqa: ANN001
    model, x = _mlp()
    out = torch.compile(model, backend=_eager_backend())(x)  # grad enabled: a training graph
    torch.testing.assert_close(out, model(x))
    torch._dynamo.reset()

    class Cumsum(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cumsum(x, 0) * 2.0

    with torch.no_grad():
        torch.compile(Cumsum(), backend=_eager_backend())(x)
        torch._dynamo.reset()
        torch.compile(model, backend=_eager_backend(), dynamic=True)(x)
    reasons = [r.reason for r in dynamo.history]
    assert not any(r.rewritten for r in dynamo.history)
    assert "needs gradients" in reasons[0]
    assert "ops the IR does not know" in reasons[1]
    assert "dynamic shapes" in reasons[2]
    assert sum("compiled by Inductor unchanged" in m for m in caplog.messages) == 3


def test_backend_notices_weights_changed_after_compiling(cache_dir) -> None:  # noqa: ANN001
    model, x = _mlp()
    with torch.no_grad():
        compiled = torch.compile(model, backend=_eager_backend())
        compiled(x)
        model.fc.weight.mul_(2.0)  # in place: same tensor, new values
        with warnings.catch_warnings():
            torch.testing.assert_close(compiled(x), model(x))


def test_backend_is_registered_under_its_name() -> None:
    from torch._dynamo import list_backends, lookup_backend

    assert "rewrite" in list_backends(exclude_tags=())
    assert lookup_backend("rewrite") is dynamo.rewrite_backend


def test_backend_with_inductor_measures_its_runners(cache_dir) -> None:  # noqa: ANN001
    model, x = _mlp()
    with torch.no_grad():
        compiled = torch.compile(model, backend=rewrite.backend(config={"max_steps": 40}))
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    record = dynamo.history[-1]
    assert set(record.measured) == {"inductor", "rewritten+inductor", "rewritten eager"}
    assert record.runner in record.measured
    assert record.rewritten == (record.runner != "inductor")


def _fake_inductor(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, dict]]:
    """Replace Inductor's entry point by a recorder that runs the module eagerly (fast)."""
    import torch._inductor.compile_fx as cfx

    calls: list[tuple[object, dict]] = []

    def compile_fx(gm, example_inputs, **kwargs):  # noqa: ANN001, ANN202
        calls.append((gm, kwargs))
        return gm.forward if hasattr(gm, "forward") else gm

    monkeypatch.setattr(cfx, "compile_fx", compile_fx)
    return calls


def test_without_measuring_the_captured_graph_is_not_compiled(
    cache_dir, monkeypatch: pytest.MonkeyPatch
) -> None:  # noqa: ANN001
    """Issue 52 bug 6: with measure=False the captured graph was compiled by Inductor anyway."""
    from rewrite.pytorch.optimize import default_profile

    calls = _fake_inductor(monkeypatch)
    model, x = _mlp()
    eager = default_profile(torch.device("cpu"))  # where this model has a predicted gain
    be = rewrite.backend(config={"max_steps": 80}, profile=eager, measure=False)
    with torch.no_grad():
        compiled = torch.compile(model, backend=be)
        torch.testing.assert_close(compiled(x), model(x))
    assert dynamo.history[-1].rewritten
    assert len(calls) == 1 and type(calls[0][0]).__name__ != "GraphModule"  # the rewritten module


def test_the_cache_key_holds_the_profiles_contents_and_the_time_budget(cache_dir) -> None:  # noqa: ANN001
    """Issue 52 bug 4: two profiles of one name and 100x different costs shared a cache record,
    and so did two time budgets."""
    import dataclasses

    from rewrite import load_device

    cpu = load_device("cpu")
    slow = dataclasses.replace(cpu, launch_overhead=cpu.launch_overhead * 100)
    model, x = _mlp()
    with torch.no_grad():
        for profile, budget in ((cpu, 60.0), (slow, 60.0), (cpu, 30.0), (cpu, 60.0)):
            torch._dynamo.reset()
            be = rewrite.backend(
                config={"max_steps": 40},
                profile=profile,
                time_budget=budget,
                inductor=False,
                measure=False,
            )
            torch.compile(model, backend=be)(x)
    assert [r.cached for r in dynamo.history] == [False, False, False, True]


def test_the_backend_takes_torch_compiles_mode_and_options(
    cache_dir, monkeypatch: pytest.MonkeyPatch
) -> None:  # noqa: ANN001
    """Issue 52: ``torch.compile(m, backend="rewrite", mode="max-autotune")`` raised
    ``unexpected keyword argument 'mode'``; mode and options go to Inductor."""
    calls = _fake_inductor(monkeypatch)
    model, x = _mlp()
    with torch.no_grad():
        out = torch.compile(model, backend="rewrite", mode="max-autotune")(x)
        torch.testing.assert_close(out, model(x))
        torch._dynamo.reset()
        be = rewrite.backend(config={"max_steps": 40}, measure=False)
        torch.compile(model, backend=be, options={"max_autotune": True})(x)
    assert calls and all(kw.get("config_patches", {}).get("max_autotune") for _, kw in calls)


def test_any_failure_of_the_backend_falls_back_to_inductor_with_one_line(
    cache_dir, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:  # noqa: ANN001
    """A backend must never break a user's compile: an error of its own (here a search that
    raises what no rewrite error class covers) gives Inductor the captured graph, with one
    warning."""
    import rewrite.pytorch.optimize as po

    calls = _fake_inductor(monkeypatch)

    def broken(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise ValueError("operands could not be broadcast together")

    monkeypatch.setattr(po, "deploy_search", broken)
    model, x = _mlp()
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="rewrite.pytorch.dynamo"):
        out = torch.compile(model, backend=rewrite.backend(config={"max_steps": 40}))(x)
    torch.testing.assert_close(out, model(x))
    assert len(calls) == 1 and type(calls[0][0]).__name__ == "GraphModule"
    lines = [r for r in caplog.records if r.name == "rewrite.pytorch.dynamo"]
    assert len(lines) == 1 and "ValueError" in lines[0].getMessage()
    assert "broadcast" in dynamo.history[-1].reason


@pytest.mark.slow
def test_phi_at_sequence_length_16_optimizes_and_compiles(cache_dir) -> None:  # noqa: ANN001
    """Issue 52: Phi (2 layers, width 128, 4 heads) at sequence length 16 crashed the final
    whole-graph check (a batched 1-D linear, `tests/rewrite/test_verify.py`)."""
    import transformers

    cfg = transformers.PhiConfig(
        num_hidden_layers=2,
        hidden_size=128,
        num_attention_heads=4,
        intermediate_size=256,
        vocab_size=1000,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        phi = transformers.PhiForCausalLM(cfg).eval()
    ids = torch.randint(0, 1000, (1, 16), generator=torch.Generator().manual_seed(0))
    fast, report = rewrite.optimize_module(phi, (ids,), {"use_cache": False}, repeats=3)
    torch.testing.assert_close(
        fast(ids).logits, phi(ids, use_cache=False).logits, rtol=1e-4, atol=1e-4
    )
    with torch.no_grad():
        be = rewrite.backend(config={"max_steps": 300}, inductor=False, measure=False)
        out = torch.compile(phi, backend=be)(ids, use_cache=False)
    torch.testing.assert_close(out.logits, phi(ids, use_cache=False).logits, rtol=1e-4, atol=1e-4)
    assert not any("failed" in r.reason for r in dynamo.history)


class KeywordMLP(GeluMLP):
    """`GeluMLP` with a keyword argument, as Hugging Face models take ``use_cache``."""

    def forward(self, x: torch.Tensor, twice: bool = False) -> torch.Tensor:  # type: ignore[override]
        y = super().forward(x)
        return 2.0 * y if twice else y


def test_the_optimized_module_is_called_as_the_original() -> None:
    """Issue 52: the module optimize_module returned refused the original's keyword arguments
    (``fast(ids, use_cache=False)``) and was a local class (``as_called.<locals>.AsCalled``)."""
    from rewrite.lowering.source import OptimizedModule, as_called

    torch.manual_seed(0)
    model, x = KeywordMLP().eval(), torch.randn(2, 8, 16)
    fast, report = rewrite.optimize_module(
        model, (x,), {"twice": False}, config={"max_steps": 60}, measure=False
    )
    assert report.chosen >= 0 and type(fast) is OptimizedModule
    kept = as_called(model, (x,), {"twice": False})  # what it returns when nothing is faster
    assert type(kept) is OptimizedModule and kept.original is model
    for m in (fast, kept):
        for out in (m(x), m(x, twice=False)):
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
        with pytest.raises(ModuleError, match="twice=False, but got True"):
            m(x, twice=True)
        with pytest.raises(
            ModuleError, match=r"keyword arguments \['twice'\], but got \['scale'\]"
        ):
            m(x, scale=2.0)
