"""PyTorch modules of the seven TASO/Tensat benchmark graphs (see `rewrite.zoo_tensat`).

Each follows its builder in uwplse/tensat (``src/*.rs``, ``model/*.model``) or jiazhihao/TASO
(``examples/*.py``) op for op: convolutions without bias whose TASO activation is a separate
ReLU here, "SAME" padding as ``k // 2``, no batch norm (TASO's graphs have none). Sizes are
arguments so the same code builds the papers' shapes and the small test shapes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["Bert", "InceptionV3", "NasNetA", "NasRNN", "ResNeXt50", "SqueezeNet", "Vgg19"]


def _conv(
    cin: int,
    cout: int,
    k: int | tuple[int, int],
    stride: int = 1,
    groups: int = 1,
    pad: int | tuple[int, int] | None = None,
) -> nn.Conv2d:
    """A bias-free convolution; ``pad`` None is TASO's SAME (``k // 2``)."""
    kh, kw = (k, k) if isinstance(k, int) else k
    padding = (kh // 2, kw // 2) if pad is None else pad
    return nn.Conv2d(cin, cout, (kh, kw), stride, padding, groups=groups, bias=False)


class _ConvRelu(nn.Module):
    """TASO's ``conv2d(..., activation=RELU)``."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__()
        self.conv = _conv(*args, **kw)  # type: ignore[arg-type]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


# ---------------------------------------------------------------------------------- BERT
class Bert(nn.Module):
    """Tensat's BERT (``src/bert.rs``): ``layers`` attention blocks on a ``seq x hidden`` input
    after a ReLU; Q, K, V products without bias (2-d products are ``mm``, as TASO's ``matmul``
    of two matrices), heads by reshape and transpose, batched ``q @ k`` and
    ``(q k) @ v`` with no softmax (as in TASO's ``examples/bert.py``), and a linear layer that
    feeds the next block. Every block's attention output is a graph output (Tensat's ``noop``
    keeps them, where TASO's graph lets them die)."""

    def __init__(self, seq: int = 64, hidden: int = 1024, heads: int = 16, layers: int = 8):
        super().__init__()
        self.seq, self.hidden, self.heads = seq, hidden, heads
        self.w = nn.ParameterList(
            nn.Parameter(torch.randn(hidden, hidden) / hidden**0.5) for _ in range(4 * layers)
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        s, h, n = self.seq, self.hidden, self.heads
        x = torch.relu(x)
        outs = []
        for i in range(0, len(self.w), 4):
            q, k, v = (torch.mm(x, self.w[i + j]) for j in range(3))
            q, k, v = (t.reshape(s, n, h // n).transpose(0, 1) for t in (q, k, v))
            o = torch.matmul(torch.matmul(q, k), v)
            outs.append(o.transpose(0, 1).reshape(s, h))
            x = torch.mm(x, self.w[i + 3])
        return (*outs, x)


# ---------------------------------------------------------------------------------- NasRNN
class NasRNN(nn.Module):
    """Tensat's NasRNN (``src/nasrnn.rs``): ``length`` steps of the NAS cell (eight
    ``x W1 + h W2`` products per step sharing ``x`` and ``h``, then its element-wise tree) on
    ``1 x hidden`` inputs; the initial state is a weight."""

    def __init__(self, hidden: int = 512, length: int = 5):
        super().__init__()
        self.length = length
        self.state = nn.Parameter(torch.randn(1, hidden))
        self.w = nn.ParameterList(
            nn.Parameter(torch.randn(hidden, hidden) / hidden**0.5) for _ in range(16 * length)
        )

    def _cell(self, x: torch.Tensor, h: torch.Tensor, i: int) -> torch.Tensor:
        w = self.w
        t = [torch.mm(x, w[i + 2 * j]) + torch.mm(h, w[i + 2 * j + 1]) for j in range(8)]
        m0 = torch.relu(t[0]) + torch.sigmoid(t[3])
        m1 = torch.sigmoid(t[1]) + torch.tanh(t[2])
        m2 = torch.sigmoid(t[4]) * torch.tanh(t[5])
        m3 = torch.sigmoid(t[6]) * torch.relu(t[7])
        m4 = torch.sigmoid(m1) + torch.tanh(m2)
        m5 = torch.tanh(m0) * torch.tanh(m3)
        return torch.tanh(torch.tanh(m4) * torch.tanh(m5))

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.state
        for step, x in enumerate(xs):
            h = self._cell(x, h, 16 * step)
        return h


# ---------------------------------------------------------------------------------- ResNeXt-50
class _ResNeXtBlock(nn.Module):
    def __init__(self, cin: int, width: int, stride: int, groups: int):
        super().__init__()
        self.c1 = _ConvRelu(cin, width, 1)
        self.c2 = _ConvRelu(width, width, 3, stride, groups)
        self.c3 = _conv(width, 2 * width, 1)
        self.proj = _ConvRelu(cin, 2 * width, 1, stride) if stride > 1 or cin != 2 * width else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c3(self.c2(self.c1(x)))
        return torch.relu((x if self.proj is None else self.proj(x)) + y)


class ResNeXt50(nn.Module):
    """Tensat's ResNeXt-50 (``src/resnext50.rs``): a 7x7 stem, max pool, then stages of
    ``blocks`` blocks of width ``widths`` (1x1, grouped 3x3, 1x1 to twice the width, projection
    shortcut with ReLU where the shape changes), 32 groups; no batch norm."""

    def __init__(
        self,
        stem: int = 64,
        widths: Sequence[int] = (128, 256, 512, 1024),
        blocks: Sequence[int] = (3, 4, 6, 3),
        groups: int = 32,
    ):
        super().__init__()
        self.stem = _ConvRelu(3, stem, 7, 2)
        layers, cin = [], stem
        for stage, (w, n) in enumerate(zip(widths, blocks)):
            for b in range(n):
                layers.append(_ResNeXtBlock(cin, w, 2 if stage and not b else 1, groups))
                cin = 2 * w
        self.blocks = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(self.stem(x), 3, 2, 1)
        return self.blocks(x)


# ---------------------------------------------------------------------------------- NasNet-A
class _SepConv(nn.Module):
    """TASO's separable convolution: a grouped kxk convolution (``out`` groups) then 1x1."""

    def __init__(self, cin: int, out: int, k: int, stride: int):
        super().__init__()
        self.dw = _conv(cin, out, k, stride, groups=out)
        self.pw = _conv(out, out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pw(self.dw(x))


def _avg(x: torch.Tensor, stride: int = 1) -> torch.Tensor:
    return nn.functional.avg_pool2d(x, 3, stride, 1, count_include_pad=True)


class _NormalCell(nn.Module):
    def __init__(self, cin_prev: int, cin_cur: int, out: int):
        super().__init__()
        self.squeeze = _ConvRelu(cin_cur, out, 1)
        self.fit = _ConvRelu(cin_prev, out, 1)
        self.sep = nn.ModuleList(_SepConv(out, out, 3, 1) for _ in range(5))

    def forward(self, prev: torch.Tensor, cur: torch.Tensor) -> torch.Tensor:
        cur = self.squeeze(cur)
        prev = self.fit(prev)
        s = self.sep
        outs = [
            s[0](cur) + cur,
            s[1](prev) + s[2](cur),
            _avg(cur) + prev,
            _avg(prev) + _avg(prev),
            s[3](prev) + s[4](prev),
        ]
        return torch.cat(outs, 1)


class _ReductionCell(nn.Module):
    def __init__(self, cin_prev: int, cin_cur: int, out: int):
        super().__init__()
        self.squeeze = _ConvRelu(cin_cur, out, 1)
        self.fit = _ConvRelu(cin_prev, out, 1)
        self.s0, self.s1 = _SepConv(out, out, 7, 2), _SepConv(out, out, 5, 2)
        self.s2, self.s3 = _SepConv(out, out, 7, 2), _SepConv(out, out, 5, 2)
        self.s4 = _SepConv(out, out, 3, 1)

    def forward(self, prev: torch.Tensor, cur: torch.Tensor) -> torch.Tensor:
        cur = self.squeeze(cur)
        prev = self.fit(prev)
        mp = nn.functional.max_pool2d(cur, 3, 2, 1)
        o0 = self.s0(prev) + self.s1(cur)
        o1 = mp + self.s2(prev)
        o2 = _avg(cur, 2) + self.s3(prev)
        o3 = mp + self.s4(o0)
        o4 = _avg(o0) + o1
        return torch.cat([o0, o1, o2, o3, o4], 1)


class NasNetA(nn.Module):
    """Tensat's NasNet-A (``src/nasneta.rs``): a 7x7 stem and max pool, then ``stages`` stages
    of ``cells`` normal cells and one reduction cell, the width doubling at each reduction."""

    def __init__(self, stem: int = 64, out: int = 128, stages: int = 3, cells: int = 5):
        super().__init__()
        self.stem = _ConvRelu(3, stem, 7, 2)
        self.cells = nn.ModuleList()
        self.shape: list[tuple[int, int]] = []  # (stage, cell) layout for forward
        width = stem
        for _ in range(stages):
            prev = cur = width
            for _ in range(cells):
                self.cells.append(_NormalCell(prev, cur, out))
                prev, cur = cur, 5 * out
            out *= 2
            self.cells.append(_ReductionCell(prev, cur, out))
            width = 5 * out
        self.cells_per_stage = cells

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(self.stem(x), 3, 2, 1)
        it = iter(self.cells)
        for _ in range(len(self.cells) // (self.cells_per_stage + 1)):
            prev = cur = x
            for _ in range(self.cells_per_stage):
                prev, cur = cur, next(it)(prev, cur)
            x = next(it)(prev, cur)
        return x


# ---------------------------------------------------------------------------------- Inception-v3
class InceptionV3(nn.Module):
    """Inception-v3 as TASO's ``examples/inceptionv3.py`` and Tensat's ``inceptionv3.model``
    build it: every convolution with a ReLU and no batch norm, modules A (x3), B, C (x4), D,
    E (x2), then a global average pool. ``div`` divides every channel count (1: the paper's)."""

    def __init__(self, div: int = 1):
        super().__init__()
        self.div = div
        self.convs = nn.ModuleDict()
        self._cin = 3
        self._plan: list[tuple[str, tuple]] = []
        c = self._front()
        for pf in (32, 64, 64):
            c = self._module_a(c, pf)
        c = self._module_b(c)
        for c7 in (128, 160, 160, 192):
            c = self._module_c(c, c7)
        c = self._module_d(c)
        for _ in range(2):
            c = self._module_e(c)

    def _ch(self, n: int) -> int:
        return max(1, n // self.div)

    def _conv(self, cin: int, out: int, k: object = 1, stride: int = 1, pad: object = 0) -> str:
        name = f"c{len(self.convs)}"
        self.convs[name] = _ConvRelu(cin, self._ch(out), k, stride, pad=pad)  # type: ignore[arg-type]
        return name

    def _front(self) -> int:
        f = [
            self._conv(3, 32, 3, 2),
            self._conv(self._ch(32), 32, 3),
            self._conv(self._ch(32), 64, 3, pad=1),
            "max",
            self._conv(self._ch(64), 80, 1),
            self._conv(self._ch(80), 192, 3),
            "max",
        ]
        self._plan.append(("seq", tuple(f)))
        return self._ch(192)

    def _module_a(self, c: int, pf: int) -> int:
        b = (
            (self._conv(c, 64),),
            (self._conv(c, 48), self._conv(self._ch(48), 64, 5, pad=2)),
            (
                self._conv(c, 64),
                self._conv(self._ch(64), 96, 3, pad=1),
                self._conv(self._ch(96), 96, 3, pad=1),
            ),
            ("avg", self._conv(c, pf)),
        )
        self._plan.append(("cat", b))
        return self._ch(64) * 2 + self._ch(96) + self._ch(pf)

    def _module_b(self, c: int) -> int:
        b = (
            (self._conv(c, 384, 3, 2),),
            (
                self._conv(c, 64),
                self._conv(self._ch(64), 96, 3, pad=1),
                self._conv(self._ch(96), 96, 3, 2),
            ),
            ("max",),
        )
        self._plan.append(("cat", b))
        return self._ch(384) + self._ch(96) + c

    def _module_c(self, c: int, c7: int) -> int:
        k = self._ch(c7)
        b = (
            (self._conv(c, 192),),
            (
                self._conv(c, c7),
                self._conv(k, c7, (1, 7), pad=(0, 3)),
                self._conv(k, 192, (7, 1), pad=(3, 0)),
            ),
            (
                self._conv(c, c7),
                self._conv(k, c7, (7, 1), pad=(3, 0)),
                self._conv(k, c7, (1, 7), pad=(0, 3)),
                self._conv(k, c7, (7, 1), pad=(3, 0)),
                self._conv(k, 192, (1, 7), pad=(0, 3)),
            ),
            ("avg", self._conv(c, 192)),
        )
        self._plan.append(("cat", b))
        return 4 * self._ch(192)

    def _module_d(self, c: int) -> int:
        b = (
            (self._conv(c, 192), self._conv(self._ch(192), 320, 3, 2)),
            (
                self._conv(c, 192),
                self._conv(self._ch(192), 192, (1, 7), pad=(0, 3)),
                self._conv(self._ch(192), 192, (7, 1), pad=(3, 0)),
                self._conv(self._ch(192), 192, 3, 2),
            ),
            ("max",),
        )
        self._plan.append(("cat", b))
        return self._ch(320) + self._ch(192) + c

    def _module_e(self, c: int) -> int:
        b3, b3d = self._conv(c, 384), self._conv(c, 448)
        b3d2 = self._conv(self._ch(448), 384, 3, pad=1)
        k = self._ch(384)
        spec = {
            "b1": self._conv(c, 320),
            "b3": b3,
            "b3a": self._conv(k, 384, (1, 3), pad=(0, 1)),
            "b3b": self._conv(k, 384, (3, 1), pad=(1, 0)),
            "d": b3d,
            "d2": b3d2,
            "da": self._conv(k, 384, (1, 3), pad=(0, 1)),
            "db": self._conv(k, 384, (3, 1), pad=(1, 0)),
            "pool": self._conv(c, 192),
        }
        self._plan.append(("e", tuple(spec.items())))
        return self._ch(320) + 4 * k + self._ch(192)

    def _run(self, x: torch.Tensor, steps: Sequence[str]) -> torch.Tensor:
        for s in steps:
            if s == "max":
                x = nn.functional.max_pool2d(x, 3, 2)
            elif s == "avg":
                x = nn.functional.avg_pool2d(x, 3, 1, 1)
            else:
                x = self.convs[s](x)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for kind, spec in self._plan:
            if kind == "seq":
                x = self._run(x, spec)
            elif kind == "cat":
                x = torch.cat([self._run(x, branch) for branch in spec], 1)
            else:
                e, c = dict(spec), self.convs
                y3 = c[e["b3"]](x)
                yd = c[e["d2"]](c[e["d"]](x))
                x = torch.cat(
                    [
                        c[e["b1"]](x),
                        c[e["b3a"]](y3),
                        c[e["b3b"]](y3),
                        c[e["da"]](yd),
                        c[e["db"]](yd),
                        c[e["pool"]](nn.functional.avg_pool2d(x, 3, 1, 1)),
                    ],
                    1,
                )
        return nn.functional.avg_pool2d(x, x.shape[-2:])


# ---------------------------------------------------------------------------------- SqueezeNet
class _Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand: int):
        super().__init__()
        self.s = _ConvRelu(cin, squeeze, 1)
        self.e1, self.e3 = _ConvRelu(squeeze, expand, 1), _ConvRelu(squeeze, expand, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.s(x)
        return torch.cat([self.e1(s), self.e3(s)], 1)


class SqueezeNet(nn.Module):
    """SqueezeNet 1.1 as Tensat's ``model/squeezenet.model`` holds it: a 3x3 stride-2 stem,
    eight fire modules with three max pools, a 1x1 classifier convolution with ReLU, a global
    average pool and a flatten (no biases; the dropout is the identity at inference).
    ``div`` divides every channel count."""

    def __init__(self, div: int = 1, classes: int = 1000):
        super().__init__()
        ch = lambda n: max(1, n // div)  # noqa: E731
        self.stem = _ConvRelu(3, ch(64), 3, 2, pad=0)
        fires, cin = [], ch(64)
        for s, e in (
            (16, 64),
            (16, 64),
            (32, 128),
            (32, 128),
            (48, 192),
            (48, 192),
            (64, 256),
            (64, 256),
        ):
            fires.append(_Fire(cin, ch(s), ch(e)))
            cin = 2 * ch(e)
        self.fires = nn.ModuleList(fires)
        self.head = _ConvRelu(cin, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pool = lambda t: nn.functional.max_pool2d(t, 3, 2)  # noqa: E731
        x = pool(self.stem(x))
        for i, f in enumerate(self.fires):
            x = f(x)
            if i in (1, 3):
                x = pool(x)
        x = self.head(x)
        return torch.flatten(nn.functional.avg_pool2d(x, x.shape[-2:]), 1)


# ---------------------------------------------------------------------------------- VGG-19
class Vgg19(nn.Module):
    """VGG-19 as Tensat's ``model/vgg.model`` holds it: sixteen 3x3 convolutions with ReLU and
    five 2x2 max pools, then three matrix products with the transposed weights (ReLU after the
    first two; no biases, dropout the identity). ``div`` divides the channel and hidden
    widths."""

    CFG = (
        64,
        64,
        "M",
        128,
        128,
        "M",
        256,
        256,
        256,
        256,
        "M",
        512,
        512,
        512,
        512,
        "M",
        512,
        512,
        512,
        512,
        "M",
    )

    def __init__(self, div: int = 1, image: int = 224, classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in self.CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers.append(_ConvRelu(cin, max(1, int(v) // div), 3))
                cin = max(1, int(v) // div)
        self.features = nn.Sequential(*layers)
        flat, hidden = cin * (image // 32) ** 2, max(1, 4096 // div)
        self.fc = nn.ParameterList(
            nn.Parameter(torch.randn(o, i) / i**0.5)
            for i, o in ((flat, hidden), (hidden, hidden), (hidden, classes))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(self.features(x), 1)
        x = torch.relu(torch.matmul(x, self.fc[0].t()))
        x = torch.relu(torch.matmul(x, self.fc[1].t()))
        return torch.matmul(x, self.fc[2].t())
