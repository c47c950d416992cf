"""A model's layout for planning: its repeated block, one block's graph, and the rest.

An 80-layer model on 512 devices must stay small to plan, so the planner never holds the whole
model as one graph. `layout_of` finds the model's repeated block list (the ``nn.ModuleList`` or
``nn.ModuleDict`` whose children share one class and one set of parameter shapes and hold the
most parameters, e.g. ``model.layers`` of a Hugging Face Llama), imports ONE block with
`rewrite.from_torch`, and imports the model with the block list emptied (embedding, final norm,
head: "the rest"). A step's cost is the rest's plus ``n_blocks`` times a block's.

Both graphs are exported at small marker sizes (batch `B_MARK`, sequence `S_MARK`) on the
``meta`` device, so nothing is allocated and no causal mask of a long sequence is built, and are
then re-instantiated at the sizes a plan needs (`ModelLayout.graphs_at`): every dimension equal
to a marker (or to a product of markers) in a type or an attribute is replaced, and the graph is
re-built through `GraphBuilder`, whose shape inference checks the result. Constants whose shape
holds a marker (masks, rotary tables) become inputs named ``const:...``: their values do not
matter to costing.

Assumptions (checked, with a clear error): ``example_inputs[0]`` is the global batch, either
token ids ``batch x seq`` (integers) or images ``batch x channels x height x width``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from rewrite.errors import PlanError
from rewrite.ir import Graph, TensorType
from rewrite.plans.rescale import B_MARK, S_MARK, rescale, substitutions

__all__ = ["B_MARK", "S_MARK", "ModelLayout", "ModuleInfo", "layout_of"]

#: Module kinds a tensor-parallel style can be put on.
KINDS = ("linear", "embedding", "norm", "conv1d", "other")


@dataclass(frozen=True)
class ModuleInfo:
    """One leaf module that holds parameters.

    Attributes:
        fqn: Its name: relative to the block for block modules (``self_attn.q_proj``), to the
            model for the rest (``model.embed_tokens``).
        kind: One of `KINDS`: ``linear`` (``nn.Linear``), ``embedding``, ``norm`` (a module whose
            class name says norm), ``conv1d`` (the transposed ``Conv1D`` of GPT-2, which DTensor's
            parallel styles do not support; `rewrite.plans.apply` converts it to ``nn.Linear``),
            ``other``.
        class_name: The module's class name.
        params: Its parameters' names (relative, as in the graphs), with their element counts.
    """

    fqn: str
    kind: str
    class_name: str
    params: tuple[tuple[str, int], ...]

    @property
    def numel(self) -> int:
        """Elements of all its parameters."""
        return sum(n for _, n in self.params)


@dataclass(frozen=True)
class ModelLayout:
    """A model cut into its repeated block and the rest (see the module docstring).

    Attributes:
        name: The model's class name.
        blocks_path: Fully qualified name of the block list (``model.layers``), or ``""`` when
            the model has no repeated block (then the whole model is one block).
        n_blocks: Number of blocks.
        block_graph: One block's forward graph at the marker sizes.
        rest_graph: The model without its blocks, at the marker sizes (None when no blocks).
        block_modules: The block's leaf modules, by relative name.
        rest_modules: The other leaf modules, by model-level name.
        batch: Global batch size (sequences or images).
        seq: Tokens per sample (sequence length, or patches for images).
        kind: ``"tokens"`` or ``"image"``.
        causal: Whether attention is causal (decoder language models): causal attention kernels
            skip the masked half of the work.
        image_size: For image models, the image side; else None.
        calls: Per block module (relative name), how the block calls it: the number of tensor
            positional arguments and the names of tensor keyword arguments (``PrepareModuleInput``
            must name keyword inputs by name).
        sequence_parallel_safe: Whether the model's code outside its blocks works when the
            embedding hands on a sequence shard (`_sequence_parallel_safe`).
        buffers: Number of buffers the model holds (DDP broadcasts them every forward).
        regrouped: The block's fused projections (relative names, e.g. ``attn.c_attn``) whose
            rows `rewrite.plans.apply` regroups per device before splitting them column-wise
            (`rewrite.plans.modules.ATTENTION`).
    """

    name: str
    blocks_path: str
    n_blocks: int
    block_graph: Graph
    rest_graph: Graph | None
    block_modules: Mapping[str, ModuleInfo]
    rest_modules: Mapping[str, ModuleInfo]
    batch: int
    seq: int
    kind: str
    causal: bool
    image_size: int | None = None
    calls: Mapping[str, tuple[int, tuple[str, ...]]] = field(default_factory=dict)
    sequence_parallel_safe: bool = True
    buffers: int = 0
    regrouped: frozenset[str] = frozenset()
    _cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def block_fqn(self) -> str:
        """The block names' pattern in ``parallelize_module`` style, e.g. ``model.layers.*``."""
        return f"{self.blocks_path}.*" if self.blocks_path else ""

    def module_fqn(self, rel: str) -> str:
        """A block module's model-level pattern, e.g. ``model.layers.*.self_attn.q_proj``."""
        return f"{self.block_fqn}.{rel}" if self.block_fqn else rel

    @cached_property
    def block_params(self) -> int:
        """Parameters of one block."""
        return sum(m.numel for m in self.block_modules.values())

    @cached_property
    def rest_params(self) -> int:
        """Parameters outside the blocks."""
        return sum(m.numel for m in self.rest_modules.values())

    @property
    def n_params(self) -> int:
        """Parameters of the whole model."""
        return self.n_blocks * self.block_params + self.rest_params

    @property
    def tokens(self) -> int:
        """Tokens in the global batch."""
        return self.batch * self.seq

    def graphs_at(self, b: int, s: int | None = None) -> tuple[Graph, Graph | None]:
        """The block graph and the rest graph for a microbatch of ``b`` samples of ``s`` tokens.

        Args:
            b: Samples per microbatch.
            s: Sequence length (token models; default the layout's). Image models keep theirs.

        Raises:
            PlanError: If the graph cannot be re-instantiated at these sizes.
        """
        s = self.seq if (s is None or self.kind == "image") else s
        key = (b, s)
        hit = self._cache.get(key)
        if hit is None:
            subs = substitutions(b, s if self.kind == "tokens" else None)
            block = rescale(self.block_graph, subs, f"{self.name}.block")
            rest = None if self.rest_graph is None else rescale(self.rest_graph, subs, self.name)
            hit = self._cache[key] = (block, rest)
        return hit


