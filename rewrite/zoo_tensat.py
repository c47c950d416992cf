"""The seven graphs of TASO and Tensat, built in PyTorch and imported with `rewrite.from_torch`.

BERT, NasRNN, ResNeXt-50, NasNet-A, Inception-v3, SqueezeNet and VGG-19 at their papers' shapes
(``size="full"``, batch 1: what uwplse/tensat builds in ``src/*.rs`` and reads from
``model/*.model``, and jiazhihao/TASO in ``examples/*.py``), or narrow and shallow
(``size="small"``, the same code at test sizes). The modules are in `rewrite._tensat_models`;
torchvision is not used (its PyPI wheel does not import beside torch 2.13 here, and its models
differ from the papers' graphs: batch norm, biases, auxiliary heads). Nothing is downloaded.

Like `rewrite.zoo`, full-size parameters live on the ``meta`` device by default (no memory, no
init time); pass ``device="cpu"`` for real seeded weights (e.g. to time the graph).

Example:
    >>> g = zoo_tensat.build("nasrnn")                 # small
    >>> g = zoo_tensat.build("squeezenet", size="full")
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rewrite.errors import RewriteError
from rewrite.ir import Graph
from rewrite.zoo import SIZES, ZooModel

__all__ = ["SIZES", "SOURCES", "build", "model", "names"]


@dataclass(frozen=True)
class _Spec:
    make: Callable[[Any, dict[str, Any]], Any]  # (module classes, sizes) -> module
    inputs: Callable[[dict[str, Any]], list[tuple[int, ...]]]  # sizes -> input shapes
    full: dict[str, Any]
    small: dict[str, Any]


def _image(n: int) -> Callable[[dict[str, Any]], list[tuple[int, ...]]]:
    return lambda s: [(1, 3, s.get("image", n), s.get("image", n))]


_SPECS: dict[str, _Spec] = {
    "bert": _Spec(
        lambda m, s: m.Bert(s["seq"], s["hidden"], s["heads"], s["layers"]),
        lambda s: [(s["seq"], s["hidden"])],
        {"seq": 64, "hidden": 1024, "heads": 16, "layers": 8},
        {"seq": 8, "hidden": 32, "heads": 4, "layers": 2},
    ),
    "nasrnn": _Spec(
        lambda m, s: m.NasRNN(s["hidden"], s["length"]),
        lambda s: [(1, s["hidden"])] * s["length"],
        {"hidden": 512, "length": 5},
        {"hidden": 16, "length": 2},
    ),
    "resnext50": _Spec(
        lambda m, s: m.ResNeXt50(s["stem"], s["widths"], s["blocks"], s["groups"]),
        _image(224),
        {"stem": 64, "widths": (128, 256, 512, 1024), "blocks": (3, 4, 6, 3), "groups": 32},
        {"stem": 8, "widths": (8, 16), "blocks": (1, 1), "groups": 4, "image": 32},
    ),
    "nasneta": _Spec(
        lambda m, s: m.NasNetA(s["stem"], s["out"], s["stages"], s["cells"]),
        _image(224),
        {"stem": 64, "out": 128, "stages": 3, "cells": 5},
        {"stem": 8, "out": 4, "stages": 1, "cells": 2, "image": 32},
    ),
    "inceptionv3": _Spec(
        lambda m, s: m.InceptionV3(s["div"]),
        _image(299),
        {"div": 1},
        {"div": 16, "image": 75},
    ),
    "squeezenet": _Spec(
        lambda m, s: m.SqueezeNet(s["div"], s["classes"]),
        _image(224),
        {"div": 1, "classes": 1000},
        {"div": 8, "classes": 10, "image": 64},
    ),
    "vgg19": _Spec(
        lambda m, s: m.Vgg19(s["div"], s.get("image", 224), s["classes"]),
        _image(224),
        {"div": 1, "classes": 1000},
        {"div": 16, "classes": 10, "image": 32},
    ),
}

#: Where each builder comes from (repository and path).
SOURCES = {
    "bert": "uwplse/tensat src/bert.rs (TASO examples/bert.py)",
    "nasrnn": "uwplse/tensat src/nasrnn.rs (TASO examples/nasrnn.py)",
    "resnext50": "uwplse/tensat src/resnext50.rs (TASO examples/resnext50.py)",
    "nasneta": "uwplse/tensat src/nasneta.rs (TASO examples/nasnet_a.py)",
    "inceptionv3": "uwplse/tensat model/inceptionv3.model (TASO examples/inceptionv3.py)",
    "squeezenet": "uwplse/tensat model/squeezenet.model (SqueezeNet 1.1)",
    "vgg19": "uwplse/tensat model/vgg.model",
}


def names() -> list[str]:
    """Names of the Tensat graphs, in the papers' order."""
    return list(_SPECS)


def _spec(name: str) -> _Spec:
    if name not in _SPECS:
        close = difflib.get_close_matches(str(name).lower(), names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        raise RewriteError(f"unknown Tensat graph {name!r}: the graphs are {names()}{hint}")
    return _SPECS[name]


def model(name: str, size: str = "small", *, seed: int = 0, device: str | None = None) -> ZooModel:
    """Build a Tensat graph's module without importing it.

    Args:
        name: One of `names`.
        size: ``"small"`` (test shapes) or ``"full"`` (the papers' shapes).
        seed: Seed of the weights and inputs (the caller's torch RNG state is left unchanged).
        device: ``"cpu"`` or ``"meta"`` (default: cpu for small, meta for full).

    Returns:
        A `rewrite.zoo.ZooModel` (module in eval mode, example inputs).

    Raises:
        RewriteError: On an unknown name, size or device.
    """
    import torch

    from rewrite import _tensat_models

    spec = _spec(name)
    if size not in SIZES:
        raise RewriteError(f"Tensat graph size must be one of {SIZES}, but got {size!r}.")
    dev = device or ("cpu" if size == "small" else "meta")
    if dev not in ("cpu", "meta"):
        raise RewriteError(f"device must be 'cpu' or 'meta', but got {device!r}.")
    sizes = spec.full if size == "full" else spec.small
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.device(dev):
            module = spec.make(_tensat_models, sizes).eval()
        gen = torch.Generator().manual_seed(seed)
        args = tuple(torch.randn(*shape, generator=gen).to(dev) for shape in spec.inputs(sizes))
    return ZooModel(f"{name}-{size}", module, args, {}, {})


def build(name: str, size: str = "small", *, seed: int = 0, device: str | None = None) -> Graph:
    """Build a Tensat graph and import it (`model`'s arguments).

    Raises:
        RewriteError: See `model`.
    """
    return model(name, size, seed=seed, device=device).to_graph()
