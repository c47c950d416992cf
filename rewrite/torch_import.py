"""Import PyTorch modules into the IR through `torch.export`.

`from_torch(module, example_inputs)` exports the module (``strict=False``), lowers it to core
ATen with a decomposition table that keeps ``linear``, ``scaled_dot_product_attention``,
``layer_norm``, ``rms_norm``, ``silu`` and ``gelu`` whole, then converts each ATen node with the
table in `rewrite.torch_converters`. (When every op of the exported program already has a
converter, the decomposition pass, which would keep those same ops whole, is skipped: it costs as
much as the export itself.)

* user inputs become ``input`` nodes, parameters and persistent buffers (e.g. batch-norm
  statistics) become ``param`` nodes named by their fully qualified name (so
  ``module.state_dict()`` supplies their values), and non-persistent buffers and lifted tensor
  constants with known values become constants;
* every node whose tensor inputs are all constants (causal-mask building, position ids, rotary
  tables) is evaluated once with torch on the CPU and folded into a ``const``;
* a ``torch.no_grad()``/``enable_grad()`` region (``wrap_with_set_grad_enabled``) is inlined, and
  a ``torch.autocast`` region (``wrap_with_autocast``) is imported from the decomposed program,
  whose casts are explicit;
* an ATen op without a converter becomes an ``opaque`` node with the shapes torch inferred, and
  the import emits one `OpaqueOpWarning` listing such ops.

Shapes are static: the example inputs fix them.

Known gaps (kept as opaque nodes when their inputs are not constant): ``cumsum``, ``flip``,
``gather``, advanced indexing (``index.Tensor``), scatter, sort/top-k, transposed or 1-d/3-d
convolutions, ``div`` with a rounding mode, pooling with ``ceil_mode`` or dilation, adaptive
pooling to sizes other than 1x1, complex and float8 dtypes. None of them occurs in the
`rewrite.zoo` models (all ten import with no opaque node); they appear there only in
mask/position building, which is folded.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from rewrite.builder import GraphBuilder
from rewrite.errors import OpaqueOpWarning, RewriteError, TorchImportError
from rewrite.ir import Graph, TensorType, Value
from rewrite.lowering.source import record_source
from rewrite.torch_converters import CONVERTERS, IGNORED, Unsupported, torch_dtype_name

__all__ = ["decomposition_table", "from_torch"]

logger = logging.getLogger(__name__)


def decomposition_table() -> dict[Any, Any]:
    """Core-ATen decompositions minus the ops the IR keeps whole."""
    import torch

    aten = torch.ops.aten
    table = torch.export.default_decompositions()
    keep = [
        aten.linear.default,
        aten.scaled_dot_product_attention.default,
        aten.layer_norm.default,
        aten.silu.default,
        aten.gelu.default,
        aten.rms_norm.default,
    ]
    for op in keep:
        table.pop(op, None)
    return table


#: What a torch.export failure means, by a phrase of its message: (construct, fix).
_EXPORT_FAILURES = (
    (
        "could not guard on data-dependent",
        "Python control flow on a tensor's value (an if, while or assert on a tensor, or "
        "bool() of one)",
        "compute both branches and pick with torch.where(cond, a, b), use torch.cond, or decide "
        "outside forward and pass the choice to the module's constructor",
    ),
    (
        "data-dependent",
        "a shape or Python number computed from a tensor's values (x[x > 0], nonzero, "
        "masked_select, unique, .item() used as a size)",
        "keep every shape a function of the input shapes: torch.where(mask, x, 0) in place of "
        "x[mask], a fixed-size topk in place of nonzero",
    ),
    (
        "cache",
        "a cache object among the model's outputs",
        "pass use_cache=False (as an example kwarg) so no cache object is returned",
    ),
    (
        "pytree",
        "an input or output type torch.export cannot flatten",
        "return tensors (or tuples/dicts of tensors), and pass use_cache=False to models that "
        "return a cache object",
    ),
)


def _explain(e: BaseException, strict: bool) -> str:
    """``"<construct>[ at <line>]. Fix: <fix>"`` for a torch.export failure."""
    text = str(e).lower()
    construct, fix = (
        "a construct torch.export cannot capture",
        (
            "check that module(*example_inputs) runs eagerly, then rewrite the part of forward torch "
            "names with tensor ops"
            + (", or pass strict=False (tracing without TorchDynamo)" if strict else "")
        ),
    )
    for phrase, what, how in _EXPORT_FAILURES:
        if phrase in text:
            construct, fix = what, how
            break
    where = _user_line(getattr(e, "partial_fx_graph", None) or str(e))
    return f"{construct}{f' at {where}' if where else ''}. Fix: {fix}"


def _user_line(text: str) -> str:
    """The last user-code location torch names in ``text`` (``file:line: code``), or ``""``."""
    import re

    found = re.findall(r"# File: (\S+?:\d+) in \w+, code: (.*)", text)
    return f"{found[-1][0]}: {found[-1][1].strip()}" if found else ""


@contextlib.contextmanager
def _torch_internal_deprecations_ignored() -> Iterator[None]:
    """Hide the deprecation torch raises from its own pytree code (``LeafSpec``) while exporting
    and decomposing: nothing a user of the import can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        yield