# ----------------------------------------------------------------------------- discovery
def _kind(module: Any) -> str:
    import torch

    cls = type(module).__name__
    if isinstance(module, torch.nn.Linear):
        return "linear"
    if isinstance(module, torch.nn.Embedding):
        return "embedding"
    if cls == "Conv1D":
        return "conv1d"
    if "norm" in cls.lower():
        return "norm"
    return "other"


def _leaf_modules(root: Any, prefix: str, skip: str | None) -> dict[str, ModuleInfo]:
    out: dict[str, ModuleInfo] = {}
    for name, mod in root.named_modules():
        full = f"{prefix}.{name}" if prefix and name else (prefix or name)
        if skip and (full == skip or full.startswith(skip + ".")):
            continue
        params = tuple((n, p.numel()) for n, p in mod.named_parameters(recurse=False))
        if params:
            out[full] = ModuleInfo(full, _kind(mod), type(mod).__name__, params)
    return out


def _signature(mod: Any) -> tuple[Any, ...]:
    return (type(mod), tuple((n, tuple(p.shape)) for n, p in mod.named_parameters()))


def _find_blocks(model: Any) -> tuple[str, Any] | None:
    """The block list: children of one class and parameter shapes, the most parameters."""
    import torch

    best: tuple[int, str, Any] | None = None
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.ModuleList | torch.nn.ModuleDict | torch.nn.Sequential):
            continue
        kids = list(mod.children())
        if len(kids) < 2 or len({_signature(k) for k in kids}) != 1:
            continue
        size = sum(p.numel() for p in mod.parameters())
        if size and (best is None or size > best[0]):
            best = (size, name, mod)
    return None if best is None else (best[1], best[2])


@contextlib.contextmanager
def _without_children(container: Any, keep: int) -> Iterator[None]:
    """Temporarily keep only the first ``keep`` children of a module container."""
    saved = container._modules
    container._modules = type(saved)(list(saved.items())[:keep])
    try:
        yield
    finally:
        container._modules = saved


def _device_of(model: Any) -> Any:
    p = next(iter(model.parameters()), None)
    return "meta" if p is None else p.device


