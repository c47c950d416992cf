"""Bad inputs to the rewrite engine (issue 36), one table per layer: the zoo, the torch import, the
priors file and the search. Each row names the error class and what the message must hold: the
value and the fix. Every row failed before its fix (a raw error, or a graph silently built
wrong)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rewrite.errors import CostModelError, RewriteError, SearchConfigError, TorchImportError
from tests.bad_inputs import assert_refused

Case = tuple[str, Callable[[Path], Any], type[Exception], tuple[str, ...]]


def _zoo(name: Any, **kw: Any) -> Callable[[Path], Any]:
    def build(tmp: Path) -> Any:
        from rewrite import zoo

        return zoo.build(name, **kw)

    return build


#: (id, call(tmp_path), error class, substrings of the message)
ZOO: list[Case] = [
    (
        "negative-layers",  # built a 13-node graph
        _zoo("gpt2", num_hidden_layers=-1),
        RewriteError,
        ("num_hidden_layers=-1", "int >= 1", "num_hidden_layers=2"),
    ),
    (
        "seq-len-past-positions",  # failed only when measured (IndexError in an embedding)
        _zoo("gpt2", seq_len=256),
        RewriteError,
        ("128 positions", "seq_len=256", "seq_len <= 128", "n_positions=256"),
    ),
    ("name-none", _zoo(None), RewriteError, ("got None", "zoo.build('gpt2')", "'bert'")),
    ("batch-str", _zoo("gpt2", batch="x"), RewriteError, ("batch='x'", "int >= 1", "batch=16")),
    ("seq-len-0", _zoo("gpt2", seq_len=0), RewriteError, ("seq_len=0", "int >= 1")),
    ("dtype-unknown", _zoo("gpt2", dtype="float33"), RewriteError, ("'float33'", "'bfloat16'")),
    ("device-unknown", _zoo("gpt2", device="cuda:7"), RewriteError, ("'cuda:7'", "'meta'")),
    ("width-str", _zoo("gpt2", n_embd="x"), RewriteError, ("n_embd='x'", "n_embd=64")),
    ("seed-str", _zoo("gpt2", seed="a"), RewriteError, ("seed='a'", "int >= 0")),
]


def _rfft(tmp: Path) -> Any:
    import torch

    from rewrite import from_torch

    class Spectrum(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.fft.rfft(x).abs()

    return from_torch(Spectrum().eval(), torch.randn(2, 8))


IMPORT: list[Case] = [
    (
        "complex-fft",  # `Unsupported: dtype complex64`, no line, no fix
        _rfft,
        TorchImportError,
        ("aten.fft_rfft", "complex64", "test_bad_inputs.py", "torch.fft.rfft(x)", "Fix:"),
    ),
]


def _search_with_priors_file(tmp: Path) -> Any:
    import rewrite

    path = tmp / "tuned.json"
    doc = {
        "format_version": 1,
        "kind": "rewrite-tuner/rule-priors",
        "priors": {"fuse_elementwise": 1.0},
        "search_config": {"population": -3},
    }
    path.write_text(json.dumps(doc))
    return rewrite.search(_tiny_graph(), config={"max_steps": 1}, priors=path)


def _tiny_graph() -> Any:
    from rewrite.builder import GraphBuilder

    b = GraphBuilder("tiny")
    x, y = b.input("x", (4, 4)), b.input("y", (4, 4))
    return b.build([b.add_node("add", [b.add_node("mul", [x, y]).out(0), y]).out(0)])


PRIORS: list[Case] = [
    (
        "bad-knob-in-file",  # "`population` must lie in [2, 100000]", the file unnamed
        _search_with_priors_file,
        SearchConfigError,
        ("population=-3", "tuned.json", "[2, 100000]", "config={'population': ...}"),
    ),
]


def _search_on_missing_profile(tmp: Path) -> Any:
    import rewrite

    return rewrite.search(_tiny_graph(), config={"max_steps": 1}, device=str(tmp / "prof.json"))


SEARCH: list[Case] = [
    (
        "missing-profile-path",  # reported as an unknown device name
        _search_on_missing_profile,
        CostModelError,
        ("prof.json", "does not exist", "Check the path", "'h100'"),
    ),
    (
        "profile-path-is-a-folder",
        lambda tmp: _load_device(tmp),
        CostModelError,
        ("is a folder", "'cpu'"),
    ),
]


def _load_device(tmp: Path) -> Any:
    from rewrite.devices import load_device

    return load_device(tmp)


def _optimize(kind: str) -> Callable[[Path], Any]:
    """``optimize_module`` on a small model and inputs it cannot take (issue 52: PyTorch's raw
    error after an OpaqueOpWarning)."""

    def call(tmp: Path) -> Any:
        import torch

        import rewrite

        torch.manual_seed(0)
        lin = torch.nn.Linear(8, 4).eval()
        emb = torch.nn.Sequential(torch.nn.Embedding(100, 8), torch.nn.Linear(8, 4)).eval()
        if kind == "int-into-linear":
            return rewrite.optimize_module(lin, (torch.ones(2, 8, dtype=torch.int64),))
        if kind == "fp16-model-bf16-input":
            return rewrite.optimize_module(lin.half(), (torch.ones(2, 8, dtype=torch.bfloat16),))
        if kind == "index-past-vocabulary":
            return rewrite.optimize_module(emb, (torch.full((1, 5), 500),))
        return rewrite.optimize_module(lin, [torch.ones(2, 8), torch.ones(2, 8)])  # two inputs

    return call


OPTIMIZE: list[Case] = [
    (
        "int-into-linear",
        _optimize("int-into-linear"),
        RewriteError,
        ("does not run on the example inputs", "int64[2, 8]", "['float32']", "cast the inputs"),
    ),
    (
        "fp16-model-bf16-input",
        _optimize("fp16-model-bf16-input"),
        RewriteError,
        ("bfloat16[2, 8]", "['float16']", "cast the inputs"),
    ),
    (
        "index-past-vocabulary",
        _optimize("index-past-vocabulary"),
        RewriteError,
        ("IndexError", "100 rows", "largest integer input is 500", "torch.randint(0, 100"),
    ),
    (
        "inputs-not-a-tuple",
        _optimize("two-inputs"),
        RewriteError,
        ("2 positional", "TypeError", "pass (x,) for one input"),
    ),
]


def _binary_priors(tmp: Path) -> Any:
    import rewrite

    path = tmp / "weights.bin"
    path.write_bytes(bytes(range(256)) * 8)
    return rewrite.search(_tiny_graph(), config={"max_steps": 1}, priors=path)


PRIORS.append(
    (
        "binary-priors-file",  # raw UnicodeDecodeError (issue 52)
        _binary_priors,
        RewriteError,
        ("weights.bin", "not a text file", "tuner export"),
    )
)

TABLES = ZOO + IMPORT + PRIORS + SEARCH + OPTIMIZE


@pytest.mark.parametrize(
    ("call", "error", "needles"), [c[1:] for c in TABLES], ids=[c[0] for c in TABLES]
)
def test_bad_engine_input_is_refused_with_value_and_fix(
    tmp_path: Path, call: Callable[[Path], Any], error: type[Exception], needles: tuple[str, ...]
) -> None:
    assert_refused(call, (tmp_path,), error, needles)


def test_seq_len_at_the_positions_and_raised_positions_build() -> None:
    from rewrite import zoo

    assert len(zoo.build("gpt2", seq_len=128)) > 0
    assert len(zoo.build("gpt2", seq_len=256, n_positions=256)) > 0