@contextlib.contextmanager
def _quiet_export() -> Iterator[io.StringIO]:
    """Keep torch.export's console noise (the partial FX graph it prints to stderr on failure,
    its symbolic-shape warnings) off the console; what it wrote is yielded."""
    sym = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    level, buf = sym.level, io.StringIO()
    sym.setLevel(logging.ERROR)
    try:
        with _torch_internal_deprecations_ignored(), contextlib.redirect_stderr(buf):
            yield buf
    finally:
        sym.setLevel(level)


def _export(
    module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], name: str, strict: bool
) -> Any:
    import torch

    if not isinstance(module, torch.nn.Module):
        raise TorchImportError(
            f"from_torch needs a torch.nn.Module, but got {type(module).__name__} {module!r}. "
            "Fix: wrap it in a Module whose forward calls it (class M(torch.nn.Module): "
            "def forward(self, x): return f(x))."
        )
    try:
        with _quiet_export() as out:
            ep = torch.export.export(module, args, kwargs, strict=strict)
    except Exception as e:  # torch raises many types; all mean "cannot capture"
        logger.debug("torch.export of %s failed; it wrote:\n%s", name, out.getvalue())
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TorchImportError(
            f"torch.export could not capture model {name!r}: {_explain(e, strict)}. "
            f"(torch: {type(e).__name__}: {msg[:300]})"
        ) from e
    if out.getvalue():
        sys.stderr.write(out.getvalue())
    return ep


def _decompose(ep: Any, name: str) -> Any:
    try:
        with _torch_internal_deprecations_ignored():
            return ep.run_decompositions(decomposition_table())
    except Exception as e:
        raise TorchImportError(
            f"decomposing the export of {name!r} failed: {type(e).__name__}: {e}"
        ) from e


def from_torch(
    module: Any,
    example_inputs: Sequence[Any] | Any,
    example_kwargs: Mapping[str, Any] | None = None,
    *,
    name: str | None = None,
    constants: Mapping[str, Any] | None = None,
    strict: bool = False,
) -> Graph:
    """Import ``module`` as a `Graph`.

    Args:
        module: A ``torch.nn.Module`` (put it in eval mode first; it may live on ``meta``).
        example_inputs: Positional example inputs (a tensor or a sequence); they fix the shapes.
        example_kwargs: Keyword example inputs, e.g. ``{"use_cache": False}``.
        name: Graph name; defaults to the module's class name.
        constants: Values for buffers by fully qualified name, used when the module's own
            buffers are on ``meta`` (see `rewrite.zoo`).
        strict: Passed to ``torch.export.export``.

    Returns:
        The imported graph.

    Raises:
        TorchImportError: If ``module`` is not a ``torch.nn.Module``, if ``torch.export`` cannot
            capture it, or if it computes shapes or Python numbers from tensor values; the
            message names the construct, its line in the user's code when torch records it,
            and the fix.
    """
    import torch

    name = name or type(module).__name__
    args = tuple(example_inputs) if isinstance(example_inputs, list | tuple) else (example_inputs,)
    ep = _export(module, args, dict(example_kwargs or {}), name, strict)
    with torch.no_grad():
        # Fast path: when every op of the exported program has a converter, decomposing first
        # would give the same IR (the kept ops are whole either way) at twice the cost.
        try:
            conv = _Converter(ep, name, dict(constants or {}))
            graph = conv.run()
            direct = not conv.opaque
        except _AutocastRegion:
            direct = False  # decomposition makes an autocast region's casts explicit
        except TorchImportError:
            raise
        except Exception:
            direct = False
        if not direct:
            conv = _Converter(_decompose(ep, name), name, dict(constants or {}))
            graph = conv.run()
    if conv.opaque:
        listing = ", ".join(f"{k} x{v}" for k, v in sorted(conv.opaque.items()))
        warnings.warn(
            f"model {name!r}: {sum(conv.opaque.values())} nodes of ops unknown to rewrite were kept as "
            f"opaque nodes (never rewritten, costed conservatively): {listing}.",
            OpaqueOpWarning,
            stacklevel=2,
        )
    logger.debug("imported %s: %d nodes, %d folded", name, len(graph), conv.folded)
    record_source(graph, module, args, dict(example_kwargs or {}), _out_spec(ep))
    return graph