def _marker_inputs(
    example_inputs: tuple[Any, ...], device: Any = "meta"
) -> tuple[tuple[Any, ...], str, int, int]:
    """Inputs of the marker sizes on ``device``, the input kind, the batch and the tokens."""
    import torch

    if not example_inputs or not isinstance(example_inputs[0], torch.Tensor):
        raise PlanError(
            "example_inputs must be a tuple whose first item is the global batch as a tensor "
            f"(token ids batch x seq, or images batch x C x H x W), but got {example_inputs!r:.80}."
        )
    x = example_inputs[0]
    if not x.is_floating_point() and x.dim() == 2:
        batch, seq = x.shape
        ids = torch.zeros((B_MARK, S_MARK), dtype=x.dtype, device=device)
        return (ids,), "tokens", int(batch), int(seq)
    if x.is_floating_point() and x.dim() == 4:
        img = torch.zeros((B_MARK, *x.shape[1:]), dtype=x.dtype, device=device)
        return (img,), "image", int(x.shape[0]), 0
    raise PlanError(
        "example_inputs[0] must be token ids (an integer batch x seq tensor) or images (a "
        f"floating batch x C x H x W tensor), but got {x.dtype} of shape {tuple(x.shape)}."
    )


def _call_kwargs(model: Any) -> dict[str, Any]:
    """``use_cache=False`` for models whose forward takes it (no cache object to export)."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return {}
    return {"use_cache": False} if "use_cache" in params else {}


def _plain(x: Any) -> Any:
    """Keep tensors, containers of them and plain values; anything else (a cache) becomes None."""
    import torch

    if isinstance(x, torch.Tensor) or x is None or isinstance(x, bool | int | float | str):
        return x
    if isinstance(x, tuple | list):
        return type(x)(_plain(v) for v in x)
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return None


def _capture_block_inputs(
    model: Any, block: Any, args: tuple[Any, ...]
) -> tuple[Any, Any, dict[str, tuple[int, tuple[str, ...]]]]:
    """The positional and keyword arguments ``block`` is called with (as meta tensors), and how
    the block calls each of its submodules."""
    import torch
    import torch.utils._pytree as pytree
    from torch._subclasses.fake_tensor import FakeTensorMode

    seen: dict[str, Any] = {}
    calls: dict[str, tuple[int, tuple[str, ...]]] = {}

    class _Stop(Exception):
        pass

    def hook(mod: Any, a: Any, kw: Any) -> None:
        seen["a"], seen["kw"] = a, kw

    def stop(mod: Any, a: Any, kw: Any, out: Any) -> None:
        raise _Stop

    def record(name: str) -> Any:
        def fn(mod: Any, a: Any, kw: Any) -> None:
            n = sum(isinstance(x, torch.Tensor) for x in a)
            calls[name] = (n, tuple(k for k, v in kw.items() if isinstance(v, torch.Tensor)))

        return fn

    handles = [block.register_forward_pre_hook(hook, with_kwargs=True)]
    handles.append(block.register_forward_hook(stop, with_kwargs=True))
    for name, sub in block.named_modules():
        if name:
            handles.append(sub.register_forward_pre_hook(record(name), with_kwargs=True))
    try:
        with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
            model(*args, **_call_kwargs(model))
    except _Stop:
        pass
    finally:
        for h in handles:
            h.remove()
    if "a" not in seen:
        raise PlanError(f"The block {type(block).__name__} was never called by the model.")

    device = _device_of(block)

    def to_meta(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return torch.zeros(x.shape, dtype=x.dtype, device=device)
        return x

    a, kw = pytree.tree_map(to_meta, (_plain(seen["a"]), _plain(seen["kw"])))
    return a, kw, calls


def _sequence_parallel_safe(model: Any, block: Any, args: tuple[Any, ...]) -> bool:
    """Whether the model's code between its token embedding and its blocks (positions, masks)
    keeps full-sequence sizes when the embedding hands on a sequence shard, as sequence
    parallelism makes it do: run the model twice on fake tensors, once with the embedding's
    output halved along the sequence, and compare the shapes the first block receives besides
    its hidden state (Hugging Face models derive positions from the embedding's output length;
    torchtitan's do not)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    embeds = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    if not embeds:
        return False
    emb = max(embeds, key=lambda m: m.num_embeddings)

    class _Stop(Exception):
        pass

    def shapes(cut: bool) -> list[Any] | None:
        got: list[Any] = []

        def pre(mod: Any, a: Any, kw: Any) -> None:
            leaves = [*a[1:], *kw.values()]
            flat = [x for v in leaves for x in (v if isinstance(v, tuple | list) else (v,))]
            got.extend(tuple(x.shape) for x in flat if isinstance(x, torch.Tensor))
            raise _Stop

        def halve(mod: Any, a: Any, out: Any) -> Any:
            return out[:, : max(1, out.shape[1] // 2)] if out.dim() >= 2 else out

        hs = [block.register_forward_pre_hook(pre, with_kwargs=True)]
        if cut:
            hs.append(emb.register_forward_hook(halve))
        try:
            with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
                model(*args, **_call_kwargs(model))
        except _Stop:
            return got
        except Exception:  # the model cannot run on a sequence shard at all
            return None
        finally:
            for h in hs:
                h.remove()
        return got

    quiet = logging.getLogger("torch._subclasses.fake_tensor")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        full, cut = shapes(False), shapes(True)
    finally:
        quiet.setLevel(level)
    return full is not None and cut is not None and full == cut


def _is_causal(model: Any) -> bool:
    cfg = getattr(model, "config", None)
    if cfg is not None and getattr(cfg, "is_decoder", False):
        return True
    return bool(re.search(r"CausalLM|LMHead", type(model).__name__))


@contextlib.contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    """The model in eval mode (dropout off: the structure planned is the same), restored after."""
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        yield
    finally:
        for m, mode in modes.items():
            m.training = mode


def layout_of(model: Any, example_inputs: Any, name: str | None = None) -> ModelLayout:
    """Cut ``model`` into its repeated block and the rest, and import both (in eval mode:
    dropout does not change what is planned).

    Args:
        model: A ``torch.nn.Module`` (parameters may live on ``meta``).
        example_inputs: The global batch: a tensor or a tuple whose first item is token ids
            (``batch x seq``) or images (``batch x C x H x W``).
        name: A label (default the model's class name).

    Returns:
        The `ModelLayout`.

    Raises:
        PlanError: On inputs of another form, or a model the importer cannot trace.
    """
    with _eval_mode(model):
        return _layout_of(model, example_inputs, name)


def _layout_of(model: Any, example_inputs: Any, name: str | None) -> ModelLayout:
    from rewrite.torch_import import from_torch

    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    marker_args, kind, batch, seq = _marker_inputs(args, _device_of(model))
    found = _find_blocks(model)
    image_size = int(args[0].shape[-1]) if kind == "image" else None
    if found is None:
        graph = from_torch(
            model, marker_args, _call_kwargs(model), name=name or type(model).__name__
        )
        mods = _leaf_modules(model, "", None)
        seq = seq or _image_tokens(graph)
        return ModelLayout(
            name or type(model).__name__, "", 1, graph, None, mods, {}, batch, seq, kind,
            _is_causal(model), image_size,
        )  # fmt: skip
    path, blocks = found
    first = next(iter(blocks.children()))
    block_args, block_kwargs, calls = _capture_block_inputs(model, first, marker_args)
    block_graph = from_torch(first, block_args, block_kwargs, name="block")
    with _without_children(blocks, 0):
        rest_graph = from_torch(model, marker_args, _call_kwargs(model), name="rest")
    if kind == "image":
        seq = _block_tokens(block_graph)
    return ModelLayout(
        name=name or type(model).__name__,
        blocks_path=path,
        n_blocks=len(blocks),
        block_graph=block_graph,
        rest_graph=rest_graph,
        block_modules=_leaf_modules(first, "", None),
        rest_modules=_leaf_modules(model, "", path),
        batch=batch,
        seq=seq,
        kind=kind,
        causal=_is_causal(model),
        image_size=image_size,
        calls=calls,
        sequence_parallel_safe=_sequence_parallel_safe(model, first, marker_args),
        buffers=sum(1 for _ in model.buffers()),
        regrouped=_regrouped(first),
    )


def _regrouped(block: Any) -> frozenset[str]:
    """The fused projections of ``block`` that apply regroups (see `ModelLayout.regrouped`)."""
    from rewrite.plans.modules import ATTENTION

    out: set[str] = set()
    for name, mod in block.named_modules():
        spec = ATTENTION.get(type(mod).__name__)
        if spec is not None and spec.fused is not None:
            out.update(f"{name}.{p}" if name else p for p in spec.projections)
    return frozenset(out)


def _block_tokens(graph: Graph) -> int:
    """Tokens per sample of an image model: dim 1 of the block's first input."""
    t: TensorType = graph.input_types[0]
    if t.rank < 2 or t.shape[0] != B_MARK:
        raise PlanError(f"Cannot read tokens per image from the block's first input {t}.")
    return t.shape[1]


def _image_tokens(graph: Graph) -> int:
    return max(1, math.prod(graph.input_types[0].shape[2:]))