def _out_spec(ep: Any) -> Any:
    """The pytree spec of the exported module's outputs (None where torch does not say)."""
    try:
        return ep.call_spec.out_spec
    except Exception:  # a private corner of torch.export: structure is a convenience only
        return None


class _Converter:
    """Walks an exported program once, building the IR."""

    def __init__(self, ep: Any, name: str, constants: dict[str, Any]) -> None:
        self.ep, self.name, self.constants = ep, name, constants
        self.b = GraphBuilder(name)
        self.env: dict[str, Any] = {}
        self.folded_values: dict[str, Any] = {}  # fx name -> torch tensor (CPU)
        self.materialized: dict[str, Value] = {}
        self.opaque: Counter[str] = Counter()
        self.folded = 0

    # ------------------------------------------------------------------ values
    def is_const(self, x: Any) -> bool:
        import torch.fx

        return isinstance(x, torch.fx.Node) and x.name in self.folded_values

    def tensor(self, x: Any) -> Value:
        """The IR value of an fx argument (a folded constant is materialized once)."""
        import torch.fx

        if isinstance(x, torch.fx.Node):
            if x.name in self.folded_values:
                if x.name not in self.materialized:
                    t = self.folded_values[x.name]
                    arr = t.float().numpy() if t.dtype == _bf16() else t.numpy()
                    self.materialized[x.name] = self.b.const(
                        np.asarray(arr), torch_dtype_name(t.dtype)
                    )
                return self.materialized[x.name]
            v = self.env.get(x.name)
            if isinstance(v, Value):
                return v
            raise Unsupported(f"input {x.name} is not a tensor in the IR ({type(v).__name__})")
        raise Unsupported(f"expected a tensor argument, got {type(x).__name__}")

    def val_type(self, node: Any, index: int | None = None) -> TensorType:
        val = node.meta.get("val")
        if index is not None:
            val = val[index]
        return TensorType(tuple(int(d) for d in val.shape), torch_dtype_name(val.dtype))

    # ------------------------------------------------------------------ walk
    def run(self) -> Graph:
        specs = {
            s.arg.name: s for s in self.ep.graph_signature.input_specs if hasattr(s.arg, "name")
        }
        outputs: list[Value] = []
        for node in _inline_grad_regions(self.ep.graph_module).nodes:
            if node.op == "placeholder":
                self.placeholder(node, specs.get(node.name))
            elif node.op == "call_function":
                self.call(node)
            elif node.op == "output":
                outputs = self.collect_outputs(node)
        return self.b.build(outputs, self.name)

    def placeholder(self, node: Any, spec: Any) -> None:
        from torch.export.graph_signature import InputKind

        val = node.meta.get("val")
        if spec is None or not hasattr(val, "shape"):
            self.env[node.name] = val
            return
        t = self.val_type(node)
        if spec.kind == InputKind.USER_INPUT:
            self.env[node.name] = self.b.input(node.name, t.shape, t.dtype)
            return
        target = spec.target
        value = self.constants.get(target)
        if value is None:
            value = self.ep.state_dict.get(target, self.ep.constants.get(target))
        known = (
            value is not None
            and getattr(value, "device", None) is not None
            and value.device.type != "meta"
        )
        persistent = spec.kind == InputKind.PARAMETER or (
            spec.kind == InputKind.BUFFER and spec.persistent
        )
        if persistent and target not in self.constants:
            self.env[node.name] = self.b.param(target, t.shape, t.dtype)
        elif known:
            self.folded_values[node.name] = value.detach().cpu()
        else:
            self.env[node.name] = self.b.param(target, t.shape, t.dtype)

    def call(self, node: Any) -> None:
        key = str(node.target)
        if node.target is _getitem():
            src, idx = node.args
            if src.name in self.folded_values:
                self.folded_values[node.name] = self.folded_values[src.name][idx]
            else:
                self.env[node.name] = self.env[src.name][idx]
            return
        if key in IGNORED:
            return
        if key == "wrap_with_autocast":
            raise _AutocastRegion(
                f"model {self.name!r}: a torch.autocast region (op {key}){_at(node)} is left after "
                "decomposition, and the IR cannot honour its dtype casts. Fix: run the model "
                "without torch.autocast (cast it with module.to(dtype)), or make the casts "
                "explicit with .to(dtype) in forward."
            )
        if self.try_fold(node):
            return
        self.check_static(node, key)
        fn = CONVERTERS.get(key)
        try:
            if fn is None:
                raise Unsupported("no converter")
            out = fn(self, node, *node.args, **node.kwargs)
            self.check_types(node, out)
            self.env[node.name] = out
        except (Unsupported, RewriteError) as e:
            self.env[node.name] = self.make_opaque(node, key, str(e))
        except Exception as e:  # a converter bug must not abort the import
            logger.warning(
                "converter for %s failed (%s: %s); keeping an opaque node", key, type(e).__name__, e
            )
            self.env[node.name] = self.make_opaque(node, key, f"{type(e).__name__}: {e}")

    def check_static(self, node: Any, key: str) -> None:
        """Raise a `TorchImportError` if ``node`` (not foldable) reads a tensor's value as a
        Python number or has a shape computed from tensor values: the IR's shapes are static."""
        import torch.fx
        from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

        reads = [node] + [a for a in _flat(node.args, node.kwargs) if isinstance(a, torch.fx.Node)]
        scalar = next((a for a in reads if str(a.target) in _SCALAR_READS), None)
        if scalar is not None:
            raise TorchImportError(
                f"model {self.name!r}: {key} reads a tensor's value as a Python number (.item(), "
                f"float(t), int(t) or a size taken from a tensor){_at(scalar)}; the IR keeps "
                "values in tensors. Fix: keep it a tensor (x * t.sum() in place of "
                "x * t.sum().item()), or compute the number outside forward."
            )
        if free_unbacked_symbols(node.meta.get("val")):
            raise TorchImportError(
                f"model {self.name!r}: {key}{_at(node)} gives a tensor whose shape depends on "
                "tensor values (x[x > 0], nonzero, masked_select, unique); the IR's shapes are "
                "static. Fix: keep every shape a function of the input shapes: "
                "torch.where(mask, x, 0) in place of x[mask], a fixed-size topk in place of "
                "nonzero."
            )

    def check_types(self, node: Any, out: Any) -> None:
        vals = out if isinstance(out, tuple) else (out,)
        metas = (
            node.meta["val"]
            if isinstance(node.meta.get("val"), list | tuple)
            else (node.meta.get("val"),)
        )
        for v, m in zip(vals, metas):
            if isinstance(v, Value) and m is not None and hasattr(m, "shape"):
                want = TensorType(tuple(int(d) for d in m.shape), torch_dtype_name(m.dtype))
                got = self.b.type_of(v)
                if got != want:
                    raise Unsupported(f"converter produced {got}, torch says {want}")

    def try_fold(self, node: Any) -> bool:
        import torch
        import torch.fx

        if torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()):
            return False
        schema = getattr(node.target, "_schema", None)
        if (
            schema is not None and schema.is_mutable
        ):  # in-place ops: leave them to functionalization
            return False
        tensors = [a for a in _flat(node.args, node.kwargs) if isinstance(a, torch.fx.Node)]
        if not all(a.name in self.folded_values for a in tensors):
            return False

        def sub(a: Any) -> Any:
            # folding runs on the CPU: a device argument, keyword or positional (aten.to.device),
            # names the module's device, which is ``meta`` for a full-size zoo model
            if isinstance(a, torch.fx.Node):
                return self.folded_values[a.name]
            return torch.device("cpu") if isinstance(a, torch.device) else a

        args = torch.fx.node.map_aggregate(node.args, sub)
        kwargs = {k: torch.fx.node.map_aggregate(v, sub) for k, v in node.kwargs.items()}
        kwargs.pop("pin_memory", None)
        try:
            out = node.target(*args, **kwargs)
        except Exception:  # not foldable on the CPU: convert it normally
            return False
        if not isinstance(out, torch.Tensor | tuple | list):
            return False
        if any(isinstance(t, torch.Tensor) and t.is_meta for t in _flat((out,), {})):
            return False  # a value nobody knows is a graph input, not a constant
        self.folded_values[node.name] = out
        self.folded += 1
        return True

    def make_opaque(self, node: Any, key: str, reason: str) -> Any:
        import torch.fx

        val = node.meta.get("val")
        multi = isinstance(val, list | tuple)
        vals = [v for v in (val if multi else [val])]
        if not all(hasattr(v, "shape") for v in vals):
            raise TorchImportError(
                f"model {self.name!r}: op {key} returns a non-tensor ({type(val).__name__}) and has no "
                "converter; add one to rewrite.torch_converters."
            )
        try:
            ins = [
                self.tensor(a)
                for a in _flat(node.args, node.kwargs)
                if isinstance(a, torch.fx.Node)
            ]
        except Unsupported as e:
            raise TorchImportError(
                f"model {self.name!r}: op {key} reads a value the IR cannot hold ({e}); add a "
                "converter to rewrite.torch_converters."
            ) from None
        try:
            out_types = tuple(
                (tuple(int(d) for d in v.shape), torch_dtype_name(v.dtype)) for v in vals
            )
        except Unsupported as e:
            dtypes = sorted({str(v.dtype).removeprefix("torch.") for v in vals})
            raise TorchImportError(
                f"model {self.name!r}: op {key}{_at(node)} gives a tensor of dtype "
                f"{', '.join(dtypes)} ({e}); the IR holds real and integer tensors only. Fix: keep "
                "complex (or float8) tensors out of forward: compute that part outside the "
                "imported module, or work on real parts (torch.view_as_real, .abs() of a "
                "real-valued formulation)."
            ) from None
        self.opaque[key] += 1
        n = self.b.add_node("opaque", ins, target=key, out_types=out_types, reason=reason[:200])
        return n.outs if multi else n.out(0)

    def collect_outputs(self, node: Any) -> list[Value]:
        import torch.fx
        from torch.export.graph_signature import OutputKind

        specs = self.ep.graph_signature.output_specs
        flat = list(node.args[0])
        outs = []
        for spec, arg in zip(specs, flat):
            if spec.kind != OutputKind.USER_OUTPUT or not isinstance(arg, torch.fx.Node):
                continue
            if arg.name in self.folded_values or isinstance(self.env.get(arg.name), Value):
                outs.append(self.tensor(arg))
        if not outs:
            raise TorchImportError(f"model {self.name!r} has no tensor outputs to import.")
        return outs


class _AutocastRegion(TorchImportError):
    """A ``wrap_with_autocast`` region: the decomposed program has its casts explicit."""


#: Higher-order ops that run a subgraph under a grad mode (``torch.no_grad()`` blocks, e.g. the
#: rotary embedding of transformers < 5.24), as ``op(enabled, submodule, *operands)``.
_GRAD_REGIONS = frozenset({"wrap_with_set_grad_enabled"})


def _inline_grad_regions(gm: Any) -> Any:
    """``gm``'s graph with each grad-mode region replaced by its subgraph, recursively (grad mode
    does not matter for inference); the graph itself when it has none. The nodes outside the
    regions keep their names, and the region's ``getitem`` users become its outputs."""
    import torch.fx

    if not any(str(n.target) in _GRAD_REGIONS for n in gm.graph.nodes):
        return gm.graph
    graph = torch.fx.Graph()
    env: dict[Any, Any] = {}
    for node in gm.graph.nodes:
        if str(node.target) in _GRAD_REGIONS:
            _, sub, *operands = node.args
            body = _inline_grad_regions(getattr(gm, sub.target))
            ins = [n for n in body.nodes if n.op == "placeholder"]
            bound = dict(zip(ins, torch.fx.node.map_arg(operands, env.__getitem__)))
            env[node] = tuple(graph.graph_copy(body, bound))  # type: ignore[arg-type]
        elif node.target is _getitem() and isinstance(env.get(node.args[0]), tuple):
            env[node] = env[node.args[0]][node.args[1]]
        else:
            env[node] = graph.node_copy(node, env.__getitem__)
    return graph


#: Ops that read a tensor's value into a Python number.
_SCALAR_READS = frozenset({"aten._local_scalar_dense.default", "aten.item.default"})


def _at(node: Any) -> str:
    """`` at file:line: code`` of the user code that made ``node``, or ``""``."""
    trace = (node.meta.get("stack_trace") or "").strip().splitlines()
    for i in range(len(trace) - 1, -1, -1):
        line = trace[i].strip()
        if line.startswith("File "):
            parts = line.split('"')
            code = trace[i + 1].strip() if i + 1 < len(trace) else ""
            num = line.rsplit("line ", 1)[-1].split(",")[0]
            return f" at {parts[1] if len(parts) > 1 else line}:{num}: {code}"
    return ""


def _flat(args: Any, kwargs: Mapping[str, Any]) -> list[Any]:
    out: list[Any] = []

    def rec(x: Any) -> None:
        if isinstance(x, list | tuple):
            for y in x:
                rec(y)
        elif isinstance(x, dict):
            for y in x.values():
                rec(y)
        else:
            out.append(x)

    rec(args)
    rec(kwargs)
    return out


def _getitem() -> Any:
    import operator

    return operator.getitem


def _bf16() -> Any:
    import torch

    return torch.bfloat16
